//! PATCH semantics of the sandbox API server: RFC 6902 JSON patch, RFC 7386 JSON merge patch and
//! Kubernetes strategic merge patch, applied to an object's JSON form exactly as a v1.33
//! kube-apiserver does (k8s.io/apimachinery `strategicpatch`, `gopkg.in/evanphx/json-patch.v4`),
//! with the apiserver's error messages and HTTP status codes.
//!
//! Pure functions over `serde_json::Value`: no store, no HTTP. The caller decodes, validates and
//! stores the result; it must not depend on anything else here.

use crate::gofmt::go_float;
use serde_json::{Map, Value};

/// The patch formats a client may name in `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    StrategicMerge,
    Apply,
}

impl PatchType {
    /// Maps a request `Content-Type` to a patch type. Like the apiserver, everything from the first
    /// `;` on (charset etc.) is ignored and the rest must match exactly.
    pub fn from_content_type(ct: &str) -> Option<PatchType> {
        let base = match ct.find(';') {
            Some(idx) if idx > 0 => &ct[..idx],
            _ => ct,
        };
        match base {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::StrategicMerge),
            "application/apply-patch+yaml" => Some(PatchType::Apply),
            _ => None,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            PatchType::Json => "application/json-patch+json",
            PatchType::Merge => "application/merge-patch+json",
            PatchType::StrategicMerge => "application/strategic-merge-patch+json",
            PatchType::Apply => "application/apply-patch+yaml",
        }
    }
}

/// Why a patch was refused. `Display` is the message a real apiserver puts in its Status (for
/// [`PatchError::Unprocessable`] the apiserver's own error, which it leaves out of the Status;
/// see [`PatchError::to_status`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// 400 BadRequest.
    #[error("{0}")]
    BadRequest(String),
    /// 422, built by the apiserver with `NewGenericServerResponse`: the Status message is generic
    /// and this text is not in it (only logged).
    #[error("{0}")]
    Unprocessable(String),
    /// 413 RequestEntityTooLarge.
    #[error("Request entity too large: {0}")]
    TooLarge(String),
    /// 415 UnsupportedMediaType.
    #[error("the body of the request was in an unknown format - accepted media types include: {0}")]
    UnsupportedMediaType(String),
    /// A plain Go error the apiserver returns as 500 with reason Unknown.
    #[error("{0}")]
    Internal(String),
}

impl PatchError {
    pub fn status_code(&self) -> u16 {
        match self {
            PatchError::BadRequest(_) => 400,
            PatchError::Unprocessable(_) => 422,
            PatchError::TooLarge(_) => 413,
            PatchError::UnsupportedMediaType(_) => 415,
            PatchError::Internal(_) => 500,
        }
    }

    pub fn reason(&self) -> &'static str {
        match self {
            PatchError::BadRequest(_) => "BadRequest",
            PatchError::Unprocessable(_) => "Invalid",
            PatchError::TooLarge(_) => "RequestEntityTooLarge",
            PatchError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            PatchError::Internal(_) => "Unknown",
        }
    }

    /// The `message` of the Status object.
    pub fn status_message(&self) -> String {
        match self {
            PatchError::Unprocessable(_) => {
                "the server rejected our request due to an error in our request".to_string()
            }
            other => other.to_string(),
        }
    }

    /// The full `Status` object the apiserver answers with.
    pub fn to_status(&self) -> Value {
        let mut status = serde_json::json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.status_message(),
            "reason": self.reason(),
            "code": self.status_code(),
        });
        // kube-apiserver builds this with NewGenericServerResponse(422, …, isUnexpectedResponse
        // false): the patch's own error is dropped, `details` stays empty.
        if let (PatchError::Unprocessable(_), Some(obj)) = (self, status.as_object_mut()) {
            obj.insert("details".to_string(), serde_json::json!({}));
        }
        status
    }
}

/// The 415 error for a patch type the resource does not accept, listing the ones it does as
/// kube-apiserver does (server-side apply last).
pub fn unsupported_media_type(api_version: &str, kind: &str) -> PatchError {
    let mut accepted = vec![
        PatchType::Json.content_type(),
        PatchType::Merge.content_type(),
    ];
    if is_strategic_kind(api_version, kind) {
        accepted.push(PatchType::StrategicMerge.content_type());
    }
    accepted.push(PatchType::Apply.content_type());
    PatchError::UnsupportedMediaType(accepted.join(", "))
}

/// Whether the kind is a built-in type with strategic-merge metadata (custom resources have none).
pub fn is_strategic_kind(api_version: &str, kind: &str) -> bool {
    root_schema(api_version, kind).is_some()
}

/// Applies `patch` (the raw request body) to `original`, an object of the given apiVersion/kind.
pub fn apply_patch(
    api_version: &str,
    kind: &str,
    original: &Value,
    patch_type: PatchType,
    patch: &[u8],
) -> Result<Value, PatchError> {
    match patch_type {
        PatchType::Json => json_patch(original, patch),
        PatchType::Merge => merge_patch(original, patch),
        PatchType::StrategicMerge => {
            let schema = root_schema(api_version, kind)
                .ok_or_else(|| unsupported_media_type(api_version, kind))?;
            strategic_merge_patch(original, patch, schema)
        }
        PatchType::Apply => Err(unsupported_media_type(api_version, kind)),
    }
}

// ---------------------------------------------------------------------------------------------
// Go formatting helpers: error texts embed values the way Go's fmt prints interface{} values.

