//! The plugin registry: which plugin serves which name, swapped atomically. A new upload is
//! compiled, checked against its world and smoke-called on a sample before it replaces the old
//! version; calls in flight keep the version they started with (they hold its `Arc`); a failed
//! upload leaves the last good version in place and is recorded in the plugin's status.
//!
//! With metrics attached ([`PluginRegistry::with_metrics`]) it records every load attempt, every
//! Wasm call it serves (policies handed out by [`PluginRegistry::policy`] are wrapped, mutators
//! are timed in [`PluginRegistry::mutate_pod`]; the built-in native policy is not a plugin and is
//! not counted) and one `diorch_plugin_info` series per known plugin.
//!
//! Fail closed: a mutator with failurePolicy Fail whose upload was refused while no version of
//! it serves (or whose ConfigMap is invalid, see [`PluginRegistry::fail_closed`]) blocks the pods
//! of the task types it applies to: [`PluginRegistry::mutate_pod`] refuses them, naming it. A
//! registry built [`PluginRegistry::awaiting_first_load`] (the operator's) also refuses to mutate
//! until the watcher has loaded every plugin ConfigMap of its first list, waiting up to
//! [`FIRST_LOAD_WAIT`]: after a restart a Fail mutator is never skipped for not being loaded yet.
//! An upload whose memory cap times the host's concurrent calls passes the host's memory budget
//! is refused (`LoadLimit`).
//!
//! Owns: the loaded set, per-plugin status, mutator ordering and failure policies, the native
//! fallback choice, the plugin metrics' values. Must not touch: how ConfigMaps are fetched (the
//! watcher feeds `apply`) and how status is served (see `status`).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use futures::FutureExt as _;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;

use super::capabilities::{self, Grants};
use super::spec::{FailurePolicy, PluginKind, PluginSpec, Rollout};
use super::{
    Job, JobPlan, NativePolicy, Node, PluginError, PluginHost, PodMutator, PolicyError,
    SchedulingPolicy, TaskContext, WasmMutator, WasmPolicy, sample,
};
use crate::metrics::{Metrics, PluginCall, PluginInfoLabels};

#[derive(Clone)]
struct MutatorEntry {
    spec: Arc<PluginSpec>,
    plugin: WasmMutator,
}

/// A mutator with failurePolicy Fail and no version serving: its pods are refused.
#[derive(Clone, Debug)]
struct Blocker {
    name: String,
    /// Empty = all.
    task_types: Vec<String>,
    cause: String,
}

impl Blocker {
    fn applies_to(&self, task_type: &str) -> bool {
        self.task_types.is_empty() || self.task_types.iter().any(|t| t == task_type)
    }
}

#[derive(Default, Clone)]
struct Loaded {
    policies: BTreeMap<String, WasmPolicy>,
    /// Loaded policies that shadow, or are promoted over, another ([`Rollout`]), by name.
    rollouts: BTreeMap<String, Rollout>,
    /// Sorted by (order, name).
    mutators: Vec<MutatorEntry>,
    /// By plugin name.
    blockers: BTreeMap<String, Blocker>,
}

/// Longest wait of a pod mutation for the watcher's first load (see the module doc); past it
/// the pod is refused and its reconcile retried.
pub const FIRST_LOAD_WAIT: Duration = Duration::from_secs(10);

