//! The simulated scheduler's pure decision logic: resource quantities, pod requests, node
//! filtering (the default kube-scheduler filter plugins that matter without volumes:
//! NodeUnschedulable, TaintToleration, NodeAffinity, NodeResourcesFit), least-allocated scoring
//! and the `FailedScheduling` message, all over k8s-openapi types.
//!
//! The rules the simulator (`diorch::simulate`) applies too, whether requests fit and whether
//! taints keep a pod off, are `diorch_core::fit`'s, called here. The rest differs on purpose:
//! this scheduler stands in for the real kube-scheduler in the operator's tests, so it also
//! filters cordoned nodes, NotReady nodes (as the not-ready taint), node affinity and the pod
//! count, honours the pod's tolerations, and scores LeastAllocated as kube-scheduler does (in
//! whole percents, counting the pod, with the 100m CPU / 200 MiB defaults for unset requests).
//! The simulator predicts what the operator's allocator will see: its pods carry only their
//! requests (no tolerations, affinity or count limit), a down node is one it took down, and it
//! scores the share of CPU and memory left before the pod (see its module doc).
//!
//! Owns no state and does no I/O: the cluster loop in `sim_loop` keeps the per-node usage and
//! calls these functions. Must not touch the API server or the sandbox's store.

use std::collections::BTreeMap;

#[cfg(test)]
use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::api::core::v1::{Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, Taint};

use diorch_core::fit::{blocking_taint, insufficient};
pub use diorch_core::resources::{
    CPU, MEMORY, Resources, node_allocatable, parse_quantity, pod_requests,
};
#[cfg(test)]
use diorch_core::{fit::tolerates, resources::NON_ZERO_MEMORY_MILLI};

pub const PODS: &str = "pods";
const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
/// What is already committed on a node: non-terminal pods bound (or assumed) to it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub requested: Resources,
    /// Requests with the scoring defaults applied (only CPU and memory are used).
    pub non_zero: Resources,
    pub pods: i64,
}

impl Usage {
    pub fn add_pod(&mut self, requested: &Resources, non_zero: &Resources) {
        self.requested.add(requested);
        self.non_zero.add(non_zero);
        self.pods += 1;
    }

    pub fn remove_pod(&mut self, requested: &Resources, non_zero: &Resources) {
        self.requested.sub(requested);
        self.non_zero.sub(non_zero);
        self.pods -= 1;
    }
}

/// Why one node cannot take the pod, in kube-scheduler's words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeUnfit {
    pub reasons: Vec<String>,
    /// `false` for UnschedulableAndUnresolvable failures (taints, affinity, cordon), where
    /// preemption "is not helpful".
    pub preemption_may_help: bool,
}

impl NodeUnfit {
    fn unresolvable(reason: String) -> Self {
        NodeUnfit {
            reasons: vec![reason],
            preemption_may_help: false,
        }
    }
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

fn requirement_matches(labels: &BTreeMap<String, String>, r: &NodeSelectorRequirement) -> bool {
    let value = labels.get(&r.key);
    let values = r.values.as_deref().unwrap_or(&[]);
    let as_int = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        op @ ("Gt" | "Lt") => {
            let (Some(v), [bound]) = (value.and_then(|v| as_int(v)), values) else {
                return false;
            };
            let Some(bound) = as_int(bound) else {
                return false;
            };
            if op == "Gt" { v > bound } else { v < bound }
        }
        _ => false,
    }
}

fn field_matches(node_name: &str, r: &NodeSelectorRequirement) -> bool {
    if r.key != "metadata.name" {
        return false;
    }
    let values = r.values.as_deref().unwrap_or(&[]);
    let listed = values.iter().any(|v| v == node_name);
    match r.operator.as_str() {
        "In" => listed,
        "NotIn" => !listed,
        _ => false,
    }
}

fn term_matches(node: &Node, term: &NodeSelectorTerm) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or(&[]);
    let fields = term.match_fields.as_deref().unwrap_or(&[]);
    if exprs.is_empty() && fields.is_empty() {
        // An empty term matches no objects.
        return false;
    }
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let name = node.metadata.name.as_deref().unwrap_or("");
    exprs.iter().all(|r| requirement_matches(labels, r))
        && fields.iter().all(|r| field_matches(name, r))
}

