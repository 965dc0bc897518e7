//! Calls into loaded components: the policy's `allocate`, `optimize` and `preempt` and the
//! mutator's `mutate`, per contract version, each in a fresh bounded Store, their errors classified and
//! their answers checked.
//!
//! Owns: [`WasmPolicy`] and [`WasmMutator`] and the per-contract call glue. Must not touch:
//! compiling or loading (the parent's).

use super::*;

/// A loaded scheduling-policy component. Cheap to clone.
#[derive(Clone)]
pub struct WasmPolicy {
    pub(super) inner: Arc<LoadedPolicy>,
}

pub(super) struct LoadedPolicy {
    pub(super) core: LoadedCore,
    pub(super) pre: PolicyPre,
    /// For inline attempts (WASI stubbed out); `None` when it could not be built.
    pub(super) inline_pre: Option<PolicyPre>,
    /// Whether `allocate` is tried inline first (see its doc); cleared by an attempt that ran
    /// out of budget, set again by a fast call on the blocking pool.
    pub(super) inline_ok: AtomicBool,
    /// `allocate` calls answered inline, and calls run on the blocking pool ([`CallPaths`]).
    pub(super) inline_answers: AtomicU64,
    pub(super) pooled_runs: AtomicU64,
}

/// A policy's typed pre-instance, in the contract version it was built against.
pub(super) enum PolicyPre {
    V5(bindings::v5::policy::SchedulingPolicyPre<HostState>),
    V4(bindings::v4::policy::SchedulingPolicyPre<HostState>),
    V3(bindings::v3::policy::SchedulingPolicyPre<HostState>),
    V2(bindings::v2::policy::SchedulingPolicyPre<HostState>),
}

/// An `allocate` answer as the component gave it: node indices, unchecked, and its reason
/// (raw: sanitised only once the answer is checked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawAllocation {
    pub nodes: Vec<u32>,
    pub reason: Option<String>,
}

impl PolicyPre {
    pub(super) fn new(
        contract: Contract,
        pre: wasmtime::component::InstancePre<HostState>,
    ) -> wasmtime::Result<PolicyPre> {
        Ok(match contract {
            Contract::V5 => PolicyPre::V5(bindings::v5::policy::SchedulingPolicyPre::new(pre)?),
            Contract::V4 => PolicyPre::V4(bindings::v4::policy::SchedulingPolicyPre::new(pre)?),
            Contract::V3 => PolicyPre::V3(bindings::v3::policy::SchedulingPolicyPre::new(pre)?),
            Contract::V2 => PolicyPre::V2(bindings::v2::policy::SchedulingPolicyPre::new(pre)?),
        })
    }

    /// The input of a call for `jobs` on `nodes`, in this version's layout.
    pub(super) fn input(
        &self,
        plugin: &str,
        jobs: &[&Job],
        nodes: &[Node],
    ) -> Result<PolicyInput, PluginError> {
        Ok(match self {
            PolicyPre::V5(_) | PolicyPre::V4(_) | PolicyPre::V3(_) => {
                PolicyInput::Columns(columns::cluster(plugin, jobs, nodes)?)
            }
            PolicyPre::V2(_) => PolicyInput::Records(records::cluster(plugin, jobs, nodes)?),
        })
    }

    /// One `allocate` call on a fresh instance in `store`.
    pub(super) fn allocate(
        &self,
        store: &mut Store<HostState>,
        input: &PolicyInput,
    ) -> wasmtime::Result<Result<RawAllocation, PolicyError>> {
        let reasonless = |nodes| RawAllocation {
            nodes,
            reason: None,
        };
        let decision = |d: wit::Decision| RawAllocation {
            nodes: d.nodes,
            reason: d.reason,
        };
        match (self, input) {
            (PolicyPre::V5(pre), PolicyInput::Columns(c)) => pre
                .instantiate(&mut *store)?
                .call_allocate(&mut *store, c)
                .map(|r| r.map(decision).map_err(PolicyError::from)),
            (PolicyPre::V4(pre), PolicyInput::Columns(c)) => pre
                .instantiate(&mut *store)?
                .call_allocate(&mut *store, c)
                .map(|r| r.map(decision).map_err(PolicyError::from)),
            (PolicyPre::V3(pre), PolicyInput::Columns(c)) => pre
                .instantiate(&mut *store)?
                .call_allocate(&mut *store, c)
                .map(|r| r.map(reasonless).map_err(PolicyError::from)),
            (PolicyPre::V2(pre), PolicyInput::Records(c)) => pre
                .instantiate(&mut *store)?
                .call_allocate(&mut *store, c)
                .map(|r| r.map(reasonless).map_err(PolicyError::from)),
            _ => Err(mismatch()),
        }
    }