/// What `kubectl`/metrics/status endpoints show about one plugin. Serialized in camelCase for
/// `GET /plugins` (see `status`).
///
/// The spec fields (`source` to `memory_mib`) describe the version serving now; while no version
/// serves they describe the last upload attempted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginStatus {
    pub name: String,
    pub kind: PluginKind,
    /// sha256 of the version serving now (`None` if no upload ever succeeded).
    pub sha256: Option<String>,
    /// The last upload was loaded.
    pub healthy: bool,
    pub last_error: Option<String>,
    /// Uploads loaded and refused since the plugin appeared.
    pub loads: u64,
    pub failed_loads: u64,
    /// `namespace/name` of the ConfigMap (empty when not from one).
    pub source: String,
    /// Mutators: the task types they apply to (empty = all).
    pub task_types: Vec<String>,
    /// Mutators: lower runs first.
    pub order: i32,
    pub failure_policy: FailurePolicy,
    /// Mutators: the capabilities granted beyond the default set.
    pub grants: Grants,
    /// The effective per-call limits (the spec's overrides, else the host's defaults).
    pub deadline_ms: u64,
    #[serde(rename = "memoryMiB")]
    pub memory_mib: u64,
    /// Policies: how the serving version's `allocate` calls were served so far. Calls that keep
    /// landing on the blocking pool mean the plugin is slow or touches WASI (see `WasmPolicy`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocate_calls: Option<super::CallPaths>,
    /// The contract version the serving component was built against (`0.2.0` components are
    /// called in that version's input layout; rebuilding with the SDK moves them to the current
    /// one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contract: Option<super::Contract>,
    /// Where the serving version came from: the OCI reference pinned to the manifest digest it
    /// resolved to (`None`: inline in its ConfigMap).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The fingerprint of the trusted key whose signature of the serving version was verified.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signed_by: Option<String>,
    /// Policies: a shadow of, or promoted over, another policy (absent: serves as itself).
    #[serde(skip_serializing_if = "is_own")]
    pub rollout: Rollout,
    /// What is wrong with the rollout now, e.g. a shadow of a policy that is not loaded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout_warning: Option<String>,
}

fn is_own(rollout: &Rollout) -> bool {
    *rollout == Rollout::Own
}

/// Where an upload came from (see [`PluginStatus::image`] and [`PluginStatus::signed_by`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    pub image: Option<String>,
    pub signed_by: Option<String>,
}

impl PluginStatus {
    fn new(spec: &PluginSpec, defaults: super::Limits) -> PluginStatus {
        let mut status = PluginStatus {
            name: spec.name.clone(),
            kind: spec.kind,
            sha256: None,
            healthy: false,
            last_error: None,
            loads: 0,
            failed_loads: 0,
            source: String::new(),
            task_types: vec![],
            order: 0,
            failure_policy: FailurePolicy::default(),
            grants: Grants::NONE,
            deadline_ms: 0,
            memory_mib: 0,
            allocate_calls: None,
            contract: None,
            image: None,
            signed_by: None,
            rollout: Rollout::Own,
            rollout_warning: None,
        };
        status.describe(spec, defaults);
        status
    }

    /// Copies the spec's fields (the kind too: a ConfigMap may change it between uploads).
    fn describe(&mut self, spec: &PluginSpec, defaults: super::Limits) {
        let limits = spec.limits(defaults);
        self.kind = spec.kind;
        self.source = spec.source.clone();
        self.task_types = spec.task_types.clone();
        self.order = spec.order;
        self.failure_policy = spec.failure_policy;
        self.grants = spec.grants;
        self.rollout = spec.rollout.clone();
        self.deadline_ms = u64::try_from(limits.deadline.as_millis()).unwrap_or(u64::MAX);
        self.memory_mib = (limits.memory_bytes >> 20) as u64;
    }

    fn info_labels(&self) -> PluginInfoLabels {
        PluginInfoLabels {
            plugin: self.name.clone(),
            kind: match self.kind {
                PluginKind::Policy => "policy",
                PluginKind::Mutator => "mutator",
            },
            sha256: self.sha256.clone().unwrap_or_default(),
            healthy: if self.healthy { "true" } else { "false" },
            image: self.image.clone().unwrap_or_default(),
        }
    }
}

pub struct PluginRegistry {
    host: PluginHost,
    loaded: ArcSwap<Loaded>,
    status: Mutex<BTreeMap<String, PluginStatus>>,
    /// Serialises uploads so two swaps of one name cannot interleave their read-modify-write.
    writer: tokio::sync::Mutex<()>,
    fallback: NativePolicy,
    metrics: Option<Arc<Metrics>>,
    /// Whether the plugin ConfigMaps of the first list were all applied (see the module doc).
    first_load: tokio::sync::watch::Sender<bool>,
}

impl PluginRegistry {
    /// A registry that serves at once (no first load to wait for).
    pub fn new(host: PluginHost, fallback: NativePolicy) -> PluginRegistry {
        PluginRegistry {
            host,
            loaded: ArcSwap::from_pointee(Loaded::default()),
            status: Mutex::new(BTreeMap::new()),
            writer: tokio::sync::Mutex::new(()),
            fallback,
            metrics: None,
            first_load: tokio::sync::watch::Sender::new(true),
        }
    }

