//! Plugin call costs: Wasm (fresh Store + instantiate + lowering + call + output check) against
//! the same `diorch-policies` code called natively on a by-value copy of the same input.
//!
//! Needs the components: `bash scripts/build-plugins.sh`, then
//! `cargo bench --bench plugin_calls`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a measurement program: a panic is its report

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

use diorch::plugin::{HostConfig, PluginHost, sample};
use diorch_policies::Policy;
use diorch_policies::binpack::BinPack;

fn wasm(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/plugins")
        .join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; run scripts/build-plugins.sh first",
            path.display()
        )
    })
}

fn calls(c: &mut Criterion) {
    let host = PluginHost::new(HostConfig::default()).unwrap();
    let binpack = host
        .load_policy_blocking("binpack", &wasm("binpack"), None)
        .unwrap();

    let mut group = c.benchmark_group("allocate");
    for n in [100, 1000] {
        let (job, nodes) = sample::allocate_input(n, 2);
        group.bench_with_input(BenchmarkId::new("wasm-binpack", n), &n, |b, _| {
            b.iter(|| {
                binpack
                    .allocate_blocking(black_box(&job), black_box(&nodes))
                    .unwrap()
            })
        });
        group.bench_with_input(BenchmarkId::new("native-by-value", n), &n, |b, _| {
            b.iter(|| {
                let (job, nodes) = (black_box(&job).clone(), black_box(&nodes).clone());
                BinPack.allocate(&job, &nodes).unwrap()
            })
        });
        group.bench_with_input(BenchmarkId::new("native-by-ref", n), &n, |b, _| {
            b.iter(|| {
                BinPack
                    .allocate(black_box(&job), black_box(&nodes))
                    .unwrap()
            })
        });
    }
    // The same nodes without labels and extended resources: how much of the Wasm cost is
    // lowering strings (the sample nodes carry ~9 strings each).
    let (job, mut nodes) = sample::allocate_input(100, 2);
    for n in &mut nodes {
        n.labels.clear();
        n.allocatable.extended.clear();
        n.free.extended.clear();
    }
    group.bench_function("wasm-binpack-no-labels/100", |b| {
        b.iter(|| {
            binpack
                .allocate_blocking(black_box(&job), black_box(&nodes))
                .unwrap()
        })
    });
    group.bench_function("native-by-value-no-labels/100", |b| {
        b.iter(|| {
            let (job, nodes) = (black_box(&job).clone(), black_box(&nodes).clone());
            BinPack.allocate(&job, &nodes).unwrap()
        })
    });
    group.finish();

    let mut group = c.benchmark_group("optimize-50-jobs-100-nodes");
    let (jobs, nodes) = sample::optimize_input(50, 100);
    group.bench_function("wasm-binpack", |b| {
        b.iter(|| {
            binpack
                .optimize_blocking(black_box(&jobs), black_box(&nodes), &[])
                .unwrap()
        })
    });
    group.bench_function("native-by-value", |b| {
        b.iter(|| {
            let (jobs, nodes) = (black_box(&jobs).clone(), black_box(&nodes).clone());
            BinPack.optimize(&jobs, &nodes, &[]).unwrap()
        })
    });
    group.finish();

    // Fixed cost: a fresh Store, instantiation and a call with a one-replica job on one node.
    let mut group = c.benchmark_group("fixed-cost");
    let mut job = sample::job("default/tiny", 0);
    job.tasks.truncate(2);
    let one_node = sample::nodes(1);
    group.bench_function("fresh-store-instantiate-trivial-call", |b| {
        b.iter(|| {
            binpack
                .allocate_raw(black_box(&job), black_box(&one_node))
                .unwrap()
        })
    });
    group.finish();

    let mut group = c.benchmark_group("compile");
    group.sample_size(10);
    for name in ["binpack", "spread", "node_placement", "accel_env"] {
        let bytes = wasm(name);
        group.bench_function(name, |b| {
            b.iter(|| host.inspect(black_box(&bytes)).unwrap())
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = calls
}
criterion_main!(benches);
