//! Sandbox scale bench: runs the `diorch-sandbox serve` binary (API server only, no simulated
//! cluster), loads it with 5 000 DIJobs and 20 000 pods while 10 watchers follow the pods, and
//! prints objects created per second, list latency, watch event latency and the server's
//! resident memory.
//!
//! `cargo bench --bench sandbox_scale` (env: JOBS, PODS, WATCHERS, CONCURRENCY to change sizes).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a measurement program: a panic is its report

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ListParams, PostParams, WatchEvent, WatchParams};

use common::{env_usize, rss_mib};
use diorch_core::api::DIJob;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn job(i: usize) -> DIJob {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1",
        "kind": "DIJob",
        "metadata": {"name": format!("job-{i}")},
        "spec": {"tasks": [
            {"type": "learner", "replicas": 1, "template": {"spec": {"containers": [{"name": "di-container", "image": "busybox"}]}}},
            {"type": "collector", "replicas": 3, "template": {"spec": {"containers": [{"name": "di-container", "image": "busybox"}]}}}
        ]}
    }))
    .expect("valid job")
}

fn pod(i: usize) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": format!("pod-{i}"), "labels": {"diengine/job": format!("job-{}", i / 4)}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "di-container", "image": "busybox",
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}
    }))
    .expect("valid pod")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let jobs = env_usize("JOBS", 5_000);
    let pods = env_usize("PODS", 20_000);
    let watchers = env_usize("WATCHERS", 10);
    let concurrency = env_usize("CONCURRENCY", 32);

    let sandbox = common::Sandbox::start()?;
    let pid = sandbox.pid();
    let client = sandbox.client.clone();
    let idle_rss = rss_mib(pid);

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &diorch_core::api::crd::dijob_crd())
        .await?;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let dijobs: Api<DIJob> = Api::namespaced(client.clone(), "default");
    let start = Instant::now();
    stream::iter(0..jobs)
        .map(|i| {
            let api = dijobs.clone();
            async move { api.create(&PostParams::default(), &job(i)).await }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    let jobs_elapsed = start.elapsed();

    // Watchers follow pods from the current resourceVersion and timestamp every ADDED event.
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let rv = pod_api
        .list_metadata(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let sent: Arc<Mutex<HashMap<String, Instant>>> =
        Arc::new(Mutex::new(HashMap::with_capacity(pods)));
    let mut watcher_tasks = Vec::new();
    for _ in 0..watchers {
        let api = pod_api.clone();
        let rv = rv.clone();
        let sent = sent.clone();
        watcher_tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(pods);
            let mut events = api
                .watch(&WatchParams::default().timeout(290), &rv)
                .await?
                .boxed();
            while latencies.len() < pods {
                match events.try_next().await? {
                    Some(WatchEvent::Added(p)) => {
                        let now = Instant::now();
                        let name = p.metadata.name.unwrap_or_default();
                        let at = sent.lock().map(|m| m.get(&name).copied()).ok().flatten();
                        if let Some(at) = at {
                            latencies.push(now.saturating_duration_since(at));
                        }
                    }
                    Some(_) => {}
                    None => break,
                }
            }
            anyhow::Ok(latencies)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let start = Instant::now();
    stream::iter(0..pods)
        .map(|i| {
            let api = pod_api.clone();
            let sent = sent.clone();
            async move {
                let p = pod(i);
                if let Ok(mut m) = sent.lock() {
                    m.insert(format!("pod-{i}"), Instant::now());
                }
                api.create(&PostParams::default(), &p).await
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    let pods_elapsed = start.elapsed();

    let mut latencies = Vec::new();
    for task in watcher_tasks {
        latencies.extend(task.await??);
    }
    latencies.sort();

    let mut full_lists = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let list = pod_api.list(&ListParams::default()).await?;
        full_lists.push(t.elapsed());
        anyhow::ensure!(list.items.len() == pods, "listed {} pods", list.items.len());
    }
    full_lists.sort();
    let mut paged = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let mut params = ListParams::default().limit(500);
        let mut seen = 0;
        loop {
            let page = pod_api.list(&params).await?;
            seen += page.items.len();
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => params = params.continue_token(&token),
                _ => break,
            }
        }
        paged.push(t.elapsed());
        anyhow::ensure!(seen == pods, "paged list saw {seen} pods");
    }
    paged.sort();
    let selector_t = Instant::now();
    let selected = pod_api
        .list(&ListParams::default().labels("diengine/job=job-7"))
        .await?;
    let selector_elapsed = selector_t.elapsed();

    let loaded_rss = rss_mib(pid);
    drop(sandbox);

    println!(
        "sandbox scale bench: {jobs} DIJobs, {pods} pods, {watchers} watchers, {concurrency} concurrent creates"
    );
    println!(
        "  create DIJobs: {:>8.0} objects/s ({:.2?} total)",
        jobs as f64 / jobs_elapsed.as_secs_f64(),
        jobs_elapsed
    );
    println!(
        "  create pods:   {:>8.0} objects/s ({:.2?} total, while {watchers} watchers stream)",
        pods as f64 / pods_elapsed.as_secs_f64(),
        pods_elapsed
    );
    println!(
        "  list {pods} pods (one page): median {:.1?}, max {:.1?}",
        percentile(&full_lists, 0.5),
        percentile(&full_lists, 1.0)
    );
    println!(
        "  list {pods} pods (pages of 500): median {:.1?}",
        percentile(&paged, 0.5)
    );
    println!(
        "  list by label selector ({} of {pods} pods): {:.1?}",
        selected.items.len(),
        selector_elapsed
    );
    println!(
        "  watch event latency over {} events: p50 {:.2?}, p99 {:.2?}, max {:.2?}",
        latencies.len(),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        percentile(&latencies, 1.0)
    );
    println!("  sandbox RSS: idle {idle_rss:.0} MiB, loaded {loaded_rss:.0} MiB");
    Ok(())
}