/// `%v` of a decoded JSON value.
fn go_v(v: &Value) -> String {
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
fn go_s(v: &Value) -> String {
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
fn go_type_name(v: &Value) -> &'static str {
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
enum GoType {
    Nil,
    Bool,
    Int,
    Float,
    String,
    Slice,
    Map,
}

fn go_type(v: &Value) -> GoType {
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
fn parse_json(body: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(body).map_err(|e| {
        if e.is_syntax() || e.is_eof() {
            go_syntax_error(body, &e)
        } else {
            e.to_string()
        }
    })
}

fn json_kind_word(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

// ---------------------------------------------------------------------------------------------
// RFC 6902 JSON patch, with the semantics and messages of gopkg.in/evanphx/json-patch.v4 (which
// deviates from the RFC: `replace` of a missing object key adds it, negative array indices count
// from the end, `copy` from a missing key copies null).

const MAX_JSON_PATCH_OPERATIONS: usize = 10000;
const ERR_MISSING: &str = "missing value";
const ERR_INVALID_INDEX: &str = "invalid index referenced";
const ERR_TEST_FAILED: &str = "test failed";

fn json_patch(original: &Value, body: &[u8]) -> Result<Value, PatchError> {
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
            super::schema::go_quote(s)
        ));
    }
    s.parse::<i64>().map_err(|_| {
        format!(
            "strconv.Atoi: parsing {}: value out of range",
            super::schema::go_quote(s)
        )
    })
}

fn invalid_index(idx: i64) -> String {
    format!("Unable to access invalid index: {idx}: {ERR_INVALID_INDEX}")
}

/// Index of an existing element (partialArray.get / set / remove).
fn existing_index(key: &str, len: usize) -> Result<usize, String> {
    let idx = atoi(key)?;
    let len = len as i64;
    let mut pos = idx;
    if pos < 0 {
        if pos < -len {
            return Err(invalid_index(idx));
        }
        pos += len;
    }
    if pos >= len {
        return Err(invalid_index(idx));
    }
    Ok(pos as usize)
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
            let size = a.len() as i64 + 1;
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
            a.insert(pos as usize, val);
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
            let idx = atoi(key)?;
            let len = a.len() as i64;
            if idx >= len {
                return Err(invalid_index(idx));
            }
            let mut pos = idx;
            if pos < 0 {
                if pos < -len {
                    return Err(invalid_index(idx));
                }
                pos += len;
            }
            a.remove(pos as usize);
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

// ---------------------------------------------------------------------------------------------
// RFC 7386 JSON merge patch, as json-patch v4's MergePatch (which also drops nulls inside objects
// nested in arrays it inserts).

fn merge_patch(original: &Value, body: &[u8]) -> Result<Value, PatchError> {
    let bad = || PatchError::BadRequest("Invalid JSON Patch".to_string());
    let patch = serde_json::from_slice::<Value>(body).map_err(|_| bad())?;
    match patch {
        Value::Object(p) => {
            let mut doc = match original {
                Value::Object(m) => m.clone(),
                _ => Map::new(),
            };
            merge_docs(&mut doc, p);
            Ok(Value::Object(doc))
        }
        Value::Array(mut a) => {
            prune_array_nulls(&mut a);
            Ok(Value::Array(a))
        }
        _ => Err(bad()),
    }
}

fn merge_docs(doc: &mut Map<String, Value>, patch: Map<String, Value>) {
    for (k, v) in patch {
        if v.is_null() {
            doc.remove(&k);
            continue;
        }
        match doc.remove(&k) {
            None | Some(Value::Null) => {
                let mut v = v;
                prune_nulls(&mut v);
                doc.insert(k, v);
            }
            Some(cur) => {
                doc.insert(k, merge_value(cur, v));
            }
        }
    }
}

fn merge_value(cur: Value, patch: Value) -> Value {
    match (cur, patch) {
        (Value::Object(mut c), Value::Object(p)) => {
            merge_docs(&mut c, p);
            Value::Object(c)
        }
        (Value::Object(_), p) => p,
        (_, mut p) => {
            prune_nulls(&mut p);
            p
        }
    }
}

fn prune_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(prune_nulls);
        }
        Value::Array(a) => prune_array_nulls(a),
        _ => {}
    }
}

fn prune_array_nulls(a: &mut [Value]) {
    a.iter_mut().filter(|v| !v.is_null()).for_each(prune_nulls);
}

// ---------------------------------------------------------------------------------------------
// Strategic merge patch metadata: the `patchStrategy`/`patchMergeKey` struct tags of the served
// built-in kinds (k8s.io/api v0.33). Only the paths that lead to a tagged field are listed: any
// other field has no strategy, so its maps merge key by key and its lists are replaced, which
// is what the Go lookup yields for an untagged field.

#[derive(Clone, Copy)]
enum Schema {
    Struct(&'static [FieldMeta]),
    /// A struct (or map) field that needs no metadata below it.
    Opaque,
    /// A primitive element type (the elements of `finalizers`, `podCIDRs`).
    Primitive,
}

struct FieldMeta {
    name: &'static str,
    strategy: &'static str,
    merge_key: &'static str,
    schema: Schema,
}

const fn field(
    name: &'static str,
    strategy: &'static str,
    merge_key: &'static str,
    schema: Schema,
) -> FieldMeta {
    FieldMeta {
        name,
        strategy,
        merge_key,
        schema,
    }
}

const fn merge_by(name: &'static str, merge_key: &'static str) -> FieldMeta {
    field(name, "merge", merge_key, Schema::Opaque)
}

const fn child(name: &'static str, fields: &'static [FieldMeta]) -> FieldMeta {
    field(name, "", "", Schema::Struct(fields))
}

const OBJECT_META: &[FieldMeta] = &[
    field("finalizers", "merge", "", Schema::Primitive),
    merge_by("ownerReferences", "uid"),
];
const CONTAINER: &[FieldMeta] = &[
    merge_by("env", "name"),
    merge_by("ports", "containerPort"),
    merge_by("volumeDevices", "devicePath"),
    merge_by("volumeMounts", "mountPath"),
];
const PVC_TEMPLATE: &[FieldMeta] = &[child("metadata", OBJECT_META)];
const EPHEMERAL_VOLUME: &[FieldMeta] = &[child("volumeClaimTemplate", PVC_TEMPLATE)];
const VOLUME: &[FieldMeta] = &[child("ephemeral", EPHEMERAL_VOLUME)];
const POD_SPEC: &[FieldMeta] = &[
    field("containers", "merge", "name", Schema::Struct(CONTAINER)),
    field(
        "ephemeralContainers",
        "merge",
        "name",
        Schema::Struct(CONTAINER),
    ),
    merge_by("hostAliases", "ip"),
    merge_by("imagePullSecrets", "name"),
    field("initContainers", "merge", "name", Schema::Struct(CONTAINER)),
    field("resourceClaims", "merge,retainKeys", "name", Schema::Opaque),
    merge_by("schedulingGates", "name"),
    merge_by("topologySpreadConstraints", "topologyKey"),
    field(
        "volumes",
        "merge,retainKeys",
        "name",
        Schema::Struct(VOLUME),
    ),
];
const POD_STATUS: &[FieldMeta] = &[
    merge_by("conditions", "type"),
    merge_by("hostIPs", "ip"),
    merge_by("podIPs", "ip"),
    field(
        "resourceClaimStatuses",
        "merge,retainKeys",
        "name",
        Schema::Opaque,
    ),
];
const POD: &[FieldMeta] = &[
    child("metadata", OBJECT_META),
    child("spec", POD_SPEC),
    child("status", POD_STATUS),
];
const SERVICE_SPEC: &[FieldMeta] = &[merge_by("ports", "port")];
const SERVICE_STATUS: &[FieldMeta] = &[merge_by("conditions", "type")];
const SERVICE: &[FieldMeta] = &[
    child("metadata", OBJECT_META),
    child("spec", SERVICE_SPEC),
    child("status", SERVICE_STATUS),
];
const SERVICE_ACCOUNT: &[FieldMeta] =
    &[child("metadata", OBJECT_META), merge_by("secrets", "name")];
const NODE_SPEC: &[FieldMeta] = &[field("podCIDRs", "merge", "", Schema::Primitive)];
const NODE_STATUS: &[FieldMeta] = &[
    merge_by("addresses", "type"),
    merge_by("conditions", "type"),
];
const NODE: &[FieldMeta] = &[
    child("metadata", OBJECT_META),
    child("spec", NODE_SPEC),
    child("status", NODE_STATUS),
];
const NAMESPACE_STATUS: &[FieldMeta] = &[merge_by("conditions", "type")];
const NAMESPACE: &[FieldMeta] = &[
    child("metadata", OBJECT_META),
    child("status", NAMESPACE_STATUS),
];
/// Kinds whose only tagged fields are in ObjectMeta.
const METADATA_ONLY: &[FieldMeta] = &[child("metadata", OBJECT_META)];
const WEBHOOK_CONFIGURATION: &[FieldMeta] =
    &[child("metadata", OBJECT_META), merge_by("webhooks", "name")];

fn root_schema(api_version: &str, kind: &str) -> Option<Schema> {
    let fields = match (api_version, kind) {
        ("v1", "Pod") => POD,
        ("v1", "Service") => SERVICE,
        ("v1", "ServiceAccount") => SERVICE_ACCOUNT,
        ("v1", "Node") => NODE,
        ("v1", "Namespace") => NAMESPACE,
        (
            "admissionregistration.k8s.io/v1",
            "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration",
        ) => WEBHOOK_CONFIGURATION,
        ("v1", "Endpoints" | "ConfigMap" | "Secret" | "Event")
        | ("events.k8s.io/v1", "Event")
        | ("coordination.k8s.io/v1", "Lease")
        | ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => METADATA_ONLY,
        _ => return None,
    };
    Some(Schema::Struct(fields))
}

impl Schema {
    /// `LookupPatchMetadataForStruct`/`ForSlice`: the field's schema, strategy and merge key.
    fn lookup(self, key: &str) -> Result<(Schema, &'static str, &'static str), PatchError> {
        match self {
            Schema::Struct(fields) => Ok(fields
                .iter()
                .find(|f| f.name == key)
                .map(|f| (f.schema, f.strategy, f.merge_key))
                .unwrap_or((Schema::Opaque, "", ""))),
            Schema::Opaque => Ok((Schema::Opaque, "", "")),
            Schema::Primitive => Err(PatchError::Internal(
                "merging an object in json but data type is not struct, instead is: string"
                    .to_string(),
            )),
        }
    }

