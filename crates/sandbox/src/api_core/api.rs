//! `Api`, the REST layer's state (store, registry, compiled CRD schemas and CEL rules, the
//! ClusterIP pool), its construction with the start-up namespaces and `kubernetes` service, and
//! lookups of resources and schemas.
//!
//! The verbs are `impl Api` blocks in their own files; this one must not implement any.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use serde_json::json;

use crate::cel;
use crate::registry::{Registry, ResourceInfo};
use crate::schema::StructuralSchema;
use crate::store::{ObjKey, ResKey, Store};

use super::ip_pool::IpPool;
use super::options::WriteOptions;
use super::resource_rules::version_key;

/// The REST layer: store + registry + per-resource rules.
pub struct Api {
    pub store: Store,
    pub registry: Registry,
    /// (group, version, plural) → compiled schema of a custom resource version.
    pub(super) schemas: RwLock<HashMap<(String, String, String), Arc<StructuralSchema>>>,
    /// (group, version, plural) → CEL rules of a custom resource version that has any.
    pub(super) cel: RwLock<HashMap<(String, String, String), Arc<cel::CelRules>>>,
    pub(super) ips: Mutex<IpPool>,
}

impl Api {
    /// An API with the built-in resources and the start-up namespaces and objects.
    pub fn new(history_size: usize) -> Arc<Api> {
        let api = Arc::new(Api {
            store: Store::new(history_size),
            registry: Registry::new(),
            schemas: RwLock::new(HashMap::new()),
            cel: RwLock::new(HashMap::new()),
            ips: Mutex::new(IpPool {
                used: BTreeSet::new(),
                next: 10,
            }),
        });
        api.bootstrap();
        api
    }

    fn bootstrap(&self) {
        let opts = WriteOptions::default();
        if let Some(ns) = self.registry.find("", "v1", "namespaces") {
            for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
                let body =
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
                if let Err(e) = self.create(&ns, None, body, &opts) {
                    tracing::error!(namespace = name, error = %e, "cannot create start-up namespace");
                }
            }
        }
        if let Some(svc) = self.registry.find("", "v1", "services") {
            let body = json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
                "spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]}});
            if let Err(e) = self.create(&svc, Some("default"), body, &opts) {
                tracing::error!(error = %e, "cannot create the kubernetes service");
            }
        }
    }

    /// The resource served at group/version/plural.
    pub fn resource(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        self.registry.find(group, version, plural)
    }

    pub(super) fn schema_for(&self, info: &ResourceInfo) -> Option<Arc<StructuralSchema>> {
        self.schemas
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&version_key(info))
            .cloned()
    }

    pub(super) fn key(ns: Option<&str>, name: &str) -> ObjKey {
        (ns.unwrap_or_default().to_string(), name.to_string())
    }

    /// The resource (any served version) stored under `res`; core events for both Event APIs.
    pub fn info_for_storage(&self, res: &ResKey) -> Option<Arc<ResourceInfo>> {
        self.registry
            .all()
            .into_iter()
            .find(|i| i.group == res.group && i.plural == res.plural)
    }
}
