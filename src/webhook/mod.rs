//! Admission for DIJobs (AdmissionReview v1): the mutating webhook's defaulting and the
//! validating webhook's checks, as pure functions from a review to its answer, plus the axum
//! routes on DI-orchestrator's leftover webhook paths.
//!
//! Owns what is refused at submission and why. The rules themselves live in
//! `controller::validate`, shared with the controller's Failed fallback, so a cluster without
//! the webhook still gets the same messages. `tls` serves the routes; `cert` makes the
//! certificates. Nothing here writes to the cluster, so dry-run reviews are safe by design.

pub mod cert;
pub mod tls;

use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::routing::post;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde_json::Value;

use crate::metrics::{AdmissionLabels, Metrics};
use diorch_core::api::DIJob;
use diorch_core::{build, validate};

/// DI-orchestrator's (unused) mutating webhook path.
pub const MUTATE_PATH: &str = "/mutate-diengine-opendilab-org-v2alpha1-dijob";
/// DI-orchestrator's (unused) validating webhook path.
pub const VALIDATE_PATH: &str = "/validate-diengine-opendilab-org-v2alpha1-dijob";

/// The two webhook routes, plus `/healthz` for the listener itself.
pub fn router(metrics: Option<Arc<Metrics>>) -> Router {
    let m = metrics.clone();
    Router::new()
        .route(
            MUTATE_PATH,
            post(move |body: Bytes| async move { Json(serve(&body, "mutate", mutate, m.as_deref())) }),
        )
        .route(
            VALIDATE_PATH,
            post(move |body: Bytes| async move {
                Json(serve(&body, "validate", check, metrics.as_deref()))
            }),
        )
        .route("/healthz", axum::routing::get(|| async { "ok" }))
}

/// Any body, JSON or not, gets a well-formed review back (a refusal for garbage), counted.
fn serve(
    body: &[u8],
    webhook: &'static str,
    decide: fn(&AdmissionRequest<DIJob>) -> AdmissionResponse,
    metrics: Option<&Metrics>,
) -> AdmissionReview<DynamicObject> {
    let started = Instant::now();
    let review = serde_json::from_slice::<Value>(body).unwrap_or(Value::Null);
    let operation = operation_label(review.pointer("/request/operation"));
    let out = answer(review, decide);
    if let Some(m) = metrics {
        let result = match out.response.as_ref() {
            // A refusal of the job is `denied` (403); a body we could not read or a default we
            // could not encode is the webhook's failure, which alerts watch for.
            Some(r) if !r.allowed && r.result.code == 403 => "denied",
            Some(r) if !r.allowed => "error",
            Some(r) if r.patch.is_some() => "patched",
            _ => "allowed",
        };
        m.admission
            .reviews
            .get_or_create(&AdmissionLabels {
                webhook,
                operation,
                result,
            })
            .inc();
        m.admission
            .duration
            .observe(started.elapsed().as_secs_f64());
    }
    if let Some(r) = out.response.as_ref().filter(|r| !r.allowed) {
        tracing::info!(webhook, operation, uid = %r.uid, reason = %r.result.message, "admission denied");
    }
    out
}

/// The review's operation as a metric label and log field: one of a fixed set, so a request's
/// text never grows the label set.
pub fn operation_label(operation: Option<&Value>) -> &'static str {
    match operation.and_then(Value::as_str) {
        Some("CREATE") => "CREATE",
        Some("UPDATE") => "UPDATE",
        Some("DELETE") => "DELETE",
        Some("CONNECT") => "CONNECT",
        _ => "other",
    }
}

/// A refusal as the API server reports it: 403 Forbidden with our message.
fn refuse(response: AdmissionResponse, message: impl ToString) -> AdmissionResponse {
    let mut response = response.deny(message);
    response.result.code = 403;
    response.result.reason = "Forbidden".to_string();
    response
}

/// The webhook's own failure (500), told apart from a refusal of the job in the metrics.
fn internal_error(request: &AdmissionRequest<DIJob>, message: String) -> AdmissionResponse {
    let mut response = AdmissionResponse::from(request).deny(message);
    response.result.code = 500;
    response.result.reason = "InternalError".to_string();
    response
}

/// Decodes a review, answers it with `decide`, and always returns a well-formed review: a body
/// that is not an AdmissionReview of a DIJob is refused, never a panic or an HTTP error.
pub fn answer(
    review: Value,
    decide: fn(&AdmissionRequest<DIJob>) -> AdmissionResponse,
) -> AdmissionReview<DynamicObject> {
    let request: Result<AdmissionRequest<DIJob>, String> =
        serde_json::from_value::<AdmissionReview<DIJob>>(review)
            .map_err(|e| format!("not an AdmissionReview of a DIJob: {e}"))
            .and_then(|r| {
                r.try_into()
                    .map_err(|e: kube::core::admission::ConvertAdmissionReviewError| e.to_string())
            });
    match request {
        Ok(request) => decide(&request).into_review(),
        Err(message) => {
            let mut response = AdmissionResponse::invalid(message);
            response.result.code = 400;
            response.result.reason = "BadRequest".to_string();
            response.into_review()
        }
    }
}