    /// Go's `reflect.Kind` name of the element type, used in one error message.
    fn name(self) -> &'static str {
        match self {
            Schema::Primitive => "string",
            Schema::Struct(_) | Schema::Opaque => "struct",
        }
    }
}

/// `extractRetainKeysPatchStrategy`: the strategy besides `retainKeys`.
fn list_strategy(tag: &'static str) -> &'static str {
    tag.split(',')
        .find(|s| *s != RETAIN_KEYS_STRATEGY)
        .unwrap_or("")
}

// ---------------------------------------------------------------------------------------------
// Strategic merge patch (k8s.io/apimachinery/pkg/util/strategicpatch, server side: parallel lists
// merged, unmatched nulls ignored).

const DIRECTIVE_MARKER: &str = "$patch";
const DELETE_DIRECTIVE: &str = "delete";
const REPLACE_DIRECTIVE: &str = "replace";
const MERGE_DIRECTIVE: &str = "merge";
const RETAIN_KEYS_STRATEGY: &str = "retainKeys";
const RETAIN_KEYS_DIRECTIVE: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST_PREFIX: &str = "$deleteFromPrimitiveList";
const SET_ELEMENT_ORDER_PREFIX: &str = "$setElementOrder";

fn err_bad_retain_keys() -> PatchError {
    PatchError::BadRequest("invalid patch format of retainKeys".to_string())
}

fn err_bad_set_element_order() -> PatchError {
    PatchError::BadRequest("invalid patch format of setElementOrder list".to_string())
}

fn err_bad_primitive_list() -> PatchError {
    PatchError::BadRequest("invalid patch format of primitive list".to_string())
}

fn err_no_merge_key(m: &Map<String, Value>, key: &str) -> PatchError {
    PatchError::Internal(format!(
        "map: {} does not contain declared merge key: {key}",
        go_v(&Value::Object(m.clone()))
    ))
}

fn err_bad_arg_type(expected: &str, actual: &Value) -> PatchError {
    PatchError::Internal(format!(
        "expected a {expected}, but received a {}",
        go_type_name(actual)
    ))
}

fn err_bad_patch_type(directive: &Value, m: &Map<String, Value>) -> PatchError {
    PatchError::Internal(format!(
        "unknown patch type: {} in map: {}",
        go_s(directive),
        go_v(&Value::Object(m.clone()))
    ))
}

const SLICE_TYPE: &str = "[]interface {}";
const MAP_TYPE: &str = "map[string]interface {}";

fn strategic_merge_patch(
    original: &Value,
    body: &[u8],
    schema: Schema,
) -> Result<Value, PatchError> {
    let patch = match parse_json(body).map_err(PatchError::BadRequest)? {
        Value::Object(p) => p,
        Value::Null => Map::new(),
        other => {
            return Err(PatchError::BadRequest(format!(
                "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                json_kind_word(&other)
            )));
        }
    };
    let original = match original {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    merge_map(original, patch, schema).map(Value::Object)
}

fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    schema: Schema,
) -> Result<Map<String, Value>, PatchError> {
    if let Some(directive) = patch.get(DIRECTIVE_MARKER).cloned() {
        return handle_directive_in_merge_map(&directive, patch);
    }
    apply_retain_keys_directive(&mut original, &mut patch)?;
    merge_patch_into_original(&mut original, &mut patch, schema)?;

    for (k, patch_v) in patch {
        let (key, is_delete_list) = if k.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX) {
            (extract_key(&k, DELETE_FROM_PRIMITIVE_LIST_PREFIX)?, true)
        } else {
            (k, false)
        };
        if patch_v.is_null() {
            original.remove(&key);
            continue;
        }
        let same_type = original
            .get(&key)
            .map(|orig| go_type(orig) == go_type(&patch_v));
        if same_type != Some(true) {
            // Missing from the original, or of another type: the patch value wins.
            if !is_delete_list {
                let mut v = patch_v;
                discard_null_values(&mut v);
                match remove_directives(v) {
                    Some(v) => {
                        original.insert(key, v);
                    }
                    None => {
                        original.remove(&key);
                    }
                }
            }
            continue;
        }
        let Some(orig) = original.remove(&key) else {
            continue;
        };
        let merged = match (orig, patch_v) {
            (Value::Object(o), Value::Object(p)) => {
                let (sub, tag, _) = schema.lookup(&key)?;
                if list_strategy(tag) == REPLACE_DIRECTIVE {
                    Some(Value::Object(p))
                } else {
                    Some(Value::Object(merge_map(o, p, sub)?))
                }
            }
            (Value::Array(o), Value::Array(p)) => {
                let (sub, tag, merge_key) = schema.lookup(&key)?;
                Some(Value::Array(merge_slice_handler(
                    o,
                    p,
                    sub,
                    list_strategy(tag),
                    merge_key,
                    is_delete_list,
                )?))
            }
            (_, p) => remove_directives(p),
        };
        if let Some(v) = merged {
            original.insert(key, v);
        }
    }
    Ok(original)
}

