//! The replica API: di-server compatible HTTP endpoints for DI-engine workers (spec section 10),
//! served by `diorch run` from the controller's caches. A GET replicas answer is kept encoded
//! per job while the job and its pods are unchanged ([`Answers`]): workers poll it.
//!
//! Owns HTTP routing, job-id parsing, the `{"success","code","message","data"}` envelope, and the
//! request metrics. Reads jobs and pods only from the reflector caches; its writes are the
//! scale and profilings merges into a job's status. It never creates or deletes pods: scaling
//! goes through the job, and the controller does the pod work.
//!
//! Trust: every job route passes `auth::guard_job`, and handlers take their job id only from
//! the `AuthorizedJob` it inserts. Numbers that size memory are bounded here too: a pod's rank
//! annotation or a job's `status.ranks` past the job's size (at most
//! `api::limits::MAX_JOB_REPLICAS`) is ignored, scale counts are at most
//! `api::limits::MAX_TASK_REPLICAS`, and `status.profilings` stays within
//! [`MAX_PROFILINGS_BYTES`] and [`MAX_PROFILINGS_KEYS`]. The listeners' limits are `listen`'s.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub mod auth;
pub mod client;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, MatchedPath, Query, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use kube::api::Patch;
use kube::{Api, Client};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::controller::executor::Caches;
use crate::metrics::{Metrics, RequestLabels, method_label};
use auth::AuthorizedJob;
use diorch_core::api::{DEFAULT_CONTAINER_NAME, DEFAULT_PORT, DEFAULT_PORT_NAME, DIJob, limits};
use diorch_core::build;
use diorch_core::cached::CachedJob;
use diorch_core::cached::{CachedPod, PodAnnotation, PodLabel};
use diorch_core::key::ObjectKey;
use diorch_core::naming;

/// Largest request body accepted (profilings are merged into the job's status).
pub const MAX_BODY: usize = 64 * 1024;
/// Largest `status.profilings` (compact JSON) a report may leave.
pub const MAX_PROFILINGS_BYTES: usize = 256 * 1024;
/// Most keys, at every depth, a report may leave in `status.profilings`.
pub const MAX_PROFILINGS_KEYS: usize = 512;
/// Longest wait for one status write.
const WRITE_TIMEOUT: Duration = Duration::from_secs(15);

/// Called with the id and method of every request a job handler acts on (tests; audits).
pub type HandledHook = Arc<dyn Fn(&JobId, &Method) + Send + Sync>;

/// What the handlers share.
#[derive(Clone)]
pub struct ServerState {
    pub caches: Caches,
    pub client: Client,
    pub metrics: Arc<Metrics>,
    /// Set unless `--server-auth none`.
    pub auth: Option<Arc<dyn auth::Authorizer>>,
    /// See [`HandledHook`]; `None` in the operator.
    pub on_handled: Option<HandledHook>,
    /// GET replicas answers already encoded, per job (see [`Answers`]).
    pub answers: Arc<Answers>,
}

/// Bytes of encoded answers [`Answers`] keeps (about 1.5 KiB per 64-replica job).
const ANSWERS_BYTES: usize = 8 * 1024 * 1024;
/// An answer is recomputed at least this often, so a job nobody polls lets its entry go.
const ANSWER_TTL: Duration = Duration::from_secs(60);

/// Encoded GET replicas answers per job. DI-engine workers poll this route; most polls find
/// the same job and pods, so the answer is kept with what it was computed from (the job's uid
/// and resourceVersion and the version of its pods in the index) and served again while those
/// are unchanged. Bounded in bytes and time.
pub struct Answers {
    cache: auth::BoundedCache<ObjectKey, Arc<Answer>>,
}

impl Default for Answers {
    fn default() -> Answers {
        Answers {
            cache: auth::BoundedCache::new(ANSWERS_BYTES, ANSWER_TTL),
        }
    }
}

/// One encoded answer and what it was computed from.
struct Answer {
    uid: String,
    resource_version: String,
    pods: u64,
    body: Bytes,
}

/// What an answer for a job is computed from: its uid and resourceVersion and its pods'
/// version, read before the pods.
#[derive(Clone, Copy)]
struct AnswerInputs<'a> {
    uid: &'a str,
    resource_version: &'a str,
    pods: u64,
}

impl Answers {
    fn get(&self, key: &ObjectKey, inputs: AnswerInputs<'_>) -> Option<Bytes> {
        let hit = self.cache.get(key)?;
        (hit.pods == inputs.pods
            && hit.uid == inputs.uid
            && hit.resource_version == inputs.resource_version)
            .then(|| hit.body.clone())
    }

