//! Cold and warm load of one component through the plugin host: a first load compiles it and
//! writes the compiled artifact to the disk cache; a new host on the same cache (an operator
//! restart) loads it from disk; a second load on the same host finds it in memory.
//!
//! `PLUGIN_LOAD_COMPONENT=path.wasm PLUGIN_LOAD_WORLD=policy|mutator cargo bench --bench
//! plugin_load` (default: target/plugins/binpack.wasm, a policy). Prints one line per case with
//! the wall time and the process's peak RSS so far (VmHWM).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a measurement program: a panic is its report

mod common;

use std::time::{Duration, Instant};

use common::peak_rss_mib;
use diorch::plugin::{HostConfig, PluginHost};

fn main() {
    let path = std::env::var("PLUGIN_LOAD_COMPONENT")
        .unwrap_or_else(|_| "target/plugins/binpack.wasm".to_string());
    let mutator = std::env::var("PLUGIN_LOAD_WORLD").is_ok_and(|w| w == "mutator");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let cache = tempfile::tempdir().expect("tempdir");
    let host = || {
        PluginHost::new(HostConfig {
            cache_dir: Some(cache.path().to_path_buf()),
            // A measurement, not a bound: let the cold compile take what it takes.
            compile_timeout: Duration::from_secs(600),
            ..HostConfig::default()
        })
        .expect("host")
    };
    let load = |host: &PluginHost| {
        let started = Instant::now();
        if mutator {
            host.load_mutator_blocking("m", &bytes, None).map(|_| ())
        } else {
            host.load_policy_blocking("p", &bytes, None).map(|_| ())
        }
        .expect("load");
        started.elapsed()
    };
    println!(
        "component {path}: {} bytes ({:.1} MiB)",
        bytes.len(),
        bytes.len() as f64 / f64::from(1 << 20)
    );
    let first = host();
    let cold = load(&first);
    println!(
        "cold load (compile, write the artifact to disk): {:>9.1} ms, peak RSS {:.0} MiB",
        cold.as_secs_f64() * 1e3,
        peak_rss_mib()
    );
    let memory = load(&first);
    println!(
        "warm load, same host (memory cache):              {:>9.1} ms",
        memory.as_secs_f64() * 1e3
    );
    drop(first);
    let restarted = host();
    let disk = load(&restarted);
    println!(
        "warm load, new host (disk cache, verified):       {:>9.1} ms, peak RSS {:.0} MiB",
        disk.as_secs_f64() * 1e3,
        peak_rss_mib()
    );
    let artifacts: u64 = walk(cache.path());
    println!(
        "disk cache: {:.1} MiB",
        artifacts as f64 / f64::from(1 << 20)
    );
}

fn walk(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| {
            let path = e.path();
            if path.is_dir() {
                walk(&path)
            } else {
                e.metadata().map_or(0, |m| m.len())
            }
        })
        .sum()
}