    /// Pod mutations wait (up to [`FIRST_LOAD_WAIT`]) until [`Self::first_load_done`]: for a
    /// registry fed by the ConfigMap watcher.
    pub fn awaiting_first_load(self) -> PluginRegistry {
        self.first_load.send_replace(false);
        self
    }

    /// Every plugin ConfigMap of the watcher's first list was applied (loaded or refused).
    pub fn first_load_done(&self) {
        if !self.first_load.send_replace(true) {
            tracing::info!("plugin ConfigMaps loaded; pod mutations proceed");
        }
    }

    async fn wait_for_first_load(&self) -> Result<(), PluginError> {
        let mut done = self.first_load.subscribe();
        match tokio::time::timeout(FIRST_LOAD_WAIT, done.wait_for(|&d| d)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(PluginError::NotLoaded {
                plugin: "*".to_string(),
                message: format!(
                    "the plugin ConfigMaps were not loaded within {FIRST_LOAD_WAIT:?} of this \
                     pod's creation; a mutator with failurePolicy Fail may apply, so the pod \
                     waits"
                ),
            }),
        }
    }

    /// Marks `name`, a mutator with failurePolicy Fail whose ConfigMap cannot be loaded (e.g.
    /// invalid), as blocking the pods of `task_types` (empty = all), unless a version of it
    /// serves (the last good version keeps serving, as for refused uploads).
    pub async fn fail_closed(&self, name: &str, task_types: Vec<String>, cause: &str) {
        let _writer = self.writer.lock().await;
        let mut next = Loaded::clone(&self.loaded.load());
        if next.mutators.iter().any(|m| m.spec.name == name) {
            return;
        }
        tracing::warn!(
            plugin = name,
            ?task_types,
            cause,
            "mutator with failurePolicy Fail does not load: the pods it applies to are refused"
        );
        next.blockers.insert(
            name.to_string(),
            Blocker {
                name: name.to_string(),
                task_types,
                cause: cause.to_string(),
            },
        );
        self.loaded.store(Arc::new(next));
    }

    /// Undoes [`Self::fail_closed`] (the ConfigMap was fixed or deleted).
    pub async fn unblock(&self, name: &str) {
        let _writer = self.writer.lock().await;
        let mut next = Loaded::clone(&self.loaded.load());
        if next.blockers.remove(name).is_some() {
            self.loaded.store(Arc::new(next));
        }
    }

    /// Refuses a memory cap the host cannot give at its concurrency (see `HostConfig`).
    fn check_budget(&self, spec: &PluginSpec) -> Result<(), PluginError> {
        let config = self.host.config();
        let limits = spec.limits(config.limits);
        let calls = config.max_concurrent_calls.max(1);
        let per_call = limits.memory_bytes.saturating_add(super::HOST_COPY_CAP);
        let need = per_call.saturating_mul(calls);
        if need <= config.memory_budget {
            return Ok(());
        }
        Err(PluginError::LoadLimit {
            plugin: spec.name.clone(),
            message: format!(
                "memoryMiB {} plus {} MiB of host-side copies, times {calls} concurrent plugin \
                 calls, is {} MiB: more than the plugin memory budget of {} MiB; lower \
                 memoryMiB or raise the operator's --plugin-memory-budget-mib",
                limits.memory_bytes >> 20,
                super::HOST_COPY_CAP >> 20,
                need >> 20,
                config.memory_budget >> 20
            ),
        })
    }