    /// One `optimize` call on a fresh instance in `store`.
    pub(super) fn optimize(
        &self,
        store: &mut Store<HostState>,
        input: &PolicyInput,
        previous: &[JobAllocation],
    ) -> wasmtime::Result<Result<Vec<JobAllocation>, PolicyError>> {
        // `$reason` reads an entry's reason: 0.4's `job-decision` has one, older entries none.
        macro_rules! call {
            ($pre:expr, $c:expr, $wit:ident, |$p:ident| $reason:expr) => {{
                let previous: Vec<$wit::JobAllocation> = previous
                    .iter()
                    .map(|p| $wit::JobAllocation {
                        job: p.job,
                        nodes: p.nodes.clone(),
                    })
                    .collect();
                $pre.instantiate(&mut *store)?
                    .call_optimize(&mut *store, $c, &previous)
                    .map(|r| {
                        r.map(|plan| {
                            plan.into_iter()
                                .map(|$p| JobAllocation {
                                    job: $p.job,
                                    reason: $reason,
                                    nodes: $p.nodes,
                                })
                                .collect()
                        })
                        .map_err(PolicyError::from)
                    })
            }};
        }
        match (self, input) {
            (PolicyPre::V5(pre), PolicyInput::Columns(c)) => call!(pre, c, wit, |p| p.reason),
            (PolicyPre::V4(pre), PolicyInput::Columns(c)) => call!(pre, c, wit, |p| p.reason),
            (PolicyPre::V3(pre), PolicyInput::Columns(c)) => call!(pre, c, wit, |p| None),
            (PolicyPre::V2(pre), PolicyInput::Records(c)) => call!(pre, c, wit_v2, |p| None),
            _ => Err(mismatch()),
        }
    }

    /// Whether the component exports `preempt` (contract 0.5.0 and later).
    pub(super) fn preempts(&self) -> bool {
        matches!(self, PolicyPre::V5(_))
    }

    /// One `preempt` call on a fresh instance in `store`; `Ok(Ok(None))` without a call for a
    /// contract without `preempt`.
    pub(super) fn preempt(
        &self,
        store: &mut Store<HostState>,
        input: &PolicyInput,
        candidates: &wit::CandidateTable,
    ) -> wasmtime::Result<Result<Option<RawPreemption>, PolicyError>> {
        match (self, input) {
            (PolicyPre::V5(pre), PolicyInput::Columns(c)) => pre
                .instantiate(&mut *store)?
                .call_preempt(&mut *store, c, candidates)
                .map(|r| {
                    r.map(|p| {
                        p.map(|p| RawPreemption {
                            nodes: p.nodes,
                            shrinks: p.shrinks.into_iter().map(|s| (s.job, s.replicas)).collect(),
                            evictions: p.evictions,
                            reason: p.reason,
                        })
                    })
                    .map_err(PolicyError::from)
                }),
            (PolicyPre::V5(_), _) => Err(mismatch()),
            _ => Ok(Ok(None)),
        }
    }
}

/// A `preempt` answer as the component gave it (contract 0.5.0), unchecked: job indices are the
/// WIT's (0 is the job being placed, candidate `c` is `c + 1`); the reason is raw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawPreemption {
    /// Node indices, one per replica of the job being placed.
    pub nodes: Vec<u32>,
    /// (job index, new replica count per task).
    pub shrinks: Vec<(u32, Vec<u32>)>,
    /// Job indices.
    pub evictions: Vec<u32>,
    pub reason: Option<String>,
}

