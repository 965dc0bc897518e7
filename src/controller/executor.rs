//! The executor: runs the kube-runtime Controller for DIJobs over trimmed reflector caches of
//! DIJobs, their pods and services, and carries out the planner's plans.
//!
//! Owns every API write of the lifecycle controller (status through the status subresource with
//! resourceVersion guard, pod and service creates and deletes, Events), their rate limit, the
//! expectations that keep a lagging cache from causing duplicates, and the per-job error
//! backoff. Decides nothing itself: what to write comes from `planner::plan`.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

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

use super::cache::PodIndex;
use super::expectations::Expectations;
use super::throttle::Throttle;
use crate::metrics::{ActionLabels, ErrorLabels, Metrics, PhaseLabels};
use crate::plugin::registry::PluginRegistry;
use crate::plugin::{PluginError, TaskContext};
use diorch_core::api::{DIJob, labels};
use diorch_core::build::{BuildContext, PodGroup};
use diorch_core::cached::{self as cache, CachedJob, CachedPod, CachedService};
use diorch_core::merge_patch;
use diorch_core::naming;
use diorch_core::placement::{Admission, ObjectKey, Placement};
use diorch_core::planner::{self, Action, EventType, Observed, Plan};

/// Controller settings (spec section 12 flags and kube-rs conventions).
#[derive(Clone, Debug)]
pub struct Settings {
    pub build: BuildContext,
    /// Client-side write rate limit; `<= 0` disables it.
    pub qps: f32,
    pub burst: u32,
    /// Every job is reconciled again after this long without events.
    pub sync_period: Duration,
    /// Jobs reconciled at once (0 = unbounded).
    pub concurrency: u16,
    /// Name the operator records Events as (`reportingController`).
    pub reporter: String,
    /// Whether this replica leads: only the leader reconciles (the caches stay warm anyway).
    pub leader: crate::leader::Leadership,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            build: BuildContext::default(),
            qps: 100.0,
            burst: 200,
            sync_period: Duration::from_secs(60),
            concurrency: 32,
            reporter: labels::OPERATOR_NAME.to_string(),
            leader: crate::leader::Leadership::always(),
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
    services: Store<CachedService>,
    expectations: Expectations,
    /// Events waiting to be recorded by the background worker.
    events: tokio::sync::mpsc::Sender<(Event, ObjectReference)>,
    throttle: Throttle,
    settings: Settings,
    metrics: Arc<Metrics>,
    failures: std::sync::Mutex<HashMap<ObjectKey, u32>>,
    /// Notes of the plans' `once` Events already recorded, per job (forgotten with the job).
    reported: std::sync::Mutex<HashMap<ObjectKey, HashSet<String>>>,
    /// When each job's status was last written (forgotten with the job): a write of replica
    /// counts alone waits until [`COUNTS_WRITE_INTERVAL`] after it.
    status_written: std::sync::Mutex<HashMap<ObjectKey, Instant>>,
    /// Services this process created, by job, until the cache shows them or
    /// [`SERVICE_EXPECTATION`] passes: a pass that comes before the service watch event
    /// creates no duplicate (it would only get a 409).
    services_created: std::sync::Mutex<HashMap<ObjectKey, Instant>>,
    placement: Arc<dyn Placement>,
    plugins: Arc<PluginRegistry>,
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
    pub pods: Store<CachedPod>,
    pub index: PodIndex,
    /// Set once every cache has synced.
    pub ready: Arc<AtomicBool>,
}

impl Caches {
    /// The cached pods labelled with `job`'s name in its namespace.
    pub fn pods_of(&self, job: &ObjectKey) -> Vec<Arc<CachedPod>> {
        self.index
            .pods_of(&job.namespace, &naming::job_label_value(&job.name))
            .iter()
            .filter_map(|pod| self.pods.get(&ObjectRef::new(pod).within(&job.namespace)))
            .collect()
    }

    /// The cached job `job`.
    pub fn job(&self, job: &ObjectKey) -> Option<Arc<CachedJob>> {
        self.jobs
            .get(&ObjectRef::new(&job.name).within(&job.namespace))
    }
}

