//! The simulation: a trace run against a cluster in virtual time, through the operator's own
//! allocator (admission, waiting, fallback, re-plan, resize and rate-limit rules) and its own
//! reconcile planner (statuses, pods, phases), with the API server, the kubelet and the
//! workload played here.
//!
//! Each reconcile is the controller's own decision step (`diorch_core::step`, as the executor
//! calls it) with the writes performed here instead of by the API server: ask the allocator,
//! decide, apply the status and the pod writes, settle their outcomes, again until nothing
//! changes; a job is woken again when its decision can change with no event (held counts, a
//! deadline). Pods start `pod_start`
//! after they are created; a job does work at its throughput while it is Running, and its pods
//! succeed when the work is done. Re-plans run every `optimize_period` of virtual time, and with
//! `replan_after_end` also a second after a job ends, as the operator's re-plan loop does. Jobs that ended are deleted at
//! once (as with `ttlSecondsAfterFinished: 0`), so a re-plan pass never reads them again.
//!
//! Owns: the virtual clock, the event queue, the simulated pods and the run's measurements.
//! Must not touch: the admission and placement rules (the allocator's) or the phase rules (the
//! planner's): when they change, the simulator changes with them.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt as _;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher::Event;
use serde_json::json;

use super::input::{Cluster, Trace};
use crate::allocator::{Allocator, Policies, Preemption, Settings};
use crate::clock::Clock;
use crate::metrics::{Metrics, PreemptionLabels};
use crate::plugin::{Job, JobPlan, NativePolicy, PluginError, PolicyError, SchedulingPolicy};
use diorch_core::api::{DIJob, Phase};
use diorch_core::build::{self, BuildContext};
use diorch_core::cached::{CachedCondition, CachedJob, CachedPod, CachedPodStatus, CachedService};
use diorch_core::key::ObjectKey;
use diorch_core::model::UsagePod;
use diorch_core::placement::{Admission, needs_allocation};
use diorch_core::planner::{Action, Observed, Plan};
use diorch_core::resources::{GPU, Resources};
use diorch_core::step::{self, Decision, Ended, Memory, Target, Verb, Write};

/// Most reconcile passes one job gets per wake-up: a planner that keeps changing its mind is a
/// bug, and the run stops with it instead of looping.
const MAX_PASSES: usize = 64;

/// Most timeline samples kept; later samples are dropped (the summary still covers the run).
pub const MAX_SAMPLES: usize = 200_000;

/// The operator's re-plan loop waits this long after a job ends before re-planning.
const REPLAN_SETTLE_MS: u64 = 1_000;

/// When virtual time starts (fixed, so runs are identical).
const EPOCH_SECONDS: i64 = 1_767_225_600; // 2026-01-01T00:00:00Z

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("job {job}: the planner still changed the job after {MAX_PASSES} passes")]
    NoFixpoint { job: String },
    #[error("job {job}: {message}")]
    Job { job: String, message: String },
    #[error("node event {index}: node {node:?} is not in the cluster")]
    UnknownNode { index: usize, node: String },
}

/// The policy a run uses.
#[derive(Clone)]
pub struct PolicyChoice {
    /// As reported: `builtin:binpack`, or the component's file name.
    pub label: String,
    pub policy: Arc<dyn SchedulingPolicy>,
}

impl PolicyChoice {
    pub fn builtin(name: &str) -> Option<PolicyChoice> {
        let policy = match name {
            "binpack" => NativePolicy::BinPack,
            "spread" => NativePolicy::Spread,
            "goodput" => NativePolicy::Goodput,
            _ => return None,
        };
        Some(PolicyChoice {
            label: format!("builtin:{name}"),
            policy: Arc::new(policy),
        })
    }
}

/// How a run is set up besides its inputs.
#[derive(Clone, Debug)]
pub struct Options {
    pub optimize_period: Duration,
    pub min_reschedule_interval: Duration,
    /// From a pod's creation to its Ready.
    pub pod_start: Duration,
    /// The built-in policy that serves when the policy fails.
    pub fallback: NativePolicy,
    /// Timeline resolution.
    pub sample_every: Duration,
    /// Also re-plan a second after a job ends, as the operator does (besides every
    /// `optimize_period`). Off by default: on a large cluster that is a pass every few seconds
    /// of virtual time, most of a run's cost, for what the periodic pass mostly does anyway.
    pub replan_after_end: bool,
    /// Keep every reconcile pass (what it saw and decided) in [`Run::passes`]: for the test that
    /// the executor decides the same from the same observations.
    pub record_passes: bool,
    /// Whether and how a job that does not fit takes room from lower-priority jobs, as the
    /// operator's --preemption.
    pub preemption: Preemption,
    /// As the operator's --preemption-min-run-time.
    pub preemption_min_run_time: Duration,
    /// As the operator's --preemption-cooldown.
    pub preemption_cooldown: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            optimize_period: Duration::from_secs(60),
            min_reschedule_interval: Duration::from_secs(300),
            pod_start: Duration::from_secs(30),
            fallback: NativePolicy::BinPack,
            sample_every: Duration::from_secs(60),
            replan_after_end: false,
            record_passes: false,
            preemption: Preemption::default(),
            preemption_min_run_time: Duration::from_secs(600),
            preemption_cooldown: Duration::from_secs(300),
        }
    }
}