impl RawPreemption {
    /// A plain-model preemption (indices into the candidates) in the WIT's indices.
    pub fn from_model(p: diorch_policies::preempt::Preemption, reason: Option<String>) -> Self {
        let index = |c: usize| u32::try_from(c).map_or(u32::MAX, |c| c.saturating_add(1));
        RawPreemption {
            nodes: p.nodes,
            shrinks: p
                .shrinks
                .into_iter()
                .map(|s| (index(s.job), s.replicas))
                .collect(),
            evictions: p.evictions.into_iter().map(index).collect(),
            reason,
        }
    }
}

/// A policy call's input, in the layout of the contract version it is for.
// One lives on the stack per call, never in a collection: boxing would only add an allocation.
#[allow(clippy::large_enum_variant)]
pub(super) enum PolicyInput {
    /// 0.3.0, 0.4.0 and 0.5.0.
    Columns(wit::Cluster),
    /// 0.2.0.
    Records(wit_v2::Cluster),
}

/// An input built for one contract version passed to another: inputs are built by the same
/// `PolicyPre` that calls them (`PolicyPre::input`), and a policy's inline and pool pre-instances
/// are of one version, so this is a host bug, reported as a host error rather than a panic.
pub(super) fn mismatch() -> wasmtime::Error {
    wasmtime::Error::msg("host bug: a policy input of another contract version")
}

macro_rules! refusal {
    ($wit:ident) => {
        impl From<$wit::Error> for PolicyError {
            fn from(e: $wit::Error) -> PolicyError {
                match e {
                    $wit::Error::NoFit(m) => PolicyError::NoFit(m),
                    $wit::Error::InvalidInput(m) => PolicyError::InvalidInput(m),
                    $wit::Error::Internal(m) => PolicyError::Internal(m),
                }
            }
        }
    };
}

refusal!(wit);
refusal!(wit_v2);

/// A mutator's typed pre-instance, in the contract version it was built against.
pub(super) enum MutatorPre {
    V5(bindings::v5::mutator::PodMutatorPre<HostState>),
    V4(bindings::v4::mutator::PodMutatorPre<HostState>),
    V3(bindings::v3::mutator::PodMutatorPre<HostState>),
    V2(bindings::v2::mutator::PodMutatorPre<HostState>),
}

impl MutatorPre {
    pub(super) fn new(
        contract: Contract,
        pre: wasmtime::component::InstancePre<HostState>,
    ) -> wasmtime::Result<MutatorPre> {
        Ok(match contract {
            Contract::V5 => MutatorPre::V5(bindings::v5::mutator::PodMutatorPre::new(pre)?),
            Contract::V4 => MutatorPre::V4(bindings::v4::mutator::PodMutatorPre::new(pre)?),
            Contract::V3 => MutatorPre::V3(bindings::v3::mutator::PodMutatorPre::new(pre)?),
            Contract::V2 => MutatorPre::V2(bindings::v2::mutator::PodMutatorPre::new(pre)?),
        })
    }

    /// One `mutate` call on a fresh instance in `store`.
    pub(super) fn mutate(
        &self,
        store: &mut Store<HostState>,
        ctx: &TaskContext,
        pod_json: &str,
    ) -> wasmtime::Result<Result<String, PolicyError>> {
        // The task context has the same fields in every version (0.3's and 0.4's type is 0.5's).
        macro_rules! call {
            ($pre:expr, $wit:ident) => {{
                let ctx = $wit::TaskContext {
                    job_key: ctx.job_key.to_string(),
                    task_name: ctx.task_name.clone(),
                    task_type: ctx.task_type.clone(),
                    rank: ctx.rank,
                    task_rank: ctx.task_rank,
                    world_size: ctx.world_size,
                    node: ctx.node.clone(),
                    job_labels: ctx.job_labels.clone(),
                    job_annotations: ctx.job_annotations.clone(),
                    config: ctx.config.clone(),
                };
                $pre.instantiate(&mut *store)?
                    .call_mutate(&mut *store, &ctx, pod_json)
                    .map(|r| r.map_err(PolicyError::from))
            }};
        }
        match self {
            MutatorPre::V5(pre) => call!(pre, wit),
            MutatorPre::V4(pre) => call!(pre, wit),
            MutatorPre::V3(pre) => call!(pre, wit),
            MutatorPre::V2(pre) => call!(pre, wit_v2),
        }
    }
}

/// An inline attempt did not answer (out of budget, WASI, a trap): the call must run again on
/// the blocking pool with its full deadline.
pub(super) struct OverBudget;

