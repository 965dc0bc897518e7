//! The DIJob API (`diengine.opendilab.org/v2alpha1`), drop-in compatible with DI-orchestrator v2.
//!
//! Owns the typed Rust model of the custom resource, the names, labels and annotations the
//! operator and DI-engine share, and the generation of the CRD (`crd`). It holds no behaviour:
//! reconciling, allocating and serving live in their own modules.
//!
//! Differences from DI-orchestrator are additive only: the legacy `spec.group` string its samples
//! carry is declared (and ignored) so strict field validation accepts them, and task template
//! `metadata` (labels, annotations) is kept instead of being pruned.

pub mod crd;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PodTemplateSpec, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of DIJob.
pub const GROUP: &str = "diengine.opendilab.org";
/// Served and stored version of DIJob.
pub const VERSION: &str = "v2alpha1";
/// `apiVersion` of DIJob objects.
pub const API_VERSION: &str = "diengine.opendilab.org/v2alpha1";
/// Kind of DIJob objects.
pub const KIND: &str = "DIJob";

/// Labels and annotations DI-orchestrator puts on pods and services; DI-engine and existing
/// tooling select on them, so their keys and values are part of the compatible API.
pub mod labels {
    /// Job name (any `/` replaced by `-`), on pods and services.
    pub const JOB: &str = "diengine/job";
    /// Always [`OPERATOR_NAME`], on pods and services.
    pub const OPERATOR: &str = "diengine/operator";
    /// Pod name, on pods.
    pub const POD: &str = "diengine/pod";
    /// Task type, on pods.
    pub const TASK_TYPE: &str = "diengine/task-type";
    /// Task name, on pods.
    pub const TASK_NAME: &str = "diengine/task-name";
    /// Value of the [`OPERATOR`] label.
    pub const OPERATOR_NAME: &str = "di-operator";

    /// Annotation: total replicas of the job when the pod was built.
    pub const ANNOTATION_REPLICAS: &str = "diengine/replicas";
    /// Annotation: global rank of the pod.
    pub const ANNOTATION_RANK: &str = "diengine/rank";
    /// Annotation: rank of the pod within its task.
    pub const ANNOTATION_TASK_RANK: &str = "diengine/task-rank";
    /// Annotation: node allocated to the pod, empty when none.
    pub const ANNOTATION_NODE: &str = "diengine/node";
    /// Annotation (diorch's own): a hash of what the pod was built from; see
    /// `planner::TEMPLATE_HASH_ANNOTATION`.
    pub const ANNOTATION_TEMPLATE_HASH: &str = "diorch.io/template-hash";
}

/// Documented maximums of the numbers in a DIJob that size the operator's memory and work. The
/// CRD schema, the admission webhook, the controller and the replica API all enforce them, so a
/// job past them is refused with the field named, wherever it comes in.
///
/// Why these numbers: every pod of a job carries `DI_NODES`, one FQDN (up to ~200 bytes) per
/// replica of the whole job, plus its task's FQDNs, so a pod's size grows with the job's replicas
/// and a job's pods with its replicas squared. At 4000 replicas a pod is ~250 KB with typical
/// names and under 1.1 MB with the longest names validation allows, within the 1.5 MiB an object
/// may have in etcd (a test builds that pod). The controller builds at most
/// [`MAX_CREATES_PER_PASS`](crate::planner::MAX_CREATES_PER_PASS) pods at a time, so
/// its memory follows one batch, not the job. DI-engine jobs run tens to hundreds of
/// collectors; 64 tasks is far beyond its three roles plus free-form ones.
pub mod limits {
    /// Most tasks in one job (`spec.tasks`); also bounds the API server's CEL cost estimate.
    pub const MAX_TASKS: usize = 64;
    /// Most replicas one task may declare: `replicas`, `minReplicas` and `maxReplicas`.
    pub const MAX_TASK_REPLICAS: i32 = 1000;
    /// Most replicas one job may run across its tasks, each counted at its maxReplicas.
    pub const MAX_JOB_REPLICAS: i32 = 4000;
    /// Most entries in `spec.nonRetryableExitCodes`.
    pub const MAX_EXIT_CODES: usize = 32;
    /// Longest `spec.priorityClassName`: a PriorityClass name is a DNS-1123 subdomain.
    pub const MAX_PRIORITY_CLASS_NAME: usize = 253;
}