/// What happened to one job.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobResult {
    pub name: String,
    pub arrival_ms: u64,
    /// `spec.priority: high` (priority value 100): the urgent jobs of the preemption report.
    pub high_priority: bool,
    /// First time all its replicas were Running.
    pub started_ms: Option<u64>,
    pub ended_ms: Option<u64>,
    /// `Succeeded`, `Failed`, or empty when the run ended first.
    pub phase: String,
    pub gpus: u32,
    /// Re-plans that moved it (each restarts the moved pods).
    pub moves: u32,
    pub resizes: u32,
    /// Admissions the fallback policy decided.
    pub fallbacks: u32,
    /// Preemption as the planner's Events on the job say it: `JobShrunk` (it lost replicas to
    /// a higher-priority job), `JobEvicted` (it lost all its pods), and placements that made
    /// room by preempting others (`preempting`).
    pub shrunk: u32,
    pub evicted: u32,
    pub preempting: u32,
}

/// The cluster at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    pub at_ms: u64,
    pub used_gpus: u64,
    pub total_gpus: u64,
    /// Free GPUs on nodes that are partly used.
    pub fragmented_gpus: u64,
    /// Jobs arrived and not ended that are not running.
    pub queued: u64,
    pub running: u64,
}

/// Wall-clock times and outcomes of the policy's calls.
#[derive(Clone, Debug, Default)]
pub struct CallStats {
    pub allocate_ns: Vec<u64>,
    pub optimize_ns: Vec<u64>,
    /// Failed calls (not `no-fit` answers) by reason.
    pub failures: BTreeMap<&'static str, u64>,
}

/// A run's outcome.
#[derive(Clone, Debug)]
pub struct Run {
    pub policy: String,
    pub jobs: Vec<JobResult>,
    pub timeline: Vec<Sample>,
    /// Time integrals (GPU-milliseconds, job-milliseconds) from the first arrival to the end.
    pub used_gpu_ms: f64,
    pub total_gpu_ms: f64,
    pub fragmented_gpu_ms: f64,
    pub queued_job_ms: f64,
    pub first_ms: u64,
    pub end_ms: u64,
    pub calls: CallStats,
    /// Pod creations that took a node past its allocatable in some resource (never, unless
    /// placement has a bug).
    pub overcommits: u64,
    /// Pods created on a node without room for them yet, which waited unbound (a job moving
    /// onto room another job of the same re-plan was leaving).
    pub bind_waits: u64,
    /// Every reconcile pass, with [`Options::record_passes`].
    pub passes: Vec<Pass>,
    /// The run's preemption mode.
    pub preemption: Preemption,
    /// The allocator's own counts (its metrics `diorch_allocator_preemptions_total{action}` and
    /// `diorch_allocator_work_lost_gpu_seconds_total` at the end of the run): shrinks,
    /// evictions, and GPU-seconds of work the evicted jobs lost.
    pub shrinks: u64,
    pub evictions: u64,
    pub work_lost_gpu_seconds: f64,
}

/// One reconcile pass of the simulation: what it observed and what the decision step made of it.
#[derive(Clone, Debug)]
pub struct Pass {
    pub job: DIJob,
    pub pods: Vec<CachedPod>,
    pub service: Option<CachedService>,
    pub admission: Option<Admission>,
    pub memory: Memory,
    pub now: Instant,
    pub wall: Time,
    pub decision: Decision,
    /// How the pass's pod and service writes ended.
    pub writes: Vec<Write>,
    /// The plan that failed the job after a pod was refused as invalid.
    pub refused: Option<Plan>,
}

/// Virtual time, read by the allocator through [`Clock`].
#[derive(Debug)]
struct VirtualClock {
    base: Instant,
    ms: AtomicU64,
}

impl VirtualClock {
    fn wall_at(ms: u64) -> jiff::Timestamp {
        let at = jiff::Timestamp::from_second(EPOCH_SECONDS).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        at.checked_add(jiff::SignedDuration::from_millis(
            i64::try_from(ms).unwrap_or(i64::MAX),
        ))
        .unwrap_or(at)
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Instant {
        self.base + Duration::from_millis(self.ms.load(Ordering::Relaxed))
    }
    fn wall(&self) -> jiff::Timestamp {
        VirtualClock::wall_at(self.ms.load(Ordering::Relaxed))
    }
}

/// The policy under test, timed and its failures counted.
struct Recorded {
    inner: Arc<dyn SchedulingPolicy>,
    stats: Arc<Mutex<CallStats>>,
}

fn record<T>(
    stats: &Mutex<CallStats>,
    optimize: bool,
    started: Instant,
    result: &Result<T, PluginError>,
) {
    let ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
    // Only this module locks it, never across an await: a poisoned lock still holds counts.
    let mut stats = stats.lock().unwrap_or_else(|e| e.into_inner());
    if optimize {
        stats.optimize_ns.push(ns);
    } else {
        stats.allocate_ns.push(ns);
    }
    if let Err(e) = result
        && !matches!(
            e,
            PluginError::Refused {
                error: PolicyError::NoFit(_),
                ..
            }
        )
    {
        *stats.failures.entry(e.reason()).or_default() += 1;
    }
}

impl SchedulingPolicy for Recorded {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn sha256(&self) -> Option<String> {
        self.inner.sha256()
    }

