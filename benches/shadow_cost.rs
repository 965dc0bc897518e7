//! Shadow cost bench: what a shadow policy costs the active one. The operator's allocator
//! (`Allocator::admit`, the real code path) admits N preemptible jobs one after another with the
//! Wasm bin-pack policy active, once alone and once with the Wasm spread policy attached as its
//! shadow (`diorch.io/shadow-of`), in rounds of alone, shadowed, shadowed, alone. It prints the
//! active admission's p50 and p99 latency per variant, their ratio (goal: p99 within 5 %), the
//! process CPU seconds per 1 000 admissions (the shadow's calls, made on the same runtime,
//! included once its queue has drained), and how many shadow calls were made and dropped:
//! admissions back to back leave a shadow no idle time, so most of a burst's are dropped.
//!
//! `cargo bench --bench shadow_cost` (env: JOBS=1000, NODES=100, ROUNDS=2; BENCH_CSV gets
//! `shadow,admit,…` rows). Needs `scripts/build-plugins.sh` first.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a measurement program: a panic is its report

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector;
use kube::runtime::watcher::Event;

use common::{cpu_seconds, env_usize};
use diorch::allocator::{Allocator, Settings};
use diorch::metrics::Metrics;
use diorch::plugin::registry::PluginRegistry;
use diorch::plugin::spec::{PluginKind, PluginSpec, Rollout};
use diorch::plugin::{HostConfig, NativePolicy, PluginHost};
use diorch_core::api::DIJob;
use diorch_core::cached::CachedJob;
use diorch_core::placement::Admission;

fn wasm(name: &str) -> Arc<[u8]> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/plugins")
        .join(format!("{name}.wasm"));
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run scripts/build-plugins.sh", path.display()))
        .into()
}

fn job(i: usize) -> DIJob {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1",
        "kind": "DIJob",
        "metadata": {"name": format!("job-{i}"), "namespace": "bench", "uid": format!("uid-{i}"),
            "annotations": {"diorch.io/policy": "binpack"}},
        "spec": {"preemptible": true, "tasks": [
            {"name": "learner", "type": "learner", "replicas": 1, "template": {"spec": {"containers": [
                {"name": "di-container", "image": "busybox", "resources": {"requests": {"cpu": "500m", "nvidia.com/gpu": "1"}}}]}}},
            {"name": "collector", "type": "collector", "replicas": 3, "template": {"spec": {"containers": [
                {"name": "di-container", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}]}}}
        ]}
    }))
    .expect("valid job")
}

/// What one run measured.
struct Run {
    latencies: Vec<Duration>,
    /// CPU seconds of the process, the shadow's calls included.
    cpu: f64,
    /// Shadow calls made and dropped (a full queue).
    made: u64,
    dropped: u64,
}

