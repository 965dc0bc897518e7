//! The replica API: di-server compatible HTTP endpoints for DI-engine workers (spec section 10),
//! served by `diorch run` from the controller's caches.
//!
//! Owns HTTP routing, job-id parsing, the `{"success","code","message","data"}` envelope, and the
//! request metrics. Reads jobs and pods only from the reflector caches; its one write is the
//! profilings merge into a job's status. It never creates or deletes pods: scaling goes through
//! the job, and the controller does the pod work.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

pub mod auth;
pub mod client;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, MatchedPath, Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::{DEFAULT_CONTAINER_NAME, DEFAULT_PORT, DEFAULT_PORT_NAME, DIJob, labels};
use crate::controller::build;
use crate::controller::cache::CachedJob;
use crate::controller::cache::CachedPod;
use crate::controller::executor::Caches;
use crate::metrics::{Metrics, RequestLabels};

/// Largest request body accepted (profilings are merged into the job's status).
pub const MAX_BODY: usize = 64 * 1024;

/// What the handlers share.
#[derive(Clone)]
pub struct ServerState {
    pub caches: Caches,
    pub client: Client,
    pub metrics: Arc<Metrics>,
    /// Set with `--server-auth kubernetes`.
    pub auth: Option<Arc<auth::Authorizer>>,
}

/// The OpenAPI document of these routes, served at `/openapi.json` (checked in under `docs/`).
pub const OPENAPI: &str = include_str!("../../docs/replica-api.openapi.json");

/// The routes: DI-orchestrator's code serves `/v2alpha1/job/{id}/…`, its design document shows
/// `/v2alpha1/{id}/…`; both work.
pub fn router(state: ServerState) -> Router {
    let metrics = state.metrics.clone();
    let mut api = Router::new();
    for prefix in ["/v2alpha1/job/{id}", "/v2alpha1/{id}"] {
        api = api
            .route(
                &format!("{prefix}/replicas"),
                get(get_replicas).post(add_replicas).delete(delete_replicas),
            )
            .route(&format!("{prefix}/profilings"), post(post_profilings));
    }
    if let Some(authorizer) = state.auth.clone() {
        api = api.route_layer(middleware::from_fn_with_state(authorizer, auth::authorize));
    }
    api.route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route(
            "/openapi.json",
            get(|| async { ([(header::CONTENT_TYPE, "application/json")], OPENAPI) }),
        )
        .route(
            "/metrics",
            get(|State(s): State<ServerState>| async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    s.metrics.encode(),
                )
            }),
        )
        .route_layer(middleware::from_fn_with_state(metrics, track))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

async fn track(State(metrics): State<Arc<Metrics>>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let method = request.method().to_string();
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

async fn readyz(State(s): State<ServerState>) -> Response {
    if s.caches.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ok").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced").into_response()
    }
}

/// di-server's envelope: `code` 0 on success, 1 on failure.
pub fn envelope(status: StatusCode, message: impl Into<String>, data: Value) -> Response {
    let ok = status.is_success();
    let body = json!({
        "success": ok,
        "code": if ok { 0 } else { 1 },
        "message": message.into(),
        "data": data,
    });
    (
        status,
        [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
        body.to_string(),
    )
        .into_response()
}

/// A refused request: its status and the envelope's message.
#[derive(Debug)]
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
    pub namespace: String,
    pub name: String,
    pub generation: Option<i64>,
}

/// Parses a job id. Names of jobs diorch runs contain no dot (they must be DNS labels), so the
/// id splits unambiguously.
pub fn parse_job_id(id: &str) -> Result<JobId, String> {
    let parts: Vec<&str> = id.split('.').collect();
    let bad =
        || format!("job id {id} must be in namespace.name format (or namespace.name.generation)");
    match parts.as_slice() {
        [ns, name] if !ns.is_empty() && !name.is_empty() => Ok(JobId {
            namespace: ns.to_string(),
            name: name.to_string(),
            generation: None,
        }),
        [ns, name, generation] if !ns.is_empty() && !name.is_empty() => Ok(JobId {
            namespace: ns.to_string(),
            name: name.to_string(),
            generation: Some(generation.parse().map_err(|_| bad())?),
        }),
        _ => Err(bad()),
    }
}