    fn insert(&self, key: ObjectKey, inputs: AnswerInputs<'_>, body: Bytes) {
        let size = body.len() + inputs.uid.len() + inputs.resource_version.len();
        let answer = Answer {
            uid: inputs.uid.to_string(),
            resource_version: inputs.resource_version.to_string(),
            pods: inputs.pods,
            body,
        };
        self.cache.insert(key, Arc::new(answer), size);
    }

    /// Answers held.
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }
}

impl ServerState {
    /// The id `job` names, after recording that a handler acts on it.
    fn acting_on<'a>(&self, job: &'a AuthorizedJob, method: &Method) -> &'a JobId {
        if let Some(hook) = &self.on_handled {
            hook(job.id(), method);
        }
        job.id()
    }
}

/// The OpenAPI document of these routes, served at `/openapi.json` (checked in under `docs/`).
pub const OPENAPI: &str = include_str!("../../docs/replica-api.openapi.json");

/// The routes: DI-orchestrator's code serves `/v2alpha1/job/{id}/…`, its design document shows
/// `/v2alpha1/{id}/…`; both work.
///
/// The job routes sit behind `auth::guard_job` whether or not auth is on: it is what parses the
/// id, so no handler can see an id it did not check. `/metrics` needs `get` on the non-resource
/// URL when auth is on.
pub fn router(state: ServerState) -> Router {
    let metrics = state.metrics.clone();
    let guard = auth::Guard {
        auth: state.auth.clone(),
        metrics: metrics.clone(),
    };
    let mut api = Router::new();
    for prefix in ["/v2alpha1/job/{id}", "/v2alpha1/{id}"] {
        api = api
            .route(
                &format!("{prefix}/replicas"),
                get(get_replicas)
                    .post(scale_replicas::<false>)
                    .delete(scale_replicas::<true>),
            )
            .route(&format!("{prefix}/profilings"), post(post_profilings))
            .route(&format!("{prefix}/checkpoint"), post(post_checkpoint));
    }
    let api = api.route_layer(middleware::from_fn_with_state(
        guard.clone(),
        auth::guard_job,
    ));
    let metrics_route = Router::new()
        .route(
            "/metrics",
            get(|State(s): State<Arc<ServerState>>| async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    s.metrics.encode(),
                )
            }),
        )
        .route_layer(middleware::from_fn_with_state(
            (guard, "/metrics"),
            auth::guard_path,
        ));
    api.merge(metrics_route)
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route(
            "/openapi.json",
            get(|| async { ([(header::CONTENT_TYPE, "application/json")], OPENAPI) }),
        )
        .route_layer(middleware::from_fn_with_state(metrics, track))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        // One Arc clone per extractor, not a clone of every field (a client, caches, metrics).
        .with_state(Arc::new(state))
}

async fn track(State(metrics): State<Arc<Metrics>>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    // A fixed set: a client's method text never becomes a label value.
    let method = method_label(request.method());
    let started = Instant::now();
    let response = next.run(request).await;
    metrics.server.observe(
        RequestLabels {
            route,
            method,
            code: response.status().as_u16(),
        },
        started.elapsed().as_secs_f64(),
    );
    response
}

async fn readyz(State(s): State<Arc<ServerState>>) -> Response {
    if s.caches.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ok").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced").into_response()
    }
}

/// di-server's envelope: `code` 0 on success, 1 on failure.
pub fn envelope(status: StatusCode, message: impl Into<String>, data: Value) -> Response {
    encoded(status, envelope_body(status, message, data))
}

/// The envelope's text.
fn envelope_body(status: StatusCode, message: impl Into<String>, data: Value) -> Bytes {
    let ok = status.is_success();
    let body = json!({
        "success": ok,
        "code": if ok { 0 } else { 1 },
        "message": message.into(),
        "data": data,
    });
    Bytes::from(body.to_string())
}

/// A response carrying an envelope already encoded.
fn encoded(status: StatusCode, body: Bytes) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
        body,
    )
        .into_response()
}

/// A refused request: its status and the envelope's message.
#[derive(Debug, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        envelope(self.status, self.message, Value::Null)
    }
}

fn fail(status: StatusCode, message: impl Into<String>) -> ApiError {
    ApiError {
        status,
        message: message.into(),
    }
}

/// A job id: `namespace.name`, optionally `.generation`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobId {
    pub job: ObjectKey,
    pub generation: Option<i64>,
}

