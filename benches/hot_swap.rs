//! Hot-swap latency: from replacing a plugin ConfigMap to the first call served by the new
//! version, through the real watcher, registry and host against the in-process sandbox API.
//! Each swap alternates between two components; the first upload of each is compiled
//! (Cranelift), later ones hit the host's compile cache (keyed by sha256). The time includes
//! the API write and the watch event's trip, so it is an upper bound of "watch event to first
//! call".
//!
//! `cargo bench --bench hot_swap` (env: SWAPS=20). Needs `scripts/build-plugins.sh` first.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a measurement program: a panic is its report

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::env_usize;
use diorch::plugin::registry::PluginRegistry;
use diorch::plugin::spec::{self, PluginKind, PluginSpec};
use diorch::plugin::{HostConfig, NativePolicy, PluginHost, SchedulingPolicy, sample};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};

fn wasm(name: &str) -> anyhow::Result<Vec<u8>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/plugins")
        .join(format!("{name}.wasm"));
    std::fs::read(&path)
        .map_err(|e| anyhow::anyhow!("{}: {e}; run scripts/build-plugins.sh", path.display()))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let swaps = env_usize("SWAPS", 20);
    let sandbox = diorch_sandbox::launch(diorch_sandbox::SandboxOptions {
        listen: "127.0.0.1:0".parse()?,
        kubeconfig_out: None,
        cluster: None,
        auth: Default::default(),
    })
    .await?;
    let client = sandbox.client()?;
    let registry = Arc::new(PluginRegistry::new(
        PluginHost::new(HostConfig::default())?,
        NativePolicy::BinPack,
    ));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let watcher = tokio::spawn(diorch::controller::plugins::run(
        client.clone(),
        "default",
        registry.clone(),
        diorch::leader::Leadership::always(),
        async move {
            let _ = stopped.await;
        },
    ));
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let versions = [wasm("binpack")?, wasm("spread")?];
    let spec = PluginSpec::new("swap", PluginKind::Policy);
    let (job, nodes) = sample::allocate_input(100, 2);
    let (job, nodes): (Arc<_>, Arc<[_]>) = (Arc::new(job), nodes.into());

    let mut compiled = Vec::new();
    let mut cached = Vec::new();
    for i in 0..swaps {
        let bytes = versions[i % 2].clone();
        let sha = {
            use sha2::Digest as _;
            let d = sha2::Sha256::digest(&bytes);
            d.iter().map(|b| format!("{b:02x}")).collect::<String>()
        };
        let mut cm = spec::to_configmap(&spec, bytes, Some("default"));
        let started = Instant::now();
        // A merge patch: the watcher writes status labels on the same ConfigMap meanwhile.
        if i == 0 {
            api.create(&PostParams::default(), &cm).await?;
        } else {
            cm.metadata.labels = None;
            api.patch("plugin-swap", &PatchParams::default(), &Patch::Merge(&cm))
                .await?;
        }
        // The first call served by the new version.
        loop {
            if let Some(p) = registry.wasm_policy("swap")
                && p.sha256() == sha
            {
                p.allocate(job.clone(), nodes.clone()).await?;
                break;
            }
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(10),
                "swap {i} never landed"
            );
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        let took = started.elapsed();
        if i < 2 {
            compiled.push(took)
        } else {
            cached.push(took)
        }
    }
    let _ = stop.send(());
    let _ = watcher.await;
    let ms = |d: &Duration| d.as_secs_f64() * 1e3;
    println!("hot swap, ConfigMap write to first call on the new version ({swaps} swaps):");
    for (what, times) in [
        ("first upload (compile)", &compiled),
        ("re-upload (compile cache)", &cached),
    ] {
        let mut sorted: Vec<f64> = times.iter().map(ms).collect();
        sorted.sort_by(f64::total_cmp);
        if let (Some(min), Some(max)) = (sorted.first(), sorted.last()) {
            println!(
                "  {what:<28} n = {:>3}, min {min:>7.2} ms, median {:>7.2} ms, max {max:>7.2} ms",
                sorted.len(),
                sorted[sorted.len() / 2]
            );
        }
    }
    sandbox.stop().await;
    Ok(())
}
