//! The executor: runs the kube-runtime Controller for DIJobs over trimmed reflector caches of
//! DIJobs, their pods and services, and carries out the planner's plans.
//!
//! Owns every API write of the lifecycle controller (status through the status subresource with
//! resourceVersion guard, pod and service creates and deletes, Events), their rate limit, the
//! expectations that keep a lagging cache from causing duplicates, and the per-job memory the
//! decision step reads. Decides nothing itself: whether to look at a job, what to write, what
//! the writes' outcomes mean and when to look again come from `diorch_core::step`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::clock::{Clock, SystemClock};
use crate::events::Recorder;
use futures::{FutureExt, StreamExt, future};
use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, ListParams, Patch, Preconditions};
use kube::runtime::controller::{self, Action as Requeue, Controller};
use kube::runtime::events::{Event, EventType as KubeEventType, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use thiserror::Error;

use super::cache::{self, PodCache, ServiceCache};
use super::expectations::Expectations;
use super::throttle::Throttle;
use crate::metrics::{ActionLabels, ErrorLabels, Metrics, PhaseLabels};
use diorch_core::api::{DIJob, labels};
use diorch_core::build::{BuildContext, PodGroup};
use diorch_core::cached::{
    self as cached, CachedJob, CachedMeta, CachedPod, CachedService, WatchedService, WrittenStatus,
};
use diorch_core::key::ObjectKey;
use diorch_core::merge_patch;
use diorch_core::model::UsagePod;
use diorch_core::mutation::PodMutation;
use diorch_core::naming;
use diorch_core::placement::Placement;
use diorch_core::planner::{self, Action, EventType, Observed, Plan};
use diorch_core::step::{self, Decision, Ended, Memory, Target, Verb, Write};
use diorch_core::watched::WatchedPod;

/// Controller settings (spec section 12 flags and kube-rs conventions).
#[derive(Clone, Debug)]
pub struct Settings {
    pub build: BuildContext,
    /// Client-side write rate limit; `<= 0` disables it.
    pub qps: f32,
    pub burst: u32,
    /// A job with no pass for this long gets one (the rolling resync, `super::resync`); zero:
    /// never.
    pub sync_period: Duration,
    /// Jobs reconciled at once (0 = unbounded).
    pub concurrency: u16,
    /// How long a requested reconcile waits for more requests of the same job (kube-runtime's
    /// debounce): a job's pod events fold into one pass.
    pub debounce: Duration,
    /// Name the operator records Events as (`reportingController`).
    pub reporter: String,
    /// Whether this replica leads: only the leader reconciles (the caches stay warm anyway).
    pub leader: crate::leader::Leadership,
    /// Where the decision step's time comes from (virtual in tests).
    pub clock: Arc<dyn Clock>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            build: BuildContext::default(),
            qps: 100.0,
            burst: 200,
            sync_period: Duration::from_secs(60),
            concurrency: 32,
            debounce: Duration::from_millis(200),
            reporter: labels::OPERATOR_NAME.to_string(),
            leader: crate::leader::Leadership::always(),
            clock: Arc::new(SystemClock),
        }
    }
}

/// A reconcile that could not finish; kube-runtime hands it to `error_policy`.
#[derive(Debug, Error)]
pub enum Error {
    #[error("writing the status of {job}: {source}")]
    Status {
        job: String,
        #[source]
        source: kube::Error,
    },
    #[error("the planned status of {job} does not encode as JSON: {source}")]
    EncodeStatus {
        job: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("defaulting the task names of {job}: {source}")]
    Patch {
        job: String,
        #[source]
        source: kube::Error,
    },
    #[error("the cached spec of {job} does not decode as a DIJob spec: {source}")]
    Decode {
        job: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("the planned spec patch of {job} is not a JSON patch: {source}")]
    Plan {
        job: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("deleting {job} after its ttlSecondsAfterFinished: {source}")]
    DeleteJob {
        job: String,
        #[source]
        source: kube::Error,
    },
    #[error("{failed} of the writes for {job} failed, first: {first}")]
    Writes {
        job: String,
        failed: usize,
        kind: &'static str,
        first: String,
    },
}

impl Error {
    fn kind(&self) -> &'static str {
        match self {
            Error::Status { .. } | Error::EncodeStatus { .. } => "status",
            Error::Patch { .. } | Error::Plan { .. } => "patch",
            Error::Decode { .. } => "decode",
            Error::DeleteJob { .. } => "delete_job",
            Error::Writes { kind, .. } => kind,
        }
    }
}

/// Shared state of the reconciles.
pub struct Context {
    client: Client,
    caches: Caches,
    services: ServiceCache,
    expectations: Expectations,
    /// Events waiting to be recorded by the background worker.
    events: tokio::sync::mpsc::Sender<QueuedEvent>,
    throttle: Throttle,
    settings: Settings,
    metrics: Arc<Metrics>,
    /// What this process remembers of each job between passes (its errors in a row, notices
    /// recorded, its own status and service writes), forgotten with the job.
    memory: std::sync::Mutex<HashMap<ObjectKey, Memory>>,
    placement: Arc<dyn Placement>,
    /// The pod mutators (the plugin registry), asked through the core's port.
    mutation: Arc<dyn PodMutation>,
    /// Jobs triggered and waiting for a worker (the queue depth metric).
    queue: Arc<super::queue::Queue>,
}

fn job_key(job: &impl Resource) -> ObjectKey {
    ObjectKey::of(job.meta())
}

/// Longest wait for one write. kube's client sets no read timeout (watches need none), so
/// without this a request the server never answers would stall its job's reconciles forever.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// `fut` bounded by [`WRITE_TIMEOUT`]; a timeout is an error like any failed write.
async fn bounded<T>(fut: impl Future<Output = Result<T, kube::Error>>) -> Result<T, kube::Error> {
    match tokio::time::timeout(WRITE_TIMEOUT, fut).await {
        Ok(result) => result,
        Err(_) => Err(kube::Error::Service(Box::new(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "the API server did not answer within {} s",
                WRITE_TIMEOUT.as_secs()
            ),
        )))),
    }
}

fn is_status(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == code)
}

/// Read access to the controller's caches, for the replica API.
#[derive(Clone)]
pub struct Caches {
    pub jobs: Store<CachedJob>,
    pub pods: PodCache,
    /// Set once every cache has synced.
    pub ready: Arc<AtomicBool>,
}