/// Parses a (decoded) job id. Names of jobs diorch runs contain no dot (they must be DNS
/// labels), so the id splits unambiguously; a namespace or name that is not an RFC 1123 label
/// (a slash, `..`, unicode, upper case) cannot name a job and is refused here.
pub fn parse_job_id(id: &str) -> Result<JobId, String> {
    let shown: String = id.chars().take(128).collect();
    let bad = || {
        format!("job id {shown} must be in namespace.name format (or namespace.name.generation)")
    };
    let parts: Vec<&str> = id.splitn(4, '.').collect();
    let (ns, name, generation) = match parts.as_slice() {
        [ns, name] => (*ns, *name, None),
        [ns, name, generation] => (*ns, *name, Some(*generation)),
        _ => return Err(bad()),
    };
    if !is_dns_label(ns, 63) || !is_dns_label(name, 253) {
        return Err(bad());
    }
    let generation = match generation {
        None => None,
        Some(g) if !g.is_empty() && g.len() <= 19 && g.bytes().all(|b| b.is_ascii_digit()) => {
            Some(g.parse().map_err(|_| bad())?)
        }
        Some(_) => return Err(bad()),
    };
    Ok(JobId {
        job: ObjectKey::new(ns, name),
        generation,
    })
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most `max` bytes.
fn is_dns_label(s: &str, max: usize) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= max
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b.first() != Some(&b'-')
        && b.last() != Some(&b'-')
}

/// The cached job named by `id` (its spec still encoded: most requests never need it).
fn find_job(state: &ServerState, id: &JobId) -> Result<Arc<CachedJob>, ApiError> {
    let not_found = || {
        fail(
            StatusCode::NOT_FOUND,
            format!(
                "dijobs.diengine.opendilab.org \"{}\" not found",
                id.job.name
            ),
        )
    };
    let job = state.caches.job(&id.job).ok_or_else(not_found)?;
    if let Some(want) = id.generation {
        let have = job.metadata.generation.unwrap_or_default();
        if want != have {
            return Err(fail(
                StatusCode::CONFLICT,
                format!(
                    "job {key} is at generation {have}, not {want}: use {ns}.{name}.{have} or {ns}.{name}",
                    key = id.job,
                    ns = id.job.namespace,
                    name = id.job.name,
                ),
            ));
        }
    }
    Ok(job)
}

#[derive(Debug, Default, Deserialize)]
pub struct ReplicasQuery {
    #[serde(default)]
    detail: bool,
}

/// One live replica of a job, by rank.
struct Replica {
    rank: usize,
    pod: Arc<CachedPod>,
    address: String,
}

/// Whether `pod` is a live replica of `job`: controlled by it (by uid), not being deleted, not
/// finished.
pub fn is_live_pod_of(job: &CachedJob, pod: &CachedPod) -> bool {
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    !uid.is_empty()
        && pod.metadata.deletion_timestamp.is_none()
        && pod.metadata.owned_by(uid)
        && !matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
}

