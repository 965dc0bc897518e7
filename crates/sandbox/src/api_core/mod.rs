//! The sandbox API server's REST semantics, independent of HTTP: create, get, list, update
//! (PUT and the status split), patch, delete (finalizers, graceful pod deletion, propagation
//! finalizers), bindings and CRD registration, with the kube-apiserver's rules and errors.
//! Used by `server.rs` (HTTP) and `gc.rs` (in-process controllers).
//!
//! Objects are kept in the store in storage form (core/v1 for both Event APIs; custom
//! resources in the version they were written with) and converted to the requested view on
//! the way out. It must not know about HTTP or hold the store's lock across calls.

use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, RwLock};

use serde_json::{Map, Value, json};

use super::admission;
use super::api_crd;
use super::api_kinds::{self, now_rfc3339};
use super::api_status::{ApiError, Cause};
use super::cel;
use super::patch::{self, PatchType};
use super::registry::{Registry, ResourceInfo};
use super::schema::{self, FieldError, StructuralSchema};
use super::selector::{self, FieldSelector, LabelSelector, ResourceOrigin};
use super::ssa;
use super::store::{ObjKey, ResKey, Store, StoreError, object_rv};

/// How unknown fields in a write are treated (`fieldValidation`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

impl FieldValidation {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        match s {
            "" | "Warn" => Ok(FieldValidation::Warn),
            "Ignore" => Ok(FieldValidation::Ignore),
            "Strict" => Ok(FieldValidation::Strict),
            other => Err(ApiError::bad_request(format!(
                "fieldValidation parameter unsupported: {other}"
            ))),
        }
    }
}

/// Options of a create, update or patch.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    pub dry_run: bool,
    pub field_validation: FieldValidation,
}

/// The outcome of a write: the object (or Status) to return, the HTTP code, `Warning`s.
#[derive(Debug)]
pub struct Written {
    pub body: Value,
    pub code: u16,
    pub warnings: Vec<String>,
}

/// DeleteOptions, from the body or the query.
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    pub grace_period: Option<i64>,
    pub propagation: Option<String>,
    pub orphan_dependents: Option<bool>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub dry_run: bool,
}

/// List options after parsing.
#[derive(Debug, Clone, Default)]
pub struct ListOpts {
    pub label: Option<LabelSelector>,
    pub field: Option<FieldSelector>,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
}

/// A list result in view form.
#[derive(Debug)]
pub struct ListOut {
    pub items: Vec<Arc<Value>>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<u64>,
}

/// The garbage collector's deletion policies.
pub const FOREGROUND: &str = "foregroundDeletion";
pub const ORPHAN: &str = "orphan";

const PROTECTED_NAMESPACES: [&str; 3] = ["default", "kube-system", "kube-public"];

/// ClusterIP allocation from 10.96.0.0/12.
struct IpPool {
    used: BTreeSet<u32>,
    next: u32,
}

const POOL_BASE: u32 = u32::from_be_bytes([10, 96, 0, 0]);
const POOL_SIZE: u32 = 1 << 20;

impl IpPool {
    fn allocate(&mut self, wanted: Option<Ipv4Addr>) -> Result<Ipv4Addr, String> {
        if let Some(ip) = wanted {
            let n = u32::from(ip);
            if !(POOL_BASE + 1..POOL_BASE + POOL_SIZE - 1).contains(&n) {
                return Err(format!(
                    "failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid range. The range of valid IPs is 10.96.0.0/12"
                ));
            }
            if !self.used.insert(n) {
                return Err(format!(
                    "failed to allocate IP {ip}: provided IP is already allocated"
                ));
            }
            return Ok(ip);
        }
        for _ in 0..POOL_SIZE {
            let n = POOL_BASE + 1 + (self.next % (POOL_SIZE - 2));
            self.next = self.next.wrapping_add(1);
            if self.used.insert(n) {
                return Ok(Ipv4Addr::from(n));
            }
        }
        Err("range is full".into())
    }

    fn release(&mut self, ip: &str) {
        if let Ok(ip) = ip.parse::<Ipv4Addr>() {
            self.used.remove(&u32::from(ip));
        }
    }
}

