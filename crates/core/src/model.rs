//! The allocator's view of the cluster: nodes, and what every pod bound to them requests, as
//! they enter the reflector caches (slimmed), and the pure conversions from those caches and
//! DIJobs to the plugin model (`plugin::Node`, `plugin::Job`).
//!
//! Owns: [`UsagePod`], node trimming, per-node usage and the model conversions. Must not touch:
//! the API server (the caches are fed by the allocator's watches) or policy calls.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Node, NodeCondition, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use crate::api::{DIJob, Priority, labels};
use crate::build;
use crate::key::ObjectKey;
use crate::resources::{self, CPU, ContainerShape, GPU, MEMORY, PODS, Resources};
use diorch_policies as plugin;

/// A pod as the allocator caches it: its job (if it is a DIJob's), its node and what it
/// requests there. Decoded straight from the watch; every other field is skipped.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(from = "PodShape")]
pub struct UsagePod {
    /// Name, namespace, uid and resourceVersion only.
    pub metadata: ObjectMeta,
    /// Its `diengine/job` label: the DIJob (in the pod's namespace) it belongs to. A field of
    /// its own rather than a one-entry label map, which takes 0.5 KB per pod.
    pub job: Option<String>,
    pub node: Option<String>,
    pub requests: Resources,
    /// Succeeded or Failed: the pod no longer holds its requests.
    pub terminal: bool,
}

impl UsagePod {
    /// Its job's key if the operator created this pod for a DIJob.
    pub fn job_key(&self) -> Option<ObjectKey> {
        let job = self.job.as_ref()?;
        Some(ObjectKey::new(
            self.metadata.namespace.clone().unwrap_or_default(),
            job.clone(),
        ))
    }
}

#[derive(Deserialize)]
struct PodShape {
    #[serde(default)]
    metadata: MetaShape,
    #[serde(default)]
    spec: Option<SpecShape>,
    #[serde(default)]
    status: Option<StatusShape>,
}

/// The metadata the allocator keeps; the rest (`managedFields`, annotations) is skipped while
/// parsing, never built.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetaShape {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecShape {
    #[serde(default)]
    node_name: Option<String>,
    #[serde(default)]
    containers: Vec<ContainerFields>,
    #[serde(default)]
    init_containers: Vec<ContainerFields>,
    #[serde(default)]
    overhead: Option<BTreeMap<String, Quantity>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerFields {
    #[serde(default)]
    resources: Option<ResourceRequirements>,
    #[serde(default)]
    restart_policy: Option<String>,
}

impl ContainerFields {
    fn shape(&self) -> ContainerShape<'_> {
        ContainerShape {
            resources: self.resources.as_ref(),
            restart_policy: self.restart_policy.as_deref(),
        }
    }
}

#[derive(Deserialize)]
struct StatusShape {
    #[serde(default)]
    phase: Option<String>,
}

impl From<PodShape> for UsagePod {
    fn from(pod: PodShape) -> UsagePod {
        let mut m = pod.metadata;
        let job = m.labels.as_mut().and_then(|l| l.remove(labels::JOB));
        let metadata = ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            ..ObjectMeta::default()
        };
        let spec = pod.spec.as_ref();
        UsagePod::new(
            metadata,
            job,
            spec.and_then(|s| s.node_name.clone()),
            spec.map_or_else(Resources::default, |s| {
                resources::requests(
                    s.containers.iter().map(ContainerFields::shape),
                    s.init_containers.iter().map(ContainerFields::shape),
                    s.overhead.as_ref(),
                    false,
                )
            }),
            pod.status.and_then(|s| s.phase).as_deref(),
        )
    }
}

impl UsagePod {
    /// The allocator's pod from what it reads of one: `metadata` holds only the name,
    /// namespace, uid and resourceVersion; `requests` are its containers' (`resources::requests`).
    pub(crate) fn new(
        metadata: ObjectMeta,
        job: Option<String>,
        node: Option<String>,
        mut requests: Resources,
        phase: Option<&str>,
    ) -> UsagePod {
        requests.set(PODS, 1000);
        // Kept per pod in the allocator's cache.
        requests.shrink_to_fit();
        UsagePod {
            metadata,
            job,
            node,
            requests,
            terminal: matches!(phase, Some("Succeeded" | "Failed")),
        }
    }
}