impl Caches {
    /// The cached pods labelled with `job`'s name in its namespace.
    pub fn pods_of(&self, job: &ObjectKey) -> Vec<Arc<CachedPod>> {
        self.pods
            .pods_of(&job.namespace, &naming::job_label_value(&job.name))
    }

    /// The version of `job`'s cached pods (`PodCache::version`).
    pub fn pods_version(&self, job: &ObjectKey) -> Option<u64> {
        self.pods
            .version(&job.namespace, &naming::job_label_value(&job.name))
    }

    /// The cached job `job`.
    pub fn job(&self, job: &ObjectKey) -> Option<Arc<CachedJob>> {
        self.jobs
            .get(&ObjectRef::new(&job.name).within(&job.namespace))
    }
}

/// Every pod's changes as the allocator takes them, from the controller's one pod watch.
pub type UsageEvents = tokio_stream::wrappers::ReceiverStream<watcher::Event<UsagePod>>;

/// Pod events held for the allocator before the pod watch waits for it.
const USAGE_EVENTS: usize = 1024;

/// What places preemptible jobs, started over the controller's DIJob cache: the operator
/// passes the allocator here, the controller sees only the `Placement` trait.
pub struct Placer {
    pub placement: Arc<dyn Placement>,
    /// Jobs to reconcile again (capacity freed, a re-plan decided).
    pub retries: futures::stream::BoxStream<'static, ObjectKey>,
}

/// Applies one watch event of an owned kind (pods, services) to its cache, and answers the
/// DIJob that controls the object it touched, queued to be reconciled, unless `apply` (which
/// caches the event) says that no pass of the job reads what changed: the same step for both.
fn owned_event<K>(
    queue: &super::queue::Queue,
    event: Result<watcher::Event<K>, watcher::Error>,
    meta: impl Fn(&K) -> &CachedMeta,
    apply: impl FnOnce(watcher::Event<K>) -> bool,
    needs_pass: impl FnOnce(&ObjectKey) -> bool,
) -> Option<ObjectRef<CachedJob>> {
    let event = match event {
        Ok(event) => event,
        Err(err) => {
            tracing::debug!(error = %err, "owned object watch");
            return None;
        }
    };
    let owner = match &event {
        watcher::Event::Apply(o) | watcher::Event::Delete(o) | watcher::Event::InitApply(o) => {
            cache::owner_key(meta(o))
        }
        watcher::Event::Init | watcher::Event::InitDone => None,
    };
    if !apply(event) {
        // The cache took it, and no pass of the owner would read what changed.
        return None;
    }
    let owner = owner?;
    if !needs_pass(&owner) {
        return None;
    }
    let job = ObjectRef::new(&owner.name).within(&owner.namespace);
    queue.triggered(owner);
    Some(job)
}

