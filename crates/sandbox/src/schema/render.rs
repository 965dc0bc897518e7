//! Go value rendering, as `field.Error` and kube-openapi print values: `strconv.Quote`, `%v`,
//! `%#v` and `json.Marshal` of decoded JSON.
//!
//! Formatting only: must not depend on anything else in the schema engine.

use serde_json::{Map, Value};

use crate::gofmt::go_float;

pub(super) fn is_json_integer(f: f64) -> bool {
    f.is_finite() && f.fract() == 0.0 && f.abs() <= 9_007_199_254_740_992.0
}

/// `strconv.Quote`: how Go quotes strings in Kubernetes messages.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => {
                if (c as u32) < 0x10000 {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn number_v(n: &serde_json::Number) -> String {
    match n.as_i64() {
        Some(i) => i.to_string(),
        None => go_float(n.as_f64().unwrap_or(f64::NAN)),
    }
}

/// An object's entries in key order, as Go prints a map, each rendered by `entry`: what the
/// three renderings below share.
fn sorted_entries(m: &Map<String, Value>, entry: impl Fn(&str, &Value) -> String) -> Vec<String> {
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    keys.iter().map(|k| entry(k, &m[k.as_str()])).collect()
}

/// Go's `%v` of a decoded JSON value (used in kube-openapi's enum message).
pub(super) fn go_v(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number_v(n),
        Value::String(s) => s.clone(),
        Value::Array(a) => format!("[{}]", a.iter().map(go_v).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => {
            let parts = sorted_entries(m, |k, v| format!("{k}:{}", go_v(v)));
            format!("map[{}]", parts.join(" "))
        }
    }
}

/// Go's `%#v` of a decoded JSON value (nested in field.Error's fallback rendering).
fn go_sharp_v(v: &Value) -> String {
    match v {
        Value::Null => "interface {}(nil)".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number_v(n),
        Value::String(s) => go_quote(s),
        Value::Array(a) => format!(
            "[]interface {{}}{{{}}}",
            a.iter().map(go_sharp_v).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) => {
            let parts = sorted_entries(m, |k, v| format!("{}:{}", go_quote(k), go_sharp_v(v)));
            format!("map[string]interface {{}}{{{}}}", parts.join(", "))
        }
    }
}

/// `json.Marshal` of a decoded JSON value (sorted keys, floats without a trailing `.0`).
pub(super) fn go_json(v: &Value) -> String {
    match v {
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.to_string(),
            None => {
                let f = n.as_f64().unwrap_or(0.0);
                if is_json_integer(f) {
                    format!("{f:.0}")
                } else {
                    f.to_string()
                }
            }
        },
        Value::Array(a) => format!("[{}]", a.iter().map(go_json).collect::<Vec<_>>().join(",")),
        Value::Object(m) => {
            let parts = sorted_entries(m, |k, v| {
                format!("{}:{}", Value::String(k.to_string()), go_json(v))
            });
            format!("{{{}}}", parts.join(","))
        }
        other => other.to_string(),
    }
}

/// How field.Error renders a bad value.
pub(super) fn render_bad_value(v: &Value) -> String {
    match v {
        Value::Null => go_quote("null"),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number_v(n),
        Value::String(s) => go_quote(s),
        other => go_sharp_v(other),
    }
}