    fn allocate(
        &self,
        job: Arc<Job>,
        nodes: Arc<[crate::plugin::Node]>,
    ) -> BoxFuture<'static, Result<crate::plugin::PolicyAnswer, PluginError>> {
        let call = self.inner.allocate(job, nodes);
        let stats = self.stats.clone();
        async move {
            let started = Instant::now();
            let result = call.await;
            record(&stats, false, started, &result);
            result
        }
        .boxed()
    }

    fn optimize(
        &self,
        jobs: Arc<[Job]>,
        nodes: Arc<[crate::plugin::Node]>,
        previous: Vec<JobPlan>,
    ) -> BoxFuture<'static, Result<Vec<JobPlan>, PluginError>> {
        let call = self.inner.optimize(jobs, nodes, previous);
        let stats = self.stats.clone();
        async move {
            let started = Instant::now();
            let result = call.await;
            record(&stats, true, started, &result);
            result
        }
        .boxed()
    }

    fn preempt(
        &self,
        job: Arc<Job>,
        candidates: Arc<[diorch_policies::preempt::Running]>,
        nodes: Arc<[crate::plugin::Node]>,
    ) -> BoxFuture<'static, Result<Option<crate::plugin::PreemptAnswer>, PluginError>> {
        self.inner.preempt(job, candidates, nodes)
    }
}

/// The allocator's policies in a run: the policy under test by its name, the fallback built in.
struct SimPolicies {
    name: String,
    policy: Arc<dyn SchedulingPolicy>,
    fallback: NativePolicy,
}

impl Policies for SimPolicies {
    fn named(&self, name: &str) -> Option<Arc<dyn SchedulingPolicy>> {
        (name == self.name).then(|| self.policy.clone())
    }
    fn builtin(&self) -> NativePolicy {
        self.fallback
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Arrive(usize),
    PodsUp(usize, u64),
    Finish(usize, u64),
    /// A re-plan pass; `true` for the periodic one, which schedules the next.
    Optimize(bool),
    /// The trace's node event at this index.
    Node(usize),
    /// A job whose decision can change with no event (held counts, a deadline) is looked at.
    Wake(usize),
    Sample,
}

impl Ev {
    /// Whether the event can change the cluster by itself (periodic ones only react).
    fn drives(self) -> bool {
        matches!(
            self,
            Ev::Arrive(_) | Ev::PodsUp(..) | Ev::Finish(..) | Ev::Node(_) | Ev::Wake(_)
        )
    }
}

#[derive(Default)]
struct SimJob {
    job: Option<DIJob>,
    /// The spec as the API server would send it (it never changes: resizes are in status).
    spec_json: String,
    pods: BTreeMap<String, CachedPod>,
    usage: BTreeMap<String, UsagePod>,
    service: Option<CachedService>,
    result: JobResult,
    ended: bool,
    work_left: f64,
    rate: f64,
    since_ms: u64,
    /// Invalidates scheduled Finish and PodsUp events.
    generation: u64,
    /// Collector counts already reported as profilings.
    reported: BTreeSet<u32>,
    /// What the decision step remembers of the job between passes.
    memory: Memory,
    /// When the next [`Ev::Wake`] of the job is due (a later one pending is stale).
    wake_at: Option<u64>,
}

struct Sim<'a> {
    trace: &'a Trace,
    clock: Arc<VirtualClock>,
    allocator: Arc<Allocator>,
    retries: futures::channel::mpsc::UnboundedReceiver<ObjectKey>,
    jobs_writer: Writer<CachedJob>,
    jobs: Vec<SimJob>,
    by_name: BTreeMap<String, usize>,
    queue: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
    drivers: usize,
    now: u64,
    options: &'a Options,
    ctx: BuildContext,
    next_uid: u64,
    /// The cluster's nodes as the API server holds them, and the writer of the allocator's
    /// node cache.
    nodes: BTreeMap<String, Node>,
    node_writer: Writer<Node>,
    /// Nodes that are down (NotReady).
    down: BTreeSet<String>,
    /// GPUs of each node, and what bound, live pods take of them.
    node_gpus: BTreeMap<String, u64>,
    used_gpus: BTreeMap<String, u64>,
    /// Each node's allocatable (the pod count defaulted as the allocator does), and the sum of
    /// its live pods' requests.
    allocatable: BTreeMap<String, Resources>,
    node_used: BTreeMap<String, Resources>,
    overcommits: u64,
    /// Pods waiting for room on the node they are pinned to, by node, in creation order.
    unbound: BTreeMap<String, Vec<(usize, String)>>,
    bind_waits: u64,
    /// Waiting jobs asking for more GPUs than are free (see [`Sim::drain_retries`]).
    parked: BTreeSet<usize>,
    /// Jobs doing work (rate above 0).
    running: u64,
    total_gpus: u64,
    // Measurements.
    last_ms: u64,
    first_ms: u64,
    integrals: [f64; 4],
    timeline: Vec<Sample>,
    open: usize,
    /// When the re-plan a job's end asked for runs.
    replan_at: Option<u64>,
    ended: usize,
    passes: Option<Vec<Pass>>,
}