fn handle_directive_in_merge_map(
    directive: &Value,
    mut patch: Map<String, Value>,
) -> Result<Map<String, Value>, PatchError> {
    match directive.as_str() {
        Some(REPLACE_DIRECTIVE) => {
            patch.remove(DIRECTIVE_MARKER);
            Ok(patch)
        }
        Some(DELETE_DIRECTIVE) => Ok(Map::new()),
        _ => Err(err_bad_patch_type(directive, &patch)),
    }
}

/// `extractKey`: the list field a `$prefix/field` directive applies to.
fn extract_key(s: &str, prefix: &str) -> Result<String, PatchError> {
    match s.split_once('/') {
        Some((p, rest)) if p == prefix => Ok(rest.to_string()),
        _ if prefix == DELETE_FROM_PRIMITIVE_LIST_PREFIX => Err(err_bad_primitive_list()),
        _ => Err(err_bad_set_element_order()),
    }
}

fn apply_retain_keys_directive(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
) -> Result<(), PatchError> {
    let Some(retain) = patch.remove(RETAIN_KEYS_DIRECTIVE) else {
        return Ok(());
    };
    let Value::Array(keep) = retain else {
        return Err(err_bad_retain_keys());
    };
    let kept = |k: &str| keep.iter().any(|v| v.as_str() == Some(k));
    for (k, v) in patch.iter() {
        if v.is_null()
            || k.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX)
            || k.starts_with(SET_ELEMENT_ORDER_PREFIX)
        {
            continue;
        }
        if !kept(k) {
            return Err(err_bad_retain_keys());
        }
    }
    original.retain(|k, _| kept(k));
    Ok(())
}

/// Processes every `$setElementOrder/<list>` directive together with its list: merges the list
/// and orders the result by the directive, then the patch, then the live object.
fn merge_patch_into_original(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    schema: Schema,
) -> Result<(), PatchError> {
    let keys: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ELEMENT_ORDER_PREFIX))
        .cloned()
        .collect();
    for key in keys {
        let Some(order_value) = patch.remove(&key) else {
            continue;
        };
        let Value::Array(set_order) = order_value else {
            return Err(err_bad_arg_type(SLICE_TYPE, &order_value));
        };
        let original_key = extract_key(&key, SET_ELEMENT_ORDER_PREFIX)?;
        let original_list = match original.get(&original_key) {
            None => None,
            Some(Value::Array(a)) => Some(a.clone()),
            Some(other) => return Err(err_bad_arg_type(SLICE_TYPE, other)),
        };
        let patch_list = match patch.get(&original_key) {
            None => None,
            Some(Value::Array(a)) => Some(a.clone()),
            Some(other) => return Err(err_bad_arg_type(SLICE_TYPE, other)),
        };
        let (sub, tag, merge_key) = schema.lookup(&original_key)?;
        let strategy = list_strategy(tag);
        validate_patch_with_set_order_list(
            patch_list.as_deref().unwrap_or(&[]),
            &set_order,
            merge_key,
        )?;

        let original_items = original_list.clone().unwrap_or_default();
        let patch_items_raw = patch_list.clone().unwrap_or_default();
        let merged = match (original_list, patch_list) {
            (Some(o), None) => o,
            (None, Some(p)) => match remove_directives(Value::Array(p)) {
                Some(Value::Array(v)) => v,
                _ => continue,
            },
            (Some(o), Some(p)) => merge_slice_handler(o, p, sub, strategy, merge_key, false)?,
            (None, None) => continue,
        };

        let (patch_items, server_only) = if merge_key.is_empty() {
            partition_primitives(merged, &set_order)
        } else {
            partition_maps(merged, &set_order, merge_key)?
        };
        let kind = slice_element_type(&[&original_items, &patch_items_raw])?;
        let both = normalize_element_order(
            patch_items,
            server_only,
            &set_order,
            &original_items,
            merge_key,
            kind,
        )?;
        original.insert(original_key.clone(), Value::Array(both));
        patch.remove(&original_key);
    }
    Ok(())
}

/// Checks that the patch list's items appear in the `$setElementOrder` list, in its order.
fn validate_patch_with_set_order_list(
    patch_list: &[Value],
    set_order: &[Value],
    merge_key: &str,
) -> Result<(), PatchError> {
    if set_order.is_empty() || patch_list.is_empty() {
        return Ok(());
    }
    let non_delete: Vec<Value> = if merge_key.is_empty() {
        patch_list.to_vec()
    } else {
        extract_to_delete_items(patch_list.to_vec())?.0
    };
    let (mut pi, mut si) = (0, 0);
    while pi < non_delete.len() && si < set_order.len() {
        if contains_directive_marker(&non_delete[pi]) {
            pi += 1;
            continue;
        }
        if merge_key_value_equal(&non_delete[pi], &set_order[si], merge_key)? {
            pi += 1;
        }
        si += 1;
    }
    if pi < non_delete.len() && si >= set_order.len() {
        return Err(PatchError::Internal(format!(
            "The order in patch list:\n{}\n doesn't match {SET_ELEMENT_ORDER_PREFIX} list:\n{}\n",
            go_v(&Value::Array(patch_list.to_vec())),
            go_v(&Value::Array(set_order.to_vec()))
        )));
    }
    Ok(())
}

fn contains_directive_marker(v: &Value) -> bool {
    v.as_object()
        .is_some_and(|m| m.contains_key(DIRECTIVE_MARKER))
}

fn merge_key_value_equal(left: &Value, right: &Value, merge_key: &str) -> Result<bool, PatchError> {
    if merge_key.is_empty() {
        return Ok(left == right);
    }
    let l = left
        .as_object()
        .ok_or_else(|| err_bad_arg_type(MAP_TYPE, left))?;
    let r = right
        .as_object()
        .ok_or_else(|| err_bad_arg_type(MAP_TYPE, right))?;
    let lv = l
        .get(merge_key)
        .ok_or_else(|| err_no_merge_key(l, merge_key))?;
    let rv = r
        .get(merge_key)
        .ok_or_else(|| err_no_merge_key(r, merge_key))?;
    Ok(lv == rv)
}

