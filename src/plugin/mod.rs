//! WebAssembly plugins: scheduling policies and pod mutators as components of `wit/plugins.wit`.
//!
//! Owns: the typed traits callers use ([`SchedulingPolicy`], [`PodMutator`]), their plain input
//! and output types, the error type, and the submodules of one kind of I/O each: the Wasm host
//! (`host`), registry pulls (`fetch`), the registry of loaded plugins with its ConfigMap format
//! (`registry`, `spec`), output checks and mutator capabilities (`checks`, `capabilities`; every
//! scheduling answer passes [`Checked`]), the
//! native fallback, snapshot files. Must not touch: the controllers that feed it
//! (`controller::plugins`), the HTTP routes that show it (`http::plugins`), the CLI (`cli`) or
//! the sandbox; callers never see wasmtime types.

pub mod capabilities;
pub mod checked;
pub mod checks;
pub mod compress;
pub mod fetch;
mod host;
pub mod native;
pub mod registry;
pub mod sample;
pub mod snapshot;
pub mod spec;

use std::sync::Arc;
use std::time::Duration;

use diorch_core::api::{DIJob, labels};
use diorch_core::key::ObjectKey;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;

pub use checked::Checked;
pub use diorch_policies::{
    Job, JobAllocation, Node, PolicyError, Resources, Taint, TaintEffect, Task,
};
pub use host::{
    CallPaths, ComponentInfo, Contract, ERROR_TEXT_CAP, HOST_COPY_CAP, HostConfig, Limits,
    MAX_COMPONENT_BYTES, MUTATOR_OUTPUT_CAP, PluginHost, RawAllocation, RawPreemption, WasmMutator,
    WasmPolicy, World, default_memory_budget,
};
pub use native::NativePolicy;

pub use diorch_core::allocation::JobPlan;

/// What a mutator is told about the pod it mutates (the WIT `task-context`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskContext {
    /// The WIT `job-key` string is its `namespace/name`.
    pub job_key: ObjectKey,
    pub task_name: String,
    pub task_type: String,
    pub rank: u32,
    pub task_rank: u32,
    pub world_size: u32,
    pub node: Option<String>,
    pub job_labels: Vec<(String, String)>,
    pub job_annotations: Vec<(String, String)>,
    /// The plugin's config string (filled in by the registry from the plugin's spec).
    pub config: String,
}

impl TaskContext {
    /// The context of `pod`, to be created for `job`, from the labels and annotations the
    /// core gave it (rank, task, node).
    pub fn of(job: &DIJob, pod: &Pod) -> TaskContext {
        let label = |k: &str| {
            pod.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(k))
                .cloned()
                .unwrap_or_default()
        };
        let annotation = |k: &str| {
            pod.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(k))
                .cloned()
                .unwrap_or_default()
        };
        let number = |k: &str| annotation(k).parse::<u32>().unwrap_or(0);
        let pairs = |m: &Option<std::collections::BTreeMap<String, String>>| {
            m.iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        TaskContext {
            job_key: ObjectKey::of(&job.metadata),
            task_name: label(labels::TASK_NAME),
            task_type: label(labels::TASK_TYPE),
            rank: number(labels::ANNOTATION_RANK),
            task_rank: number(labels::ANNOTATION_TASK_RANK),
            world_size: number(labels::ANNOTATION_REPLICAS),
            node: Some(annotation(labels::ANNOTATION_NODE)).filter(|n| !n.is_empty()),
            job_labels: pairs(&job.metadata.labels),
            job_annotations: pairs(&job.metadata.annotations),
            config: String::new(),
        }
    }
}

/// A policy's checked answer to `allocate`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyAnswer {
    /// One node name per replica, in rank order.
    pub nodes: Vec<String>,
    /// Why, in the policy's words (contract 0.4.0), already through
    /// [`diorch_core::reason::sanitize`]; `None` from older components or when it said nothing.
    pub reason: Option<String>,
}

impl PolicyAnswer {
    /// `nodes` with the policy's raw `reason`, sanitised here.
    pub fn new(nodes: Vec<String>, reason: Option<&str>) -> PolicyAnswer {
        PolicyAnswer {
            nodes,
            reason: reason.and_then(diorch_core::reason::sanitize),
        }
    }
}

/// A policy's checked answer to `preempt` (contract 0.5.0): room made for a job that did not
/// fit. Indices are into the call's `candidates` (the WIT's job index − 1).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PreemptAnswer {
    /// The job's nodes on the room made: one node name per replica, in rank order.
    pub nodes: Vec<String>,
    /// Candidates shrunk: (candidate index, new replica count per task in spec order).
    pub shrinks: Vec<(usize, Vec<u32>)>,
    /// Candidates evicted whole.
    pub evictions: Vec<usize>,
    /// Why, in the policy's words, already through [`diorch_core::reason::sanitize`].
    pub reason: Option<String>,
}

/// Places jobs. Inputs are shared (`Arc`) so a call can move to a blocking thread without a copy.
pub trait SchedulingPolicy: Send + Sync {
    /// Name and version for logs, e.g. `binpack@3f2a…` or `builtin-binpack`.
    fn describe(&self) -> String;

