//! Reading pods as the scheduler and kubelet need: keys, phase, binding, whether this scheduler
//! takes the pod or it is gated, and the PodScheduled condition patch.
//!
//! Pure functions over k8s-openapi pods: must not keep state.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crate::sim_pod::rfc3339;

use super::types::{PodKey, SCHEDULER_NAME};

pub(super) fn key_of(pod: &Pod) -> PodKey {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

pub(super) fn split_key(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub(super) fn is_terminal(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

pub(super) fn bound_node(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// Whether this scheduler should place the pod (ignoring scheduling gates).
pub(super) fn wants_scheduler(pod: &Pod) -> bool {
    let scheduler = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .unwrap_or("");
    bound_node(pod).is_none()
        && (scheduler.is_empty() || scheduler == SCHEDULER_NAME)
        && pod.metadata.deletion_timestamp.is_none()
        && !is_terminal(pod)
}

pub(super) fn gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty())
}

/// The pod's conditions with PodScheduled replaced (transition time kept when unchanged), for
/// a merge patch of `status.conditions`.
pub(super) fn with_scheduled_condition(
    pod: &Pod,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> Value {
    let existing = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    let mut out = Vec::new();
    let mut since = rfc3339(now);
    for c in existing.into_iter().flatten() {
        if c.type_ == "PodScheduled" {
            if c.status == "False"
                && c.reason.as_deref() == Some(reason)
                && let Some(t) = &c.last_transition_time
            {
                since = rfc3339(t.0);
            }
        } else if let Ok(v) = serde_json::to_value(c) {
            out.push(v);
        }
    }
    out.push(
        json!({"type": "PodScheduled", "status": "False", "reason": reason,
                    "message": message, "lastProbeTime": null, "lastTransitionTime": since}),
    );
    json!({"status": {"conditions": out}})
}
