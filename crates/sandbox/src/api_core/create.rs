//! POST: creating an object (generateName retries, admission, dry run) and the server-set fields
//! of a new object (uid, timestamps, generation, initial status, a CRD's finalizer and status).
//!
//! Side effects around storing (ClusterIPs, CRD registration) are `hooks.rs`.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::admission;
use crate::api_crd;
use crate::api_kinds::{self, now_rfc3339};
use crate::api_status::ApiError;
use crate::registry::ResourceInfo;
use crate::store::{ResKey, StoreError};

use super::api::Api;
use super::object_meta::{finalizers, meta_mut, meta_str, set_finalizers, set_label};
use super::options::{WriteOptions, Written};
use super::resource_rules::{
    from_view, has_status, is_crd, storage_key, to_view, tracks_generation,
};

impl Api {
    /// POST: create an object.
    pub fn create(
        &self,
        info: &ResourceInfo,
        ns: Option<&str>,
        mut body: Value,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        Self::check_type_meta(info, &mut body)?;
        if info.namespaced && ns.is_none_or(str::is_empty) {
            return Err(ApiError::bad_request(
                "the server could not find the requested resource",
            ));
        }
        Self::set_namespace(info, ns, &mut body)?;
        if !meta_str(&body, "resourceVersion").is_empty() {
            return Err(ApiError::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        if let Some(crd) = info.custom.as_ref()
            && self.crd_terminating(&crd.crd_name)
        {
            return Err(ApiError::new(
                405,
                "MethodNotAllowed",
                "create not allowed while custom resource definition is terminating",
            ));
        }
        let mut warnings = Vec::new();
        let mut body = self.decode(info, body, opts, &mut warnings)?;
        let name = meta_str(&body, "name").to_string();
        let attrs = admission::Attributes {
            info,
            sub: None,
            operation: "CREATE",
            namespace: ns,
            name: &name,
            old: None,
            dry_run: opts.dry_run,
        };
        admission::admit(
            &self.store,
            admission::Phase::Mutating,
            &attrs,
            &mut body,
            &mut warnings,
        )?;
        let mut obj = from_view(info, body);
        let generate =
            meta_str(&obj, "name").is_empty() && !meta_str(&obj, "generateName").is_empty();
        if info.namespaced {
            let name = if generate {
                meta_str(&obj, "generateName")
            } else {
                meta_str(&obj, "name")
            };
            self.check_namespace_for_create(info, ns.unwrap_or_default(), name)?;
        }
        self.prepare_for_create(info, &mut obj)?;
        let res = storage_key(info);
        for _ in 0..8 {
            let mut candidate = obj.clone();
            if generate {
                let name = format!(
                    "{}{}",
                    meta_str(&obj, "generateName"),
                    api_kinds::random_suffix()
                );
                meta_mut(&mut candidate).insert("name".into(), json!(name));
            }
            let name = meta_str(&candidate, "name").to_string();
            let mut view = (*to_view(info, &Arc::new(candidate.clone()))).clone();
            self.validate(info, &view, false)?;
            self.check_cel(info, &view, None)?;
            admission::admit(
                &self.store,
                admission::Phase::Validating,
                &admission::Attributes {
                    name: &name,
                    ..attrs
                },
                &mut view,
                &mut warnings,
            )?;
            let key = Self::key(ns, &name);
            if opts.dry_run {
                if self.store.get(&res, &key).is_some() {
                    if generate {
                        continue;
                    }
                    return Err(ApiError::already_exists(&info.group, &info.plural, &name));
                }
                let view = to_view(info, &Arc::new(candidate));
                return Ok(Written {
                    body: (*view).clone(),
                    code: 201,
                    warnings,
                });
            }
            let allocated = self.allocate_before_create(info, &mut candidate)?;
            match self.store.create(&res, candidate) {
                Ok(stored) => {
                    self.after_create(info, &stored);
                    return Ok(Written {
                        body: (*to_view(info, &stored)).clone(),
                        code: 201,
                        warnings,
                    });
                }
                Err(StoreError::AlreadyExists) => {
                    if let Some(ip) = allocated {
                        self.release_ip(&ip);
                    }
                    if generate {
                        continue;
                    }
                    return Err(ApiError::already_exists(&info.group, &info.plural, &name));
                }
                Err(e) => return Err(ApiError::internal(e.to_string())),
            }
        }
        Err(ApiError::new(
            409,
            "AlreadyExists",
            format!(
                "{} \"{}\" already exists",
                crate::api_status::qualified(&info.group, &info.plural),
                meta_str(&obj, "generateName")
            ),
        ))
    }

    fn crd_terminating(&self, crd_name: &str) -> bool {
        self.store
            .get(
                &ResKey::new("apiextensions.k8s.io", "customresourcedefinitions"),
                &(String::new(), crd_name.to_string()),
            )
            .is_some_and(|c| c.pointer("/metadata/deletionTimestamp").is_some())
    }

    fn prepare_for_create(&self, info: &ResourceInfo, obj: &mut Value) -> Result<(), ApiError> {
        let now = now_rfc3339();
        {
            let meta = meta_mut(obj);
            meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
            meta.insert("creationTimestamp".into(), json!(now));
            meta.remove("deletionTimestamp");
            meta.remove("deletionGracePeriodSeconds");
            meta.remove("generation");
        }
        if tracks_generation(info) {
            meta_mut(obj).insert("generation".into(), json!(1));
        }
        if info.is_custom()
            && has_status(info)
            && let Some(m) = obj.as_object_mut()
        {
            m.remove("status");
        }
        if !info.group.is_empty() {
            if is_crd(info) {
                let name = meta_str(obj, "name").to_string();
                let mut fins = finalizers(obj);
                if !fins.iter().any(|f| f == api_crd::CLEANUP_FINALIZER) {
                    fins.push(api_crd::CLEANUP_FINALIZER.to_string());
                }
                set_finalizers(obj, &fins);
                if self.validate(info, obj, false).is_ok() {
                    obj["status"] = api_crd::crd_status(obj, None, &now);
                } else {
                    tracing::debug!(crd = name, "invalid CRD: status left empty");
                }
            }
            return Ok(());
        }
        match info.plural.as_str() {
            "pods" => {
                let qos = api_kinds::pod_qos(obj);
                obj["status"] = json!({"phase": "Pending", "qosClass": qos});
            }
            "services" => {
                obj["status"] = json!({"loadBalancer": {}});
            }
            "namespaces" => {
                obj["spec"] = json!({"finalizers": ["kubernetes"]});
                obj["status"] = json!({"phase": "Active"});
                let name = meta_str(obj, "name").to_string();
                set_label(obj, "kubernetes.io/metadata.name", &name);
            }
            _ => {}
        }
        Ok(())
    }
}
