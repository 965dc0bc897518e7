//! Prometheus metrics of the operator process and the HTTP endpoint that serves them with the
//! health probes (`/metrics`, `/healthz`, `/readyz`).
//!
//! Owns the metric registry; modules record into the typed handles here and never create
//! metrics of their own. Exposes no cluster data beyond counts and durations.

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
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

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
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The matched route pattern (empty when none matched).
    pub route: String,
    pub method: String,
    pub code: u16,
}

/// Metrics of the replica API server.
pub struct ServerMetrics {
    pub requests: Family<RequestLabels, Counter>,
    pub duration: Histogram,
}

impl ServerMetrics {
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
    /// Decisions: `placed`, `placed_by_fallback`, `waiting`, `moved`, `suppressed`; fallbacks:
    /// the plugin error reason.
    pub result: String,
}

/// Metrics of the allocator.
pub struct AllocatorMetrics {
    pub decisions: Family<AllocationLabels, Counter>,
    pub fallbacks: Family<AllocationLabels, Counter>,
    pub call_duration: Histogram,
    pub optimize_duration: Histogram,
}

/// Every metric of the process, plus readiness.
pub struct Metrics {
    registry: Registry,
    pub controller: ControllerMetrics,
    pub server: ServerMetrics,
    pub allocator: AllocatorMetrics,
    ready: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("diorch");
        let controller = ControllerMetrics {
            reconciles: Family::default(),
            errors: Family::default(),
            actions: Family::default(),
            transitions: Family::default(),
            duration: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            events_dropped: Counter::default(),
        };
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
        let server = ServerMetrics {
            requests: Family::default(),
            duration: Histogram::new(exponential_buckets(0.0001, 2.0, 14)),
        };
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
            call_duration: Histogram::new(exponential_buckets(0.000_01, 2.0, 16)),
            optimize_duration: Histogram::new(exponential_buckets(0.000_1, 2.0, 16)),
        };
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
            "allocator_policy_call_duration_seconds",
            "Time of one allocate call of a scheduling policy, checks included",
            allocator.call_duration.clone(),
        );
        registry.register(
            "allocator_optimize_duration_seconds",
            "Time of one optimize pass over every placed preemptible job",
            allocator.optimize_duration.clone(),
        );
        Metrics {
            registry,
            controller,
            server,
            allocator,
            ready: AtomicBool::new(false),
        }
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

    /// Routes `/metrics`, `/healthz` and `/readyz`.
    pub fn router(self: Arc<Self>) -> Router {
        Router::new()
            .route("/metrics", get(metrics))
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(readyz))
            .with_state(self)
    }
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
}