/// nodeSelector plus required node affinity (terms are ORed).
pub fn matches_node_affinity(pod: &Pod, node: &Node) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    if let Some(sel) = spec.node_selector.as_ref()
        && !sel.iter().all(|(k, v)| labels.get(k) == Some(v))
    {
        return false;
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    match required {
        Some(sel) => sel
            .node_selector_terms
            .iter()
            .any(|t| term_matches(node, t)),
        None => true,
    }
}

/// Runs the filter plugins in kube-scheduler's order; the first failing plugin decides.
pub fn filter_node(
    pod: &Pod,
    requests: &Resources,
    node: &Node,
    allocatable: &Resources,
    usage: &Usage,
) -> Result<(), NodeUnfit> {
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or(&[]);
    let node_spec = node.spec.as_ref();
    // NodeUnschedulable
    if node_spec.and_then(|s| s.unschedulable).unwrap_or(false) {
        let cordon = Taint {
            key: TAINT_UNSCHEDULABLE.to_string(),
            effect: "NoSchedule".to_string(),
            ..Taint::default()
        };
        if blocking_taint(tolerations, [&cordon]).is_some() {
            return Err(NodeUnfit::unresolvable(
                "node(s) were unschedulable".to_string(),
            ));
        }
    }
    // TaintToleration; a node that is not Ready carries the not-ready taint the node
    // lifecycle controller would add.
    let not_ready = Taint {
        key: TAINT_NOT_READY.to_string(),
        effect: "NoSchedule".to_string(),
        ..Taint::default()
    };
    let not_ready = (!node_ready(node)).then_some(&not_ready);
    let taints = node_spec
        .and_then(|s| s.taints.as_deref())
        .unwrap_or(&[])
        .iter()
        .chain(not_ready);
    if let Some(taint) = blocking_taint(tolerations, taints) {
        return Err(NodeUnfit::unresolvable(format!(
            "node(s) had untolerated taint {{{}: {}}}",
            taint.key,
            taint.value.as_deref().unwrap_or("")
        )));
    }
    // NodeAffinity
    if !matches_node_affinity(pod, node) {
        return Err(NodeUnfit::unresolvable(
            "node(s) didn't match Pod's node affinity/selector".to_string(),
        ));
    }
    // NodeResourcesFit
    let mut reasons = Vec::new();
    if usage.pods + 1 > i64::try_from(allocatable.get(PODS) / 1000).unwrap_or(i64::MAX) {
        reasons.push("Too many pods".to_string());
    }
    reasons.extend(
        insufficient(requests, allocatable, &usage.requested)
            .map(|name| format!("Insufficient {name}")),
    );
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(NodeUnfit {
            reasons,
            preemption_may_help: true,
        })
    }
}

/// NodeResourcesFit's LeastAllocated score (0..=100) over CPU and memory, counting the pod.
pub fn least_allocated_score(
    pod_non_zero: &Resources,
    allocatable: &Resources,
    usage: &Usage,
) -> i128 {
    let one = |name: &str| {
        let alloc = allocatable.get(name);
        let requested = usage.non_zero.get(name) + pod_non_zero.get(name);
        if alloc <= 0 || requested > alloc {
            0
        } else {
            (alloc - requested) * 100 / alloc
        }
    };
    (one(CPU) + one(MEMORY)) / 2
}