/// The replica counts of a job's spec, read without decoding its pod templates.
#[derive(Deserialize)]
struct SpecSizes {
    #[serde(default)]
    tasks: Vec<TaskSizes>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TaskSizes {
    #[serde(default = "one")]
    replicas: i64,
    #[serde(default)]
    max_replicas: Option<i64>,
}

fn one() -> i64 {
    1
}

/// How many global ranks `job` can have: its tasks' replicas, each at its maxReplicas, and
/// never more than `MAX_JOB_REPLICAS` (also when the spec does not decode).
pub fn rank_bound(job: &CachedJob) -> usize {
    let cap = usize::try_from(limits::MAX_JOB_REPLICAS).unwrap_or(0);
    let Ok(sizes) = serde_json::from_str::<SpecSizes>(job.spec.get()) else {
        return cap;
    };
    let total = sizes.tasks.iter().fold(0i64, |sum, t| {
        let most = t.replicas.max(t.max_replicas.unwrap_or(t.replicas)).max(0);
        sum.saturating_add(most)
    });
    usize::try_from(total).map_or(cap, |t| t.min(cap))
}

/// The job's `status.ranks`, decoded once per computed answer. A status that does not decode
/// has no table: the pods' annotations decide.
fn rank_table(job: &CachedJob) -> Vec<String> {
    job.status()
        .ok()
        .flatten()
        .and_then(|s| s.ranks)
        .unwrap_or_default()
}

fn live_replicas(state: &ServerState, job: &CachedJob, table: &[String]) -> Vec<Replica> {
    let key = ObjectKey::of(&job.metadata);
    let bound = rank_bound(job);
    // The controller's rank table wins over a pod's annotation: an adopted DI-orchestrator pod
    // may carry a rank past the job's size (its `max + 1` restart rule) that the controller
    // replaced with a free one in `status.ranks`, as `DI_NODES` will have it.
    let mut replicas: Vec<Replica> = state
        .caches
        .pods_of(&key)
        .into_iter()
        .filter(|p| is_live_pod_of(job, p))
        .filter_map(|pod| {
            let ip = pod.status.as_ref()?.pod_ip.clone()?;
            let name = pod.metadata.name.as_deref().unwrap_or_default();
            let listed = table
                .iter()
                .take(bound)
                .position(|n| !n.is_empty() && n == name);
            if let Some(rank) = listed {
                let port = worker_port(&pod);
                return Some(Replica {
                    rank,
                    address: format!("{ip}:{port}"),
                    pod,
                });
            }
            let text = pod.annotation(PodAnnotation::Rank)?;
            // Anyone who may annotate pods in the namespace writes this: a rank outside the
            // job's size is ignored and counted, never used to size anything.
            let rank = match text.parse::<usize>() {
                Ok(rank) if rank < bound => rank,
                _ => {
                    state.metrics.server.ignored_ranks.inc();
                    tracing::debug!(
                        pod = ?pod.metadata.name,
                        job = %key,
                        rank = %text.chars().take(32).collect::<String>(),
                        bound,
                        "ignoring a rank annotation outside the job's size"
                    );
                    return None;
                }
            };
            let port = worker_port(&pod);
            Some(Replica {
                rank,
                address: format!("{ip}:{port}"),
                pod,
            })
        })
        .collect();
    replicas.sort_by_key(|r| r.rank);
    replicas
}

/// The `di-port` of `di-container`, else 22270 (spec section 10).
fn worker_port(pod: &CachedPod) -> i32 {
    pod.spec
        .as_ref()
        .and_then(|s| {
            s.containers
                .iter()
                .find(|c| c.name == DEFAULT_CONTAINER_NAME)
        })
        .and_then(|c| c.ports.as_ref())
        .and_then(|ports| {
            ports
                .iter()
                .find(|p| p.name.as_deref() == Some(DEFAULT_PORT_NAME))
        })
        .map_or(DEFAULT_PORT, |p| p.container_port)
}

/// GET replicas: `"ip:port"` per rank (a rank with no live pod is `""`; no replica at all is
/// `null`, as di-server answers); `?detail=true` adds pod, task, phase and node per replica.
async fn get_replicas(
    State(state): State<Arc<ServerState>>,
    method: Method,
    job: AuthorizedJob,
    Query(query): Query<ReplicasQuery>,
) -> Result<Response, ApiError> {
    let id = state.acting_on(&job, &method);
    let job = find_job(&state, id)?;
    // Read before the pods are (see `PodCache::version`): a pod change after this read moves
    // the version on, so an answer is never kept under a version newer than its pods.
    let inputs = (!query.detail)
        .then(|| {
            Some(AnswerInputs {
                uid: job.metadata.uid.as_deref()?,
                resource_version: job.metadata.resource_version.as_deref()?,
                pods: state
                    .caches
                    .pods
                    .version(&id.job.namespace, &naming::job_label_value(&id.job.name))?,
            })
        })
        .flatten();
    if let Some(inputs) = inputs
        && let Some(body) = state.answers.get(&id.job, inputs)
    {
        return Ok(encoded(StatusCode::OK, body));
    }
    let table = rank_table(&job);
    let replicas = live_replicas(&state, &job, &table);
    const MESSAGE: &str = "successfully get replicas";
    if query.detail {
        let data: Vec<Value> = replicas
            .iter()
            .map(|r| {
                let meta = &r.pod.metadata;
                json!({
                    "rank": r.rank,
                    "address": r.address,
                    "pod": meta.name,
                    "task": r.pod.label(PodLabel::TaskName),
                    "type": r.pod.label(PodLabel::TaskType),
                    "phase": r.pod.status.as_ref().and_then(|s| s.phase.clone()),
                    "node": r.pod.spec.as_ref().and_then(|s| s.node_name.clone()),
                })
            })
            .collect();
        return Ok(envelope(StatusCode::OK, MESSAGE, Value::Array(data)));
    }
    let body = envelope_body(
        StatusCode::OK,
        MESSAGE,
        replica_addresses(&job, table.len(), replicas),
    );
    if let Some(inputs) = inputs {
        state.answers.insert(id.job.clone(), inputs, body.clone());
    }
    Ok(encoded(StatusCode::OK, body))
}

/// GET replicas' `data`: the address per rank (`table`: the length of `status.ranks`), `null`
/// when there is no replica.
fn replica_addresses(job: &CachedJob, table: usize, replicas: Vec<Replica>) -> Value {
    if replicas.is_empty() {
        return Value::Null;
    }
    // `status.ranks` is trusted no further than the job's size either.
    let ranks = table.min(rank_bound(job));
    // Every rank in `replicas` is below the bound (checked above), so is `len`.
    let len = replicas.last().map_or(0, |r| r.rank + 1).max(ranks);
    let mut data = vec![String::new(); len];
    for r in replicas {
        if let Some(slot) = data.get_mut(r.rank) {
            *slot = r.address;
        }
    }
    json!(data)
}

/// Decodes a JSON body, answering malformed or oversized input with the envelope.
fn json_body(body: Result<Bytes, BytesRejection>) -> Result<Value, ApiError> {
    let bytes = body.map_err(|rejection| {
        let status = rejection.status();
        if crate::http::listen::is_body_timeout(&rejection) {
            return fail(StatusCode::REQUEST_TIMEOUT, rejection.body_text());
        }
        let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
            format!("request body is larger than {MAX_BODY} bytes")
        } else {
            rejection.body_text()
        };
        fail(status, message)
    })?;
    if bytes.is_empty() {
        return Err(fail(StatusCode::BAD_REQUEST, "request body is empty: EOF"));
    }
    serde_json::from_slice(&bytes).map_err(|e| {
        fail(
            StatusCode::BAD_REQUEST,
            format!("request body is not valid JSON: {e}"),
        )
    })
}

