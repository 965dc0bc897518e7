//! Refusals at load: a component of the wrong world or no component at all, one too big or too
//! slow to compile, and a memory cap the plugin memory budget cannot give.

use std::time::{Duration, Instant};

use diorch::plugin::registry::PluginRegistry;
use diorch::plugin::spec::{PluginKind, PluginSpec};
use diorch::plugin::{HostConfig, NativePolicy, PluginHost, World};

use super::{host, is_wrong_world, wasm};

#[test]
fn wrong_world_and_garbage_are_refused_at_load() {
    let host = host();
    let err = host
        .load_policy_blocking("mut", &wasm("node_placement"), None)
        .err()
        .unwrap();
    assert!(is_wrong_world(&err, World::SchedulingPolicy), "{err}");
    assert!(err.to_string().contains("scheduling-policy"), "{err}");
    let err = host
        .load_mutator_blocking("pol", &wasm("binpack"), None)
        .err()
        .unwrap();
    assert!(is_wrong_world(&err, World::PodMutator), "{err}");

    for (what, bytes) in [
        ("garbage", b"definitely not wasm".to_vec()),
        ("empty", vec![]),
        ("core module", b"\0asm\x01\0\0\0".to_vec()),
        ("truncated", wasm("binpack")[..1000].to_vec()),
    ] {
        let err = host.load_policy_blocking(what, &bytes, None).err().unwrap();
        assert_eq!(err.reason(), "CompileError", "{what}: {err}");
        assert!(err.to_string().contains("not a valid component"), "{err}");
    }
}

#[test]
fn oversized_components_and_slow_compiles_are_refused_at_load() {
    let host = host();
    // Size: refused before compiling, by `plugin check FILE` (inspect) as by a load.
    let big = vec![0u8; diorch::plugin::MAX_COMPONENT_BYTES + 1];
    let err = host.load_policy_blocking("big", &big, None).err().unwrap();
    assert_eq!(err.reason(), "LoadLimit", "{err}");
    assert!(err.to_string().contains("67108865 bytes"), "{err}");
    let err = host.inspect(&big).unwrap_err();
    assert_eq!(err.reason(), "LoadLimit", "{err}");

    // Compile time: a timeout no compile can meet refuses the load without waiting for it.
    let slow = PluginHost::new(HostConfig {
        compile_timeout: Duration::from_micros(1),
        compile_per_mib: Duration::ZERO,
        ..HostConfig::default()
    })
    .unwrap();
    let bytes = wasm("binpack");
    let err = slow
        .load_policy_blocking("slow", &bytes, None)
        .err()
        .unwrap();
    assert_eq!(err.reason(), "LoadLimit", "{err}");
    assert!(err.to_string().contains("took longer than 1µs"), "{err}");
    // Its compile goes on (it cannot be cancelled) and holds the one compile slot: uploads
    // queue behind it, each with its own budget once its turn comes. Past 16 compile threads
    // alive (running or queued), the next upload is refused at once instead of queueing.
    let results: Vec<String> = std::thread::scope(|scope| {
        let calls: Vec<_> = (0..24)
            .map(|_| {
                let (slow, bytes) = (&slow, &bytes);
                scope.spawn(move || {
                    slow.load_policy_blocking("slow", bytes, None)
                        .err()
                        .map(|e| e.to_string())
                        .unwrap_or_default()
                })
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    assert!(
        results
            .iter()
            .any(|e| e.contains("compiles are still running")),
        "{results:#?}"
    );
    assert!(
        results
            .iter()
            .all(|e| e.contains("compiles are still running") || e.contains("took longer than")),
        "{results:#?}"
    );
    // Once they end, compiles run again (and still time out).
    let started = Instant::now();
    loop {
        let err = slow
            .load_policy_blocking("slow", &bytes, None)
            .err()
            .unwrap();
        if err.to_string().contains("took longer than") {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{err}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A normal timeout loads it.
    host.load_policy_blocking("fine", &bytes, None).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_cap_the_budget_cannot_give_is_refused_at_load() {
    let registry = PluginRegistry::new(
        PluginHost::new(HostConfig {
            max_concurrent_calls: 2,
            memory_budget: 100 << 20,
            ..HostConfig::default()
        })
        .unwrap(),
        NativePolicy::BinPack,
    );
    // (64 MiB + 4 MiB of host copies) x 2 calls = 136 MiB > 100 MiB.
    let mut greedy = PluginSpec::new("greedy", PluginKind::Policy);
    greedy.memory_bytes = Some(64 << 20);
    let err = registry
        .apply(greedy, wasm("binpack").into())
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "LoadLimit", "{err}");
    assert!(
        err.to_string()
            .contains("is 136 MiB: more than the plugin memory budget of 100 MiB"),
        "{err}"
    );
    let status = registry.status_of("greedy").unwrap();
    assert!(!status.healthy && status.sha256.is_none(), "{status:?}");
    assert!(status.last_error.unwrap().contains("memory budget"));
    // (32 + 4) x 2 = 72 MiB fits.
    let mut modest = PluginSpec::new("modest", PluginKind::Policy);
    modest.memory_bytes = Some(32 << 20);
    registry
        .apply(modest, wasm("binpack").into())
        .await
        .unwrap();
}
