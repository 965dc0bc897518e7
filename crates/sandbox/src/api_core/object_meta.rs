//! Small helpers over an object's JSON: metadata fields, finalizers, comparisons that ignore some
//! keys or the resourceVersion, and field errors as Status causes.
//!
//! Must not know any resource's rules.

use serde_json::{Map, Value, json};

use crate::api_status::Cause;
use crate::schema::FieldError;

pub(super) fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

pub(super) fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = json!({});
    }
    let Value::Object(map) = obj else {
        unreachable!("just made an object")
    };
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    match meta {
        Value::Object(m) => m,
        _ => unreachable!("just made an object"),
    }
}

/// Sets one label, creating `metadata.labels` when absent.
pub(super) fn set_label(obj: &mut Value, key: &str, value: &str) {
    let labels = meta_mut(obj).entry("labels").or_insert_with(|| json!({}));
    if let Some(labels) = labels.as_object_mut() {
        labels.insert(key.into(), json!(value));
    }
}

pub(super) fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(str::to_string))
        .collect()
}

pub(super) fn set_finalizers(obj: &mut Value, list: &[String]) {
    let meta = meta_mut(obj);
    if list.is_empty() {
        meta.remove("finalizers");
    } else {
        meta.insert("finalizers".into(), json!(list));
    }
}

pub(super) fn field_errors_to_causes(errs: Vec<FieldError>) -> Vec<Cause> {
    errs.into_iter()
        .map(|e| Cause {
            reason: e.kind.reason().to_string(),
            message: e.body(),
            field: e.field.clone(),
        })
        .collect()
}

pub(super) fn without(obj: &Value, keys: &[&str]) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        for k in keys {
            m.remove(*k);
        }
    }
    v
}

pub(super) fn same_ignoring_rv(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
        v
    };
    strip(a) == strip(b)
}
