//! Prometheus metrics of the operator process, and the routes that serve them (`/metrics`) and
//! the health probes (`/healthz`, `/readyz`), kept apart so the probe address serves nothing
//! else.
//!
//! Owns the metric registry; modules record into the typed handles here and never create
//! metrics of their own. Exposes no cluster data beyond counts and durations.

mod process;

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SkipLabels {
    /// `status_echo`: the job's watch event showing the operator's own status write, which
    /// left nothing to do. `pod_node_only`: a pod's event that changed only its node (the
    /// scheduler's binding), which no pass of its job reads. `resync_unchanged`: the rolling
    /// resync's pass over a job whose last pass decided nothing from what the caches still show.
    /// `own_status_unseen`: a pod's or service's event while the cache shows its job from before
    /// the operator's own status write, which a pass would only wait for (the write's echo
    /// brings the pass).
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `ok`, `requeue` (conflict or caches not ready) or `error`.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// Which write failed: `status`, `create`, `delete`, `patch`.
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    /// `create_pod`, `delete_pod`, `create_service`, `delete_service`.
    pub action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub phase: &'static str,
}

/// Metrics of the DIJob controller.
pub struct ControllerMetrics {
    pub reconciles: Family<ResultLabels, Counter>,
    pub errors: Family<ErrorLabels, Counter>,
    pub actions: Family<ActionLabels, Counter>,
    pub transitions: Family<PhaseLabels, Counter>,
    pub duration: Histogram,
    pub events_dropped: Counter,
    /// Watch events that brought no reconcile, by why.
    pub skipped_triggers: Family<SkipLabels, Counter>,
    /// Reconciles running now.
    pub in_flight: Gauge,
    /// DIJobs triggered and waiting for a worker (`controller::queue`).
    pub queue_depth: Gauge,
    /// DIJobs in the cache by phase (no phase yet: `Pending`), refreshed every few seconds.
    pub jobs: Family<PhaseLabels, Gauge>,
    /// The longest time a cached DIJob has been in each phase, refreshed with `jobs`.
    pub oldest_in_phase: Family<PhaseLabels, Gauge>,
    /// The worker count (`--concurrency`), set when the controller starts.
    pub max_workers: Gauge,
    /// Reconciles by controller-runtime's result names, for stock dashboards.
    runtime_reconciles: Family<RuntimeResultLabels, Counter>,
    runtime_errors: Counter,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuntimeResultLabels {
    /// `success`, `error` or `requeue`.
    result: &'static str,
}

impl ControllerMetrics {
    /// Counts a watch event that brought no reconcile (`SkipLabels`).
    pub fn skip_trigger(&self, reason: &'static str) {
        self.skipped_triggers
            .get_or_create(&SkipLabels { reason })
            .inc();
    }

    /// Counts one finished reconcile, `result` being `ok`, `requeue` or `error`, under
    /// `diorch_reconciles_total` and controller-runtime's names.
    pub fn count_reconcile(&self, result: &'static str) {
        self.reconciles
            .get_or_create(&ResultLabels { result })
            .inc();
        let runtime = match result {
            "ok" => "success",
            "error" => {
                self.runtime_errors.inc();
                "error"
            }
            _ => "requeue",
        };
        self.runtime_reconciles
            .get_or_create(&RuntimeResultLabels { result: runtime })
            .inc();
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The matched route pattern (empty when none matched).
    pub route: String,
    /// From [`method_label`]: never a client's text.
    pub method: &'static str,
    pub code: u16,
}

/// A request method as a label: the standard methods by name, anything else `other`, so a
/// client cannot grow the label set.
pub fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AuthLabels {
    /// `allowed`, `unauthenticated`, `forbidden` or `unavailable`.
    pub result: &'static str,
}

/// Metrics of the replica API server.
pub struct ServerMetrics {
    pub requests: Family<RequestLabels, Counter>,
    pub duration: Histogram,
    /// Authorisation decisions of the replica API and metrics guards, by result.
    pub auth: Family<AuthLabels, Counter>,
    /// Pod rank annotations ignored because they lie outside the job's size.
    pub ignored_ranks: Counter,
}

impl ServerMetrics {
    /// Records one authorisation decision.
    pub fn observe_auth(&self, result: &'static str) {
        self.auth.get_or_create(&AuthLabels { result }).inc();
    }