/// The pattern of a DNS-1123 subdomain (apimachinery's `dns1123SubdomainFmt`), anchored: what
/// the CRD schema requires of `spec.priorityClassName`.
pub const DNS1123_SUBDOMAIN_PATTERN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// Name of the container the operator treats as the DI-engine worker.
pub const DEFAULT_CONTAINER_NAME: &str = "di-container";
/// Name of the port DI-engine workers listen on.
pub const DEFAULT_PORT_NAME: &str = "di-port";
/// Port DI-engine workers listen on, unless `di-container` declares `di-port`.
pub const DEFAULT_PORT: i32 = 22270;

/// Spec of a DIJob: a set of tasks (learner, collector, evaluator, or free-form), each a pod
/// template with a replica count.
// kube's `printcolumn(...)` repeats `type_ = ...` per column, which clippy sees as duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "diengine.opendilab.org",
    version = "v2alpha1",
    kind = "DIJob",
    plural = "dijobs",
    singular = "dijob",
    shortname = "dijob",
    // `kubectl get ai` lists them beside other training jobs that join the category.
    category = "ai",
    namespaced,
    status = "DIJobStatus",
    derive = "PartialEq",
    doc = "DIJob is a distributed DI-engine reinforcement-learning job.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "ReadyReplicas",
        type_ = "integer",
        json_path = ".status.readyReplicas"
    ),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".status.replicas"),
    printcolumn(name = "Restarts", type_ = "integer", json_path = ".status.restarts"),
    printcolumn(
        name = "Reschedules",
        type_ = "integer",
        json_path = ".status.reschedules"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Allocation",
        type_ = "string",
        json_path = ".status.allocation",
        description = "The node of each replica, by rank, as the allocator placed them (preemptible jobs).",
        priority = "1"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct DIJobSpec {
    /// Priority of the job: `normal` or `high`.
    #[serde(default)]
    pub priority: Priority,

    /// diorch extension: the name of a cluster PriorityClass (scheduling.k8s.io/v1) whose
    /// `value` is the job's priority value, in place of `priority`'s (`normal` 0, `high` 100):
    /// the order in which the allocator's policies and preemption see jobs. While no class of
    /// that name exists the job keeps `priority`'s value (the operator warns once; a class may
    /// be created later). Not copied to the pods, which keep what their templates say:
    /// kube-scheduler's own preemption on the nodes the allocator manages would evict pods the
    /// allocator did not choose. A DNS-1123 subdomain of at most 253 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = limits::MAX_PRIORITY_CLASS_NAME),
        pattern(DNS1123_SUBDOMAIN_PATTERN)
    )]
    pub priority_class_name: Option<String>,

    /// What to do with the job's pods once it has completed.
    #[serde(default)]
    pub clean_pod_policy: CleanPodPolicy,

    /// Whether the job may be preempted and re-placed by the allocator.
    #[serde(default)]
    pub preemptible: bool,

    /// How many times a failed job is restarted before it is marked Failed. Absent means the
    /// default, 3.
    #[serde(
        default = "default_backoff_limit",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(default = "default_backoff_limit")]
    pub backoff_limit: Option<i32>,

    /// Volumes appended to every pod of the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<Volume>>,

    /// The job's components, one entry per task.
    // The bound keeps the API server's cost estimate of the per-task CEL rules small (it
    // multiplies by the list's largest possible size); a job has a handful of tasks. The sum
    // of replicas over tasks (`limits::MAX_JOB_REPLICAS`) is left to the webhook and the
    // controller: Kubernetes 1.24's CEL has no `sum()` and no fold.
    #[schemars(length(max = limits::MAX_TASKS))]
    pub tasks: Vec<Task>,

    /// Legacy field carried by DI-orchestrator's samples (`group: diengine`). Accepted and
    /// ignored, so those manifests pass strict field validation unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,

    /// diorch extension, as batch/v1 Job's `suspend`: while true the job has no pods and no
    /// service (running pods are deleted with their grace period) and its phase is Suspended;
    /// its ranks, restarts and reschedules are kept. Setting it back to false (or removing it)
    /// re-creates the pods. A job created suspended creates nothing until resumed. A queueing
    /// controller can create jobs suspended and release them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,

    /// diorch extension, as batch/v1 Job's: seconds the job may be active (not suspended,
    /// counted from `status.startTime`, which resuming resets) before it fails with reason
    /// DeadlineExceeded and its pods are cleaned by cleanPodPolicy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub active_deadline_seconds: Option<i64>,

    /// diorch extension, as batch/v1 Job's: seconds after the job Succeeded or Failed
    /// (`status.completionTimestamp`) at which the operator deletes it, with its pods and
    /// service. 0 deletes it as soon as it finishes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,

    /// diorch extension: container exit codes (1 to 255) that mean "do not retry", such as 1
    /// for a user error where 137 is an eviction. A failed pod with a container that exited with
    /// one of them fails the job at once (reason NonRetryableExitCode), whatever backoffLimit
    /// and the task's restartPolicy say. At most 32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_EXIT_CODES), inner(range(min = 1, max = 255)))]
    pub non_retryable_exit_codes: Option<Vec<i32>>,
}

