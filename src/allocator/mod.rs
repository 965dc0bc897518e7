//! The allocator: places preemptible DIJobs on nodes through the active scheduling policy
//! (a Wasm plugin, or the built-in native one), all-or-nothing.
//!
//! It keeps its own view of the cluster from watches (nodes, and every pod's requests per
//! node: [`view`]) and a ledger of the allocations it holds, so two jobs admitted back to back
//! never get the same free capacity before either's pods exist. The controller calls
//! [`Allocator::admit`] from a reconcile when a preemptible job needs an allocation and writes
//! the answer into the job's status itself; jobs left waiting are reconciled again as soon as
//! capacity frees (a pod ends or goes, a node changes).
//!
//! Owns: admission decisions, the ledger, policy choice and fallback, the cluster view.
//! Must not touch: DIJob status or pods (the controller writes them), Wasm (the plugin
//! registry runs policies).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client};

use crate::clock::{Clock, SystemClock};
use crate::metrics::{AllocationLabels, Metrics, PolicyCallLabels};
use crate::plugin::checked::CheckedAllocation;
use crate::plugin::registry::PluginRegistry;
use crate::plugin::{self, Checked, NativePolicy, PluginError, PolicyError, SchedulingPolicy};
use diorch_core::allocation::admit::{self, AfterCall, Answer};
use diorch_core::allocation::book::{Book, Held};
use diorch_core::allocation::{optimize, replan};
use diorch_core::api::DIJob;
use diorch_core::cached::CachedJob;
use diorch_core::key::{BoxFuture, ObjectKey};
use diorch_core::model as view;
use diorch_core::placement::{
    Placement, SlotNodes, Why, holds_placement, needs_allocation, placed_slots,
};
use diorch_core::planner::{MAX_MESSAGE_BYTES, clip};
use diorch_core::resources::Resources;
use diorch_core::validate;

pub use diorch_core::placement::Admission;

/// Annotation on a DIJob naming the policy plugin that places it (overrides `--default-policy`).
pub const POLICY_ANNOTATION: &str = "diorch.io/policy";

/// The built-in policies, as the `--builtin-policy` and `diorch simulate --fallback` flags
/// name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BuiltinPolicy {
    /// Fill the fullest nodes first (keeps whole GPU nodes free).
    Binpack,
    /// One replica per node where possible.
    Spread,
    /// Bin-pack, and re-size collectors from reported throughput (docs/profilings.md).
    Goodput,
}

impl From<BuiltinPolicy> for NativePolicy {
    fn from(p: BuiltinPolicy) -> NativePolicy {
        match p {
            BuiltinPolicy::Binpack => NativePolicy::BinPack,
            BuiltinPolicy::Spread => NativePolicy::Spread,
            BuiltinPolicy::Goodput => NativePolicy::Goodput,
        }
    }
}

/// How a job that does not fit may take room from running jobs of lower priority
/// (`--preemption`; docs/preemption.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Preemption {
    /// Never: a job that does not fit waits until room frees.
    Off,
    /// Evict whole preemptible jobs of lower priority, the set that loses the least work.
    Evict,
    /// Shrink elastic tasks of lower-priority preemptible jobs toward their minReplicas first
    /// (highest ranks go); evict whole jobs only if that is not enough.
    #[default]
    Shrink,
}

impl Preemption {
    pub fn as_str(self) -> &'static str {
        match self {
            Preemption::Off => "off",
            Preemption::Evict => "evict",
            Preemption::Shrink => "shrink",
        }
    }
}

/// How the allocator chooses a policy and re-plans.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Policy plugin for jobs without the [`POLICY_ANNOTATION`]; `None` = the registry's
    /// built-in policy (which also serves when a named plugin is not loaded or fails).
    pub default_policy: Option<String>,
    /// How often `optimize` re-plans placed preemptible jobs (also at once when a job ends or
    /// nodes change). Zero turns re-planning off.
    pub optimize_period: Duration,
    /// A job is moved by re-planning at most once per this long.
    pub min_reschedule_interval: Duration,
    /// Only the leader re-plans (a standby's proposals would never be carried out).
    pub leader: crate::leader::Leadership,
    pub clock: Arc<dyn Clock>,
    /// Where shadow policies' decisions are recorded (shared with the HTTP route showing them).
    pub shadow_reports: shadow::Reports,
    /// CPU niceness of the shadow policies' thread: 19 (the lowest priority, the default) lets
    /// a running shadow call yield the core to the next admission. The price: on a CPU saturated
    /// for longer than a shadow's deadline, its call can run past that deadline and count as
    /// failed. 0 runs shadows as the operator's own threads (tests of what a shadow answers).
    pub shadow_nice: i32,
    /// Every policy call's input and answer, written to files (`--record-decisions`).
    pub record: Option<record::Recorder>,
    /// Whether and how a job that does not fit takes room from lower-priority jobs.
    pub preemption: Preemption,
    /// A job is never evicted before its pods have run this long (shrinking is not bounded).
    pub preemption_min_run_time: Duration,
    /// A job shrunk or evicted is not preempted, grown or moved again for this long.
    pub preemption_cooldown: Duration,
    /// The cluster's PriorityClasses, for jobs naming one (`spec.priorityClassName`).
    pub priority_classes: priorities::PriorityClasses,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            default_policy: None,
            optimize_period: Duration::from_secs(60),
            min_reschedule_interval: Duration::from_secs(300),
            leader: crate::leader::Leadership::always(),
            clock: Arc::new(SystemClock),
            shadow_reports: shadow::Reports::default(),
            shadow_nice: shadow::LOWEST_PRIORITY,
            record: None,
            preemption: Preemption::default(),
            preemption_min_run_time: Duration::from_secs(600),
            preemption_cooldown: Duration::from_secs(300),
            priority_classes: priorities::PriorityClasses::empty(),
        }
    }
}

/// A re-plan for one job: its slots at `replicas` (per task, if resized), by `by`.
#[derive(Clone, Debug)]
struct Proposal {
    slots: SlotNodes,
    replicas: Option<Vec<u32>>,
    by: String,
    /// Why the built-in policy re-planned instead of the requested one.
    fallback: Option<String>,
    why: Why,
    /// A shrink for a job of higher priority (handed over as such, not as a re-plan).
    preempted: Option<diorch_core::placement::Preempted>,
}

