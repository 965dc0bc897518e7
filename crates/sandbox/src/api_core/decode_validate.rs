//! From a request body to a checked object: type meta, namespace, decoding (typed round trip of
//! built-ins, pruning and defaults of custom resources, unknown fields per `fieldValidation`),
//! metadata/schema/kind validation, CEL rules, and the namespace a create goes into.
//!
//! Checks only: must not store anything.

use serde_json::{Value, json};

use crate::api_crd;
use crate::api_kinds;
use crate::api_status::ApiError;
use crate::registry::ResourceInfo;
use crate::schema;
use crate::store::ResKey;

use super::api::Api;
use super::object_meta::{field_errors_to_causes, meta_mut, meta_str};
use super::options::{FieldValidation, WriteOptions};
use super::resource_rules::{is_crd, version_key};

impl Api {
    pub(super) fn check_type_meta(info: &ResourceInfo, obj: &mut Value) -> Result<(), ApiError> {
        let Some(map) = obj.as_object_mut() else {
            return Err(ApiError::bad_request(format!(
                "{} in version \"{}\" cannot be handled as a {}: the object must be a JSON object",
                info.kind, info.version, info.kind
            )));
        };
        let api_version = info.api_version();
        match map.get("apiVersion").and_then(Value::as_str) {
            None | Some("") => {}
            Some(v) if v == api_version => {}
            Some(v) => {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({v}) does not match the expected API version ({api_version})"
                )));
            }
        }
        match map.get("kind").and_then(Value::as_str) {
            None | Some("") => {}
            Some(k) if k == info.kind => {}
            Some(k) => {
                return Err(ApiError::bad_request(format!(
                    "the kind in the data ({k}) does not match the expected kind ({})",
                    info.kind
                )));
            }
        }
        map.insert("apiVersion".into(), json!(api_version));
        map.insert("kind".into(), json!(info.kind));
        Ok(())
    }

    pub(super) fn set_namespace(
        info: &ResourceInfo,
        ns: Option<&str>,
        obj: &mut Value,
    ) -> Result<(), ApiError> {
        let meta = meta_mut(obj);
        if info.namespaced {
            let ns = ns.unwrap_or_default();
            match meta.get("namespace").and_then(Value::as_str) {
                Some(given) if !given.is_empty() && given != ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {
                    meta.insert("namespace".into(), json!(ns));
                }
            }
        } else {
            meta.remove("namespace");
        }
        Ok(())
    }

    /// Decodes a body into canonical form: typed decoding of built-ins, pruning and defaults of
    /// custom resources, with unknown fields reported per `fieldValidation`.
    pub(super) fn decode(
        &self,
        info: &ResourceInfo,
        obj: Value,
        opts: &WriteOptions,
        warnings: &mut Vec<String>,
    ) -> Result<Value, ApiError> {
        let (mut obj, unknown) = if info.is_custom() {
            let mut obj = obj;
            let unknown = match self.schema_for(info) {
                Some(s) => {
                    let dropped = s.prune(&mut obj);
                    s.apply_defaults(&mut obj);
                    dropped
                }
                None => Vec::new(),
            };
            (obj, unknown)
        } else {
            match api_kinds::typed_roundtrip(&info.api_version(), &info.kind, &obj) {
                Some(Ok(pair)) => pair,
                Some(Err(e)) => {
                    return Err(ApiError::bad_request(format!(
                        "{} in version \"{}\" cannot be handled as a {}: {e}",
                        info.kind, info.version, info.kind
                    )));
                }
                None => (obj, Vec::new()),
            }
        };
        match opts.field_validation {
            FieldValidation::Strict if !unknown.is_empty() => {
                let list: Vec<String> = unknown
                    .iter()
                    .map(|p| format!("unknown field \"{p}\""))
                    .collect();
                return Err(ApiError::bad_request(format!(
                    "strict decoding error: {}",
                    list.join(", ")
                )));
            }
            FieldValidation::Warn => {
                warnings.extend(unknown.iter().map(|p| format!("unknown field \"{p}\"")));
            }
            _ => {}
        }
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            // managedFields are the server's: kept only as server-side apply writes them (an
            // update that leaves them out keeps the stored ones, see prepare_for_update).
            if !meta.get("managedFields").is_some_and(Value::is_array) {
                meta.remove("managedFields");
            }
            meta.remove("selfLink");
        }
        if info.group.is_empty() {
            match info.plural.as_str() {
                "pods" => api_kinds::default_pod(&mut obj),
                "services" => api_kinds::default_service(&mut obj),
                "secrets" => api_kinds::fold_string_data(&mut obj),
                _ => {}
            }
        }
        if info.group == "scheduling.k8s.io" && info.plural == "priorityclasses" {
            api_kinds::default_priority_class(&mut obj);
        }
        if is_crd(info) {
            api_crd::default_crd(&mut obj);
        }
        Ok(obj)
    }

    pub(super) fn validate(
        &self,
        info: &ResourceInfo,
        obj: &Value,
        status_only: bool,
    ) -> Result<(), ApiError> {
        let name = meta_str(obj, "name").to_string();
        let rule = api_kinds::name_rule(&info.group, &info.plural);
        let mut causes = field_errors_to_causes(schema::validate_object_meta_scoped(
            obj.get("metadata").unwrap_or(&Value::Null),
            rule,
            info.namespaced,
        ));
        if info.is_custom() {
            if let Some(s) = self.schema_for(info) {
                let errs = if status_only {
                    s.validate_status(obj.get("status").unwrap_or(&Value::Null))
                } else {
                    s.validate(obj)
                };
                causes.extend(field_errors_to_causes(errs));
            }
        } else if is_crd(info) {
            causes.extend(api_crd::validate_crd(obj));
        } else if !status_only {
            causes.extend(api_kinds::validate_builtin(&info.group, &info.plural, obj));
        }
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid(&info.group, &info.kind, &name, causes))
        }
    }

    /// CEL `x-kubernetes-validations` of a custom resource, after the schema's own checks.
    pub(super) fn check_cel(
        &self,
        info: &ResourceInfo,
        obj: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let rules = self
            .cel
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&version_key(info))
            .cloned();
        let Some(rules) = rules else {
            return Ok(());
        };
        let causes = rules.check(obj, old);
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid(
                &info.group,
                &info.kind,
                meta_str(obj, "name"),
                causes,
            ))
        }
    }

    pub(super) fn check_namespace_for_create(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
    ) -> Result<(), ApiError> {
        let Some(nsobj) = self.store.get(
            &ResKey::new("", "namespaces"),
            &(String::new(), ns.to_string()),
        ) else {
            return Err(ApiError::not_found("", "namespaces", ns));
        };
        if nsobj.pointer("/metadata/deletionTimestamp").is_some() {
            let mut e = ApiError::forbidden(
                &info.group,
                &info.plural,
                name,
                &format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ),
            );
            if let Some(d) = e.details.as_mut().and_then(Value::as_object_mut) {
                d.insert(
                    "causes".into(),
                    json!([{"reason": "NamespaceTerminating", "message": format!("namespace {ns} is being terminated"), "field": "metadata.namespace"}]),
                );
            }
            return Err(e);
        }
        Ok(())
    }
}
