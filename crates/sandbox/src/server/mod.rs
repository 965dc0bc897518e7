//! The sandbox API server's HTTP layer (axum 0.8, plain HTTP/1.1): URL routing for `/api/v1`
//! and `/apis/<group>/<version>` resources (namespaced and cluster-wide collections, objects,
//! subresources, legacy `/watch/` paths), query and body decoding, watch streaming (shared
//! event bytes, bookmarks, timeouts, selectors, 410 as an ERROR event), Table output, legacy
//! discovery, OpenAPI v3, `/version` and health endpoints, and `Status` error bodies.
//!
//! REST semantics live in `api_core.rs`; this file must not implement kind rules.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};

use super::api_core::{
    Api, DeleteOpts, FieldValidation, ListOpts, WriteOptions, Written, storage_key, to_view,
};
use super::api_status::ApiError;
use super::gc;
use super::openapi;
use super::patch::PatchType;
use super::registry::ResourceInfo;
use super::selector::{FieldSelector, LabelSelector};
use super::store::{EventType, StoreError, StoredEvent};
use super::table::{self, IncludeObject};

/// Options of the sandbox API server.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Events kept per resource for watch resumption; older RVs get `410 Gone`.
    pub history_size: usize,
    /// How often a watch with `allowWatchBookmarks=true` gets a BOOKMARK.
    pub bookmark_interval: Duration,
    /// Answers to TokenReview and SubjectAccessReview.
    pub auth: Arc<super::auth::AuthConfig>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            history_size: 20_000,
            bookmark_interval: Duration::from_secs(10),
            auth: Arc::default(),
        }
    }
}

/// Why the server stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("serving HTTP failed: {0}")]
    Io(#[from] std::io::Error),
}

/// The in-process Kubernetes API server.
pub struct ApiServer {
    api: Arc<Api>,
    options: ServerOptions,
}

/// (registry generation, `/openapi/v3` index, documents by path).
type OpenApiCache = (u64, Value, HashMap<String, Value>);

struct AppState {
    api: Arc<Api>,
    options: ServerOptions,
    stop: watch::Receiver<bool>,
    openapi: Mutex<Option<OpenApiCache>>,
}

impl ApiServer {
    pub fn new(options: ServerOptions) -> Self {
        ApiServer {
            api: Api::new(options.history_size),
            options,
        }
    }

    /// The REST layer, for in-process use (tests, benches).
    pub fn api(&self) -> Arc<Api> {
        self.api.clone()
    }

    /// Serves until `shutdown` completes; open watches are ended first so that graceful
    /// shutdown does not wait for them. Also runs the garbage collector and namespace/CRD
    /// controllers.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let controllers = tokio::spawn(gc::run(self.api.clone(), stop_rx.clone()));
        let state = Arc::new(AppState {
            api: self.api.clone(),
            options: self.options.clone(),
            stop: stop_rx,
            openapi: Mutex::new(None),
        });
        let app = Router::new().fallback(handle).with_state(state);
        let result = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                shutdown.await;
                let _ = stop_tx.send(true);
            })
            .await;
        controllers.abort();
        result.map_err(ServerError::Io)
    }
}

fn json_response(code: u16, body: &Value, warnings: &[String]) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    bytes_response(code, bytes, warnings)
}

fn bytes_response(code: u16, bytes: Vec<u8>, warnings: &[String]) -> Response {
    let mut resp = Response::new(Body::from(bytes));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for w in warnings {
        let text = format!("299 - {}", super::schema::go_quote(w));
        if let Ok(v) = HeaderValue::from_str(&text) {
            h.append(header::WARNING, v);
        }
    }
    resp
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = json_response(self.code, &self.to_status(), &[]);
        // As kube-apiserver does: clients that retry (kube's default retry policy) wait that long.
        let retry_after = self
            .details
            .as_ref()
            .and_then(|d| d.get("retryAfterSeconds"))
            .and_then(Value::as_u64)
            .filter(|s| *s > 0);
        if let Some(secs) = retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        resp
    }
}

fn written(w: Written) -> Response {
    json_response(w.code, &w.body, &w.warnings)
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_query(q: Option<&str>) -> HashMap<String, String> {
    q.unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(p), String::new()),
        })
        .collect()
}

