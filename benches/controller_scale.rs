//! Controller bench, on the sandbox and (with `BENCH_KUBECONFIG`) on a real API server whose
//! nodes and kubelet are the sandbox's, attached to it:
//! - **time**: from creating N DIJobs (4 replicas each) to all their pods existing, and to all
//!   of them Running, with the real `diorch run`, against creating the same pods and services
//!   directly with the kube client (the same simulated kubelet runs both), and against the
//!   floor: the DIJobs, their pods and services and the status writes a compatible controller
//!   cannot avoid, written by the bench itself (`via_floor`); and the operator's CPU seconds per
//!   1 000 jobs, against the CPU floor: a client that only watches and writes what a compatible
//!   controller must, for the same burst (`via_cpu_floor`, controller_scale/cpu_floor.rs); both
//!   from the first create until the pods run and the process's writes are done (the
//!   operator's Events wait for an idle controller, so many trail the last pod);
//! - **writes**: the API requests the operator made per job, by resource and verb, from create
//!   to Running and from Running to Succeeded (its `diorch_kube_api_requests_total`), next to
//!   the floor;
//! - **memory**: the operator's resident memory after 5 000 DIJobs × 4 pods, and per job.
//!
//! `cargo bench --bench controller_scale` (env: SIZES=100,1000 (on the real server REAL_SIZES,
//! default SIZES), WRITE_JOBS=100,
//! MEMORY_JOBS=5000 (0 skips; on the real server REAL_MEMORY_JOBS, default at most 2000),
//! CONCURRENCY=32, MEDIAN_OF=3 (the timed paths run one after the other this many times, and
//! each time, ratio and CPU figure is the median of its rounds),
//! PATHS=operator to time the operator's path alone, once (PATHS=operator,cpu-floor:
//! and the CPU floor's; with QUIET_SECS=30, also the operator's CPU at rest for that long once
//! every pod runs: what its periodic work costs per second), OPERATOR_ARGS for extra `diorch run` flags,
//! BENCH_KUBECONFIG for the real server, BENCH_KUBE_UP=../shared/kube/up.sh to give each run on
//! it a fresh control plane in BENCH_KUBECONFIG's folder (as scripts/bench.sh does), BENCH_CSV=file
//! to append the rows to). The operator
//! runs with `--qps 0` (no client-side limit), as the direct path has none either, and on one
//! runtime thread, as deploy/ runs it (its CPU limit of 1 gives it a current-thread runtime;
//! OPERATOR_WORKER_THREADS=2 for a multi-thread runtime of two workers).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a measurement program: a panic is its report

mod common;
#[path = "controller_scale/cpu_floor.rs"]
mod cpu_floor;

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt, TryFutureExt, TryStreamExt, future, stream};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use kube::api::{ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client};

use common::{Cluster, Nodes, Operator, Server, cpu_seconds, env_usize, peak_rss_of_mib, rss_mib};
use diorch::plugin::spec::{self as plugin_spec, PluginKind, PluginSpec};
use diorch_core::api::{DIJob, Phase};
use diorch_core::build::{self, BuildContext, ReplicaSlot};
use diorch_core::ranks::RankTable;

/// As the operator (src/main.rs), for the CPU floor's client, which is this binary.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Room for 5 000 jobs × 4 pods of 100m CPU; no kubelet Events (they would be the same on both
/// paths, and only add load).
fn nodes() -> Nodes {
    Nodes::new(&[
        "--nodes",
        "40",
        "--node-cpu",
        "128",
        "--node-pods",
        "600",
        "--kubelet-events",
        "false",
        "--sim-concurrency",
        "64",
        "--pod-start-delay",
        "200ms",
    ])
}

/// Job `i`: a learner, an evaluator and two collectors; with `exit_after`, each container
/// exits 0 that long after Running (the sandbox kubelet's annotation), so the job succeeds.
/// Job `i`: a learner, an evaluator and 2 collectors of 100m CPU each; `preemptible` jobs are
/// placed by the allocator (its policy) before their pods are created.
fn job(i: usize, namespace: &str, exit_after: Option<&str>, preemptible: bool) -> DIJob {
    let annotations = match exit_after {
        Some(after) => serde_json::json!({"sandbox.diorch.io/exit-after": after}),
        None => serde_json::json!({}),
    };
    let task = |t: &str, r: i32| {
        serde_json::json!({"name": t, "type": t, "replicas": r, "template": {
            "metadata": {"annotations": annotations},
            "spec": {"containers": [
            {"name": "di-container", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}]}}})
    };
    serde_json::from_value(serde_json::json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1",
        "kind": "DIJob",
        "metadata": {"name": format!("job-{i}"), "namespace": namespace},
        "spec": {"preemptible": preemptible,
            "tasks": [task("learner", 1), task("evaluator", 1), task("collector", 2)]}
    }))
    .expect("valid job")
}