/// The cached job named by `id`, or the error response.
/// The cached job named by `id` (its spec still encoded: most requests never need it).
fn find_job(state: &ServerState, id: &str) -> Result<(JobId, Arc<CachedJob>), ApiError> {
    let id = parse_job_id(id).map_err(|m| fail(StatusCode::BAD_REQUEST, m))?;
    let not_found = || {
        fail(
            StatusCode::NOT_FOUND,
            format!("dijobs.diengine.opendilab.org \"{}\" not found", id.name),
        )
    };
    let job = state
        .caches
        .job(&id.namespace, &id.name)
        .ok_or_else(not_found)?;
    if let Some(want) = id.generation {
        let have = job.metadata.generation.unwrap_or_default();
        if want != have {
            return Err(fail(
                StatusCode::CONFLICT,
                format!(
                    "job {}/{} is at generation {have}, not {want}: use {}.{}.{have} or {}.{}",
                    id.namespace, id.name, id.namespace, id.name, id.namespace, id.name
                ),
            ));
        }
    }
    Ok((id, job))
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

fn live_replicas(state: &ServerState, job: &CachedJob) -> Vec<Replica> {
    let namespace = job.metadata.namespace.as_deref().unwrap_or_default();
    let name = job.metadata.name.as_deref().unwrap_or_default();
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    let mut replicas: Vec<Replica> = state
        .caches
        .pods_of(namespace, name)
        .into_iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.metadata
                    .owner_references
                    .as_ref()
                    .is_some_and(|r| r.iter().any(|o| o.uid == uid))
                && !matches!(
                    p.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                )
        })
        .filter_map(|pod| {
            let ip = pod.status.as_ref()?.pod_ip.clone()?;
            let rank = pod
                .metadata
                .annotations
                .as_ref()?
                .get(labels::ANNOTATION_RANK)?
                .parse()
                .ok()?;
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
    State(state): State<ServerState>,
    Path(id): Path<String>,
    Query(query): Query<ReplicasQuery>,
) -> Result<Response, ApiError> {
    let (_, job) = find_job(&state, &id)?;
    let replicas = live_replicas(&state, &job);
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
                    "task": meta.labels.as_ref().and_then(|l| l.get(labels::TASK_NAME)),
                    "type": meta.labels.as_ref().and_then(|l| l.get(labels::TASK_TYPE)),
                    "phase": r.pod.status.as_ref().and_then(|s| s.phase.clone()),
                    "node": r.pod.spec.as_ref().and_then(|s| s.node_name.clone()),
                })
            })
            .collect();
        return Ok(envelope(StatusCode::OK, MESSAGE, Value::Array(data)));
    }
    if replicas.is_empty() {
        return Ok(envelope(StatusCode::OK, MESSAGE, Value::Null));
    }
    let ranks = job
        .status
        .as_ref()
        .and_then(|s| s.ranks.as_ref())
        .map_or(0, Vec::len);
    let len = replicas.last().map_or(0, |r| r.rank + 1).max(ranks);
    let mut data = vec![String::new(); len];
    for r in replicas {
        data[r.rank] = r.address;
    }
    Ok(envelope(StatusCode::OK, MESSAGE, json!(data)))
}