/// The query parameters, and the kind of options the request's method takes (`CreateOptions`
/// for POST...), named in errors about them.
struct Query(HashMap<String, String>, &'static str);

impl Query {
    fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }
    fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true" | "1"))
    }
    fn int(&self, k: &str) -> Result<Option<i64>, ApiError> {
        match self.get(k).filter(|s| !s.is_empty()) {
            None => Ok(None),
            Some(s) => s.parse().map(Some).map_err(|_| {
                ApiError::bad_request(format!("invalid value {s:?} for query parameter {k}"))
            }),
        }
    }
    fn dry_run(&self) -> Result<bool, ApiError> {
        match self.get("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(other) => Err(ApiError::invalid1(
                "meta.k8s.io",
                self.1,
                "",
                "dryRun",
                "FieldValueNotSupported",
                format!("Unsupported value: []string{{{other:?}}}: supported values: \"All\""),
            )),
        }
    }
    fn write_options(&self) -> Result<WriteOptions, ApiError> {
        Ok(WriteOptions {
            dry_run: self.dry_run()?,
            field_validation: FieldValidation::parse(self.get("fieldValidation").unwrap_or(""))?,
        })
    }
    fn list_options(&self) -> Result<ListOpts, ApiError> {
        let label = match self.get("labelSelector").filter(|s| !s.is_empty()) {
            Some(s) => {
                Some(LabelSelector::parse(s).map_err(|e| ApiError::bad_request(e.to_string()))?)
            }
            None => None,
        };
        let field = match self.get("fieldSelector").filter(|s| !s.is_empty()) {
            Some(s) => {
                Some(FieldSelector::parse(s).map_err(|e| ApiError::bad_request(e.to_string()))?)
            }
            None => None,
        };
        Ok(ListOpts {
            label,
            field,
            limit: self.int("limit")?.map(|l| l.max(0) as usize),
            continue_token: self.get("continue").map(str::to_string),
            resource_version: self.get("resourceVersion").map(str::to_string),
            resource_version_match: self
                .get("resourceVersionMatch")
                .filter(|s| !s.is_empty())
                .map(str::to_string),
        })
    }
}

/// What a URL addresses.
enum Route {
    Version,
    Health,
    ApiVersions,
    GroupList,
    Group(String),
    ResourceList(String, String),
    OpenApiRoot,
    OpenApiDoc(String),
    Resource(ResourcePath),
}

struct ResourcePath {
    info: Arc<ResourceInfo>,
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<String>,
    watch_path: bool,
}

fn route(api: &Api, path: &str) -> Result<Route, ApiError> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return Ok(Route::Version),
        [h, ..] if matches!(*h, "healthz" | "readyz" | "livez") => return Ok(Route::Health),
        ["api"] => return Ok(Route::ApiVersions),
        ["apis"] => return Ok(Route::GroupList),
        ["openapi", "v3"] => return Ok(Route::OpenApiRoot),
        ["openapi", "v3", rest @ ..] => return Ok(Route::OpenApiDoc(rest.join("/"))),
        ["apis", g] if api.registry.serves(g, None) => return Ok(Route::Group(g.to_string())),
        ["api", "v1"] => return Ok(Route::ResourceList(String::new(), "v1".into())),
        ["apis", g, v] if api.registry.serves(g, Some(v)) => {
            return Ok(Route::ResourceList(g.to_string(), v.to_string()));
        }
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(ApiError::path_not_found()),
    };
    let (watch_path, rest) = match rest {
        ["watch", r @ ..] => (true, r),
        r => (false, r),
    };
    let find = |plural: &str| {
        api.resource(group, version, plural)
            .ok_or_else(ApiError::path_not_found)
    };
    let ns_info = |plural: &str| -> Option<Arc<ResourceInfo>> {
        api.resource(group, version, plural)
            .filter(|i| i.namespaced)
    };
    let rp = |info, ns: Option<&str>, name: Option<&str>, sub: Option<&str>| {
        Ok(Route::Resource(ResourcePath {
            info,
            namespace: ns.map(str::to_string),
            name: name.map(str::to_string),
            sub: sub.map(str::to_string),
            watch_path,
        }))
    };
    match rest {
        [plural] => rp(find(plural)?, None, None, None),
        ["namespaces", ns, plural, name] if ns_info(plural).is_some() => {
            rp(find(plural)?, Some(ns), Some(name), None)
        }
        ["namespaces", ns, plural, name, sub] if ns_info(plural).is_some() => {
            rp(find(plural)?, Some(ns), Some(name), Some(sub))
        }
        ["namespaces", ns, plural] if ns_info(plural).is_some() => {
            rp(find(plural)?, Some(ns), None, None)
        }
        [plural, name] => {
            let info = find(plural)?;
            if info.namespaced {
                return Err(ApiError::path_not_found());
            }
            rp(info, None, Some(name), None)
        }
        [plural, name, sub] => {
            let info = find(plural)?;
            if info.namespaced {
                return Err(ApiError::path_not_found());
            }
            rp(info, None, Some(name), Some(sub))
        }
        _ => Err(ApiError::path_not_found()),
    }
}

