//! RFC 6902 JSON patch, with the semantics and messages of gopkg.in/evanphx/json-patch.v4 (which
//! deviates from the RFC: `replace` of a missing object key adds it, negative array indices count
//! from the end, `copy` from a missing key copies null).
//!
//! Must not depend on merge or strategic merge patch.

use serde_json::{Map, Value};

use super::go_values::{json_kind_word, parse_json};
use super::types::PatchError;

const MAX_JSON_PATCH_OPERATIONS: usize = 10000;
const ERR_MISSING: &str = "missing value";
const ERR_INVALID_INDEX: &str = "invalid index referenced";
const ERR_TEST_FAILED: &str = "test failed";

pub(super) fn json_patch(original: &Value, body: &[u8]) -> Result<Value, PatchError> {
    let ops = match parse_json(body).map_err(PatchError::BadRequest)? {
        Value::Null => Vec::new(),
        Value::Array(ops) => ops,
        other => {
            return Err(PatchError::BadRequest(format!(
                "json: cannot unmarshal {} into Go value of type jsonpatch.Patch",
                json_kind_word(&other)
            )));
        }
    };
    let mut parsed = Vec::with_capacity(ops.len());
    for op in ops {
        match op {
            Value::Object(m) => parsed.push(m),
            Value::Null => parsed.push(Map::new()),
            other => {
                return Err(PatchError::BadRequest(format!(
                    "json: cannot unmarshal {} into Go value of type jsonpatch.Operation",
                    json_kind_word(&other)
                )));
            }
        }
    }
    if parsed.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError::TooLarge(format!(
            "The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}",
            parsed.len()
        )));
    }
    let mut doc = original.clone();
    for op in &parsed {
        apply_op(&mut doc, op).map_err(PatchError::Unprocessable)?;
    }
    Ok(doc)
}

fn op_kind(op: &Map<String, Value>) -> String {
    match op.get("op") {
        Some(Value::String(s)) => s.clone(),
        _ => "unknown".to_string(),
    }
}

/// Reads a string member ("path" or "from"); `missing` is the error when absent or null.
fn op_string(op: &Map<String, Value>, field: &str, missing: &str) -> Result<String, String> {
    match op.get(field) {
        None | Some(Value::Null) => Err(format!("{missing}: {ERR_MISSING}")),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(format!(
            "json: cannot unmarshal {} into Go value of type string",
            json_kind_word(other)
        )),
    }
}

fn op_path(op: &Map<String, Value>) -> Result<String, String> {
    op_string(op, "path", "operation missing path field")
}

fn op_from(op: &Map<String, Value>) -> Result<String, String> {
    op_string(op, "from", "operation, missing from field")
}

/// The op's "value"; absent and null both mean Go's nil node, which marshals as null.
fn op_value(op: &Map<String, Value>) -> Value {
    op.get("value").cloned().unwrap_or(Value::Null)
}

fn apply_op(doc: &mut Value, op: &Map<String, Value>) -> Result<(), String> {
    match op_kind(op).as_str() {
        "add" => op_add(doc, op),
        "remove" => op_remove(doc, op),
        "replace" => op_replace(doc, op),
        "move" => op_move(doc, op),
        "test" => op_test(doc, op),
        "copy" => op_copy(doc, op),
        other => Err(format!("Unexpected kind: {other}")),
    }
}

/// RFC 6901 unescaping, left to right (`~01` is `~1`).
fn decode_patch_key(k: &str) -> String {
    let mut out = String::with_capacity(k.len());
    let mut chars = k.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '~' {
            match chars.peek() {
                Some('1') => {
                    out.push('/');
                    chars.next();
                    continue;
                }
                Some('0') => {
                    out.push('~');
                    chars.next();
                    continue;
                }
                _ => {}
            }
        }
        out.push(c);
    }
    out
}

/// Go's `strconv.Atoi` with its error text.
fn atoi(s: &str) -> Result<i64, String> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "strconv.Atoi: parsing {}: invalid syntax",
            crate::schema::go_quote(s)
        ));
    }
    s.parse::<i64>().map_err(|_| {
        format!(
            "strconv.Atoi: parsing {}: value out of range",
            crate::schema::go_quote(s)
        )
    })
}

fn invalid_index(idx: i64) -> String {
    format!("Unable to access invalid index: {idx}: {ERR_INVALID_INDEX}")
}

