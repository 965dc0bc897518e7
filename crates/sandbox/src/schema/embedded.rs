//! Embedded resources (`x-kubernetes-embedded-resource`, apiextensions `schema/objectmeta`):
//! apiVersion, kind and ObjectMeta checks of objects nested in a custom resource.
//!
//! Must not run schema validation; ObjectMeta rules come from `objectmeta.rs`.

use serde_json::{Map, Value};

use super::errors::{FieldError, FieldErrorKind};
use super::names::{NameRule, is_dns1035_label};
use super::node::{Node, child_path};
use super::objectmeta::object_meta_errors;

pub(super) fn validate_embedded(s: &Node, path: &str, x: &Value, out: &mut Vec<FieldError>) {
    match x {
        Value::Object(m) => {
            if s.embedded {
                validate_embedded_resource(path, m, out);
            }
            for (k, v) in m {
                if let Some(p) = s.properties.get(k) {
                    validate_embedded(p, &child_path(path, k), v, out);
                } else if let Some(add) = s.additional_schema() {
                    validate_embedded(add, &format!("{path}[{k}]"), v, out);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = &s.items {
                for (i, v) in a.iter().enumerate() {
                    validate_embedded(items, &format!("{path}[{i}]"), v, out);
                }
            }
        }
        _ => {}
    }
}

/// `v` if it is a non-empty string; else the error apiVersion and kind both get (not a string,
/// or empty), and `None`.
fn non_empty_string<'a>(path: &str, v: &'a Value, out: &mut Vec<FieldError>) -> Option<&'a str> {
    let message = match v.as_str() {
        None => "must be a string",
        Some("") => "must not be empty",
        Some(s) => return Some(s),
    };
    out.push(FieldError::new(
        FieldErrorKind::Invalid,
        path,
        Some(v.clone()),
        message,
    ));
    None
}

fn validate_embedded_resource(path: &str, m: &Map<String, Value>, out: &mut Vec<FieldError>) {
    use FieldErrorKind::*;
    let av = child_path(path, "apiVersion");
    let kd = child_path(path, "kind");
    if !m.contains_key("apiVersion") {
        out.push(FieldError::new(Required, &av, None, "must not be empty"));
    }
    if !m.contains_key("kind") {
        out.push(FieldError::new(Required, &kd, None, "must not be empty"));
    }
    for (k, v) in m {
        match k.as_str() {
            "apiVersion" => {
                if let Some(s) = non_empty_string(&av, v, out)
                    && s.matches('/').count() > 1
                {
                    out.push(FieldError::new(
                        Invalid,
                        &av,
                        Some(v.clone()),
                        &format!("unexpected GroupVersion string: {s}"),
                    ));
                }
            }
            "kind" => {
                if let Some(s) = non_empty_string(&kd, v, out) {
                    let errs = is_dns1035_label(&s.to_lowercase());
                    if !errs.is_empty() {
                        out.push(FieldError::new(
                            Invalid,
                            &kd,
                            Some(v.clone()),
                            &format!(
                                "may have mixed case, but should otherwise match: {}",
                                errs.join(",")
                            ),
                        ));
                    }
                }
            }
            "metadata" => {
                let mp = child_path(path, "metadata");
                match v {
                    Value::Object(meta) => {
                        let mut meta = meta.clone();
                        if meta
                            .get("name")
                            .and_then(Value::as_str)
                            .is_none_or(str::is_empty)
                        {
                            meta.insert("name".into(), Value::String("fakename".into()));
                        }
                        let namespaced = meta
                            .get("namespace")
                            .and_then(Value::as_str)
                            .is_some_and(|n| !n.is_empty());
                        out.extend(object_meta_errors(
                            &Value::Object(meta),
                            NameRule::PathSegment,
                            Some(namespaced),
                            &mp,
                        ));
                    }
                    other => out.push(FieldError::new(
                        Invalid,
                        &mp,
                        Some(other.clone()),
                        "json: cannot unmarshal into Go value of type v1.ObjectMeta",
                    )),
                }
            }
            _ => {}
        }
    }
}
