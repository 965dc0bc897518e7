//! DELETE of one object or a collection: preconditions, graceful pod deletion, finalizers and
//! propagation policies (orphan, foreground), protected namespaces, the response body, and the
//! namespace controller's last step.
//!
//! Must not collect garbage itself: that is `crate::gc`.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::api_crd;
use crate::api_kinds::{self, now_rfc3339};
use crate::api_status::ApiError;
use crate::registry::ResourceInfo;
use crate::store::{ResKey, StoreError, object_rv};

use super::api::Api;
use super::object_meta::{finalizers, meta_mut, meta_str, set_finalizers};
use super::options::{DeleteOpts, FOREGROUND, ListOpts, ORPHAN, Written};
use super::resource_rules::{is_core, is_crd, returns_deleted_object, storage_key, to_view};

const PROTECTED_NAMESPACES: [&str; 3] = ["default", "kube-system", "kube-public"];

impl Api {
    /// DELETE one object.
    pub fn delete(
        &self,
        info: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
        o: &DeleteOpts,
    ) -> Result<Written, ApiError> {
        let res = storage_key(info);
        let key = Self::key(ns, name);
        if is_core(info, "namespaces") && PROTECTED_NAMESPACES.contains(&name) {
            return Err(ApiError::forbidden(
                "",
                "namespaces",
                name,
                "this namespace may not be deleted",
            ));
        }
        for _ in 0..64 {
            let Some(current) = self.store.get(&res, &key) else {
                return Err(ApiError::not_found(&info.group, &info.plural, name));
            };
            // kube-apiserver checks delete preconditions early (rest.BeforeDelete), naming the
            // resource by its kind.
            let preconditions = [
                (&o.uid, "uid", "UID", "deleted and then recreated"),
                (
                    &o.resource_version,
                    "resourceVersion",
                    "ResourceVersion",
                    "modified",
                ),
            ];
            for (wanted, field, shown, meaning) in preconditions {
                let Some(wanted) = wanted.as_deref().filter(|w| !w.is_empty()) else {
                    continue;
                };
                let actual = meta_str(&current, field);
                if wanted != actual {
                    return Err(ApiError::conflict(
                        &info.group,
                        &info.kind,
                        name,
                        &format!(
                            "the {shown} in the precondition ({wanted}) does not match the {shown} in record ({actual}). The object might have been {meaning}"
                        ),
                    ));
                }
            }
            let cur_rv = object_rv(&current);
            let mut new = (*current).clone();
            let deleting = current.pointer("/metadata/deletionTimestamp").is_some();
            if is_core(info, "namespaces") {
                if deleting {
                    return Ok(self.delete_response(info, &current, false));
                }
                // kube-apiserver's namespace storage sets only the timestamp and the phase.
                meta_mut(&mut new).insert("deletionTimestamp".into(), json!(now_rfc3339()));
                new["status"]["phase"] = json!("Terminating");
                if o.dry_run {
                    return Ok(self.delete_response(info, &Arc::new(new), false));
                }
                match self.store.replace(&res, cur_rv, new) {
                    Ok(stored) => return Ok(self.delete_response(info, &stored, false)),
                    Err(_) => continue,
                }
            }
            // Propagation policy → GC finalizers.
            let policy = match (&o.propagation, o.orphan_dependents) {
                (Some(p), _) => p.clone(),
                (None, Some(true)) => "Orphan".to_string(),
                _ => "Background".to_string(),
            };
            if !matches!(policy.as_str(), "Foreground" | "Background" | "Orphan") {
                return Err(ApiError::invalid1(
                    "meta.k8s.io",
                    "DeleteOptions",
                    "",
                    "propagationPolicy",
                    "FieldValueNotSupported",
                    format!(
                        "Unsupported value: \"{policy}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
                    ),
                ));
            }
            let mut fins = finalizers(&current);
            let before = fins.clone();
            match policy.as_str() {
                "Foreground" => {
                    fins.retain(|f| f != ORPHAN);
                    if !fins.iter().any(|f| f == FOREGROUND) {
                        fins.push(FOREGROUND.into());
                    }
                }
                "Orphan" => {
                    fins.retain(|f| f != FOREGROUND);
                    if !fins.iter().any(|f| f == ORPHAN) {
                        fins.push(ORPHAN.into());
                    }
                }
                _ if !deleting => fins.retain(|f| f != ORPHAN && f != FOREGROUND),
                _ => {}
            }
            // Graceful deletion: bound, non-terminal pods only.
            let mut grace = 0i64;
            if is_core(info, "pods") {
                let bound = !current["spec"]["nodeName"]
                    .as_str()
                    .unwrap_or("")
                    .is_empty();
                let phase = current["status"]["phase"].as_str().unwrap_or("");
                let default = current["spec"]["terminationGracePeriodSeconds"]
                    .as_i64()
                    .unwrap_or(30);
                grace = o.grace_period.unwrap_or(default).max(0);
                if !bound || matches!(phase, "Succeeded" | "Failed") {
                    grace = 0;
                }
                if deleting {
                    let existing = current
                        .pointer("/metadata/deletionGracePeriodSeconds")
                        .and_then(Value::as_i64)
                        .unwrap_or(0);
                    if o.grace_period.is_none() || grace >= existing {
                        grace = existing;
                    }
                }
            }
            if fins.is_empty() && grace == 0 {
                if o.dry_run {
                    return Ok(self.delete_response(info, &current, true));
                }
                match self.store.remove(&res, &key, cur_rv) {
                    Ok(last) => {
                        self.after_remove(info, &last);
                        return Ok(self.delete_response(info, &last, true));
                    }
                    Err(_) => continue,
                }
            }
            let existing_grace = current
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64);
            if deleting && fins == before && existing_grace == Some(grace) {
                return Ok(self.delete_response(info, &current, false));
            }
            set_finalizers(&mut new, &fins);
            {
                let meta = meta_mut(&mut new);
                if !deleting || existing_grace != Some(grace) {
                    let ts = if grace > 0 {
                        api_kinds::rfc3339_in(grace)
                    } else {
                        now_rfc3339()
                    };
                    meta.insert("deletionTimestamp".into(), json!(ts));
                }
                meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
            }
            if is_crd(info) {
                new["status"] = api_crd::crd_status(&new, current.get("status"), &now_rfc3339());
            }
            if o.dry_run {
                return Ok(self.delete_response(info, &Arc::new(new), false));
            }
            match self.store.replace(&res, cur_rv, new) {
                Ok(stored) => return Ok(self.delete_response(info, &stored, false)),
                Err(_) => continue,
            }
        }
        Err(ApiError::internal(
            "too many concurrent updates, please retry",
        ))
    }

    /// The namespace controller's last step: clear `spec.finalizers` of a terminating
    /// namespace and remove it once no metadata finalizers remain.
    pub fn finalize_namespace(&self, name: &str) -> Result<(), ApiError> {
        let res = ResKey::new("", "namespaces");
        let key = (String::new(), name.to_string());
        for _ in 0..64 {
            let Some(current) = self.store.get(&res, &key) else {
                return Ok(());
            };
            let rv = object_rv(&current);
            let result = if finalizers(&current).is_empty() {
                self.store.remove(&res, &key, rv).map(|_| ())
            } else {
                let mut new = (*current).clone();
                new["spec"]["finalizers"] = json!([]);
                self.store.replace(&res, rv, new).map(|_| ())
            };
            match result {
                Ok(()) => return Ok(()),
                Err(StoreError::NotFound) => return Ok(()),
                Err(_) => continue,
            }
        }
        Err(ApiError::internal(
            "too many concurrent updates, please retry",
        ))
    }

    fn delete_response(&self, info: &ResourceInfo, obj: &Arc<Value>, removed: bool) -> Written {
        let body = if !removed || returns_deleted_object(info) {
            (*to_view(info, obj)).clone()
        } else {
            let mut details = json!({"name": meta_str(obj, "name"), "kind": info.plural, "uid": meta_str(obj, "uid")});
            if !info.group.is_empty() {
                details["group"] = json!(info.group);
            }
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
        };
        Written {
            body,
            code: 200,
            warnings: Vec::new(),
        }
    }

    /// DELETE on a collection: deletes every selected object; returns the list of them.
    pub fn delete_collection(
        &self,
        info: &ResourceInfo,
        ns: Option<&str>,
        list: &ListOpts,
        o: &DeleteOpts,
    ) -> Result<Value, ApiError> {
        let out = self.list(info, ns, list)?;
        let mut items = Vec::new();
        for obj in out.items {
            let name = meta_str(&obj, "name").to_string();
            let obj_ns = meta_str(&obj, "namespace").to_string();
            let obj_ns = (!obj_ns.is_empty()).then_some(obj_ns);
            match self.delete(info, obj_ns.as_deref(), &name, o) {
                Ok(w) => items.push(w.body),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(json!({
            "kind": info.list_kind,
            "apiVersion": info.api_version(),
            "metadata": {"resourceVersion": self.store.current_rv().to_string()},
            "items": items,
        }))
    }
}