crate::cached::pod_resource!(UsagePod);

/// Drops what the allocator never reads from a node (images alone can be tens of KB).
pub fn trim_node(node: &mut Node) {
    node.metadata.managed_fields = None;
    node.metadata.annotations = None;
    if let Some(status) = node.status.as_mut() {
        status.images = None;
        status.node_info = None;
        status.addresses = None;
        status.daemon_endpoints = None;
        status.volumes_attached = None;
        status.volumes_in_use = None;
        status.config = None;
        if let Some(conditions) = status.conditions.as_mut() {
            conditions.retain(|c| c.type_ == "Ready");
            // Whether it is Ready is all that is read. A kubelet renews the heartbeat every
            // few seconds, and may reword the reason or message or move the transition time
            // without a change of status; without them such a status write leaves the trimmed
            // node unchanged (see `node_changed`), rather than waking a re-plan of every job.
            for c in conditions.iter_mut() {
                c.last_heartbeat_time = None;
                c.last_transition_time = None;
                c.reason = None;
                c.message = None;
            }
        }
    }
}

/// Whether a trimmed node's change (`old` → `new`) can change what fits on it: its labels,
/// spec (taints, cordon) or trimmed status (allocatable, Ready). A kubelet's heartbeat
/// changes none of them after [`trim_node`]; each one used to wake a re-plan of every job.
pub fn node_changed(old: Option<&Node>, new: &Node) -> bool {
    old.is_none_or(|old| {
        old.metadata.labels != new.metadata.labels
            || old.spec != new.spec
            || old.status != new.status
            || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
    })
}

/// Ready, and not cordoned.
fn node_ready(node: &Node) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c: &NodeCondition| c.type_ == "Ready" && c.status == "True");
    let cordoned = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    ready && !cordoned
}

/// Milli-units to whole units, rounding down (a node offers whole units), clamped at 0.
fn whole(milli: i128) -> u64 {
    u64::try_from(milli.max(0) / 1000).unwrap_or(u64::MAX)
}

/// Milli-units to whole units, rounding up (a request needs whole units), clamped at 0.
fn whole_up(milli: i128) -> u64 {
    u64::try_from((milli.max(0) + 999) / 1000).unwrap_or(u64::MAX)
}

// A node's pod slots (`resources::PODS`): every replica takes one, so a policy packing
// CPU-only replicas cannot exceed the kubelet's `maxPods`. Carried as an extended resource.

/// kubelet's default `maxPods`, for nodes that do not report it.
pub const DEFAULT_MAX_PODS: i128 = 110_000;

/// Resource names the model does not carry as extended resources.
fn not_extended(name: &str) -> bool {
    matches!(name, CPU | MEMORY | GPU | "ephemeral-storage") || name.starts_with("hugepages-")
}

/// Kubernetes amounts to the model's; `up` rounds fractions up (requests) instead of down
/// (capacity), so a policy never sees more room than there is.
pub fn model_resources(r: &Resources, up: bool) -> plugin::Resources {
    let conv = if up { whole_up } else { whole };
    let cpu = r.get(CPU).max(0);
    plugin::Resources {
        cpu_millis: u64::try_from(cpu).unwrap_or(u64::MAX),
        memory_bytes: conv(r.get(MEMORY)),
        gpus: u32::try_from(conv(r.get(GPU))).unwrap_or(u32::MAX),
        extended: r
            .iter()
            .filter(|(name, _)| !not_extended(name))
            .map(|(name, q)| (name.to_string(), conv(q)))
            .filter(|(_, q)| *q > 0)
            .collect(),
    }
}

/// The model of `node`, with `used` (what pods and held allocations take on it) subtracted
/// from its allocatable to give `free`.
pub fn model_node(node: &Node, used: Option<&Resources>) -> plugin::Node {
    NodeModel::of(node).with_used(used)
}

/// The parts of a node's model that depend on the node alone: parsed once per node version
/// and reused for every placement (parsing its quantities and copying its labels for every
/// node at every admission was most of an admission's cost on a large cluster).
#[derive(Clone, Debug)]
pub struct NodeModel {
    /// Allocatable, with the default pod count when the node gives none.
    allocatable: Resources,
    /// The model with `free` = allocatable.
    model: plugin::Node,
}