#[derive(Default)]
struct Ledger {
    seeded: bool,
    /// Held allocations and per-node usage.
    book: Book,
    /// Jobs told to wait, reconciled again when capacity frees.
    waiting: HashSet<ObjectKey>,
    /// Re-planned allocations not yet in the jobs' status.
    proposals: HashMap<ObjectKey, Proposal>,
    /// When re-planning last moved each job.
    last_moved: HashMap<ObjectKey, Instant>,
    /// Jobs whose admission is in a policy call (without the lock), and whether the job was
    /// released meanwhile (it ended or was deleted: its answer must not be held).
    calling: HashMap<ObjectKey, bool>,
    /// Evictions for jobs of higher priority not yet in the victims' status.
    evictions: HashMap<ObjectKey, diorch_core::placement::Preempted>,
    /// When each job was last shrunk or evicted (see [`Settings::preemption_cooldown`]).
    preempted_at: HashMap<ObjectKey, Instant>,
    /// The priority value of each job the book holds as confirmed, as its last reconcile saw it:
    /// a preemption looks only at the jobs below its own (no pass over every job).
    priorities: HashMap<ObjectKey, i32>,
    /// Jobs that waited where a preemption found no room: asked again after the next re-plan,
    /// when cool-downs and minimum run times may have run out (nothing else wakes them then).
    preempt_later: HashSet<ObjectKey>,
}

/// Where the allocator gets its policies: the plugin registry (or a test double).
pub trait Policies: Send + Sync {
    /// The loaded policy plugin that answers for `name`, if any.
    fn named(&self, name: &str) -> Option<Arc<dyn SchedulingPolicy>>;
    /// The built-in policy.
    fn builtin(&self) -> NativePolicy;
    /// The shadows of `name`: given the inputs `name` answers, never applied.
    fn shadows(&self, _name: &str) -> Vec<Arc<dyn SchedulingPolicy>> {
        Vec::new()
    }
}

impl Policies for PluginRegistry {
    fn named(&self, name: &str) -> Option<Arc<dyn SchedulingPolicy>> {
        self.serving(name)
            .is_some()
            .then(|| self.policy(Some(name)))
    }

    fn builtin(&self) -> NativePolicy {
        self.fallback()
    }

    fn shadows(&self, name: &str) -> Vec<Arc<dyn SchedulingPolicy>> {
        PluginRegistry::shadows(self, name)
    }
}

pub struct Allocator {
    policies: Arc<dyn Policies>,
    nodes: Store<Node>,
    /// The pods of a re-list in progress, handed to the book whole at its `InitDone`. Between
    /// re-lists the book alone holds pods (only those it counts): a pod cache beside it would
    /// keep every pod of the cluster twice.
    relisted: std::sync::Mutex<Vec<view::UsagePod>>,
    jobs: Store<CachedJob>,
    settings: Settings,
    ledger: tokio::sync::Mutex<Ledger>,
    metrics: Arc<Metrics>,
    retry: futures::channel::mpsc::UnboundedSender<ObjectKey>,
    /// Asks for an optimize pass before the period is up.
    replan: tokio::sync::Notify,
    /// Whether the book has taken in the pod cache's first full list.
    book_synced: tokio::sync::watch::Sender<bool>,
    /// The nodes' models, parsed once per node version.
    node_models: std::sync::Mutex<NodeModels>,
    /// Shadow policies' calls, off the critical path.
    shadows: shadow::Shadows,
}

fn job_key(job: &DIJob) -> ObjectKey {
    ObjectKey::of(&job.metadata)
}

/// Per-node usage of an allocation: each slot's node, its task's requests.
fn usage_of(job: &DIJob, slots: &SlotNodes) -> Vec<(String, Resources)> {
    let requests = view::task_requests(job);
    // One entry per node, not per replica: held for every placed job, it is kept small.
    let mut per_node: BTreeMap<&str, Resources> = BTreeMap::new();
    for ((_, task), node) in view::slot_pods(job).iter().zip(slots.as_slice()) {
        if !node.is_empty() {
            per_node.entry(node).or_default().add(&requests[*task]);
        }
    }
    per_node
        .into_iter()
        .map(|(node, r)| (node.to_string(), r))
        .collect()
}

/// A job a re-plan may move, as cached, and whether its priority is high.
/// A job of an optimize group, besides its model: its key, the cached job and where it is.
type Placed<'a> = (ObjectKey, &'a Arc<CachedJob>, SlotNodes);

type Candidate = (Arc<CachedJob>, bool);

/// The controller asks the allocator through the core's contract.
impl Placement for Allocator {
    fn consult<'a>(&'a self, job: &'a DIJob) -> BoxFuture<'a, Option<Admission>> {
        Box::pin(Allocator::consult(self, job))
    }

    fn forget(&self, job: ObjectKey) -> BoxFuture<'_, ()> {
        Box::pin(async move { Allocator::forget(self, &job).await })
    }

    fn ready(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            // A dropped cache writer means the watch task ended: never ready, as before.
            if self.wait_until_ready().await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }
}

impl Allocator {
    /// The allocator over the given caches, and the stream of jobs to reconcile again when
    /// capacity frees. Feeding the caches is the caller's ([`Allocator::start`] watches).
    pub fn new(
        policies: Arc<dyn Policies>,
        nodes: Store<Node>,
        jobs: Store<CachedJob>,
        settings: Settings,
        metrics: Arc<Metrics>,
    ) -> (
        Arc<Allocator>,
        futures::channel::mpsc::UnboundedReceiver<ObjectKey>,
    ) {
        let (retry, retries) = futures::channel::mpsc::unbounded();
        let shadows = shadow::Shadows::new(
            metrics.clone(),
            settings.shadow_reports.clone(),
            settings.shadow_nice,
        );
        let allocator = Arc::new(Allocator {
            shadows,
            policies,
            nodes,
            relisted: std::sync::Mutex::new(Vec::new()),
            jobs,
            settings,
            ledger: tokio::sync::Mutex::new(Ledger::default()),
            metrics,
            retry,
            replan: tokio::sync::Notify::new(),
            book_synced: tokio::sync::watch::Sender::new(false),
            node_models: std::sync::Mutex::new(NodeModels::default()),
        });
        (allocator, retries)
    }