    /// Records loads, Wasm calls and plugin info into `metrics` (see the module doc). Call before
    /// the first `apply`: a plugin loaded earlier has no info series until its next upload.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> PluginRegistry {
        self.metrics = Some(metrics);
        self
    }

    pub fn host(&self) -> &PluginHost {
        &self.host
    }

    fn lock_status(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, PluginStatus>> {
        self.status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Loads `bytes` for `spec` and swaps it in; on error the previous version keeps serving.
    /// Returns the new version's sha256.
    pub async fn apply(&self, spec: PluginSpec, bytes: Arc<[u8]>) -> Result<String, PluginError> {
        self.apply_from(spec, bytes, Origin::default()).await
    }

    /// [`Self::apply`] for a component from `origin`. The compile and smoke call run before the
    /// swap lock is taken, so a slow compile holds up no other plugin's swap or removal.
    pub async fn apply_from(
        &self,
        spec: PluginSpec,
        bytes: Arc<[u8]>,
        origin: Origin,
    ) -> Result<String, PluginError> {
        let limits = Some(spec.limits(self.host.config().limits));
        let spec = Arc::new(spec);
        let outcome = match self.check_budget(&spec) {
            Err(e) => Err(e),
            Ok(()) => self.load(&spec, bytes, limits).await,
        };
        let _writer = self.writer.lock().await;
        self.record(spec, outcome, origin)
    }

    /// Records an upload refused before it reached the host (its component could not be
    /// fetched, decoded or verified): the last good version keeps serving.
    pub async fn refuse(&self, spec: PluginSpec, error: PluginError) -> PluginError {
        let _writer = self.writer.lock().await;
        match self.record(Arc::new(spec), Err(error), Origin::default()) {
            Err(e) => e,
            Ok(_) => unreachable_refusal(),
        }
    }

    async fn load(
        &self,
        spec: &Arc<PluginSpec>,
        bytes: Arc<[u8]>,
        limits: Option<super::Limits>,
    ) -> Result<(String, Either), PluginError> {
        let outcome = match spec.kind {
            PluginKind::Policy => self
                .host
                .load_policy(&spec.name, bytes, limits)
                .await
                .map(|plugin| (plugin.sha256().to_string(), Either::Policy(plugin))),
            PluginKind::Mutator => self
                .host
                .load_mutator(&spec.name, bytes, limits)
                .await
                .map(|plugin| (plugin.sha256().to_string(), Either::Mutator(plugin))),
        };
        match outcome {
            Ok((sha, plugin)) => smoke(spec, &plugin).await.map(|()| (sha, plugin)),
            Err(e) => Err(e),
        }
    }

    /// Swaps in a loaded upload, or records its refusal (see `apply`).
    fn record(
        &self,
        spec: Arc<PluginSpec>,
        outcome: Result<(String, Either), PluginError>,
        origin: Origin,
    ) -> Result<String, PluginError> {
        if let Some(m) = &self.metrics {
            m.plugin
                .observe_load(&spec.name, outcome.as_ref().err().map(PluginError::reason));
        }
        let defaults = self.host.config().limits;
        let mut status = self.lock_status();
        let entry = status
            .entry(spec.name.clone())
            .or_insert_with(|| PluginStatus::new(&spec, defaults));
        // The info series to replace; `None` for a plugin seen for the first time.
        let old_info = (entry.loads + entry.failed_loads > 0).then(|| entry.info_labels());
        let result = match outcome {
            Ok((sha, plugin)) => {
                let mut next = Loaded::clone(&self.loaded.load());
                next.policies.remove(&spec.name);
                next.rollouts.remove(&spec.name);
                next.mutators.retain(|m| m.spec.name != spec.name);
                next.blockers.remove(&spec.name);
                entry.contract = Some(match &plugin {
                    Either::Policy(p) => p.contract(),
                    Either::Mutator(m) => m.contract(),
                });
                match plugin {
                    Either::Policy(plugin) => {
                        next.policies.insert(spec.name.clone(), plugin);
                        if spec.rollout != Rollout::Own {
                            next.rollouts
                                .insert(spec.name.clone(), spec.rollout.clone());
                        }
                    }
                    Either::Mutator(plugin) => {
                        next.mutators.push(MutatorEntry {
                            spec: spec.clone(),
                            plugin,
                        });
                        next.mutators.sort_by(|a, b| {
                            (a.spec.order, &a.spec.name).cmp(&(b.spec.order, &b.spec.name))
                        });
                    }
                }
                self.loaded.store(Arc::new(next));
                entry.describe(&spec, defaults);
                entry.sha256 = Some(sha.clone());
                entry.image = origin.image;
                entry.signed_by = origin.signed_by;
                entry.healthy = true;
                entry.last_error = None;
                entry.loads += 1;
                tracing::info!(plugin = %spec.name, kind = %spec.kind, sha256 = %sha, "plugin loaded");
                Ok(sha)
            }
            Err(e) => {
                if entry.sha256.is_none() {
                    // Nothing serves: show what was attempted.
                    entry.describe(&spec, defaults);
                }
                entry.healthy = false;
                entry.last_error = Some(e.to_string());
                entry.failed_loads += 1;
                let serving = self
                    .loaded
                    .load()
                    .mutators
                    .iter()
                    .any(|m| m.spec.name == spec.name);
                if spec.kind == PluginKind::Mutator
                    && spec.failure_policy == FailurePolicy::Fail
                    && !serving
                {
                    // Fail closed: nothing serves, so the pods it applies to must not be
                    // created unmutated.
                    let mut next = Loaded::clone(&self.loaded.load());
                    next.blockers.insert(
                        spec.name.clone(),
                        Blocker {
                            name: spec.name.clone(),
                            task_types: spec.task_types.clone(),
                            cause: e.to_string(),
                        },
                    );
                    self.loaded.store(Arc::new(next));
                }
                tracing::warn!(plugin = %spec.name, reason = e.reason(), error = %e,
                    serving = ?entry.sha256, "plugin upload refused; the last good version stays");
                Err(e)
            }
        };
        if let Some(m) = &self.metrics {
            // Under the status lock, so the series follows the status exactly.
            m.plugin
                .replace_info(old_info.as_ref(), Some(&entry.info_labels()));
        }
        result
    }

    /// Unloads `name` (its ConfigMap was deleted); calls in flight finish.
    pub async fn remove(&self, name: &str) -> bool {
        let _writer = self.writer.lock().await;
        let mut next = Loaded::clone(&self.loaded.load());
        let before = next.policies.len() + next.mutators.len();
        next.policies.remove(name);
        next.rollouts.remove(name);
        next.mutators.retain(|m| m.spec.name != name);
        let unblocked = next.blockers.remove(name).is_some();
        let removed = unblocked || before != next.policies.len() + next.mutators.len();
        self.loaded.store(Arc::new(next));
        let gone = self.lock_status().remove(name);
        if let (Some(m), Some(gone)) = (&self.metrics, gone) {
            m.plugin.replace_info(Some(&gone.info_labels()), None);
        }
        removed
    }

    /// The Wasm policy `name`, if loaded. Its calls are not recorded in the metrics: callers that
    /// schedule use [`Self::policy`].
    pub fn wasm_policy(&self, name: &str) -> Option<WasmPolicy> {
        self.loaded.load().policies.get(name).cloned()
    }

    /// The Wasm policy that answers calls for `name`: a loaded policy promoted over it
    /// ([`Rollout::Replaces`]; the first by name if several are), else `name` itself unless it
    /// is a shadow (a shadow never serves, not even under its own name).
    pub fn serving(&self, name: &str) -> Option<WasmPolicy> {
        let loaded = self.loaded.load();
        let promoted = loaded
            .rollouts
            .iter()
            .find(|(_, r)| r.replaces() == Some(name))
            .map(|(by, _)| by.as_str());
        match promoted {
            Some(by) => loaded.policies.get(by).cloned(),
            None if loaded
                .rollouts
                .get(name)
                .is_some_and(|r| r.shadows().is_some()) =>
            {
                None
            }
            None => loaded.policies.get(name).cloned(),
        }
    }

    /// The loaded shadows of `name` (in name order), each wrapped like [`Self::policy`].
    pub fn shadows(&self, name: &str) -> Vec<Arc<dyn SchedulingPolicy>> {
        let loaded = self.loaded.load();
        loaded
            .rollouts
            .iter()
            .filter(|(_, r)| r.shadows() == Some(name))
            .filter_map(|(shadow, _)| loaded.policies.get(shadow).cloned())
            .map(|p| self.metered_policy(p))
            .collect()
    }

    /// The policy to use: the one [`Self::serving`] `name` if any, else the built-in native
    /// one. With metrics, the Wasm policy's calls are counted and timed.
    pub fn policy(&self, name: Option<&str>) -> Arc<dyn SchedulingPolicy> {
        match name.and_then(|n| self.serving(n)) {
            Some(p) => self.metered_policy(p),
            None => Arc::new(self.fallback),
        }
    }

    fn metered_policy(&self, policy: WasmPolicy) -> Arc<dyn SchedulingPolicy> {
        match &self.metrics {
            Some(metrics) => Arc::new(MeteredPolicy {
                inner: policy,
                metrics: metrics.clone(),
            }),
            None => Arc::new(policy),
        }
    }

    pub fn fallback(&self) -> NativePolicy {
        self.fallback
    }

    /// Runs the mutators that apply to `ctx.task_type`, in order. A failing mutator with
    /// failurePolicy Ignore is skipped (logged); with Fail its error is returned. A Fail
    /// mutator that does not load refuses the pod (see the module doc).
    pub async fn mutate_pod(&self, ctx: &TaskContext, pod: Pod) -> Result<Pod, PluginError> {
        self.wait_for_first_load().await?;
        let loaded = self.loaded.load();
        if let Some(b) = loaded
            .blockers
            .values()
            .find(|b| b.applies_to(&ctx.task_type))
        {
            return Err(PluginError::NotLoaded {
                plugin: b.name.clone(),
                message: format!(
                    "pods of task type {:?} are not created until it loads; {}",
                    ctx.task_type, b.cause
                ),
            });
        }
        let mutators: Vec<MutatorEntry> = loaded
            .mutators
            .iter()
            .filter(|m| m.spec.applies_to(&ctx.task_type))
            .cloned()
            .collect();
        let mut pod = pod;
        for m in mutators {
            let mut call_ctx = ctx.clone();
            call_ctx.config = m.spec.config.clone();
            // Refused unless the change stays within the mutator's capabilities and grants.
            let call = capabilities::enforce(
                &m.spec.name,
                m.spec.grants,
                pod.clone(),
                m.plugin.mutate(call_ctx, pod.clone()),
            );
            match metered(self.metrics.clone(), &m.spec.name, PluginCall::Mutate, call).await {
                Ok(next) => pod = next,
                Err(e) if m.spec.failure_policy == FailurePolicy::Ignore => {
                    tracing::warn!(plugin = %m.spec.name, reason = e.reason(), error = %e,
                        "mutator failed; failurePolicy Ignore: pod kept as it was");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(pod)
    }

    /// Every plugin ever applied and not removed, by name.
    pub fn status(&self) -> Vec<PluginStatus> {
        let list: Vec<PluginStatus> = self.lock_status().values().cloned().collect();
        list.into_iter().map(|s| self.with_calls(s)).collect()
    }

    /// The status of one plugin, if it was ever applied and not removed.
    pub fn status_of(&self, name: &str) -> Option<PluginStatus> {
        let status = self.lock_status().get(name).cloned();
        status.map(|s| self.with_calls(s))
    }

    fn with_calls(&self, mut status: PluginStatus) -> PluginStatus {
        status.allocate_calls = self.wasm_policy(&status.name).map(|p| p.call_paths());
        status.rollout_warning = self.rollout_warning(&status);
        status
    }

    /// A shadow of a policy nobody serves gets no input; of two policies promoted over the
    /// same one, only the first by name answers.
    fn rollout_warning(&self, status: &PluginStatus) -> Option<String> {
        match &status.rollout {
            Rollout::Own => None,
            Rollout::ShadowOf(of) => self.serving(of).is_none().then(|| {
                format!("shadow of policy {of}, which is not loaded: it is given no input")
            }),
            Rollout::Replaces(of) => {
                let answering = self.serving(of);
                let answering = answering.as_ref().map(WasmPolicy::name);
                (status.sha256.is_some() && answering != Some(status.name.as_str())).then(|| {
                    format!(
                        "promoted over policy {of}, but {} answers for it (the first promoted by name)",
                        answering.unwrap_or("nobody")
                    )
                })
            }
        }
    }
}

/// Counts and times `call` (the caller's view: waiting for a call slot included).
fn metered<T: Send + 'static>(
    metrics: Option<Arc<Metrics>>,
    plugin: &str,
    call: PluginCall,
    fut: impl Future<Output = Result<T, PluginError>> + Send + 'static,
) -> BoxFuture<'static, Result<T, PluginError>> {
    let Some(metrics) = metrics else {
        return fut.boxed();
    };
    let plugin = plugin.to_string();
    async move {
        let started = Instant::now();
        let result = fut.await;
        metrics.plugin.observe_call(
            &plugin,
            call,
            result.as_ref().err().map(PluginError::reason),
            started.elapsed().as_secs_f64(),
        );
        result
    }
    .boxed()
}

/// A Wasm policy whose calls are recorded; otherwise the policy itself.
struct MeteredPolicy {
    inner: WasmPolicy,
    metrics: Arc<Metrics>,
}

impl SchedulingPolicy for MeteredPolicy {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn sha256(&self) -> Option<String> {
        Some(self.inner.sha256().to_string())
    }

    fn allocate(
        &self,
        job: Arc<Job>,
        nodes: Arc<[Node]>,
    ) -> BoxFuture<'static, Result<super::PolicyAnswer, PluginError>> {
        metered(
            Some(self.metrics.clone()),
            self.inner.name(),
            PluginCall::Allocate,
            self.inner.allocate(job, nodes),
        )
    }

    fn optimize(
        &self,
        jobs: Arc<[Job]>,
        nodes: Arc<[Node]>,
        previous: Vec<JobPlan>,
    ) -> BoxFuture<'static, Result<Vec<JobPlan>, PluginError>> {
        metered(
            Some(self.metrics.clone()),
            self.inner.name(),
            PluginCall::Optimize,
            self.inner.optimize(jobs, nodes, previous),
        )
    }
}

