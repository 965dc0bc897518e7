//! ObjectMeta validation (apimachinery `pkg/api/validation/objectmeta.go`): name and
//! generateName, namespace by scope, generation, labels, annotations (keys and total size),
//! ownerReferences and finalizers, with the apiserver's paths and messages.
//!
//! Checks metadata only; name syntax comes from `names.rs`.

use serde_json::Value;

use super::errors::{FieldError, FieldErrorKind};
use super::names::{
    NameRule, is_dns1123_label, is_qualified_name, is_valid_label_value, name_errors,
};

const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

fn str_map(v: Option<&Value>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = match v {
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect(),
        _ => Vec::new(),
    };
    out.sort();
    out
}

pub(super) fn object_meta_errors(
    meta: &Value,
    rule: NameRule,
    namespaced: Option<bool>,
    fld: &str,
) -> Vec<FieldError> {
    use FieldErrorKind::*;
    let mut errs = Vec::new();
    let at = |k: &str| format!("{fld}.{k}");
    let get_str = |k: &str| meta.get(k).and_then(Value::as_str).unwrap_or_default();
    let generate_name = get_str("generateName");
    if !generate_name.is_empty() {
        for m in name_errors(rule, generate_name, true) {
            errs.push(FieldError::new(
                Invalid,
                &at("generateName"),
                Some(generate_name.into()),
                &m,
            ));
        }
    }
    let name = get_str("name");
    if name.is_empty() {
        if generate_name.is_empty() {
            errs.push(FieldError::new(
                Required,
                &at("name"),
                None,
                "name or generateName is required",
            ));
        }
    } else {
        for m in name_errors(rule, name, false) {
            errs.push(FieldError::new(Invalid, &at("name"), Some(name.into()), &m));
        }
    }
    let namespace = get_str("namespace");
    match namespaced {
        Some(true) if namespace.is_empty() => {
            errs.push(FieldError::new(Required, &at("namespace"), None, ""))
        }
        Some(true) => {
            for m in is_dns1123_label(namespace) {
                errs.push(FieldError::new(
                    Invalid,
                    &at("namespace"),
                    Some(namespace.into()),
                    &m,
                ));
            }
        }
        Some(false) if !namespace.is_empty() => errs.push(FieldError::new(
            Forbidden,
            &at("namespace"),
            None,
            "not allowed on this type",
        )),
        _ => {}
    }
    if let Some(g) = meta.get("generation").and_then(Value::as_i64)
        && g < 0
    {
        errs.push(FieldError::new(
            Invalid,
            &at("generation"),
            Some(g.into()),
            "must be greater than or equal to 0",
        ));
    }
    // Each of `messages` an Invalid error of `field`, showing `value`.
    let invalid = |errs: &mut Vec<FieldError>, field: &str, value: &str, messages: Vec<String>| {
        for m in messages {
            errs.push(FieldError::new(Invalid, &at(field), Some(value.into()), &m));
        }
    };
    for (k, v) in str_map(meta.get("labels")) {
        invalid(&mut errs, "labels", &k, is_qualified_name(&k));
        invalid(&mut errs, "labels", &v, is_valid_label_value(&v));
    }
    let annotations = str_map(meta.get("annotations"));
    for (k, _) in &annotations {
        invalid(
            &mut errs,
            "annotations",
            k,
            is_qualified_name(&k.to_lowercase()),
        );
    }
    let total: usize = annotations.iter().map(|(k, v)| k.len() + v.len()).sum();
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errs.push(FieldError::new(
            TooLong,
            &at("annotations"),
            None,
            &format!("may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"),
        ));
    }
    if let Some(Value::Array(refs)) = meta.get("ownerReferences") {
        let fp = at("ownerReferences");
        for r in refs {
            let s = |k: &str| {
                r.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            let api_version = s("apiVersion");
            let version = match api_version.split('/').collect::<Vec<_>>().as_slice() {
                [v] => v.to_string(),
                [_, v] => v.to_string(),
                _ => String::new(),
            };
            if version.is_empty() {
                errs.push(FieldError::new(
                    Invalid,
                    &format!("{fp}.apiVersion"),
                    Some(api_version.into()),
                    "version must not be empty",
                ));
            }
            for (k, what) in [("kind", "kind"), ("name", "name"), ("uid", "uid")] {
                if s(k).is_empty() {
                    errs.push(FieldError::new(
                        Invalid,
                        &format!("{fp}.{k}"),
                        Some("".into()),
                        &format!("{what} must not be empty"),
                    ));
                }
            }
        }
    }
    if let Some(Value::Array(fins)) = meta.get("finalizers") {
        let fp = at("finalizers");
        for f in fins.iter().filter_map(Value::as_str) {
            for m in is_qualified_name(f) {
                errs.push(FieldError::new(Invalid, &fp, Some(f.into()), &m));
            }
        }
    }
    errs
}

/// The metadata checks every kind gets on create (`ValidateObjectMetaAccessor`, without the
/// namespace checks, which depend on scope): name (required unless generateName), name format,
/// generation, labels, annotations (keys and total size), ownerReferences, finalizers.
pub fn validate_object_meta(meta: &Value, rule: NameRule) -> Vec<FieldError> {
    object_meta_errors(meta, rule, None, "metadata")
}

/// As [`validate_object_meta`], plus the namespace rule for the resource's scope: required (and a
/// DNS-1123 label) when namespaced, forbidden when cluster-scoped.
pub fn validate_object_meta_scoped(
    meta: &Value,
    rule: NameRule,
    namespaced: bool,
) -> Vec<FieldError> {
    object_meta_errors(meta, rule, Some(namespaced), "metadata")
}