/// Sets up the DIJob controller: returns its caches and the future that runs it until
/// `shutdown` resolves. `place` starts the placer over the DIJob cache and every pod's changes
/// (the controller's pod watch is a watch of every pod: the allocator counts them all, the
/// controller caches the operator's). Must be called within the tokio runtime.
pub fn start(
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    mutation: Arc<dyn PodMutation>,
    place: impl FnOnce(Store<CachedJob>, UsageEvents) -> Placer,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> (Caches, futures::future::BoxFuture<'static, ()>) {
    let owned = watcher::Config::default().labels(&format!(
        "{}={}",
        labels::OPERATOR,
        labels::OPERATOR_NAME
    ));
    let (job_store, job_writer) = reflector::store::<CachedJob>();
    let pod_cache = PodCache::default();
    let svc_cache = ServiceCache::default();
    let (usage_tx, usage_rx) = tokio::sync::mpsc::channel(USAGE_EVENTS);
    let Placer { placement, retries } = place(
        job_store.clone(),
        tokio_stream::wrappers::ReceiverStream::new(usage_rx),
    );

    metrics
        .controller
        .max_workers
        .set(i64::from(settings.concurrency));
    let queue = Arc::new(super::queue::Queue::new(
        metrics.controller.queue_depth.clone(),
        job_store.clone(),
    ));
    let ctx = Arc::new(Context {
        client: client.clone(),
        caches: Caches {
            jobs: job_store.clone(),
            pods: pod_cache.clone(),
            ready: Arc::new(AtomicBool::new(false)),
        },
        services: svc_cache.clone(),
        expectations: Expectations::default(),
        events: spawn_event_worker(
            Recorder::new(
                client.clone(),
                Reporter {
                    controller: settings.reporter.clone(),
                    instance: std::env::var("POD_NAME").ok(),
                },
            ),
            queue.clone(),
        ),
        throttle: Throttle::new(settings.qps, settings.burst),
        settings: settings.clone(),
        metrics,
        memory: std::sync::Mutex::new(HashMap::new()),
        placement: placement.clone(),
        queue: queue.clone(),
        mutation,
    });

    let forget = ctx.clone();
    let slices = Arc::new(super::resync::Slices::default());
    let jobs = watcher(
        Api::<CachedJob>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(cached::trim_job)
    .reflect(job_writer)
    .inspect({
        let slices = slices.clone();
        move |event| {
            if let Ok(event) = event {
                slices.apply(event);
            }
            if let Ok(watcher::Event::Delete(job)) = event {
                let key = job_key(job);
                forget.expectations.remove(&key);
                forget.memory().remove(&key);
                forget.queue.done(&key);
                let placement = forget.placement.clone();
                tokio::spawn(async move { placement.forget(key).await });
            }
        }
    })
    .applied_objects()
    // The echo of a status write that left nothing to do brings no pass (`step::echo_quiet`).
    .filter({
        let ctx = ctx.clone();
        move |job| {
            let pass = match job {
                Ok(job) => ctx.memory().get_mut(&job_key(job)).is_none_or(|m| {
                    step::echo_needs_pass(m, job.metadata.resource_version.as_deref())
                }),
                Err(_) => true,
            };
            if !pass {
                ctx.metrics.controller.skip_trigger("status_echo");
            }
            future::ready(pass)
        }
    })
    .inspect({
        let queue = ctx.queue.clone();
        move |job| {
            if let Ok(job) = job {
                queue.triggered(job_key(job));
            }
        }
    });
    let pods = watcher(
        Api::<WatchedPod>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .filter_map({
        let cache = pod_cache.clone();
        move |event| {
            let (usage, cache) = (usage_tx.clone(), cache.clone());
            async move {
                let event = match event {
                    Ok(event) => event,
                    Err(err) => return Some(Err(err)),
                };
                let (for_allocator, for_controller) = cache::split_pod_event(event, |pod| {
                    let name = pod.metadata.name.as_deref()?;
                    let namespace = pod.metadata.namespace.as_deref()?;
                    cache.get(namespace, name)
                });
                // Closed only once the allocator stopped: then nobody counts pods any more.
                let _ = usage.send(for_allocator).await;
                for_controller.map(Ok)
            }
        }
    })
    .filter_map({
        let (cache, queue, ctx) = (pod_cache.clone(), ctx.queue.clone(), ctx.clone());
        move |event| {
            let job = owned_event(
                &queue,
                event,
                |p: &CachedPod| &p.metadata,
                |e| {
                    let for_a_pass = cache.apply(e);
                    if !for_a_pass {
                        ctx.metrics.controller.skip_trigger("pod_node_only");
                    }
                    for_a_pass
                },
                |job| ctx.owned_event_needs_pass(job),
            );
            future::ready(job)
        }
    });
    let services = watcher(Api::<WatchedService>::all(client), owned)
        .default_backoff()
        .filter_map({
            let (cache, queue, ctx) = (svc_cache.clone(), ctx.queue.clone(), ctx.clone());
            move |event| {
                let event = event.map(|e| match e {
                    watcher::Event::Apply(s) => watcher::Event::Apply(CachedService::from(s)),
                    watcher::Event::Delete(s) => watcher::Event::Delete(CachedService::from(s)),
                    watcher::Event::InitApply(s) => {
                        watcher::Event::InitApply(CachedService::from(s))
                    }
                    watcher::Event::Init => watcher::Event::Init,
                    watcher::Event::InitDone => watcher::Event::InitDone,
                });
                let job = owned_event(
                    &queue,
                    event,
                    |s: &CachedService| &s.metadata,
                    |e| {
                        cache.apply(e);
                        true
                    },
                    |job| ctx.owned_event_needs_pass(job),
                );
                future::ready(job)
            }
        });

    // Jobs by phase, from the cache (no API call), for dashboards and alerts.
    {
        let (jobs, metrics) = (job_store.clone(), ctx.metrics.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            loop {
                tick.tick().await;
                let mut counts: HashMap<&'static str, i64> = HashMap::new();
                let mut oldest: HashMap<&'static str, i64> = HashMap::new();
                let now = jiff::Timestamp::now();
                for job in jobs.state() {
                    // Decoded once per cached version of the job (~10 us), not every 5 s; one
                    // that does not decode counts as Pending, as a job without a status.
                    let (phase, since) = job.phase_since();
                    *counts.entry(phase.as_str()).or_default() += 1;
                    let age = diorch_core::api::seconds_since(since, now);
                    let max = oldest.entry(phase.as_str()).or_default();
                    *max = (*max).max(age);
                }
                for phase in diorch_core::api::Phase::ALL.map(diorch_core::api::Phase::as_str) {
                    let labels = PhaseLabels { phase };
                    let controller = &metrics.controller;
                    let count = counts.get(phase).copied().unwrap_or(0);
                    controller.jobs.get_or_create(&labels).set(count);
                    let age = oldest.get(phase).copied().unwrap_or(0);
                    controller.oldest_in_phase.get_or_create(&labels).set(age);
                }
            }
        });
    }
    let caches = ctx.caches.clone();
    // Reconciling from a half-filled pod cache would see a running job's pods as gone.
    let ready = ctx.clone();
    let stores = (job_store.clone(), pod_cache, svc_cache, placement);
    tokio::spawn(async move {
        let started = Instant::now();
        let (jobs, pods, services, placement) = stores;
        let mut synced = Box::pin(async {
            future::try_join3(
                jobs.wait_until_ready(),
                pods.wait_until_ready().map(Ok),
                services.wait_until_ready().map(Ok),
            )
            .await?;
            placement.ready().await;
            Ok::<_, reflector::store::WriterDropped>(())
        });
        loop {
            tokio::select! {
                result = &mut synced => {
                    if result.is_ok() {
                        ready.caches.ready.store(true, Ordering::Release);
                        ready.metrics.set_ready(true);
                        tracing::info!(after = ?started.elapsed(), "caches synced; reconciling DIJobs");
                    }
                    break;
                }
                // Nothing is reconciled until then: say so instead of waiting silently.
                () = tokio::time::sleep(Duration::from_secs(10)) => tracing::warn!(
                    waited = ?started.elapsed(),
                    "the DIJob, pod, service and node caches have not all synced yet; reconciles wait"
                ),
            }
        }
    });

    // Becoming the leader reconciles every job, skipped while standing by.
    let acquired = {
        let (leader, queue) = (settings.leader.clone(), ctx.queue.clone());
        futures::stream::once(async move {
            leader.acquired().await;
            queue.triggered_all();
        })
    };
    let retries = {
        let queue = ctx.queue.clone();
        retries.map(move |job| {
            let job_ref = ObjectRef::<CachedJob>::new(&job.name).within(&job.namespace);
            queue.triggered(job);
            job_ref
        })
    };
    let resync = super::resync::rolling(
        job_store.clone(),
        slices,
        settings.sync_period,
        ctx.queue.clone(),
        settings.leader.clone(),
        {
            let (ctx, period) = (ctx.clone(), settings.sync_period);
            move |key: &ObjectKey| {
                let now = ctx.settings.clock.now();
                match ctx.memory().get(key) {
                    None => return false,
                    Some(m)
                        if m.last_pass
                            .is_some_and(|at| now.saturating_duration_since(at) < period) =>
                    {
                        return true;
                    }
                    // Nothing to compare: no look-up in the caches.
                    Some(m) if m.quiet.is_none() => return false,
                    Some(_) => {}
                }
                // Outside the memory's lock: the caches have locks of their own.
                let seen = ctx.seen(key);
                let unchanged = ctx
                    .memory()
                    .get(key)
                    .is_some_and(|m| !step::resync_needed(m, &seen));
                if unchanged {
                    ctx.metrics.controller.skip_trigger("resync_unchanged");
                }
                unchanged
            }
        },
    );
    let controller = Controller::for_stream(jobs, job_store)
        .reconcile_on(pods)
        .reconcile_on(services)
        .reconcile_on(retries)
        .reconcile_on(resync)
        .reconcile_all_on(acquired)
        .with_config(
            controller::Config::default()
                .concurrency(settings.concurrency)
                .debounce(settings.debounce),
        )
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(error = %err, "controller event");
            }
        });
    (caches, controller.boxed())
}