/// The REST layer: store + registry + per-resource rules.
pub struct Api {
    pub store: Store,
    pub registry: Registry,
    /// (group, version, plural) → compiled schema of a custom resource version.
    schemas: RwLock<HashMap<(String, String, String), Arc<StructuralSchema>>>,
    /// (group, version, plural) → CEL rules of a custom resource version that has any.
    cel: RwLock<HashMap<(String, String, String), Arc<cel::CelRules>>>,
    ips: Mutex<IpPool>,
}

/// (group, version, plural): the key of a custom resource version's schema and rules.
fn version_key(info: &ResourceInfo) -> (String, String, String) {
    (
        info.group.clone(),
        info.version.clone(),
        info.plural.clone(),
    )
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
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

fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(str::to_string))
        .collect()
}

fn set_finalizers(obj: &mut Value, list: &[String]) {
    let meta = meta_mut(obj);
    if list.is_empty() {
        meta.remove("finalizers");
    } else {
        meta.insert("finalizers".into(), json!(list));
    }
}

fn field_errors_to_causes(errs: Vec<FieldError>) -> Vec<Cause> {
    errs.into_iter()
        .map(|e| Cause {
            reason: e.kind.reason().to_string(),
            message: e.body(),
            field: e.field.clone(),
        })
        .collect()
}

/// The storage bucket of a resource: both Event APIs share core/v1 events.
pub fn storage_key(info: &ResourceInfo) -> ResKey {
    if info.group == "events.k8s.io" && info.plural == "events" {
        ResKey::new("", "events")
    } else {
        ResKey::new(&info.group, &info.plural)
    }
}

fn is_event_v1(info: &ResourceInfo) -> bool {
    info.group == "events.k8s.io" && info.plural == "events"
}

fn is_crd(info: &ResourceInfo) -> bool {
    info.group == "apiextensions.k8s.io" && info.plural == "customresourcedefinitions"
}

fn is_core(info: &ResourceInfo, plural: &str) -> bool {
    info.group.is_empty() && info.plural == plural
}

/// Converts a stored object to the view `info` serves.
pub fn to_view(info: &ResourceInfo, stored: &Arc<Value>) -> Arc<Value> {
    if is_event_v1(info) {
        return Arc::new(api_kinds::event_core_to_v1(stored));
    }
    let api_version = info.api_version();
    if info.is_custom() && stored.get("apiVersion").and_then(Value::as_str) != Some(&api_version) {
        let mut v = (**stored).clone();
        v["apiVersion"] = json!(api_version);
        return Arc::new(v);
    }
    stored.clone()
}

fn from_view(info: &ResourceInfo, obj: Value) -> Value {
    if is_event_v1(info) {
        api_kinds::event_v1_to_core(&obj)
    } else {
        obj
    }
}

/// Whether PUT on a missing object creates it.
fn allow_create_on_update(info: &ResourceInfo) -> bool {
    info.group.is_empty() && matches!(info.plural.as_str(), "events" | "endpoints")
        || is_event_v1(info)
        || info.group == "coordination.k8s.io"
}

/// Whether the delete response is the object (else a Status).
fn returns_deleted_object(info: &ResourceInfo) -> bool {
    info.is_custom()
        || is_crd(info)
        || (info.group.is_empty()
            && matches!(info.plural.as_str(), "pods" | "services" | "namespaces"))
}

/// Whether writes bump metadata.generation.
fn tracks_generation(info: &ResourceInfo) -> bool {
    info.is_custom() || is_crd(info)
}

fn has_status(info: &ResourceInfo) -> bool {
    info.subresources.iter().any(|s| s == "status")
}

fn without(obj: &Value, keys: &[&str]) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        for k in keys {
            m.remove(*k);
        }
    }
    v
}

