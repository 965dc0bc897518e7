//! Controller bench: time from creating N DIJobs (4 replicas each) to all their pods existing in
//! the sandbox with the real `diorch run`, against creating the same pods and services directly
//! with the kube client, in one run; then the operator's resident memory after 5 000 DIJobs ×
//! 4 pods.
//!
//! `cargo bench --bench controller_scale` (env: SIZES=100,1000, MEMORY_JOBS=5000,
//! CONCURRENCY=32, OPERATOR_ARGS for extra `diorch run` flags). The operator runs with `--qps 0` (no client-side limit), as the direct
//! path has none either.

mod common;

use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client};

use common::{Operator, Sandbox, env_usize, rss_mib};
use diorch_core::api::DIJob;
use diorch_core::build::{self, BuildContext, ReplicaSlot};
use diorch_core::ranks::RankTable;

fn job(i: usize) -> DIJob {
    let task = |t: &str, r: i32| {
        serde_json::json!({"name": t, "type": t, "replicas": r, "template": {"spec": {"containers": [
            {"name": "di-container", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}]}}})
    };
    serde_json::from_value(serde_json::json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1",
        "kind": "DIJob",
        "metadata": {"name": format!("job-{i}"), "namespace": "default", "uid": format!("uid-{i}")},
        "spec": {"tasks": [task("learner", 1), task("evaluator", 1), task("collector", 2)]}
    }))
    .expect("valid job")
}

/// The pods and service the operator would create for `job(i)`, minus owner references (their
/// owner does not exist on the direct path, and garbage collection would remove them).
fn direct_objects(i: usize) -> (Vec<Pod>, Service) {
    let job = job(i);
    let ctx = BuildContext::default();
    let slots = build::desired_slots(&job);
    let names: Vec<String> = slots.iter().map(|(n, _, _)| n.clone()).collect();
    let ranks = RankTable::default().plan(&names);
    let world = build::world(&job, &ranks, &ctx);
    let pods = slots
        .iter()
        .filter_map(|(name, task_index, local_rank)| {
            let slot = ReplicaSlot {
                task_index: *task_index,
                local_rank: *local_rank,
                global_rank: ranks.rank_of(name).unwrap_or(0) as i32,
            };
            let mut pod = build::build_pod(&job, &slot, &world, &ctx, None)?;
            pod.metadata.owner_references = None;
            Some(pod)
        })
        .collect();
    let mut svc = build::build_service(&job);
    svc.metadata.owner_references = None;
    (pods, svc)
}

async fn install_crd(client: &Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &diorch_core::api::crd::dijob_crd())
        .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(())
}

/// Counts pods ADDED in `default` from now on, until `want` have been seen.
async fn pods_seen(client: Client, want: usize) -> anyhow::Result<Instant> {
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let rv = pods
        .list_metadata(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut seen = 0;
    let mut rv = rv;
    while seen < want {
        let mut events = pods
            .watch_metadata(&WatchParams::default().timeout(290), &rv)
            .await?
            .boxed();
        while let Some(event) = events.try_next().await? {
            match event {
                WatchEvent::Added(p) => {
                    seen += 1;
                    rv = p.metadata.resource_version.unwrap_or_default();
                    if seen >= want {
                        break;
                    }
                }
                WatchEvent::Bookmark(b) => rv = b.metadata.resource_version,
                WatchEvent::Modified(p) | WatchEvent::Deleted(p) => {
                    rv = p.metadata.resource_version.unwrap_or_default();
                }
                WatchEvent::Error(e) => anyhow::bail!("watch error: {e:?}"),
            }
        }
    }
    Ok(Instant::now())
}

/// Creates N DIJobs and times until all 4N pods exist; returns (elapsed, sandbox, operator).
async fn via_operator(
    n: usize,
    concurrency: usize,
) -> anyhow::Result<(Duration, Sandbox, Operator)> {
    let sandbox = Sandbox::start()?;
    install_crd(&sandbox.client).await?;
    let extra = std::env::var("OPERATOR_ARGS").unwrap_or_default();
    let extra: Vec<&str> = extra.split_whitespace().collect();
    let operator = Operator::start(&sandbox.kubeconfig, &extra)?;
    // Warm up: the operator has synced its caches once a first job's pods exist.
    let jobs: Api<DIJob> = Api::namespaced(sandbox.client.clone(), "default");
    let warm = pods_seen(sandbox.client.clone(), 4);
    let mut w = job(0);
    w.metadata.name = Some("warmup".into());
    w.metadata.uid = None;
    jobs.create(&PostParams::default(), &w).await?;
    tokio::time::timeout(Duration::from_secs(30), warm).await??;

    let done = tokio::spawn(pods_seen(sandbox.client.clone(), 4 * n));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let start = Instant::now();
    stream::iter(0..n)
        .map(|i| {
            let api = jobs.clone();
            let mut j = job(i);
            j.metadata.uid = None;
            async move { api.create(&PostParams::default(), &j).await }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    let end = done.await??;
    Ok((end - start, sandbox, operator))
}

/// Creates the same pods and services directly; returns the elapsed time.
async fn direct(n: usize, concurrency: usize) -> anyhow::Result<Duration> {
    let sandbox = Sandbox::start()?;
    install_crd(&sandbox.client).await?;
    let pods: Api<Pod> = Api::namespaced(sandbox.client.clone(), "default");
    let services: Api<Service> = Api::namespaced(sandbox.client.clone(), "default");
    let objects: Vec<(Vec<Pod>, Service)> = (0..n).map(direct_objects).collect();
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
    Ok(start.elapsed())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let sizes: Vec<usize> = std::env::var("SIZES")
        .unwrap_or_else(|_| "100,1000".to_string())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let memory_jobs = env_usize("MEMORY_JOBS", 5_000);
    let concurrency = env_usize("CONCURRENCY", 32);

    println!("controller bench: 4 replicas per DIJob, {concurrency} concurrent creates");
    for n in sizes {
        let d = direct(n, concurrency).await?;
        let (o, _sandbox, _operator) = via_operator(n, concurrency).await?;
        println!(
            "  N = {n:>5}: direct {:>8.1} ms, via operator {:>8.1} ms, ratio {:.2}",
            d.as_secs_f64() * 1e3,
            o.as_secs_f64() * 1e3,
            o.as_secs_f64() / d.as_secs_f64()
        );
    }
    if memory_jobs > 0 {
        let (elapsed, _sandbox, operator) = via_operator(memory_jobs, concurrency).await?;
        // Let the phase writes that follow pod creation finish before measuring.
        tokio::time::sleep(Duration::from_secs(5)).await;
        println!(
            "  operator RSS after {memory_jobs} DIJobs x 4 pods (all created in {:.1} s): {:.1} MiB",
            elapsed.as_secs_f64(),
            rss_mib(operator.0.id())
        );
    }
    Ok(())
}