impl Context {
    fn memory(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, Memory>> {
        // Poisoning only follows a panic elsewhere; at worst one write is held back or not,
        // one Event repeated or one backoff step lost.
        self.memory.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What a pass of `key` would read from the caches now, by version.
    fn seen(&self, key: &ObjectKey) -> step::Seen {
        let job = self.caches.job(key);
        let service = self
            .services
            .get(&key.namespace, &naming::service_name(&key.name));
        step::Seen::new(
            job.as_ref()
                .and_then(|j| j.metadata.resource_version.as_deref()),
            self.caches.pods_version(key),
            service.as_deref(),
        )
    }

    /// Whether an event of `key`'s pods or service brings a pass
    /// ([`step::owned_event_needs_pass`]); one that would only wait for this process's own
    /// status write to show is skipped (`own_status_unseen`).
    fn owned_event_needs_pass(&self, key: &ObjectKey) -> bool {
        let mut memory = self.memory();
        let Some(m) = memory.get_mut(key) else {
            return true;
        };
        if m.status_unseen.is_none() {
            return true;
        }
        // Under the memory's lock, as the rule requires: the job's watch stores a version
        // before it takes this lock to judge its echo. (The store's lock is never held while
        // this one is taken.)
        let job = self.caches.job(key);
        let version = job
            .as_ref()
            .and_then(|j| j.metadata.resource_version.as_deref());
        let needs = step::owned_event_needs_pass(m, version);
        drop(memory);
        if !needs {
            self.metrics.controller.skip_trigger("own_status_unseen");
        }
        needs
    }

    /// `key`'s memory (a default one for a job not seen before).
    fn recall(&self, key: &ObjectKey) -> Memory {
        self.memory().get(key).cloned().unwrap_or_default()
    }

    /// Changes `key`'s memory.
    fn remember(&self, key: &ObjectKey, change: impl FnOnce(&mut Memory)) {
        change(self.memory().entry(key.clone()).or_default());
    }

    fn count(&self, result: &'static str) {
        self.metrics.controller.count_reconcile(result);
    }

    fn count_action(&self, action: &'static str) {
        self.metrics
            .controller
            .actions
            .get_or_create(&ActionLabels { action })
            .inc();
    }
}

async fn reconcile(cached: Arc<CachedJob>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    // Until this pass ends the controller is busy: Events wait (`spawn_event_worker`).
    let _running = ctx.queue.started(&job_key(cached.as_ref()));
    if !ctx.settings.leader.is_leader() {
        // A standby: every job is reconciled once it leads (`reconcile_all_on`).
        return Ok(Requeue::await_change());
    }
    let started = Instant::now();
    let began = ctx.settings.clock.now();
    let job = cached;
    let span = tracing::info_span!("reconcile", job = %job_key(job.as_ref()));
    ctx.metrics.controller.in_flight.inc();
    let result = tracing::Instrument::instrument(reconcile_inner(&job, &ctx), span).await;
    ctx.metrics.controller.in_flight.dec();
    ctx.metrics
        .controller
        .duration
        .observe(started.elapsed().as_secs_f64());
    ctx.remember(&job_key(job.as_ref()), |m| {
        m.last_pass = Some(began);
        if result.is_ok() {
            m.failures = 0;
        }
    });
    if result.is_err() {
        ctx.count("error");
    }
    result
}

async fn reconcile_inner(cached: &CachedJob, ctx: &Context) -> Result<Requeue, Error> {
    let key = job_key(cached);
    // Before the pods: a pod event in between leaves a version older than the pods read, which
    // can only make the resync pass over the job, never skip it (`step::resync_needed`).
    let pods_version = ctx.caches.pods_version(&key);
    let pods = ctx.caches.pods_of(&key);
    let pod_refs: Vec<&CachedPod> = pods.iter().map(AsRef::as_ref).collect();
    // The gate reads metadata only: a gated pass does not decode the spec.
    let gate = step::gate(
        cached.metadata.deletion_timestamp.is_some(),
        ctx.caches.ready.load(Ordering::Acquire),
        || {
            ctx.expectations.satisfied(&key, &pod_refs, Instant::now())
                && step::own_status_seen(
                    &ctx.recall(&key),
                    cached.metadata.resource_version.as_deref(),
                )
        },
    );
    if let Some(gate) = gate {
        match gate {
            step::Gate::Deleting => ctx.expectations.remove(&key),
            step::Gate::OwnWritesUnseen => {
                tracing::debug!(job = %key, "waiting for the cache to show this operator's own writes");
                // This pass waited for the status write: its echo must bring the pass.
                ctx.remember(&key, |m| m.status_echo = None);
                ctx.count("requeue");
            }
            step::Gate::CachesSyncing => ctx.count("requeue"),
        }
        return Ok(requeue(gate.requeue()));
    }
    let job = &cached.decode().map_err(|source| Error::Decode {
        job: key.to_string(),
        source,
    })?;
    let namespace = job.metadata.namespace.clone().unwrap_or_default();
    let name = job.metadata.name.clone().unwrap_or_default();
    let service = ctx.services.get(&namespace, &naming::service_name(&name));
    let admission = ctx.placement.consult(job).await;
    let now = Time(ctx.settings.clock.wall());
    let instant = ctx.settings.clock.now();
    let observed = Observed {
        pods: pod_refs,
        service: service.as_deref(),
        admission: admission.as_ref(),
    };
    let decision = step::decide(
        &step::Input {
            job,
            observed: observed.clone(),
            memory: &ctx.recall(&key),
            now: instant,
            wall: &now,
        },
        &ctx.settings.build,
    );
    let quiet = step::quiet_for_resync(job, &decision, admission.as_ref()).then(|| {
        step::Seen::new(
            cached.metadata.resource_version.as_deref(),
            pods_version,
            service.as_deref(),
        )
    });
    ctx.remember(&key, |m| {
        if decision.forget_service {
            m.service_created = None;
        }
        m.counts_held_since = decision.counts_held_since;
        m.quiet = quiet;
    });
    let plan = &decision.plan;

    if let Some(patch) = &plan.spec_patch {
        let jobs: Api<DIJob> = Api::namespaced(ctx.client.clone(), &namespace);
        let patch: json_patch::Patch =
            serde_json::from_value(patch.clone()).map_err(|source| Error::Plan {
                job: key.to_string(),
                source,
            })?;
        ctx.throttle.acquire().await;
        bounded(jobs.patch(
            &name,
            &crate::writes::patch_params(),
            &Patch::<()>::Json(patch),
        ))
        .await
        .map_err(|source| Error::Patch {
            job: key.to_string(),
            source,
        })?;
        tracing::info!(job = %key, actions = %plan.summary(), "reconciled");
        ctx.count("ok");
        return Ok(requeue(decision.requeue()));
    }

    // The job as this pass leaves it: once its status is written, the server's answer, whose
    // resourceVersion guards any later status write of the pass (the cached one is stale then).
    let mut latest = Cow::Borrowed(job);
    if plan.status_first() {
        let Some(written) = write_status(ctx, job, plan).await? else {
            ctx.count("requeue");
            return Ok(requeue(step::Requeue::After(step::CONFLICT_RETRY)));
        };
        latest = written;
    }
    let settled = execute(ctx, job, &key, plan).await;
    if !plan.status_first() {
        let Some(written) = write_status(ctx, job, plan).await? else {
            ctx.count("requeue");
            return Ok(requeue(step::Requeue::After(step::CONFLICT_RETRY)));
        };
        latest = written;
    }
    publish(ctx, job, &plan.events);
    publish_once(ctx, job, &key, &plan.once);
    count_transition(ctx, plan);
    log_pass(&key, job, &decision);
    if let Cow::Owned(written) = &latest
        && written.metadata.resource_version != job.metadata.resource_version
        && settled.invalid.is_none()
        && settled.error.is_none()
    {
        // What a pass on the write's echo would decide, from the same pods: when nothing, the
        // echo brings no pass (`step::echo_quiet`).
        let mut echo_was_quiet = false;
        let echo = || {
            let echo = step::decide(
                &step::Input {
                    job: written,
                    observed,
                    memory: &ctx.recall(&key),
                    now: instant,
                    wall: &now,
                },
                &ctx.settings.build,
            );
            echo_was_quiet = step::quiet_for_resync(written, &echo, admission.as_ref());
            echo
        };
        if step::echo_quiet(job, plan, &decision, echo) {
            let version = written.metadata.resource_version.clone();
            // The echo's pass, skipped, would have been quiet: the resync may skip the job as
            // after that pass (else every job's first resync after its last write is a pass).
            let quiet = echo_was_quiet
                .then(|| step::Seen::new(version.as_deref(), pods_version, service.as_deref()));
            ctx.remember(&key, |m| {
                m.status_echo = version;
                if quiet.is_some() {
                    m.quiet = quiet;
                }
            });
        }
    }

    if let Some(message) = settled.invalid {
        // The API server refused a pod as invalid: retrying cannot help, the job fails once,
        // on this pass, from the status this pass wrote.
        let failed = step::refused(&latest, message, &now);
        if write_status(ctx, &latest, &failed).await?.is_none() {
            // Changed by someone else since: the next pass plans from the newer job.
            if let Some(err) = settled.error {
                return Err(err);
            }
            ctx.count("requeue");
            return Ok(requeue(step::Requeue::After(step::CONFLICT_RETRY)));
        }
        publish(ctx, job, &failed.events);
        count_transition(ctx, &failed);
    }
    if let Some(err) = settled.error {
        return Err(err);
    }
    if plan.delete_job {
        return delete_finished(ctx, &latest).await;
    }
    ctx.count("ok");
    Ok(requeue(decision.requeue()))
}

/// The pass's log line: at info level when it changed something.
fn log_pass(key: &ObjectKey, job: &DIJob, decision: &Decision) {
    let plan = &decision.plan;
    let phase = plan
        .status
        .as_ref()
        .or(job.status.as_ref())
        .and_then(|s| s.phase)
        .map_or("", |p| p.as_str());
    if plan.transition.is_some() || !plan.actions.is_empty() {
        tracing::info!(job = %key, phase, actions = %plan.summary(), "reconciled");
    } else {
        tracing::debug!(job = %key, phase, actions = "none", held_counts = ?decision.held_counts, "reconciled");
    }
}

/// kube-runtime's form of the step's requeue.
fn requeue(next: step::Requeue) -> Requeue {
    match next {
        step::Requeue::AwaitChange => Requeue::await_change(),
        step::Requeue::After(after) => Requeue::requeue(after),
    }
}

/// Deletes a finished job whose `ttlSecondsAfterFinished` has run out, in the foreground as
/// Kubernetes' TTL-after-finished controller does (the job goes once its pods and service
/// have). Guarded by uid and resourceVersion: a job changed since it was read (its TTL raised,
/// say) is planned again from the newer version instead.
async fn delete_finished(ctx: &Context, job: &DIJob) -> Result<Requeue, Error> {
    let key = job_key(job);
    let namespace = job.metadata.namespace.as_deref().unwrap_or_default();
    let name = job.metadata.name.as_deref().unwrap_or_default();
    let jobs: Api<CachedJob> = Api::namespaced(ctx.client.clone(), namespace);
    let params = kube::api::DeleteParams {
        propagation_policy: Some(kube::api::PropagationPolicy::Foreground),
        preconditions: Some(kube::api::Preconditions {
            uid: job.metadata.uid.clone(),
            resource_version: job.metadata.resource_version.clone(),
        }),
        ..Default::default()
    };
    ctx.throttle.acquire().await;
    match bounded(jobs.delete(name, &params)).await {
        Ok(_) => {
            tracing::info!(job = %key, "deleted: ttlSecondsAfterFinished ran out");
            ctx.count_action("delete_job");
            ctx.count("ok");
            Ok(Requeue::await_change())
        }
        Err(err) if is_status(&err, 404) => Ok(Requeue::await_change()),
        Err(err) if is_status(&err, 409) => {
            tracing::debug!(job = %key, "changed since read; replanning before deleting");
            ctx.count("requeue");
            Ok(requeue(step::Requeue::After(step::CONFLICT_RETRY)))
        }
        Err(source) => Err(Error::DeleteJob {
            job: key.to_string(),
            source,
        }),
    }
}

/// Counts a written plan's phase transition (`diorch_phase_transitions_total`).
fn count_transition(ctx: &Context, plan: &Plan) {
    if let Some(t) = &plan.transition {
        ctx.metrics
            .controller
            .transitions
            .get_or_create(&PhaseLabels {
                phase: t.to.as_str(),
            })
            .inc();
    }
}

/// Writes `plan.status` (if any) as a merge patch of what changed, applied by the server only to
/// `job`'s resourceVersion, and returns the job as the server now stores it (`job` itself when
/// there was nothing to write). `Ok(None)` on a conflict: the cache is behind, and the next pass
/// plans from the newer job.
///
/// A patch of the changed fields instead of a replace of the whole object: the request carries
/// no spec (pod templates are most of a DIJob) and the answer is decoded with the spec skipped
/// unread (`WrittenStatus`), which is what the API server and the operator spend on a status
/// write.
async fn write_status<'a>(
    ctx: &Context,
    job: &'a DIJob,
    plan: &Plan,
) -> Result<Option<Cow<'a, DIJob>>, Error> {
    let Some(status) = &plan.status else {
        return Ok(Some(Cow::Borrowed(job)));
    };
    // Most passes plan the status the job has: nothing to encode and compare.
    if job.status.as_ref() == Some(status) {
        return Ok(Some(Cow::Borrowed(job)));
    }
    let encode = |source| Error::EncodeStatus {
        job: job_key(job).to_string(),
        source,
    };
    let old = serde_json::to_value(&job.status).map_err(encode)?;
    let new = serde_json::to_value(status).map_err(encode)?;
    let resource_version = job.metadata.resource_version.as_deref().unwrap_or_default();
    let Some(patch) = merge_patch::status_patch(resource_version, &old, &new) else {
        return Ok(Some(Cow::Borrowed(job)));
    };
    let namespace = job.metadata.namespace.as_deref().unwrap_or_default();
    let jobs: Api<WrittenStatus> = Api::namespaced(ctx.client.clone(), namespace);
    ctx.throttle.acquire().await;
    let name = job.metadata.name.as_deref().unwrap_or_default();
    let params = crate::writes::patch_params();
    let patch = Patch::Merge(&patch);
    match bounded(jobs.patch_status(name, &params, &patch)).await {
        Ok(written) => {
            let at = ctx.settings.clock.now();
            let unseen = step::status_written(
                job.metadata.resource_version.as_deref(),
                written.metadata.resource_version.as_deref(),
            );
            ctx.remember(&job_key(job), |m| {
                m.status_written = Some(at);
                m.status_unseen = unseen;
            });
            Ok(Some(Cow::Owned(DIJob {
                metadata: written.metadata,
                // Unchanged: a status write cannot change the spec.
                spec: job.spec.clone(),
                status: written.status,
            })))
        }
        Err(err) if is_status(&err, 409) => {
            tracing::debug!(job = %job_key(job), "status conflict; replanning from the newer job");
            Ok(None)
        }
        Err(source) => Err(Error::Status {
            job: job_key(job).to_string(),
            source,
        }),
    }
}

