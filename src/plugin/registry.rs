//! The plugin registry: which plugin serves which name, swapped atomically. A new upload is
//! compiled, checked against its world and smoke-called on a sample before it replaces the old
//! version; calls in flight keep the version they started with (they hold its `Arc`); a failed
//! upload leaves the last good version in place and is recorded in the plugin's status.
//!
//! Owns: the loaded set, per-plugin status, mutator ordering and failure policies, the native
//! fallback choice. Must not touch: how ConfigMaps are fetched (the watcher feeds `apply`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use k8s_openapi::api::core::v1::Pod;

use super::spec::{FailurePolicy, PluginKind, PluginSpec};
use super::{
    NativePolicy, PluginError, PluginHost, PodMutator, PolicyError, SchedulingPolicy, TaskContext,
    WasmMutator, WasmPolicy, sample,
};

#[derive(Clone)]
struct MutatorEntry {
    spec: Arc<PluginSpec>,
    plugin: WasmMutator,
}

#[derive(Default, Clone)]
struct Loaded {
    policies: BTreeMap<String, WasmPolicy>,
    /// Sorted by (order, name).
    mutators: Vec<MutatorEntry>,
}

/// What `kubectl`/metrics/status endpoints show about one plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginStatus {
    pub name: String,
    pub kind: PluginKind,
    /// sha256 of the version serving now (`None` if no upload ever succeeded).
    pub sha256: Option<String>,
    pub source: String,
    /// The last upload was loaded.
    pub healthy: bool,
    pub last_error: Option<String>,
    pub loads: u64,
    pub failed_loads: u64,
}

pub struct PluginRegistry {
    host: PluginHost,
    loaded: ArcSwap<Loaded>,
    status: Mutex<BTreeMap<String, PluginStatus>>,
    /// Serialises uploads so two swaps of one name cannot interleave their read-modify-write.
    writer: tokio::sync::Mutex<()>,
    fallback: NativePolicy,
}

impl PluginRegistry {
    pub fn new(host: PluginHost, fallback: NativePolicy) -> PluginRegistry {
        PluginRegistry {
            host,
            loaded: ArcSwap::from_pointee(Loaded::default()),
            status: Mutex::new(BTreeMap::new()),
            writer: tokio::sync::Mutex::new(()),
            fallback,
        }
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
        let _writer = self.writer.lock().await;
        let limits = Some(spec.limits(self.host.config().limits));
        let spec = Arc::new(spec);
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
        let outcome = match outcome {
            Ok((sha, plugin)) => smoke(&spec, &plugin).await.map(|()| (sha, plugin)),
            Err(e) => Err(e),
        };
        let mut status = self.lock_status();
        let entry = status
            .entry(spec.name.clone())
            .or_insert_with(|| PluginStatus {
                name: spec.name.clone(),
                kind: spec.kind,
                sha256: None,
                source: spec.source.clone(),
                healthy: false,
                last_error: None,
                loads: 0,
                failed_loads: 0,
            });
        match outcome {
            Ok((sha, plugin)) => {
                let mut next = Loaded::clone(&self.loaded.load());
                next.policies.remove(&spec.name);
                next.mutators.retain(|m| m.spec.name != spec.name);
                match plugin {
                    Either::Policy(plugin) => {
                        next.policies.insert(spec.name.clone(), plugin);
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
                *entry = PluginStatus {
                    name: spec.name.clone(),
                    kind: spec.kind,
                    sha256: Some(sha.clone()),
                    source: spec.source.clone(),
                    healthy: true,
                    last_error: None,
                    loads: entry.loads + 1,
                    failed_loads: entry.failed_loads,
                };
                tracing::info!(plugin = %spec.name, kind = %spec.kind, sha256 = %sha, "plugin loaded");
                Ok(sha)
            }
            Err(e) => {
                entry.healthy = false;
                entry.last_error = Some(e.to_string());
                entry.failed_loads += 1;
                tracing::warn!(plugin = %spec.name, reason = e.reason(), error = %e,
                    serving = ?entry.sha256, "plugin upload refused; the last good version stays");
                Err(e)
            }
        }
    }

    /// Unloads `name` (its ConfigMap was deleted); calls in flight finish.
    pub async fn remove(&self, name: &str) -> bool {
        let _writer = self.writer.lock().await;
        let mut next = Loaded::clone(&self.loaded.load());
        let before = next.policies.len() + next.mutators.len();
        next.policies.remove(name);
        next.mutators.retain(|m| m.spec.name != name);
        let removed = before != next.policies.len() + next.mutators.len();
        self.loaded.store(Arc::new(next));
        self.lock_status().remove(name);
        removed
    }

    /// The Wasm policy `name`, if loaded.
    pub fn wasm_policy(&self, name: &str) -> Option<WasmPolicy> {
        self.loaded.load().policies.get(name).cloned()
    }

    /// The policy to use: `name` if loaded, else the built-in native one.
    pub fn policy(&self, name: Option<&str>) -> Arc<dyn SchedulingPolicy> {
        match name.and_then(|n| self.wasm_policy(n)) {
            Some(p) => Arc::new(p),
            None => Arc::new(self.fallback),
        }
    }

    pub fn fallback(&self) -> NativePolicy {
        self.fallback
    }

    /// Runs the mutators that apply to `ctx.task_type`, in order. A failing mutator with
    /// failurePolicy Ignore is skipped (logged); with Fail its error is returned.
    pub async fn mutate_pod(&self, ctx: &TaskContext, pod: Pod) -> Result<Pod, PluginError> {
        let mutators: Vec<MutatorEntry> = self
            .loaded
            .load()
            .mutators
            .iter()
            .filter(|m| m.spec.applies_to(&ctx.task_type))
            .cloned()
            .collect();
        let mut pod = pod;
        for m in mutators {
            let mut call_ctx = ctx.clone();
            call_ctx.config = m.spec.config.clone();
            match m.plugin.mutate(call_ctx, pod.clone()).await {
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
        self.lock_status().values().cloned().collect()
    }
}

enum Either {
    Policy(WasmPolicy),
    Mutator(WasmMutator),
}

/// The smoke call before a swap: a policy must answer the sample (a refusal to place is an
/// answer); a mutator must mutate the sample pod of a task type it applies to, with its config.
async fn smoke(spec: &PluginSpec, plugin: &Either) -> Result<(), PluginError> {
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
            m.mutate(ctx, pod).await.map(|_| ())
        }
    }
}