/// Runs `trace` on `cluster` with `choice` and returns what happened.
pub async fn run(
    cluster: &Cluster,
    trace: &Trace,
    choice: &PolicyChoice,
    options: &Options,
) -> Result<Run, SimError> {
    run_with_progress(cluster, trace, choice, options, &mut |_| {}).await
}

/// How far a run is, for a progress display.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    pub ended: usize,
    pub jobs: usize,
    pub virtual_ms: u64,
}

/// [`run`], calling `progress` after every event (cheap to call; the caller throttles).
pub async fn run_with_progress(
    cluster: &Cluster,
    trace: &Trace,
    choice: &PolicyChoice,
    options: &Options,
    progress: &mut dyn FnMut(Progress),
) -> Result<Run, SimError> {
    let clock = Arc::new(VirtualClock {
        base: Instant::now(),
        ms: AtomicU64::new(0),
    });
    let (nodes, mut node_writer) = reflector::store::<Node>();
    let mut node_gpus = BTreeMap::new();
    for node in &cluster.nodes {
        node_writer.apply_watcher_event(&Event::Apply(node.clone()));
        let gpus = diorch_core::resources::node_allocatable(node).get(GPU) / 1000;
        node_gpus.insert(
            node.metadata.name.clone().unwrap_or_default(),
            u64::try_from(gpus).unwrap_or(0),
        );
    }
    let (job_store, jobs_writer) = reflector::store::<CachedJob>();
    let stats = Arc::new(Mutex::new(CallStats::default()));
    let name = "policy-under-test".to_string();
    let policies = SimPolicies {
        name: name.clone(),
        policy: Arc::new(Recorded {
            inner: choice.policy.clone(),
            stats: stats.clone(),
        }),
        fallback: options.fallback,
    };
    let settings = Settings {
        default_policy: Some(name),
        optimize_period: options.optimize_period,
        min_reschedule_interval: options.min_reschedule_interval,
        clock: clock.clone(),
        preemption: options.preemption,
        preemption_min_run_time: options.preemption_min_run_time,
        preemption_cooldown: options.preemption_cooldown,
        ..Settings::default()
    };
    let metrics = Arc::new(Metrics::new());
    let (allocator, retries) = Allocator::new(
        Arc::new(policies),
        nodes,
        job_store,
        settings,
        metrics.clone(),
    );
    // The book starts from an empty pod list, as after a first list of an empty cluster.
    allocator.pod_event(&Event::Init).await;
    allocator.pod_event(&Event::InitDone).await;

    let total_gpus = node_gpus.values().sum();
    let mut sim = Sim {
        trace,
        clock,
        allocator,
        retries,
        jobs_writer,
        jobs: Vec::with_capacity(trace.jobs.len()),
        by_name: BTreeMap::new(),
        queue: BinaryHeap::new(),
        seq: 0,
        drivers: 0,
        now: 0,
        options,
        ctx: BuildContext::default(),
        next_uid: 0,
        nodes: cluster
            .nodes
            .iter()
            .map(|n| (n.metadata.name.clone().unwrap_or_default(), n.clone()))
            .collect(),
        node_writer,
        down: BTreeSet::new(),
        node_gpus,
        used_gpus: BTreeMap::new(),
        allocatable: cluster
            .nodes
            .iter()
            .map(|n| {
                let mut a = diorch_core::resources::node_allocatable(n);
                a.set_default(
                    diorch_core::resources::PODS,
                    diorch_core::model::DEFAULT_MAX_PODS,
                );
                (n.metadata.name.clone().unwrap_or_default(), a)
            })
            .collect(),
        node_used: BTreeMap::new(),
        overcommits: 0,
        unbound: BTreeMap::new(),
        bind_waits: 0,
        parked: BTreeSet::new(),
        running: 0,
        total_gpus,
        last_ms: 0,
        first_ms: trace.jobs.first().map_or(0, |j| j.arrival_ms),
        integrals: [0.0; 4],
        timeline: Vec::new(),
        open: 0,
        replan_at: None,
        ended: 0,
        passes: options.record_passes.then(Vec::new),
    };
    for (i, tj) in trace.jobs.iter().enumerate() {
        let spec_json = serde_json::to_string(&tj.dijob.spec).map_err(|e| SimError::Job {
            job: tj.spec.name.clone(),
            message: e.to_string(),
        })?;
        sim.jobs.push(SimJob {
            spec_json,
            work_left: tj.work,
            result: JobResult {
                name: tj.spec.name.clone(),
                arrival_ms: tj.arrival_ms,
                high_priority: tj.spec.priority == super::input::Priority::High,
                gpus: job_gpus(&tj.dijob),
                ..JobResult::default()
            },
            ..SimJob::default()
        });
        sim.by_name.insert(tj.spec.name.clone(), i);
        sim.push(tj.arrival_ms, Ev::Arrive(i));
    }
    for (index, e) in trace.node_events.iter().enumerate() {
        if !sim.nodes.contains_key(&e.node) {
            return Err(SimError::UnknownNode {
                index,
                node: e.node.clone(),
            });
        }
        // Checked at load: in range.
        let at = super::input::seconds(e.at).unwrap_or(0);
        sim.push(at, Ev::Node(index));
    }
    if !options.optimize_period.is_zero() {
        sim.push(
            sim.first_ms + ms(options.optimize_period),
            Ev::Optimize(true),
        );
    }
    sim.push(sim.first_ms, Ev::Sample);
    sim.run(progress).await?;
    let calls = stats.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let preemptions = |action: &'static str| {
        metrics
            .allocator
            .preemptions
            .get_or_create(&PreemptionLabels { action })
            .get()
    };
    Ok(Run {
        policy: choice.label.clone(),
        jobs: sim.jobs.into_iter().map(|j| j.result).collect(),
        timeline: sim.timeline,
        used_gpu_ms: sim.integrals[0],
        total_gpu_ms: sim.integrals[1],
        fragmented_gpu_ms: sim.integrals[2],
        queued_job_ms: sim.integrals[3],
        first_ms: sim.first_ms,
        end_ms: sim.now,
        calls,
        overcommits: sim.overcommits,
        bind_waits: sim.bind_waits,
        passes: sim.passes.unwrap_or_default(),
        preemption: options.preemption,
        shrinks: preemptions("shrink"),
        evictions: preemptions("evict"),
        work_lost_gpu_seconds: metrics.allocator.work_lost_gpu_seconds.get(),
    })
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// GPUs of all replicas of `job` at its spec's counts.
fn job_gpus(job: &DIJob) -> u32 {
    let per_task = diorch_core::model::task_requests(job);
    (0..job.spec.tasks.len())
        .map(|i| {
            let per = per_task.get(i).map_or(0, |r| r.get(GPU) / 1000);
            u32::try_from(per * i128::from(build::task_replicas(job, i))).unwrap_or(u32::MAX)
        })
        .sum()
}