/// `{"replicas": n}` with 1 ≤ n ≤ `MAX_TASK_REPLICAS`, or (DELETE only) `{"pods": [...]}` with
/// at most `MAX_JOB_REPLICAS` names.
fn scale_request(body: &Value, allow_pods: bool) -> Result<(), String> {
    let object = body
        .as_object()
        .ok_or_else(|| "request body must be a JSON object like {\"replicas\": 1}".to_string())?;
    if allow_pods && let Some(pods) = object.get("pods") {
        let pods = pods
            .as_array()
            .filter(|a| !a.is_empty() && a.iter().all(Value::is_string))
            .ok_or_else(|| "pods must be a non-empty list of pod names".to_string())?;
        let most = usize::try_from(limits::MAX_JOB_REPLICAS).unwrap_or(0);
        if pods.len() > most {
            return Err(format!(
                "pods may name at most {most} pods, got {}",
                pods.len()
            ));
        }
        return Ok(());
    }
    let most = limits::MAX_TASK_REPLICAS;
    match object.get("replicas") {
        None => Err("replicas is required, e.g. {\"replicas\": 1}".to_string()),
        Some(n) => match n.as_i64() {
            Some(n) if (1..=i64::from(most)).contains(&n) => Ok(()),
            Some(n) => Err(format!("replicas must be between 1 and {most}, got {n}")),
            None => Err(format!("replicas must be an integer, got {n}")),
        },
    }
}

async fn scale(
    state: Arc<ServerState>,
    id: &JobId,
    body: Result<Bytes, BytesRejection>,
    delete: bool,
) -> Result<Response, ApiError> {
    let cached = find_job(&state, id)?;
    let body = json_body(body)?;
    scale_request(&body, delete).map_err(|message| fail(StatusCode::BAD_REQUEST, message))?;
    let job = cached.decode().map_err(|e| {
        fail(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cached job does not decode: {e}"),
        )
    })?;
    if let Some(message) = oversized(&job) {
        return Err(fail(StatusCode::BAD_REQUEST, message));
    }
    if !job.spec.preemptible {
        return Err(fail(
            StatusCode::BAD_REQUEST,
            format!(
                "job {} is not preemptible: scale it by editing spec.tasks[].replicas (kubectl edit dijob {} -n {})",
                id.job, id.job.name, id.job.namespace
            ),
        ));
    }
    // The count is computed from the job as read, and written only if the job is still at that
    // resourceVersion: two concurrent "add 1" calls make +2, never +1. On a conflict the job is
    // read again from the API server (the cache may lag) and the call retried.
    let mut job = job;
    for attempt in 0..3 {
        let status = if delete && body.get("pods").is_some() {
            remove_pods(&job, &body)
        } else {
            scale_target(&job, &body, delete)
                .map(|(task, count)| json!({"taskReplicas": {task: count}}))
        }
        .map_err(|m| fail(StatusCode::BAD_REQUEST, m))?;
        // The allocator places the new count (or frees the removed replicas) on the next reconcile.
        let patch = json!({
            "metadata": {"resourceVersion": job.metadata.resource_version},
            "status": status,
        });
        match write_status(&state, id, &patch, "replicas").await {
            Ok(()) => break,
            Err(e) if e.status == StatusCode::CONFLICT && attempt < 2 => {
                let jobs: Api<DIJob> = Api::namespaced(state.client.clone(), &id.job.namespace);
                job = jobs.get(&id.job.name).await.map_err(|e| {
                    fail(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("cannot read the job again after a conflict: {e}"),
                    )
                })?;
            }
            Err(e) => return Err(e),
        }
    }
    let message = if delete {
        "successfully delete replicas"
    } else {
        "successfully add replicas"
    };
    Ok(envelope(StatusCode::OK, message, Value::Null))
}