/// A loaded pod-mutator component. Cheap to clone.
#[derive(Clone)]
pub struct WasmMutator {
    pub(super) inner: Arc<Loaded<MutatorPre>>,
}

impl WasmPolicy {
    pub fn name(&self) -> &str {
        &self.inner.core.name
    }

    /// Hex sha256 of the component bytes: the plugin's version.
    pub fn sha256(&self) -> &str {
        &self.inner.core.sha256
    }

    pub fn limits(&self) -> Limits {
        self.inner.core.limits
    }

    /// The contract version the component was built against.
    pub fn contract(&self) -> Contract {
        self.inner.core.contract
    }

    /// Raw call: node indices and reason as the plugin returned them, unchecked (blocking).
    pub fn allocate_raw(&self, job: &Job, nodes: &[Node]) -> Result<RawAllocation, PluginError> {
        let input = self.inner.pre.input(&self.inner.core.name, &[job], nodes)?;
        match self.allocate_call(&input, false) {
            Ok(answer) => answer,
            // Only inline attempts run out of budget.
            Err(OverBudget) => Err(host_err(
                &self.inner.core.name,
                "inline budget in a full call",
            )),
        }
    }

    /// One `allocate` call on a fresh instance; `inline` as in [`LoadedCore::new_store`].
    pub(super) fn allocate_call(
        &self,
        input: &PolicyInput,
        inline: bool,
    ) -> Result<Result<RawAllocation, PluginError>, OverBudget> {
        let core = &self.inner.core;
        let pre = match (inline, &self.inner.inline_pre) {
            (false, _) => &self.inner.pre,
            (true, Some(pre)) => pre,
            (true, None) => return Err(OverBudget),
        };
        let mut store = core.new_store(inline);
        let result = pre.allocate(&mut store, input);
        // Only an inline answer is used: any failure (out of budget, a WASI stub, a trap or the
        // memory cap, which the pool run reproduces with its stderr) is left to the pool run.
        if inline && result.is_err() {
            return Err(OverBudget);
        }
        store.data_mut().release_held_logs();
        Ok(match result {
            Ok(Ok(alloc)) => Ok(alloc),
            Ok(Err(e)) => Err(core.refused(e)),
            Err(e) => Err(core.classify(&store, e)),
        })
    }

    /// Checked allocation: node names, one per replica, and the sanitised reason (blocking).
    pub fn allocate_blocking(
        &self,
        job: &Job,
        nodes: &[Node],
    ) -> Result<PolicyAnswer, PluginError> {
        let raw = self.allocate_raw(job, nodes)?;
        checked(&self.inner.core.name, job, nodes, raw)
    }

    /// Raw optimize: entries as the plugin returned them, unchecked (blocking).
    pub fn optimize_raw(
        &self,
        jobs: &[Job],
        nodes: &[Node],
        previous: &[JobAllocation],
    ) -> Result<Vec<JobAllocation>, PluginError> {
        let core = &self.inner.core;
        let jobs: Vec<&Job> = jobs.iter().collect();
        let input = self.inner.pre.input(&core.name, &jobs, nodes)?;
        let mut store = core.new_store(false);
        match self.inner.pre.optimize(&mut store, &input, previous) {
            Ok(Ok(plan)) => Ok(plan),
            Ok(Err(e)) => Err(core.refused(e)),
            Err(e) => Err(core.classify(&store, e)),
        }
    }

    /// Raw preempt (contract 0.5.0): the answer as the plugin returned it, unchecked
    /// (blocking); `Ok(None)` without a call for a component of an older contract.
    pub fn preempt_raw(
        &self,
        job: &Job,
        candidates: &[diorch_policies::preempt::Running],
        nodes: &[Node],
    ) -> Result<Option<RawPreemption>, PluginError> {
        let core = &self.inner.core;
        if !self.inner.pre.preempts() {
            return Ok(None);
        }
        let jobs: Vec<&Job> = std::iter::once(job)
            .chain(candidates.iter().map(|c| &c.job))
            .collect();
        let input = self.inner.pre.input(&core.name, &jobs, nodes)?;
        let table = columns::candidates(candidates);
        let mut store = core.new_store(false);
        match self.inner.pre.preempt(&mut store, &input, &table) {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(core.refused(e)),
            Err(e) => Err(core.classify(&store, e)),
        }
    }