/// The node a built pod is pinned to (`build::pin_to_node`'s affinity), if any.
fn pinned_node(pod: &Pod) -> Option<String> {
    let terms = &pod
        .spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms.first()?.match_fields.as_ref()?.iter().find_map(|f| {
        (f.key == "metadata.name" && f.operator == "In")
            .then(|| f.values.as_ref()?.first().cloned())
            .flatten()
    })
}

impl Sim<'_> {
    fn push(&mut self, at: u64, ev: Ev) {
        if ev.drives() {
            self.drivers += 1;
        }
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, ev)));
    }

    async fn run(&mut self, progress: &mut dyn FnMut(Progress)) -> Result<(), SimError> {
        let end = self.jobs.len();
        while let Some(Reverse((at, _, ev))) = self.queue.pop() {
            if ev.drives() {
                self.drivers -= 1;
            } else if self.drivers == 0 {
                // Only periodic events are left: nothing can change any more (jobs still
                // waiting never fit).
                break;
            }
            self.advance(at);
            match ev {
                Ev::Arrive(i) => {
                    self.open += 1;
                    let mut job = self.trace.jobs[i].dijob.clone();
                    job.metadata.creation_timestamp = Some(Time(VirtualClock::wall_at(at)));
                    self.jobs[i].job = Some(job);
                    self.store(i);
                    self.reconcile(i).await?;
                }
                Ev::PodsUp(i, generation) => {
                    if self.jobs[i].generation == generation && !self.jobs[i].ended {
                        self.start_pods(i);
                        self.reconcile(i).await?;
                    }
                }
                Ev::Finish(i, generation) => {
                    if self.jobs[i].generation == generation && !self.jobs[i].ended {
                        self.settle(i);
                        self.end_pods(i).await;
                        self.reconcile(i).await?;
                    }
                }
                Ev::Optimize(periodic) => {
                    if !periodic {
                        self.replan_at = None;
                    }
                    self.allocator.optimize_once().await;
                    if periodic {
                        self.push(at + ms(self.options.optimize_period), Ev::Optimize(true));
                    }
                }
                Ev::Wake(i) => {
                    if self.jobs[i].wake_at == Some(at) && !self.jobs[i].ended {
                        self.jobs[i].wake_at = None;
                        self.reconcile(i).await?;
                    }
                }
                Ev::Node(index) => {
                    let e = &self.trace.node_events[index];
                    self.node_changed(&e.node.clone(), e.ready).await?;
                }
                Ev::Sample => {
                    self.sample();
                    let next = at + ms(self.options.sample_every).max(1);
                    self.push(next, Ev::Sample);
                }
            }
            self.drain_retries().await?;
            progress(Progress {
                ended: self.ended,
                jobs: end,
                virtual_ms: at,
            });
            if self.ended == end {
                break;
            }
        }
        self.sample();
        Ok(())
    }

    /// Moves virtual time to `at`, integrating the cluster's measures over the step.
    fn advance(&mut self, at: u64) {
        if at > self.last_ms && self.last_ms >= self.first_ms {
            let dt = (at - self.last_ms) as f64;
            let s = self.snapshot();
            self.integrals[0] += s.used_gpus as f64 * dt;
            self.integrals[1] += s.total_gpus as f64 * dt;
            self.integrals[2] += s.fragmented_gpus as f64 * dt;
            self.integrals[3] += s.queued as f64 * dt;
        }
        self.last_ms = self.last_ms.max(at);
        self.now = at;
        self.clock.ms.store(at, Ordering::Relaxed);
    }

    fn snapshot(&self) -> Sample {
        // A down node counts neither its GPUs nor the pods waiting on it.
        let up = || {
            self.used_gpus
                .iter()
                .filter(|(node, _)| !self.down.contains(*node))
        };
        let used: u64 = up().map(|(_, used)| used).sum();
        let fragmented = up()
            .filter_map(|(node, used)| {
                let cap = *self.node_gpus.get(node)?;
                (*used > 0 && *used < cap).then(|| cap - used)
            })
            .sum();
        let running = self.running;
        let down_gpus: u64 = self.down.iter().filter_map(|n| self.node_gpus.get(n)).sum();
        Sample {
            at_ms: self.now,
            used_gpus: used,
            total_gpus: self.total_gpus - down_gpus,
            fragmented_gpus: fragmented,
            queued: self.open as u64 - running,
            running,
        }
    }

    fn sample(&mut self) {
        if self.timeline.len() < MAX_SAMPLES {
            let s = self.snapshot();
            self.timeline.push(s);
        }
    }

    /// The job's current object into the allocator's job cache.
    fn store(&mut self, i: usize) {
        let sj = &self.jobs[i];
        let Some(job) = &sj.job else { return };
        let Ok(spec) = serde_json::value::RawValue::from_string(sj.spec_json.clone()) else {
            return;
        };
        let Ok(cached) = CachedJob::new(job.metadata.clone(), spec, job.status.as_ref()) else {
            return;
        };
        self.jobs_writer.apply_watcher_event(&Event::Apply(cached));
    }

    /// Reconciles the jobs the allocator sent back (woken waiting jobs, re-planned ones).
    ///
    /// One shortcut, to keep large overloaded runs fast: a woken job that needs an allocation
    /// and asks for more GPUs than are free in the whole cluster is parked instead of asking
    /// the allocator, which could only answer that it does not fit (free here counts bound
    /// pods only, so it is never less than what the allocator sees). Parked jobs are looked at
    /// again after every event, in the same order, so they are admitted when they would have
    /// been. A job that may preempt (see [`Sim::may_preempt`]) is never parked: it can be
    /// admitted with more GPUs asked than are free.
    async fn drain_retries(&mut self) -> Result<(), SimError> {
        loop {
            let mut woken = BTreeSet::new();
            while let Ok(key) = self.retries.try_recv() {
                if let Some(&i) = self.by_name.get(&key.name) {
                    woken.insert(i);
                }
            }
            let mut free = self.free_gpus();
            let mut reconciled = false;
            // Arrival order: the order the controller's queue would have them in.
            for i in woken
                .union(&self.parked.clone())
                .copied()
                .collect::<Vec<_>>()
            {
                let Some(job) = self.jobs[i].job.as_ref().filter(|_| !self.jobs[i].ended) else {
                    self.parked.remove(&i);
                    continue;
                };
                if needs_allocation(job)
                    && u64::from(job_gpus(job)) > free
                    && !self.may_preempt(job)
                {
                    self.parked.insert(i);
                    continue;
                }
                self.parked.remove(&i);
                self.reconcile(i).await?;
                reconciled = true;
                free = self.free_gpus();
            }
            if !reconciled && woken.is_empty() {
                return Ok(());
            }
            if !reconciled {
                // Everything woken was parked: nothing changed that could wake more.
                return Ok(());
            }
        }
    }

    /// Whether `job` may take room from running jobs: preemption is on, and it is preemptible
    /// and of high priority (the higher of the two; a normal job has no one below it).
    fn may_preempt(&self, job: &DIJob) -> bool {
        self.options.preemption != Preemption::Off
            && job.spec.preemptible
            && job.spec.priority == diorch_core::api::Priority::High
    }

    /// GPUs not taken by bound, live pods on nodes that are up.
    fn free_gpus(&self) -> u64 {
        let used: u64 = self
            .used_gpus
            .iter()
            .filter(|(node, _)| !self.down.contains(*node))
            .map(|(_, used)| used)
            .sum();
        let up: u64 = self
            .node_gpus
            .iter()
            .filter(|(node, _)| !self.down.contains(*node))
            .map(|(_, gpus)| gpus)
            .sum();
        up.saturating_sub(used)
    }

    /// One controller reconcile of job `i`, repeated until the planner has nothing more to do.
    async fn reconcile(&mut self, i: usize) -> Result<(), SimError> {
        for _ in 0..MAX_PASSES {
            let Some(job) = self.jobs[i].job.clone() else {
                return Ok(());
            };
            let admission = self.allocator.consult(&job).await;
            if let Some(Admission::Placed {
                fallback,
                replan,
                replicas,
                ..
            }) = &admission
            {
                let r = &mut self.jobs[i].result;
                if *replan {
                    if replicas.is_some() {
                        r.resizes += 1;
                    } else {
                        r.moves += 1;
                    }
                } else if fallback.is_some() {
                    r.fallbacks += 1;
                }
            }
            let wall = Time(VirtualClock::wall_at(self.now));
            let now = self.clock.now();
            let decision = {
                let sj = &self.jobs[i];
                let input = step::Input {
                    job: &job,
                    observed: Observed {
                        pods: sj.pods.values().collect(),
                        service: sj.service.as_ref(),
                        admission: admission.as_ref(),
                    },
                    memory: &sj.memory,
                    now,
                    wall: &wall,
                };
                step::decide(&input, &self.ctx)
            };
            let memory = self.jobs[i].memory.clone();
            let seen = self.passes.is_some().then(|| {
                let sj = &self.jobs[i];
                (sj.pods.values().cloned().collect(), sj.service.clone())
            });
            if decision.forget_service {
                self.jobs[i].memory.service_created = None;
            }
            self.jobs[i].memory.counts_held_since = decision.counts_held_since;
            if let Some(wake) = decision.wake() {
                self.wake(i, wake);
            }
            let r = &mut self.jobs[i].result;
            let mut evicted = false;
            for event in &decision.plan.events {
                match event.reason {
                    diorch_core::planner::SHRUNK_REASON => r.shrunk += 1,
                    diorch_core::planner::EVICTED_REASON => {
                        r.evicted += 1;
                        evicted = true;
                    }
                    "JobAllocated" if event.message.contains("made room by preempting") => {
                        r.preempting += 1
                    }
                    _ => {}
                }
            }
            if evicted {
                // Trace jobs report no checkpoints: an evicted job starts its work over, as the
                // GPU-seconds the allocator counts as lost say.
                let at = self.now;
                let sj = &mut self.jobs[i];
                sj.since_ms = at;
                sj.work_left = self.trace.jobs[i].work;
            }
            if decision.plan.spec_patch.is_some() {
                return Err(SimError::Job {
                    job: job.metadata.name.clone().unwrap_or_default(),
                    message:
                        "the planner asked to default task names, which trace jobs always have"
                            .into(),
                });
            }
            let mut changed = false;
            if let Some(status) = decision.plan.status.clone() {
                changed = true;
                self.write_status(i, status, now);
            }
            let mut freed = false;
            let mut writes = Vec::new();
            for action in decision.plan.actions.iter().cloned() {
                match action {
                    Action::CreatePod(pod) => {
                        let name = pod.metadata.name.clone().unwrap_or_default();
                        let ended = self.create_pod(i, *pod).await;
                        changed |= ended == Ended::Done;
                        writes.push(Write {
                            verb: Verb::Create,
                            target: Target::Pod(name),
                            ended,
                        });
                    }
                    Action::DeletePod { name, .. } => {
                        changed = true;
                        freed |= self.delete_pod(i, &name).await;
                        writes.push(Write {
                            verb: Verb::Delete,
                            target: Target::Pod(name),
                            ended: Ended::Done,
                        });
                    }
                    Action::CreateService(svc) => {
                        changed = true;
                        let name = svc.metadata.name.clone().unwrap_or_default();
                        self.jobs[i].service = Some(CachedService {
                            metadata: svc.metadata.into(),
                        });
                        self.jobs[i].memory.service_created = Some(now);
                        writes.push(Write {
                            verb: Verb::Create,
                            target: Target::Service(name),
                            ended: Ended::Done,
                        });
                    }
                    Action::DeleteService { name, .. } => {
                        changed = true;
                        self.jobs[i].service = None;
                        writes.push(Write {
                            verb: Verb::Delete,
                            target: Target::Service(name),
                            ended: Ended::Done,
                        });
                    }
                    // No gang scheduler in the simulated cluster.
                    Action::EnsurePodGroup(_) => {}
                }
            }
            let settled = step::settle(&job, &writes);
            let mut refused = None;
            if let Some(message) = settled.invalid {
                // The job as this pass's status write left it, as the executor plans from.
                let latest = self.jobs[i].job.clone().unwrap_or(job.clone());
                let failed = step::refused(&latest, message, &wall);
                if let Some(status) = failed.status.clone() {
                    changed = true;
                    self.write_status(i, status, now);
                }
                refused = Some(failed);
            }
            if let (Some(passes), Some((pods, service))) = (self.passes.as_mut(), seen) {
                passes.push(Pass {
                    job: job.clone(),
                    pods,
                    service,
                    admission: admission.clone(),
                    memory,
                    now,
                    wall: wall.clone(),
                    decision: decision.clone(),
                    writes,
                    refused,
                });
            }
            if changed {
                self.store(i);
            }
            if freed {
                self.allocator.capacity_freed().await;
            }
            if !changed {
                self.after_reconcile(i).await;
                return Ok(());
            }
        }
        Err(SimError::NoFixpoint {
            job: self.jobs[i].result.name.clone(),
        })
    }

    /// The job's status written, as the API server would store it.
    fn write_status(&mut self, i: usize, status: diorch_core::api::DIJobStatus, now: Instant) {
        if let Some(j) = self.jobs[i].job.as_mut() {
            j.status = Some(status);
        }
        self.jobs[i].memory.status_written = Some(now);
    }

    /// Looks at job `i` again `after` from now (the earliest such wake wins).
    fn wake(&mut self, i: usize, after: Duration) {
        let at = self.now.saturating_add(ms(after).max(1));
        if self.jobs[i].wake_at.is_some_and(|pending| pending <= at) {
            return;
        }
        self.jobs[i].wake_at = Some(at);
        self.push(at, Ev::Wake(i));
    }

    /// Records what the reconcile left: start, end, progress.
    async fn after_reconcile(&mut self, i: usize) {
        let phase = self.jobs[i]
            .job
            .as_ref()
            .and_then(|j| j.status.as_ref())
            .and_then(|s| s.phase);
        if phase == Some(Phase::Running) && self.jobs[i].result.started_ms.is_none() {
            self.jobs[i].result.started_ms = Some(self.now);
        }
        if let Some(p) = phase.filter(|p| p.is_terminal()) {
            let sj = &mut self.jobs[i];
            sj.ended = true;
            self.ended += 1;
            set_rate(&mut self.running, &mut sj.rate, 0.0);
            sj.result.ended_ms = Some(self.now);
            sj.result.phase = p.as_str().to_string();
            self.open -= 1;
            // Gone, as with ttlSecondsAfterFinished: 0: the pods go with it.
            let names: Vec<String> = sj.pods.keys().cloned().collect();
            for name in names {
                self.delete_pod(i, &name).await;
            }
            if let Some(job) = self.jobs[i].job.take() {
                let key = ObjectKey::of(&job.metadata);
                if let Ok(spec) =
                    serde_json::value::RawValue::from_string(self.jobs[i].spec_json.clone())
                    && let Ok(cached) = CachedJob::new(job.metadata, spec, job.status.as_ref())
                {
                    self.jobs_writer.apply_watcher_event(&Event::Delete(cached));
                }
                self.allocator.forget(&key).await;
            }
            self.allocator.capacity_freed().await;
            // One pass for a burst of endings, as the operator's re-plan loop settles them.
            if self.options.replan_after_end
                && self.replan_at.is_none()
                && !self.options.optimize_period.is_zero()
            {
                let at = self.now + REPLAN_SETTLE_MS;
                self.replan_at = Some(at);
                self.push(at, Ev::Optimize(false));
            }
            return;
        }
        self.settle(i);
        self.report_profilings(i);
    }

    /// Brings the job's work up to now and sets its rate from what it runs now; a changed rate
    /// schedules its end again.
    fn settle(&mut self, i: usize) {
        let now = self.now;
        let tj = &self.trace.jobs[i];
        let sj = &mut self.jobs[i];
        sj.work_left -= sj.rate * (now - sj.since_ms) as f64 / 1000.0;
        sj.since_ms = now;
        let Some(job) = &sj.job else { return };
        // Running, with every pod running (a pod replaced after its node went down is not).
        let running = job.status.as_ref().and_then(|s| s.phase) == Some(Phase::Running)
            && sj
                .pods
                .values()
                .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
        let collectors = tj.collector.map_or(0, |c| {
            u32::try_from(build::task_replicas(job, c)).unwrap_or(0)
        });
        let rate = if running { tj.rate(collectors) } else { 0.0 };
        if rate != sj.rate {
            set_rate(&mut self.running, &mut sj.rate, rate);
            sj.generation += 1;
            if rate > 0.0 {
                let left_ms = (sj.work_left.max(0.0) / rate * 1000.0).ceil();
                // Bounded by the input checks: work at the slowest rate is within a year.
                let at = now + left_ms.min(1e15) as u64;
                let generation = sj.generation;
                self.push(at, Ev::Finish(i, generation));
            }
        }
    }

    /// A running job with a throughput profile reports the rate at its collector count, as a
    /// DI-engine worker posts profilings once it has measured them.
    fn report_profilings(&mut self, i: usize) {
        let tj = &self.trace.jobs[i];
        let Some(c) = tj.collector else { return };
        if tj.spec.throughput.is_empty() {
            return;
        }
        let sj = &mut self.jobs[i];
        if sj.rate <= 0.0 {
            return;
        }
        let Some(job) = sj.job.as_mut() else { return };
        let count = u32::try_from(build::task_replicas(job, c)).unwrap_or(0);
        if !sj.reported.insert(count) {
            return;
        }
        let status = job.status.get_or_insert_with(Default::default);
        let profilings = status.profilings.get_or_insert_with(|| json!({}));
        if !profilings.get("collectors").is_some_and(|c| c.is_object()) {
            profilings["collectors"] = json!({});
        }
        profilings["collectors"][count.to_string()] = json!({"throughput": sj.rate});
        self.store(i);
    }
}

/// Sets a job's work rate, keeping the count of running jobs (rate above 0) in step.
fn set_rate(running: &mut u64, rate: &mut f64, to: f64) {
    match (*rate > 0.0, to > 0.0) {
        (false, true) => *running += 1,
        (true, false) => *running = running.saturating_sub(1),
        _ => {}
    }
    *rate = to;
}

fn gpus_of(pod: &UsagePod) -> u64 {
    u64::try_from(pod.requests.get(GPU) / 1000).unwrap_or(0)
}

mod cluster;
