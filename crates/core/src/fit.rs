//! kube-scheduler's filter rules that both of diorch's simulated schedulers apply: whether a
//! pod's requests fit a node (NodeResourcesFit) and whether a node's taints keep it off
//! (TaintToleration). The sandbox's scheduler (`diorch-sandbox`, `sim_sched`) and the
//! simulator's (`diorch::simulate::engine::cluster`) call these, so a pod fits the same node in
//! both.
//!
//! What each adds on top stays with it, documented there: the sandbox mimics the real
//! kube-scheduler for the operator's tests (cordon, NotReady as a taint, node affinity, the pod
//! count, LeastAllocated scoring with the scheduler's non-zero defaults, FailedScheduling
//! messages); the simulator models the operator's prediction (a down node is skipped, pods
//! carry no tolerations, its own score).
//!
//! Owns: the rules, over k8s-openapi taints and [`Resources`]. Must not touch: any state (the
//! callers count what is used on each node) or I/O.

use k8s_openapi::api::core::v1::{Taint, Toleration};

use crate::resources::Resources;

/// The taint effects that keep a pod off (PreferNoSchedule only lowers a node's score).
fn blocks(taint: &Taint) -> bool {
    taint.effect == "NoSchedule" || taint.effect == "NoExecute"
}

/// Whether a toleration tolerates a taint (same rules as `Toleration.ToleratesTaint`).
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = t.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    let key = t.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match t.operator.as_deref().unwrap_or("") {
        "Exists" => true,
        "Equal" | "" => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        _ => false,
    }
}

/// TaintToleration: the first NoSchedule or NoExecute taint none of `tolerations` tolerates
/// (the one kube-scheduler names), or None if the taints let the pod on.
pub fn blocking_taint<'a>(
    tolerations: &[Toleration],
    taints: impl IntoIterator<Item = &'a Taint>,
) -> Option<&'a Taint> {
    taints
        .into_iter()
        .find(|taint| blocks(taint) && !tolerations.iter().any(|t| tolerates(t, taint)))
}

/// NodeResourcesFit: the resources the pod requests more of than the node has left
/// (allocatable minus what its pods already request), in the requests' order. A zero (or
/// negative) request always fits, as in kube-scheduler, even on an over-committed node.
pub fn insufficient<'a>(
    requests: &'a Resources,
    allocatable: &'a Resources,
    used: &'a Resources,
) -> impl Iterator<Item = &'a str> + 'a {
    requests
        .iter()
        .filter(|(name, amount)| *amount > 0 && *amount > allocatable.get(name) - used.get(name))
        .map(|(name, _)| name)
}

/// Whether every request fits ([`insufficient`] names none).
pub fn resources_fit(requests: &Resources, allocatable: &Resources, used: &Resources) -> bool {
    insufficient(requests, allocatable, used).next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn taint(v: serde_json::Value) -> Taint {
        serde_json::from_value(v).unwrap()
    }

    fn tol(v: serde_json::Value) -> Toleration {
        serde_json::from_value(v).unwrap()
    }

    fn res(list: &[(&str, i128)]) -> Resources {
        list.iter().map(|(n, v)| (*n, *v)).collect()
    }

    #[test]
    fn tolerations_match_on_key_value_effect_and_operator() {
        let gpu = taint(json!({"key": "gpu", "value": "yes", "effect": "NoSchedule"}));
        assert!(tolerates(&tol(json!({"key": "gpu", "value": "yes"})), &gpu));
        assert!(!tolerates(&tol(json!({"key": "gpu", "value": "no"})), &gpu));
        assert!(tolerates(
            &tol(json!({"key": "gpu", "operator": "Exists"})),
            &gpu
        ));
        assert!(!tolerates(
            &tol(json!({"key": "gpu", "operator": "Exists", "effect": "NoExecute"})),
            &gpu
        ));
        assert!(tolerates(&tol(json!({"operator": "Exists"})), &gpu));
        assert!(!tolerates(
            &tol(json!({"key": "gpu", "operator": "Lt"})),
            &gpu
        ));
    }

    #[test]
    fn only_untolerated_no_schedule_and_no_execute_taints_block() {
        let taints = [
            taint(json!({"key": "soft", "effect": "PreferNoSchedule"})),
            taint(json!({"key": "gpu", "value": "yes", "effect": "NoSchedule"})),
            taint(json!({"key": "drain", "effect": "NoExecute"})),
        ];
        assert_eq!(
            blocking_taint(&[], &taints).map(|t| t.key.as_str()),
            Some("gpu")
        );
        let gpu_ok = [tol(json!({"key": "gpu", "operator": "Exists"}))];
        assert_eq!(
            blocking_taint(&gpu_ok, &taints).map(|t| t.key.as_str()),
            Some("drain")
        );
        let all_ok = [tol(json!({"operator": "Exists"}))];
        assert_eq!(blocking_taint(&all_ok, &taints), None);
        assert_eq!(
            blocking_taint(&[], &taints[..1]),
            None,
            "a preference never blocks"
        );
    }

    #[test]
    fn requests_fit_what_is_left_and_zero_requests_always_fit() {
        let alloc = res(&[("cpu", 4000), ("nvidia.com/gpu", 2000)]);
        let used = res(&[("cpu", 3000), ("nvidia.com/gpu", 2000)]);
        let pod = res(&[
            ("cpu", 1000),
            ("example.com/foo", 1),
            ("nvidia.com/gpu", 1000),
        ]);
        assert_eq!(
            insufficient(&pod, &alloc, &used).collect::<Vec<_>>(),
            ["example.com/foo", "nvidia.com/gpu"],
            "cpu fits exactly; an unknown resource has none"
        );
        assert!(resources_fit(&res(&[("cpu", 1000)]), &alloc, &used));
        assert!(!resources_fit(&res(&[("cpu", 1001)]), &alloc, &used));
        let over = res(&[("cpu", 5000)]);
        assert!(
            resources_fit(&res(&[("cpu", 0), ("memory", 0)]), &alloc, &over),
            "zero requests fit even an over-committed node"
        );
        assert!(resources_fit(
            &Resources::default(),
            &Resources::default(),
            &over
        ));
    }
}