/// The status change that removes exactly the named pods of a preemptible job, all or nothing:
/// each task's new count (`taskReplicas`) and the local ranks it no longer runs
/// (`removedRanks`). Every name must be a replica the job runs now, and no task may go below
/// its minReplicas.
pub fn remove_pods(job: &DIJob, body: &Value) -> Result<Value, String> {
    let names: BTreeSet<&str> = body
        .get("pods")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let slots = build::desired_slots(job);
    // One lookup per name: the work stays linear in the request and the job.
    let by_name: HashMap<&str, (usize, i32)> = slots
        .iter()
        .map(|(pod, task, rank)| (pod.as_str(), (*task, *rank)))
        .collect();
    let mut by_task: BTreeMap<usize, Vec<i32>> = BTreeMap::new();
    for name in &names {
        let Some((task, rank)) = by_name.get(name) else {
            const SHOWN: usize = 20;
            let mut known: Vec<&str> = slots
                .iter()
                .take(SHOWN)
                .map(|(pod, _, _)| pod.as_str())
                .collect();
            let more = format!("… ({} more)", slots.len().saturating_sub(SHOWN));
            if slots.len() > SHOWN {
                known.push(&more);
            }
            let name: String = name.chars().take(253).collect();
            return Err(format!(
                "pod {name} is not a replica of job {}/{}; its replicas: {}",
                job.metadata.namespace.as_deref().unwrap_or_default(),
                job.metadata.name.as_deref().unwrap_or_default(),
                known.join(", ")
            ));
        };
        by_task.entry(*task).or_default().push(*rank);
    }
    let mut counts = serde_json::Map::new();
    let mut removed_out = serde_json::Map::new();
    for (index, ranks) in by_task {
        // `index` comes from `desired_slots` of this job.
        let Some(task) = job.spec.tasks.get(index) else {
            continue;
        };
        let name = build::task_name(task);
        let now = build::task_local_ranks(job, index);
        let left = i32::try_from(now.len().saturating_sub(ranks.len())).unwrap_or(0);
        if left < task.min_replicas() {
            return Err(format!(
                "task {name} has {} replicas and may not go below minReplicas {}; removing {} would leave {left}",
                now.len(),
                task.min_replicas(),
                ranks.len()
            ));
        }
        let mut removed: Vec<i32> = job
            .status
            .as_ref()
            .and_then(|s| s.removed_ranks.as_ref())
            .and_then(|m| m.get(&name))
            .cloned()
            .unwrap_or_default();
        removed.extend(&ranks);
        removed.sort_unstable();
        removed.dedup();
        // Ranks above every one still running need no record: growing appends after them anyway.
        let highest = now
            .iter()
            .filter(|r| !ranks.contains(r))
            .max()
            .copied()
            .unwrap_or(-1);
        removed.retain(|r| *r < highest);
        counts.insert(name.clone(), json!(left));
        removed_out.insert(name, json!(removed));
    }
    Ok(json!({"taskReplicas": counts, "removedRanks": removed_out}))
}

/// The task to scale and its new replica count, for a preemptible job: the body's `task`, else
/// the job's only task whose minReplicas and maxReplicas differ (several: the caller must name
/// one); the count must stay within them.
pub fn scale_target(job: &DIJob, body: &Value, delete: bool) -> Result<(String, i32), String> {
    // Task names for a message: `a, b, c`.
    fn listed<'a>(tasks: impl Iterator<Item = &'a (usize, String)>) -> String {
        tasks
            .map(|(_, t)| t.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
    let n = body
        .get("replicas")
        .and_then(Value::as_i64)
        .and_then(|n| i32::try_from(n).ok())
        .unwrap_or(0);
    let tasks: Vec<(usize, String)> = job
        .spec
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (i, build::task_name(t)))
        .collect();
    let elastic: Vec<&(usize, String)> = tasks
        .iter()
        .filter(|(i, _)| {
            let t = &job.spec.tasks[*i];
            t.min_replicas() != t.max_replicas()
        })
        .collect();
    let index = match body.get("task").and_then(Value::as_str) {
        Some(name) => tasks
            .iter()
            .find(|(_, t)| t == name)
            .map(|(i, _)| *i)
            .ok_or_else(|| {
                format!(
                    "job has no task {name}; its tasks: {}",
                    listed(tasks.iter())
                )
            })?,
        None => match elastic[..] {
            [] => {
                return Err("no task of this job can be scaled: set minReplicas and maxReplicas on the task to scale".to_string());
            }
            [(i, _)] => *i,
            _ => {
                return Err(format!(
                    "several tasks can be scaled ({}): name one with \"task\"",
                    listed(elastic.iter().copied())
                ));
            }
        },
    };
    // `index` is one of `tasks`' indices.
    let Some(task) = job.spec.tasks.get(index) else {
        return Err("job has no such task".to_string());
    };
    let name = build::task_name(task);
    let now = build::task_replicas(job, index);
    let want = if delete {
        now.saturating_sub(n)
    } else {
        now.saturating_add(n)
    };
    let (min, max) = (task.min_replicas(), task.max_replicas());
    if want < min || want > max {
        return Err(format!(
            "task {name} has {now} replicas and may run {min} to {max} (minReplicas..maxReplicas); {} {n} would make {want}",
            if delete { "removing" } else { "adding" }
        ));
    }
    Ok((name, want))
}