/// TokenReview / SubjectAccessReview: create-only, answered from the auth file, not stored.
fn review(
    state: &Arc<AppState>,
    method: &Method,
    rp: &ResourcePath,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    if *method != Method::POST || rp.name.is_some() {
        return Err(ApiError::method_not_allowed());
    }
    let review = decode_body(headers, body)?;
    let auth = &state.options.auth;
    let answer = if rp.info.plural == "tokenreviews" {
        auth.token_review(&review)
    } else {
        auth.access_review(&review)
    };
    Ok(json_response(201, &answer, &[]))
}

async fn handle(
    State(state): State<Arc<AppState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let options_kind = match method {
        Method::POST => "CreateOptions",
        Method::PUT => "UpdateOptions",
        Method::PATCH => "PatchOptions",
        Method::DELETE => "DeleteOptions",
        _ => "ListOptions",
    };
    let query = Query(parse_query(uri.query()), options_kind);
    let path = uri.path().to_string();
    match dispatch(&state, &method, &path, &query, &headers, &body) {
        Ok(resp) => resp,
        Err(e) => {
            tracing::debug!(%method, path, code = e.code, message = %e.message, "request failed");
            e.into_response()
        }
    }
}

fn dispatch(
    state: &Arc<AppState>,
    method: &Method,
    path: &str,
    query: &Query,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let api = &state.api;
    let r = route(api, path)?;
    let read_only = |m: &Method| m == Method::GET || m == Method::HEAD;
    match r {
        Route::Version if read_only(method) => Ok(json_response(200, &version_info(), &[])),
        Route::Health => {
            let mut resp = Response::new(Body::from("ok"));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            Ok(resp)
        }
        Route::ApiVersions if read_only(method) => Ok(json_response(
            200,
            &json!({"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}]}),
            &[],
        )),
        Route::GroupList if read_only(method) => Ok(json_response(200, &group_list(api), &[])),
        Route::Group(g) if read_only(method) => Ok(json_response(
            200,
            &group_doc(api, &g).ok_or_else(ApiError::path_not_found)?,
            &[],
        )),
        Route::ResourceList(g, v) if read_only(method) => {
            Ok(json_response(200, &resource_list(api, &g, &v), &[]))
        }
        Route::OpenApiRoot if read_only(method) => {
            let (root, _) = openapi_docs(state);
            Ok(json_response(200, &root, &[]))
        }
        Route::OpenApiDoc(p) if read_only(method) => {
            let (_, docs) = openapi_docs(state);
            let doc = docs.get(&p).ok_or_else(ApiError::path_not_found)?;
            Ok(json_response(200, doc, &[]))
        }
        Route::Resource(rp)
            if matches!(
                rp.info.plural.as_str(),
                "tokenreviews" | "subjectaccessreviews"
            ) =>
        {
            review(state, method, &rp, headers, body)
        }
        Route::Resource(rp) => resource(state, method, rp, query, headers, body),
        _ => Err(ApiError::method_not_allowed()),
    }
}

fn version_info() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-diorch-sandbox",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-04-23T00:00:00Z",
        "goVersion": "go1.24.2",
        "compiler": "gc",
        "platform": "linux/amd64",
        "emulationMajor": "1",
        "emulationMinor": "33",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "32"
    })
}

/// Kubernetes version priority: GA > beta > alpha > other; higher numbers first.
fn version_rank(v: &str) -> (u8, u64, u64) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let Ok(major) = digits.parse::<u64>() else {
        return (0, 0, 0);
    };
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        return (3, major, 0);
    }
    for (prefix, rank) in [("beta", 2), ("alpha", 1)] {
        if let Some(n) = tail.strip_prefix(prefix)
            && let Ok(minor) = n.parse::<u64>()
        {
            return (rank, major, minor);
        }
    }
    (0, 0, 0)
}