/// Splits a list of maps into the items to keep and those marked `$patch: delete`.
fn extract_to_delete_items(list: Vec<Value>) -> Result<(Vec<Value>, Vec<Value>), PatchError> {
    let mut keep = Vec::new();
    let mut delete = Vec::new();
    for v in list {
        let Some(m) = v.as_object() else {
            return Err(err_bad_arg_type(MAP_TYPE, &v));
        };
        if m.get(DIRECTIVE_MARKER).and_then(Value::as_str) == Some(DELETE_DIRECTIVE) {
            delete.push(v);
        } else {
            keep.push(v);
        }
    }
    Ok((keep, delete))
}

/// Drops maps carrying a `$patch` directive (recursively); `None` means "drop this value".
fn remove_directives(v: Value) -> Option<Value> {
    match v {
        Value::Object(m) => {
            if m.contains_key(DIRECTIVE_MARKER) {
                return None;
            }
            Some(Value::Object(
                m.into_iter()
                    .filter_map(|(k, v)| remove_directives(v).map(|v| (k, v)))
                    .collect(),
            ))
        }
        Value::Array(a) => Some(Value::Array(
            a.into_iter().filter_map(remove_directives).collect(),
        )),
        other => Some(other),
    }
}

fn discard_null_values(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(discard_null_values);
        }
        Value::Array(a) => a.iter_mut().for_each(discard_null_values),
        _ => {}
    }
}

fn merge_slice_handler(
    original: Vec<Value>,
    patch: Vec<Value>,
    schema: Schema,
    strategy: &str,
    merge_key: &str,
    is_delete_list: bool,
) -> Result<Vec<Value>, PatchError> {
    if strategy == MERGE_DIRECTIVE || is_delete_list {
        merge_slice(original, patch, schema, merge_key, is_delete_list)
    } else {
        Ok(patch)
    }
}

/// `sliceElementType`: all elements must share one type, which must not be a list.
fn slice_element_type(slices: &[&[Value]]) -> Result<GoType, PatchError> {
    let mut prev: Option<GoType> = None;
    for v in slices.iter().flat_map(|s| s.iter()) {
        let t = go_type(v);
        match prev {
            None => {
                if t == GoType::Nil {
                    // Go calls Kind() on a nil reflect.Type here and panics.
                    return Err(PatchError::Internal(
                        "runtime error: invalid memory address or nil pointer dereference"
                            .to_string(),
                    ));
                }
                if t == GoType::Slice {
                    return Err(PatchError::Unprocessable(
                        "lists of lists are not supported".to_string(),
                    ));
                }
                prev = Some(t);
            }
            Some(p) if p != t => {
                let all = Value::Array(slices.iter().map(|s| Value::Array(s.to_vec())).collect());
                return Err(PatchError::Internal(format!(
                    "list element types are not identical: {}",
                    go_v(&all)
                )));
            }
            Some(_) => {}
        }
    }
    prev.ok_or_else(|| PatchError::Internal("no elements in any of the given slices".to_string()))
}

fn merge_slice(
    original: Vec<Value>,
    patch: Vec<Value>,
    schema: Schema,
    merge_key: &str,
    is_delete_list: bool,
) -> Result<Vec<Value>, PatchError> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let kind = slice_element_type(&[&original, &patch])?;
    let (server_order, patch, merged) = if kind != GoType::Map {
        if is_delete_list {
            return Ok(original
                .into_iter()
                .filter(|v| !patch.contains(v))
                .collect());
        }
        let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
        for v in original.iter().chain(patch.iter()) {
            if !merged.contains(v) {
                merged.push(v.clone());
            }
        }
        (original, patch, merged)
    } else {
        if merge_key.is_empty() {
            return Err(PatchError::Internal(format!(
                "cannot merge lists without merge key for {}",
                schema.name()
            )));
        }
        let (original, patch) = merge_slice_with_special_elements(original, patch, merge_key)?;
        let merged =
            merge_slice_without_special_elements(original.clone(), &patch, merge_key, schema)?;
        (original, patch, merged)
    };
    let (patch_items, server_only) = if merge_key.is_empty() {
        partition_primitives(merged, &patch)
    } else {
        partition_maps(merged, &patch, merge_key)?
    };
    normalize_element_order(
        patch_items,
        server_only,
        &patch,
        &server_order,
        merge_key,
        kind,
    )
}

/// Applies `$patch: delete` / `$patch: replace` list items; returns the new original and the
/// patch items without directives.
fn merge_slice_with_special_elements(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    merge_key: &str,
) -> Result<(Vec<Value>, Vec<Value>), PatchError> {
    let mut plain = Vec::new();
    let mut replace = false;
    for v in patch {
        let Some(m) = v.as_object() else {
            return Err(err_bad_arg_type(MAP_TYPE, &v));
        };
        let Some(directive) = m.get(DIRECTIVE_MARKER) else {
            plain.push(v);
            continue;
        };
        match directive.as_str() {
            Some(DELETE_DIRECTIVE) => {
                let Some(value) = m.get(merge_key) else {
                    return Err(err_no_merge_key(m, merge_key));
                };
                for (i, item) in original.iter().enumerate() {
                    if !item.is_object() {
                        return Err(PatchError::Internal(format!(
                            "value for key {i} is not a map"
                        )));
                    }
                }
                original.retain(|item| item.get(merge_key) != Some(value));
            }
            Some(REPLACE_DIRECTIVE) => replace = true,
            Some(MERGE_DIRECTIVE) => {
                return Err(PatchError::Internal(
                    "merging lists cannot yet be specified in the patch".to_string(),
                ));
            }
            _ => return Err(err_bad_patch_type(directive, m)),
        }
    }
    if replace {
        return Ok((plain, Vec::new()));
    }
    Ok((original, plain))
}