impl DIJob {
    /// `spec.suspend`: the job must have no pods.
    pub fn is_suspended(&self) -> bool {
        self.spec.suspend == Some(true)
    }
}

fn default_backoff_limit() -> Option<i32> {
    Some(3)
}

/// Priority of a DIJob.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    #[default]
    Normal,
    High,
}

/// What happens to a job's pods after it has succeeded or failed.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum CleanPodPolicy {
    /// Delete pods that are still running (or pending).
    #[default]
    Running,
    /// Delete every pod.
    All,
    /// Keep every pod.
    None,
}

/// One component of a DIJob.
// The CEL rules refuse at `kubectl apply` what DI-orchestrator only failed after the fact (an
// unnamed task of type none) and our min/max extension's ordering; the admission webhook and
// the controller check the same with the same words, for clusters without either.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "(has(self.type) && self.type != 'none') || (has(self.name) && self.name != '')",
        "message": "none type task has no name; give every task of type none a name",
        "fieldPath": ".name",
        "reason": "FieldValueRequired"
    },
    {
        "rule": "!has(self.minReplicas) || self.minReplicas <= self.replicas",
        "message": "minReplicas must not exceed replicas; lower minReplicas or raise replicas",
        "fieldPath": ".minReplicas"
    },
    {
        "rule": "!has(self.maxReplicas) || self.replicas <= self.maxReplicas",
        "message": "maxReplicas must be at least replicas; raise maxReplicas or lower replicas",
        "fieldPath": ".maxReplicas"
    }
]))]
pub struct Task {
    /// Number of pods of this task (at most 1000).
    #[serde(default = "default_replicas")]
    #[schemars(
        range(min = 1, max = limits::MAX_TASK_REPLICAS),
        default = "default_replicas"
    )]
    pub replicas: i32,

    /// Role of the task in DI-engine.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<TaskType>,

    /// Name of the task; typed tasks default to their type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,

    /// Pod template of the task's replicas.
    #[serde(default)]
    pub template: PodTemplateSpec,

    /// diorch extension: fewest replicas the allocator may shrink this task to when the job is
    /// preemptible. Absent means `replicas`. At most 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = limits::MAX_TASK_REPLICAS))]
    pub min_replicas: Option<i32>,

    /// diorch extension: most replicas the allocator may grow this task to when the job is
    /// preemptible. Absent means `replicas`. At most 1000; a job's tasks together at most 4000
    /// (each counted at its maxReplicas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = limits::MAX_TASK_REPLICAS))]
    pub max_replicas: Option<i32>,

    /// diorch extension: what a failed pod of this task does to the job. `RestartJob` (the
    /// default, DI-orchestrator's behaviour): the job goes Restarting, counted in
    /// `status.restarts` against backoffLimit. `RestartPod`: only that pod is replaced, with its
    /// rank, while the job keeps its phase (a collector crash need not disturb the learner);
    /// counted per task in `status.podRestarts`, and once a task's count has reached
    /// backoffLimit its next failure is the job's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<RestartPolicy>,
}