#[derive(Default)]
struct Outcome {
    error: Option<Error>,
    /// The first pod the API server refused as invalid, as a condition message.
    invalid: Option<String>,
}

/// Carries out the plan's pod and service writes concurrently, tracking expectations, and
/// records the Events `step::settle` makes of their outcomes (DI-orchestrator's
/// SuccessfulCreate / FailedCreate / SuccessfulDelete / FailedDelete).
async fn execute(ctx: &Context, job: &DIJob, key: &ObjectKey, plan: &Plan) -> Outcome {
    if plan.actions.is_empty() {
        // Most passes: no request handle to build (a namespaced `Api` formats its path).
        return Outcome::default();
    }
    let namespace = job.metadata.namespace.clone().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    let creates: Vec<String> = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::CreatePod(p) => p.metadata.name.clone(),
            _ => None,
        })
        .collect();
    let deletes: Vec<String> = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::DeletePod { uid, .. } => Some(uid.clone()),
            _ => None,
        })
        .collect();
    ctx.expectations
        .expect(key, &creates, &deletes, Instant::now());

    // The PodGroup first: pods of a gang the scheduler does not know would never start.
    for action in &plan.actions {
        let Action::EnsurePodGroup(group) = action else {
            continue;
        };
        ctx.throttle.acquire().await;
        if let Err(err) = ensure_pod_group(ctx, &namespace, group).await {
            let name = group.metadata.name.as_deref().unwrap_or_default();
            for pod in &creates {
                ctx.expectations.forget(key, Some(pod), None);
            }
            let message = match &err {
                kube::Error::Api(status) if status.code == 404 => format!(
                    "failed to create podgroup {name}: the {} PodGroup CRD is not installed (--gang-scheduler needs its scheduler)",
                    group.api_version
                ),
                other => format!(
                    "failed to create podgroup {name} error: {}",
                    api_message(other)
                ),
            };
            tracing::warn!(job = %key, error = %err, "podgroup write failed");
            publish(
                ctx,
                job,
                &[planner::JobEvent {
                    type_: EventType::Warning,
                    reason: "FailedCreate",
                    message: message.clone(),
                }],
            );
            return Outcome {
                error: Some(Error::Writes {
                    job: key.to_string(),
                    failed: 1,
                    kind: "create",
                    first: message,
                }),
                invalid: None,
            };
        }
    }

    let job_uid = job.metadata.uid.as_deref().unwrap_or_default();
    let writes = future::join_all(plan.actions.iter().map(|action| {
        let pods = pods.clone();
        let services = services.clone();
        async move {
            ctx.throttle.acquire().await;
            let write = match action {
                Action::CreatePod(pod) => {
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    let ended = match ctx.mutation.mutate(job, (**pod).clone()).await {
                        Ok(pod) => {
                            match bounded(crate::writes::create_unread(
                                &ctx.client,
                                pods.resource_url(),
                                &pod,
                            ))
                            .await
                            {
                                Ok(_) => Ended::Done,
                                Err(err) if is_status(&err, 409) => {
                                    already_exists(&pods, &name, job_uid, err).await
                                }
                                Err(err) => failed(&err),
                            }
                        }
                        Err(e) => Ended::Refused(e.to_string()),
                    };
                    // Only a create that happened (or found this very pod) awaits its event.
                    if ended.failed() {
                        ctx.expectations.forget(key, Some(&name), None);
                    }
                    Write {
                        verb: Verb::Create,
                        target: Target::Pod(name),
                        ended,
                    }
                }
                Action::DeletePod {
                    name, uid, grace, ..
                } => {
                    let params = DeleteParams {
                        grace_period_seconds: *grace,
                        preconditions: Some(Preconditions {
                            uid: Some(uid.clone()),
                            resource_version: None,
                        }),
                        ..DeleteParams::default()
                    };
                    let ended = ended(
                        bounded(delete_unread(
                            &ctx.client,
                            pods.resource_url(),
                            name,
                            &params,
                        ))
                        .await,
                    );
                    if ended.failed() {
                        ctx.expectations.forget(key, None, Some(uid));
                    }
                    Write {
                        verb: Verb::Delete,
                        target: Target::Pod(name.clone()),
                        ended,
                    }
                }
                Action::CreateService(svc) => {
                    let name = svc.metadata.name.clone().unwrap_or_default();
                    let result = bounded(crate::writes::create_unread(
                        &ctx.client,
                        services.resource_url(),
                        &**svc,
                    ))
                    .await;
                    if result.is_ok() {
                        let at = ctx.settings.clock.now();
                        ctx.remember(key, |m| m.service_created = Some(at));
                    }
                    Write {
                        verb: Verb::Create,
                        target: Target::Service(name),
                        ended: ended(result),
                    }
                }
                // Written above, before any pod.
                Action::EnsurePodGroup(_) => return None,
                Action::DeleteService { name, uid } => {
                    let params = DeleteParams {
                        preconditions: Some(Preconditions {
                            uid: Some(uid.clone()),
                            resource_version: None,
                        }),
                        ..DeleteParams::default()
                    };
                    let result = bounded(delete_unread(
                        &ctx.client,
                        services.resource_url(),
                        name,
                        &params,
                    ))
                    .await;
                    Write {
                        verb: Verb::Delete,
                        target: Target::Service(name.clone()),
                        ended: ended(result),
                    }
                }
            };
            ctx.count_action(write.action());
            Some(write)
        }
    }))
    .await;

    let writes: Vec<Write> = writes.into_iter().flatten().collect();
    let settled = step::settle(job, &writes);
    for &i in &settled.failed {
        let Write { target, ended, .. } = &writes[i];
        tracing::warn!(job = %key, object = %target, error = ended.message().unwrap_or_default(), "write failed");
    }
    let error = settled.error.then(|| {
        let first = settled.failed.first().and_then(|&i| writes.get(i));
        Error::Writes {
            job: key.to_string(),
            failed: settled.failed.len(),
            kind: first.map_or("create", |w| w.ended.kind(w.verb)),
            first: first.map_or_else(String::new, |w| {
                format!("{}: {}", w.target, w.ended.message().unwrap_or_default())
            }),
        }
    });
    publish_related(ctx, job, settled.events);
    Outcome {
        error,
        invalid: settled.invalid,
    }
}