    /// Starts the allocator with its watch of all nodes, over every pod's changes (`pods`, the
    /// controller's watch of all pods, slimmed) and returns it with the stream of jobs to
    /// reconcile again when capacity frees. `jobs` is the controller's cache.
    pub fn start(
        client: Client,
        policies: Arc<dyn Policies>,
        jobs: Store<CachedJob>,
        pods: impl futures::Stream<Item = watcher::Event<view::UsagePod>> + Send + 'static,
        settings: Settings,
        metrics: Arc<Metrics>,
    ) -> (
        Arc<Allocator>,
        futures::channel::mpsc::UnboundedReceiver<ObjectKey>,
    ) {
        let (node_store, mut node_writer) = reflector::store::<Node>();
        let (allocator, retries) =
            Allocator::new(policies, node_store.clone(), jobs, settings, metrics);
        // Each event with whether it may change what fits (compared with the cached node
        // before the cache takes it in, as `reflect` would).
        let nodes = watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
            .default_backoff()
            .modify(view::trim_node)
            .map(move |event| {
                // A watch error changes nothing cached (the watcher retries).
                let Ok(event) = event else { return false };
                let changed = match &event {
                    watcher::Event::Apply(node) => view::node_changed(
                        node_store.get(&ObjectRef::from_obj(node)).as_deref(),
                        node,
                    ),
                    watcher::Event::Delete(_) | watcher::Event::InitDone => true,
                    watcher::Event::Init | watcher::Event::InitApply(_) => false,
                };
                node_writer.apply_watcher_event(&event);
                changed
            });
        let wake = allocator.clone();
        tokio::spawn(async move {
            let mut nodes = std::pin::pin!(nodes);
            let mut pods = std::pin::pin!(pods);
            loop {
                // A node change may add room; a pod frees room when it ends or goes.
                let frees = tokio::select! {
                    event = nodes.next() => match event {
                        None => break,
                        Some(changed) => {
                            if changed {
                                wake.ask_replan("a node changed");
                            }
                            changed
                        }
                    },
                    event = pods.next() => match event {
                        None => break,
                        Some(event) => {
                            wake.pod_event(&event).await;
                            match event {
                                watcher::Event::Delete(_) => true,
                                watcher::Event::Apply(pod) => pod.terminal,
                                _ => false,
                            }
                        }
                    },
                };
                if frees {
                    wake.capacity_freed().await;
                }
            }
        });
        if !allocator.settings.optimize_period.is_zero() {
            let optimizer = allocator.clone();
            tokio::spawn(async move { optimizer.run_optimizer().await });
        }
        (allocator, retries)
    }