/// The message of a FitError: `0/N nodes are available: <histogram>. preemption: ...`.
pub fn fit_error_message(total_nodes: usize, unfit: &[NodeUnfit]) -> String {
    if total_nodes == 0 {
        return "no nodes available to schedule pods".to_string();
    }
    let histogram = |counts: BTreeMap<&str, usize>| {
        let mut parts: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
        parts.sort();
        parts.join(", ")
    };
    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    let mut preemption: BTreeMap<&str, usize> = BTreeMap::new();
    for u in unfit {
        for r in &u.reasons {
            *reasons.entry(r.as_str()).or_insert(0) += 1;
        }
        let p = if u.preemption_may_help {
            // Every sandbox pod has priority 0 here, so there is never a lower-priority victim.
            "No preemption victims found for incoming pod"
        } else {
            "Preemption is not helpful for scheduling"
        };
        *preemption.entry(p).or_insert(0) += 1;
    }
    format!(
        "0/{total_nodes} nodes are available: {}. preemption: 0/{total_nodes} nodes are available: {}.",
        histogram(reasons),
        histogram(preemption)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p", "namespace": "default"}, "spec": spec}),
        )
        .unwrap()
    }

    fn node(name: &str, extra: serde_json::Value) -> Node {
        let mut n = json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "zone": "a", "gen": "5"}},
            "spec": {},
            "status": {
                "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "3", "nvidia.com/gpu": "2"},
                "conditions": [{"type": "Ready", "status": "True"}]
            }
        });
        if let (Some(base), Some(extra)) = (n.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                if let (Some(b), Some(e)) = (
                    base.get_mut(k).and_then(|b| b.as_object_mut()),
                    v.as_object(),
                ) {
                    b.extend(e.clone());
                } else {
                    base.insert(k.clone(), v.clone());
                }
            }
        }
        serde_json::from_value(n).unwrap()
    }

    fn check(p: &Pod, n: &Node, usage: &Usage) -> Result<(), NodeUnfit> {
        filter_node(p, &pod_requests(p, false), n, &node_allocatable(n), usage)
    }

    #[test]
    fn quantities_parse_to_rounded_up_milli_units() {
        assert_eq!(parse_quantity("500m"), Some(500));
        assert_eq!(parse_quantity("2"), Some(2000));
        assert_eq!(parse_quantity("1.5"), Some(1500));
        assert_eq!(parse_quantity("1Ki"), Some(1024 * 1000));
        assert_eq!(parse_quantity("1.5Gi"), Some(3 * (1 << 29) * 1000));
        assert_eq!(parse_quantity("1e3"), Some(1_000_000));
        assert_eq!(parse_quantity("128M"), Some(128_000_000_000));
        assert_eq!(parse_quantity("1n"), Some(1), "rounded up like MilliValue");
        assert_eq!(parse_quantity("0.0001"), Some(1));
        assert_eq!(parse_quantity("-1"), Some(-1000));
        assert_eq!(parse_quantity("abc"), None);
        assert_eq!(parse_quantity("1Xi"), None);
        assert_eq!(parse_quantity(""), None);
    }

    #[test]
    fn requests_default_to_limits_and_take_init_max_plus_overhead() {
        let p = pod(json!({
            "containers": [
                {"name": "a", "image": "i", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2", "memory": "1Gi"}}},
                {"name": "b", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
            "initContainers": [
                {"name": "big", "image": "i", "resources": {"requests": {"cpu": "3"}}},
                {"name": "small", "image": "i", "resources": {"requests": {"memory": "2Gi"}}}
            ],
            "overhead": {"cpu": "250m"}
        }));
        let r = pod_requests(&p, false);
        assert_eq!(r.get(CPU), 3250, "init max 3 beats sum 1, then overhead");
        assert_eq!(r.get(MEMORY), 2 * (1 << 30) * 1000, "limit 1Gi < init 2Gi");
        assert_eq!(r.get("nvidia.com/gpu"), 1000, "limit used as request");
    }

    #[test]
    fn sidecar_init_containers_add_to_the_pod() {
        let p = pod(json!({
            "containers": [{"name": "a", "image": "i", "resources": {"requests": {"cpu": "1"}}}],
            "initContainers": [
                {"name": "side", "image": "i", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
                {"name": "init", "image": "i", "resources": {"requests": {"cpu": "1"}}}
            ]
        }));
        assert_eq!(pod_requests(&p, false).get(CPU), 1500);
    }

    #[test]
    fn non_zero_requests_apply_scheduler_defaults() {
        let p = pod(
            json!({"containers": [{"name": "a", "image": "i"}, {"name": "b", "image": "i", "resources": {"requests": {"cpu": "0"}}}]}),
        );
        let r = pod_requests(&p, true);
        assert_eq!(r.get(CPU), 100, "explicit zero is kept, missing is 100m");
        assert_eq!(r.get(MEMORY), 2 * NON_ZERO_MEMORY_MILLI);
        assert_eq!(pod_requests(&p, false).get(CPU), 0);
    }

    #[test]
    fn resource_fit_reports_each_insufficient_resource_and_pod_count() {
        let n = node("n", json!({}));
        let p = pod(
            json!({"containers": [{"name": "a", "image": "i", "resources": {"requests": {"cpu": "3", "memory": "1Gi", "nvidia.com/gpu": "1", "example.com/foo": "1"}}}]}),
        );
        assert_eq!(
            check(&p, &n, &Usage::default()),
            Err(NodeUnfit {
                reasons: vec!["Insufficient example.com/foo".into()],
                preemption_may_help: true
            })
        );
        let p = pod(
            json!({"containers": [{"name": "a", "image": "i", "resources": {"requests": {"cpu": "3", "nvidia.com/gpu": "1"}}}]}),
        );
        assert_eq!(check(&p, &n, &Usage::default()), Ok(()));
        let mut usage = Usage::default();
        usage.add_pod(&pod_requests(&p, false), &Resources::default());
        usage.add_pod(&Resources::default(), &Resources::default());
        let err = check(&p, &n, &usage).unwrap_err();
        assert_eq!(err.reasons, vec!["Insufficient cpu"]);
        usage.add_pod(&Resources::default(), &Resources::default());
        let err = check(&p, &n, &usage).unwrap_err();
        assert_eq!(err.reasons, vec!["Too many pods", "Insufficient cpu"]);
    }

    #[test]
    fn node_selector_and_affinity_operators() {
        let n = node("n1", json!({}));
        let with = |sel: serde_json::Value, terms: serde_json::Value| {
            pod(
                json!({"containers": [], "nodeSelector": sel, "affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}),
            )
        };
        let expr = |key: &str, op: &str, values: serde_json::Value| {
            with(
                json!({}),
                json!([{"matchExpressions": [{"key": key, "operator": op, "values": values}]}]),
            )
        };
        assert!(matches_node_affinity(
            &with(
                json!({"zone": "a"}),
                json!([{"matchExpressions": [{"key": "zone", "operator": "Exists"}]}])
            ),
            &n
        ));
        assert!(!matches_node_affinity(
            &with(
                json!({"zone": "b"}),
                json!([{"matchExpressions": [{"key": "zone", "operator": "Exists"}]}])
            ),
            &n
        ));
        assert!(matches_node_affinity(
            &expr("zone", "In", json!(["a", "b"])),
            &n
        ));
        assert!(!matches_node_affinity(
            &expr("zone", "NotIn", json!(["a"])),
            &n
        ));
        assert!(matches_node_affinity(
            &expr("missing", "NotIn", json!(["a"])),
            &n
        ));
        assert!(matches_node_affinity(
            &expr("missing", "DoesNotExist", json!(null)),
            &n
        ));
        assert!(!matches_node_affinity(
            &expr("zone", "DoesNotExist", json!(null)),
            &n
        ));
        assert!(matches_node_affinity(&expr("gen", "Gt", json!(["4"])), &n));
        assert!(!matches_node_affinity(&expr("gen", "Gt", json!(["5"])), &n));
        assert!(matches_node_affinity(&expr("gen", "Lt", json!(["6"])), &n));
        assert!(
            !matches_node_affinity(&expr("zone", "Lt", json!(["6"])), &n),
            "non-integer label"
        );
        assert!(!matches_node_affinity(
            &expr("gen", "Gt", json!(["1", "2"])),
            &n
        ));
        // Terms are ORed; an empty term matches nothing; matchFields on metadata.name.
        assert!(matches_node_affinity(
            &with(
                json!({}),
                json!([{}, {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}])
            ),
            &n
        ));
        assert!(!matches_node_affinity(&with(json!({}), json!([{}])), &n));
        assert!(!matches_node_affinity(
            &with(
                json!({}),
                json!([{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}])
            ),
            &n
        ));
        let err = check(&expr("zone", "In", json!(["z"])), &n, &Usage::default()).unwrap_err();
        assert_eq!(
            err.reasons,
            vec!["node(s) didn't match Pod's node affinity/selector"]
        );
        assert!(!err.preemption_may_help);
    }

    #[test]
    fn taints_need_matching_tolerations() {
        let taint: Taint =
            serde_json::from_value(json!({"key": "gpu", "value": "yes", "effect": "NoSchedule"}))
                .unwrap();
        let tol = |t: serde_json::Value| -> Toleration { serde_json::from_value(t).unwrap() };
        assert!(tolerates(
            &tol(json!({"key": "gpu", "operator": "Equal", "value": "yes"})),
            &taint
        ));
        assert!(tolerates(
            &tol(json!({"key": "gpu", "value": "yes", "effect": "NoSchedule"})),
            &taint
        ));
        assert!(!tolerates(
            &tol(json!({"key": "gpu", "value": "no"})),
            &taint
        ));
        assert!(!tolerates(
            &tol(json!({"key": "gpu", "operator": "Exists", "effect": "NoExecute"})),
            &taint
        ));
        assert!(tolerates(
            &tol(json!({"key": "gpu", "operator": "Exists"})),
            &taint
        ));
        assert!(
            tolerates(&tol(json!({"operator": "Exists"})), &taint),
            "empty key + Exists tolerates all"
        );
        assert!(!tolerates(
            &tol(json!({"key": "other", "operator": "Exists"})),
            &taint
        ));

        let n = node(
            "n",
            json!({"spec": {"taints": [
                {"key": "soft", "effect": "PreferNoSchedule"},
                {"key": "gpu", "value": "yes", "effect": "NoSchedule"}
            ]}}),
        );
        let plain = pod(json!({"containers": []}));
        let err = check(&plain, &n, &Usage::default()).unwrap_err();
        assert_eq!(
            err.reasons,
            vec!["node(s) had untolerated taint {gpu: yes}"]
        );
        let tolerant =
            pod(json!({"containers": [], "tolerations": [{"key": "gpu", "operator": "Exists"}]}));
        assert_eq!(check(&tolerant, &n, &Usage::default()), Ok(()));
    }

    #[test]
    fn cordoned_and_not_ready_nodes_are_filtered() {
        let plain = pod(json!({"containers": []}));
        let cordoned = node("n", json!({"spec": {"unschedulable": true}}));
        assert_eq!(
            check(&plain, &cordoned, &Usage::default())
                .unwrap_err()
                .reasons,
            vec!["node(s) were unschedulable"]
        );
        let tolerant = pod(
            json!({"containers": [], "tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]}),
        );
        assert_eq!(check(&tolerant, &cordoned, &Usage::default()), Ok(()));
        let not_ready = node(
            "n",
            json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
        );
        assert_eq!(
            check(&plain, &not_ready, &Usage::default())
                .unwrap_err()
                .reasons,
            vec!["node(s) had untolerated taint {node.kubernetes.io/not-ready: }"]
        );
    }

    #[test]
    fn least_allocated_prefers_the_emptier_node() {
        let alloc = node_allocatable(&node("n", json!({})));
        let p = pod(
            json!({"containers": [{"name": "a", "image": "i", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}]}),
        );
        let nz = pod_requests(&p, true);
        let empty = Usage::default();
        let mut busy = Usage::default();
        busy.add_pod(&nz, &nz);
        assert_eq!(least_allocated_score(&nz, &alloc, &empty), 75);
        assert_eq!(least_allocated_score(&nz, &alloc, &busy), 50);
    }

    #[test]
    fn fit_error_message_matches_kube_scheduler() {
        let cpu = NodeUnfit {
            reasons: vec!["Insufficient cpu".into()],
            preemption_may_help: true,
        };
        assert_eq!(
            fit_error_message(4, &vec![cpu.clone(); 4]),
            "0/4 nodes are available: 4 Insufficient cpu. preemption: 0/4 nodes are available: 4 No preemption victims found for incoming pod."
        );
        let both = NodeUnfit {
            reasons: vec!["Insufficient cpu".into(), "Insufficient memory".into()],
            preemption_may_help: true,
        };
        let aff =
            NodeUnfit::unresolvable("node(s) didn't match Pod's node affinity/selector".into());
        assert_eq!(
            fit_error_message(3, &[both, aff, cpu]),
            "0/3 nodes are available: 1 Insufficient memory, 1 node(s) didn't match Pod's node affinity/selector, 2 Insufficient cpu. preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod."
        );
        assert_eq!(
            fit_error_message(0, &[]),
            "no nodes available to schedule pods"
        );
    }
}