    /// Checked preempt (blocking): the answer's shape (see `checks::preemption`), its indices
    /// into `candidates`, its reason sanitised.
    pub fn preempt_blocking(
        &self,
        job: &Job,
        candidates: &[diorch_policies::preempt::Running],
        nodes: &[Node],
    ) -> Result<Option<PreemptAnswer>, PluginError> {
        let Some(raw) = self.preempt_raw(job, candidates, nodes)? else {
            return Ok(None);
        };
        checks::preemption(&self.inner.core.name, job, candidates, nodes, &raw).map(Some)
    }

    /// Checked optimize (blocking).
    pub fn optimize_blocking(
        &self,
        jobs: &[Job],
        nodes: &[Node],
        previous: &[JobPlan],
    ) -> Result<Vec<JobPlan>, PluginError> {
        let previous = checks::plan_to_indices(jobs, nodes, previous);
        let plan = self.optimize_raw(jobs, nodes, &previous)?;
        checks::plan(&self.inner.core.name, jobs, nodes, &plan)
    }
}

/// How a policy's `allocate` calls were served so far (see [`WasmPolicy`]'s `allocate`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CallPaths {
    /// Answered by the inline attempt on the calling thread.
    pub inline: u64,
    /// Run on the blocking pool (no inline attempt, or one that did not answer).
    pub pooled: u64,
}

impl WasmPolicy {
    /// How `allocate` calls were served so far.
    pub fn call_paths(&self) -> CallPaths {
        CallPaths {
            inline: self.inner.inline_answers.load(Ordering::Relaxed),
            pooled: self.inner.pooled_runs.load(Ordering::Relaxed),
        }
    }
}

/// `raw` checked against `nodes`, its reason sanitised.
fn checked(
    plugin: &str,
    job: &Job,
    nodes: &[Node],
    raw: RawAllocation,
) -> Result<PolicyAnswer, PluginError> {
    let names = checks::allocation(plugin, job, nodes, &raw.nodes)?;
    Ok(PolicyAnswer::new(names, raw.reason.as_deref()))
}

impl SchedulingPolicy for WasmPolicy {
    fn describe(&self) -> String {
        self.inner.core.describe()
    }

    fn sha256(&self) -> Option<String> {
        Some(self.inner.core.sha256.to_string())
    }

    /// Admissions are serialised and an `allocate` usually takes well under a millisecond, so
    /// it is first tried inline, on the calling thread, with a budget of one to two epoch ticks
    /// ([`INLINE_TICKS`]) and WASI stubbed out: a hop to the blocking pool and back (two thread wake-ups, each waiting for a
    /// core on a busy machine) cost the placement bench ~8 % over the built-in policy, more than
    /// the call. An attempt that does not answer (out of budget, WASI, a trap) is thrown away
    /// (calls are deterministic and isolated, so nothing of it is observable; its logs were held
    /// back) and the call runs on the blocking pool with its full deadline; later calls go there
    /// too until one is fast there again. So a plugin holds an async worker for at most about
    /// two ticks (`HostConfig::epoch_tick`, 5 ms).
    fn allocate(
        &self,
        job: Arc<Job>,
        nodes: Arc<[Node]>,
    ) -> BoxFuture<'static, Result<PolicyAnswer, PluginError>> {
        let this = self.clone();
        let slots = self.inner.core.slots();
        async move {
            let core = &this.inner.core;
            let _slots = slots.await?;
            if this.inner.inline_ok.load(Ordering::Relaxed) {
                let input = this.inner.pre.input(&core.name, &[&job], &nodes)?;
                match this.allocate_call(&input, true) {
                    Ok(answer) => {
                        this.inner.inline_answers.fetch_add(1, Ordering::Relaxed);
                        return checked(&core.name, &job, &nodes, answer?);
                    }
                    Err(OverBudget) => this.inner.inline_ok.store(false, Ordering::Relaxed),
                }
            }
            this.inner.pooled_runs.fetch_add(1, Ordering::Relaxed);
            let pooled = this.clone();
            tokio::task::spawn_blocking(move || {
                let started = std::time::Instant::now();
                let answer = pooled.allocate_blocking(&job, &nodes);
                if pooled.inner.inline_pre.is_some()
                    && started.elapsed() < pooled.inner.core.host.config.epoch_tick / 5
                {
                    pooled.inner.inline_ok.store(true, Ordering::Relaxed);
                }
                answer
            })
            .await
            .unwrap_or_else(|e| Err(host_err(&core.name, e)))
        }
        .boxed()
    }

    fn optimize(
        &self,
        jobs: Arc<[Job]>,
        nodes: Arc<[Node]>,
        previous: Vec<JobPlan>,
    ) -> BoxFuture<'static, Result<Vec<JobPlan>, PluginError>> {
        let this = self.clone();
        blocking(&self.inner.core, move || {
            this.optimize_blocking(&jobs, &nodes, &previous)
        })
    }

    /// On the blocking pool, as `optimize`; a component of a contract before 0.5.0 answers
    /// `Ok(None)` at once, without a call.
    fn preempt(
        &self,
        job: Arc<Job>,
        candidates: Arc<[diorch_policies::preempt::Running]>,
        nodes: Arc<[Node]>,
    ) -> BoxFuture<'static, Result<Option<PreemptAnswer>, PluginError>> {
        if !self.inner.pre.preempts() {
            return async { Ok(None) }.boxed();
        }
        let this = self.clone();
        blocking(&self.inner.core, move || {
            this.preempt_blocking(&job, &candidates, &nodes)
        })
    }
}