/// Merge-patches the job's status (bounded like every write), mapping errors to responses.
async fn write_status(
    state: &ServerState,
    id: &JobId,
    patch: &Value,
    what: &str,
) -> Result<(), ApiError> {
    let jobs: Api<DIJob> = Api::namespaced(state.client.clone(), &id.job.namespace);
    let params = crate::writes::patch_params();
    let merge = Patch::Merge(patch);
    let write = jobs.patch_status(&id.job.name, &params, &merge);
    let Ok(result) = tokio::time::timeout(WRITE_TIMEOUT, write).await else {
        return Err(fail(
            StatusCode::GATEWAY_TIMEOUT,
            format!(
                "the Kubernetes API server did not answer within {} s; try again",
                WRITE_TIMEOUT.as_secs()
            ),
        ));
    };
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Err(fail(
            StatusCode::NOT_FOUND,
            format!(
                "dijobs.diengine.opendilab.org \"{}\" not found",
                id.job.name
            ),
        )),
        Err(kube::Error::Api(status)) if status.code == 409 => Err(fail(
            StatusCode::CONFLICT,
            format!("the job changed while writing {what}; try again"),
        )),
        Err(e) => {
            tracing::warn!(job = %id.job, error = %e, what, "status write failed");
            Err(fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot write {what}: {e}"),
            ))
        }
    }
}

/// POST adds replicas, DELETE removes them (`DELETE`): one handler, so the two methods cannot
/// drift apart in what they check before `scale`.
async fn scale_replicas<const DELETE: bool>(
    State(state): State<Arc<ServerState>>,
    method: Method,
    job: AuthorizedJob,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let id = state.acting_on(&job, &method);
    scale(state.clone(), id, body, DELETE).await
}

/// Why the replica API will not scale `job`: a count past the documented maximums
/// (`api::limits`), which the CRD and the webhook refuse but an older stored job may have.
fn oversized(job: &DIJob) -> Option<String> {
    if job.spec.tasks.len() > limits::MAX_TASKS {
        return Some(format!(
            "spec.tasks: job has {} tasks, more than the maximum {}; the replica API does not scale it",
            job.spec.tasks.len(),
            limits::MAX_TASKS
        ));
    }
    let mut total: i64 = 0;
    for (i, task) in job.spec.tasks.iter().enumerate() {
        for (field, n) in [
            ("replicas", Some(task.replicas)),
            ("minReplicas", task.min_replicas),
            ("maxReplicas", task.max_replicas),
        ] {
            if let Some(n) = n.filter(|n| *n > limits::MAX_TASK_REPLICAS) {
                return Some(format!(
                    "spec.tasks[{i}].{field}: {n} is more than the maximum {}; the replica API does not scale this job",
                    limits::MAX_TASK_REPLICAS
                ));
            }
        }
        total += i64::from(task.replicas.max(task.max_replicas()).max(0));
    }
    (total > i64::from(limits::MAX_JOB_REPLICAS)).then(|| {
        format!(
            "spec.tasks: the job's tasks may run {total} replicas at their maxReplicas, more than the maximum {}; the replica API does not scale it",
            limits::MAX_JOB_REPLICAS
        )
    })
}