/// Admits `jobs` jobs on `nodes` nodes of 16 GPUs.
async fn run(nodes: usize, jobs: usize, shadowed: bool) -> Run {
    let registry = PluginRegistry::new(
        PluginHost::new(HostConfig::default()).unwrap(),
        NativePolicy::BinPack,
    );
    registry
        .apply(
            PluginSpec::new("binpack", PluginKind::Policy),
            wasm("binpack"),
        )
        .await
        .unwrap();
    if shadowed {
        let mut spec = PluginSpec::new("binpack-next", PluginKind::Policy);
        spec.rollout = Rollout::ShadowOf("binpack".into());
        registry.apply(spec, wasm("spread")).await.unwrap();
    }
    let (node_store, mut node_writer) = reflector::store::<Node>();
    for i in 0..nodes {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("node-{i:03}"), "resourceVersion": "1"},
            "status": {
                "allocatable": {"cpu": "128", "memory": "512Gi", "nvidia.com/gpu": "16", "pods": "600"},
                "conditions": [{"type": "Ready", "status": "True"}]
            }
        }))
        .unwrap();
        node_writer.apply_watcher_event(&Event::Apply(node));
    }
    let (job_store, _job_writer) = reflector::store::<CachedJob>();
    let metrics = Arc::new(Metrics::new());
    let settings = Settings::default();
    let reports = settings.shadow_reports.clone();
    let (allocator, _retries) =
        Allocator::new(Arc::new(registry), node_store, job_store, settings, metrics);
    // Warm up: the first call compiles nothing (loaded above) but fills caches.
    allocator.admit(&job(usize::MAX)).await;
    let pid = std::process::id();
    let cpu_before = cpu_seconds(pid);
    let mut latencies = Vec::with_capacity(jobs);
    for i in 0..jobs {
        let j = job(i);
        let started = Instant::now();
        let answer = allocator.admit(&j).await;
        latencies.push(started.elapsed());
        assert!(matches!(answer, Admission::Placed { .. }), "{answer:?}");
    }
    let counts = || {
        reports
            .get("binpack")
            .and_then(|r| r.shadows.get("binpack-next").cloned())
            .map_or((0, 0), |c| (c.same + c.different + c.failed, c.dropped))
    };
    if shadowed {
        // The shadow's calls count too: wait until it has answered every input it was given.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let (made, dropped) = counts();
            if made + dropped > jobs as u64 || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let (made, dropped) = counts();
    Run {
        latencies,
        cpu: cpu_seconds(pid) - cpu_before,
        made,
        dropped,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let jobs = env_usize("JOBS", 1000);
    let nodes = env_usize("NODES", 100);
    let rounds = env_usize("ROUNDS", 2).max(1);
    println!(
        "shadow cost bench: {jobs} admissions with Wasm bin-pack active on {nodes} nodes, alone and with Wasm spread as its shadow"
    );
    let mut alone = Vec::new();
    let mut shadowed = Vec::new();
    let (mut cpu_alone, mut cpu_shadowed) = (0.0, 0.0);
    let (mut made, mut dropped) = (0, 0);
    for round in 1..=rounds {
        // Alone, shadowed, shadowed, alone: a linear drift of the machine's load cancels.
        for shadow in [false, true, true, false] {
            let r = run(nodes, jobs, shadow).await;
            if shadow {
                shadowed.extend(r.latencies);
                cpu_shadowed += r.cpu;
                made += r.made;
                dropped += r.dropped;
            } else {
                alone.extend(r.latencies);
                cpu_alone += r.cpu;
            }
        }
        println!("  round {round} done");
    }
    alone.sort();
    shadowed.sort();
    let runs = (2 * rounds) as f64;
    let per_1000 = |cpu: f64| cpu / runs / jobs as f64 * 1000.0;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (p50a, p99a) = (percentile(&alone, 0.5), percentile(&alone, 0.99));
    let (p50s, p99s) = (percentile(&shadowed, 0.5), percentile(&shadowed, 0.99));
    println!(
        "  alone:    p50 {:.3} ms, p99 {:.3} ms, CPU {:.3} s per 1 000 admissions",
        ms(p50a),
        ms(p99a),
        per_1000(cpu_alone)
    );
    println!(
        "  shadowed: p50 {:.3} ms, p99 {:.3} ms, CPU {:.3} s per 1 000 admissions (shadow calls included)",
        ms(p50s),
        ms(p99s),
        per_1000(cpu_shadowed)
    );
    println!(
        "  shadow calls: {made} made, {dropped} dropped (the queue holds {}; a shadow runs only \
         in the idle time between admissions)",
        diorch::allocator::shadow::QUEUE_CAPACITY
    );
    let ratio = p99s.as_secs_f64() / p99a.as_secs_f64();
    println!(
        "  p99 shadowed/alone {ratio:.3} (goal <= 1.05), p50 {:.3}",
        p50s.as_secs_f64() / p50a.as_secs_f64()
    );
    for (measure, a, s) in [
        ("active allocate p50 ms", ms(p50a), ms(p50s)),
        ("active allocate p99 ms", ms(p99a), ms(p99s)),
        (
            "process CPU s per 1000 admissions",
            per_1000(cpu_alone),
            per_1000(cpu_shadowed),
        ),
    ] {
        common::csv_row(&format!("shadow,admit,{measure},{a:.4},{s:.4}"));
    }
}
