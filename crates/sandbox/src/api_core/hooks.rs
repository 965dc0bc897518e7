//! Side effects around storing and removing objects: ClusterIP allocation and release, CRD
//! (re)registration with their schemas and CEL rules, a new namespace's default service account,
//! and a removed CRD's unregistration.
//!
//! Called by the verbs; must not decide whether a write happens.

use std::net::Ipv4Addr;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::api_crd;
use crate::api_status::{ApiError, Cause};
use crate::cel;
use crate::registry::ResourceInfo;

use super::api::Api;
use super::object_meta::meta_str;
use super::options::WriteOptions;
use super::resource_rules::{is_core, is_crd, version_key};

impl Api {
    /// Service cluster IPs are allocated just before the object is stored.
    pub(super) fn allocate_before_create(
        &self,
        info: &ResourceInfo,
        obj: &mut Value,
    ) -> Result<Option<String>, ApiError> {
        if !is_core(info, "services") {
            return Ok(None);
        }
        let ty = obj["spec"]["type"].as_str().unwrap_or("ClusterIP");
        if ty == "ExternalName" {
            return Ok(None);
        }
        let wanted = obj["spec"]["clusterIP"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if wanted == "None" {
            obj["spec"]["clusterIPs"] = json!(["None"]);
            return Ok(None);
        }
        let requested = if wanted.is_empty() {
            None
        } else {
            match wanted.parse::<Ipv4Addr>() {
                Ok(ip) => Some(ip),
                Err(_) => {
                    return Err(ApiError::invalid(
                        "",
                        "Service",
                        meta_str(obj, "name"),
                        vec![crate::api_status::invalid_value(
                            "spec.clusterIPs[0]",
                            &json!(wanted),
                            "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                        )],
                    ));
                }
            }
        };
        let ip = self
            .ips
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .allocate(requested)
            .map_err(|msg| {
                ApiError::invalid(
                    "",
                    "Service",
                    meta_str(obj, "name"),
                    vec![Cause {
                        reason: "FieldValueInvalid".into(),
                        message: format!("Invalid value: []string{{\"{wanted}\"}}: {msg}"),
                        field: "spec.clusterIPs".into(),
                    }],
                )
            })?
            .to_string();
        obj["spec"]["clusterIP"] = json!(ip);
        obj["spec"]["clusterIPs"] = json!([ip]);
        Ok(Some(ip))
    }

    pub(super) fn release_ip(&self, ip: &str) {
        self.ips
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .release(ip);
    }

    pub(super) fn after_create(&self, info: &ResourceInfo, stored: &Value) {
        if is_crd(info) {
            self.register_crd(stored);
        }
        if is_core(info, "namespaces")
            && let Some(sa) = self.registry.find("", "v1", "serviceaccounts")
        {
            let ns = meta_str(stored, "name");
            let body = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
            if let Err(e) = self.create(&sa, Some(ns), body, &WriteOptions::default()) {
                tracing::debug!(namespace = ns, error = %e, "no default service account");
            }
        }
    }

    /// Registers (or re-registers) every served version of a CRD.
    pub fn register_crd(&self, crd: &Value) {
        let name = meta_str(crd, "name").to_string();
        let resources = api_crd::crd_resources(crd);
        let mut schemas = self.schemas.write().unwrap_or_else(|p| p.into_inner());
        let group = crd
            .pointer("/spec/group")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let plural = crd
            .pointer("/spec/names/plural")
            .and_then(Value::as_str)
            .unwrap_or_default();
        schemas.retain(|(g, _, p), _| !(g == group && p == plural));
        let mut cel_rules = self.cel.write().unwrap_or_else(|p| p.into_inner());
        cel_rules.retain(|(g, _, p), _| !(g == group && p == plural));
        let mut infos = Vec::new();
        for (info, schema) in resources {
            if let Some(rules) = info
                .custom
                .as_ref()
                .and_then(|c| cel::CelRules::compile(&c.schema))
            {
                cel_rules.insert(version_key(&info), Arc::new(rules));
            }
            if let Some(s) = schema {
                schemas.insert(version_key(&info), s);
            }
            infos.push(info);
        }
        drop(schemas);
        drop(cel_rules);
        tracing::info!(
            crd = name,
            versions = infos.len(),
            "custom resource registered"
        );
        self.registry.set_custom(&name, infos);
    }

    pub(super) fn after_remove(&self, info: &ResourceInfo, last: &Value) {
        if is_core(info, "services") {
            for ip in last["spec"]["clusterIPs"].as_array().into_iter().flatten() {
                if let Some(ip) = ip.as_str() {
                    self.release_ip(ip);
                }
            }
        }
        if is_crd(info) {
            let name = meta_str(last, "name").to_string();
            self.registry.set_custom(&name, Vec::new());
            let group = last["spec"]["group"].as_str().unwrap_or_default();
            let plural = last["spec"]["names"]["plural"].as_str().unwrap_or_default();
            self.schemas
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|(g, _, p), _| !(g == group && p == plural));
            tracing::info!(crd = name, "custom resource unregistered");
        }
    }
}