/// POST profilings: `{"data": {...}}` (or a bare object) merged into `status.profilings`.
async fn post_profilings(
    State(state): State<Arc<ServerState>>,
    method: Method,
    job: AuthorizedJob,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let id = state.acting_on(&job, &method);
    let cached = find_job(&state, id)?;
    let body = json_body(body)?;
    let data = match body.get("data") {
        Some(data) => data.clone(),
        None => body,
    };
    if !data.is_object() {
        return Err(fail(
            StatusCode::BAD_REQUEST,
            "profilings must be a JSON object, e.g. {\"data\": {\"throughput\": 1.5}}",
        ));
    }
    // The merge is checked against the job as read and written only if the job is still at
    // that resourceVersion, so concurrent reports cannot together pass the caps. On a conflict
    // the job is read again from the API server (the cache may lag).
    let mut current = cached
        .status()
        .map_err(|e| {
            fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the job's status does not decode: {e}"),
            )
        })?
        .and_then(|s| s.profilings);
    let mut version = cached.metadata.resource_version.clone();
    const ATTEMPTS: usize = 5;
    for attempt in 1..=ATTEMPTS {
        check_profilings(current.as_ref(), &data)?;
        let patch = json!({
            "metadata": {"resourceVersion": version},
            "status": {"profilings": data},
        });
        match write_status(&state, id, &patch, "profilings").await {
            Ok(()) => break,
            Err(e) if e.status == StatusCode::CONFLICT && attempt < ATTEMPTS => {
                let jobs: Api<DIJob> = Api::namespaced(state.client.clone(), &id.job.namespace);
                let job = jobs.get(&id.job.name).await.map_err(|e| {
                    fail(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("cannot read the job again after a conflict: {e}"),
                    )
                })?;
                current = job.status.and_then(|s| s.profilings);
                version = job.metadata.resource_version;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(envelope(
        StatusCode::OK,
        "successfully report profilings",
        Value::Null,
    ))
}

/// POST checkpoint: the job's workers saved a checkpoint, `{"time": "<RFC 3339>"}` or `{}`
/// for now. Recorded in `status.lastCheckpointTime`, which preemption reads as the work an
/// eviction would lose. The time is untrusted: it is bounded to the job's creation and the
/// moment of the report ([`checkpoint_time`]), and the allocator bounds the loss again by how
/// long the job's pods have run, so no report makes a job cost more to evict than its real run.
async fn post_checkpoint(
    State(state): State<Arc<ServerState>>,
    method: Method,
    job: AuthorizedJob,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let id = state.acting_on(&job, &method);
    let cached = find_job(&state, id)?;
    let body = json_body(body)?;
    let created = cached.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let time = checkpoint_time(&body, created, jiff::Timestamp::now())?;
    let patch = json!({"status": {"lastCheckpointTime": time.to_string()}});
    write_status(&state, id, &patch, "checkpoint").await?;
    Ok(envelope(
        StatusCode::OK,
        "successfully report checkpoint",
        json!({"lastCheckpointTime": time.to_string()}),
    ))
}

/// The checkpoint time a report says, bounded to `[created, now]`: a time in the future is
/// now, one before the job existed is its creation. `{}` is now.
pub fn checkpoint_time(
    body: &Value,
    created: Option<jiff::Timestamp>,
    now: jiff::Timestamp,
) -> Result<jiff::Timestamp, ApiError> {
    let Some(object) = body.as_object() else {
        return Err(fail(
            StatusCode::BAD_REQUEST,
            "a checkpoint report is a JSON object: {} or {\"time\": \"2026-11-27T06:00:00Z\"}",
        ));
    };
    let time = match object.get("time") {
        None | Some(Value::Null) => now,
        Some(Value::String(text)) => text.parse::<jiff::Timestamp>().map_err(|e| {
            fail(
                StatusCode::BAD_REQUEST,
                format!(
                    "time {:?} is not an RFC 3339 timestamp: {e}",
                    diorch_core::planner::clip(text, 64)
                ),
            )
        })?,
        Some(_) => {
            return Err(fail(
                StatusCode::BAD_REQUEST,
                "time must be an RFC 3339 timestamp string, e.g. \"2026-11-27T06:00:00Z\"",
            ));
        }
    };
    let time = time.min(now);
    Ok(created.map_or(time, |c| time.max(c.min(now))))
}

/// Refuses a profilings report whose merge into `current` (JSON merge patch, as the API server
/// applies it) would leave more than [`MAX_PROFILINGS_BYTES`] or [`MAX_PROFILINGS_KEYS`].
pub fn check_profilings(current: Option<&Value>, data: &Value) -> Result<(), ApiError> {
    let mut merged = current.cloned().unwrap_or_else(|| json!({}));
    json_patch::merge(&mut merged, data);
    let keys = count_keys(&merged);
    if keys > MAX_PROFILINGS_KEYS {
        return Err(fail(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "status.profilings would hold {keys} keys after this report, more than the {MAX_PROFILINGS_KEYS} allowed: report fewer keys (a null value removes one)"
            ),
        ));
    }
    let mut counter = ByteCount(0);
    // Writing into a counter cannot fail.
    let _ = serde_json::to_writer(&mut counter, &merged);
    if counter.0 > MAX_PROFILINGS_BYTES {
        return Err(fail(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "status.profilings would be {} bytes after this report, more than the {MAX_PROFILINGS_BYTES} allowed: report fewer or smaller values (a null value removes a key)",
                counter.0
            ),
        ));
    }
    Ok(())
}

/// Object keys at every depth (iterative: no recursion on nested input).
fn count_keys(value: &Value) -> usize {
    let mut keys = 0;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(map) => {
                keys += map.len();
                stack.extend(map.values());
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    keys
}

/// An `io::Write` that only counts.
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