fn same_ignoring_rv(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
        v
    };
    strip(a) == strip(b)
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

    fn schema_for(&self, info: &ResourceInfo) -> Option<Arc<StructuralSchema>> {
        self.schemas
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&version_key(info))
            .cloned()
    }

    fn key(ns: Option<&str>, name: &str) -> ObjKey {
        (ns.unwrap_or_default().to_string(), name.to_string())
    }

    /// GET one object.
    pub fn get(
        &self,
        info: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Arc<Value>, ApiError> {
        self.store
            .get(&storage_key(info), &Self::key(ns, name))
            .map(|o| to_view(info, &o))
            .ok_or_else(|| ApiError::not_found(&info.group, &info.plural, name))
    }

    /// The field-selector check every list/watch does first.
    pub fn check_field_selector(
        &self,
        info: &ResourceInfo,
        sel: &FieldSelector,
    ) -> Result<(), ApiError> {
        let origin = if info.is_custom() {
            ResourceOrigin::Custom {
                namespaced: info.namespaced,
            }
        } else {
            ResourceOrigin::BuiltIn
        };
        selector::validate_field_selector(&info.api_version(), &info.kind, origin, sel)
            .map_err(|e| ApiError::bad_request(e.to_string()))
    }

    /// Whether a view object matches label and field selectors.
    pub fn matches(
        info: &ResourceInfo,
        obj: &Value,
        label: Option<&LabelSelector>,
        field: Option<&FieldSelector>,
    ) -> bool {
        label.is_none_or(|l| l.matches_object(obj))
            && field.is_none_or(|f| f.matches_object(&info.api_version(), &info.kind, obj))
    }

    /// LIST with selectors, limit/continue and resourceVersion semantics.
    pub fn list(
        &self,
        info: &ResourceInfo,
        ns: Option<&str>,
        opts: &ListOpts,
    ) -> Result<ListOut, ApiError> {
        if let Some(f) = &opts.field {
            self.check_field_selector(info, f)?;
        }
        let res = storage_key(info);
        let rv_param = opts.resource_version.as_deref().unwrap_or("");
        let rv_match = opts.resource_version_match.as_deref().unwrap_or("");
        if !rv_match.is_empty() && rv_param.is_empty() {
            return Err(ApiError::invalid1(
                "meta.k8s.io",
                "ListOptions",
                "",
                "resourceVersionMatch",
                "FieldValueForbidden",
                "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if !matches!(rv_match, "" | "Exact" | "NotOlderThan") {
            return Err(ApiError::invalid1(
                "meta.k8s.io",
                "ListOptions",
                "",
                "resourceVersionMatch",
                "FieldValueNotSupported",
                format!(
                    "Unsupported value: \"{rv_match}\": supported values: \"Exact\", \"NotOlderThan\", \"\""
                ),
            ));
        }
        let parse_rv = |s: &str| {
            s.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s}")))
        };
        let (snapshot_rv, items, start) =
            if let Some(token) = opts.continue_token.as_deref().filter(|t| !t.is_empty()) {
                if !rv_param.is_empty() && rv_param != "0" {
                    return Err(ApiError::bad_request(
                        "specifying resource version is not allowed when using continue",
                    ));
                }
                let (rv, start) = decode_continue(token)?;
                // A real server answers continue tokens from etcd until compaction (5 minutes),
                // far longer than this history lasts under churn: past the history, the rest of
                // the list comes from the current state (what the apiserver's "inconsistent
                // continue" offers) rather than a 410 that would make informers relist forever.
                let (rv, items) = match self.store.list_at(&res, ns, rv) {
                    Ok(items) => (rv, items),
                    Err(_) => {
                        tracing::debug!(
                            rv,
                            "continue token past the event history: inconsistent list"
                        );
                        self.store.list(&res, ns)
                    }
                };
                (rv, items, Some(start))
            } else if rv_match == "Exact" {
                let rv = parse_rv(rv_param)?;
                let items = self.store.list_at(&res, ns, rv).map_err(|e| match e {
                    StoreError::TooOld { requested, oldest } => {
                        ApiError::gone(format!("too old resource version: {requested} ({oldest})"))
                    }
                    other => ApiError::internal(other.to_string()),
                })?;
                (rv, items, None)
            } else {
                let wanted = if rv_param.is_empty() {
                    0
                } else {
                    parse_rv(rv_param)?
                };
                let (rv, items) = self.store.list(&res, ns);
                if wanted > rv {
                    return Err(ApiError::too_large_resource_version(wanted, rv));
                }
                (rv, items, None)
            };
        let filtered = opts.label.is_some() || opts.field.is_some();
        let mut selected = Vec::new();
        let mut remaining = 0u64;
        let mut next_start: Option<ObjKey> = None;
        let mut last_key: Option<ObjKey> = None;
        for stored in items {
            let key = (
                meta_str(&stored, "namespace").to_string(),
                meta_str(&stored, "name").to_string(),
            );
            if start.as_ref().is_some_and(|s| &key < s) {
                continue;
            }
            let view = to_view(info, &stored);
            if !Self::matches(info, &view, opts.label.as_ref(), opts.field.as_ref()) {
                continue;
            }
            if opts.limit.is_some_and(|l| l > 0 && selected.len() >= l) {
                if next_start.is_none() {
                    next_start = last_key.take();
                }
                remaining += 1;
                continue;
            }
            last_key = Some(key);
            selected.push(view);
        }
        let continue_token = next_start.map(|k| encode_continue(snapshot_rv, &k));
        Ok(ListOut {
            items: selected,
            resource_version: snapshot_rv,
            remaining: (continue_token.is_some() && !filtered).then_some(remaining),
            continue_token,
        })
    }

    fn check_type_meta(info: &ResourceInfo, obj: &mut Value) -> Result<(), ApiError> {
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

    fn set_namespace(
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
    fn decode(
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
        if is_crd(info) {
            api_crd::default_crd(&mut obj);
        }
        Ok(obj)
    }

    fn validate(
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
    fn check_cel(
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

    fn check_namespace_for_create(
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
                super::api_status::qualified(&info.group, &info.plural),
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
                let meta = meta_mut(obj);
                let labels = meta.entry("labels").or_insert_with(|| json!({}));
                if let Some(l) = labels.as_object_mut() {
                    l.insert("kubernetes.io/metadata.name".into(), json!(name));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Service cluster IPs are allocated just before the object is stored.
    fn allocate_before_create(
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
                        vec![super::api_status::invalid_value(
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

    fn release_ip(&self, ip: &str) {
        self.ips
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .release(ip);
    }

    fn after_create(&self, info: &ResourceInfo, stored: &Value) {
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

    fn after_remove(&self, info: &ResourceInfo, last: &Value) {
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

    /// PATCH (JSON, merge, strategic) on the main resource or `status`.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &self,
        info: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
        sub: Option<&str>,
        patch_type: PatchType,
        body: &[u8],
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        if patch_type == PatchType::Apply {
            return Err(ApiError::bad_request(
                "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
            ));
        }
        if patch_type == PatchType::StrategicMerge
            && !patch::is_strategic_kind(&info.api_version(), &info.kind)
        {
            let e = patch::unsupported_media_type(&info.api_version(), &info.kind);
            return Err(ApiError::unsupported_media_type(e.to_string()));
        }
        let api_version = info.api_version();
        self.guaranteed_update(info, ns, name, sub, opts, false, &|current| {
            let Some(current) = current else {
                return Err(ApiError::not_found(&info.group, &info.plural, name));
            };
            patch::apply_patch(&api_version, &info.kind, current, patch_type, body).map_err(|e| {
                let status = e.to_status();
                ApiError {
                    code: e.status_code(),
                    reason: e.reason(),
                    message: e.status_message(),
                    details: status.get("details").cloned(),
                }
            })
        })
    }

    /// Server-side apply (`application/apply-patch+yaml`) by `manager`: creates the object or
    /// merges the manager's intent into it, refusing to change fields other managers applied
    /// unless `force` (see `ssa`).
    #[allow(clippy::too_many_arguments)]
    pub fn apply(
        &self,
        info: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
        sub: Option<&str>,
        body: &[u8],
        manager: &str,
        force: bool,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        let applied: Value = serde_json::from_slice(body)
            .or_else(|_| serde_saphyr::from_slice(body))
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
        if !applied.is_object() {
            return Err(ApiError::bad_request(
                "the body of an apply patch must be an object",
            ));
        }
        let now = now_rfc3339();
        let conflict = |c: ssa::Conflicts| ApiError {
            code: 409,
            reason: "Conflict",
            message: c.message(),
            details: Some(json!({"causes": c.0.iter().map(|(m, f)| json!({
                "reason": "FieldManagerConflict",
                "message": format!("conflict with \"{m}\""),
                "field": f,
            })).collect::<Vec<_>>()})),
        };
        let res = storage_key(info);
        if sub.is_none() && self.store.get(&res, &Self::key(ns, name)).is_none() {
            let mut created = ssa::apply(None, &applied, manager, force, &now).map_err(conflict)?;
            let meta = meta_mut(&mut created);
            meta.insert("name".into(), json!(name));
            if let Some(ns) = ns {
                meta.insert("namespace".into(), json!(ns));
            }
            match self.create(info, ns, created, opts) {
                // Lost a race with another create: apply to what won.
                Err(e) if e.code == 409 && e.reason == "AlreadyExists" => {}
                other => return other,
            }
        }
        self.guaranteed_update(info, ns, name, sub, opts, false, &|current| {
            let Some(current) = current else {
                return Err(ApiError::not_found(&info.group, &info.plural, name));
            };
            ssa::apply(Some(current), &applied, manager, force, &now).map_err(conflict)
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn guaranteed_update(
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
                    vec![super::api_status::forbidden_field(
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
                            vec![super::api_status::invalid_value(
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
                    let name = meta_str(current, "name").to_string();
                    let meta = meta_mut(new);
                    let labels = meta.entry("labels").or_insert_with(|| json!({}));
                    if let Some(l) = labels.as_object_mut() {
                        l.insert("kubernetes.io/metadata.name".into(), json!(name));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// POST `pods/<name>/binding`.
    pub fn bind(&self, ns: &str, name: &str, mut body: Value) -> Result<Written, ApiError> {
        if body
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("Binding")
            != "Binding"
        {
            return Err(ApiError::bad_request(
                "the kind in the data does not match the expected kind (Binding)",
            ));
        }
        body["apiVersion"] = json!("v1");
        body["kind"] = json!("Binding");
        if let Some(Err(e)) = api_kinds::typed_roundtrip("v1", "Binding", &body) {
            return Err(ApiError::bad_request(format!(
                "Binding in version \"v1\" cannot be handled as a Binding: {e}"
            )));
        }
        let target = body["target"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if target.is_empty() {
            return Err(ApiError::invalid1(
                "",
                "Binding",
                name,
                "target.name",
                "FieldValueRequired",
                "Required value",
            ));
        }
        let res = ResKey::new("", "pods");
        let key = (ns.to_string(), name.to_string());
        loop {
            let Some(current) = self.store.get(&res, &key) else {
                return Err(ApiError::not_found("", "pods", name));
            };
            if current.pointer("/metadata/deletionTimestamp").is_some() {
                return Err(ApiError::conflict(
                    "",
                    "pods/binding",
                    name,
                    &format!("pod {name} is being deleted, cannot be assigned to a host"),
                ));
            }
            let node = current["spec"]["nodeName"].as_str().unwrap_or_default();
            if !node.is_empty() {
                return Err(ApiError::conflict(
                    "",
                    "pods/binding",
                    name,
                    &format!("pod {name} is already assigned to node {node:?}"),
                ));
            }
            let uid = meta_str(&body, "uid");
            if !uid.is_empty() && uid != meta_str(&current, "uid") {
                return Err(ApiError::conflict(
                    "",
                    "pods/binding",
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        meta_str(&current, "uid")
                    ),
                ));
            }
            let mut new = (*current).clone();
            new["spec"]["nodeName"] = json!(target);
            if let Some(ann) = body
                .pointer("/metadata/annotations")
                .and_then(Value::as_object)
            {
                let meta = meta_mut(&mut new);
                let a = meta.entry("annotations").or_insert_with(|| json!({}));
                if let Some(a) = a.as_object_mut() {
                    for (k, v) in ann {
                        a.insert(k.clone(), v.clone());
                    }
                }
            }
            let cond = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now_rfc3339()});
            let status = new["status"].as_object_mut();
            if let Some(status) = status {
                let conds = status.entry("conditions").or_insert_with(|| json!([]));
                if let Some(list) = conds.as_array_mut() {
                    list.retain(|c| c["type"] != "PodScheduled");
                    list.push(cond);
                }
            }
            match self.store.replace(&res, object_rv(&current), new) {
                Ok(_) => {
                    return Ok(Written {
                        body: json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
                        code: 201,
                        warnings: Vec::new(),
                    });
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(ApiError::not_found("", "pods", &e.to_string())),
            }
        }
    }

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
            if let Some(uid) = o.uid.as_deref().filter(|u| !u.is_empty()) {
                let actual = meta_str(&current, "uid");
                if uid != actual {
                    return Err(ApiError::conflict(
                        &info.group,
                        &info.kind,
                        name,
                        &format!(
                            "the UID in the precondition ({uid}) does not match the UID in record ({actual}). The object might have been deleted and then recreated"
                        ),
                    ));
                }
            }
            if let Some(rv) = o.resource_version.as_deref().filter(|r| !r.is_empty()) {
                let actual = meta_str(&current, "resourceVersion");
                if rv != actual {
                    return Err(ApiError::conflict(
                        &info.group,
                        &info.kind,
                        name,
                        &format!(
                            "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({actual}). The object might have been modified"
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

    /// The resource (any served version) stored under `res`; core events for both Event APIs.
    pub fn info_for_storage(&self, res: &ResKey) -> Option<Arc<ResourceInfo>> {
        self.registry
            .all()
            .into_iter()
            .find(|i| i.group == res.group && i.plural == res.plural)
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
        vec![super::api_status::forbidden_field(
            "spec",
            "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
        )],
    ))
}

fn encode_continue(rv: u64, key: &ObjKey) -> String {
    let start = if key.0.is_empty() {
        format!("{}\u{0}", key.1)
    } else {
        format!("{}/{}\u{0}", key.0, key.1)
    };
    let raw = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start}).to_string();
    match serde_json::to_value(k8s_openapi::ByteString(raw.into_bytes())) {
        Ok(Value::String(s)) => s,
        _ => String::new(),
    }
}

fn decode_continue(token: &str) -> Result<(u64, ObjKey), ApiError> {
    let bad = || {
        ApiError::bad_request(format!(
            "invalid continue token: continue key is not valid: {token}"
        ))
    };
    let bytes: k8s_openapi::ByteString =
        serde_json::from_value(Value::String(token.to_string())).map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&bytes.0).map_err(|_| bad())?;
    let rv = v["rv"].as_u64().ok_or_else(bad)?;
    let start = v["start"].as_str().ok_or_else(bad)?;
    let start = start.trim_end_matches('\u{0}');
    let key = match start.split_once('/') {
        Some((ns, name)) => (ns.to_string(), format!("{name}\u{0}")),
        None => (String::new(), format!("{start}\u{0}")),
    };
    Ok((rv, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(api: &Api, g: &str, v: &str, p: &str) -> Arc<ResourceInfo> {
        api.resource(g, v, p).unwrap()
    }

    #[test]
    fn continue_token_round_trips() {
        let t = encode_continue(42, &("ns".into(), "a".into()));
        let (rv, key) = decode_continue(&t).unwrap();
        assert_eq!(rv, 42);
        assert!(key > ("ns".to_string(), "a".to_string()));
        assert!(key < ("ns".to_string(), "a0".to_string()));
    }

    #[test]
    fn bootstrap_namespaces_and_kubernetes_service() {
        let api = Api::new(100);
        let ns = info(&api, "", "v1", "namespaces");
        for n in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let o = api.get(&ns, None, n).unwrap();
            assert_eq!(o["status"]["phase"], "Active");
        }
        let svc = info(&api, "", "v1", "services");
        let k = api.get(&svc, Some("default"), "kubernetes").unwrap();
        assert_eq!(k["spec"]["clusterIP"], "10.96.0.1");
    }

    #[test]
    fn create_conflict_and_stale_update() {
        let api = Api::new(100);
        let cm = info(&api, "", "v1", "configmaps");
        let body = json!({"metadata": {"name": "c"}, "data": {"a": "1"}});
        let w = api
            .create(&cm, Some("default"), body.clone(), &WriteOptions::default())
            .unwrap();
        assert_eq!(w.code, 201);
        let e = api
            .create(&cm, Some("default"), body, &WriteOptions::default())
            .unwrap_err();
        assert_eq!(e.message, "configmaps \"c\" already exists");
        let mut stale = w.body.clone();
        stale["data"]["a"] = json!("2");
        api.update(
            &cm,
            Some("default"),
            "c",
            None,
            stale.clone(),
            &WriteOptions::default(),
        )
        .unwrap();
        let e = api
            .update(
                &cm,
                Some("default"),
                "c",
                None,
                stale,
                &WriteOptions::default(),
            )
            .unwrap_err();
        assert_eq!(e.code, 409);
        assert!(e.message.contains("the object has been modified"));
    }

    #[test]
    fn concurrent_patches_without_a_version_all_land_and_a_stale_versioned_one_does_not() {
        let api = Arc::new(Api::new(100));
        let cm = info(&api, "", "v1", "configmaps");
        let created = api
            .create(
                &cm,
                Some("default"),
                json!({"metadata": {"name": "c"}}),
                &WriteOptions::default(),
            )
            .unwrap();
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let (api, cm) = (api.clone(), cm.clone());
                std::thread::spawn(move || {
                    for i in 0..100 {
                        let patch = json!({"data": {format!("w{w}-{i}"): "x"}}).to_string();
                        api.patch(
                            &cm,
                            Some("default"),
                            "c",
                            None,
                            PatchType::Merge,
                            patch.as_bytes(),
                            &WriteOptions::default(),
                        )
                        .expect("a patch without resourceVersion is retried, never refused");
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        let rv = meta_str(&created.body, "resourceVersion").to_string();
        let stale = json!({"metadata": {"resourceVersion": rv}, "data": {"late": "x"}}).to_string();
        let e = api
            .patch(
                &cm,
                Some("default"),
                "c",
                None,
                PatchType::Merge,
                stale.as_bytes(),
                &WriteOptions::default(),
            )
            .unwrap_err();
        assert_eq!(e.code, 409);
        let res = storage_key(&cm);
        let stored = api
            .store
            .get(&res, &("default".to_string(), "c".to_string()))
            .unwrap();
        assert_eq!(stored["data"].as_object().map(|d| d.len()), Some(400));
    }

    #[test]
    fn missing_and_terminating_namespace() {
        let api = Api::new(100);
        let cm = info(&api, "", "v1", "configmaps");
        let ns = info(&api, "", "v1", "namespaces");
        let e = api
            .create(
                &cm,
                Some("nope"),
                json!({"metadata": {"name": "c"}}),
                &WriteOptions::default(),
            )
            .unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (404, "namespaces \"nope\" not found")
        );
        api.create(
            &ns,
            None,
            json!({"metadata": {"name": "t"}}),
            &WriteOptions::default(),
        )
        .unwrap();
        api.create(
            &cm,
            Some("t"),
            json!({"metadata": {"name": "keep"}}),
            &WriteOptions::default(),
        )
        .unwrap();
        let w = api.delete(&ns, None, "t", &DeleteOpts::default()).unwrap();
        assert_eq!(w.body["status"]["phase"], "Terminating");
        let e = api
            .create(
                &cm,
                Some("t"),
                json!({"metadata": {"name": "c"}}),
                &WriteOptions::default(),
            )
            .unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "configmaps \"c\" is forbidden: unable to create new content in namespace t because it is being terminated"
        );
        let e = api
            .delete(&ns, None, "default", &DeleteOpts::default())
            .unwrap_err();
        assert_eq!(e.code, 403);
    }

    #[test]
    fn pod_binding_and_graceful_delete() {
        let api = Api::new(100);
        let pods = info(&api, "", "v1", "pods");
        let body = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
        let w = api
            .create(&pods, Some("default"), body, &WriteOptions::default())
            .unwrap();
        assert_eq!(w.body["status"]["phase"], "Pending");
        assert_eq!(w.body["spec"]["schedulerName"], "default-scheduler");
        let bind = json!({"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}});
        api.bind("default", "p", bind.clone()).unwrap();
        let e = api.bind("default", "p", bind).unwrap_err();
        assert_eq!(e.code, 409);
        assert_eq!(
            e.message,
            "Operation cannot be fulfilled on pods/binding \"p\": pod p is already assigned to node \"n1\""
        );
        let w = api
            .delete(&pods, Some("default"), "p", &DeleteOpts::default())
            .unwrap();
        assert_eq!(w.body["metadata"]["deletionGracePeriodSeconds"], 30);
        assert!(api.get(&pods, Some("default"), "p").is_ok());
        let zero = DeleteOpts {
            grace_period: Some(0),
            ..Default::default()
        };
        api.delete(&pods, Some("default"), "p", &zero).unwrap();
        assert_eq!(api.get(&pods, Some("default"), "p").unwrap_err().code, 404);
    }

    #[test]
    fn finalizers_hold_deletion_until_removed() {
        let api = Api::new(100);
        let cm = info(&api, "", "v1", "configmaps");
        let body = json!({"metadata": {"name": "c", "finalizers": ["x.io/hold"]}});
        api.create(&cm, Some("default"), body, &WriteOptions::default())
            .unwrap();
        api.delete(&cm, Some("default"), "c", &DeleteOpts::default())
            .unwrap();
        let held = api.get(&cm, Some("default"), "c").unwrap();
        assert!(held["metadata"]["deletionTimestamp"].is_string());
        let mut released = (*held).clone();
        released["metadata"]["finalizers"] = json!([]);
        api.update(
            &cm,
            Some("default"),
            "c",
            None,
            released,
            &WriteOptions::default(),
        )
        .unwrap();
        assert!(api.get(&cm, Some("default"), "c").is_err());
    }

    #[test]
    fn list_limit_continue_is_a_consistent_snapshot() {
        let api = Api::new(1000);
        let cm = info(&api, "", "v1", "configmaps");
        for i in 0..5 {
            let body = json!({"metadata": {"name": format!("c{i}")}});
            api.create(&cm, Some("default"), body, &WriteOptions::default())
                .unwrap();
        }
        let opts = ListOpts {
            limit: Some(2),
            ..Default::default()
        };
        let first = api.list(&cm, Some("default"), &opts).unwrap();
        assert_eq!(first.items.len(), 2);
        assert_eq!(first.remaining, Some(3));
        api.create(
            &cm,
            Some("default"),
            json!({"metadata": {"name": "c9"}}),
            &WriteOptions::default(),
        )
        .unwrap();
        let next = ListOpts {
            limit: Some(10),
            continue_token: first.continue_token.clone(),
            ..Default::default()
        };
        let rest = api.list(&cm, Some("default"), &next).unwrap();
        let names: Vec<_> = rest
            .items
            .iter()
            .map(|o| o["metadata"]["name"].clone())
            .collect();
        assert_eq!(names, [json!("c2"), json!("c3"), json!("c4")]);
        assert_eq!(rest.resource_version, first.resource_version);
    }

    #[test]
    fn events_are_two_views_of_one_storage() {
        let api = Api::new(100);
        let v1 = info(&api, "events.k8s.io", "v1", "events");
        let core = info(&api, "", "v1", "events");
        let body = json!({"metadata": {"name": "e"}, "regarding": {"kind": "Pod", "name": "p", "namespace": "default"},
            "note": "hi", "reason": "Test", "type": "Normal", "action": "Testing",
            "reportingController": "diorch", "reportingInstance": "diorch-0",
            "eventTime": "2024-01-01T00:00:00.000000Z"});
        api.create(&v1, Some("default"), body, &WriteOptions::default())
            .unwrap();
        let c = api.get(&core, Some("default"), "e").unwrap();
        assert_eq!(c["message"], "hi");
        assert_eq!(c["involvedObject"]["name"], "p");
        assert_eq!(c["apiVersion"], "v1");
    }
}