fn groups(api: &Api) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for r in api.registry.all() {
        if r.group.is_empty() {
            continue;
        }
        match out.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, vs)) => {
                if !vs.contains(&r.version) {
                    vs.push(r.version.clone());
                }
            }
            None => out.push((r.group.clone(), vec![r.version.clone()])),
        }
    }
    for (_, vs) in out.iter_mut() {
        vs.sort_by_key(|v| std::cmp::Reverse(version_rank(v)));
    }
    out
}

fn group_json(g: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
        .collect();
    json!({"name": g, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

fn group_list(api: &Api) -> Value {
    let groups: Vec<Value> = groups(api)
        .iter()
        .map(|(g, vs)| group_json(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn group_doc(api: &Api, g: &str) -> Option<Value> {
    let (g, vs) = groups(api).into_iter().find(|(name, _)| name == g)?;
    let mut doc = group_json(&g, &vs);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

const ALL_VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

fn resource_list(api: &Api, g: &str, v: &str) -> Value {
    let mut resources = Vec::new();
    for r in api.registry.all() {
        if r.group != g || r.version != v {
            continue;
        }
        let mut main = Map::new();
        main.insert("name".into(), json!(r.plural));
        main.insert("singularName".into(), json!(r.singular));
        main.insert("namespaced".into(), json!(r.namespaced));
        main.insert("kind".into(), json!(r.kind));
        main.insert("verbs".into(), json!(ALL_VERBS));
        if !r.short_names.is_empty() {
            main.insert("shortNames".into(), json!(r.short_names));
        }
        if !r.categories.is_empty() {
            main.insert("categories".into(), json!(r.categories));
        }
        resources.push(Value::Object(main));
        for sub in &r.subresources {
            let (kind, verbs, group, version): (&str, &[&str], Option<&str>, Option<&str>) =
                match sub.as_str() {
                    "status" => (&r.kind, &["get", "patch", "update"], None, None),
                    "binding" => ("Binding", &["create"], None, None),
                    "log" => (&r.kind, &["get"], None, None),
                    "scale" => (
                        "Scale",
                        &["get", "patch", "update"],
                        Some("autoscaling"),
                        Some("v1"),
                    ),
                    _ => continue,
                };
            let mut s = json!({"name": format!("{}/{sub}", r.plural), "singularName": "",
                "namespaced": r.namespaced, "kind": kind, "verbs": verbs});
            if let (Some(gr), Some(ve)) = (group, version) {
                s["group"] = json!(gr);
                s["version"] = json!(ve);
            }
            resources.push(s);
        }
    }
    let gv = if g.is_empty() {
        v.to_string()
    } else {
        format!("{g}/{v}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
}

fn openapi_docs(state: &AppState) -> (Value, HashMap<String, Value>) {
    let generation = state.api.registry.generation();
    let mut cache = state.openapi.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((g, root, docs)) = cache.as_ref()
        && *g == generation
    {
        return (root.clone(), docs.clone());
    }
    let resources: Vec<ResourceInfo> = state
        .api
        .registry
        .all()
        .iter()
        .map(|r| (**r).clone())
        .collect();
    let mut docs = HashMap::new();
    let mut gvs: Vec<(String, String)> = Vec::new();
    for r in &resources {
        let gv = (r.group.clone(), r.version.clone());
        if !gvs.contains(&gv) {
            gvs.push(gv);
        }
    }
    for (g, v) in gvs {
        if let Some(doc) = openapi::v3_group_version(&g, &v, &resources) {
            docs.insert(openapi::gv_path(&g, &v), doc);
        }
    }
    let root = openapi::v3_root(&resources);
    *cache = Some((generation, root.clone(), docs.clone()));
    (root, docs)
}

fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=Table"))
}

fn decode_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    if ct.starts_with("application/vnd.kubernetes.protobuf") {
        return super::api_proto::decode(body).map_err(|e| match e {
            super::api_proto::ProtoError::Unsupported(_) => {
                ApiError::unsupported_media_type(e.to_string())
            }
            other => ApiError::bad_request(other.to_string()),
        });
    }
    if ct.starts_with("application/yaml") || ct.starts_with("application/x-yaml") {
        let text = std::str::from_utf8(body)
            .map_err(|e| ApiError::bad_request(format!("invalid YAML body: {e}")))?;
        return serde_saphyr::from_str::<Value>(text)
            .map_err(|e| ApiError::bad_request(format!("error converting YAML to JSON: {e}")));
    }
    if !(ct.starts_with("application/json") || ct.is_empty() || ct.starts_with("*/*")) {
        return Err(ApiError::unsupported_media_type(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml",
        ));
    }
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "Object 'Kind' is missing in '{}': {e}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        ))
    })
}

fn delete_options(query: &Query, headers: &HeaderMap, body: &[u8]) -> Result<DeleteOpts, ApiError> {
    let mut o = DeleteOpts {
        grace_period: query.int("gracePeriodSeconds")?,
        propagation: query
            .get("propagationPolicy")
            .filter(|s| !s.is_empty())
            .map(str::to_string),
        orphan_dependents: query.get("orphanDependents").map(|s| s == "true"),
        dry_run: query.dry_run()?,
        ..Default::default()
    };
    if body.iter().any(|b| !b.is_ascii_whitespace()) {
        let v = decode_body(headers, body)?;
        if let Some(g) = v["gracePeriodSeconds"].as_i64() {
            o.grace_period = Some(g);
        }
        if let Some(p) = v["propagationPolicy"].as_str() {
            o.propagation = Some(p.to_string());
        }
        if let Some(b) = v["orphanDependents"].as_bool() {
            o.orphan_dependents = Some(b);
        }
        if let Some(u) = v.pointer("/preconditions/uid").and_then(Value::as_str) {
            o.uid = Some(u.to_string());
        }
        if let Some(r) = v
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
        {
            o.resource_version = Some(r.to_string());
        }
        if v["dryRun"]
            .as_array()
            .is_some_and(|a| a.iter().any(|d| d == "All"))
        {
            o.dry_run = true;
        }
    }
    Ok(o)
}

fn resource(
    state: &Arc<AppState>,
    method: &Method,
    rp: ResourcePath,
    query: &Query,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let api = &state.api;
    let info = rp.info.clone();
    let ns = rp.namespace.as_deref();
    let is_watch = rp.watch_path || query.flag("watch");
    match (rp.name.as_deref(), rp.sub.as_deref()) {
        (None, _) => match *method {
            Method::GET | Method::HEAD if is_watch => {
                let list = query.list_options()?;
                watch(state, info, ns, list, query, headers)
            }
            Method::GET | Method::HEAD => {
                let list = query.list_options()?;
                let out = api.list(&info, ns, &list)?;
                if wants_table(headers) {
                    let include = table::parse_include_object(query.get("includeObject"))
                        .map_err(|e| ApiError::bad_request(e.to_string()))?;
                    let refs: Vec<&Value> = out.items.iter().map(|a| &**a).collect();
                    let t = table::render_table(
                        &info,
                        &refs,
                        include,
                        jiff::Timestamp::now(),
                        &out.resource_version.to_string(),
                        out.continue_token.as_deref(),
                    );
                    return Ok(json_response(200, &t, &[]));
                }
                Ok(bytes_response(200, encode_list(&info, &out), &[]))
            }
            Method::POST => {
                let obj = decode_body(headers, body)?;
                Ok(written(api.create(
                    &info,
                    ns,
                    obj,
                    &query.write_options()?,
                )?))
            }
            Method::DELETE => {
                let o = delete_options(query, headers, body)?;
                let list = query.list_options()?;
                Ok(json_response(
                    200,
                    &api.delete_collection(&info, ns, &list, &o)?,
                    &[],
                ))
            }
            _ => Err(ApiError::method_not_allowed()),
        },
        (Some(name), None) => match *method {
            Method::GET | Method::HEAD if is_watch => {
                let mut list = query.list_options()?;
                let by_name = FieldSelector::parse(&format!("metadata.name={name}"))
                    .map_err(|e| ApiError::bad_request(e.to_string()))?;
                list.field = Some(by_name);
                watch(state, info, ns, list, query, headers)
            }
            Method::GET | Method::HEAD => {
                let obj = api.get(&info, ns, name)?;
                if wants_table(headers) {
                    let include = table::parse_include_object(query.get("includeObject"))
                        .map_err(|e| ApiError::bad_request(e.to_string()))?;
                    let rv = obj["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap_or("")
                        .to_string();
                    let t = table::render_table(
                        &info,
                        &[&obj],
                        include,
                        jiff::Timestamp::now(),
                        &rv,
                        None,
                    );
                    return Ok(json_response(200, &t, &[]));
                }
                Ok(json_response(200, &obj, &[]))
            }
            Method::PUT => {
                let obj = decode_body(headers, body)?;
                Ok(written(api.update(
                    &info,
                    ns,
                    name,
                    None,
                    obj,
                    &query.write_options()?,
                )?))
            }
            Method::PATCH => patch(api, &info, ns, name, None, query, headers, body),
            Method::DELETE => {
                let o = delete_options(query, headers, body)?;
                Ok(written(api.delete(&info, ns, name, &o)?))
            }
            _ => Err(ApiError::method_not_allowed()),
        },
        (Some(name), Some(sub)) => {
            if !info.subresources.iter().any(|s| s == sub) {
                return Err(ApiError::path_not_found());
            }
            match (sub, method.clone()) {
                ("status", Method::GET) => Ok(json_response(200, &*api.get(&info, ns, name)?, &[])),
                ("status", Method::PUT) => {
                    let obj = decode_body(headers, body)?;
                    Ok(written(api.update(
                        &info,
                        ns,
                        name,
                        Some("status"),
                        obj,
                        &query.write_options()?,
                    )?))
                }
                ("status", Method::PATCH) => {
                    patch(api, &info, ns, name, Some("status"), query, headers, body)
                }
                ("binding", Method::POST) => {
                    let obj = decode_body(headers, body)?;
                    Ok(written(api.bind(ns.unwrap_or_default(), name, obj)?))
                }
                ("log", Method::GET) => {
                    api.get(&info, ns, name)?;
                    Err(ApiError::bad_request(format!(
                        "the diorch sandbox runs no containers, so pod \"{name}\" has no logs to show"
                    )))
                }
                _ => Err(ApiError::method_not_allowed()),
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn patch(
    api: &Api,
    info: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
    sub: Option<&str>,
    query: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    // A content type no patch route consumes is refused by kube-apiserver's router (go-restful)
    // before the handler, in its own words; a known type the resource does not take (strategic
    // merge on a custom resource) gets the handler's list (`patch::unsupported_media_type`).
    let Some(pt) = PatchType::from_content_type(ct) else {
        let mut e = ApiError::unsupported_media_type("415: Unsupported Media Type");
        e.details = Some(json!({}));
        return Err(e);
    };
    if pt == PatchType::Apply
        && let Some(manager) = query.get("fieldManager").filter(|m| !m.is_empty())
    {
        let force = query.get("force") == Some("true");
        return Ok(written(api.apply(
            info,
            ns,
            name,
            sub,
            body,
            manager,
            force,
            &query.write_options()?,
        )?));
    }
    Ok(written(api.patch(
        info,
        ns,
        name,
        sub,
        pt,
        body,
        &query.write_options()?,
    )?))
}

/// A list body, serialising items straight from the shared objects.
fn encode_list(info: &ResourceInfo, out: &super::api_core::ListOut) -> Vec<u8> {
    let mut meta = Map::new();
    meta.insert(
        "resourceVersion".into(),
        json!(out.resource_version.to_string()),
    );
    if let Some(c) = &out.continue_token {
        meta.insert("continue".into(), json!(c));
    }
    if let Some(r) = out.remaining {
        meta.insert("remainingItemCount".into(), json!(r));
    }
    let head = json!({"kind": info.list_kind, "apiVersion": info.api_version(), "metadata": meta});
    let mut buf = serde_json::to_vec(&head).unwrap_or_default();
    buf.pop(); // the closing brace; items follow
    buf.extend_from_slice(b",\"items\":[");
    // kube-apiserver's lists of built-in kinds carry no apiVersion/kind on their items (they
    // are encoded from internal types); custom resources keep theirs.
    let bare = !info.is_custom();
    for (i, item) in out.items.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        let written = match &**item {
            Value::Object(map) if bare => write_without_type_meta(&mut buf, map),
            other => serde_json::to_writer(&mut buf, other),
        };
        if written.is_err() {
            buf.extend_from_slice(b"null");
        }
    }
    buf.extend_from_slice(b"]}");
    buf
}

/// Writes `map` as a JSON object, leaving out `apiVersion` and `kind`.
fn write_without_type_meta(buf: &mut Vec<u8>, map: &Map<String, Value>) -> serde_json::Result<()> {
    buf.push(b'{');
    let mut first = true;
    for (k, v) in map {
        if k == "apiVersion" || k == "kind" {
            continue;
        }
        if !first {
            buf.push(b',');
        }
        first = false;
        serde_json::to_writer(&mut *buf, k)?;
        buf.push(b':');
        serde_json::to_writer(&mut *buf, v)?;
    }
    buf.push(b'}');
    Ok(())
}

struct WatchSpec {
    info: Arc<ResourceInfo>,
    namespace: Option<String>,
    label: Option<LabelSelector>,
    field: Option<FieldSelector>,
    start: Option<u64>,
    bookmarks: bool,
    timeout: Duration,
    table: Option<IncludeObject>,
}

fn watch(
    state: &Arc<AppState>,
    info: Arc<ResourceInfo>,
    ns: Option<&str>,
    list: ListOpts,
    query: &Query,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    if let Some(f) = &list.field {
        state.api.check_field_selector(&info, f)?;
    }
    let start = match list.resource_version.as_deref() {
        None | Some("") | Some("0") => None,
        Some(s) => Some(
            s.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s}")))?,
        ),
    };
    let table = if wants_table(headers) {
        Some(
            table::parse_include_object(query.get("includeObject"))
                .map_err(|e| ApiError::bad_request(e.to_string()))?,
        )
    } else {
        None
    };
    let timeout = match query.int("timeoutSeconds")? {
        Some(s) if s > 0 => Duration::from_secs(s as u64),
        _ => Duration::from_secs(1800),
    };
    let spec = WatchSpec {
        info,
        namespace: ns.map(str::to_string),
        label: list.label,
        field: list.field,
        start,
        bookmarks: query.flag("allowWatchBookmarks"),
        timeout,
        table,
    };
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(64);
    tokio::spawn(run_watch(
        state.api.clone(),
        spec,
        state.options.bookmark_interval,
        state.stop.clone(),
        tx,
    ));
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    let mut resp = Response::new(Body::from_stream(stream));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}

fn frame(type_: &str, object_json: &[u8]) -> Bytes {
    let mut buf = Vec::with_capacity(object_json.len() + 32);
    buf.extend_from_slice(b"{\"type\":\"");
    buf.extend_from_slice(type_.as_bytes());
    buf.extend_from_slice(b"\",\"object\":");
    buf.extend_from_slice(object_json);
    buf.extend_from_slice(b"}\n");
    Bytes::from(buf)
}

fn too_old_event(e: &StoreError) -> Bytes {
    let msg = match e {
        StoreError::TooOld { requested, oldest } => {
            format!("too old resource version: {requested} ({oldest})")
        }
        other => other.to_string(),
    };
    let status = ApiError::gone(msg).to_status();
    frame("ERROR", &serde_json::to_vec(&status).unwrap_or_default())
}

struct WatchState {
    spec: WatchSpec,
    headers_sent: bool,
}

impl WatchState {
    fn in_scope(&self, ev: &StoredEvent) -> bool {
        self.spec
            .namespace
            .as_ref()
            .is_none_or(|ns| &ev.key.0 == ns)
    }

    fn matches(&self, obj: &Value) -> bool {
        Api::matches(
            &self.spec.info,
            obj,
            self.spec.label.as_ref(),
            self.spec.field.as_ref(),
        )
    }

    fn filtered(&self) -> bool {
        self.spec.label.is_some() || self.spec.field.is_some()
    }

    /// The bytes for one event of a view object, sharing the stored JSON when possible.
    fn encode(&mut self, type_: &str, ev_json: Option<&Bytes>, view: &Value) -> Bytes {
        if let Some(include) = self.spec.table {
            let t = table::render_table_row_event(
                &self.spec.info,
                view,
                include,
                jiff::Timestamp::now(),
                !self.headers_sent,
            );
            self.headers_sent = true;
            return frame(type_, &serde_json::to_vec(&t).unwrap_or_default());
        }
        match ev_json {
            Some(b) => frame(type_, b),
            None => frame(type_, &serde_json::to_vec(view).unwrap_or_default()),
        }
    }

    /// Translates one stored event into at most one frame for this watcher.
    fn event(&mut self, ev: &StoredEvent) -> Option<Bytes> {
        if !self.in_scope(ev) {
            return None;
        }
        let info = self.spec.info.clone();
        let view = to_view(&info, &ev.object);
        let shared = Arc::ptr_eq(&view, &ev.object);
        let type_ = if self.filtered() {
            let now = self.matches(&view);
            let before = match (&ev.type_, &ev.prev) {
                (EventType::Modified, Some(prev)) => self.matches(&to_view(&info, prev)),
                _ => now,
            };
            match (ev.type_, before, now) {
                (EventType::Added, _, true) => EventType::Added,
                (EventType::Deleted, _, true) => EventType::Deleted,
                (EventType::Modified, true, true) => EventType::Modified,
                (EventType::Modified, false, true) => EventType::Added,
                (EventType::Modified, true, false) => EventType::Deleted,
                _ => return None,
            }
        } else {
            ev.type_
        };
        let json = shared.then(|| ev.object_json());
        Some(self.encode(type_.as_str(), json, &view))
    }
}

async fn run_watch(
    api: Arc<Api>,
    spec: WatchSpec,
    bookmark_interval: Duration,
    mut stop: watch::Receiver<bool>,
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
) {
    let res = storage_key(&spec.info);
    let mut changed = api.store.notifier(&res);
    let deadline = tokio::time::Instant::now() + spec.timeout;
    let mut ws = WatchState {
        spec,
        headers_sent: false,
    };
    let mut last = match ws.spec.start {
        Some(rv) => {
            if let Err(e) = api.store.check_watch_start(&res, rv) {
                let _ = tx.send(Ok(too_old_event(&e))).await;
                return;
            }
            rv
        }
        None => {
            let (rv, items) = api.store.list(&res, ws.spec.namespace.as_deref());
            for obj in items {
                let view = to_view(&ws.spec.info, &obj);
                if !ws.matches(&view) {
                    continue;
                }
                let bytes = ws.encode("ADDED", None, &view);
                if tx.send(Ok(bytes)).await.is_err() {
                    return;
                }
            }
            rv
        }
    };
    let mut next_bookmark = tokio::time::Instant::now() + bookmark_interval;
    loop {
        match api.store.events_since(&res, last) {
            Ok((events, upto)) => {
                for ev in &events {
                    if let Some(bytes) = ws.event(ev)
                        && tx.send(Ok(bytes)).await.is_err()
                    {
                        return;
                    }
                }
                last = last.max(upto);
            }
            Err(e) => {
                let _ = tx.send(Ok(too_old_event(&e))).await;
                return;
            }
        }
        if ws.spec.bookmarks && tokio::time::Instant::now() >= next_bookmark {
            let obj = json!({"kind": ws.spec.info.kind, "apiVersion": ws.spec.info.api_version(),
                "metadata": {"resourceVersion": last.to_string()}});
            if tx
                .send(Ok(frame(
                    "BOOKMARK",
                    &serde_json::to_vec(&obj).unwrap_or_default(),
                )))
                .await
                .is_err()
            {
                return;
            }
            next_bookmark = tokio::time::Instant::now() + bookmark_interval;
        }
        tokio::select! {
            r = changed.changed() => {
                if r.is_err() {
                    return;
                }
            }
            _ = tokio::time::sleep_until(next_bookmark), if ws.spec.bookmarks => {}
            _ = tokio::time::sleep_until(deadline) => return,
            _ = stop.changed() => return,
            _ = tx.closed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let api = Api::new(10);
        let ok = |p: &str| match route(&api, p) {
            Ok(Route::Resource(rp)) => (
                rp.info.plural.clone(),
                rp.namespace.clone(),
                rp.name.clone(),
                rp.sub.clone(),
                rp.watch_path,
            ),
            _ => panic!("no route for {p}"),
        };
        assert_eq!(ok("/api/v1/namespaces/d/pods").0, "pods");
        assert_eq!(ok("/api/v1/namespaces/d").2.as_deref(), Some("d"));
        assert_eq!(
            ok("/api/v1/namespaces/d/pods/p/status").3.as_deref(),
            Some("status")
        );
        assert_eq!(ok("/api/v1/namespaces/d/status").0, "namespaces");
        assert!(ok("/api/v1/watch/namespaces/d/pods").4);
        assert_eq!(
            ok("/apis/coordination.k8s.io/v1/namespaces/x/leases/l")
                .2
                .as_deref(),
            Some("l")
        );
        assert!(matches!(route(&api, "/apis/nope.io/v1/things"), Err(e) if e.code == 404));
        assert!(matches!(route(&api, "/api/v1/pods/p"), Err(e) if e.code == 404));
    }

    #[test]
    fn version_priority() {
        let mut v = vec!["v1alpha1", "v2", "v1beta2", "v1", "v1beta1", "foo"];
        v.sort_by_key(|s| std::cmp::Reverse(version_rank(s)));
        assert_eq!(v, ["v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]);
    }

    #[test]
    fn query_decoding() {
        let q = parse_query(Some("labelSelector=app%3Dweb%2Ctier+in+(a)&watch=1"));
        assert_eq!(q["labelSelector"], "app=web,tier in (a)");
        assert_eq!(q["watch"], "1");
    }
}