/// What a failed pod of a task does to its job (`spec.tasks[].restartPolicy`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RestartPolicy {
    // The job restarts (phase Restarting), as on DI-orchestrator.
    #[default]
    RestartJob,
    // Only the failed pod is replaced.
    RestartPod,
}

impl Task {
    /// `minReplicas`, defaulting to `replicas`.
    pub fn min_replicas(&self) -> i32 {
        self.min_replicas.unwrap_or(self.replicas)
    }

    /// `maxReplicas`, defaulting to `replicas`.
    pub fn max_replicas(&self) -> i32 {
        self.max_replicas.unwrap_or(self.replicas)
    }
}

fn default_replicas() -> i32 {
    1
}

/// Role of a task in DI-engine.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TaskType {
    Learner,
    Collector,
    Evaluator,
    /// A task with no DI-engine role; it must be named.
    None,
}

impl TaskType {
    /// The lowercase name used in the API, labels and default task names.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskType::Learner => "learner",
            TaskType::Collector => "collector",
            TaskType::Evaluator => "evaluator",
            TaskType::None => "none",
        }
    }
}

/// A map by task name (or pod phase) kept as one sorted list: a status map has a few entries,
/// and a `BTreeMap` node takes 0.3 to 0.5 KB before its first, per map, per job in the cache.
/// It reads and writes the same JSON object as a `BTreeMap`, keys in order.
pub type SmallMap<V> = litemap::LiteMap<String, V>;

/// Observed state of a DIJob, written by the operator.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DIJobStatus {
    /// Current phase of the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(default = "default_phase")]
    pub phase: Option<Phase>,

    /// Number of replicas the job runs now.
    #[serde(default)]
    pub replicas: i32,

    /// Number of ready replica pods.
    #[serde(default)]
    pub ready_replicas: i32,

    /// Number of times the job entered Restarting.
    #[serde(default)]
    pub restarts: i32,

    /// Number of times the job entered Rescheduling.
    #[serde(default)]
    pub reschedules: i32,

    /// When the job entered Succeeded or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_timestamp: Option<Time>,

    /// diorch extension, as batch/v1 Job's: when the operator started the job, or last
    /// resumed it; `spec.activeDeadlineSeconds` counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,

    /// Pod counts per task name and pod phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<BTreeMap<String, BTreeMap<String, i32>>>")]
    pub task_status: Option<SmallMap<SmallMap<i32>>>,

    /// Node name per global rank, for preemptible jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation: Option<Vec<String>>,

    /// diorch extension: replicas per task name chosen by the allocator for a preemptible job
    /// (within the task's minReplicas..maxReplicas); a task not listed runs `spec` replicas.
    /// Written by diorch only. To pin a size, set minReplicas = maxReplicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_replicas: Option<BTreeMap<String, i32>>,

    /// diorch extension: local ranks of a preemptible job's tasks removed by name through the
    /// replica API (`DELETE …/replicas {"pods": [...]}`); a task runs the first `taskReplicas`
    /// local ranks not listed here. Written by diorch only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed_ranks: Option<BTreeMap<String, Vec<i32>>>,

    /// Pod name holding each global rank (`""` = free rank), so ranks stay stable across pod
    /// re-creation, scaling and operator restarts. Written by diorch only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<Vec<String>>,

    /// Profiling data reported by the job's workers, read by scheduling policies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crd::preserve_unknown_object")]
    pub profilings: Option<serde_json::Value>,

    /// diorch extension: for a task that still runs pods without a `diorch.io/template-hash`
    /// (made by DI-orchestrator before a migration), the hash of its template when diorch
    /// adopted them, so a later template edit rolls those pods too. Written by diorch only;
    /// an entry goes once the task has no such pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopted_template_hashes: Option<BTreeMap<String, String>>,

    /// diorch extension: each task's scale and readiness by task name, so a task's size (which
    /// the replica API and the allocator change) reads without decoding the spec, e.g.
    /// `kubectl get dijob J -o jsonpath='{.status.taskReplicaStatus.collector.replicas}'`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<BTreeMap<String, TaskReplicaStatus>>")]
    pub task_replica_status: Option<SmallMap<TaskReplicaStatus>>,

    /// diorch extension: failed pods replaced per task under `restartPolicy: RestartPod`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_restarts: Option<BTreeMap<String, i32>>,

    /// diorch extension: uids of failed pods already counted in `podRestarts` and still
    /// present, so a pod is counted once however often it is seen. Written by diorch only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted_failures: Option<Vec<String>>,

    /// diorch extension: the `metadata.generation` of the spec this status was planned from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// One condition per phase the job has been in; the current one is last and `True`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<JobCondition>>,

    /// diorch extension: the latest allocation decisions for a preemptible job, newest first
    /// (at most 10): each placement, move, resize, fallback and wait, with the policy that
    /// made it and why. `kubectl dijob explain JOB` shows them. Written by diorch only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decisions: Option<Vec<AllocationDecision>>,

    /// diorch extension: when the job's workers last reported a saved checkpoint (replica API
    /// `POST …/checkpoint`), bounded to the job's creation and the report's arrival. Preemption
    /// counts the work an eviction loses from it (never more than the pods' run time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checkpoint_time: Option<Time>,

    /// diorch extension: the last time room was taken from this job for a job of higher
    /// priority, while it lasts: cleared when an evicted job is placed again, or a shrunk job
    /// is grown back (or resized by its policy). Written by diorch only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<PreemptionStatus>,
}