enum Either {
    Policy(WasmPolicy),
    Mutator(WasmMutator),
}

/// `record` of an `Err` outcome returns it: this is never reached.
#[cold]
fn unreachable_refusal() -> PluginError {
    PluginError::Host {
        plugin: "-".into(),
        message: "a refusal was recorded as a load".into(),
    }
}

/// The smoke call before a swap: a policy must answer the sample (a refusal to place is an
/// answer); a mutator must mutate the sample pod of a task type it applies to, with its config.
async fn smoke(spec: &PluginSpec, plugin: &Either) -> Result<(), PluginError> {
    // A fresh component's first call pays one-time costs (its memory slot faulted in, lazy
    // initialisation in the guest) that a busy machine can stretch past a short deadline: a
    // timeout is tried once more before the upload is refused, so only a plugin that is too slow
    // every time is (the e2e suite saw a good mutator refused this way under load).
    match smoke_once(spec, plugin).await {
        Err(PluginError::Timeout { .. }) => smoke_once(spec, plugin).await,
        answer => answer,
    }
}

async fn smoke_once(spec: &PluginSpec, plugin: &Either) -> Result<(), PluginError> {
    match plugin {
        Either::Policy(p) => {
            let (job, nodes) = sample::allocate_input(20, 2);
            match p.allocate(Arc::new(job), nodes.into()).await {
                Ok(_)
                | Err(PluginError::Refused {
                    error: PolicyError::NoFit(_),
                    ..
                }) => Ok(()),
                Err(e) => Err(e),
            }
        }
        Either::Mutator(m) => {
            let task_type = spec.task_types.first().map_or("learner", String::as_str);
            let (mut ctx, pod) = sample::pod(task_type);
            ctx.config = spec.config.clone();
            // A mutator that wants more than its ConfigMap grants is refused before it serves.
            let call = m.mutate(ctx, pod.clone());
            capabilities::enforce(&spec.name, spec.grants, pod, call)
                .await
                .map(|_| ())
        }
    }
}
/// The controller's port for pod mutation: the mutators that apply to the pod's task type.
impl diorch_core::mutation::PodMutation for PluginRegistry {
    fn mutate<'a>(
        &'a self,
        job: &'a diorch_core::api::DIJob,
        pod: Pod,
    ) -> BoxFuture<'a, Result<Pod, diorch_core::mutation::MutationRefused>> {
        Box::pin(async move {
            let ctx = TaskContext::of(job, &pod);
            self.mutate_pod(&ctx, pod)
                .await
                .map_err(|e| diorch_core::mutation::MutationRefused(e.to_string()))
        })
    }
}
