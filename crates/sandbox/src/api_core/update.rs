//! PUT and the update loop every write of an existing object goes through (`guaranteed_update`):
//! optimistic concurrency, the status split, generation, managedFields, finalizer-driven removal,
//! and the kind rules for updates (immutable pod spec fields).
//!
//! PATCH and apply build the new object in `patch_apply.rs` and come here to write it.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::admission;
use crate::api_crd;
use crate::api_kinds::now_rfc3339;
use crate::api_status::ApiError;
use crate::registry::ResourceInfo;
use crate::store::{StoreError, object_rv};

use super::api::Api;
use super::object_meta::{finalizers, meta_mut, meta_str, same_ignoring_rv, set_label, without};
use super::options::{WriteOptions, Written};
use super::resource_rules::{
    allow_create_on_update, from_view, has_status, is_core, is_crd, storage_key, to_view,
    tracks_generation,
};

impl Api {
    /// PUT on the main resource or a subresource (`status`).
    pub fn update(
        &self,
        info: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
        sub: Option<&str>,
        body: Value,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        self.guaranteed_update(info, ns, name, sub, opts, true, &|_| Ok(body.clone()))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn guaranteed_update(
        &self,
        info: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
        sub: Option<&str>,
        opts: &WriteOptions,
        is_put: bool,
        mk: &dyn Fn(Option<&Value>) -> Result<Value, ApiError>,
    ) -> Result<Written, ApiError> {
        let res = storage_key(info);
        let key = Self::key(ns, name);
        for _ in 0..64 {
            let Some(current) = self.store.get(&res, &key) else {
                if is_put && sub.is_none() && allow_create_on_update(info) {
                    let mut body = mk(None)?;
                    if let Some(m) = body.get_mut("metadata").and_then(Value::as_object_mut) {
                        m.remove("resourceVersion");
                    }
                    return self.create(info, ns, body, opts);
                }
                return Err(ApiError::not_found(&info.group, &info.plural, name));
            };
            let cur_view = to_view(info, &current);
            let mut proposed = mk(Some(&cur_view))?;
            Self::check_type_meta(info, &mut proposed)?;
            let body_name = meta_str(&proposed, "name");
            if body_name != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({body_name}) does not match the name on the URL ({name})"
                )));
            }
            Self::set_namespace(info, ns, &mut proposed)?;
            let cur_rv = object_rv(&current);
            let body_rv = meta_str(&proposed, "resourceVersion").to_string();
            let precondition = !body_rv.is_empty();
            if precondition {
                if body_rv.parse::<u64>().ok() != Some(cur_rv) {
                    return Err(ApiError::stale(&info.group, &info.plural, name));
                }
            } else if info.is_custom() {
                return Err(ApiError::invalid1(
                    &info.group,
                    &info.kind,
                    name,
                    "metadata.resourceVersion",
                    "FieldValueInvalid",
                    "Invalid value: 0x0: must be specified for an update",
                ));
            }
            let body_uid = meta_str(&proposed, "uid");
            let cur_uid = meta_str(&current, "uid");
            if !body_uid.is_empty() && body_uid != cur_uid {
                return Err(ApiError::conflict(
                    &info.group,
                    &info.plural,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {body_uid}, UID in object meta: {cur_uid}"
                    ),
                ));
            }
            let mut warnings = Vec::new();
            let mut decoded = self.decode(info, proposed, opts, &mut warnings)?;
            let attrs = admission::Attributes {
                info,
                sub,
                operation: "UPDATE",
                namespace: ns,
                name,
                old: Some(&cur_view),
                dry_run: opts.dry_run,
            };
            admission::admit(
                &self.store,
                admission::Phase::Mutating,
                &attrs,
                &mut decoded,
                &mut warnings,
            )?;
            let mut new = from_view(info, decoded);
            self.prepare_for_update(info, sub, &current, &mut new)?;
            let mut view = (*to_view(info, &Arc::new(new.clone()))).clone();
            self.validate(info, &view, sub == Some("status"))?;
            // The status subresource cannot change what the rules check (the spec), and a
            // rule added later must not block status writes of older objects.
            if sub != Some("status") {
                self.check_cel(info, &view, Some(&cur_view))?;
            }
            admission::admit(
                &self.store,
                admission::Phase::Validating,
                &attrs,
                &mut view,
                &mut warnings,
            )?;
            if same_ignoring_rv(&new, &current) {
                return Ok(Written {
                    body: (*cur_view).clone(),
                    code: 200,
                    warnings,
                });
            }
            if opts.dry_run {
                return Ok(Written {
                    body: (*to_view(info, &Arc::new(new))).clone(),
                    code: 200,
                    warnings,
                });
            }
            let result = if Self::should_remove(&new) {
                // Answered with the update as written (its last finalizer gone), as
                // kube-apiserver's deleteWithoutFinalizers does; the DELETED event carries the
                // last stored state.
                let written = Arc::new(new);
                self.store
                    .remove(&res, &key, cur_rv)
                    .inspect(|last| self.after_remove(info, last))
                    .map(|_| written)
            } else {
                self.store.replace(&res, cur_rv, new).inspect(|stored| {
                    if is_crd(info) {
                        self.register_crd(stored);
                    }
                })
            };
            match result {
                Ok(stored) => {
                    return Ok(Written {
                        body: (*to_view(info, &stored)).clone(),
                        code: 200,
                        warnings,
                    });
                }
                // A PUT names the version it replaces: it is stale. A patch is re-applied to the
                // newer object, as the API server does; if the patch itself names a version,
                // the retry refuses it as stale above.
                Err(StoreError::Conflict { .. }) if precondition && is_put => {
                    return Err(ApiError::stale(&info.group, &info.plural, name));
                }
                Err(StoreError::Conflict { .. } | StoreError::NotFound) => continue,
                Err(e) => return Err(ApiError::internal(e.to_string())),
            }
        }
        Err(ApiError::internal(
            "too many concurrent updates, please retry",
        ))
    }

    /// An object being deleted whose last finalizer went (and no graceful period pending).
    fn should_remove(obj: &Value) -> bool {
        obj.pointer("/metadata/deletionTimestamp").is_some()
            && finalizers(obj).is_empty()
            && obj
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                == 0
            && obj
                .pointer("/spec/finalizers")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty)
    }

    fn prepare_for_update(
        &self,
        info: &ResourceInfo,
        sub: Option<&str>,
        current: &Value,
        new: &mut Value,
    ) -> Result<(), ApiError> {
        if new
            .pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
            && let Some(fields) = current.pointer("/metadata/managedFields").cloned()
        {
            meta_mut(new).insert("managedFields".into(), fields);
        }
        let status_write = sub == Some("status");
        if status_write {
            if info.is_custom() {
                let status = new.get("status").cloned();
                let mut merged = current.clone();
                match status {
                    Some(s) => merged["status"] = s,
                    None => {
                        if let Some(m) = merged.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
                merged["apiVersion"] = new["apiVersion"].clone();
                *new = merged;
            } else {
                new["spec"] = current.get("spec").cloned().unwrap_or(Value::Null);
                if new["spec"].is_null()
                    && let Some(m) = new.as_object_mut()
                {
                    m.remove("spec");
                }
                if is_core(info, "pods") {
                    let owners = current.pointer("/metadata/ownerReferences").cloned();
                    let meta = meta_mut(new);
                    match owners {
                        Some(o) => meta.insert("ownerReferences".into(), o),
                        None => meta.remove("ownerReferences"),
                    };
                }
            }
        } else if has_status(info) {
            match current.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    if let Some(m) = new.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
        }
        // System metadata comes from the stored object.
        {
            let cur_meta = current
                .get("metadata")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let meta = meta_mut(new);
            for k in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "namespace",
                "name",
                "generateName",
            ] {
                match cur_meta.get(k) {
                    Some(v) => meta.insert(k.to_string(), v.clone()),
                    None => meta.remove(k),
                };
            }
        }
        if current.pointer("/metadata/deletionTimestamp").is_some() {
            let old: Vec<String> = finalizers(current);
            let added: Vec<String> = finalizers(new)
                .into_iter()
                .filter(|f| !old.contains(f))
                .collect();
            if !added.is_empty() {
                let list: Vec<String> = added.iter().map(|f| format!("{f:?}")).collect();
                return Err(ApiError::invalid(
                    &info.group,
                    &info.kind,
                    meta_str(current, "name"),
                    vec![crate::api_status::forbidden_field(
                        "metadata.finalizers",
                        &format!(
                            "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                            list.join(", ")
                        ),
                    )],
                ));
            }
        }
        if tracks_generation(info) {
            let ignore: &[&str] = if has_status(info) {
                &["metadata", "status", "apiVersion"]
            } else {
                &["metadata", "apiVersion"]
            };
            let generation = current
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let bumped = if without(current, ignore) != without(new, ignore) {
                generation + 1
            } else {
                generation
            };
            meta_mut(new).insert("generation".into(), json!(bumped));
        }
        if is_crd(info) && !status_write {
            let old_status = current.get("status").cloned();
            if self.validate(info, new, false).is_ok() {
                new["status"] = api_crd::crd_status(new, old_status.as_ref(), &now_rfc3339());
            }
        }
        if info.group == "scheduling.k8s.io" && info.plural == "priorityclasses" {
            // `ValidatePriorityClassUpdate`: a class's value and policy are fixed.
            let mut causes = Vec::new();
            if current["value"] != new["value"] {
                causes.push(crate::api_status::forbidden_field(
                    "value",
                    "may not be changed in an update.",
                ));
            }
            if current["preemptionPolicy"] != new["preemptionPolicy"] {
                causes.push(crate::api_status::invalid_value(
                    "preemptionPolicy",
                    &new["preemptionPolicy"],
                    "field is immutable",
                ));
            }
            if !causes.is_empty() {
                return Err(ApiError::invalid(
                    &info.group,
                    &info.kind,
                    meta_str(current, "name"),
                    causes,
                ));
            }
        }
        if info.group.is_empty() && !status_write {
            match info.plural.as_str() {
                "pods" => check_pod_update(current, new)?,
                "services" => {
                    let cur_ip = current["spec"]["clusterIP"].clone();
                    let new_ip = &new["spec"]["clusterIP"];
                    if new_ip.is_null() || new_ip == "" {
                        new["spec"]["clusterIP"] = cur_ip;
                        new["spec"]["clusterIPs"] = current["spec"]["clusterIPs"].clone();
                    } else if *new_ip != cur_ip {
                        return Err(ApiError::invalid(
                            "",
                            "Service",
                            meta_str(current, "name"),
                            vec![crate::api_status::invalid_value(
                                "spec.clusterIPs[0]",
                                new_ip,
                                "may not change once set",
                            )],
                        ));
                    }
                    if new["spec"]["clusterIPs"].is_null() {
                        new["spec"]["clusterIPs"] = current["spec"]["clusterIPs"].clone();
                    }
                }
                "namespaces" => {
                    new["spec"] = current["spec"].clone();
                    set_label(
                        new,
                        "kubernetes.io/metadata.name",
                        meta_str(current, "name"),
                    );
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// Pod spec updates may only change a few fields.
fn check_pod_update(current: &Value, new: &Value) -> Result<(), ApiError> {
    let mutable = |spec: &Value| {
        let mut s = spec.clone();
        if let Some(m) = s.as_object_mut() {
            for k in [
                "activeDeadlineSeconds",
                "tolerations",
                "terminationGracePeriodSeconds",
            ] {
                m.remove(k);
            }
            for k in ["containers", "initContainers"] {
                if let Some(cs) = m.get_mut(k).and_then(Value::as_array_mut) {
                    for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                        c.remove("image");
                    }
                }
            }
        }
        s
    };
    if mutable(&current["spec"]) == mutable(&new["spec"]) {
        return Ok(());
    }
    Err(ApiError::invalid(
        "",
        "Pod",
        meta_str(current, "name"),
        vec![crate::api_status::forbidden_field(
            "spec",
            "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
        )],
    ))
}
