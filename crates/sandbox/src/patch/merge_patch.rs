//! RFC 7386 JSON merge patch, as json-patch v4's MergePatch (which also drops nulls inside objects
//! nested in arrays it inserts).
//!
//! Must not depend on JSON patch or strategic merge patch.

use serde_json::{Map, Value};

use super::types::PatchError;

pub(super) fn merge_patch(original: &Value, body: &[u8]) -> Result<Value, PatchError> {
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
