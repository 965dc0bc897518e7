//! Placement bench: time from creating N preemptible DIJobs (4 replicas each) to all their
//! pods bound to nodes in the sandbox (`--nodes 100 --node-gpus 16`, room for 1 600 jobs), with
//! the real `diorch run`, once with the built-in bin-pack policy and once with the same policy
//! as a Wasm plugin (`target/plugins/binpack.wasm`, uploaded as a ConfigMap and named by
//! `--default-policy`), in rounds of native, Wasm, Wasm, native, and the means compared.
//!
//! With `SHADOW=1`, then at the largest size (on the sandbox only): the Wasm bin-pack alone
//! against Wasm bin-pack with Wasm spread attached as its shadow (`diorch.io/shadow-of`), in
//! rounds of alone, shadowed, shadowed, alone: placement time and the operator's CPU seconds
//! per 1 000 jobs, as `shadow,placement,…` rows.
//!
//! `cargo bench --bench placement` (env: SIZES=100,1000 (on a real server REAL_SIZES, default
//! SIZES), NODES=100, CONCURRENCY=32, ROUNDS=3, SHADOW=0;
//! PLACEMENT_METRICS=1 prints each run's policy-call histogram and CPU seconds). Needs
//! `scripts/build-plugins.sh` first for the Wasm run.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a measurement program: a panic is its report

mod common;

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{ListParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client};

use common::{Cluster, Nodes, Operator, Server, cpu_seconds, env_usize};
use diorch_core::api::DIJob;

fn job(name: &str) -> DIJob {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1",
        "kind": "DIJob",
        "metadata": {"name": name},
        "spec": {"preemptible": true, "tasks": [
            {"name": "learner", "type": "learner", "replicas": 1, "template": {"spec": {"containers": [
                {"name": "di-container", "image": "busybox", "resources": {"requests": {"cpu": "500m", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}},
            {"name": "collector", "type": "collector", "replicas": 3, "template": {"spec": {"containers": [
                {"name": "di-container", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}]}}}
        ]}
    }))
    .expect("valid job")
}

/// Counts pods of `default` getting a node from now on, until `want` are bound.
async fn pods_bound(client: Client, namespace: String, want: usize) -> anyhow::Result<Instant> {
    let pods: Api<Pod> = Api::namespaced(client, &namespace);
    let mut rv = pods
        .list_metadata(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut bound = std::collections::HashSet::new();
    while bound.len() < want {
        let mut events = pods
            .watch(&WatchParams::default().timeout(290), &rv)
            .await?
            .boxed();
        while let Some(event) = events.try_next().await? {
            match event {
                WatchEvent::Added(p) | WatchEvent::Modified(p) => {
                    rv = p.metadata.resource_version.clone().unwrap_or_default();
                    if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                        bound.insert(p.metadata.name.unwrap_or_default());
                    }
                    if bound.len() >= want {
                        break;
                    }
                }
                WatchEvent::Deleted(p) => rv = p.metadata.resource_version.unwrap_or_default(),
                WatchEvent::Bookmark(b) => rv = b.metadata.resource_version,
                WatchEvent::Error(e) => anyhow::bail!("watch error: {e:?}"),
            }
        }
    }
    Ok(Instant::now())
}

/// The nodes of every run: 100 of 16 GPUs (room for 1 600 jobs), no kubelet Events.
fn nodes(count: usize) -> Nodes {
    let count = count.to_string();
    Nodes::new(&[
        "--nodes",
        &count,
        "--node-gpus",
        "16",
        "--node-cpu",
        "128",
        "--node-pods",
        "600",
        "--kubelet-events",
        "false",
        "--sim-concurrency",
        "64",
    ])
}

/// Which policy places the jobs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Native,
    Wasm,
    /// Wasm bin-pack with Wasm spread as its shadow.
    Shadowed,
}

/// Uploads `target/plugins/<file>.wasm` as policy `name` (with `rollout`) into `namespace`.
async fn upload(
    cluster: &Cluster,
    namespace: &str,
    file: &str,
    name: &str,
    rollout: diorch::plugin::spec::Rollout,
) -> anyhow::Result<()> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/plugins")
        .join(format!("{file}.wasm"));
    let bytes = std::fs::read(&path)
        .map_err(|e| anyhow::anyhow!("{}: {e}; run scripts/build-plugins.sh", path.display()))?;
    let mut spec =
        diorch::plugin::spec::PluginSpec::new(name, diorch::plugin::spec::PluginKind::Policy);
    spec.rollout = rollout;
    let cm = diorch::plugin::spec::to_configmap(&spec, bytes, Some(namespace));
    Api::<ConfigMap>::namespaced(cluster.client.clone(), namespace)
        .create(&PostParams::default(), &cm)
        .await?;
    Ok(())
}