/// The pods and service the operator would create for `job(i)`, minus owner references (their
/// owner does not exist on the direct path, and garbage collection would remove them).
fn direct_objects(i: usize, namespace: &str) -> (Vec<Pod>, Service) {
    let mut job = job(i, namespace, None, false);
    job.metadata.uid = Some(format!("uid-{i}"));
    let (mut pods, mut svc) = objects_of(&job);
    for pod in &mut pods {
        pod.metadata.owner_references = None;
    }
    svc.metadata.owner_references = None;
    (pods, svc)
}

/// The pods and service the operator creates for `job`, its ranks in order.
fn objects_of(job: &DIJob) -> (Vec<Pod>, Service) {
    let ctx = BuildContext::default();
    let slots = build::desired_slots(job);
    let names: Vec<String> = slots.iter().map(|(n, _, _)| n.clone()).collect();
    let ranks = RankTable::default().plan(&names);
    let world = build::world(job, &ranks, &ctx);
    let pods = slots
        .iter()
        .filter_map(|(name, task_index, local_rank)| {
            let slot = ReplicaSlot {
                task_index: *task_index,
                local_rank: *local_rank,
                global_rank: ranks.rank_of(name).unwrap_or(0) as i32,
            };
            build::build_pod(job, &slot, &world, &ctx, None)
        })
        .collect();
    (pods, build::build_service(job))
}

/// Starts [`pods_progress`] on `cluster`'s namespace for `want` pods, and gives its watch a
/// moment to open before the caller creates anything.
async fn follow_pods(
    cluster: &Cluster,
    want: usize,
) -> tokio::task::JoinHandle<anyhow::Result<Progress>> {
    let done = tokio::spawn(pods_progress(
        cluster.client.clone(),
        cluster.namespace.clone(),
        want,
    ));
    tokio::time::sleep(Duration::from_millis(100)).await;
    done
}

/// When the pods of a burst exist and when they all run.
struct Progress {
    exist: Instant,
    running: Instant,
}