/// The position `idx` names among `size` places, counted from the end when negative; past
/// either end is an invalid index. Shared by add (`size` one past the end) and the others.
fn array_position(idx: i64, size: usize) -> Result<usize, String> {
    let size = size as i64;
    if idx >= size {
        return Err(invalid_index(idx));
    }
    let mut pos = idx;
    if pos < 0 {
        if pos < -size {
            return Err(invalid_index(idx));
        }
        pos += size;
    }
    Ok(pos as usize)
}

/// Index of an existing element (partialArray.get / set / remove).
fn existing_index(key: &str, len: usize) -> Result<usize, String> {
    array_position(atoi(key)?, len)
}

/// Walks every segment but the last; the parent must be an object or array.
fn find_object<'a>(doc: &'a mut Value, path: &str) -> Option<(&'a mut Value, String)> {
    let split: Vec<&str> = path.split('/').collect();
    if split.len() < 2 {
        return None;
    }
    let mut cur = doc;
    for part in &split[1..split.len() - 1] {
        let key = decode_patch_key(part);
        let next = match cur {
            Value::Object(m) => m.get_mut(&key)?,
            Value::Array(a) => {
                let idx = existing_index(&key, a.len()).ok()?;
                a.get_mut(idx)?
            }
            _ => return None,
        };
        if !(next.is_object() || next.is_array()) {
            return None;
        }
        cur = next;
    }
    let last = split
        .last()
        .map(|s| decode_patch_key(s))
        .unwrap_or_default();
    Some((cur, last))
}

/// Reads a member; `Ok(None)` is Go's nil node (a missing object key or a null).
fn container_get(con: &Value, key: &str) -> Result<Option<Value>, String> {
    match con {
        Value::Object(m) => Ok(m.get(key).filter(|v| !v.is_null()).cloned()),
        Value::Array(a) => {
            let idx = existing_index(key, a.len())?;
            Ok(a.get(idx).filter(|v| !v.is_null()).cloned())
        }
        _ => Err(ERR_MISSING.to_string()),
    }
}

fn container_add(con: &mut Value, key: &str, val: Value) -> Result<(), String> {
    match con {
        Value::Object(m) => {
            m.insert(key.to_string(), val);
            Ok(())
        }
        Value::Array(a) => {
            if key == "-" {
                a.push(val);
                return Ok(());
            }
            let idx = atoi(key)
                .map_err(|e| format!("value was not a proper array index: '{key}': {e}"))?;
            // One past the end is where an add may go.
            a.insert(array_position(idx, a.len() + 1)?, val);
            Ok(())
        }
        _ => Err(ERR_MISSING.to_string()),
    }
}

fn container_remove(con: &mut Value, key: &str) -> Result<(), String> {
    match con {
        Value::Object(m) => match m.remove(key) {
            Some(_) => Ok(()),
            None => Err(format!(
                "Unable to remove nonexistent key: {key}: {ERR_MISSING}"
            )),
        },
        Value::Array(a) => {
            a.remove(existing_index(key, a.len())?);
            Ok(())
        }
        _ => Err(ERR_MISSING.to_string()),
    }
}

fn container_set(con: &mut Value, key: &str, val: Value) -> Result<(), String> {
    match con {
        Value::Object(m) => {
            m.insert(key.to_string(), val);
            Ok(())
        }
        Value::Array(a) => {
            let idx = existing_index(key, a.len())?;
            if let Some(slot) = a.get_mut(idx) {
                *slot = val;
            }
            Ok(())
        }
        _ => Err(ERR_MISSING.to_string()),
    }
}

fn op_add(doc: &mut Value, op: &Map<String, Value>) -> Result<(), String> {
    let path =
        op_path(op).map_err(|_| format!("add operation failed to decode path: {ERR_MISSING}"))?;
    let Some((con, key)) = find_object(doc, &path) else {
        return Err(format!(
            "add operation does not apply: doc is missing path: \"{path}\": {ERR_MISSING}"
        ));
    };
    container_add(con, &key, op_value(op))
        .map_err(|e| format!("error in add for path: '{path}': {e}"))
}

fn op_remove(doc: &mut Value, op: &Map<String, Value>) -> Result<(), String> {
    let path = op_path(op)
        .map_err(|_| format!("remove operation failed to decode path: {ERR_MISSING}"))?;
    let Some((con, key)) = find_object(doc, &path) else {
        return Err(format!(
            "remove operation does not apply: doc is missing path: \"{path}\": {ERR_MISSING}"
        ));
    };
    container_remove(con, &key).map_err(|e| format!("error in remove for path: '{path}': {e}"))
}