/// Deletes `name` from the collection at `collection` without decoding the answer (as
/// [`crate::writes::create_unread`]).
async fn delete_unread(
    client: &Client,
    collection: &str,
    name: &str,
    params: &DeleteParams,
) -> Result<(), kube::Error> {
    let mut request = kube::core::Request::new(collection)
        .delete(name, params)
        .map_err(kube::Error::BuildRequest)?;
    request.extensions_mut().insert("delete");
    client.request_text(request).await.map(drop)
}

/// How a kube write ended, as the decision step reads it.
fn ended<T>(result: Result<T, kube::Error>) -> Ended {
    result.map_or_else(|err| failed(&err), |_| Ended::Done)
}

fn failed(err: &kube::Error) -> Ended {
    Ended::Failed {
        code: match err {
            kube::Error::Api(status) => Some(status.code),
            _ => None,
        },
        message: api_message(err),
    }
}

/// A pod create answered 409 AlreadyExists. The name is held either by the pod this operator
/// meant to create (a retried create whose first answer was lost, the cache not showing it yet:
/// [`Ended::Found`], its expectation stays and is met by the watch) or by another pod: one of
/// the job's that is being deleted (Terminating until its containers stop, or held by a
/// finalizer), or one that is not the job's. Then nothing was created and no watch event will
/// say so: [`Ended::Failed`], so the expectation is dropped, a FailedCreate Event says who holds
/// the name, and the job is retried with backoff (and at once when the holder's deletion is
/// seen, if the operator watches it).
async fn already_exists(
    pods: &Api<Pod>,
    name: &str,
    job_uid: &str,
    conflict: kube::Error,
) -> Ended {
    // A list by name, not a get: the operator's RBAC (deploy/, tests/common/rbac.rs) grants pods only
    // list, watch, create and delete.
    let by_name = ListParams::default().fields(&format!("metadata.name={name}"));
    let holder = match bounded(pods.list(&by_name)).await {
        Ok(list) => match list.items.into_iter().next() {
            Some(holder) => holder,
            // Gone since: nothing of ours is there; the next pass creates it.
            None => return failed(&conflict),
        },
        Err(err) => return failed(&err),
    };
    let ours = holder
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.uid == job_uid && !job_uid.is_empty());
    // A pod of ours that nothing deletes and the cache has not shown yet: this very create.
    if ours && holder.metadata.deletion_timestamp.is_none() {
        return Ended::Found;
    }
    let why = if holder.metadata.deletion_timestamp.is_some() {
        "a pod of that name is still being deleted"
    } else {
        "a pod of that name exists that this job does not own"
    };
    let taken = NameTaken {
        name: name.to_string(),
        why,
        uid: holder.metadata.uid.unwrap_or_default(),
    };
    tracing::info!(pod = name, holder_uid = %taken.uid, why, "pod name taken; not created");
    Ended::Failed {
        code: None,
        message: taken.to_string(),
    }
}