impl NodeModel {
    pub fn of(node: &Node) -> NodeModel {
        let mut allocatable = resources::node_allocatable(node);
        allocatable.set_default(PODS, DEFAULT_MAX_PODS);
        let model = plugin::Node {
            name: node.metadata.name.clone().unwrap_or_default(),
            labels: node
                .metadata
                .labels
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            taints: node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|t| {
                    let effect = match t.effect.as_str() {
                        "NoSchedule" => plugin::TaintEffect::NoSchedule,
                        "PreferNoSchedule" => plugin::TaintEffect::PreferNoSchedule,
                        "NoExecute" => plugin::TaintEffect::NoExecute,
                        _ => return None,
                    };
                    Some(plugin::Taint {
                        key: t.key.clone(),
                        value: t.value.clone().unwrap_or_default(),
                        effect,
                    })
                })
                .collect(),
            allocatable: model_resources(&allocatable, false),
            free: model_resources(&allocatable, false),
            ready: node_ready(node),
        };
        NodeModel { allocatable, model }
    }

    pub fn name(&self) -> &str {
        &self.model.name
    }

    /// The node's model with `used` subtracted from its allocatable to give `free`.
    pub fn with_used(&self, used: Option<&Resources>) -> plugin::Node {
        let mut model = self.model.clone();
        if let Some(used) = used {
            let mut free = self.allocatable.clone();
            free.sub(used);
            model.free = model_resources(&free, false);
        }
        model
    }
}

/// Node name → index into `nodes`, as a policy call refers to nodes.
pub fn node_index(nodes: &[plugin::Node]) -> HashMap<&str, u32> {
    nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| Some((n.name.as_str(), u32::try_from(i).ok()?)))
        .collect()
}

/// What non-terminal pods bound to each node request, skipping pods of the jobs `skip` names
/// (jobs whose allocation is counted instead, and the job being placed).
pub fn node_usage<'a>(
    pods: impl IntoIterator<Item = &'a UsagePod>,
    skip: impl Fn(&ObjectKey) -> bool,
) -> HashMap<String, Resources> {
    let mut usage: HashMap<String, Resources> = HashMap::new();
    for pod in pods {
        let Some(node) = pod.node.as_deref() else {
            continue;
        };
        if pod.terminal || pod.job_key().is_some_and(|k| skip(&k)) {
            continue;
        }
        usage
            .entry(node.to_string())
            .or_default()
            .add(&pod.requests);
    }
    usage
}

/// Per-replica requests of each task of `job`, in spec order.
pub fn task_requests(job: &DIJob) -> Vec<Resources> {
    job.spec
        .tasks
        .iter()
        .map(|t| {
            let mut r = t
                .template
                .spec
                .as_ref()
                .map(|s| resources::pod_spec_requests(s, false))
                .unwrap_or_default();
            r.set(PODS, 1000);
            r
        })
        .collect()
}

/// The job's replica pod names in slot order: tasks in spec order, then local rank. This is
/// the order of an allocation a policy returns.
pub fn slot_pods(job: &DIJob) -> Vec<(String, usize)> {
    build::desired_slots(job)
        .into_iter()
        .map(|(pod, task, _)| (pod, task))
        .collect()
}

/// Where each of the job's current ranks runs: pod name → node, from `status.ranks` and
/// `status.allocation` (both indexed by global rank).
pub fn placed_pods(job: &DIJob) -> HashMap<String, String> {
    let Some(status) = job.status.as_ref() else {
        return HashMap::new();
    };
    let ranks = status.ranks.as_deref().unwrap_or_default();
    let allocation = status.allocation.as_deref().unwrap_or_default();
    ranks
        .iter()
        .zip(allocation)
        .filter(|(pod, node)| !pod.is_empty() && !node.is_empty())
        .map(|(pod, node)| (pod.clone(), node.clone()))
        .collect()
}

/// The node of each of the job's replica slots, in slot order, from its status (`""` where a
/// slot has no node); `placement::placed_slots` gives it as [`SlotNodes`](crate::placement::SlotNodes).
pub fn slot_nodes(job: &DIJob) -> Vec<String> {
    let placed = placed_pods(job);
    slot_pods(job)
        .iter()
        .map(|(pod, _)| placed.get(pod).cloned().unwrap_or_default())
        .collect()
}

