//! The cost of a plugin by the language it is written in: the same examples (bin-pack, spread,
//! the env mutator) in Rust, Python and JavaScript, through the operator's host.
//!
//! `cargo bench --bench plugin_languages` (components from scripts/build-plugins.sh and
//! scripts/build-lang-plugins.sh; `PLUGIN_LANGUAGES=path.wasm,…` measures others, e.g. a
//! SpiderMonkey build). Each component is measured in a child process of its own, so that
//! "peak compile memory" is that component's (the process's VmHWM after the compile):
//! - size; cold compile (no cache); warm load (a new host on the disk cache: an operator restart);
//! - fixed cost: a fresh instance and the smallest call (a 1-replica job on 1 node; a mutator's
//!   sample pod);
//! - allocate, a 7-replica job on 100 and 1 000 nodes; optimize, 50 jobs on 100 nodes (median of
//!   the runs, each a fresh instance and a call, as the operator makes them).
//!
//! Prints one Markdown table row per component (docs/performance.md keeps the last run's).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a measurement program: a panic is its report

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::peak_rss_mib;
use diorch::plugin::{HostConfig, Limits, PluginHost, Resources, sample};

const DEFAULT: &[&str] = &[
    "binpack",
    "py_binpack",
    "js_binpack",
    "spread",
    "py_spread",
    "js_spread",
    "accel_env",
    "py_accel_env",
    "js_accel_env",
];

fn median(mut f: impl FnMut() -> Duration, runs: usize) -> Duration {
    let mut times: Vec<Duration> = (0..runs).map(|_| f()).collect();
    times.sort();
    times[times.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// Measures one component (in this process) and prints its row.
fn measure(path: &Path) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let name = path.file_stem().unwrap().to_string_lossy().to_string();
    let cache = tempfile::tempdir().expect("tempdir");
    let host = || {
        PluginHost::new(HostConfig {
            cache_dir: Some(cache.path().to_path_buf()),
            // A measurement, not a bound.
            compile_timeout: Duration::from_secs(600),
            limits: Limits {
                deadline: Duration::from_secs(30),
                ..Limits::default()
            },
            ..HostConfig::default()
        })
        .expect("host")
    };
    let first = host();
    let started = Instant::now();
    // One compile either way: a mutator's failed policy load leaves the compiled component in
    // the host's memory cache.
    let policy = first.load_policy_blocking("p", &bytes, None).ok();
    let mutate = policy.is_none().then(|| {
        first
            .load_mutator_blocking("m", &bytes, None)
            .expect("load")
    });
    let mutator = mutate.is_some();
    let cold = started.elapsed();
    let peak = peak_rss_mib();
    let started = Instant::now();
    let second = host();
    if mutator {
        second
            .load_mutator_blocking("m", &bytes, None)
            .expect("warm load");
    } else {
        second
            .load_policy_blocking("p", &bytes, None)
            .expect("warm load");
    }
    let warm = started.elapsed();
    let row = |fixed: Duration, rest: &str| {
        println!(
            "| {name} | {:.2} MiB | {:.2} s | {} | {} | {rest} | {peak:.0} MiB |",
            bytes.len() as f64 / f64::from(1 << 20),
            cold.as_secs_f64(),
            ms(warm),
            ms(fixed),
        );
    };
    if let Some(p) = policy {
        let mut one = sample::nodes(1);
        one[0].free = Resources::new(64_000, 512 << 30, 8);
        let small = sample::job("default/one", 1);
        let mut small = small;
        small.tasks.retain(|t| t.task_type == "learner");
        let fixed = median(
            || {
                let t = Instant::now();
                p.allocate_blocking(&small, &one).expect("fixed");
                t.elapsed()
            },
            30,
        );
        let at = |n: usize| {
            let (job, nodes) = sample::allocate_input(n, 2);
            median(
                || {
                    let t = Instant::now();
                    p.allocate_blocking(&job, &nodes).expect("allocate");
                    t.elapsed()
                },
                15,
            )
        };
        let (a100, a1000) = (at(100), at(1000));
        let (jobs, nodes) = sample::optimize_input(50, 100);
        let opt = median(
            || {
                let t = Instant::now();
                p.optimize_blocking(&jobs, &nodes, &[]).expect("optimize");
                t.elapsed()
            },
            7,
        );
        row(
            fixed,
            &format!("{} | {} | {}", ms(a100), ms(a1000), ms(opt)),
        );
    } else if let Some(m) = mutate {
        let (ctx, pod) = sample::pod("learner");
        let fixed = median(
            || {
                let t = Instant::now();
                m.mutate_blocking(&ctx, &pod).expect("mutate");
                t.elapsed()
            },
            30,
        );
        row(fixed, "– | – | –");
    }
}

fn main() {
    if let Ok(one) = std::env::var("PLUGIN_LANGUAGES_ONE") {
        measure(Path::new(&one));
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let components: Vec<std::path::PathBuf> = match std::env::var("PLUGIN_LANGUAGES") {
        Ok(list) => list.split(',').map(Into::into).collect(),
        Err(_) => DEFAULT
            .iter()
            .map(|n| root.join("target/plugins").join(format!("{n}.wasm")))
            .collect(),
    };
    println!(
        "| component | size | cold compile | warm load | fixed cost | allocate 100 nodes | \
         allocate 1 000 nodes | optimize 50 jobs | peak compile RSS |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let exe = std::env::current_exe().expect("current exe");
    for path in components {
        if !path.exists() {
            println!(
                "| {} | missing: build it first | | | | | | | |",
                path.display()
            );
            continue;
        }
        let status = std::process::Command::new(&exe)
            .env("PLUGIN_LANGUAGES_ONE", &path)
            .status()
            .expect("child");
        if !status.success() {
            println!("| {} | failed ({status}) | | | | | | | |", path.display());
        }
    }
}
