//! The example components through the host: the policies give what the native library gives,
//! a policy's refusal is a typed error, the mutators change what their config says, and
//! `diorch plugin check` reports a component's world, exports and sample results.

use diorch::plugin::{NativePolicy, PluginError, PodMutator, PolicyError, sample};

use super::{host, roomy, roomy_host, wasm};

#[test]
fn example_policies_match_the_native_library() {
    let host = roomy_host();
    for (file, native) in [
        ("binpack", NativePolicy::BinPack),
        ("spread", NativePolicy::Spread),
        ("goodput", NativePolicy::Goodput),
    ] {
        let p = host.load_policy_blocking(file, &wasm(file), None).unwrap();
        assert_eq!(p.sha256().len(), 64);
        for n in [10, 100, 1000] {
            let (job, nodes) = sample::allocate_input(n, 4);
            let got = p.allocate_blocking(&job, &nodes).unwrap();
            assert_eq!(
                got,
                native.allocate_now(&job, &nodes).unwrap(),
                "{file} on {n} nodes"
            );
            assert_eq!(got.nodes.len(), job.total_replicas());
        }
        let (jobs, nodes) = sample::optimize_input(50, 100);
        let plan = p.optimize_blocking(&jobs, &nodes, &[]).unwrap();
        assert_eq!(plan, native.optimize_now(&jobs, &nodes, &[]).unwrap());
        assert!(plan.len() > 10, "{file}: {} jobs placed", plan.len());
        // Determinism: the same input gives the same output.
        assert_eq!(p.optimize_blocking(&jobs, &nodes, &[]).unwrap(), plan);
    }
}

#[test]
fn policy_refusal_is_a_typed_error() {
    let p = host()
        .load_policy_blocking("binpack", &wasm("binpack"), None)
        .unwrap();
    let (job, nodes) = sample::allocate_input(2, 64);
    let err = p.allocate_blocking(&job, &nodes).unwrap_err();
    assert!(
        matches!(&err, PluginError::Refused { error: PolicyError::NoFit(m), .. } if m.contains("learner")),
        "{err}"
    );
}

#[tokio::test]
async fn example_mutators_through_the_host() {
    let host = roomy_host();
    let placement = host
        .load_mutator("node-placement", wasm("node_placement").into(), None)
        .await
        .unwrap();
    let (mut ctx, pod) = sample::pod("learner");
    ctx.config = r#"{"learner": {"nodeSelector": {"pool": "gpu"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}}"#
        .into();
    let out = placement.mutate(ctx.clone(), pod.clone()).await.unwrap();
    let spec = out.spec.clone().unwrap();
    assert_eq!(spec.node_selector.unwrap()["pool"], "gpu");
    assert_eq!(
        spec.tolerations.unwrap()[0].key.as_deref(),
        Some("nvidia.com/gpu")
    );
    assert_eq!(out.metadata, pod.metadata);

    let accel = host
        .load_mutator("accel-env", wasm("accel_env").into(), None)
        .await
        .unwrap();
    ctx.config = r#"{"interface": "ib0", "rdma": true}"#.into();
    let out = accel.mutate(ctx.clone(), pod.clone()).await.unwrap();
    let env = out.spec.unwrap().containers[0].env.clone().unwrap();
    let get = |n: &str| {
        env.iter()
            .find(|e| e.name == n)
            .and_then(|e| e.value.clone())
    };
    assert_eq!(get("NCCL_SOCKET_IFNAME").as_deref(), Some("ib0"));
    assert_eq!(get("NCCL_IB_DISABLE").as_deref(), Some("0"));
    assert_eq!(get("DI_RANK").as_deref(), Some("0"));

    // A bad config is the plugin's refusal, with its message.
    ctx.config = "{".into();
    let err = accel.mutate(ctx, pod).await.unwrap_err();
    assert!(
        matches!(&err, PluginError::Refused { error: PolicyError::InvalidInput(m), .. } if m.contains("not JSON")),
        "{err}"
    );
}

#[test]
fn plugin_check_reports_world_exports_and_results() {
    let limits = roomy();
    let report = diorch::cli::plugin::check(&wasm("binpack"), limits, "", "learner").unwrap();
    for needle in [
        "scheduling-policy",
        "exports:  allocate, optimize",
        "on 1000 nodes ->",
        "optimize: 50 jobs",
    ] {
        assert!(report.contains(needle), "{needle}: {report}");
    }
    let report = diorch::cli::plugin::check(
        &wasm("node_placement"),
        limits,
        r#"{"*": {"nodeSelector": {"pool": "a"}}}"#,
        "collector",
    )
    .unwrap();
    assert!(
        report.contains("pod-mutator") && report.contains("/spec/nodeSelector"),
        "{report}"
    );
    let err = diorch::cli::plugin::check(b"nope", limits, "", "learner").unwrap_err();
    assert!(err.to_string().contains("not a valid component"), "{err}");
    // A mutator whose sample run breaks the rules fails the check.
    let err = diorch::cli::plugin::check(&wasm("hostile_mutator"), limits, "drop-rank", "learner")
        .unwrap_err();
    assert!(err.to_string().contains("DI_RANK"), "{err}");
}
