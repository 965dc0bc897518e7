//! How `allocate` calls are served: inline on the caller's thread within one epoch tick, else
//! on the blocking pool with the full deadline; the example policies answer inline, and the
//! registry's status shows the split.

use std::sync::Arc;
use std::time::{Duration, Instant};

use diorch::plugin::spec::{PluginKind, PluginSpec};
use diorch::plugin::{
    CallPaths, HostConfig, Limits, Node, PluginError, PluginHost, SchedulingPolicy, sample,
};

use super::{default_registry, hostile_job, wasm};

/// Runs `call`, reporting whether its first poll already finished it and how long that poll took.
async fn first_poll<F: std::future::Future + Unpin>(mut call: F) -> (F::Output, bool, Duration) {
    let started = Instant::now();
    match futures::poll!(&mut call) {
        std::task::Poll::Ready(out) => (out, true, started.elapsed()),
        std::task::Poll::Pending => {
            let held = started.elapsed();
            (call.await, false, held)
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocate_runs_inline_within_one_tick_else_on_the_pool_with_its_full_deadline() {
    // A long tick, so a fast call is rarely cut short by chance, and a deadline far above it.
    let host = PluginHost::new(HostConfig {
        epoch_tick: Duration::from_millis(100),
        limits: Limits {
            deadline: Duration::from_secs(3),
            ..Limits::default()
        },
        ..HostConfig::default()
    })
    .unwrap();
    let deadline = Duration::from_secs(3);
    let p = host
        .load_policy("hostile", wasm("hostile_policy").into(), None)
        .await
        .unwrap();
    let nodes: Arc<[Node]> = sample::nodes(20).into();
    let call = |name: &str| p.allocate(Arc::new(hostile_job(name)), nodes.clone());
    // What a step changed: (answered inline, run on the pool).
    let paths = |before: CallPaths| {
        let now = p.call_paths();
        (now.inline - before.inline, now.pooled - before.pooled)
    };
    // Fast calls are answered inline (at least two of three, in case a tick cut one short).
    let before = p.call_paths();
    for _ in 0..3 {
        assert_eq!(call("fine").await.unwrap().nodes.len(), 7);
    }
    let (inline, _) = paths(before);
    assert!(inline >= 2, "only {inline} of 3 fast calls ran inline");

    // A looping call gives the thread back after two ticks, not its deadline, and then runs
    // out its full deadline on the pool.
    let before = p.call_paths();
    let started = Instant::now();
    let (out, ready, held) = first_poll(call("loop")).await;
    assert!(!ready);
    // One tick is 100 ms; holding it for the deadline would be 3 s. Half the deadline tells
    // the two mechanisms apart with room for a loaded machine.
    assert!(held < deadline / 2, "held the thread {held:?}");
    let err = out.unwrap_err();
    assert!(
        matches!(err, PluginError::Timeout { deadline: d, .. } if d == deadline),
        "{err}"
    );
    assert!(started.elapsed() >= deadline);
    assert_eq!(paths(before), (0, 1));

    // The next call goes to the pool; once one is fast there, calls run inline again.
    let before = p.call_paths();
    assert_eq!(call("fine").await.unwrap().nodes.len(), 7);
    assert_eq!(
        paths(before),
        (0, 1),
        "a call right after an over-budget one runs on the pool"
    );
    // "Fast there" is under a fifth of a tick, which a pooled call on a loaded machine may
    // miss: call until two ran inline again, which a host that never switches back fails.
    let before = p.call_paths();
    let mut calls = 0;
    while paths(before).0 < 2 && calls < 20 {
        assert_eq!(call("fine").await.unwrap().nodes.len(), 7);
        calls += 1;
    }
    let (inline, _) = paths(before);
    assert!(
        inline >= 2,
        "calls did not run inline again: {inline} of {calls}"
    );

    // A call that writes to stderr (WASI) is served by the pool, stderr and all.
    let before = p.call_paths();
    let err = call("trap").await.unwrap_err();
    assert!(err.to_string().contains("traps on purpose"), "{err}");
    assert_eq!(paths(before), (0, 1));
}

/// The example policies answer `allocate` inline (they use no WASI), so an admission with them
/// costs no hop to the blocking pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_policies_answer_allocate_inline() {
    let host = PluginHost::new(HostConfig {
        // A long tick, so a call is rarely cut short by chance.
        epoch_tick: Duration::from_millis(200),
        ..HostConfig::default()
    })
    .unwrap();
    let nodes: Arc<[Node]> = sample::nodes(100).into();
    for name in ["binpack", "spread", "goodput"] {
        let p = host
            .load_policy(name, wasm(name).into(), None)
            .await
            .unwrap();
        for i in 0..20 {
            let job = sample::job(&format!("default/j{i}"), 4);
            let replicas = job.tasks.iter().map(|t| t.replicas as usize).sum::<usize>();
            let out = p.allocate(Arc::new(job), nodes.clone()).await;
            assert_eq!(out.unwrap().nodes.len(), replicas, "{name}");
        }
        let paths = p.call_paths();
        assert_eq!(paths.inline + paths.pooled, 20, "{name}");
        // A tick may cut an attempt short; that call then runs on the pool.
        assert!(paths.inline >= 18, "{name}: {paths:?}");
    }
}

/// `GET /plugins` (the registry's status) shows how a serving policy's `allocate` calls were
/// served: inline or on the blocking pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serving_policy_shows_how_its_allocate_calls_were_served() {
    let registry = default_registry();
    let spec = PluginSpec::new("packer", PluginKind::Policy);
    registry.apply(spec, wasm("binpack").into()).await.unwrap();
    let (job, nodes) = sample::allocate_input(20, 2);
    let policy = registry.policy(Some("packer"));
    for _ in 0..3 {
        policy
            .allocate(Arc::new(job.clone()), nodes.clone().into())
            .await
            .unwrap();
    }
    let status = serde_json::to_value(registry.status()).unwrap();
    let calls = &status[0]["allocateCalls"];
    let count = |path: &str| calls[path].as_u64().unwrap_or_else(|| panic!("{status}"));
    // The smoke call at load and the three calls.
    assert_eq!(count("inline") + count("pooled"), 4, "{status}");
}