/// One run: a fresh cluster of `nodes` nodes, the operator with `variant`'s policies, N jobs
/// created; returns the time to all 4N pods bound and the operator's CPU seconds meanwhile.
async fn run(
    server: &Server,
    n: usize,
    nodes_count: usize,
    variant: Variant,
    concurrency: usize,
) -> anyhow::Result<(Duration, f64)> {
    let cluster = Cluster::start(server, &nodes(nodes_count)).await?;
    let namespace = cluster.namespace.clone();
    let mut extra = vec!["--optimize-period", "0s", "--plugin-namespace", &namespace];
    let wasm = variant != Variant::Native;
    if wasm {
        use diorch::plugin::spec::Rollout;
        upload(&cluster, &namespace, "binpack", "binpack", Rollout::Own).await?;
        if variant == Variant::Shadowed {
            let shadow = Rollout::ShadowOf("binpack".into());
            upload(&cluster, &namespace, "spread", "binpack-next", shadow).await?;
        }
        extra.extend(["--default-policy", "binpack"]);
    }
    // PLACEMENT_METRICS=1: serve the operator's metrics and print the allocator's and
    // reconciler's totals after the run, to see where a difference comes from.
    let show_metrics = std::env::var_os("PLACEMENT_METRICS").is_some();
    let operator = Operator::start_with(&cluster.kubeconfig, &extra, show_metrics)?;
    // Warm up: caches synced, the plugin loaded, once a first job is placed.
    let jobs: Api<DIJob> = Api::namespaced(cluster.client.clone(), &namespace);
    let warm = tokio::spawn(pods_bound(cluster.client.clone(), namespace.clone(), 4));
    tokio::time::sleep(Duration::from_millis(100)).await;
    jobs.create(&PostParams::default(), &job("warmup")).await?;
    tokio::time::timeout(Duration::from_secs(120), warm).await???;

    let server_pid = cluster.sandbox.as_ref().map(|s| s.pid());
    let cpu_before = (
        cpu_seconds(operator.pid()),
        server_pid.map_or(0.0, cpu_seconds),
    );
    let done = tokio::spawn(pods_bound(cluster.client.clone(), namespace.clone(), 4 * n));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let start = Instant::now();
    stream::iter(0..n)
        .map(|i| {
            let api = jobs.clone();
            async move {
                api.create(&PostParams::default(), &job(&format!("job-{i}")))
                    .await
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    let end = tokio::time::timeout(Duration::from_secs(600), done).await???;
    let operator_cpu = cpu_seconds(operator.pid()) - cpu_before.0;
    if let Some(addr) = &operator.metrics {
        print_totals(addr, if wasm { "Wasm" } else { "native" }).await?;
        println!(
            "      CPU seconds while placing (user + system): operator {operator_cpu:.2}, sandbox {:.2}",
            server_pid.map_or(0.0, cpu_seconds) - cpu_before.1
        );
    }
    drop(operator);
    cluster.finish().await?;
    Ok((end - start, operator_cpu))
}

/// `SHADOW=1`: Wasm bin-pack alone against the same with a shadow, at `n` jobs on the sandbox,
/// in `rounds` rounds of alone, shadowed, shadowed, alone.
async fn shadow_cost(
    n: usize,
    nodes: usize,
    concurrency: usize,
    rounds: usize,
) -> anyhow::Result<()> {
    let server = Server::Sandbox;
    let (mut alone, mut shadowed) = ((Duration::ZERO, 0.0), (Duration::ZERO, 0.0));
    for round in 1..=rounds {
        let a = run(&server, n, nodes, Variant::Wasm, concurrency).await?;
        let s1 = run(&server, n, nodes, Variant::Shadowed, concurrency).await?;
        let s2 = run(&server, n, nodes, Variant::Shadowed, concurrency).await?;
        let b = run(&server, n, nodes, Variant::Wasm, concurrency).await?;
        println!(
            "  shadow, N = {n}, round {round}: alone {:.1} ms ({:.2} s CPU), shadowed {:.1} ms ({:.2} s CPU)",
            (a.0 + b.0).as_secs_f64() * 500.0,
            (a.1 + b.1) / 2.0,
            (s1.0 + s2.0).as_secs_f64() * 500.0,
            (s1.1 + s2.1) / 2.0,
        );
        alone = (alone.0 + a.0 + b.0, alone.1 + a.1 + b.1);
        shadowed = (shadowed.0 + s1.0 + s2.0, shadowed.1 + s1.1 + s2.1);
    }
    let runs = 2.0 * rounds as f64;
    let ms = |d: Duration| d.as_secs_f64() * 1e3 / runs;
    let per_1000 = |cpu: f64| cpu / runs * 1000.0 / n as f64;
    println!(
        "  shadow, N = {n}: placement alone {:.1} ms, shadowed {:.1} ms ({:.3}x); operator CPU per 1 000 jobs alone {:.2} s, shadowed {:.2} s",
        ms(alone.0),
        ms(shadowed.0),
        shadowed.0.as_secs_f64() / alone.0.as_secs_f64(),
        per_1000(alone.1),
        per_1000(shadowed.1)
    );
    common::csv_row(&format!(
        "shadow,placement,time to all pods bound ms N = {n},{:.1},{:.1}",
        ms(alone.0),
        ms(shadowed.0)
    ));
    common::csv_row(&format!(
        "shadow,placement,operator CPU s per 1000 jobs,{:.3},{:.3}",
        per_1000(alone.1),
        per_1000(shadowed.1)
    ));
    Ok(())
}

/// Prints the policy-call histogram, the reconcile duration's sum and count and the reconcile
/// totals.
async fn print_totals(addr: &str, variant: &str) -> anyhow::Result<()> {
    let text = common::http_get(&format!("http://{addr}/metrics")).await?;
    println!("    {variant}:");
    if variant == "Wasm" {
        // How the allocate calls were served: inline, or on the blocking pool.
        let plugins = common::http_get(&format!("http://{addr}/plugins")).await?;
        let plugins: serde_json::Value = serde_json::from_str(&plugins)?;
        for p in plugins.as_array().into_iter().flatten() {
            println!(
                "      plugin {}: allocate calls {}",
                p["name"], p["allocateCalls"]
            );
        }
    }
    for line in text.lines().filter(|l| {
        l.starts_with("diorch_allocator_policy_call_duration_seconds_")
            || l.starts_with("diorch_plugin_calls_total")
            || ((l.starts_with("diorch_reconcile_duration_seconds_")
                || l.starts_with("diorch_reconciles_total"))
                && !l.contains("_bucket"))
    }) {
        println!("      {line}");
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (sizes, real_sizes) = common::env_sizes();
    let nodes = env_usize("NODES", 100);
    let concurrency = env_usize("CONCURRENCY", 32);
    println!(
        "placement bench: preemptible DIJobs of 4 replicas (1 GPU learner + 3 collectors), {nodes} nodes of 16 GPUs, time to all pods bound"
    );
    let rounds = env_usize("ROUNDS", 3).max(1);
    for server in Server::all() {
        let sizes = match server {
            Server::Sandbox => &sizes,
            Server::Real(_) => &real_sizes,
        };
        for &n in sizes {
            let mut native_total = Duration::ZERO;
            let mut wasm_total = Duration::ZERO;
            let mut ratios = Vec::new();
            // Eight runs of 1 000 jobs take minutes on a real server; REAL_ROUNDS (default 1).
            let rounds = match server {
                Server::Sandbox => rounds,
                Server::Real(_) => env_usize("REAL_ROUNDS", 1).max(1),
            };
            for round in 1..=rounds {
                // Native, Wasm, Wasm, native: on a shared machine the load drifts between runs; the
                // mean of each variant's two runs cancels a drift that is linear in time.
                let native_a = run(&server, n, nodes, Variant::Native, concurrency)
                    .await?
                    .0;
                let wasm_a = run(&server, n, nodes, Variant::Wasm, concurrency).await?.0;
                let wasm_b = run(&server, n, nodes, Variant::Wasm, concurrency).await?.0;
                let native_b = run(&server, n, nodes, Variant::Native, concurrency)
                    .await?
                    .0;
                let native = (native_a + native_b) / 2;
                let wasm = (wasm_a + wasm_b) / 2;
                let ratio = wasm.as_secs_f64() / native.as_secs_f64();
                println!(
                    "  {}, N = {n:>5}, round {round}: built-in {:>7.1} ms, Wasm {:>7.1} ms, Wasm/native {ratio:.3}",
                    server.label(),
                    native.as_secs_f64() * 1e3,
                    wasm.as_secs_f64() * 1e3,
                );
                native_total += native;
                wasm_total += wasm;
                ratios.push(ratio);
            }
            let runs = u32::try_from(rounds).unwrap_or(1);
            let native = native_total / runs;
            let wasm = wasm_total / runs;
            let lowest = ratios.iter().copied().fold(f64::INFINITY, f64::min);
            let highest = ratios.iter().copied().fold(0.0, f64::max);
            println!(
                "  {}, N = {n:>5}: built-in bin-pack {:>8.1} ms ({:.0} jobs/s), Wasm bin-pack {:>8.1} ms ({:.0} jobs/s), Wasm/native {:.3} (rounds {lowest:.3}..{highest:.3})",
                server.label(),
                native.as_secs_f64() * 1e3,
                n as f64 / native.as_secs_f64(),
                wasm.as_secs_f64() * 1e3,
                n as f64 / wasm.as_secs_f64(),
                wasm.as_secs_f64() / native.as_secs_f64()
            );
            for (round, ratio) in ratios.iter().enumerate() {
                common::csv_row(&format!(
                    "placement,{},{n},{},{ratio:.4}",
                    server.label(),
                    round + 1
                ));
            }
        }
    }
    if env_usize("SHADOW", 0) == 1
        && let Some(&n) = sizes.iter().max()
    {
        shadow_cost(n, nodes, concurrency, rounds).await?;
    }
    Ok(())
}
