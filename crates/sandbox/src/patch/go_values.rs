//! Go formatting helpers for patch errors: error texts embed values the way Go's fmt prints
//! `interface{}` values (`%v`, `%s`, type names), and encoding/json's messages for bodies that are
//! not JSON.
//!
//! Formatting and body parsing only: must not know any patch semantics.

use serde_json::Value;

use crate::gofmt::go_float;

/// `%v` of a decoded JSON value.
pub(super) fn go_v(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.to_string(),
            None => go_float(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => s.clone(),
        Value::Array(a) => format!("[{}]", a.iter().map(go_v).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => format!(
            "map[{}]",
            m.iter()
                .map(|(k, v)| format!("{k}:{}", go_v(v)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    }
}

/// `%s` of a decoded JSON value (non-strings get Go's `%!s(type=value)`).
pub(super) fn go_s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "%!s(<nil>)".to_string(),
        Value::Bool(b) => format!("%!s(bool={b})"),
        Value::Number(n) => match n.as_i64() {
            Some(i) => format!("%!s(int64={i})"),
            None => format!("%!s(float64={})", go_float(n.as_f64().unwrap_or(0.0))),
        },
        other => go_v(other),
    }
}

/// Go's `reflect.TypeOf(v)` printed with `%s`, for a value decoded into `interface{}`.
pub(super) fn go_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "%!s(<nil>)",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.as_i64().is_some() => "int64",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// The kind of a decoded value, as `reflect.TypeOf` distinguishes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GoType {
    Nil,
    Bool,
    Int,
    Float,
    String,
    Slice,
    Map,
}

pub(super) fn go_type(v: &Value) -> GoType {
    match v {
        Value::Null => GoType::Nil,
        Value::Bool(_) => GoType::Bool,
        // The apiserver decodes integers that fit an int64 as int64, everything else as float64.
        Value::Number(n) if n.as_i64().is_some() => GoType::Int,
        Value::Number(_) => GoType::Float,
        Value::String(_) => GoType::String,
        Value::Array(_) => GoType::Slice,
        Value::Object(_) => GoType::Map,
    }
}

/// Go's encoding/json message for a body that is not valid JSON.
fn go_syntax_error(body: &[u8], err: &serde_json::Error) -> String {
    if err.is_eof() || body.iter().all(u8::is_ascii_whitespace) {
        return "unexpected end of JSON input".to_string();
    }
    let line = err.line();
    let column = err.column();
    let text = String::from_utf8_lossy(body);
    let ch = text
        .lines()
        .nth(line.saturating_sub(1))
        .and_then(|l| l.chars().nth(column.saturating_sub(1)))
        .unwrap_or('?');
    format!(
        "invalid character {} looking for beginning of value",
        go_char_quote(ch)
    )
}

fn go_char_quote(c: char) -> String {
    match c {
        '\'' => "'\\''".to_string(),
        '"' => "'\"'".to_string(),
        c => format!("'{c}'"),
    }
}

/// Parses a request body as JSON, with encoding/json's message on failure.
pub(super) fn parse_json(body: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(body).map_err(|e| {
        if e.is_syntax() || e.is_eof() {
            go_syntax_error(body, &e)
        } else {
            e.to_string()
        }
    })
}

pub(super) fn json_kind_word(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}