    /// sha256 (hex) of the Wasm component behind this policy; `None` for a built-in one.
    fn sha256(&self) -> Option<String> {
        None
    }

    /// One node name per replica of `job`, in rank order, checked against `nodes`, and why.
    fn allocate(
        &self,
        job: Arc<Job>,
        nodes: Arc<[Node]>,
    ) -> BoxFuture<'static, Result<PolicyAnswer, PluginError>>;

    /// A new plan for `jobs` (jobs missing from it are not placed); entries may say why.
    fn optimize(
        &self,
        jobs: Arc<[Job]>,
        nodes: Arc<[Node]>,
        previous: Vec<JobPlan>,
    ) -> BoxFuture<'static, Result<Vec<JobPlan>, PluginError>>;

    /// Room for `job` (which did not fit) from `candidates` on `nodes`; `Ok(None)`: no
    /// preemption. `nodes`' free resources count the candidates' usage as used; each
    /// candidate's `job.current` says where its replicas run. Components before 0.5.0 and
    /// anything that cannot preempt answer `Ok(None)` (the default). The answer's shape is
    /// checked (victims among the candidates and allowed, counts within their bounds, the
    /// job's nodes ready and one per replica: [`checks::preemption`]); whether the job fits the
    /// room freed is [`Checked::preempt`]'s. There is no mode: evictions only is
    /// `may_shrink: false` on every candidate.
    fn preempt(
        &self,
        job: Arc<Job>,
        candidates: Arc<[diorch_policies::preempt::Running]>,
        nodes: Arc<[Node]>,
    ) -> BoxFuture<'static, Result<Option<PreemptAnswer>, PluginError>> {
        let _ = (job, candidates, nodes);
        Box::pin(async { Ok(None) })
    }
}

/// Edits a pod the operator is about to create; the result is checked (see [`checks`]).
pub trait PodMutator: Send + Sync {
    fn describe(&self) -> String;

    fn mutate(&self, ctx: TaskContext, pod: Pod) -> BoxFuture<'static, Result<Pod, PluginError>>;
}

/// Why a plugin call or load failed. Every variant names the plugin.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PluginError {
    #[error("plugin {plugin}: not a valid component: {message}")]
    Compile { plugin: String, message: String },
    #[error("plugin {plugin} does not implement world {world}: {message}")]
    WrongWorld {
        plugin: String,
        world: World,
        message: String,
    },
    #[error("plugin {plugin} trapped: {message}")]
    Trap { plugin: String, message: String },
    #[error("plugin {plugin} ran past its deadline of {deadline:?} and was stopped")]
    Timeout { plugin: String, deadline: Duration },
    #[error("plugin {plugin} hit its memory cap of {cap_bytes} bytes and was stopped")]
    MemoryCap { plugin: String, cap_bytes: usize },
    #[error("plugin {plugin} returned a bad result: {message}")]
    MalformedOutput { plugin: String, message: String },
    /// A mutator changed a field its ConfigMap's grants do not allow (see `capabilities`).
    #[error("plugin {plugin} made a change it is not granted: {message}")]
    NotGranted { plugin: String, message: String },
    #[error("plugin {plugin} refused: {error}")]
    Refused { plugin: String, error: PolicyError },
    #[error("plugin {plugin}: host failure: {message}")]
    Host { plugin: String, message: String },
    /// A mutator with failurePolicy Fail that does not serve (its upload was refused, or the
    /// plugin ConfigMaps are not listed yet): the pods it would mutate are not created.
    #[error("plugin {plugin} is not loaded and has failurePolicy Fail: {message}")]
    NotLoaded { plugin: String, message: String },
    /// Refused at load by a host bound: component size, compile time, memory budget.
    #[error("plugin {plugin} refused at load: {message}")]
    LoadLimit { plugin: String, message: String },
    /// Its component could not be had: not decoded, pulled, or verified (see `fetch`).
    #[error("plugin {plugin}: component refused: {message}")]
    Source {
        plugin: String,
        /// `PullFailed`, `DigestMismatch`, `SignatureRefused`, … (see `crate::oci::OciError`).
        reason: &'static str,
        message: String,
    },
}

impl PluginError {
    /// A short machine-readable reason, for Events and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            PluginError::Compile { .. } => "CompileError",
            PluginError::WrongWorld { .. } => "WrongWorld",
            PluginError::Trap { .. } => "Trap",
            PluginError::Timeout { .. } => "Timeout",
            PluginError::MemoryCap { .. } => "MemoryCap",
            PluginError::MalformedOutput { .. } => "MalformedOutput",
            PluginError::NotGranted { .. } => "NotGranted",
            PluginError::Refused { .. } => "Refused",
            PluginError::Host { .. } => "HostError",
            PluginError::LoadLimit { .. } => "LoadLimit",
            PluginError::NotLoaded { .. } => "NotLoaded",
            PluginError::Source { reason, .. } => reason,
        }
    }
}