/// A pod could not be created because another object holds its name.
#[derive(Debug, Error)]
#[error("{why} (uid {uid}); it is created once {name} is gone")]
struct NameTaken {
    name: String,
    why: &'static str,
    uid: String,
}

/// Creates the job's PodGroup, or sets its minMember when it exists.
async fn ensure_pod_group(
    ctx: &Context,
    namespace: &str,
    group: &PodGroup,
) -> Result<(), kube::Error> {
    // Neither scheduler's PodGroup is a k8s-openapi type: written as a DynamicObject of the
    // group and version its apiVersion names.
    let (api_group, version) = group
        .api_version
        .split_once('/')
        .unwrap_or(("", group.api_version));
    let resource = kube::discovery::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk(api_group, version, group.kind),
        "podgroups",
    );
    let api: Api<kube::api::DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), namespace, &resource);
    let object: kube::api::DynamicObject = serde_json::to_value(group)
        .and_then(serde_json::from_value)
        .map_err(kube::Error::SerdeError)?;
    match bounded(api.create(&crate::writes::post_params(), &object)).await {
        Ok(_) => Ok(()),
        Err(err) if is_status(&err, 409) => {
            let name = group.metadata.name.as_deref().unwrap_or_default();
            let patch = serde_json::json!({"spec": {"minMember": group.spec.min_member}});
            bounded(api.patch(name, &crate::writes::patch_params(), &Patch::Merge(&patch)))
                .await
                .map(|_| ())
        }
        Err(err) => Err(err),
    }
}