/// Follows the pods of `namespace` ADDED from now on until `want` exist and all of those run.
async fn pods_progress(client: Client, namespace: String, want: usize) -> anyhow::Result<Progress> {
    let pods: Api<Pod> = Api::namespaced(client, &namespace);
    let mut rv = pods
        .list_metadata(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut added = HashSet::new();
    let mut running = HashSet::new();
    let mut exist = None;
    loop {
        let mut events = pods
            .watch(&WatchParams::default().timeout(290), &rv)
            .await?
            .boxed();
        while let Some(event) = events.try_next().await? {
            let pod = match event {
                WatchEvent::Added(p) => {
                    added.insert(p.metadata.name.clone().unwrap_or_default());
                    p
                }
                WatchEvent::Modified(p) | WatchEvent::Deleted(p) => p,
                WatchEvent::Bookmark(b) => {
                    rv = b.metadata.resource_version;
                    continue;
                }
                WatchEvent::Error(e) => anyhow::bail!("watch error: {e:?}"),
            };
            rv = pod.metadata.resource_version.clone().unwrap_or_default();
            let name = pod.metadata.name.unwrap_or_default();
            let phase = pod.status.and_then(|s| s.phase);
            if added.contains(&name) && phase.as_deref() == Some("Running") {
                running.insert(name);
            }
            if exist.is_none() && added.len() >= want {
                exist = Some(Instant::now());
            }
            if let Some(exist) = exist
                && running.len() >= want
            {
                return Ok(Progress {
                    exist,
                    running: Instant::now(),
                });
            }
        }
    }
}

/// What one burst of N jobs cost.
#[derive(Default)]
struct Run {
    exist: Duration,
    running: Duration,
    /// Operator CPU seconds (user + system) from the first create until all pods run and the
    /// operator's writes have settled (its Events trail the pods).
    operator_cpu: Option<f64>,
    /// Operator CPU seconds from the first create to all pods Running only (`operator_cpu`
    /// goes on until its writes settle).
    cpu_to_running: Option<f64>,
    /// The operator's API writes per job after all pods ran (mostly its deferred Events).
    trailing_writes: Option<f64>,
    /// With QUIET_SECS, its CPU seconds per second of wall time afterwards, at rest, and its
    /// API calls and reconciles (by result) in that time.
    quiet: Option<(f64, BTreeMap<String, f64>)>,
    /// The operator's DIJob reconciles per job in that time, by result (`ok`, `requeue`,
    /// `error`): what the CPU was spent on.
    reconciles: BTreeMap<String, f64>,
    /// Watch events per job that brought no reconcile, by why (`status_echo`).
    skipped: BTreeMap<String, f64>,
}

async fn create_jobs(
    api: &Api<DIJob>,
    namespace: &str,
    range: std::ops::Range<usize>,
    exit_after: Option<&str>,
    preemptible: bool,
    concurrency: usize,
) -> anyhow::Result<()> {
    stream::iter(range)
        .map(|i| {
            let api = api.clone();
            let j = job(i, namespace, exit_after, preemptible);
            async move { api.create(&PostParams::default(), &j).await }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Starts the operator on `cluster` and waits until a first job's pods run (caches synced).
/// With `plugins`, the operator first loads the `binpack` policy (its default policy) and the
/// `accel-env` mutator (every task) from ConfigMaps, and the warm-up job is preemptible.
async fn warm_operator(
    cluster: &Cluster,
    metrics: bool,
    plugins: bool,
) -> anyhow::Result<Operator> {
    let extra = std::env::var("OPERATOR_ARGS").unwrap_or_default();
    let mut extra: Vec<&str> = extra.split_whitespace().collect();
    if plugins {
        upload_plugins(cluster).await?;
        extra.extend([
            "--plugin-namespace",
            &cluster.namespace,
            "--default-policy",
            "bench-policy",
        ]);
    }
    let operator = Operator::start_with(&cluster.kubeconfig, &extra, metrics)?;
    if plugins {
        plugins_loaded(cluster).await?;
    }
    let jobs: Api<DIJob> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    let warm = pods_progress(cluster.client.clone(), cluster.namespace.clone(), 4);
    let mut w = job(0, &cluster.namespace, None, plugins);
    w.metadata.name = Some("warmup".into());
    let warm = tokio::spawn(warm);
    tokio::time::sleep(Duration::from_millis(100)).await;
    jobs.create(&PostParams::default(), &w).await?;
    tokio::time::timeout(Duration::from_secs(120), warm).await???;
    Ok(operator)
}

/// The two plugins of the memory run, built by `scripts/build-plugins.sh`.
const PLUGINS: [(&str, &str, PluginKind); 2] = [
    ("bench-policy", "binpack", PluginKind::Policy),
    ("bench-mutator", "accel_env", PluginKind::Mutator),
];

async fn upload_plugins(cluster: &Cluster) -> anyhow::Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    for (name, file, kind) in PLUGINS {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("target/plugins")
            .join(format!("{file}.wasm"));
        let bytes = std::fs::read(&path).map_err(|e| {
            anyhow::anyhow!("{}: {e}; run scripts/build-plugins.sh", path.display())
        })?;
        let spec = PluginSpec::new(name, kind);
        let cm = plugin_spec::to_configmap(&spec, bytes, Some(&cluster.namespace));
        api.create(&PostParams::default(), &cm).await?;
    }
    Ok(())
}

/// Waits until the operator reports both plugins loaded on their ConfigMaps.
async fn plugins_loaded(cluster: &Cluster) -> anyhow::Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    let started = Instant::now();
    for (name, _, _) in PLUGINS {
        loop {
            let cm = api.get(&format!("plugin-{name}")).await?;
            let state = cm
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(plugin_spec::STATE_LABEL).cloned());
            if state.as_deref() == Some("Loaded") {
                break;
            }
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(120),
                "plugin {name} not loaded after 120 s (state {state:?})"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

/// Creates N DIJobs and times until all 4N pods exist and run.
async fn via_operator(server: &Server, n: usize, concurrency: usize) -> anyhow::Result<Run> {
    let cluster = Cluster::start(server, &nodes()).await?;
    let operator = warm_operator(&cluster, true, false).await?;
    let addr = operator.metrics.clone().unwrap_or_default();
    let jobs: Api<DIJob> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    let done = follow_pods(&cluster, 4 * n).await;
    let before = common::api_requests(&addr).await?;
    let cpu = cpu_seconds(operator.pid());
    let start = Instant::now();
    create_jobs(&jobs, &cluster.namespace, 0..n, None, false, concurrency).await?;
    let progress = tokio::time::timeout(Duration::from_secs(900), done).await???;
    let cpu_to_running = cpu_seconds(operator.pid()) - cpu;
    let after = common::api_requests(&addr).await?;
    // The Events wait until the controller is idle (behind every job's pod, service and status
    // writes), so many are written after the last pod runs: the burst's CPU is counted until
    // the operator's writes have settled, as the floor's is until its own are done.
    let settled = settled_requests(&addr, WRITES_SETTLE).await?;
    let operator_cpu = Some(cpu_seconds(operator.pid()) - cpu);
    let trailing = delta(&settled, &after)
        .into_iter()
        .filter(|((_, verb), _)| !verb.starts_with("reconcile "))
        .map(|(_, count)| count)
        .sum::<f64>()
        / n as f64;
    // QUIET_SECS: the operator's CPU at rest afterwards, every job Running and nothing changing:
    // what its periodic work (resync, metrics, re-plans, lease) costs per second of wall time.
    let quiet_secs = env_usize("QUIET_SECS", 0);
    let quiet = if quiet_secs > 0 {
        let (before, counts) = (
            cpu_seconds(operator.pid()),
            common::api_requests(&addr).await?,
        );
        let replans = optimize_passes(&addr).await?;
        tokio::time::sleep(Duration::from_secs(quiet_secs as u64)).await;
        let cpu = (cpu_seconds(operator.pid()) - before) / quiet_secs as f64;
        let mut calls: BTreeMap<String, f64> = delta(&common::api_requests(&addr).await?, &counts)
            .into_iter()
            .map(|((resource, verb), count)| (format!("{resource} {verb}"), count))
            .collect();
        calls.insert("re-plans".into(), optimize_passes(&addr).await? - replans);
        Some((cpu, calls))
    } else {
        None
    };
    let (skipped, reconciles): (BTreeMap<_, _>, _) = delta(&after, &before)
        .into_iter()
        .filter_map(|((resource, verb), count)| {
            let result = verb.strip_prefix("reconcile ")?;
            (resource == "dijobs").then(|| (result.to_string(), count / n as f64))
        })
        .partition(|(result, _)| result.starts_with("skipped "));
    let skipped = skipped
        .into_iter()
        .map(|(k, v)| (k.trim_start_matches("skipped ").to_string(), v))
        .collect();
    let run = Run {
        exist: progress.exist - start,
        running: progress.running - start,
        operator_cpu,
        cpu_to_running: Some(cpu_to_running),
        trailing_writes: Some(trailing),
        quiet,
        reconciles,
        skipped,
    };
    drop(operator);
    cluster.finish().await?;
    Ok(run)
}

/// The allocator's re-plans so far (its optimize passes' duration count).
async fn optimize_passes(addr: &str) -> anyhow::Result<f64> {
    let text = common::http_get(&format!("http://{addr}/metrics")).await?;
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix("diorch_allocator_optimize_duration_seconds_count "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0))
}

/// How long a process's API writes must stay unchanged for its burst to be done.
const WRITES_SETTLE: Duration = Duration::from_secs(2);

/// The CPU floor (controller_scale/cpu_floor.rs): its client's CPU seconds from the first create
/// until all pods run and its writes are done, measured as the operator's are.
async fn via_cpu_floor(server: &Server, n: usize, concurrency: usize) -> anyhow::Result<f64> {
    let cluster = Cluster::start(server, &nodes()).await?;
    let (path, ns) = (cluster.kubeconfig.clone(), cluster.namespace.clone());
    let client =
        tokio::task::spawn_blocking(move || cpu_floor::FloorClient::start(&path, &ns)).await??;
    let jobs: Api<DIJob> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    let done = follow_pods(&cluster, 4 * n).await;
    let cpu = cpu_seconds(client.pid());
    create_jobs(&jobs, &cluster.namespace, 0..n, None, false, concurrency).await?;
    tokio::time::timeout(Duration::from_secs(900), done).await???;
    // Until the floor did its writes: every job shows Running, and the Event that follows each
    // Running write is sent (the floor writes nothing else; the operator's CPU is counted
    // until its writes settle too).
    all_jobs_in(&jobs, n, Phase::Running).await?;
    tokio::time::sleep(WRITES_SETTLE).await;
    let used = cpu_seconds(client.pid()) - cpu;
    drop(client);
    cluster.finish().await?;
    Ok(used)
}

/// A run with no operator: waits until the burst's pods run, removes the cluster, and times
/// from `start`.
async fn unattended_run(
    cluster: Cluster,
    done: tokio::task::JoinHandle<anyhow::Result<Progress>>,
    start: Instant,
) -> anyhow::Result<Run> {
    let progress = tokio::time::timeout(Duration::from_secs(900), done).await???;
    cluster.finish().await?;
    Ok(Run {
        exist: progress.exist - start,
        running: progress.running - start,
        operator_cpu: None,
        ..Run::default()
    })
}

/// Creates the same pods and services directly; times until they exist and run.
async fn direct(server: &Server, n: usize, concurrency: usize) -> anyhow::Result<Run> {
    let cluster = Cluster::start(server, &nodes()).await?;
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    let services: Api<Service> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    let objects: Vec<(Vec<Pod>, Service)> = (0..n)
        .map(|i| direct_objects(i, &cluster.namespace))
        .collect();
    let done = follow_pods(&cluster, 4 * n).await;
    let start = Instant::now();
    stream::iter(objects.into_iter().flat_map(|(p, s)| {
        let services = services.clone();
        let pods = pods.clone();
        let svc = async move {
            services
                .create(&PostParams::default(), &s)
                .await
                .map(|_| ())
        };
        std::iter::once(svc.boxed()).chain(p.into_iter().map(move |pod| {
            let pods = pods.clone();
            async move { pods.create(&PostParams::default(), &pod).await.map(|_| ()) }.boxed()
        }))
    }))
    .buffer_unordered(concurrency)
    .try_collect::<Vec<_>>()
    .await?;
    unattended_run(cluster, done, start).await
}

/// The floor of the operator path: what any DI-orchestrator-compatible controller must write
/// before a job's pods exist, written by the bench itself with no watch, no cache and no
/// decision: the DIJob (the user's create), its pods and service, and the Pending and Starting
/// status writes (merge patches guarded by the resourceVersion, as the operator sends them).
/// The Running write and the Events are left out, so this is a lower bound. Up to
/// `concurrency` jobs at once, each job's five creates at once.
async fn via_floor(server: &Server, n: usize, concurrency: usize) -> anyhow::Result<Run> {
    let cluster = Cluster::start(server, &nodes()).await?;
    let ns = cluster.namespace.clone();
    let jobs: Api<DIJob> = Api::namespaced(cluster.client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), &ns);
    let services: Api<Service> = Api::namespaced(cluster.client.clone(), &ns);
    let done = follow_pods(&cluster, 4 * n).await;
    let start = Instant::now();
    stream::iter(0..n)
        .map(|i| {
            let (jobs, pods, services, ns) = (jobs.clone(), pods.clone(), services.clone(), &ns);
            async move {
                let pp = PostParams::default();
                let created = jobs.create(&pp, &job(i, ns, None, false)).await?;
                let (owned, svc) = objects_of(&created);
                let names: Vec<String> = owned
                    .iter()
                    .filter_map(|p| p.metadata.name.clone())
                    .collect();
                let creates = owned
                    .iter()
                    .map(|p| pods.create(&pp, p).map_ok(drop).boxed())
                    .chain(std::iter::once(
                        services.create(&pp, &svc).map_ok(drop).boxed(),
                    ));
                future::try_join_all(creates).await?;
                let name = format!("job-{i}");
                let now = jiff::Timestamp::now().to_string();
                let condition = |phase: &str, reason: &str, message: &str| {
                    serde_json::json!({"type": phase, "status": "True", "reason": reason,
                        "message": message, "lastUpdateTime": now, "lastTransitionTime": now})
                };
                let pending = condition("Pending", "JobPending", "job created.");
                let patch = serde_json::json!({
                    "metadata": {"resourceVersion": created.metadata.resource_version},
                    "status": {"phase": "Pending", "conditions": [pending], "replicas": 4,
                        "readyReplicas": 0, "restarts": 0, "reschedules": 0, "ranks": names}
                });
                let pp = PatchParams::default();
                let written = jobs.patch_status(&name, &pp, &Patch::Merge(&patch)).await?;
                let starting = condition(
                    "Starting",
                    "JobStarting",
                    "job is starting since all replicas are created.",
                );
                let patch = serde_json::json!({
                    "metadata": {"resourceVersion": written.metadata.resource_version},
                    "status": {"phase": "Starting", "conditions": [pending, starting]}
                });
                jobs.patch_status(&name, &pp, &Patch::Merge(&patch)).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    unattended_run(cluster, done, start).await
}

/// Waits until every job of `namespace` but the warm-up is in `phase`.
async fn all_jobs_in(api: &Api<DIJob>, n: usize, phase: Phase) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let list = api.list(&ListParams::default()).await?;
        let done = list
            .items
            .iter()
            .filter(|j| j.metadata.name.as_deref() != Some("warmup"))
            .filter(|j| j.status.as_ref().and_then(|s| s.phase.as_ref()) == Some(&phase))
            .count();
        if done >= n {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{done} of {n} jobs {phase:?} after 10 min"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The operator's request counts once they have not changed for `quiet` (its Event worker and
/// last status writes trail the phase a bench sees).
async fn settled_requests(
    addr: &str,
    quiet: Duration,
) -> anyhow::Result<BTreeMap<(String, String), f64>> {
    // Requests only: reconciles that write nothing (a preemptible job's periodic pass) do not
    // keep the operator from being quiet.
    let requests = |counts: &Counts| -> Counts {
        counts
            .iter()
            .filter(|((_, verb), _)| !verb.starts_with("reconcile "))
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    };
    let mut last = common::api_requests(addr).await?;
    loop {
        tokio::time::sleep(quiet).await;
        let now = common::api_requests(addr).await?;
        if requests(&now) == requests(&last) {
            return Ok(now);
        }
        last = now;
    }
}

type Counts = BTreeMap<(String, String), f64>;

fn delta(after: &Counts, before: &Counts) -> Counts {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

/// The writes a job needs (DI-orchestrator's observable results): its 4 pods, its service, and
/// one status write per phase it shows (Pending, Starting, Running; then Succeeded), and the
/// service's delete at the end. Events are not in it: client-go's recorder would write 8 for a
/// 4-pod job to Running (JobPending, 5 SuccessfulCreate, JobStarting, JobRunning) and 2 after.
fn floor(resource: &str, verb: &str, to_succeeded: bool) -> Option<f64> {
    match (resource, verb, to_succeeded) {
        ("pods", "create", false) => Some(4.0),
        ("services", "create", false) => Some(1.0),
        ("dijobs/status", "update" | "patch", false) => Some(3.0),
        ("dijobs/status", "update" | "patch", true) => Some(1.0),
        // cleanPodPolicy: DI-orchestrator deletes the service of a finished job.
        ("services", "delete", true) => Some(1.0),
        _ => None,
    }
}

/// N jobs whose pods exit 0 30 s after Running: the requests per job from create to all jobs
/// Running, and from there to all jobs Succeeded.
async fn writes(server: &Server, n: usize, concurrency: usize) -> anyhow::Result<()> {
    let cluster = Cluster::start(server, &nodes()).await?;
    let operator = warm_operator(&cluster, true, false).await?;
    let addr = operator.metrics.clone().unwrap_or_default();
    let jobs: Api<DIJob> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    let before = settled_requests(&addr, Duration::from_secs(1)).await?;
    create_jobs(
        &jobs,
        &cluster.namespace,
        1..n + 1,
        Some("30s"),
        false,
        concurrency,
    )
    .await?;
    all_jobs_in(&jobs, n, Phase::Running).await?;
    // The Events of the way to Running go once the controller is idle: counted with it.
    let running = settled_requests(&addr, Duration::from_secs(2)).await?;
    all_jobs_in(&jobs, n, Phase::Succeeded).await?;
    let succeeded = settled_requests(&addr, Duration::from_secs(2)).await?;
    drop(operator);
    cluster.finish().await?;

    let to_running = delta(&running, &before);
    let to_succeeded = delta(&succeeded, &running);
    println!(
        "  API requests per job, {} ({n} jobs of 4 pods; floor: pods, service, one status write per phase):",
        server.label()
    );
    println!(
        "    {:<26} {:>16} {:>7} {:>18} {:>7}",
        "resource verb", "create→Running", "floor", "Running→Succeeded", "floor"
    );
    let keys: std::collections::BTreeSet<&(String, String)> =
        to_running.keys().chain(to_succeeded.keys()).collect();
    let (mut writes_running, mut writes_succeeded) = (0.0, 0.0);
    for key in keys {
        let (resource, verb) = key;
        let a = to_running.get(key).copied().unwrap_or(0.0) / n as f64;
        let b = to_succeeded.get(key).copied().unwrap_or(0.0) / n as f64;
        let is_write = matches!(
            verb.split(' ').next().unwrap_or_default(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        );
        if is_write {
            writes_running += a;
            writes_succeeded += b;
        }
        let show = |f: Option<f64>| f.map_or("-".to_string(), |f| format!("{f:.0}"));
        println!(
            "    {:<26} {a:>16.2} {:>7} {b:>18.2} {:>7}",
            format!("{resource} {verb}"),
            show(floor(resource, verb, false)),
            show(floor(resource, verb, true)),
        );
        common::csv_row(&format!(
            "controller-writes,{},{resource},{verb},{a:.3},{b:.3}",
            server.label()
        ));
    }
    println!(
        "    {:<26} {writes_running:>16.2} {:>7} {writes_succeeded:>18.2} {:>7}",
        "all writes", 8, 2
    );
    println!("    (Events, not in the floor: client-go's recorder would write 8 and 2)");
    Ok(())
}

/// Memory: the operator's RSS after each quarter of `jobs` preemptible DIJobs × 4 pods; the
/// cost of one more job is the least-squares slope through those points, with a policy and a
/// mutator loaded and used for every job. (The difference of two points, what this reported
/// before, moved by ±2 KiB per job from run to run on the real server.)
async fn memory(server: &Server, jobs: usize, concurrency: usize) -> anyhow::Result<()> {
    let cluster = Cluster::start(server, &nodes()).await?;
    let operator = warm_operator(&cluster, true, true).await?;
    let addr = operator.metrics.clone().unwrap_or_default();
    let api: Api<DIJob> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    const STEPS: usize = 4;
    let mut points = Vec::new();
    for step in 0..STEPS {
        let range = jobs * step / STEPS..jobs * (step + 1) / STEPS;
        let (end, want) = (range.end, 4 * range.len());
        let done = follow_pods(&cluster, want).await;
        create_jobs(&api, &cluster.namespace, range, None, true, concurrency).await?;
        tokio::time::timeout(Duration::from_secs(900), done).await???;
        all_jobs_in(&api, end, Phase::Running).await?;
        // The status writes and Events that trail the pods (no request for 2 s: the held
        // Events are out), then a quiet moment: the memory of jobs that run, not of a burst.
        settled_requests(&addr, Duration::from_secs(2)).await?;
        tokio::time::sleep(Duration::from_secs(5)).await;
        points.push((end as f64, rss_mib(operator.pid())));
    }
    let per_job_kib = slope(&points) * 1024.0;
    if std::env::var_os("OPERATOR_WRAPPER").is_some_and(|w| !w.is_empty()) {
        println!("  (operator RSS not measured: OPERATOR_WRAPPER runs it under another process)");
        drop(operator);
        cluster.finish().await?;
        return Ok(());
    }
    let shown: Vec<String> = points
        .iter()
        .map(|(n, mib)| format!("{mib:.1} MiB at {n}"))
        .collect();
    let last = points.last().map_or(f64::NAN, |p| p.1);
    // The most it held at once (job-creation bursts, re-plans): what a memory limit must allow.
    let peak = peak_rss_of_mib(operator.pid());
    println!(
        "  operator RSS, {} (policy and mutator loaded, jobs preemptible): {}; {per_job_kib:.1} KiB per extra job (least-squares slope); high-water mark {peak:.1} MiB",
        server.label(),
        shown.join(", ")
    );
    common::csv_row(&format!(
        "memory,{},{jobs},{last:.1},{per_job_kib:.1},{peak:.1}",
        server.label()
    ));
    drop(operator);
    cluster.finish().await?;
    Ok(())
}

/// The least-squares slope of `points` (x, y); NaN for fewer than two distinct x.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let (mx, my) = points
        .iter()
        .fold((0.0, 0.0), |(x, y), p| (x + p.0 / n, y + p.1 / n));
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (x, y) in points {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx) * (x - mx);
    }
    sxy / sxx
}

/// The median of `values` (the upper one of the middle two for an even count).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// One round of the timed paths at one N.
struct Round {
    direct: Run,
    floor: Run,
    /// CPU floor seconds per 1 000 jobs.
    cpu_floor: f64,
    operator: Run,
}

/// The rounds reduced to their medians, number by number (times and CPU seconds). The
/// operator's reconcile counts are those of its round with the median time to Running.
fn medians(rounds: Vec<Round>) -> Round {
    let pick = |f: &dyn Fn(&Round) -> f64| median(rounds.iter().map(f).collect());
    let run = |path: fn(&Round) -> &Run| Run {
        exist: Duration::from_secs_f64(pick(&|r| path(r).exist.as_secs_f64())),
        running: Duration::from_secs_f64(pick(&|r| path(r).running.as_secs_f64())),
        operator_cpu: rounds
            .first()
            .and_then(|r| path(r).operator_cpu)
            .map(|_| pick(&|r| path(r).operator_cpu.unwrap_or(0.0))),
        cpu_to_running: rounds
            .first()
            .and_then(|r| path(r).cpu_to_running)
            .map(|_| pick(&|r| path(r).cpu_to_running.unwrap_or(0.0))),
        ..Run::default()
    };
    let running = pick(&|r| r.operator.running.as_secs_f64());
    let counts = rounds
        .iter()
        .find(|r| r.operator.running.as_secs_f64() == running)
        .map(|r| (r.operator.reconciles.clone(), r.operator.skipped.clone()))
        .unwrap_or_default();
    Round {
        direct: run(|r| &r.direct),
        floor: run(|r| &r.floor),
        cpu_floor: pick(&|r| r.cpu_floor),
        operator: Run {
            reconciles: counts.0,
            skipped: counts.1,
            ..run(|r| &r.operator)
        },
    }
}

/// Reconciles per job by result, as `2.10 (ok 1.60, requeue 0.50)`.
fn passes(by_result: &BTreeMap<String, f64>) -> String {
    let all: f64 = by_result.values().sum();
    let each: Vec<String> = by_result
        .iter()
        .map(|(result, n)| format!("{result} {n:.2}"))
        .collect();
    format!("{all:.2} ({})", each.join(", "))
}

fn main() -> anyhow::Result<()> {
    // The CPU floor's client is this binary again (cpu_floor.rs).
    if let Ok(namespace) = std::env::var(cpu_floor::ENV) {
        return cpu_floor::main(namespace);
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(bench())
}

async fn bench() -> anyhow::Result<()> {
    let (sizes, real_sizes) = common::env_sizes();
    let write_jobs = env_usize("WRITE_JOBS", 100);
    let memory_jobs = env_usize("MEMORY_JOBS", 5_000);
    let concurrency = env_usize("CONCURRENCY", 32);
    // PATHS=operator times the operator's path alone (no direct and floor runs).
    let paths = std::env::var("PATHS").unwrap_or_else(|_| "direct,floor,operator".into());

    let rounds_wanted = env_usize("MEDIAN_OF", 3).max(1);
    let ms = |t: Duration| t.as_secs_f64() * 1e3;

    println!(
        "controller bench: 4 replicas per DIJob, {concurrency} concurrent creates; times and CPU: the median of {rounds_wanted} rounds"
    );
    for server in Server::all() {
        let sizes = match server {
            Server::Sandbox => &sizes,
            Server::Real(_) => &real_sizes,
        };
        for &n in sizes {
            if !paths.contains("direct") {
                // Only the operator's path (a profile: scripts/profile-operator.sh), and with
                // PATHS=operator,cpu-floor the CPU floor's.
                if paths.contains("cpu-floor") {
                    let c = via_cpu_floor(&server, n, concurrency).await?;
                    println!(
                        "  {}, N = {n:>5}: CPU floor {:.2} s per 1000 jobs",
                        server.label(),
                        c * 1000.0 / n as f64
                    );
                }
                let o = via_operator(&server, n, concurrency).await?;
                println!(
                    "  {}, N = {n:>5}: via operator: pods exist {:.1} ms, Running {:.1} ms; operator CPU {:.2} s per 1000 jobs until its writes settled ({:.2} s to all pods Running; {:.2} writes per job after that); reconciles per job {}; watch events per job that brought none {}",
                    server.label(),
                    o.exist.as_secs_f64() * 1e3,
                    o.running.as_secs_f64() * 1e3,
                    o.operator_cpu.unwrap_or(0.0) * 1000.0 / n as f64,
                    o.cpu_to_running.unwrap_or(0.0) * 1000.0 / n as f64,
                    o.trailing_writes.unwrap_or(0.0),
                    passes(&o.reconciles),
                    passes(&o.skipped),
                );
                if let Some((cpu, calls)) = &o.quiet {
                    println!(
                        "  {}, N = {n:>5}: operator CPU at rest afterwards: {:.1} ms per second; in those {} s: {calls:?}",
                        server.label(),
                        cpu * 1e3,
                        env_usize("QUIET_SECS", 0),
                    );
                }
                continue;
            }
            // The paths one after the other, MEDIAN_OF times: each number reported is the median
            // of its rounds (one run on a shared 2-core machine moved a ratio by 0.1). Not ROUNDS:
            // scripts/bench.sh sets that for the placement bench, the worst of its rounds.
            let mut rounds = Vec::new();
            for round in 1..=rounds_wanted {
                let d = direct(&server, n, concurrency).await?;
                let f = via_floor(&server, n, concurrency).await?;
                let c = via_cpu_floor(&server, n, concurrency).await? * 1000.0 / n as f64;
                let o = via_operator(&server, n, concurrency).await?;
                if rounds_wanted > 1 {
                    println!(
                        "    {}, N = {n}, round {round}: pods exist: direct {:.1} ms, floor {:.1} ms, via operator {:.1} ms; Running: {:.1}, {:.1}, {:.1} ms; operator CPU {:.2} s per 1000 jobs ({:.2} s to all pods Running), CPU floor {c:.2} s",
                        server.label(),
                        ms(d.exist),
                        ms(f.exist),
                        ms(o.exist),
                        ms(d.running),
                        ms(f.running),
                        ms(o.running),
                        o.operator_cpu.unwrap_or(0.0) * 1000.0 / n as f64,
                        o.cpu_to_running.unwrap_or(0.0) * 1000.0 / n as f64,
                    );
                }
                rounds.push(Round {
                    direct: d,
                    floor: f,
                    cpu_floor: c,
                    operator: o,
                });
            }
            let Round {
                direct: d,
                floor: f,
                cpu_floor: c,
                operator: o,
            } = medians(rounds);
            let cpu = o.operator_cpu.unwrap_or(0.0);
            let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
            println!(
                "  {}, N = {n:>5}: pods exist: direct {:>8.1} ms, floor {:>8.1} ms, via operator {:>8.1} ms, ratio {:.2} ({:.2} over the floor); pods Running: direct {:>8.1} ms, floor {:>8.1} ms, via operator {:>8.1} ms, ratio {:.2} ({:.2} over the floor); operator CPU {:.2} s per 1000 jobs until its writes settled ({:.2} s to all pods Running)",
                server.label(),
                ms(d.exist),
                ms(f.exist),
                ms(o.exist),
                ratio(o.exist, d.exist),
                ratio(o.exist, f.exist),
                ms(d.running),
                ms(f.running),
                ms(o.running),
                ratio(o.running, d.running),
                ratio(o.running, f.running),
                cpu * 1000.0 / n as f64,
                o.cpu_to_running.unwrap_or(0.0) * 1000.0 / n as f64,
            );
            println!(
                "    reconciles per job to Running: {}; watch events per job that brought none: {}; CPU floor {c:.2} s per 1000 jobs ({:.2}x)",
                passes(&o.reconciles),
                passes(&o.skipped),
                cpu * 1000.0 / n as f64 / c,
            );
            common::csv_row(&format!(
                "controller-floor,{},{n},{:.1},{:.1},{c:.2}",
                server.label(),
                ms(f.exist),
                ms(f.running),
            ));
            common::csv_row(&format!(
                "controller-time,{},{n},{:.1},{:.1},{:.1},{:.1},{:.2}",
                server.label(),
                d.exist.as_secs_f64() * 1e3,
                o.exist.as_secs_f64() * 1e3,
                d.running.as_secs_f64() * 1e3,
                o.running.as_secs_f64() * 1e3,
                cpu * 1000.0 / n as f64,
            ));
        }
        if write_jobs > 0 {
            writes(&server, write_jobs, concurrency).await?;
        }
        // A real server's 20 000 pods take minutes to create and to delete again; the per-job
        // slope needs fewer (REAL_MEMORY_JOBS).
        let memory_jobs = match server {
            Server::Sandbox => memory_jobs,
            Server::Real(_) => env_usize("REAL_MEMORY_JOBS", memory_jobs.min(2_000)),
        };
        if memory_jobs > 1 {
            memory(&server, memory_jobs, concurrency).await?;
        }
    }
    Ok(())
}