/// diorch extension: `status.preemption`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionStatus {
    /// When.
    pub time: Time,
    /// `Shrunk` (elastic replicas removed, highest ranks first) or `Evicted` (the whole job).
    pub action: PreemptionAction,
    /// The job the room went to, `namespace/name`.
    pub for_job: String,
    /// Replicas per task before a shrink: what the job grows back to when room frees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas_before: Option<BTreeMap<String, i32>>,
}

/// What a preemption did to a job.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum PreemptionAction {
    Shrunk,
    Evicted,
}

impl PreemptionAction {
    pub fn as_str(self) -> &'static str {
        match self {
            PreemptionAction::Shrunk => "Shrunk",
            PreemptionAction::Evicted => "Evicted",
        }
    }
}

/// diorch extension: one entry of `status.decisions`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AllocationDecision {
    /// When it was made.
    pub time: Time,
    /// What happened to the job.
    pub action: DecisionAction,
    /// The policy that decided, as the `Allocated` condition names it: a plugin with its
    /// version (`binpack@3f2a…`) or a built-in policy (`builtin-binpack`).
    pub policy: String,
    /// sha256 (hex) of the plugin's Wasm component; absent for a built-in policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// What the operator changed about the requested policy's answer, when it did: a fallback
    /// to the built-in policy after the plugin failed (error, trap, deadline, memory) or gave
    /// an answer that does not fit. Absent when the policy's answer was applied as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_changed: Option<String>,
    /// The policy's own reason (contract 0.4.0 policies): at most 256 bytes, control and
    /// bidi characters replaced by spaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What the decision did, as the `Allocated` condition said it.
    pub message: String,
}

/// What an allocation decision did to a job.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum DecisionAction {
    /// A first placement.
    Placed,
    /// A re-plan moved replicas.
    Moved,
    /// An elastic policy changed the job's replica counts.
    Resized,
    /// Not every replica fits: the job waits.
    Waiting,
    /// Evicted for a job of higher priority: the job waits again.
    Evicted,
}

impl DecisionAction {
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionAction::Placed => "Placed",
            DecisionAction::Moved => "Moved",
            DecisionAction::Resized => "Resized",
            DecisionAction::Waiting => "Waiting",
            DecisionAction::Evicted => "Evicted",
        }
    }
}

fn default_phase() -> Option<Phase> {
    Some(Phase::Pending)
}

/// Phase of a DIJob.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Phase {
    Pending,
    Starting,
    Running,
    Restarting,
    Rescheduling,
    Succeeded,
    Failed,
    Unknown,
    // diorch extension: `spec.suspend` is true; the job has no pods.
    Suspended,
}