/// Decodes a JSON body, answering malformed or oversized input with the envelope.
fn json_body(body: Result<Bytes, BytesRejection>) -> Result<Value, ApiError> {
    let bytes = body.map_err(|rejection| {
        let status = rejection.status();
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

/// `{"replicas": n}` with 1 ≤ n ≤ 10 000, or (DELETE only) `{"pods": [...]}`.
fn scale_request(body: &Value, allow_pods: bool) -> Result<(), String> {
    let object = body
        .as_object()
        .ok_or_else(|| "request body must be a JSON object like {\"replicas\": 1}".to_string())?;
    if allow_pods && let Some(pods) = object.get("pods") {
        return pods
            .as_array()
            .filter(|a| !a.is_empty() && a.iter().all(Value::is_string))
            .map(|_| ())
            .ok_or_else(|| "pods must be a non-empty list of pod names".to_string());
    }
    match object.get("replicas") {
        None => Err("replicas is required, e.g. {\"replicas\": 1}".to_string()),
        Some(n) => match n.as_i64() {
            Some(n) if (1..=10_000).contains(&n) => Ok(()),
            Some(n) => Err(format!("replicas must be between 1 and 10000, got {n}")),
            None => Err(format!("replicas must be an integer, got {n}")),
        },
    }
}

async fn scale(
    state: ServerState,
    id: String,
    body: Result<Bytes, BytesRejection>,
    delete: bool,
) -> Result<Response, ApiError> {
    let (id, cached) = find_job(&state, &id)?;
    let body = json_body(body)?;
    scale_request(&body, delete).map_err(|message| fail(StatusCode::BAD_REQUEST, message))?;
    let job = cached.decode().map_err(|e| {
        fail(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cached job does not decode: {e}"),
        )
    })?;
    if !job.spec.preemptible {
        return Err(fail(
            StatusCode::BAD_REQUEST,
            format!(
                "job {}/{} is not preemptible: scale it by editing spec.tasks[].replicas (kubectl edit dijob {} -n {})",
                id.namespace, id.name, id.name, id.namespace
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
        match write_status(&state, &id, &patch, "replicas").await {
            Ok(()) => break,
            Err(e) if e.status == StatusCode::CONFLICT && attempt < 2 => {
                let jobs: Api<DIJob> = Api::namespaced(state.client.clone(), &id.namespace);
                job = jobs.get(&id.name).await.map_err(|e| {
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
    let mut by_task: BTreeMap<usize, Vec<i32>> = BTreeMap::new();
    for name in &names {
        let Some((_, task, rank)) = slots.iter().find(|(pod, _, _)| pod == name) else {
            let known: Vec<&str> = slots.iter().map(|(pod, _, _)| pod.as_str()).collect();
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
        let task = &job.spec.tasks[index];
        let name = build::task_name(task);
        let now = build::task_local_ranks(job, index);
        let left = i32::try_from(now.len() - ranks.len()).unwrap_or(0);
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
                    tasks
                        .iter()
                        .map(|(_, t)| t.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
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
                    elastic
                        .iter()
                        .map(|(_, t)| t.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        },
    };
    let task = &job.spec.tasks[index];
    let name = build::task_name(task);
    let now = build::task_replicas(job, index);
    let want = if delete { now - n } else { now + n };
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
    let jobs: Api<DIJob> = Api::namespaced(state.client.clone(), &id.namespace);
    let params = PatchParams::default();
    let merge = Patch::Merge(patch);
    let write = jobs.patch_status(&id.name, &params, &merge);
    let Ok(result) = tokio::time::timeout(std::time::Duration::from_secs(30), write).await else {
        return Err(fail(
            StatusCode::GATEWAY_TIMEOUT,
            "the Kubernetes API server did not answer within 30 s; try again",
        ));
    };
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Err(fail(
            StatusCode::NOT_FOUND,
            format!("dijobs.diengine.opendilab.org \"{}\" not found", id.name),
        )),
        Err(kube::Error::Api(status)) if status.code == 409 => Err(fail(
            StatusCode::CONFLICT,
            format!("the job changed while writing {what}; try again"),
        )),
        Err(e) => {
            tracing::warn!(job = %format!("{}/{}", id.namespace, id.name), error = %e, what, "status write failed");
            Err(fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot write {what}: {e}"),
            ))
        }
    }
}

async fn add_replicas(
    State(state): State<ServerState>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    scale(state, id, body, false).await
}

async fn delete_replicas(
    State(state): State<ServerState>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    scale(state, id, body, true).await
}

/// POST profilings: `{"data": {...}}` (or a bare object) merged into `status.profilings`.
async fn post_profilings(
    State(state): State<ServerState>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let (id, _) = find_job(&state, &id)?;
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
    let patch = json!({"status": {"profilings": data}});
    write_status(&state, &id, &patch, "profilings").await?;
    Ok(envelope(
        StatusCode::OK,
        "successfully report profilings",
        Value::Null,
    ))
}

#[cfg(test)]
mod tests;