/// What a mutator is told about the pod: read back from the labels and annotations the
/// builder put on it, so the planner's actions stay plain pods.
fn api_message(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => status.message.clone(),
        // This operator's own reasons (a mutator's refusal, a name taken), without kube's prefix.
        kube::Error::Service(reason) => reason.to_string(),
        other => other.to_string(),
    }
}

/// Records the plan's phase Events on the job.
fn publish(ctx: &Context, job: &DIJob, events: &[planner::JobEvent]) {
    publish_related(ctx, job, events.iter().map(|e| (e.clone(), None)).collect());
}

/// Records each of `events` on the job (and logs it) the first time this process sees it
/// (`step::fresh_notices`).
fn publish_once(ctx: &Context, job: &DIJob, key: &ObjectKey, events: &[planner::JobEvent]) {
    if events.is_empty() {
        return;
    }
    let fresh = {
        let mut memory = ctx.memory();
        step::fresh_notices(memory.entry(key.clone()).or_default(), events)
    };
    if fresh.len() < events.len() {
        tracing::debug!(job = %key, "notices seen before, or past the per-job cap, are not recorded again");
    }
    for e in &fresh {
        tracing::warn!(job = %key, reason = e.reason, message = %e.message, "notice");
    }
    publish(ctx, job, &fresh);
}

/// Events queued beyond this are dropped (and counted): under a burst, pods come first.
const EVENT_QUEUE: usize = 16_384;

/// Events held back for an idle controller beyond this many go out at once, so that the held
/// ones stay a few MiB at most and a long burst drops none.
const EVENT_BACKLOG: usize = 8_192;

/// Longest an Event waits for the controller to be idle before it is sent anyway, so that a
/// controller never idle for long still records what happened, minutes late at worst.
const EVENT_HOLD: Duration = Duration::from_secs(120);

/// An Event to record, on the object it regards, and when it was made.
type QueuedEvent = (Event, ObjectReference, Instant);

/// Records queued Events a few at a time, each once no job waits for a reconcile and none runs
/// (or [`EVENT_HOLD`] after it was made, or at once past [`EVENT_BACKLOG`] held): Events are
/// informational, so they go behind the pod, service and status writes of every job waiting
/// for them instead of sharing the API server with them.
fn spawn_event_worker(
    recorder: Recorder,
    queue: Arc<super::queue::Queue>,
) -> tokio::sync::mpsc::Sender<QueuedEvent> {
    let (tx, rx) = tokio::sync::mpsc::channel::<QueuedEvent>(EVENT_QUEUE);
    // Weak: the worker must not keep the queue open once the controller is gone.
    let held = tx.downgrade();
    tokio::spawn(
        tokio_stream::wrappers::ReceiverStream::new(rx).for_each_concurrent(4, move |(event, reference, made)| {
            let (recorder, queue) = (recorder.clone(), queue.clone());
            let backlog = held.upgrade().map_or(0, |tx| EVENT_QUEUE - tx.capacity());
            async move {
                if backlog <= EVENT_BACKLOG {
                    queue.idle(made + EVENT_HOLD).await;
                }
                if let Err(err) = recorder.publish(&event, &reference).await {
                    tracing::debug!(object = ?reference.name, reason = event.reason, error = %err, "could not record event");
                }
            }
        }),
    );
    tx
}

/// Queues Events on the job; a slow events API must not hold up pods.
fn publish_related(
    ctx: &Context,
    job: &DIJob,
    events: Vec<(planner::JobEvent, Option<ObjectReference>)>,
) {
    let reference = job.object_ref(&());
    for (e, related) in events {
        let event = Event {
            type_: match e.type_ {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            },
            reason: e.reason.to_string(),
            action: crate::events::action("Reconcile", &e.message),
            // The API server refuses a longer note; the planner bounds its own, this is the last
            // word for every Event (messages of the API server and of mutators included).
            note: Some(planner::clip(&e.message, planner::MAX_MESSAGE_BYTES)),
            secondary: related,
        };
        if ctx
            .events
            .try_send((event, reference.clone(), Instant::now()))
            .is_err()
        {
            ctx.metrics.controller.events_dropped.inc();
        }
    }
}

/// Per-job exponential backoff (0.5 s doubling to 5 min), a metric and a log line per error.
fn error_policy(job: Arc<CachedJob>, err: &Error, ctx: Arc<Context>) -> Requeue {
    let key = job_key(job.as_ref());
    ctx.metrics
        .controller
        .errors
        .get_or_create(&ErrorLabels { kind: err.kind() })
        .inc();
    let failures = {
        let mut memory = ctx.memory();
        let m = memory.entry(key.clone()).or_default();
        m.failures = m.failures.saturating_add(1);
        m.failures
    };
    let delay = step::backoff(failures);
    tracing::warn!(job = %key, error = %err, failures, retry_in = ?delay, "reconcile failed");
    Requeue::requeue(delay)
}

#[cfg(test)]
mod api_calls;