/// The priority value a policy sees and preemption compares: `normal` 0, `high` 100. A job
/// naming a PriorityClass gets [`priority_value_of`]'s; this is its no-class case.
pub fn priority_value(priority: Priority) -> i32 {
    match priority {
        Priority::Normal => 0,
        Priority::High => 100,
    }
}

/// A job's priority value from its `spec.priority` and the `value` of the PriorityClass its
/// `spec.priorityClassName` names: the class's value when the job names a class that exists
/// (`class_value` is then `Some`), whatever `spec.priority` says; otherwise, with no class named
/// or a class that does not exist (yet), `spec.priority`'s ([`priority_value`]).
pub fn priority_value_of(priority: Priority, class_value: Option<i32>) -> i32 {
    class_value.unwrap_or_else(|| priority_value(priority))
}

/// The model of `job` for a policy call; `node_index` maps node names to indices of the
/// call's node list, `age_seconds` is the job's age.
pub fn model_job(job: &DIJob, node_index: &HashMap<&str, u32>, age_seconds: u64) -> plugin::Job {
    let requests = task_requests(job);
    let to_u32 = |n: i32| u32::try_from(n.max(0)).unwrap_or(0);
    let key = ObjectKey::of(&job.metadata);
    plugin::Job {
        // The plugin model's key is the string a policy sees and a snapshot file holds.
        key: key.to_string(),
        priority: priority_value(job.spec.priority),
        preemptible: job.spec.preemptible,
        tasks: job
            .spec
            .tasks
            .iter()
            .zip(&requests)
            .enumerate()
            .map(|(i, (t, r))| plugin::Task {
                name: build::task_name(t),
                task_type: t.type_.map(|t| t.as_str()).unwrap_or("none").to_string(),
                replicas: to_u32(build::task_replicas(job, i)),
                min_replicas: to_u32(t.min_replicas()),
                max_replicas: to_u32(t.max_replicas()),
                requests: model_resources(r, true),
            })
            .collect(),
        current: slot_nodes(job)
            .iter()
            .map(|node| {
                // An empty entry is a slot without a node, never a node's name.
                Some(node)
                    .filter(|n| !n.is_empty())
                    .and_then(|n| node_index.get(n.as_str()).copied())
            })
            .collect(),
        profilings: job
            .status
            .as_ref()
            .and_then(|s| s.profilings.as_ref())
            .map(|p| profilings_text(p, &key))
            .unwrap_or_default(),
        age_seconds,
    }
}

/// Largest `status.profilings`, as JSON text, handed to a policy. The replica API caps what it
/// merges in, but status has other writers; a policy copies the text into its own memory once
/// per job per call, and optimize passes every job of a policy in one call. 64 KiB is the
/// replica API's whole request body, and some two thousand collector-count entries.
pub const MAX_PROFILINGS_BYTES: usize = 64 * 1024;

