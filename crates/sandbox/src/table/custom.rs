//! Cells of custom resources: each CRD printer column evaluated by JSONPath and rendered as the
//! CRD table convertor does (`cellForJSONValue`, jsonpath `PrintResults`).
//!
//! Must not parse JSONPath itself: that is `jsonpath.rs`.

use jiff::Timestamp;
use serde_json::Value;

use crate::gofmt::go_float;
use crate::registry::PrinterColumn;

use super::cell::{name, since_ts};
use super::jsonpath::{find_results, parse_jsonpath};

pub(super) fn custom_cells(columns: &[PrinterColumn], obj: &Value, now: Timestamp) -> Vec<Value> {
    let mut cells = vec![name(obj)];
    for column in columns.iter().skip(1) {
        let first = parse_jsonpath(&column.json_path)
            .and_then(|segments| find_results(obj, &segments).first().map(|v| (*v).clone()));
        let cell = match first {
            None => Value::Null,
            Some(value) if column.type_ == "string" => {
                print_result(&value).map_or(Value::Null, Value::from)
            }
            Some(value) => typed_cell(&column.type_, &value, now),
        };
        cells.push(cell);
    }
    cells
}

/// jsonpath `PrintResults` of one value: strings raw, maps and lists as compact JSON (Go's
/// encoder escapes `<`, `>`, `&`), scalars as Go's `fmt.Print` would.
fn print_result(value: &Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            (_, _, Some(f)) => go_float(f),
            _ => n.to_string(),
        }),
        Value::Array(_) | Value::Object(_) => Some(
            serde_json::to_string(value)
                .unwrap_or_default()
                .replace('<', "\\u003c")
                .replace('>', "\\u003e")
                .replace('&', "\\u0026"),
        ),
    }
}

/// `cellForJSONValue` of the CRD table convertor.
fn typed_cell(type_: &str, value: &Value, now: Timestamp) -> Value {
    match type_ {
        "integer" => match value {
            Value::Number(n) => n
                .as_i64()
                // Go converts float64 to int64 by truncation.
                .or_else(|| n.as_f64().map(|f| f as i64))
                .map_or(Value::Null, Value::from),
            _ => Value::Null,
        },
        "number" => value.as_f64().map_or(Value::Null, Value::from),
        "boolean" => value.as_bool().map_or(Value::Null, Value::from),
        "date" => match value.as_str() {
            Some("") | Some("null") => "<unknown>".into(),
            Some(s) => match s.parse::<Timestamp>() {
                Ok(t) => since_ts(t, now).into(),
                Err(_) => "<invalid>".into(),
            },
            None => Value::Null,
        },
        _ => Value::Null,
    }
}