fn find_map_in_slice(
    list: &[Value],
    key: &str,
    value: &Value,
) -> Result<Option<usize>, PatchError> {
    for (i, v) in list.iter().enumerate() {
        let Some(m) = v.as_object() else {
            return Err(PatchError::Internal(format!(
                "value for key {i} is not a map"
            )));
        };
        if m.get(key) == Some(value) {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

fn merge_slice_without_special_elements(
    mut original: Vec<Value>,
    patch: &[Value],
    merge_key: &str,
    schema: Schema,
) -> Result<Vec<Value>, PatchError> {
    for v in patch {
        let Some(m) = v.as_object() else {
            return Err(err_bad_arg_type(MAP_TYPE, v));
        };
        let Some(value) = m.get(merge_key) else {
            return Err(err_no_merge_key(m, merge_key));
        };
        match find_map_in_slice(&original, merge_key, value)? {
            Some(i) => {
                let current = match std::mem::take(&mut original[i]) {
                    Value::Object(o) => o,
                    _ => Map::new(),
                };
                original[i] = Value::Object(merge_map(current, m.clone(), schema)?);
            }
            None => original.push(v.clone()),
        }
    }
    Ok(original)
}

fn partition_primitives(merged: Vec<Value>, by: &[Value]) -> (Vec<Value>, Vec<Value>) {
    merged.into_iter().partition(|v| by.contains(v))
}

fn partition_maps(
    merged: Vec<Value>,
    by: &[Value],
    merge_key: &str,
) -> Result<(Vec<Value>, Vec<Value>), PatchError> {
    let mut patch_items = Vec::new();
    let mut server_only = Vec::new();
    for v in merged {
        let Some(m) = v.as_object() else {
            return Err(err_bad_arg_type(MAP_TYPE, &v));
        };
        let Some(value) = m.get(merge_key) else {
            return Err(err_no_merge_key(m, merge_key));
        };
        if find_map_in_slice(by, merge_key, value)?.is_some() {
            patch_items.push(v);
        } else {
            server_only.push(v);
        }
    }
    Ok((patch_items, server_only))
}

/// The value an item is identified by: its merge key for maps, itself otherwise.
fn identity<'a>(item: &'a Value, merge_key: &str, kind: GoType) -> Option<&'a Value> {
    if kind == GoType::Map {
        item.as_object().and_then(|m| m.get(merge_key))
    } else {
        Some(item)
    }
}

fn index_in(list: &[Value], item: &Value, merge_key: &str, kind: GoType) -> Option<usize> {
    let wanted = identity(item, merge_key, kind);
    list.iter()
        .position(|v| identity(v, merge_key, kind) == wanted)
}

/// Sorts the patch items by `patch_order` and the server-only items by `server_order`, then
/// interleaves them keeping both relative orders.
fn normalize_element_order(
    patch: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: &str,
    kind: GoType,
) -> Result<Vec<Value>, PatchError> {
    let patch = normalize_slice_order(patch, patch_order, merge_key, kind)?;
    let server_only = normalize_slice_order(server_only, server_order, merge_key, kind)?;
    Ok(merge_sorted_slice(
        server_only,
        patch,
        server_order,
        merge_key,
        kind,
    ))
}

fn normalize_slice_order(
    to_sort: Vec<Value>,
    order: &[Value],
    merge_key: &str,
    kind: GoType,
) -> Result<Vec<Value>, PatchError> {
    let (mut to_sort, to_delete) = if kind == GoType::Map {
        for v in to_sort.iter().chain(order.iter()) {
            let Some(m) = v.as_object() else {
                return Err(err_bad_arg_type(MAP_TYPE, v));
            };
            if !m.contains_key(merge_key) {
                return Err(err_no_merge_key(m, merge_key));
            }
        }
        extract_to_delete_items(to_sort)?
    } else {
        (to_sort, Vec::new())
    };
    // Go's sort.SliceStable with a "less" that is true whenever either item is unranked; for the
    // list sizes seen here that is an insertion sort, reproduced exactly.
    let ranks: Vec<Option<usize>> = to_sort
        .iter()
        .map(|v| index_in(order, v, merge_key, kind))
        .collect();
    let mut idx: Vec<usize> = (0..to_sort.len()).collect();
    let less = |a: usize, b: usize| match (ranks[a], ranks[b]) {
        (Some(x), Some(y)) => x < y,
        _ => true,
    };
    for i in 1..idx.len() {
        let mut j = i;
        while j > 0 && less(idx[j], idx[j - 1]) {
            idx.swap(j, j - 1);
            j -= 1;
        }
    }
    let mut slots: Vec<Option<Value>> = to_sort.drain(..).map(Some).collect();
    let mut sorted: Vec<Value> = idx.into_iter().filter_map(|i| slots[i].take()).collect();
    sorted.extend(to_delete);
    Ok(sorted)
}

fn merge_sorted_slice(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Value],
    merge_key: &str,
    kind: GoType,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => {
                match (
                    index_in(server_order, l, merge_key, kind),
                    index_in(server_order, r, merge_key, kind),
                ) {
                    (Some(li), Some(ri)) => li < ri,
                    _ => false,
                }
            }
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn smp(kind: &str, original: Value, patch: Value) -> Result<Value, PatchError> {
        let api_version = match kind {
            "Lease" => "coordination.k8s.io/v1",
            _ => "v1",
        };
        apply_patch(
            api_version,
            kind,
            &original,
            PatchType::StrategicMerge,
            patch.to_string().as_bytes(),
        )
    }

    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "labels": {"app": "a", "tier": "web"},
                          "finalizers": ["a/x", "b/y"],
                          "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "o1", "uid": "u1"}]},
            "spec": {
                "containers": [
                    {"name": "main", "image": "busybox:1", "env": [{"name": "A", "value": "1"}],
                     "ports": [{"containerPort": 80, "protocol": "TCP"}]},
                    {"name": "side", "image": "nginx:1"}
                ],
                "volumes": [{"name": "data", "emptyDir": {}}],
                "tolerations": [{"key": "k1", "operator": "Exists"}]
            }
        })
    }

    #[test]
    fn content_types() {
        assert_eq!(
            PatchType::from_content_type("application/strategic-merge-patch+json; charset=utf-8"),
            Some(PatchType::StrategicMerge)
        );
        assert_eq!(
            PatchType::from_content_type("application/json-patch+json"),
            Some(PatchType::Json)
        );
        assert_eq!(
            PatchType::from_content_type("application/merge-patch+json"),
            Some(PatchType::Merge)
        );
        assert_eq!(
            PatchType::from_content_type("application/apply-patch+yaml"),
            Some(PatchType::Apply)
        );
        assert_eq!(PatchType::from_content_type("application/json"), None);
    }

    #[test]
    fn smp_adds_env_var_by_name() {
        let out = smp(
            "Pod",
            pod(),
            json!({"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "2"}]}]}}),
        )
        .unwrap();
        // Without $setElementOrder, items new to the list come before the server's items.
        assert_eq!(
            out["spec"]["containers"][0]["env"],
            json!([{"name": "B", "value": "2"}, {"name": "A", "value": "1"}])
        );
        // kubectl apply sends the order, which wins.
        let out = smp(
            "Pod",
            pod(),
            json!({"spec": {"containers": [{"name": "main",
                "$setElementOrder/env": [{"name": "A"}, {"name": "B"}],
                "env": [{"name": "B", "value": "2"}]}]}}),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["containers"][0]["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
        );
        assert_eq!(out["spec"]["containers"][0]["image"], "busybox:1");
        assert_eq!(out["spec"]["containers"][1]["name"], "side");
    }

    #[test]
    fn smp_changes_image_by_container_name() {
        let out = smp(
            "Pod",
            pod(),
            json!({"spec": {"containers": [{"name": "side", "image": "nginx:2"}]}}),
        )
        .unwrap();
        let cs = out["spec"]["containers"].as_array().unwrap();
        assert_eq!(cs.len(), 2);
        assert_eq!(cs[0]["name"], "main");
        assert_eq!(cs[1]["image"], "nginx:2");
    }

    #[test]
    fn smp_deletes_container_with_patch_delete() {
        let out = smp(
            "Pod",
            pod(),
            json!({"spec": {"containers": [{"name": "side", "$patch": "delete"}]}}),
        )
        .unwrap();
        let cs = out["spec"]["containers"].as_array().unwrap();
        assert_eq!(cs.len(), 1);
        assert_eq!(cs[0]["name"], "main");
    }

    #[test]
    fn smp_replace_directive_on_list() {
        let out = smp(
            "Pod",
            pod(),
            json!({"spec": {"containers": [{"name": "only", "image": "x"}, {"$patch": "replace"}]}}),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "only", "image": "x"}])
        );
    }

    #[test]
    fn smp_replace_directive_on_map() {
        let out = smp(
            "Pod",
            pod(),
            json!({"metadata": {"labels": {"$patch": "replace", "new": "1"}}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"new": "1"}));
    }

    #[test]
    fn smp_set_element_order_reorders_as_kubectl_apply_sends() {
        // kubectl apply: side first, then main, and a new container "third" between them.
        let out = smp(
            "Pod",
            pod(),
            json!({"spec": {
                "$setElementOrder/containers": [{"name": "side"}, {"name": "third"}, {"name": "main"}],
                "containers": [{"name": "third", "image": "t"}]
            }}),
        )
        .unwrap();
        let names: Vec<&str> = out["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["side", "third", "main"]);
    }

    #[test]
    fn smp_set_element_order_must_match_patch_list() {
        let err = smp(
            "Pod",
            pod(),
            json!({"spec": {
                "$setElementOrder/containers": [{"name": "main"}],
                "containers": [{"name": "other", "image": "t"}]
            }}),
        )
        .unwrap_err();
        assert_eq!(err.status_code(), 500);
        assert!(err.to_string().starts_with("The order in patch list:\n[map[image:t name:other]]\n doesn't match $setElementOrder list:\n[map[name:main]]"), "{err}");
    }

    #[test]
    fn smp_retain_keys_clears_other_volume_sources() {
        let out = smp(
            "Pod",
            pod(),
            json!({"spec": {"volumes": [{"name": "data", "$retainKeys": ["configMap", "name"],
                                          "configMap": {"name": "cm"}}]}}),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["volumes"],
            json!([{"name": "data", "configMap": {"name": "cm"}}])
        );
    }

    #[test]
    fn smp_retain_keys_must_list_patched_keys() {
        let err = smp(
            "Pod",
            pod(),
            json!({"spec": {"volumes": [{"name": "data", "$retainKeys": ["name"], "hostPath": {"path": "/x"}}]}}),
        )
        .unwrap_err();
        assert_eq!(
            err,
            PatchError::BadRequest("invalid patch format of retainKeys".into())
        );
    }

    #[test]
    fn smp_delete_from_primitive_list_finalizers() {
        let out = smp(
            "Pod",
            pod(),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a/x"]}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["b/y"]));
        let err = smp(
            "Pod",
            pod(),
            json!({"metadata": {"$deleteFromPrimitiveList": ["a/x"]}}),
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "invalid patch format of primitive list");
        assert_eq!(err.status_code(), 400);
    }

    #[test]
    fn smp_finalizers_merge_as_a_set() {
        let out = smp(
            "Pod",
            pod(),
            json!({"metadata": {"finalizers": ["c/z", "a/x"]}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["c/z", "a/x", "b/y"]));
    }

    #[test]
    fn smp_null_deletes_label_and_unmatched_null_is_ignored() {
        let out = smp(
            "Pod",
            pod(),
            json!({"metadata": {"labels": {"tier": null, "nope": null, "new": "v"}}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"app": "a", "new": "v"}));
    }

    #[test]
    fn smp_list_without_merge_key_is_replaced() {
        let out = smp(
            "Pod",
            pod(),
            json!({"spec": {"tolerations": [{"key": "k2", "operator": "Exists"}]}}),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["tolerations"],
            json!([{"key": "k2", "operator": "Exists"}])
        );
    }

    #[test]
    fn smp_owner_references_merge_by_uid() {
        let out = smp(
            "Pod",
            pod(),
            json!({"metadata": {"ownerReferences": [
                {"apiVersion": "v1", "kind": "Y", "name": "o2", "uid": "u2"},
                {"uid": "u1", "controller": true}
            ]}}),
        )
        .unwrap();
        let refs = out["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(refs.len(), 2);
        assert_eq!(refs[0]["uid"], "u2");
        assert_eq!(refs[1]["uid"], "u1");
        assert_eq!(refs[1]["controller"], true);
        assert_eq!(refs[1]["name"], "o1");
    }

    #[test]
    fn smp_service_ports_by_port_and_node_addresses_by_type() {
        let svc = json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443}]}});
        let out = smp(
            "Service",
            svc,
            json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["ports"],
            json!([{"port": 80, "targetPort": 9090}, {"port": 443}])
        );

        let node = json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                                     "conditions": [{"type": "Ready", "status": "False"}]}});
        let out = smp(
            "Node",
            node,
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"}],
                              "addresses": [{"type": "Hostname", "address": "n1"}]}}),
        )
        .unwrap();
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}])
        );
        assert_eq!(
            out["status"]["addresses"],
            json!([{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.1"}])
        );
    }

    #[test]
    fn smp_pod_status_conditions_by_type() {
        let p = json!({"status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}});
        let out = smp(
            "Pod",
            p,
            json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
        )
        .unwrap();
        assert_eq!(out["status"]["phase"], "Running");
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}])
        );
    }

    #[test]
    fn smp_missing_merge_key_and_bad_directive() {
        let err = smp(
            "Pod",
            pod(),
            json!({"spec": {"containers": [{"image": "x"}]}}),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "map: map[image:x] does not contain declared merge key: name"
        );
        let err = smp(
            "Pod",
            pod(),
            json!({"spec": {"containers": [{"name": "main", "$patch": "bogus"}]}}),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown patch type: bogus in map: map[$patch:bogus name:main]"
        );
    }

    #[test]
    fn smp_directives_do_not_leak_into_new_fields() {
        let out = smp(
            "Pod",
            pod(),
            json!({"spec": {"initContainers": [{"name": "gone", "$patch": "delete"}, {"name": "i", "image": "x"}]}}),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["initContainers"],
            json!([{"name": "i", "image": "x"}])
        );
    }

    #[test]
    fn smp_refused_for_custom_resources() {
        let err = apply_patch(
            "diengine.opendilab.org/v2alpha1",
            "DIJob",
            &json!({}),
            PatchType::StrategicMerge,
            b"{}",
        )
        .unwrap_err();
        assert_eq!(err.status_code(), 415);
        assert_eq!(
            err.to_string(),
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
        );
        assert!(is_strategic_kind("coordination.k8s.io/v1", "Lease"));
        assert!(!is_strategic_kind("apps/v1", "Deployment"));
        let err = apply_patch("v1", "Pod", &pod(), PatchType::Apply, b"{}").unwrap_err();
        assert_eq!(err.status_code(), 415);
    }

    #[test]
    fn smp_body_errors() {
        let err = smp("Pod", pod(), json!([1])).unwrap_err();
        assert_eq!(
            err,
            PatchError::BadRequest(
                "json: cannot unmarshal array into Go value of type map[string]interface {}".into()
            )
        );
        let err =
            apply_patch("v1", "Pod", &pod(), PatchType::StrategicMerge, b"{\"a\":").unwrap_err();
        assert_eq!(err.to_string(), "unexpected end of JSON input");
        let err = apply_patch("v1", "Pod", &pod(), PatchType::StrategicMerge, b"xyz").unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid character 'x' looking for beginning of value"
        );
    }

    #[test]
    fn merge_patch_null_deletes_and_objects_merge() {
        let out = apply_patch(
            "diengine.opendilab.org/v2alpha1",
            "DIJob",
            &json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"list": [1, 2]}}),
            PatchType::Merge,
            br#"{"metadata":{"labels":{"a":null,"c":"3"}},"spec":{"list":[3],"new":{"x":null,"y":1}}}"#,
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"metadata": {"labels": {"b": "2", "c": "3"}}, "spec": {"list": [3], "new": {"y": 1}}})
        );
        let err = apply_patch("v1", "Pod", &pod(), PatchType::Merge, b"null").unwrap_err();
        assert_eq!(err, PatchError::BadRequest("Invalid JSON Patch".into()));
        let err = apply_patch("v1", "Pod", &pod(), PatchType::Merge, b"{").unwrap_err();
        assert_eq!(err, PatchError::BadRequest("Invalid JSON Patch".into()));
    }

    fn jp(doc: Value, ops: Value) -> Result<Value, PatchError> {
        apply_patch(
            "v1",
            "ConfigMap",
            &doc,
            PatchType::Json,
            ops.to_string().as_bytes(),
        )
    }

    #[test]
    fn json_patch_add_remove_replace() {
        let doc = json!({"metadata": {"name": "c"}, "data": {"a": "1"}, "list": [1, 2]});
        let out = jp(
            doc,
            json!([
                {"op": "add", "path": "/data/b", "value": "2"},
                {"op": "remove", "path": "/data/a"},
                {"op": "replace", "path": "/list/0", "value": 9},
                {"op": "add", "path": "/list/-", "value": 3},
                {"op": "add", "path": "/metadata/labels", "value": {"x~y/z": "1"}},
                {"op": "test", "path": "/metadata/labels/x~0y~1z", "value": "1"},
                {"op": "move", "from": "/data/b", "path": "/data/c"},
                {"op": "copy", "from": "/data/c", "path": "/data/d"}
            ]),
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"metadata": {"name": "c", "labels": {"x~y/z": "1"}}, "data": {"c": "2", "d": "2"}, "list": [9, 2, 3]})
        );
    }

    #[test]
    fn json_patch_errors_match_apiserver() {
        let doc = json!({"metadata": {"name": "c"}, "list": [1]});
        let err = jp(
            doc.clone(),
            json!([{"op": "test", "path": "/metadata/name", "value": "x"}]),
        )
        .unwrap_err();
        assert_eq!(err.status_code(), 422);
        assert_eq!(
            err.to_string(),
            "testing value /metadata/name failed: test failed"
        );
        let status = err.to_status();
        assert_eq!(
            status["message"],
            "the server rejected our request due to an error in our request"
        );
        assert_eq!(status["reason"], "Invalid");
        // kube-apiserver drops the patch's own error: empty details, no causes.
        assert_eq!(status["details"], json!({}));

        let err = jp(
            doc.clone(),
            json!([{"op": "remove", "path": "/metadata/labels"}]),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "error in remove for path: '/metadata/labels': Unable to remove nonexistent key: labels: missing value"
        );
        let err = jp(
            doc.clone(),
            json!([{"op": "add", "path": "/spec/x", "value": 1}]),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "add operation does not apply: doc is missing path: \"/spec/x\": missing value"
        );
        let err = jp(
            doc.clone(),
            json!([{"op": "replace", "path": "/list/3", "value": 1}]),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "replace operation does not apply: doc is missing key: /list/3: missing value"
        );
        let err = jp(
            doc.clone(),
            json!([{"op": "add", "path": "/list/x", "value": 1}]),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "error in add for path: '/list/x': value was not a proper array index: 'x': strconv.Atoi: parsing \"x\": invalid syntax"
        );
        let err = jp(doc.clone(), json!([{"op": "frob", "path": "/a"}])).unwrap_err();
        assert_eq!(err.to_string(), "Unexpected kind: frob");
        let err = jp(doc.clone(), json!({"op": "add"})).unwrap_err();
        assert_eq!(
            err,
            PatchError::BadRequest(
                "json: cannot unmarshal object into Go value of type jsonpatch.Patch".into()
            )
        );
        // evanphx v4 lets replace create a missing object key.
        let out = jp(
            doc,
            json!([{"op": "replace", "path": "/metadata/uid", "value": "u"}]),
        )
        .unwrap();
        assert_eq!(out["metadata"]["uid"], "u");
    }

    #[test]
    fn json_patch_test_of_missing_key_with_null_passes() {
        let doc = json!({"metadata": {"name": "c"}});
        assert!(
            jp(
                doc.clone(),
                json!([{"op": "test", "path": "/metadata/labels", "value": null}])
            )
            .is_ok()
        );
        assert!(
            jp(
                doc,
                json!([{"op": "test", "path": "/metadata", "value": {"name": "c"}}])
            )
            .is_ok()
        );
    }
}