impl Phase {
    /// Every phase, DI-orchestrator's first.
    pub const ALL: [Phase; 9] = [
        Phase::Pending,
        Phase::Starting,
        Phase::Running,
        Phase::Restarting,
        Phase::Rescheduling,
        Phase::Succeeded,
        Phase::Failed,
        Phase::Unknown,
        Phase::Suspended,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Starting => "Starting",
            Phase::Running => "Running",
            Phase::Restarting => "Restarting",
            Phase::Rescheduling => "Rescheduling",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
            Phase::Unknown => "Unknown",
            Phase::Suspended => "Suspended",
        }
    }

    /// Succeeded and Failed are absorbing: nothing is created after them.
    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One task's entry in `status.taskReplicaStatus`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskReplicaStatus {
    /// The task's scale: `spec.tasks[].replicas`, or for a preemptible job the allocator's or
    /// the replica API's choice within minReplicas..maxReplicas (as `status.replicas`, this
    /// counts what the job runs once placed).
    pub replicas: i32,
    /// Of those, pods that are Ready.
    pub ready_replicas: i32,
}

/// A condition of a DIJob; its `type` is a phase name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobCondition {
    /// The phase this condition describes.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// diorch extension, as metav1.Condition's: the `metadata.generation` the condition was
    /// set from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The job's phase (Pending without a status) and since when it has been in it: when the
/// phase's condition last turned True, or its creation when no condition says (no status yet,
/// or a status written by something else); `None` without either.
pub fn phase_since(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    status: Option<&DIJobStatus>,
) -> (Phase, Option<jiff::Timestamp>) {
    let phase = status.and_then(|s| s.phase).unwrap_or(Phase::Pending);
    let since = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.type_ == phase.as_str() && c.status == "True")
        })
        .and_then(|c| c.last_transition_time.as_ref())
        .or(meta.creation_timestamp.as_ref())
        .map(|t| t.0);
    (phase, since)
}