/// Defaulting: every typed task without a name gets its type as name (DI-orchestrator's
/// reconciler did this after the fact). Idempotent: a defaulted job gets no patch.
pub fn mutate(request: &AdmissionRequest<DIJob>) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    let Some(job) = request.object.as_ref() else {
        return response;
    };
    let Some(patch) = validate::task_name_defaults(job) else {
        return response;
    };
    match serde_json::from_value::<json_patch::Patch>(patch) {
        Ok(patch) => match response.with_patch(patch) {
            Ok(patched) => patched,
            Err(e) => internal_error(request, format!("cannot encode the defaults: {e}")),
        },
        Err(e) => internal_error(request, format!("cannot build the defaults: {e}")),
    }
}

/// Validation: spec section 11's rules with DI-orchestrator's messages, names and lengths, job
/// volumes that clash with template volumes, and what may not change on an existing job. Each
/// refusal names the field and the fix.
pub fn check(request: &AdmissionRequest<DIJob>) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    let Some(job) = request.object.as_ref() else {
        return response;
    };
    let job = defaulted(job);
    if let Err(invalid) = validate::validate(&job) {
        return refuse(response, invalid.explained());
    }
    if let Some(message) = volume_clash(&job) {
        return refuse(response, message);
    }
    if request.operation == Operation::Update
        && let Some(old) = request.old_object.as_ref()
        && let Some(message) = forbidden_change(&defaulted(old), &job)
    {
        return refuse(response, message);
    }
    response
}

/// The job as the mutating webhook would leave it (validation must not depend on whether that
/// webhook is installed).
fn defaulted(job: &DIJob) -> DIJob {
    let mut job = job.clone();
    for task in &mut job.spec.tasks {
        if task.name.as_deref().is_none_or(str::is_empty)
            && task
                .type_
                .is_some_and(|t| t != diorch_core::api::TaskType::None)
        {
            task.name = Some(build::task_name(task));
        }
    }
    job
}

/// A job volume whose name a task's template already uses: the pod would have two volumes of
/// one name and the API server would refuse every pod.
fn volume_clash(job: &DIJob) -> Option<String> {
    // One pass over each list (an index of template volume names, first task first), so the
    // work stays linear in the request however many volumes both sides list.
    let mut template_volumes: std::collections::HashMap<&str, &diorch_core::api::Task> =
        std::collections::HashMap::new();
    for task in &job.spec.tasks {
        let volumes = task.template.spec.as_ref().and_then(|s| s.volumes.as_ref());
        for volume in volumes.into_iter().flatten() {
            template_volumes.entry(volume.name.as_str()).or_insert(task);
        }
    }
    let job_volumes = job.spec.volumes.as_deref().unwrap_or_default();
    job_volumes.iter().enumerate().find_map(|(j, volume)| {
        template_volumes.get(volume.name.as_str()).map(|task| {
            format!(
                "spec.volumes[{j}].name: Duplicate value: \"{}\": task {} already has a volume of that name in its template; rename one of them",
                volume.name,
                build::task_name(task)
            )
        })
    })
}

/// A task that keeps its name must keep its type: its pods, env vars and `DI_<TASK>_NODES`
/// were built for that role. Tasks cannot be added, removed or renamed: every pod's
/// `DI_NODES`, ranks and services were built for that set of roles.
fn forbidden_change(old: &DIJob, new: &DIJob) -> Option<String> {
    let names = |j: &DIJob| {
        j.spec
            .tasks
            .iter()
            .map(build::task_name)
            .collect::<std::collections::BTreeSet<_>>()
    };
    let (before, after) = (names(old), names(new));
    if before != after {
        let show = |s: &std::collections::BTreeSet<String>| {
            s.iter().cloned().collect::<Vec<_>>().join(", ")
        };
        return Some(format!(
            "spec.tasks: Forbidden: the tasks of an existing job cannot be added, removed or renamed (it has {}, the update has {}); keep the task names, or delete and re-create the job",
            show(&before),
            show(&after)
        ));
    }
    for (i, task) in new.spec.tasks.iter().enumerate() {
        let name = build::task_name(task);
        let before = old
            .spec
            .tasks
            .iter()
            .find(|t| build::task_name(t) == name)?;
        if before.type_ != task.type_ {
            let show = |t: Option<diorch_core::api::TaskType>| t.map_or("none", |t| t.as_str());
            return Some(format!(
                "spec.tasks[{i}].type: Forbidden: task {name} is a {} task and cannot become a {} task on an existing job; delete and re-create the job, or add a new task",
                show(before.type_),
                show(task.type_)
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests;