/// `profilings` as the JSON text a policy reads, or `""` (no profilings, which every policy
/// tolerates) when it is over [`MAX_PROFILINGS_BYTES`]. Serialising stops at the limit, so an
/// oversized value costs no more than the limit to find out.
pub fn profilings_text(profilings: &serde_json::Value, job: &ObjectKey) -> String {
    struct Capped(Vec<u8>);
    impl std::io::Write for Capped {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.0.len() + buf.len() > MAX_PROFILINGS_BYTES {
                return Err(std::io::Error::other("over the limit"));
            }
            self.0.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Capped(Vec::new());
    match serde_json::to_writer(&mut out, profilings) {
        // serde_json writes UTF-8 only.
        Ok(()) => String::from_utf8(out.0).unwrap_or_default(),
        Err(_) => {
            tracing::warn!(
                %job,
                limit = MAX_PROFILINGS_BYTES,
                "status.profilings is over the limit; policies see the job without profilings"
            );
            String::new()
        }
    }
}

/// A short human summary of what a job asks, e.g. `4 replicas: 16 GPUs, 8 CPUs, 32 GiB`.
pub fn describe_need(job: &plugin::Job) -> String {
    let mut gpus = 0u64;
    let mut cpu = 0u64;
    let mut mem = 0u64;
    for t in job.replicas() {
        gpus += u64::from(t.requests.gpus);
        cpu += t.requests.cpu_millis;
        mem += t.requests.memory_bytes;
    }
    format!(
        "{} replicas: {gpus} GPUs, {} CPUs, {} GiB",
        job.total_replicas(),
        fmt_cpu(cpu),
        fmt_gib(mem)
    )
}

/// A short human summary of free capacity, e.g. `free: 12 GPUs on 3 ready nodes (at most 4 on one)`.
pub fn describe_free(nodes: &[plugin::Node]) -> String {
    let ready: Vec<&plugin::Node> = nodes.iter().filter(|n| n.ready).collect();
    let gpus: u64 = ready.iter().map(|n| u64::from(n.free.gpus)).sum();
    let most = ready.iter().map(|n| n.free.gpus).max().unwrap_or(0);
    let cpu: u64 = ready.iter().map(|n| n.free.cpu_millis).sum();
    format!(
        "free: {gpus} GPUs (at most {most} on one node), {} CPUs on {} ready of {} nodes",
        fmt_cpu(cpu),
        ready.len(),
        nodes.len()
    )
}

fn fmt_cpu(millis: u64) -> String {
    if millis.is_multiple_of(1000) {
        (millis / 1000).to_string()
    } else {
        format!("{:.1}", millis as f64 / 1000.0)
    }
}

fn fmt_gib(bytes: u64) -> String {
    let gib = bytes as f64 / f64::from(1u32 << 30);
    if gib.fract() == 0.0 {
        format!("{gib:.0}")
    } else {
        format!("{gib:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, gpus: u32, ready: bool) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"zone": "a"}},
            "spec": {"taints": [{"key": "gpu", "value": "yes", "effect": "PreferNoSchedule"}]},
            "status": {
                "allocatable": {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": gpus.to_string(), "pods": "110", "rdma/hca": "2"},
                "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}],
                "images": [{"names": ["big"], "sizeBytes": 1}]
            }
        }))
        .expect("node")
    }

    fn usage_pod(
        job: Option<&str>,
        node: Option<&str>,
        phase: &str,
        cpu: &str,
        gpus: &str,
    ) -> UsagePod {
        let mut labels = json!({"app": "x"});
        if let Some(job) = job {
            labels["diengine/job"] = json!(job);
        }
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "3",
                "labels": labels, "annotations": {"a": "b"},
                "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]},
            "spec": {
                "nodeName": node,
                "containers": [
                    {"name": "a", "image": "i", "resources": {"requests": {"cpu": cpu}, "limits": {"nvidia.com/gpu": gpus}}},
                    {"name": "b", "image": "i", "resources": {"requests": {"memory": "1Gi"}}}
                ],
                "initContainers": [{"name": "init", "image": "i", "resources": {"requests": {"cpu": "8"}}}]
            },
            "status": {"phase": phase}
        }))
        .expect("pod")
    }

    #[test]
    fn a_usage_pod_keeps_only_its_job_node_and_summed_requests() {
        let pod = usage_pod(Some("job1"), Some("n1"), "Running", "2", "1");
        assert_eq!(pod.job_key(), Some(ObjectKey::new("ns", "job1")));
        assert_eq!(pod.node.as_deref(), Some("n1"));
        // The init container's 8 CPUs exceed the containers' 2: kube-scheduler's rule.
        assert_eq!(pod.requests.get(CPU), 8000);
        assert_eq!(pod.requests.get(GPU), 1000, "limits stand in for requests");
        assert_eq!(pod.requests.get(MEMORY), (1i128 << 30) * 1000);
        assert!(!pod.terminal);
        assert_eq!(pod.metadata.annotations, None);
        assert_eq!(pod.metadata.labels, None);
        assert_eq!(pod.metadata.managed_fields, None);
        assert_eq!(
            (
                pod.metadata.uid.as_deref(),
                pod.metadata.resource_version.as_deref()
            ),
            (Some("u"), Some("3"))
        );
        assert!(usage_pod(None, None, "Succeeded", "1", "0").terminal);
        assert_eq!(usage_pod(None, None, "Pending", "1", "0").job_key(), None);
    }

    #[test]
    fn usage_counts_bound_live_pods_except_skipped_jobs() {
        let pods = [
            usage_pod(Some("a"), Some("n1"), "Running", "1", "1"),
            usage_pod(Some("b"), Some("n1"), "Running", "1", "2"),
            usage_pod(None, Some("n1"), "Running", "1", "4"),
            usage_pod(None, Some("n1"), "Succeeded", "1", "8"),
            usage_pod(None, None, "Pending", "1", "8"),
            usage_pod(None, Some("n2"), "Pending", "1", "1"),
        ];
        let usage = node_usage(&pods, |k| *k == ObjectKey::new("ns", "b"));
        assert_eq!(usage["n1"].get(GPU), 5000);
        assert_eq!(usage["n2"].get(GPU), 1000);
        assert_eq!(usage.len(), 2);
    }

    #[test]
    fn a_node_model_subtracts_usage_and_rounds_capacity_down() {
        let mut n = node("n1", 8, true);
        trim_node(&mut n);
        assert_eq!(n.status.as_ref().and_then(|s| s.images.as_ref()), None);
        let mut used = Resources::default();
        used.set(GPU, 3000);
        used.set(CPU, 1500);
        used.set(MEMORY, 1500); // 1.5 bytes
        let m = model_node(&n, Some(&used));
        assert_eq!(m.name, "n1");
        assert!(m.ready);
        assert_eq!(m.allocatable.gpus, 8);
        assert_eq!(m.free.gpus, 5);
        assert_eq!(m.free.cpu_millis, 30_500);
        assert_eq!(
            m.free.memory_bytes,
            (128u64 << 30) - 2,
            "1.5 bytes used leaves 2 fewer whole bytes"
        );
        assert_eq!(
            m.allocatable.extended,
            vec![("pods".to_string(), 110), ("rdma/hca".to_string(), 2)]
        );
        assert_eq!(m.labels, vec![("zone".to_string(), "a".to_string())]);
        assert_eq!(m.taints.len(), 1);
        assert_eq!(m.taints[0].effect, plugin::TaintEffect::PreferNoSchedule);
        assert!(!model_node(&node("n2", 8, false), None).ready);
        // Over-committed nodes show no room rather than wrapping around.
        let mut lots = Resources::default();
        lots.set(GPU, 100_000);
        assert_eq!(model_node(&n, Some(&lots)).free.gpus, 0);
    }

    #[test]
    fn a_heartbeat_is_no_node_change_but_capacity_readiness_and_cordon_are() {
        // A heartbeat at `at`: the sandbox kubelet once moved lastTransitionTime with every
        // one, and a kubelet may reword its reason or message, all without a change of status.
        let beat = |at: &str, ready: bool| {
            let mut n = node("n1", 8, ready);
            n.metadata.resource_version = Some(at.to_string());
            let conditions = n.status.as_mut().and_then(|s| s.conditions.as_mut());
            let ready = &mut conditions.expect("conditions")[0];
            let time = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                at.parse().expect("timestamp"),
            );
            ready.last_heartbeat_time = Some(time.clone());
            ready.last_transition_time = Some(time);
            ready.reason = Some("KubeletReady".into());
            ready.message = Some(format!("kubelet is posting ready status at {at}"));
            trim_node(&mut n);
            n
        };
        let before = beat("2026-11-27T10:00:00Z", true);
        assert!(node_changed(None, &before), "a new node");
        assert!(!node_changed(
            Some(&before),
            &beat("2026-11-27T10:00:10Z", true)
        ));
        assert!(node_changed(
            Some(&before),
            &beat("2026-11-27T10:00:10Z", false)
        ));
        let mut more = beat("2026-11-27T10:00:10Z", true);
        let allocatable = more.status.as_mut().and_then(|s| s.allocatable.as_mut());
        allocatable.expect("allocatable").insert(
            "nvidia.com/gpu".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("16".into()),
        );
        assert!(node_changed(Some(&before), &more));
        let mut cordoned = beat("2026-11-27T10:00:10Z", true);
        cordoned
            .spec
            .get_or_insert_with(Default::default)
            .unschedulable = Some(true);
        assert!(node_changed(Some(&before), &cordoned));
        let mut relabelled = beat("2026-11-27T10:00:10Z", true);
        relabelled.metadata.labels = None;
        assert!(node_changed(Some(&before), &relabelled));
    }

    #[test]
    fn a_cordoned_node_is_not_ready() {
        let mut n = node("n1", 8, true);
        n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
        assert!(!model_node(&n, None).ready);
    }

    #[test]
    fn a_named_class_that_exists_gives_the_value_else_spec_priority_does() {
        use crate::api::Priority::{High, Normal};
        // No class named, or one that does not exist: spec.priority's value.
        assert_eq!(priority_value_of(Normal, None), 0);
        assert_eq!(priority_value_of(High, None), 100);
        assert_eq!(priority_value_of(Normal, None), priority_value(Normal));
        assert_eq!(priority_value_of(High, None), priority_value(High));
        // A class that exists: its value, whatever spec.priority says, below, between, above
        // and at the two built-in values, and at the ends of PriorityClass's range.
        for value in [
            i32::MIN,
            -1,
            0,
            1,
            50,
            99,
            100,
            101,
            1_000_000_000,
            2_000_001_000,
            i32::MAX,
        ] {
            for priority in [Normal, High] {
                assert_eq!(
                    priority_value_of(priority, Some(value)),
                    value,
                    "{priority:?} {value}"
                );
            }
        }
        // So a class of value 0 puts a `high` job below a `normal` one naming a class of 1.
        assert!(priority_value_of(High, Some(0)) < priority_value_of(Normal, Some(1)));
    }

    use crate::fixtures::elastic_job as job;

    #[test]
    fn a_job_model_has_tasks_requests_and_current_placement_in_slot_order() {
        let j = job(json!({
            "ranks": ["j-learner-0", "", "j-collector-1", "j-collector-0"],
            "allocation": ["n1", "", "n2", "gone"],
            "profilings": {"collectors": []}
        }));
        let index = HashMap::from([("n1", 0u32), ("n2", 1u32)]);
        let m = model_job(&j, &index, 42);
        assert_eq!(m.key, "ns/j");
        assert_eq!(m.priority, 100);
        assert!(m.preemptible);
        assert_eq!(m.tasks[0].requests.cpu_millis, 500);
        assert_eq!(m.tasks[0].requests.gpus, 2);
        assert_eq!(m.tasks[0].requests.memory_bytes, 3 << 29);
        assert_eq!(
            (
                m.tasks[1].replicas,
                m.tasks[1].min_replicas,
                m.tasks[1].max_replicas
            ),
            (2, 1, 5)
        );
        assert_eq!(m.tasks[1].task_type, "collector");
        // Slots: learner-0, collector-0, collector-1. collector-0 is on a vanished node.
        assert_eq!(m.current, vec![Some(0), None, Some(1)]);
        assert_eq!(m.profilings, r#"{"collectors":[]}"#);
        assert_eq!(m.age_seconds, 42);
        assert_eq!(describe_need(&m), "3 replicas: 2 GPUs, 0.5 CPUs, 1.5 GiB");
    }

    #[test]
    fn describe_free_sums_ready_nodes_only() {
        let nodes = [
            model_node(&node("n1", 8, true), None),
            model_node(&node("n2", 4, true), None),
            model_node(&node("n3", 8, false), None),
        ];
        assert_eq!(
            describe_free(&nodes),
            "free: 12 GPUs (at most 8 on one node), 64 CPUs on 2 ready of 3 nodes"
        );
    }

    #[test]
    fn oversized_profilings_reach_a_policy_as_none() {
        // Just under the limit: passed whole.
        let fits = "x".repeat(MAX_PROFILINGS_BYTES - 20);
        let m = model_job(&job(json!({"profilings": {"k": fits}})), &HashMap::new(), 0);
        assert_eq!(m.profilings.len(), MAX_PROFILINGS_BYTES - 12);
        // Over it (as any status writer may make it): no profilings, as for unreadable ones.
        let entries: serde_json::Map<String, serde_json::Value> = (0..100_000)
            .map(|i| (i.to_string(), json!({"throughput": 1.0})))
            .collect();
        let m = model_job(
            &job(json!({"profilings": {"collectors": entries}})),
            &HashMap::new(),
            0,
        );
        assert_eq!(m.profilings, "");
    }
}