/// Whole seconds from `since` to `now`: never negative, whatever the clocks say; 0 without a
/// `since`.
pub fn seconds_since(since: Option<jiff::Timestamp>, now: jiff::Timestamp) -> i64 {
    since.map_or(0, |t| now.as_second().saturating_sub(t.as_second()).max(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLES: [(&str, &str); 3] = [
        (
            "atari-dqn-dist.yaml",
            include_str!("../../../../examples/di-orchestrator-samples/atari-dqn-dist.yaml"),
        ),
        (
            "atari-dqn-dist-config.yaml",
            include_str!("../../../../examples/di-orchestrator-samples/atari-dqn-dist-config.yaml"),
        ),
        (
            "dijob-serial.yaml",
            include_str!("../../../../examples/di-orchestrator-samples/dijob-serial.yaml"),
        ),
    ];

    fn dijobs_in(yaml: &str) -> Vec<DIJob> {
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(yaml).expect("valid YAML");
        docs.into_iter()
            .filter(|d| d["kind"] == "DIJob")
            .map(|d| serde_json::from_value(d).expect("a DIJob"))
            .collect()
    }

    #[test]
    fn status_small_maps_read_and_write_the_json_a_btreemap_does() {
        // Keys out of order and a duplicate (the last wins, as serde_json's map keeps it).
        let text = r#"{"taskStatus": {"learner": {"Running": 1}, "collector": {"Pending": 2, "Running": 1, "Pending": 3}},
            "taskReplicaStatus": {"learner": {"replicas": 1, "readyReplicas": 1}, "collector": {"replicas": 3, "readyReplicas": 0}}}"#;
        let status: DIJobStatus = serde_json::from_str(text).expect("status");
        let as_btree: serde_json::Value = serde_json::from_str(text).expect("value");
        let written = serde_json::to_value(&status).expect("encode");
        assert_eq!(written["taskStatus"], as_btree["taskStatus"]);
        assert_eq!(
            serde_json::to_string(&written["taskStatus"]).expect("text"),
            r#"{"collector":{"Pending":3,"Running":1},"learner":{"Running":1}}"#
        );
        assert_eq!(
            written["taskReplicaStatus"],
            serde_json::json!({"collector": {"replicas": 3, "readyReplicas": 0},
                "learner": {"replicas": 1, "readyReplicas": 1}})
        );
        let ts = status.task_status.as_ref().expect("taskStatus");
        assert_eq!(ts.get("collector").and_then(|m| m.get("Pending")), Some(&3));
        // A hostile status with many keys in reverse order decodes, sorted: litemap sorts
        // out-of-order input once instead of inserting it key by key (quadratic).
        let many: serde_json::Map<String, serde_json::Value> = (0..50_000)
            .rev()
            .map(|i| (format!("t{i:05}"), serde_json::json!({"Running": i})))
            .collect();
        let status: DIJobStatus =
            serde_json::from_value(serde_json::json!({"taskStatus": many})).expect("many");
        let ts = status.task_status.expect("taskStatus");
        assert_eq!(ts.len(), 50_000);
        assert_eq!(ts.first().map(|(k, _)| k.as_str()), Some("t00000"));
        assert_eq!(ts.get("t04242").and_then(|m| m.get("Running")), Some(&4242));
    }

    #[test]
    fn every_di_orchestrator_sample_parses_into_the_typed_api() {
        for (file, yaml) in SAMPLES {
            let jobs = dijobs_in(yaml);
            assert_eq!(jobs.len(), 1, "{file}");
            let job = &jobs[0];
            assert_eq!(job.spec.priority, Priority::Normal, "{file}");
            assert_eq!(job.spec.clean_pod_policy, CleanPodPolicy::Running, "{file}");
            assert_eq!(job.spec.backoff_limit, Some(0), "{file}");
            assert!(!job.spec.preemptible, "{file}");
            assert!(!job.spec.tasks.is_empty(), "{file}");
        }
        let serial = &dijobs_in(SAMPLES[2].1)[0];
        assert_eq!(serial.spec.tasks[0].type_, Some(TaskType::None));
        assert_eq!(serial.spec.tasks[0].name.as_deref(), Some("serial"));
        let dist = &dijobs_in(SAMPLES[0].1)[0];
        let replicas: Vec<i32> = dist.spec.tasks.iter().map(|t| t.replicas).collect();
        assert_eq!(replicas, [1, 1, 2]);
    }

    #[test]
    fn absent_fields_take_di_orchestrator_defaults() {
        let job: DIJob = serde_json::from_value(serde_json::json!({
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": "j"},
            "spec": {"tasks": [{"type": "learner"}]}
        }))
        .expect("minimal DIJob");
        assert_eq!(job.spec.priority, Priority::Normal);
        assert_eq!(job.spec.clean_pod_policy, CleanPodPolicy::Running);
        assert_eq!(job.spec.backoff_limit, Some(3));
        assert!(!job.spec.preemptible);
        assert_eq!(job.spec.tasks[0].replicas, 1);
        assert_eq!(job.spec.tasks[0].name, None);
        assert!(job.status.is_none());
    }

    #[test]
    fn legacy_group_field_round_trips_and_template_metadata_is_kept() {
        let job: DIJob = serde_json::from_value(serde_json::json!({
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": "j"},
            "spec": {
                "group": "diengine",
                "tasks": [{
                    "type": "collector",
                    "template": {
                        "metadata": {"labels": {"team": "rl"}, "annotations": {"a": "b"}},
                        "spec": {"containers": [{"name": "di-container", "image": "x"}]}
                    }
                }]
            }
        }))
        .expect("DIJob");
        let back = serde_json::to_value(&job).expect("serialise");
        assert_eq!(back["spec"]["group"], "diengine");
        assert_eq!(
            back["spec"]["tasks"][0]["template"]["metadata"]["labels"]["team"],
            "rl"
        );
        assert_eq!(
            back["spec"]["tasks"][0]["template"]["metadata"]["annotations"]["a"],
            "b"
        );
        assert_eq!(back["spec"]["tasks"][0]["type"], "collector");
    }

    #[test]
    fn phases_and_task_types_use_the_api_spelling() {
        for phase in Phase::ALL {
            assert_eq!(serde_json::to_value(phase).expect("phase"), phase.as_str());
        }
        assert!(Phase::Succeeded.is_terminal() && Phase::Failed.is_terminal());
        assert!(!Phase::Running.is_terminal());
        for t in [
            TaskType::Learner,
            TaskType::Collector,
            TaskType::Evaluator,
            TaskType::None,
        ] {
            assert_eq!(serde_json::to_value(t).expect("type"), t.as_str());
        }
    }
}
