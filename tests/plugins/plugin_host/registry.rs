//! The plugin registry: mutators in order with their failure policies, hot swaps under load,
//! and the metrics and `GET /plugins` status that follow calls, loads and versions.

use std::sync::Arc;
use std::time::Duration;

use diorch::plugin::registry::PluginRegistry;
use diorch::plugin::spec::{FailurePolicy, PluginKind, PluginSpec};
use diorch::plugin::{NativePolicy, Node, PluginError, sample};

use super::{default_registry, mutator_spec, roomy_host, wasm};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fail_mutator_that_does_not_load_blocks_its_pods() {
    let registry = default_registry();
    let garbage: Arc<[u8]> = Arc::from(&b"garbage"[..]);
    registry
        .apply(
            mutator_spec("must-run", 0, "", FailurePolicy::Fail),
            garbage.clone(),
        )
        .await
        .unwrap_err();
    let (ctx, pod) = sample::pod("learner");
    let err = registry.mutate_pod(&ctx, pod.clone()).await.unwrap_err();
    assert_eq!(err.reason(), "NotLoaded", "{err}");
    assert!(
        err.to_string().contains("must-run") && err.to_string().contains("not a valid component"),
        "{err}"
    );
    // Task types it does not apply to are not blocked; an Ignore mutator blocks nothing.
    let (ctx_c, pod_c) = sample::pod("collector");
    registry.mutate_pod(&ctx_c, pod_c).await.unwrap();
    registry
        .apply(
            mutator_spec("optional", 0, "", FailurePolicy::Ignore),
            garbage.clone(),
        )
        .await
        .unwrap_err();
    // A good upload lifts the block; a later bad one leaves the good version serving.
    registry
        .apply(
            mutator_spec("must-run", 0, "", FailurePolicy::Fail),
            wasm("hostile_mutator").into(),
        )
        .await
        .unwrap();
    let out = registry.mutate_pod(&ctx, pod.clone()).await.unwrap();
    assert_eq!(out.metadata.labels.unwrap()["hostile.test/seen"], "yes");
    registry
        .apply(
            mutator_spec("must-run", 0, "", FailurePolicy::Fail),
            garbage,
        )
        .await
        .unwrap_err();
    registry.mutate_pod(&ctx, pod.clone()).await.unwrap();
    // Unloading removes it entirely.
    assert!(registry.remove("must-run").await);
    assert_eq!(registry.mutate_pod(&ctx, pod.clone()).await.unwrap(), pod);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_runs_mutators_in_order_with_failure_policies() {
    let reg = default_registry();
    let accel: Arc<[u8]> = wasm("accel_env").into();
    let hostile: Arc<[u8]> = wasm("hostile_mutator").into();
    reg.apply(
        mutator_spec("accel", 1, "", FailurePolicy::Fail),
        accel.clone(),
    )
    .await
    .unwrap();
    reg.apply(
        mutator_spec("seen", 0, "", FailurePolicy::Fail),
        hostile.clone(),
    )
    .await
    .unwrap();
    let (ctx, pod) = sample::pod("learner");
    let out = reg.mutate_pod(&ctx, pod.clone()).await.unwrap();
    assert_eq!(
        out.metadata.labels.as_ref().unwrap()["hostile.test/seen"],
        "yes"
    );
    assert!(
        out.spec.as_ref().unwrap().containers[0]
            .env
            .as_ref()
            .unwrap()
            .iter()
            .any(|e| e.name == "NCCL_DEBUG")
    );

    // Not applied to other task types.
    let (ctx_c, pod_c) = sample::pod("collector");
    assert_eq!(reg.mutate_pod(&ctx_c, pod_c.clone()).await.unwrap(), pod_c);

    // A smoke call that breaks the rules refuses the upload: the last good version stays.
    let err = reg
        .apply(
            mutator_spec("seen", 0, "rename", FailurePolicy::Fail),
            hostile.clone(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "MalformedOutput");
    let status = reg.status();
    let seen = status.iter().find(|s| s.name == "seen").unwrap();
    assert!(
        !seen.healthy && seen.sha256.is_some() && seen.failed_loads == 1,
        "{seen:?}"
    );
    assert!(
        seen.last_error
            .as_deref()
            .unwrap()
            .contains("metadata.name")
    );
    let out = reg.mutate_pod(&ctx, pod.clone()).await.unwrap();
    assert_eq!(
        out.metadata.labels.as_ref().unwrap()["hostile.test/seen"],
        "yes"
    );

    // failurePolicy: the hostile "error" mode as a runtime failure. Smoke calls use the same
    // config, so load it under a task type the smoke sample does not reach: order after accel.
    let reg2 = default_registry();
    let mut ignore = mutator_spec("ign", 0, "loop", FailurePolicy::Ignore);
    ignore.deadline = Some(Duration::from_millis(5));
    // The smoke call times out, so this upload is refused whatever the failure policy.
    assert_eq!(
        reg2.apply(ignore, hostile.clone())
            .await
            .unwrap_err()
            .reason(),
        "Timeout"
    );
    assert!(reg2.mutate_pod(&ctx, pod.clone()).await.is_ok());
    assert!(reg.remove("seen").await);
    assert!(!reg.remove("seen").await);
    assert_eq!(reg.status().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_calls_during_twenty_hot_swaps_all_succeed() {
    let reg = Arc::new(PluginRegistry::new(roomy_host(), NativePolicy::BinPack));
    let versions: [Arc<[u8]>; 2] = [wasm("binpack").into(), wasm("spread").into()];
    let spec = PluginSpec::new("default", PluginKind::Policy);
    // Both versions compiled up front (the cache is keyed by sha256), so swaps are quick and
    // happen while the calls run.
    reg.apply(spec.clone(), versions[1].clone()).await.unwrap();
    let first = reg.apply(spec.clone(), versions[0].clone()).await.unwrap();
    let nodes: Arc<[Node]> = sample::nodes(100).into();
    let job = Arc::new(sample::job("default/j", 2));

    // Eight callers call continuously; the swapper waits for 25 completed calls after each swap
    // (more than can be in flight), so every version serves some calls however the machine
    // schedules the tasks.
    let completed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let callers: Vec<_> = (0..8)
        .map(|_| {
            let (reg, nodes, job) = (reg.clone(), nodes.clone(), job.clone());
            let (completed, done) = (completed.clone(), done.clone());
            tokio::spawn(async move {
                let mut seen = Vec::new();
                while !done.load(std::sync::atomic::Ordering::Acquire) || seen.len() < 125 {
                    let policy = reg.policy(Some("default"));
                    let described = policy.describe();
                    let names = policy.allocate(job.clone(), nodes.clone()).await?;
                    seen.push((described, names.nodes.len()));
                    completed.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                }
                Ok::<_, PluginError>(seen)
            })
        })
        .collect();
    let swapper = {
        let (reg, versions, spec) = (reg.clone(), versions.clone(), spec.clone());
        let (completed, done) = (completed.clone(), done.clone());
        tokio::spawn(async move {
            let mut shas = vec![];
            for i in 0..20 {
                let mark = completed.load(std::sync::atomic::Ordering::Acquire);
                while completed.load(std::sync::atomic::Ordering::Acquire) < mark + 25 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                shas.push(
                    reg.apply(spec.clone(), versions[(i + 1) % 2].clone())
                        .await
                        .unwrap(),
                );
            }
            done.store(true, std::sync::atomic::Ordering::Release);
            shas
        })
    };
    let mut served_by = std::collections::BTreeSet::new();
    let mut calls = 0;
    for c in callers {
        for (described, n) in c.await.unwrap().unwrap() {
            assert_eq!(n, 7);
            assert!(
                described.starts_with("default@"),
                "{described}: never the fallback"
            );
            served_by.insert(described);
            calls += 1;
        }
    }
    assert!(calls >= 1000, "{calls} calls");
    let shas = swapper.await.unwrap();
    assert_eq!(shas.len(), 20);
    assert!(shas.contains(&first));
    assert!(served_by.len() >= 2, "calls saw the swaps: {served_by:?}");
    let status = reg.status();
    assert_eq!(status[0].loads, 22);
    assert!(status[0].healthy);

    // A garbage upload keeps the last good version serving.
    let err = reg
        .apply(spec, Arc::from(&b"garbage"[..]))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "CompileError");
    assert!(reg.wasm_policy("default").is_some());
    assert_eq!(reg.status()[0].sha256.as_deref(), Some(shas[19].as_str()));
    // Unknown names fall back to the native policy.
    assert_eq!(reg.policy(Some("nope")).describe(), "builtin-binpack");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_metrics_and_status_follow_calls_loads_and_versions() {
    use axum::body::Body;
    use diorch::metrics::Metrics;
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;

    let metrics = Arc::new(Metrics::new());
    let reg = Arc::new(default_registry().with_metrics(metrics.clone()));
    let packer = PluginSpec::new("packer", PluginKind::Policy);
    let first = reg
        .apply(packer.clone(), wasm("binpack").into())
        .await
        .unwrap();
    reg.apply(
        mutator_spec("accel", 0, "", FailurePolicy::Fail),
        wasm("accel_env").into(),
    )
    .await
    .unwrap();

    let policy = reg.policy(Some("packer"));
    // The metered wrapper is transparent.
    assert_eq!(policy.describe(), format!("packer@{}", &first[..12]));
    let (job, nodes) = sample::allocate_input(10, 2);
    let nodes: Arc<[Node]> = nodes.into();
    policy
        .allocate(Arc::new(job.clone()), nodes.clone())
        .await
        .unwrap();
    let (big, few) = sample::allocate_input(2, 64);
    let err = policy
        .allocate(Arc::new(big), few.into())
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "Refused");
    let (jobs, many) = sample::optimize_input(5, 10);
    policy
        .optimize(jobs.into(), many.into(), vec![])
        .await
        .unwrap();
    let (ctx, pod) = sample::pod("learner");
    reg.mutate_pod(&ctx, pod).await.unwrap();
    // The built-in policy is not a plugin: not counted.
    reg.policy(None)
        .allocate(Arc::new(job), nodes)
        .await
        .unwrap();

    let text = metrics.encode();
    let info = |sha: &str, healthy: &str| {
        format!(
            "diorch_plugin_info{{plugin=\"packer\",kind=\"policy\",sha256=\"{sha}\",healthy=\"{healthy}\",image=\"\"}} 1"
        )
    };
    for line in [
        "diorch_plugin_calls_total{plugin=\"packer\",call=\"allocate\",result=\"ok\"} 1"
            .to_string(),
        "diorch_plugin_calls_total{plugin=\"packer\",call=\"allocate\",result=\"Refused\"} 1"
            .to_string(),
        "diorch_plugin_calls_total{plugin=\"packer\",call=\"optimize\",result=\"ok\"} 1"
            .to_string(),
        "diorch_plugin_calls_total{plugin=\"accel\",call=\"mutate\",result=\"ok\"} 1".to_string(),
        "diorch_plugin_call_duration_seconds_count{call=\"allocate\"} 2".to_string(),
        "diorch_plugin_call_duration_seconds_count{call=\"mutate\"} 1".to_string(),
        "diorch_plugin_loads_total{plugin=\"packer\",result=\"loaded\"} 1".to_string(),
        info(&first, "true"),
    ] {
        assert!(text.contains(&line), "missing {line} in\n{text}");
    }
    assert!(!text.contains("builtin"), "{text}");

    // A new version replaces the info series; a refused upload marks it unhealthy.
    let second = reg
        .apply(packer.clone(), wasm("spread").into())
        .await
        .unwrap();
    reg.apply(packer.clone(), Arc::from(&b"garbage"[..]))
        .await
        .unwrap_err();
    let text = metrics.encode();
    assert!(text.contains(&info(&second, "false")), "{text}");
    assert!(!text.contains(&first), "stale series of {first}:\n{text}");
    assert!(
        text.contains("diorch_plugin_loads_total{plugin=\"packer\",result=\"CompileError\"} 1"),
        "{text}"
    );

    // The status endpoint says the same.
    let response = diorch::http::plugins::router(reg.clone())
        .oneshot(http::Request::get("/plugins").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let list: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["accel", "packer"]);
    let p = &list[1];
    assert_eq!(p["sha256"], second.as_str());
    assert_eq!(p["healthy"], false);
    assert_eq!((&p["loads"], &p["failedLoads"]), (&2.into(), &1.into()));
    assert!(
        p["lastError"]
            .as_str()
            .unwrap()
            .contains("not a valid component")
    );
    assert_eq!(list[0]["taskTypes"], serde_json::json!(["learner"]));
    assert_eq!(list[0]["healthy"], true);

    // Unloading removes the plugin's info series and nothing else.
    assert!(reg.remove("packer").await);
    let text = metrics.encode();
    assert!(
        !text.contains("diorch_plugin_info{plugin=\"packer\""),
        "{text}"
    );
    assert!(
        text.contains("diorch_plugin_info{plugin=\"accel\",kind=\"mutator\""),
        "{text}"
    );
}