    /// Resolves once the node cache has synced and the book has taken in the first pod list.
    pub async fn wait_until_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.nodes.wait_until_ready().await?;
        // The sender lives in `self`, so this cannot see it closed.
        let _ = self
            .book_synced
            .subscribe()
            .wait_for(|synced| *synced)
            .await;
        Ok(())
    }

    /// Keeps the book's pod index in step with every pod's changes: [`Allocator::start`] feeds it
    /// each event of the pod watch it is given.
    pub async fn pod_event(&self, event: &watcher::Event<view::UsagePod>) {
        match event {
            watcher::Event::Apply(pod) => self.ledger.lock().await.book.apply_pod(pod),
            watcher::Event::Delete(pod) => self.ledger.lock().await.book.delete_pod(pod),
            // A re-list replaces what the book knew of pods once it is whole.
            watcher::Event::Init => self.relisted().clear(),
            watcher::Event::InitApply(pod) => self.relisted().push(pod.clone()),
            watcher::Event::InitDone => {
                let pods = std::mem::take(&mut *self.relisted());
                self.ledger.lock().await.book.reset_pods(pods.iter());
                self.book_synced.send_replace(true);
            }
        }
    }

    fn relisted(&self) -> std::sync::MutexGuard<'_, Vec<view::UsagePod>> {
        // Every holder pushes, clears or takes: a panic cannot leave it half-changed.
        self.relisted.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Room may have freed outside the allocator's own releases (a pod ended or went): every
    /// waiting job is sent to the controller again. [`Allocator::start`]'s pod events call it; the
    /// simulator calls it for its simulated pods.
    pub async fn capacity_freed(&self) {
        self.wake_waiting().await;
    }

    /// Sends every waiting job to the controller again.
    async fn wake_waiting(&self) {
        let waiting = std::mem::take(&mut self.ledger.lock().await.waiting);
        for job in waiting {
            // The receiver lives as long as the controller; after that nothing needs waking.
            let _ = self.retry.unbounded_send(job);
        }
    }

    /// Keeps the ledger in step with a job that needs no allocation now (called from every
    /// reconcile of a preemptible job, and for jobs that are no longer preemptible or active).
    pub async fn observe(&self, job: &DIJob) {
        let key = job_key(job);
        let mut ledger = self.ledger.lock().await;
        let active = holds_placement(job);
        if !active {
            ledger.priorities.remove(&key);
            let freed = ledger.book.release(&key).is_some();
            ledger.proposals.remove(&key);
            if let Some(released) = ledger.calling.get_mut(&key) {
                *released = true;
            }
            drop(ledger);
            if freed {
                self.wake_waiting().await;
                // A finished job frees room others may grow into.
                self.ask_replan("a job ended");
            }
            return;
        }
        if ledger.evictions.contains_key(&key) {
            // Its room is another job's already; its status follows.
            return;
        }
        let slots = placed_slots(job);
        if let Some(proposal) = ledger.proposals.get(&key) {
            if proposal.slots == slots {
                ledger.proposals.remove(&key);
            } else {
                // The re-plan is not in the status yet: it stays what the job holds.
                return;
            }
        }
        let held = Held {
            uid: job.metadata.uid.clone().unwrap_or_default(),
            usage: usage_of(job, &slots),
            slots,
            confirmed: true,
            since: self.settings.clock.now(),
        };
        ledger.priorities.insert(key.clone(), self.priority_of(job));
        ledger.book.hold(key, held);
    }

    /// The model of `job` a policy sees, with its priority value (see [`Self::priority_of`]).
    pub(super) fn model_of(
        &self,
        job: &DIJob,
        node_index: &HashMap<&str, u32>,
        age: u64,
    ) -> plugin::Job {
        let mut model = view::model_job(job, node_index, age);
        model.priority = self.priority_of(job);
        model
    }

    /// The priority value a policy sees and preemption compares.
    pub(super) fn priority_of(&self, job: &DIJob) -> i32 {
        self.settings.priority_classes.value(&job.spec)
    }

    /// Forgets a deleted job.
    pub async fn forget(&self, key: &ObjectKey) {
        let freed = {
            let mut ledger = self.ledger.lock().await;
            ledger.proposals.remove(key);
            ledger.last_moved.remove(key);
            ledger.evictions.remove(key);
            ledger.preempted_at.remove(key);
            ledger.preempt_later.remove(key);
            ledger.priorities.remove(key);
            if let Some(released) = ledger.calling.get_mut(key) {
                *released = true;
            }
            ledger.book.release(key).is_some()
        };
        if freed {
            self.wake_waiting().await;
            self.ask_replan("a job was deleted");
        }
    }

    /// What the controller should do about `job`'s placement in this reconcile: a first
    /// allocation, a re-planned one, or nothing (`None`; the ledger follows the status).
    pub async fn consult(&self, job: &DIJob) -> Option<Admission> {
        // An invalid job is failed by the controller without pods: nothing to place, and its
        // numbers may be anything (slots are counted from them).
        if validate::validate(job).is_err() {
            return None;
        }
        if let Some(evicted) = self.eviction(job).await {
            return Some(evicted);
        }
        if needs_allocation(job) {
            return Some(self.admit(job).await);
        }
        if !job.spec.preemptible && job.status.as_ref().is_none_or(|s| s.allocation.is_none()) {
            return None;
        }
        self.observe(job).await;
        let ledger = self.ledger.lock().await;
        let proposal = ledger.proposals.get(&job_key(job))?;
        if let Some(preempted) = &proposal.preempted {
            return Some(Admission::Preempted(preempted.clone()));
        }
        Some(Admission::Placed {
            nodes: proposal.slots.clone(),
            by: proposal.by.clone(),
            fallback: proposal.fallback.clone(),
            replan: true,
            replicas: proposal.replicas.clone(),
            why: proposal.why.clone(),
        })
    }

    async fn run_optimizer(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.settings.optimize_period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // the first tick is immediate; nothing is placed yet
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = self.replan.notified() => {
                    // Let a burst of endings and node events settle into one pass.
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
            if self.wait_until_ready().await.is_err() {
                return;
            }
            if !self.settings.leader.is_leader() {
                continue;
            }
            self.clone().optimize_on_own_thread().await;
        }
    }

    /// [`Allocator::optimize_once`] on a thread and runtime started for this pass and ended
    /// with it (its Wasm calls on that runtime's blocking threads, ended with it too), which
    /// hands the pass's freed pages back to the OS before it ends.
    ///
    /// Why: a pass models every placed preemptible job at once (~5 KB each at its peak:
    /// models, plans, the Wasm call's columns), all freed when it ends. Allocated on the
    /// operator's runtime thread, those blocks shared allocator pages with the caches'
    /// long-lived objects and kept them resident; and mimalloc returns freed pages to the OS
    /// only at a later page free, which a quiet operator may not make. A thread's pages are
    /// its own, so the pass's pages are empty when it ends. On a real API server with 2 000
    /// preemptible jobs the operator's RSS grew by 20.1 KiB per job (12.9 KiB with re-plans
    /// off); with this, 16.2 KiB (issue 39's note of 2026-11-28). A thread and a runtime cost
    /// well under a millisecond, once a minute. Should either not start, the pass runs here.
    async fn optimize_on_own_thread(self: Arc<Self>) {
        let (done, finished) = tokio::sync::oneshot::channel::<()>();
        let optimizer = self.clone();
        let spawned = std::thread::Builder::new()
            .name("diorch-optimize".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                match runtime {
                    Ok(runtime) => {
                        runtime.block_on(optimizer.optimize_once());
                        // Its blocking threads (the Wasm calls) end with it.
                        drop(runtime);
                        drop(optimizer);
                        crate::heap::release_freed_pages();
                        let _ = done.send(());
                    }
                    // `done` dropped: the caller runs the pass itself.
                    Err(e) => tracing::warn!(error = %e,
                        "cannot start a runtime for the re-plan; it runs on the operator's"),
                }
            });
        match spawned {
            Ok(_) => {
                if finished.await.is_ok() {
                    return;
                }
            }
            Err(e) => tracing::warn!(error = %e,
                "cannot start a thread for the re-plan; it runs on the operator's runtime"),
        }
        self.optimize_once().await;
    }

    /// One re-plan of every placed preemptible job, grouped by policy (groups with the
    /// highest-priority job first; each sees the others where they are). Applies the changed
    /// allocations through the controller and returns the decisions.
    ///
    /// A policy plugin's `optimize` is called without the ledger lock; its plan is applied
    /// only if every job of the group is still where the plan started from and, when the
    /// ledger changed meanwhile, the plan still fits what is free now. Else nothing of that
    /// group moves in this pass (counted as `stale`) and another pass follows shortly.
    pub async fn optimize_once(&self) -> Vec<optimize::Decision> {
        let started = Instant::now();
        // The cached jobs, not decoded ones: a decoded job holds its pod templates (~15 KB for
        // three tasks), and a pass over 5 000 jobs held 74 MB of them.
        let mut groups: HashMap<Option<String>, Vec<Candidate>> = HashMap::new();
        {
            let mut ledger = self.ledger.lock().await;
            if !ledger.seeded {
                self.seed(&mut ledger);
            }
            // Placed, active, preemptible jobs with nothing in flight.
            for cached in self.jobs.state() {
                // Most jobs are not preemptible: they are passed over without decoding.
                if !cached.preemptible() {
                    continue;
                }
                let Ok(job) = cached.decode() else { continue };
                if validate::validate(&job).is_err() {
                    continue;
                }
                let key = job_key(&job);
                // A job preempted less than its cool-down ago is not moved or grown either.
                let in_flight = ledger.proposals.contains_key(&key)
                    || ledger.evictions.contains_key(&key)
                    || self.cooling(&ledger, &key, self.settings.clock.now());
                if !replan::candidate(&job, ledger.book.get(&key), in_flight) {
                    continue;
                }
                let high = job.spec.priority == diorch_core::api::Priority::High;
                groups
                    .entry(self.policy_name(&job))
                    .or_default()
                    .push((cached, high));
            }
        }
        let mut groups: Vec<(Option<String>, Vec<Candidate>)> = groups.into_iter().collect();
        let top = |jobs: &[Candidate]| jobs.iter().any(|(_, high)| *high);
        groups.sort_by(|a, b| replan::group_first((&a.0, top(&a.1)), (&b.0, top(&b.1))));

        let mut decisions = Vec::new();
        for (requested, jobs) in groups {
            let jobs: Vec<Arc<CachedJob>> = jobs.into_iter().map(|(job, _)| job).collect();
            decisions.extend(self.optimize_group(requested.as_deref(), &jobs).await);
        }
        self.grow_back().await;
        self.preempt_again().await;
        self.metrics
            .allocator
            .optimize_duration
            .observe(started.elapsed().as_secs_f64());
        decisions
    }

    /// Re-plans one policy's group and applies the plan (see [`Allocator::optimize_once`]).
    /// Each job of the group is modelled for the policy once; [`Placed`] is the rest of it.
    async fn optimize_group(
        &self,
        requested: Option<&str>,
        jobs: &[Arc<CachedJob>],
    ) -> Vec<optimize::Decision> {
        let mut ledger = self.ledger.lock().await;
        let keys: HashSet<ObjectKey> = jobs.iter().map(|j| ObjectKey::of(&j.metadata)).collect();
        let nodes = self.model_nodes_without(&ledger, &keys);
        let node_index = view::node_index(&nodes);
        let now = self.settings.clock.wall();
        // Each job decoded once here and dropped (a moved job is decoded again below).
        let mut models: Vec<(plugin::Job, Placed<'_>)> = jobs
            .iter()
            .filter_map(|cached| {
                let j = cached.decode().ok()?;
                let age = j.metadata.creation_timestamp.as_ref().map_or(0, |t| {
                    u64::try_from(now.duration_since(t.0).as_secs()).unwrap_or(0)
                });
                let model = self.model_of(&j, &node_index, age);
                Some((model, (job_key(&j), cached, placed_slots(&j))))
            })
            .collect();
        // Highest priority first, then oldest.
        models.sort_by(|a, b| replan::policy_order(&a.0, &b.0));
        // The models go to the policy as they are, not copied (one model per job, ~0.8 KB,
        // was held twice at the peak of a pass); `placed` holds the rest, in the same order.
        let (job_models, placed): (Vec<plugin::Job>, Vec<_>) = models.into_iter().unzip();
        let job_models: Arc<[plugin::Job]> = job_models.into();
        let current: HashMap<ObjectKey, SlotNodes> = placed
            .iter()
            .map(|(key, _, slots)| (key.clone(), slots.clone()))
            .collect();
        // A plan names jobs as the policy sees them: by the model's key string.
        let previous: Vec<plugin::JobPlan> = job_models
            .iter()
            .zip(&placed)
            .map(|(m, (_, _, slots))| plugin::JobPlan {
                job: m.key.clone(),
                nodes: Vec::from(slots.clone()),
                replicas: None,
                reason: None,
            })
            .collect();
        let mut nodes = nodes;

        let builtin = Checked::builtin(self.policies.builtin());
        let mut answer = None;
        // The requested plugin's component, and why the built-in policy planned instead of it.
        let mut plugin_sha = None;
        let mut fallback = None;
        if let Some(policy) = requested.and_then(|name| self.policies.named(name)) {
            let policy = Checked::plugin(policy);
            let by = policy.by().to_string();
            plugin_sha = policy.why(None).sha256;
            let version = ledger.book.version();
            drop(ledger);
            let started = Instant::now();
            let active = self.shadows.active_call();
            let plan = policy
                .optimize(job_models.clone(), nodes.clone(), previous.clone())
                .await;
            drop(active);
            if let Some(name) = requested {
                self.observe_policy_call(name, &by, "optimize", started);
                self.record(name, &by, || record::Decision::Optimize {
                    jobs: job_models.clone(),
                    nodes: nodes.clone(),
                    previous: previous.clone(),
                    answer: plan.clone().map_err(|e| e.to_string()),
                });
                let shadows = self.policies.shadows(name);
                if !shadows.is_empty() {
                    let call = shadow::Call::Optimize {
                        jobs: job_models.clone(),
                        nodes: nodes.clone(),
                        previous: previous.clone(),
                        active: plan.clone().map_err(|e| shadow::Failure(e.to_string())),
                    };
                    self.shadows.submit(name, &by, shadows, call);
                }
            }
            ledger = self.ledger.lock().await;
            let moved_on = replan::moved_on(&current, &ledger.book, |key| {
                ledger.proposals.contains_key(key)
            });
            let book_changed = ledger.book.version() != version;
            let still_fits = |p: &[plugin::JobPlan]| {
                let named = p.iter().flat_map(|e| e.nodes.iter().map(String::as_str));
                let fresh = self.model_nodes_named(&ledger, &keys, named);
                policy.plan_fits(&job_models, &fresh, p)
            };
            match replan::after_call(moved_on, book_changed, plan, still_fits) {
                replan::AfterCall::Stale(why) => return self.stale_group(&by, &why),
                replan::AfterCall::Plan(plan) => answer = Some((by, plan)),
                replan::AfterCall::Fallback(e) => {
                    self.count_fallback(&by, e.reason());
                    let error = clip(&e.to_string(), MAX_MESSAGE_BYTES);
                    tracing::warn!(policy = %by, reason = e.reason(), %error,
                        "optimize failed; the built-in policy re-plans instead");
                    fallback = Some(error);
                }
            }
            if book_changed {
                // A fallback below plans on what is free now.
                nodes = self.model_nodes_without(&ledger, &keys);
            }
        }
        // The built-in policy (by choice or as the fallback), under the lock.
        let (by, plan) = match answer {
            Some(answer) => answer,
            None => match builtin.optimize_now(&job_models, &nodes, &previous) {
                Ok(plan) => {
                    self.record(requested.unwrap_or_default(), builtin.by(), || {
                        record::Decision::Optimize {
                            jobs: job_models.clone(),
                            nodes: nodes.clone(),
                            previous: previous.clone(),
                            answer: Ok(plan.clone()),
                        }
                    });
                    (builtin.by().to_string(), plan)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the built-in policy cannot re-plan either; nothing moves");
                    return Vec::new();
                }
            },
        };
        // The plan must fit around the jobs it keeps where they are (`replan::around_kept`):
        // the room around them is modelled for the jobs a plan moves.
        let group_key = |model_key: &str| {
            job_models
                .iter()
                .zip(&placed)
                .find(|(m, _)| m.key == model_key)
                .map(|(_, (key, _, _))| key.clone())
        };
        let room_around = |moving: &BTreeSet<String>| {
            let moving: HashSet<ObjectKey> = moving.iter().filter_map(|k| group_key(k)).collect();
            self.model_nodes_without(&ledger, &moving)
        };
        let planned_by = by.clone();
        let fits = |moving: &BTreeSet<String>, plan: &[plugin::JobPlan]| {
            let fit = Checked::new((), planned_by.clone()).plan_fits(
                &job_models,
                &room_around(moving),
                plan,
            );
            if let Err(e) = &fit {
                tracing::info!(policy = %planned_by, kept = keys.len() - moving.len(),
                    error = %clip(&e.to_string(), MAX_MESSAGE_BYTES),
                    "the plan takes room of jobs it keeps where they are; the built-in policy plans the others around them");
            }
            fit
        };
        let rebuild = |moving: &BTreeSet<String>| {
            let jobs: Vec<plugin::Job> = job_models
                .iter()
                .filter(|m| moving.contains(&m.key))
                .cloned()
                .collect();
            let previous: Vec<plugin::JobPlan> = previous
                .iter()
                .filter(|p| moving.contains(&p.job))
                .cloned()
                .collect();
            builtin.optimize_now(&jobs, &room_around(moving), &previous)
        };
        let (by, plan) = match replan::around_kept(plan, keys.len(), fits, rebuild) {
            Ok(fitted) if fitted.by_builtin => {
                if by != builtin.by() {
                    fallback = Some(format!(
                        "the plan of {by} takes room of jobs it keeps where they are"
                    ));
                }
                (builtin.by().to_string(), fitted.plan)
            }
            Ok(fitted) => (by, fitted.plan),
            Err(e) => {
                tracing::warn!(error = %e, "the built-in policy cannot re-plan around the kept jobs; nothing moves");
                return Vec::new();
            }
        };
        let counts: HashMap<ObjectKey, Vec<u32>> = job_models
            .iter()
            .zip(&placed)
            .map(|(m, (key, _, _))| (key.clone(), m.tasks.iter().map(|t| t.replicas).collect()))
            .collect();
        let group = optimize::decide(
            &plan,
            &current,
            &counts,
            &ledger.last_moved,
            self.settings.clock.now(),
            self.settings.min_reschedule_interval,
        );
        for decision in &group {
            let result = match decision {
                optimize::Decision::Move {
                    job,
                    slots,
                    replicas,
                    moved,
                } => {
                    let found = job_models
                        .iter()
                        .zip(&placed)
                        .find(|(_, (key, _, _))| key == job);
                    if let Some((key, Ok(dijob))) = found.map(|(_, (key, c, _))| (key, c.decode()))
                    {
                        let sized = match replicas {
                            Some(counts) => diorch_core::build::with_task_replicas(&dijob, counts),
                            None => dijob.clone(),
                        };
                        ledger.book.hold(
                            key.clone(),
                            Held {
                                uid: dijob.metadata.uid.clone().unwrap_or_default(),
                                usage: usage_of(&sized, slots),
                                slots: slots.clone(),
                                confirmed: true,
                                since: self.settings.clock.now(),
                            },
                        );
                        let by_plugin = by != builtin.by();
                        let model_key = found.map(|(m, _)| m.key.as_str());
                        let reason = plan
                            .iter()
                            .find(|e| Some(e.job.as_str()) == model_key)
                            .and_then(|e| e.reason.clone());
                        ledger.proposals.insert(
                            key.clone(),
                            Proposal {
                                slots: slots.clone(),
                                replicas: replicas.clone(),
                                by: by.clone(),
                                fallback: if by_plugin { None } else { fallback.clone() },
                                why: Why {
                                    sha256: if by_plugin { plugin_sha.clone() } else { None },
                                    reason,
                                },
                                preempted: None,
                            },
                        );
                        ledger
                            .last_moved
                            .insert(key.clone(), self.settings.clock.now());
                        let _ = self.retry.unbounded_send(key.clone());
                    }
                    tracing::info!(job = %job, policy = %by, moved, "re-plan moves the job");
                    "moved"
                }
                optimize::Decision::Suppressed { job, retry_in } => {
                    tracing::info!(job = %job, policy = %by, ?retry_in,
                        "re-plan would move the job again too soon; it stays");
                    "suppressed"
                }
            };
            self.count_decision(&by, result);
        }
        group
    }

    /// A plugin's plan that went stale during its call: nothing of its group moves now; the
    /// next pass (asked for at once) plans from what is there then.
    fn stale_group(&self, by: &str, why: &str) -> Vec<optimize::Decision> {
        tracing::info!(policy = %by, why = %clip(why, MAX_MESSAGE_BYTES),
            "the cluster changed during optimize; the plan is dropped and made again");
        self.count_decision(by, "stale");
        self.ask_replan("a plan went stale");
        Vec::new()
    }

    /// Asks the optimizer for a pass soon (a burst of asks is one pass).
    fn ask_replan(&self, why: &'static str) {
        tracing::debug!(why, "re-plan asked");
        self.replan.notify_one();
    }

    fn count_decision(&self, policy: &str, result: &str) {
        self.metrics
            .allocator
            .decisions
            .get_or_create(&AllocationLabels {
                policy: policy_label(policy),
                result: result.to_string(),
            })
            .inc();
    }

    fn count_fallback(&self, policy: &str, reason: &str) {
        self.metrics
            .allocator
            .fallbacks
            .get_or_create(&AllocationLabels {
                policy: policy_label(policy),
                result: reason.to_string(),
            })
            .inc();
    }

    /// The policy a job asks for, by name (`None` = the built-in one).
    fn policy_name(&self, job: &DIJob) -> Option<String> {
        job.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(POLICY_ANNOTATION))
            .filter(|n| !n.is_empty())
            .cloned()
            .or_else(|| self.settings.default_policy.clone())
    }

    /// Places `job` (all replicas or none). Returns the same answer again while the
    /// reservation it made is not yet in the job's status.
    ///
    /// A policy plugin is called without the ledger lock (its call is bounded by its deadline,
    /// but the wait for a call slot is not, and every other admission would wait meanwhile).
    /// If the ledger changed during the call, the answer is checked again against what is free
    /// now, and a stale one is asked for again, at most `PLUGIN_TRIES` times; then the
    /// built-in policy decides under the lock, as it does when the plugin fails. The built-in
    /// policy is not a plugin call (microseconds): it always runs under the lock.
    pub async fn admit(&self, job: &DIJob) -> Admission {
        let key = job_key(job);
        let uid = job.metadata.uid.clone().unwrap_or_default();
        let want = view::slot_pods(job).len();
        let age = job.metadata.creation_timestamp.as_ref().map_or(0, |t| {
            u64::try_from(self.settings.clock.wall().duration_since(t.0).as_secs()).unwrap_or(0)
        });
        let requested = self.policy_name(job);
        let builtin = Checked::builtin(self.policies.builtin());
        let (plugin, mut fallback) = match requested.as_deref() {
            None => (None, None),
            Some(name) => match self.policies.named(name) {
                Some(p) => (
                    Some((name, Checked::plugin(p), self.policies.shadows(name))),
                    None,
                ),
                None => (None, Some(format!("policy plugin {name} is not loaded"))),
            },
        };

        let mut ledger = self.ledger.lock().await;
        if !ledger.seeded {
            self.seed(&mut ledger);
        }
        let now = self.settings.clock.now();
        ledger.book.retain(|h| admit::keep(h, now));
        if let Some(answer) = admit::reservation(ledger.book.get(&key), &uid, want) {
            return answer;
        }

        if let Some((name, policy, shadows)) = plugin {
            let by = policy.by().to_string();
            let mut tries = 0;
            let failed = loop {
                tries += 1;
                let nodes = self.model_nodes(&ledger, &key);
                let node_index = view::node_index(&nodes);
                let model = Arc::new(self.model_of(job, &node_index, age));
                let version = ledger.book.version();
                // Waiting already: a job that frees room during the call wakes this one, which
                // may then fit though the answer below says it does not.
                ledger.waiting.insert(key.clone());
                ledger.calling.insert(key.clone(), false);
                drop(ledger);

                let started = Instant::now();
                let active = self.shadows.active_call();
                let answer = policy.allocate(model.clone(), nodes.clone()).await;
                drop(active);
                self.observe_call(started);
                self.observe_policy_call(name, &by, "allocate", started);
                let why = why_of(&answer, &policy);
                let answer = answer_of(answer);
                self.record(name, &by, || record::Decision::Allocate {
                    job: model.clone(),
                    nodes: nodes.clone(),
                    answer: answer.clone(),
                });
                if !shadows.is_empty() {
                    let call = shadow::Call::Allocate {
                        job: model.clone(),
                        nodes: nodes.clone(),
                        active: answer.clone(),
                    };
                    self.shadows.submit(name, &by, shadows.clone(), call);
                }

                ledger = self.ledger.lock().await;
                let released = ledger.calling.remove(&key) == Some(true);
                let next = admit::after_call(released, answer, tries, &by, |slots| {
                    if ledger.book.version() == version {
                        return None;
                    }
                    self.fits_now(&ledger, &key, &policy, &model, slots)
                        .err()
                        .map(|e| e.to_string())
                });
                match next {
                    AfterCall::Ended => {
                        ledger.waiting.remove(&key);
                        return admit::ended(&by);
                    }
                    AfterCall::Place(slots) => {
                        return self.place(&mut ledger, job, slots, &by, None, why);
                    }
                    AfterCall::Wait(no_fit) => {
                        // A 0.5.0 component may make room; older ones answer none at once.
                        let (guard, placed) = self
                            .preempt_by_plugin(ledger, job, &policy, &model, &nodes, &why)
                            .await;
                        ledger = guard;
                        if let Some(placed) = placed {
                            return placed;
                        }
                        return self.wait(&mut ledger, job, &model, &nodes, &no_fit, &by, why);
                    }
                    AfterCall::AskAgain { why } => {
                        // Another admission took room this answer needs: ask again.
                        tracing::debug!(job = %key, policy = %by, tries, error = %why,
                            "the cluster changed during the policy call; asking again");
                    }
                    AfterCall::Fallback(f) => break f,
                }
            };
            // A failing plugin must not stall admission, nor one whose answers keep going
            // stale: the built-in policy answers.
            self.count_fallback(&by, failed.reason);
            if failed.reason == admit::CONTENDED {
                tracing::info!(job = %key, policy = %by, tries,
                    "other jobs took the room of each policy answer; the built-in policy places this job");
            } else {
                tracing::warn!(job = %key, policy = %by, reason = failed.reason, error = %failed.message,
                    "policy failed; the built-in policy places this job");
            }
            fallback = Some(failed.message);
        }

        // The built-in policy, under the lock: what it sees cannot change under it.
        let nodes = self.model_nodes(&ledger, &key);
        let node_index = view::node_index(&nodes);
        let model = self.model_of(job, &node_index, age);
        let by = builtin.by();
        let started = Instant::now();
        let answer = builtin.allocate_now(&model, &nodes);
        let why = why_of(&answer, &builtin);
        let answer = answer_of(answer);
        self.observe_call(started);
        self.record(requested.as_deref().unwrap_or_default(), by, || {
            record::Decision::Allocate {
                job: Arc::new(model.clone()),
                nodes: nodes.clone(),
                answer: answer.clone(),
            }
        });
        match answer {
            Answer::Slots(slots) => self.place(&mut ledger, job, slots, by, fallback, why),
            Answer::NoFit(no_fit) => {
                match self.preempt(&mut ledger, job, &model, &nodes, fallback) {
                    Some(placed) => placed,
                    None => self.wait(&mut ledger, job, &model, &nodes, &no_fit, by, why),
                }
            }
            Answer::Failed {
                message: no_fit, ..
            } => self.wait(&mut ledger, job, &model, &nodes, &no_fit, by, why),
        }
    }

    /// Whether `slots`, answered for `key`, still fit what is free now (only the nodes they
    /// name are modelled: O(slots + held by `key`)).
    fn fits_now<P>(
        &self,
        ledger: &Ledger,
        key: &ObjectKey,
        policy: &Checked<P>,
        model: &plugin::Job,
        slots: &SlotNodes,
    ) -> Result<(), PluginError> {
        let keys = HashSet::from([key.clone()]);
        let slots = slots.as_slice();
        let nodes = self.model_nodes_named(ledger, &keys, slots.iter().map(String::as_str));
        policy.fits(model, &nodes, slots)
    }

    /// Records `slots` as `job`'s reservation.
    fn place(
        &self,
        ledger: &mut Ledger,
        job: &DIJob,
        slots: SlotNodes,
        by: &str,
        fallback: Option<String>,
        why: Why,
    ) -> Admission {
        let key = job_key(job);
        let held = Held {
            uid: job.metadata.uid.clone().unwrap_or_default(),
            usage: usage_of(job, &slots),
            slots: slots.clone(),
            confirmed: false,
            since: self.settings.clock.now(),
        };
        ledger.book.hold(key.clone(), held);
        ledger.waiting.remove(&key);
        let (answer, result) = admit::placed(slots, by, fallback, why);
        self.count_decision(by, result);
        tracing::info!(job = %key, policy = %by, result, "allocation decided");
        answer
    }

    /// Tells `job` to wait for capacity (`no_fit`, the policy's words; `nodes` is what it saw).
    #[allow(clippy::too_many_arguments)]
    fn wait(
        &self,
        ledger: &mut Ledger,
        job: &DIJob,
        model: &plugin::Job,
        nodes: &[plugin::Node],
        no_fit: &str,
        by: &str,
        why: Why,
    ) -> Admission {
        let key = job_key(job);
        ledger.waiting.insert(key.clone());
        self.count_decision(by, "waiting");
        tracing::info!(job = %key, policy = %by, result = "waiting", "allocation decided");
        admit::waiting(
            &view::describe_need(model),
            &view::describe_free(nodes),
            no_fit,
            by,
            why,
        )
    }

    /// Fills the ledger from the cached jobs once, so allocations made before a restart count.
    fn seed(&self, ledger: &mut Ledger) {
        for cached in self.jobs.state() {
            let Ok(job) = cached.decode() else { continue };
            if !holds_placement(&job) || validate::validate(&job).is_err() {
                continue;
            }
            let slots = placed_slots(&job);
            if slots.as_slice().iter().all(String::is_empty) {
                continue;
            }
            ledger
                .priorities
                .insert(job_key(&job), self.priority_of(&job));
            ledger.book.hold(
                job_key(&job),
                Held {
                    uid: job.metadata.uid.clone().unwrap_or_default(),
                    usage: usage_of(&job, &slots),
                    slots,
                    confirmed: true,
                    since: self.settings.clock.now(),
                },
            );
        }
        ledger.seeded = true;
    }

    /// Records a policy plugin's call time beside its shadows' (see [`shadow`]).
    fn observe_policy_call(&self, policy: &str, by: &str, call: &'static str, started: Instant) {
        self.metrics
            .allocator
            .policy_call_duration
            .get_or_create(&PolicyCallLabels {
                policy: policy.to_string(),
                plugin: policy_label(by),
                role: "active",
                call,
            })
            .observe(started.elapsed().as_secs_f64());
    }

    /// Hands a decision to the recorder, if decisions are recorded (`decision` is made only
    /// then).
    fn record(&self, policy: &str, by: &str, decision: impl FnOnce() -> record::Decision) {
        if let Some(recorder) = &self.settings.record {
            recorder.record(policy, by, decision());
        }
    }

    /// What the shadows of `policy` did (`GET /v1/policies/NAME/shadow`).
    pub fn shadow_report(&self, policy: &str) -> Option<shadow::Report> {
        self.shadows.report(policy)
    }

    /// Records a policy call's time (the capacity check of its answer included).
    fn observe_call(&self, started: Instant) {
        self.metrics
            .allocator
            .call_duration
            .observe(started.elapsed().as_secs_f64());
    }
}

/// A checked policy answer, as the admission rules read it (texts bounded).
pub(crate) fn answer_of(answer: Result<CheckedAllocation, PluginError>) -> Answer {
    match answer {
        Ok(a) => Answer::Slots(a.slots),
        Err(PluginError::Refused {
            error: PolicyError::NoFit(why),
            ..
        }) => Answer::NoFit(clip(&why, MAX_MESSAGE_BYTES)),
        Err(e) => Answer::Failed {
            reason: e.reason(),
            message: clip(&e.to_string(), MAX_MESSAGE_BYTES),
        },
    }
}

/// What `answer` of `policy` records beside its slots: the component, and the reason when it
/// placed the job.
fn why_of<P>(answer: &Result<CheckedAllocation, PluginError>, policy: &Checked<P>) -> Why {
    match answer {
        Ok(a) => a.why.clone(),
        Err(_) => policy.why(None),
    }
}

/// Policy label values without the version hash, so series stay few across uploads.
fn policy_label(describe: &str) -> String {
    describe.split('@').next().unwrap_or(describe).to_string()
}

mod models;
use models::NodeModels;
mod preempt;
pub mod priorities;
pub mod record;
pub mod shadow;

#[cfg(test)]
mod tests;