fn op_replace(doc: &mut Value, op: &Map<String, Value>) -> Result<(), String> {
    let path = op_path(op).map_err(|e| format!("replace operation failed to decode path: {e}"))?;
    if path.is_empty() {
        // Replacing the whole document only takes an object or array; json-patch v4.12 (used by
        // v1.33) wraps a nil error there, so any other value is silently ignored.
        let val = op_value(op);
        if val.is_object() || val.is_array() {
            *doc = val;
        }
        return Ok(());
    }
    let Some((con, key)) = find_object(doc, &path) else {
        return Err(format!(
            "replace operation does not apply: doc is missing path: {path}: {ERR_MISSING}"
        ));
    };
    if container_get(con, &key).is_err() {
        return Err(format!(
            "replace operation does not apply: doc is missing key: {path}: {ERR_MISSING}"
        ));
    }
    container_set(con, &key, op_value(op))
        .map_err(|e| format!("error in remove for path: '{path}': {e}"))
}

fn op_move(doc: &mut Value, op: &Map<String, Value>) -> Result<(), String> {
    let from = op_from(op).map_err(|e| format!("move operation failed to decode from: {e}"))?;
    let val = {
        let Some((con, key)) = find_object(doc, &from) else {
            return Err(format!(
                "move operation does not apply: doc is missing from path: {from}: {ERR_MISSING}"
            ));
        };
        let val = container_get(con, &key)
            .map_err(|e| format!("error in move for path: '{key}': {e}"))?;
        container_remove(con, &key).map_err(|e| format!("error in move for path: '{key}': {e}"))?;
        val.unwrap_or(Value::Null)
    };
    let path = op_path(op).map_err(|e| format!("move operation failed to decode path: {e}"))?;
    let Some((con, key)) = find_object(doc, &path) else {
        return Err(format!(
            "move operation does not apply: doc is missing destination path: {path}: {ERR_MISSING}"
        ));
    };
    container_add(con, &key, val).map_err(|e| format!("error in move for path: '{path}': {e}"))
}

fn op_copy(doc: &mut Value, op: &Map<String, Value>) -> Result<(), String> {
    let from = op_from(op).map_err(|e| format!("copy operation failed to decode from: {e}"))?;
    let val = {
        let Some((con, key)) = find_object(doc, &from) else {
            return Err(format!(
                "copy operation does not apply: doc is missing from path: {from}: {ERR_MISSING}"
            ));
        };
        container_get(con, &key).map_err(|e| format!("error in copy for from: '{from}': {e}"))?
    };
    let path =
        op_path(op).map_err(|_| format!("copy operation failed to decode path: {ERR_MISSING}"))?;
    let Some((con, key)) = find_object(doc, &path) else {
        return Err(format!(
            "copy operation does not apply: doc is missing destination path: {path}: {ERR_MISSING}"
        ));
    };
    container_add(con, &key, val.unwrap_or(Value::Null))
        .map_err(|e| format!("error while adding value during copy: {e}"))
}

fn op_test(doc: &mut Value, op: &Map<String, Value>) -> Result<(), String> {
    let path = op_path(op).map_err(|e| format!("test operation failed to decode path: {e}"))?;
    let failed = || format!("testing value {path} failed: {ERR_TEST_FAILED}");
    let expected = op.get("value").filter(|v| !v.is_null());
    if path.is_empty() {
        return match expected {
            Some(e) if lazy_equal(doc, e) => Ok(()),
            _ => Err(failed()),
        };
    }
    let Some((con, key)) = find_object(doc, &path) else {
        return Err(format!(
            "test operation does not apply: is missing path: {path}: {ERR_MISSING}"
        ));
    };
    let actual =
        container_get(con, &key).map_err(|e| format!("error in test for path: '{path}': {e}"))?;
    match (actual, expected) {
        (None, None) => Ok(()),
        (Some(a), Some(e)) if lazy_equal(&a, e) => Ok(()),
        _ => Err(failed()),
    }
}

/// json-patch's structural equality: objects by keys, arrays element-wise, scalars by value.
fn lazy_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter().all(|(k, v)| match y.get(k) {
                    Some(w) => match (v.is_null(), w.is_null()) {
                        (true, true) => true,
                        (false, false) => lazy_equal(v, w),
                        _ => false,
                    },
                    None => false,
                })
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| lazy_equal(v, w))
        }
        (Value::Object(_) | Value::Array(_), _) | (_, Value::Object(_) | Value::Array(_)) => false,
        (x, y) => x == y,
    }
}