/// Runs Wasm on tokio's blocking pool so reconciles and HTTP never wait behind a plugin, at
/// most `max_concurrent_calls` at once.
pub(super) fn blocking<T: Send + 'static>(
    core: &LoadedCore,
    f: impl FnOnce() -> Result<T, PluginError> + Send + 'static,
) -> BoxFuture<'static, Result<T, PluginError>> {
    let slots = core.slots();
    let plugin = core.name.clone();
    async move {
        let _slots = slots.await?;
        tokio::task::spawn_blocking(f)
            .await
            .unwrap_or_else(|e| Err(host_err(&plugin, e)))
    }
    .boxed()
}

impl WasmMutator {
    pub fn name(&self) -> &str {
        &self.inner.core.name
    }

    pub fn sha256(&self) -> &str {
        &self.inner.core.sha256
    }

    pub fn limits(&self) -> Limits {
        self.inner.core.limits
    }

    /// The contract version the component was built against.
    pub fn contract(&self) -> Contract {
        self.inner.core.contract
    }

    /// Raw call on JSON text, unchecked (blocking).
    pub fn mutate_raw(&self, ctx: &TaskContext, pod_json: &str) -> Result<String, PluginError> {
        let core = &self.inner.core;
        let mut store = core.new_store(false);
        let result = self.inner.pre.mutate(&mut store, ctx, pod_json);
        match result {
            Ok(Ok(out)) if out.len() > MUTATOR_OUTPUT_CAP => Err(PluginError::MalformedOutput {
                plugin: core.name.to_string(),
                message: format!(
                    "returned a pod of {} bytes; at most {MUTATOR_OUTPUT_CAP} are accepted",
                    out.len()
                ),
            }),
            Ok(Ok(out)) => Ok(out),
            Ok(Err(e)) => Err(core.refused(e)),
            Err(e) => Err(core.classify(&store, e)),
        }
    }

    /// Checked mutation (blocking): the result keeps everything the operator relies on.
    pub fn mutate_blocking(&self, ctx: &TaskContext, pod: &Pod) -> Result<Pod, PluginError> {
        let name = &self.inner.core.name;
        let input = serde_json::to_value(pod).map_err(|e| host_err(name, e))?;
        let out = self.mutate_raw(ctx, &input.to_string())?;
        checks::mutation(name, &input, &out)
    }
}

impl PodMutator for WasmMutator {
    fn describe(&self) -> String {
        self.inner.core.describe()
    }

    fn mutate(&self, ctx: TaskContext, pod: Pod) -> BoxFuture<'static, Result<Pod, PluginError>> {
        let this = self.clone();
        blocking(&self.inner.core, move || this.mutate_blocking(&ctx, &pod))
    }
}