/// What places preemptible jobs, started over the controller's DIJob cache: the operator
/// passes the allocator here, the controller sees only the `Placement` trait.
pub struct Placer {
    pub placement: Arc<dyn Placement>,
    /// Jobs to reconcile again (capacity freed, a re-plan decided).
    pub retries: futures::stream::BoxStream<'static, ObjectKey>,
}

/// Sets up the DIJob controller: returns its caches and the future that runs it until
/// `shutdown` resolves. `place` starts the placer over the DIJob cache. Must be called within
/// the tokio runtime.
pub fn start(
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    plugins: Arc<PluginRegistry>,
    place: impl FnOnce(Store<CachedJob>) -> Placer,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> (Caches, futures::future::BoxFuture<'static, ()>) {
    let owned = watcher::Config::default().labels(&format!(
        "{}={}",
        labels::OPERATOR,
        labels::OPERATOR_NAME
    ));
    let (job_store, job_writer) = reflector::store::<CachedJob>();
    let (pod_store, pod_writer) = reflector::store::<CachedPod>();
    let (svc_store, svc_writer) = reflector::store::<CachedService>();
    let index = PodIndex::default();
    let Placer { placement, retries } = place(job_store.clone());

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
            pods: pod_store.clone(),
            index: index.clone(),
            ready: Arc::new(AtomicBool::new(false)),
        },
        services: svc_store.clone(),
        expectations: Expectations::default(),
        events: spawn_event_worker(Recorder::new(
            client.clone(),
            Reporter {
                controller: settings.reporter.clone(),
                instance: std::env::var("POD_NAME").ok(),
            },
        )),
        throttle: Throttle::new(settings.qps, settings.burst),
        settings: settings.clone(),
        metrics,
        failures: std::sync::Mutex::new(HashMap::new()),
        reported: std::sync::Mutex::new(HashMap::new()),
        status_written: std::sync::Mutex::new(HashMap::new()),
        services_created: std::sync::Mutex::new(HashMap::new()),
        placement: placement.clone(),
        queue,
        plugins,
    });

    let forget = ctx.clone();
    let jobs = watcher(
        Api::<CachedJob>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(cache::trim_job)
    .reflect(job_writer)
    .inspect(move |event| {
        if let Ok(watcher::Event::Delete(job)) = event {
            let key = job_key(job);
            forget.expectations.remove(&key);
            forget.failures().remove(&key);
            forget.reported().remove(&key);
            forget.status_written().remove(&key);
            forget.services_created().remove(&key);
            forget.queue.done(&key);
            let placement = forget.placement.clone();
            tokio::spawn(async move { placement.forget(key).await });
        }
    })
    .applied_objects()
    .inspect({
        let queue = ctx.queue.clone();
        move |job| {
            if let Ok(job) = job {
                queue.triggered(job_key(job));
            }
        }
    });
    let pods = watcher(Api::<CachedPod>::all(client.clone()), owned.clone())
        .default_backoff()
        .modify(cache::trim_pod)
        .inspect({
            let index = index.clone();
            move |event| {
                if let Ok(event) = event {
                    index.apply(event);
                }
            }
        })
        .reflect(pod_writer)
        // After the reflector: the replica API's cached answers key on this version.
        .inspect(move |event| {
            if let Ok(event) = event {
                index.settled(event);
            }
        })
        .touched_objects()
        .inspect({
            let queue = ctx.queue.clone();
            move |pod| {
                if let Ok(pod) = pod {
                    queue.triggered_by_owned(&pod.metadata);
                }
            }
        });
    let services = watcher(Api::<CachedService>::all(client), owned)
        .default_backoff()
        .modify(cache::trim_service)
        .reflect(svc_writer)
        .touched_objects()
        .inspect({
            let queue = ctx.queue.clone();
            move |svc| {
                if let Ok(svc) = svc {
                    queue.triggered_by_owned(&svc.metadata);
                }
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
                    let phase = job
                        .status
                        .as_ref()
                        .and_then(|s| s.phase)
                        .unwrap_or(diorch_core::api::Phase::Pending);
                    *counts.entry(phase.as_str()).or_default() += 1;
                    let age = planner::time_in_phase(&job.metadata, job.status.as_ref(), now);
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
    let stores = (job_store.clone(), pod_store, svc_store, placement);
    tokio::spawn(async move {
        let started = Instant::now();
        let (jobs, pods, services, placement) = stores;
        let mut synced = Box::pin(async {
            future::try_join3(
                jobs.wait_until_ready(),
                pods.wait_until_ready(),
                services.wait_until_ready(),
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
    let controller = Controller::for_stream(jobs, job_store)
        .owns_stream(pods)
        .owns_stream(services)
        .reconcile_on(retries)
        .reconcile_all_on(acquired)
        .with_config(controller::Config::default().concurrency(settings.concurrency))
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
    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, u32>> {
        // Poisoning only follows a panic elsewhere; the counts stay meaningful.
        self.failures.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn reported(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, HashSet<String>>> {
        // As for `failures`: a poisoned set only risks one repeated Event.
        self.reported.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn status_written(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, Instant>> {
        // A poisoned map only risks one write held back or not.
        self.status_written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn services_created(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, Instant>> {
        // A poisoned map only risks one duplicate create (a 409, ignored).
        self.services_created
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this process created `key`'s service so recently that the cache may not show
    /// it yet; forgets it once the cache does, or once the expectation is old.
    fn service_expected(&self, key: &ObjectKey, cached: bool) -> bool {
        let mut created = self.services_created();
        match created.get(key) {
            Some(at) if !cached && at.elapsed() < SERVICE_EXPECTATION => true,
            Some(_) => {
                created.remove(key);
                false
            }
            None => false,
        }
    }

    /// How long a status write that changes only replica counts must wait (`None`: it may go
    /// now). Pods of a job change one by one (created, scheduled, running); folding their
    /// counts keeps a job near one status write per phase (docs/performance.md).
    fn counts_wait(&self, key: &ObjectKey, job: &DIJob, plan: &Plan) -> Option<Duration> {
        let status = plan.status.as_ref()?;
        if plan.transition.is_some() || !planner::counts_only(job.status.as_ref(), status) {
            return None;
        }
        let last = *self.status_written().get(key)?;
        COUNTS_WRITE_INTERVAL.checked_sub(last.elapsed())
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
    ctx.queue.done(&job_key(cached.as_ref()));
    if !ctx.settings.leader.is_leader() {
        // A standby: every job is reconciled once it leads (`reconcile_all_on`).
        return Ok(Requeue::await_change());
    }
    let started = Instant::now();
    let job = cached;
    let span = tracing::info_span!("reconcile", job = %job_key(job.as_ref()));
    ctx.metrics.controller.in_flight.inc();
    let result = match job.decode() {
        Ok(typed) => tracing::Instrument::instrument(reconcile_inner(&typed, &ctx), span).await,
        Err(source) => Err(Error::Decode {
            job: job_key(job.as_ref()).to_string(),
            source,
        }),
    };
    ctx.metrics.controller.in_flight.dec();
    ctx.metrics
        .controller
        .duration
        .observe(started.elapsed().as_secs_f64());
    match &result {
        Ok(_) => {
            ctx.failures().remove(&job_key(job.as_ref()));
        }
        Err(_) => ctx.count("error"),
    }
    result
}

async fn reconcile_inner(job: &DIJob, ctx: &Context) -> Result<Requeue, Error> {
    let key = job_key(job);
    let namespace = job.metadata.namespace.clone().unwrap_or_default();
    let name = job.metadata.name.clone().unwrap_or_default();
    if job.metadata.deletion_timestamp.is_some() {
        // Garbage collection removes the pods and the service through owner references.
        ctx.expectations.remove(&key);
        return Ok(Requeue::await_change());
    }
    if !ctx.caches.ready.load(Ordering::Acquire) {
        ctx.count("requeue");
        return Ok(Requeue::requeue(Duration::from_millis(500)));
    }

    let pods = ctx.caches.pods_of(&key);
    let pod_refs: Vec<&CachedPod> = pods.iter().map(AsRef::as_ref).collect();
    if !ctx.expectations.satisfied(&key, &pod_refs, Instant::now()) {
        tracing::debug!(job = %key, "waiting for the cache to show this operator's own writes");
        ctx.count("requeue");
        return Ok(Requeue::requeue(Duration::from_secs(1)));
    }
    let service = ctx
        .services
        .get(&ObjectRef::new(&naming::service_name(&name)).within(&namespace));
    let service_expected = ctx.service_expected(&key, service.is_some());
    let admission = ctx.placement.consult(job).await;
    let observed = Observed {
        pods: pod_refs,
        service: service.as_deref(),
        admission: admission.as_ref(),
    };
    let now = Time(jiff::Timestamp::now());
    let mut plan = planner::plan(job, &observed, &ctx.settings.build, &now);
    if service_expected {
        plan.actions
            .retain(|a| !matches!(a, Action::CreateService(_)));
    }
    let counts_wait = ctx.counts_wait(&key, job, &plan);
    if counts_wait.is_some() {
        plan.status = None;
    }
    let jobs: Api<DIJob> = Api::namespaced(ctx.client.clone(), &namespace);

    if let Some(patch) = &plan.spec_patch {
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
        return Ok(Requeue::await_change());
    }

    // The job as this pass leaves it: once its status is written, the server's answer, whose
    // resourceVersion guards any later status write of the pass (the cached one is stale then).
    let mut latest = Cow::Borrowed(job);
    if plan.status_first() {
        let Some(written) = write_status(ctx, job, &plan).await? else {
            ctx.count("requeue");
            return Ok(Requeue::requeue(Duration::from_millis(200)));
        };
        latest = written;
    }
    let outcome = execute(ctx, job, &key, &plan).await;
    if !plan.status_first() {
        let Some(written) = write_status(ctx, job, &plan).await? else {
            ctx.count("requeue");
            return Ok(Requeue::requeue(Duration::from_millis(200)));
        };
        latest = written;
    }
    publish(ctx, job, &plan.events);
    publish_once(ctx, job, &key, &plan.once);
    count_transition(ctx, &plan);
    let phase = plan
        .status
        .as_ref()
        .or(job.status.as_ref())
        .and_then(|s| s.phase)
        .map_or("", |p| p.as_str());
    if plan.transition.is_some() || !plan.actions.is_empty() {
        tracing::info!(job = %key, phase, actions = %plan.summary(), "reconciled");
    } else {
        tracing::debug!(job = %key, phase, actions = "none", "reconciled");
    }

    if let Some(message) = outcome.invalid {
        // The API server refused a pod as invalid: retrying cannot help, the job fails once,
        // on this pass, from the status this pass wrote.
        let failed = planner::fail(&latest, message, &now);
        if write_status(ctx, &latest, &failed).await?.is_none() {
            // Changed by someone else since: the next pass plans from the newer job.
            if let Some(err) = outcome.error {
                return Err(err);
            }
            ctx.count("requeue");
            return Ok(Requeue::requeue(Duration::from_millis(200)));
        }
        publish(ctx, job, &failed.events);
        count_transition(ctx, &failed);
    }
    if let Some(err) = outcome.error {
        return Err(err);
    }
    if plan.delete_job {
        return delete_finished(ctx, &latest).await;
    }
    ctx.count("ok");
    // A deadline or TTL due before the next resync is met on time.
    let resync = ctx
        .settings
        .sync_period
        .min(plan.wake_after.unwrap_or(Duration::MAX));
    if matches!(admission, Some(Admission::Waiting { .. })) {
        // Capacity changes wake waiting jobs at once; this is the safety net.
        return Ok(Requeue::requeue(
            WAITING_RETRY
                .min(resync)
                .min(counts_wait.unwrap_or(Duration::MAX)),
        ));
    }
    if let Some(wait) = counts_wait {
        // The held-back counts go out then, unless a pod event brings a pass sooner.
        return Ok(Requeue::requeue(wait.min(resync)));
    }
    Ok(Requeue::requeue(resync))
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
            Ok(Requeue::requeue(Duration::from_millis(200)))
        }
        Err(source) => Err(Error::DeleteJob {
            job: key.to_string(),
            source,
        }),
    }
}

/// How long a created service is taken as there without the cache showing it.
const SERVICE_EXPECTATION: Duration = Duration::from_secs(5);

/// Least time between a job's status writes when the later one changes only replica counts.
const COUNTS_WRITE_INTERVAL: Duration = Duration::from_secs(1);

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

/// How often a job waiting for capacity is tried again without any capacity event.
const WAITING_RETRY: Duration = Duration::from_secs(30);

/// Writes `plan.status` (if any) as a merge patch of what changed, applied by the server only to
/// `job`'s resourceVersion, and returns the job as the server now stores it (`job` itself when
/// there was nothing to write). `Ok(None)` on a conflict: the cache is behind, and the next pass
/// plans from the newer job.
///
/// A patch of the changed fields instead of a replace of the whole object: the request carries
/// no spec (pod templates are most of a DIJob) and the answer is decoded with the spec left
/// raw, which is what the API server and the operator spend on a status write.
async fn write_status<'a>(
    ctx: &Context,
    job: &'a DIJob,
    plan: &Plan,
) -> Result<Option<Cow<'a, DIJob>>, Error> {
    let Some(status) = &plan.status else {
        return Ok(Some(Cow::Borrowed(job)));
    };
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
    let jobs: Api<CachedJob> = Api::namespaced(ctx.client.clone(), namespace);
    ctx.throttle.acquire().await;
    let name = job.metadata.name.as_deref().unwrap_or_default();
    let params = crate::writes::patch_params();
    let patch = Patch::Merge(&patch);
    match bounded(jobs.patch_status(name, &params, &patch)).await {
        Ok(written) => {
            ctx.status_written().insert(job_key(job), Instant::now());
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

/// Carries out the plan's pod and service writes concurrently, tracking expectations and
/// recording DI-orchestrator's SuccessfulCreate / FailedCreate / SuccessfulDelete /
/// FailedDelete Events.
async fn execute(ctx: &Context, job: &DIJob, key: &ObjectKey, plan: &Plan) -> Outcome {
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
                    let ended = match mutate(ctx, job, pod).await {
                        Ok(pod) => {
                            match bounded(pods.create(&crate::writes::post_params(), &pod)).await {
                                Ok(_) => Ended::Done,
                                Err(err) if is_status(&err, 409) => {
                                    already_exists(&pods, &name, job_uid, err).await
                                }
                                Err(err) => Ended::Failed(err),
                            }
                        }
                        Err(e) => Ended::Refused(kube::Error::Service(Box::new(e))),
                    };
                    // Only a create that happened (or found this very pod) awaits its event.
                    if ended.error().is_some() {
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
                    let ended = Ended::of(bounded(pods.delete(name, &params)).await);
                    if ended.error().is_some() {
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
                    let result = bounded(services.create(&crate::writes::post_params(), svc)).await;
                    if result.is_ok() {
                        ctx.services_created().insert(key.clone(), Instant::now());
                    }
                    Write {
                        verb: Verb::Create,
                        target: Target::Service(name),
                        ended: Ended::of(result),
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
                    let result = bounded(services.delete(name, &params)).await;
                    Write {
                        verb: Verb::Delete,
                        target: Target::Service(name.clone()),
                        ended: Ended::of(result),
                    }
                }
            };
            ctx.count_action(write.action());
            Some(write)
        }
    }))
    .await;

    let mut outcome = Outcome::default();
    let mut events = Vec::new();
    let mut failed = 0;
    for Write {
        verb,
        target,
        ended,
    } in writes.into_iter().flatten()
    {
        let (reason, event_type, message) = match (verb, &ended) {
            // This very pod is already there (a retried create the cache had not shown yet).
            (_, Ended::Found) => continue,
            (Verb::Create, Ended::Done) => (
                "SuccessfulCreate",
                EventType::Normal,
                format!("{target} was successfully created"),
            ),
            (Verb::Delete, Ended::Done) => (
                "SuccessfulDelete",
                EventType::Normal,
                format!("{target} was successfully deleted"),
            ),
            // The service is there already (the planner creates it only while none is cached
            // under its name): the goal is met. Pods were checked in `already_exists`.
            (Verb::Create, Ended::Failed(err))
                if is_status(err, 409) && matches!(target, Target::Service(_)) =>
            {
                continue;
            }
            // Already gone: the goal is met.
            (Verb::Delete, Ended::Failed(err)) if is_status(err, 404) || is_status(err, 409) => {
                continue;
            }
            // A mutator with failurePolicy Fail refused the pod: it is not created, like a
            // pod an admission webhook rejects, and the job retries with backoff.
            (_, Ended::Refused(err)) => (
                "MutatorFailed",
                EventType::Warning,
                format!("{target} was not created: {}", api_message(err)),
            ),
            (Verb::Create, Ended::Failed(err)) => {
                if is_status(err, 422)
                    && matches!(target, Target::Pod(_))
                    && outcome.invalid.is_none()
                {
                    outcome.invalid =
                        Some(format!("{target} failed to create: {}", api_message(err)));
                }
                (
                    "FailedCreate",
                    EventType::Warning,
                    format!("failed to create {target} error: {}", api_message(err)),
                )
            }
            (Verb::Delete, Ended::Failed(err)) => (
                "FailedDelete",
                EventType::Warning,
                format!("failed to delete {target} error: {}", api_message(err)),
            ),
        };
        if let Some(err) = ended.error() {
            failed += 1;
            tracing::warn!(job = %key, object = %target, error = %err, "write failed");
            if outcome.error.is_none() {
                outcome.error = Some(Error::Writes {
                    job: key.to_string(),
                    failed: 0,
                    kind: ended.kind(verb),
                    first: format!("{target}: {}", api_message(err)),
                });
            }
        }
        events.push((
            planner::JobEvent {
                type_: event_type,
                reason,
                message,
            },
            Some(target.reference(job)),
        ));
    }
    if let Some(Error::Writes { failed: n, .. }) = outcome.error.as_mut() {
        *n = failed;
    }
    // An invalid pod fails the job; that is not a reconcile error to retry.
    if outcome.invalid.is_some() && failed == 1 {
        outcome.error = None;
    }
    publish_related(ctx, job, coalesce_successes(events));
    outcome
}

/// Folds a pass's successful creates, and its successful deletes, into one Event each: a
/// 4-pod job's start is one `SuccessfulCreate` whose note lists DI-orchestrator's message for
/// each object, not five Events (each an API write, and a cache entry of the recorder). This is
/// what client-go's correlator does to similar Events, sooner. A lone success keeps its
/// object as the Event's related object; failures are never folded.
fn coalesce_successes(
    events: Vec<(planner::JobEvent, Option<ObjectReference>)>,
) -> Vec<(planner::JobEvent, Option<ObjectReference>)> {
    const FOLDED: [&str; 2] = ["SuccessfulCreate", "SuccessfulDelete"];
    let count = |reason: &str| events.iter().filter(|(e, _)| e.reason == reason).count();
    let fold: Vec<&str> = FOLDED.into_iter().filter(|r| count(r) > 1).collect();
    if fold.is_empty() {
        return events;
    }
    let mut out: Vec<(planner::JobEvent, Option<ObjectReference>)> = Vec::new();
    for (event, related) in events {
        if !fold.contains(&event.reason) {
            out.push((event, related));
            continue;
        }
        match out.iter_mut().find(|(e, _)| e.reason == event.reason) {
            Some((folded, _)) => {
                folded.message.push_str("; ");
                folded.message.push_str(&event.message);
            }
            None => out.push((event, None)),
        }
    }
    out
}

/// What a write asks of its object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verb {
    Create,
    Delete,
}

/// The pod or service a write is about.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    Pod(String),
    Service(String),
}

impl std::fmt::Display for Target {
    /// `pod <name>` / `service <name>`: how Events, log lines and errors name the object.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Pod(name) => write!(f, "pod {name}"),
            Target::Service(name) => write!(f, "service {name}"),
        }
    }
}

impl Target {
    /// A reference to this object of `job`, so each object's Events stay apart instead of
    /// folding into one series.
    fn reference(&self, job: &DIJob) -> ObjectReference {
        let (kind, name) = match self {
            Target::Pod(name) => ("Pod", name),
            Target::Service(name) => ("Service", name),
        };
        ObjectReference {
            api_version: Some("v1".to_string()),
            kind: Some(kind.to_string()),
            name: Some(name.clone()),
            namespace: job.metadata.namespace.clone(),
            ..ObjectReference::default()
        }
    }
}

/// How a write ended.
#[derive(Debug)]
enum Ended {
    /// Done as asked.
    Done,
    /// A pod create found this very pod there: a retried create whose first answer was lost.
    /// Nothing to report; its expectation is met by the watch.
    Found,
    /// A mutator with failurePolicy Fail refused the pod: it was never sent.
    Refused(kube::Error),
    /// The API server refused the write, or it got no answer.
    Failed(kube::Error),
}

impl Ended {
    fn of<T>(result: Result<T, kube::Error>) -> Ended {
        result.map_or_else(Ended::Failed, |_| Ended::Done)
    }

    fn error(&self) -> Option<&kube::Error> {
        match self {
            Ended::Done | Ended::Found => None,
            Ended::Refused(err) | Ended::Failed(err) => Some(err),
        }
    }

    /// The `kind` of the reconcile error (and of its metric) when this write failed.
    fn kind(&self, verb: Verb) -> &'static str {
        match (self, verb) {
            (Ended::Refused(_), _) => "mutate",
            (_, Verb::Create) => "create",
            (_, Verb::Delete) => "delete",
        }
    }
}

/// One pod or service write of a pass.
struct Write {
    verb: Verb,
    target: Target,
    ended: Ended,
}

impl Write {
    /// Its `action` label on the writes metric.
    fn action(&self) -> &'static str {
        match (self.verb, &self.target) {
            (Verb::Create, Target::Pod(_)) => "create_pod",
            (Verb::Delete, Target::Pod(_)) => "delete_pod",
            (Verb::Create, Target::Service(_)) => "create_service",
            (Verb::Delete, Target::Service(_)) => "delete_service",
        }
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
    // A list by name, not a get: the operator's RBAC (deploy/, src/rbac.rs) grants pods only
    // list, watch, create and delete.
    let by_name = ListParams::default().fields(&format!("metadata.name={name}"));
    let holder = match bounded(pods.list(&by_name)).await {
        Ok(list) => match list.items.into_iter().next() {
            Some(holder) => holder,
            // Gone since: nothing of ours is there; the next pass creates it.
            None => return Ended::Failed(conflict),
        },
        Err(err) => return Ended::Failed(err),
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
    Ended::Failed(kube::Error::Service(Box::new(taken)))
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
fn task_context(job: &DIJob, pod: &Pod) -> TaskContext {
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
        job_key: job_key(job),
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

/// `pod` after the loaded mutators that apply to its task type, in their order (checked by
/// the plugin host; failurePolicy Ignore skips a failing one).
async fn mutate(ctx: &Context, job: &DIJob, pod: &Pod) -> Result<Pod, PluginError> {
    ctx.plugins
        .mutate_pod(&task_context(job, pod), pod.clone())
        .await
}

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

/// Most distinct `once` notes remembered per job; past it they are logged at debug level only,
/// so pods with ever-new bad annotations cannot grow the set or flood the events API.
const MAX_ONCE_PER_JOB: usize = 64;

/// Records each of `events` on the job (and logs it) the first time this process sees it.
fn publish_once(ctx: &Context, job: &DIJob, key: &ObjectKey, events: &[planner::JobEvent]) {
    if events.is_empty() {
        return;
    }
    let fresh: Vec<planner::JobEvent> = {
        let mut reported = ctx.reported();
        let seen = reported.entry(key.clone()).or_default();
        events
            .iter()
            .filter(|e| {
                if seen.len() >= MAX_ONCE_PER_JOB && !seen.contains(&e.message) {
                    tracing::debug!(job = %key, reason = e.reason, "not recorded: too many distinct notices for this job");
                    return false;
                }
                seen.insert(e.message.clone())
            })
            .cloned()
            .collect()
    };
    for e in &fresh {
        tracing::warn!(job = %key, reason = e.reason, message = %e.message, "notice");
    }
    publish(ctx, job, &fresh);
}

/// Events queued beyond this are dropped (and counted): under a burst, pods come first.
const EVENT_QUEUE: usize = 4096;

/// Records queued Events a few at a time, so that during a burst they take a small share of the
/// API server next to the pod writes.
fn spawn_event_worker(recorder: Recorder) -> tokio::sync::mpsc::Sender<(Event, ObjectReference)> {
    let (tx, rx) = tokio::sync::mpsc::channel::<(Event, ObjectReference)>(EVENT_QUEUE);
    tokio::spawn(
        tokio_stream::wrappers::ReceiverStream::new(rx).for_each_concurrent(4, move |(event, reference)| {
            let recorder = recorder.clone();
            async move {
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
        if ctx.events.try_send((event, reference.clone())).is_err() {
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
        let mut map = ctx.failures();
        let n = map.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    };
    let delay = backoff(failures);
    tracing::warn!(job = %key, error = %err, failures, retry_in = ?delay, "reconcile failed");
    Requeue::requeue(delay)
}

/// 0.5 s after the first failure, doubling, at most 5 minutes.
fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    Duration::from_millis(500u64.saturating_mul(1 << exp)).min(Duration::from_secs(300))
}

#[cfg(test)]
mod api_calls;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn successes_of_a_pass_fold_into_one_event_each_and_failures_do_not() {
        let event = |type_, reason: &'static str, message: &str| planner::JobEvent {
            type_,
            reason,
            message: message.to_string(),
        };
        let related = |name: &str| {
            Some(ObjectReference {
                name: Some(name.to_string()),
                ..ObjectReference::default()
            })
        };
        let ok = |m| event(EventType::Normal, "SuccessfulCreate", m);
        let folded = coalesce_successes(vec![
            (ok("pod a was successfully created"), related("a")),
            (
                event(EventType::Warning, "FailedCreate", "failed to create pod b"),
                related("b"),
            ),
            (ok("service s was successfully created"), related("s")),
            (
                event(
                    EventType::Normal,
                    "SuccessfulDelete",
                    "pod c was successfully deleted",
                ),
                related("c"),
            ),
        ]);
        let seen: Vec<(&str, &str, Option<&str>)> = folded
            .iter()
            .map(|(e, r)| {
                (
                    e.reason,
                    e.message.as_str(),
                    r.as_ref().and_then(|r| r.name.as_deref()),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (
                    "SuccessfulCreate",
                    "pod a was successfully created; service s was successfully created",
                    None
                ),
                ("FailedCreate", "failed to create pod b", Some("b")),
                // Alone in its pass: DI-orchestrator's Event, related object and all.
                (
                    "SuccessfulDelete",
                    "pod c was successfully deleted",
                    Some("c")
                ),
            ]
        );
    }

    #[test]
    fn backoff_doubles_per_failure_up_to_five_minutes() {
        let delays: Vec<u64> = (1..=4).map(|n| backoff(n).as_millis() as u64).collect();
        assert_eq!(delays, [500, 1000, 2000, 4000]);
        assert_eq!(backoff(30), Duration::from_secs(300));
        assert_eq!(backoff(u32::MAX), Duration::from_secs(300));
    }

    /// The words Events, logs and errors use for a write, and its metric labels, as they were
    /// when writes were described by strings.
    #[test]
    fn writes_keep_their_texts_and_labels() {
        let refused = || kube::Error::Service("no".into());
        let write = |verb, target, ended| Write {
            verb,
            target,
            ended,
        };
        let pod = || Target::Pod("j-learner-0".into());
        let service = || Target::Service("di-j".into());
        assert_eq!(pod().to_string(), "pod j-learner-0");
        assert_eq!(service().to_string(), "service di-j");
        let labels: Vec<&str> = [
            write(Verb::Create, pod(), Ended::Done),
            write(Verb::Delete, pod(), Ended::Done),
            write(Verb::Create, service(), Ended::Done),
            write(Verb::Delete, service(), Ended::Done),
        ]
        .iter()
        .map(Write::action)
        .collect();
        assert_eq!(
            labels,
            [
                "create_pod",
                "delete_pod",
                "create_service",
                "delete_service"
            ]
        );
        assert_eq!(Ended::Refused(refused()).kind(Verb::Create), "mutate");
        assert_eq!(Ended::Failed(refused()).kind(Verb::Create), "create");
        assert_eq!(Ended::Failed(refused()).kind(Verb::Delete), "delete");

        let job: DIJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
            "metadata": {"name": "j", "namespace": "ns"}, "spec": {"tasks": []}
        }))
        .expect("job");
        let reference = service().reference(&job);
        assert_eq!(
            (
                reference.api_version.as_deref(),
                reference.kind.as_deref(),
                reference.name.as_deref(),
                reference.namespace.as_deref()
            ),
            (Some("v1"), Some("Service"), Some("di-j"), Some("ns"))
        );
        assert_eq!(pod().reference(&job).kind.as_deref(), Some("Pod"));
    }
}