    /// Records one answered request.
    pub fn observe(&self, labels: RequestLabels, seconds: f64) {
        self.requests.get_or_create(&labels).inc();
        self.duration.observe(seconds);
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AllocationLabels {
    /// The policy's name without its version hash (`binpack`, `builtin-binpack`).
    pub policy: String,
    /// Decisions: `placed`, `placed_by_fallback`, `waiting`, `moved`, `suppressed`, `stale` (a
    /// re-plan dropped because the ledger changed during its `optimize` call), `grown_back` (a
    /// job shrunk by a preemption, back to its counts); fallbacks: the
    /// plugin error reason, or `Contended` (answers that kept going stale during the call).
    pub result: String,
}

/// A shadow policy's decision, beside the policy it shadows.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShadowLabels {
    /// The policy shadowed, as jobs ask for it.
    pub policy: String,
    /// The shadow's plugin name.
    pub shadow: String,
    /// Decisions: `same`, `different`, `failed`; drops: the call (`allocate`, `optimize`).
    pub result: String,
}

/// A policy plugin's call, as the policy jobs ask for.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyCallLabels {
    /// The policy jobs ask for.
    pub policy: String,
    /// The plugin that was called (the policy itself, one promoted over it, or a shadow).
    pub plugin: String,
    /// `active` or `shadow`.
    pub role: &'static str,
    /// `allocate` or `optimize`.
    pub call: &'static str,
}

type PolicyDurationFamily = Family<PolicyCallLabels, Histogram, fn() -> Histogram>;

/// A recorded decision's fate (`--record-decisions`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RecordLabels {
    /// `written`, `dropped` (the queue was full), `too_large` (over a file's size), `failed`.
    pub result: &'static str,
}

/// Metrics of the allocator.
pub struct AllocatorMetrics {
    /// Decisions handed to the recorder, by what became of them.
    pub recorded: Family<RecordLabels, Counter>,
    /// Policy plugin call times, active and shadow side by side.
    pub policy_call_duration: PolicyDurationFamily,
    pub decisions: Family<AllocationLabels, Counter>,
    pub fallbacks: Family<AllocationLabels, Counter>,
    pub shadow_decisions: Family<ShadowLabels, Counter>,
    pub shadow_dropped: Family<ShadowLabels, Counter>,
    pub call_duration: Histogram,
    pub optimize_duration: Histogram,
    /// Room taken from running jobs for a higher-priority one, by action (`shrink`, `evict`).
    pub preemptions: Family<PreemptionLabels, Counter>,
    /// GPU-seconds of work evicted jobs lost: each evicted job's GPUs times the seconds since
    /// its last checkpoint (else since its pods started). A shrink loses none.
    pub work_lost_gpu_seconds: Counter<f64, std::sync::atomic::AtomicU64>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PreemptionLabels {
    /// `shrink` (elastic replicas removed, highest ranks first) or `evict` (the whole job).
    pub action: &'static str,
}

impl AllocatorMetrics {
    pub fn count_recorded(&self, result: &'static str) {
        self.recorded.get_or_create(&RecordLabels { result }).inc();
    }
}

/// Which plugin entry point a call went to.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum PluginCall {
    Allocate,
    Optimize,
    Mutate,
}

impl PluginCall {
    pub fn as_str(self) -> &'static str {
        match self {
            PluginCall::Allocate => "allocate",
            PluginCall::Optimize => "optimize",
            PluginCall::Mutate => "mutate",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginCallLabels {
    pub plugin: String,
    /// `allocate`, `optimize` or `mutate`.
    pub call: &'static str,
    /// `ok`, or why the call failed (`PluginError::reason()`: `Timeout`, `Refused`, ...).
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginCallKindLabels {
    pub call: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLoadLabels {
    pub plugin: String,
    /// `loaded`, or why the upload was rejected (`CompileError`, `WrongWorld`, ...).
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginInfoLabels {
    pub plugin: String,
    /// `policy` or `mutator`.
    pub kind: &'static str,
    /// The version serving now; empty when no upload of the plugin ever loaded.
    pub sha256: String,
    /// `true` when the last upload loaded, `false` when it was rejected.
    pub healthy: &'static str,
    /// The OCI reference, pinned by manifest digest, the serving version was pulled from;
    /// empty for a component inline in its ConfigMap.
    pub image: String,
}

type DurationFamily = Family<PluginCallKindLabels, Histogram, fn() -> Histogram>;

/// Metrics of the Wasm plugins, recorded by `plugin::registry::PluginRegistry`.
pub struct PluginMetrics {
    pub calls: Family<PluginCallLabels, Counter>,
    pub duration: DurationFamily,
    pub loads: Family<PluginLoadLabels, Counter>,
    /// 1 per plugin currently known; the series of an unloaded or replaced version is removed.
    pub info: Family<PluginInfoLabels, Gauge>,
}

fn plugin_call_histogram() -> Histogram {
    // 10 µs .. ~5.2 s: a warm call is tens of µs, the largest deadline a ConfigMap may set is 5 s.
    Histogram::new(exponential_buckets(1e-5, 2.0, 20))
}

impl PluginMetrics {
    fn new() -> PluginMetrics {
        PluginMetrics {
            calls: Family::default(),
            duration: Family::new_with_constructor(plugin_call_histogram),
            loads: Family::default(),
            info: Family::default(),
        }
    }

    fn register(&self, registry: &mut Registry) {
        registry.register(
            "plugin_calls",
            "Wasm plugin calls by plugin, entry point and result",
            self.calls.clone(),
        );
        registry.register(
            "plugin_call_duration_seconds",
            "Wasm plugin call latency as the caller sees it (waiting for a call slot included)",
            self.duration.clone(),
        );
        registry.register(
            "plugin_loads",
            "Plugin upload attempts by plugin and result",
            self.loads.clone(),
        );
        registry.register(
            "plugin_info",
            "1 for each known plugin, labelled with its kind, serving version and health",
            self.info.clone(),
        );
    }

    /// Records one finished call: `reason` is `None` for success, else `PluginError::reason()`.
    pub fn observe_call(
        &self,
        plugin: &str,
        call: PluginCall,
        reason: Option<&'static str>,
        seconds: f64,
    ) {
        self.calls
            .get_or_create(&PluginCallLabels {
                plugin: plugin.to_string(),
                call: call.as_str(),
                result: reason.unwrap_or("ok"),
            })
            .inc();
        self.duration
            .get_or_create(&PluginCallKindLabels {
                call: call.as_str(),
            })
            .observe(seconds);
    }

    /// Records one upload attempt: `reason` is `None` when it loaded.
    pub fn observe_load(&self, plugin: &str, reason: Option<&'static str>) {
        self.loads
            .get_or_create(&PluginLoadLabels {
                plugin: plugin.to_string(),
                result: reason.unwrap_or("loaded"),
            })
            .inc();
    }

    /// Replaces the info series `old` (if any) by `new` (if any). Callers serialise updates of
    /// one plugin, so the family never shows two series for it.
    pub fn replace_info(&self, old: Option<&PluginInfoLabels>, new: Option<&PluginInfoLabels>) {
        if old == new {
            return;
        }
        if let Some(old) = old {
            self.info.remove(old);
        }
        if let Some(new) = new {
            self.info.get_or_create(new).set(1);
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    /// `mutate` or `validate`.
    pub webhook: &'static str,
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT`, or `other` (anything else, or a body that is
    /// not a review): a fixed set, never the request's text.
    pub operation: &'static str,
    /// `allowed`, `patched`, `denied` (the job refused, 403) or `error` (a body that is not a
    /// review, or a failure of the webhook itself).
    pub result: &'static str,
}

/// Metrics of the admission webhooks.
pub struct AdmissionMetrics {
    pub reviews: Family<AdmissionLabels, Counter>,
    pub duration: Histogram,
    /// Serving certificates loaded from the certificate directory (first load and rotations).
    pub certificate_loads: Counter,
}

/// Every metric of the process, plus readiness.
pub struct Metrics {
    /// The root: `diorch_*` in a sub-registry, controller-runtime's and process metrics
    /// unprefixed beside it.
    registry: Registry,
    pub controller: ControllerMetrics,
    pub server: ServerMetrics,
    pub allocator: AllocatorMetrics,
    pub plugin: PluginMetrics,
    pub admission: AdmissionMetrics,
    /// 1 while this replica holds the leader lease (always, without leader election).
    pub leader: Gauge,
    ready: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut root = Registry::default();
        root.register_collector(Box::new(process::ProcessCollector::new()));
        let registry = root.sub_registry_with_prefix("diorch");
        let controller = ControllerMetrics {
            reconciles: Family::default(),
            errors: Family::default(),
            actions: Family::default(),
            transitions: Family::default(),
            duration: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            events_dropped: Counter::default(),
            skipped_triggers: Family::default(),
            in_flight: Gauge::default(),
            queue_depth: Gauge::default(),
            jobs: Family::default(),
            oldest_in_phase: Family::default(),
            max_workers: Gauge::default(),
            runtime_reconciles: Family::default(),
            runtime_errors: Counter::default(),
        };
        registry.register(
            "job_phase_max_age_seconds",
            "The longest time a DIJob known to the operator has been in each phase (0: none is)",
            controller.oldest_in_phase.clone(),
        );
        registry.register(
            "reconciles_in_flight",
            "DIJob reconciles running now (the controller's busy workers)",
            controller.in_flight.clone(),
        );
        registry.register(
            "reconcile_queue_depth",
            "DIJobs with a pending reconcile trigger that no worker has picked up yet",
            controller.queue_depth.clone(),
        );
        registry.register(
            "jobs",
            "DIJobs known to the operator by phase",
            controller.jobs.clone(),
        );
        registry.register(
            "reconciles",
            "DIJob reconciles by result",
            controller.reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "DIJob reconcile errors by failed write",
            controller.errors.clone(),
        );
        registry.register(
            "actions",
            "Writes issued by the DIJob controller",
            controller.actions.clone(),
        );
        registry.register(
            "phase_transitions",
            "DIJob phase transitions by new phase",
            controller.transitions.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time spent in one DIJob reconcile",
            controller.duration.clone(),
        );
        registry.register(
            "events_dropped",
            "Events not recorded because the event queue was full",
            controller.events_dropped.clone(),
        );
        registry.register(
            "reconcile_triggers_skipped",
            "DIJob watch events that brought no reconcile: the echo of the operator's own status write that left nothing to do",
            controller.skipped_triggers.clone(),
        );
        let server = ServerMetrics {
            requests: Family::default(),
            duration: Histogram::new(exponential_buckets(0.0001, 2.0, 14)),
            auth: Family::default(),
            ignored_ranks: Counter::default(),
        };
        registry.register(
            "http_auth_decisions",
            "Authorisation decisions of the replica API and metrics endpoints by result",
            server.auth.clone(),
        );
        registry.register(
            "replica_api_ignored_ranks",
            "Pod rank annotations the replica API ignored because they lie outside the job's size (counted when an answer is computed, not when a kept one is served)",
            server.ignored_ranks.clone(),
        );
        registry.register(
            "http_requests",
            "Replica API requests by route, method and status code",
            server.requests.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "Replica API request latency",
            server.duration.clone(),
        );
        let allocator = AllocatorMetrics {
            decisions: Family::default(),
            fallbacks: Family::default(),
            shadow_decisions: Family::default(),
            shadow_dropped: Family::default(),
            recorded: Family::default(),
            policy_call_duration: Family::new_with_constructor(plugin_call_histogram),
            call_duration: Histogram::new(exponential_buckets(0.000_01, 2.0, 16)),
            optimize_duration: Histogram::new(exponential_buckets(0.000_1, 2.0, 16)),
            preemptions: Family::default(),
            work_lost_gpu_seconds: Counter::default(),
        };
        registry.register(
            "allocator_preemptions",
            "Running jobs preempted for a higher-priority job, by action (shrink, evict)",
            allocator.preemptions.clone(),
        );
        registry.register(
            "allocator_work_lost_gpu_seconds",
            "GPU-seconds of work lost by evicted jobs (since their last checkpoint, else their start)",
            allocator.work_lost_gpu_seconds.clone(),
        );
        registry.register(
            "allocator_decisions",
            "Admission decisions for preemptible DIJobs by policy and result",
            allocator.decisions.clone(),
        );
        registry.register(
            "allocator_fallbacks",
            "Policy calls answered by the built-in policy instead, by failed policy and reason",
            allocator.fallbacks.clone(),
        );
        registry.register(
            "policy_shadow_decisions",
            "Shadow policy answers compared with the active policy's (same, different, failed); \
             call times in diorch_policy_call_duration_seconds{role=\"shadow\"}",
            allocator.shadow_decisions.clone(),
        );
        registry.register(
            "decisions_recorded",
            "Policy decisions handed to --record-decisions, by result (written, dropped, too_large, failed)",
            allocator.recorded.clone(),
        );
        registry.register(
            "policy_call_duration_seconds",
            "Policy plugin call latency by the policy jobs ask for, the plugin called and its \
             role (active or shadow)",
            allocator.policy_call_duration.clone(),
        );
        registry.register(
            "policy_shadow_dropped",
            "Shadow policy calls dropped because the shadow queue was full, by call",
            allocator.shadow_dropped.clone(),
        );
        registry.register(
            "allocator_policy_call_duration_seconds",
            "Time of one allocate call of a scheduling policy, checks included",
            allocator.call_duration.clone(),
        );
        registry.register(
            "allocator_optimize_duration_seconds",
            "Time of one optimize pass over every placed preemptible job",
            allocator.optimize_duration.clone(),
        );
        let plugin = PluginMetrics::new();
        plugin.register(registry);
        let admission = AdmissionMetrics {
            reviews: Family::default(),
            duration: Histogram::new(exponential_buckets(0.000_01, 2.0, 16)),
            certificate_loads: Counter::default(),
        };
        registry.register(
            "admission_reviews",
            "AdmissionReviews answered by webhook, operation and result",
            admission.reviews.clone(),
        );
        registry.register(
            "admission_review_duration_seconds",
            "Time to answer one AdmissionReview",
            admission.duration.clone(),
        );
        registry.register(
            "webhook_certificate_loads",
            "Serving certificates loaded for the admission webhooks (start and rotations)",
            admission.certificate_loads.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica leads (reconciles and allocates), 0 while it stands by",
            leader.clone(),
        );
        register_runtime_names(&mut root, &controller);
        Metrics {
            registry: root,
            leader,
            controller,
            server,
            allocator,
            plugin,
            admission,
            ready: AtomicBool::new(false),
        }
    }

    /// Every metric, plus the API calls of the operator's client (counted by the audit layer
    /// under it, which exists before the registry).
    pub fn with_api_requests(requests: crate::audit::ApiRequests) -> Metrics {
        let mut metrics = Metrics::new();
        metrics
            .registry
            .sub_registry_with_prefix("diorch")
            .register(
                "kube_api_requests",
                "Kubernetes API requests of the operator by group, resource, verb and status code",
                requests.0,
            );
        metrics
    }

    /// Marks the process ready (caches synced) for `/readyz`.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// The registry in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }

    /// Routes `/metrics` only (the caller guards it: `server::auth::guard_routes`).
    pub fn metrics_router(self: Arc<Self>) -> Router {
        Router::new()
            .route("/metrics", get(metrics))
            .with_state(self)
    }

    /// Routes `/healthz` and `/readyz` only: what the kubelet needs, nothing else.
    pub fn probe_router(self: Arc<Self>) -> Router {
        Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(readyz))
            .with_state(self)
    }
}

/// controller-runtime's metric names (`controller_runtime_*{controller="dijob"}`,
/// `workqueue_depth{name="dijob"}`) over the same values as the `diorch_*` ones, so dashboards
/// and alerts written for kubebuilder operators work unchanged.
fn register_runtime_names(root: &mut Registry, controller: &ControllerMetrics) {
    let runtime =
        root.sub_registry_with_label((Cow::Borrowed("controller"), Cow::Borrowed("dijob")));
    runtime.register(
        "controller_runtime_reconcile",
        "Reconciles by result (success, error, requeue), as controller-runtime counts them",
        controller.runtime_reconciles.clone(),
    );
    runtime.register(
        "controller_runtime_reconcile_errors",
        "Reconciles that returned an error",
        controller.runtime_errors.clone(),
    );
    runtime.register(
        "controller_runtime_reconcile_time_seconds",
        "Time spent in one reconcile (the same histogram as diorch_reconcile_duration_seconds)",
        controller.duration.clone(),
    );
    runtime.register(
        "controller_runtime_active_workers",
        "Reconciles running now",
        controller.in_flight.clone(),
    );
    runtime.register(
        "controller_runtime_max_concurrent_reconciles",
        "The controller's worker count",
        controller.max_workers.clone(),
    );
    runtime
        .sub_registry_with_label((Cow::Borrowed("name"), Cow::Borrowed("dijob")))
        .register(
            "workqueue_depth",
            "DIJobs waiting for a worker (the same gauge as diorch_reconcile_queue_depth)",
            controller.queue_depth.clone(),
        );
}

async fn metrics(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        m.encode(),
    )
}

async fn readyz(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    if m.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_values_appear_in_the_exposition() {
        let m = Metrics::new();
        m.controller
            .errors
            .get_or_create(&ErrorLabels { kind: "status" })
            .inc();
        m.controller
            .transitions
            .get_or_create(&PhaseLabels { phase: "Running" })
            .inc_by(2);
        let text = m.encode();
        assert!(
            text.contains("diorch_reconcile_errors_total{kind=\"status\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("diorch_phase_transitions_total{phase=\"Running\"} 2"),
            "{text}"
        );
    }

    /// Stock dashboards query controller-runtime's and the process collector's names: they
    /// exist, unprefixed, and follow the diorch values they mirror.
    #[test]
    fn controller_runtime_and_process_names_are_exported() {
        let m = Metrics::new();
        m.controller.count_reconcile("ok");
        m.controller.count_reconcile("ok");
        m.controller.count_reconcile("requeue");
        m.controller.count_reconcile("error");
        m.controller.queue_depth.set(3);
        m.controller.in_flight.set(2);
        m.controller.max_workers.set(32);
        m.controller.skip_trigger("status_echo");
        let text = m.encode();
        for line in [
            "diorch_reconciles_total{result=\"ok\"} 2",
            "controller_runtime_reconcile_total{controller=\"dijob\",result=\"success\"} 2",
            "controller_runtime_reconcile_total{controller=\"dijob\",result=\"requeue\"} 1",
            "controller_runtime_reconcile_total{controller=\"dijob\",result=\"error\"} 1",
            "controller_runtime_reconcile_errors_total{controller=\"dijob\"} 1",
            "controller_runtime_active_workers{controller=\"dijob\"} 2",
            "controller_runtime_max_concurrent_reconciles{controller=\"dijob\"} 32",
            "workqueue_depth{controller=\"dijob\",name=\"dijob\"} 3",
            "diorch_reconcile_queue_depth 3",
            "diorch_reconcile_triggers_skipped_total{reason=\"status_echo\"} 1",
            "controller_runtime_reconcile_time_seconds_count{controller=\"dijob\"} 0",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        let value = |name: &str| -> f64 {
            let line = text
                .lines()
                .find(|l| l.starts_with(&format!("{name} ")))
                .unwrap_or_else(|| panic!("no {name} in\n{text}"));
            line[name.len() + 1..].parse().expect("a number")
        };
        // This test process: some CPU and memory used, stdin/stdout/stderr open at least, and
        // a start time after 2020.
        assert!(value("process_resident_memory_bytes") > 1e6);
        assert!(value("process_virtual_memory_bytes") >= value("process_resident_memory_bytes"));
        assert!(value("process_open_fds") >= 3.0);
        assert!(value("process_max_fds") >= value("process_open_fds"));
        assert!(value("process_cpu_seconds_total") >= 0.0);
        assert!(value("process_start_time_seconds") > 1.5e9);
        assert!(
            text.contains("# TYPE process_cpu_seconds counter"),
            "{text}"
        );
    }

    /// The probe address serves the probes and nothing else: no metrics, no plugin list.
    #[tokio::test]
    async fn the_probe_router_serves_only_probes() {
        use tower::ServiceExt;
        let m = Arc::new(Metrics::new());
        m.set_ready(true);
        for (path, want) in [
            ("/healthz", StatusCode::OK),
            ("/readyz", StatusCode::OK),
            ("/metrics", StatusCode::NOT_FOUND),
            ("/plugins", StatusCode::NOT_FOUND),
        ] {
            let request = axum::http::Request::get(path)
                .body(axum::body::Body::empty())
                .expect("request");
            let response = m
                .clone()
                .probe_router()
                .oneshot(request)
                .await
                .expect("answer");
            assert_eq!(response.status(), want, "{path}");
        }
    }

    #[test]
    fn plugin_metrics_appear_and_stale_info_goes() {
        let m = Metrics::new();
        m.plugin
            .observe_call("packer", PluginCall::Allocate, None, 42e-6);
        m.plugin
            .observe_call("packer", PluginCall::Allocate, Some("Timeout"), 0.05);
        m.plugin.observe_load("packer", Some("CompileError"));
        let info = |sha: &str, healthy| PluginInfoLabels {
            plugin: "packer".into(),
            kind: "policy",
            sha256: sha.into(),
            healthy,
            image: format!("registry.example/p@{sha}"),
        };
        m.plugin.replace_info(None, Some(&info("aaa", "true")));
        m.plugin
            .replace_info(Some(&info("aaa", "true")), Some(&info("bbb", "false")));
        let text = m.encode();
        for line in [
            "diorch_plugin_calls_total{plugin=\"packer\",call=\"allocate\",result=\"ok\"} 1",
            "diorch_plugin_calls_total{plugin=\"packer\",call=\"allocate\",result=\"Timeout\"} 1",
            "diorch_plugin_loads_total{plugin=\"packer\",result=\"CompileError\"} 1",
            "diorch_plugin_info{plugin=\"packer\",kind=\"policy\",sha256=\"bbb\",healthy=\"false\",image=\"registry.example/p@bbb\"} 1",
            // 42 µs lands in the 80 µs bucket, not the 40 µs one.
            "diorch_plugin_call_duration_seconds_bucket{le=\"0.00004\",call=\"allocate\"} 0",
            "diorch_plugin_call_duration_seconds_bucket{le=\"0.00008\",call=\"allocate\"} 1",
            "diorch_plugin_call_duration_seconds_count{call=\"allocate\"} 2",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        assert!(!text.contains("sha256=\"aaa\""), "{text}");
        m.plugin.replace_info(Some(&info("bbb", "false")), None);
        assert!(!m.encode().contains("diorch_plugin_info{"));
    }
}
