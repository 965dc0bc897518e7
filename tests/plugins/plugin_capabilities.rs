//! Mutators get capabilities, not the whole pod: the hostile mutator asking for privileged,
//! hostPath `/`, hostNetwork, another service account, an extra container or an added
//! capability is refused at load (the smoke call) and on every call, with the field and the
//! grant named; the same ConfigMap with the grants loads and serves; the example mutators need
//! none. Components come from `scripts/build-plugins.sh` (target/plugins/*.wasm).

use std::sync::Arc;
use std::time::Duration;

use diorch::plugin::capabilities::Grants;
use diorch::plugin::registry::PluginRegistry;
use diorch::plugin::spec::{FailurePolicy, PluginKind, PluginSpec};
use diorch::plugin::{HostConfig, Limits, NativePolicy, PluginHost, sample};
use k8s_openapi::api::core::v1::Pod;

fn wasm(name: &str) -> Arc<[u8]> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/plugins")
        .join(format!("{name}.wasm"));
    std::fs::read(&path)
        .unwrap_or_else(|e| {
            panic!(
                "cannot read {}: {e}; build the plugins first with scripts/build-plugins.sh",
                path.display()
            )
        })
        .into()
}

/// Results, not bounds, are under test: a debug build on a busy machine needs room.
fn registry() -> PluginRegistry {
    let host = PluginHost::new(HostConfig {
        limits: Limits {
            deadline: Duration::from_secs(5),
            ..Limits::default()
        },
        ..HostConfig::default()
    })
    .unwrap();
    PluginRegistry::new(host, NativePolicy::BinPack)
}

fn mutator(name: &str, config: &str, grants: &str, failure: FailurePolicy) -> PluginSpec {
    let mut spec = PluginSpec::new(name, PluginKind::Mutator);
    spec.config = config.into();
    spec.grants = Grants::parse(grants).unwrap();
    spec.failure_policy = failure;
    spec
}

/// (hostile mode, the field it sets, the grant that field needs).
const MODES: [(&str, &str, &str); 6] = [
    (
        "privileged",
        "set spec.containers[di-container].securityContext.privileged",
        "privileged",
    ),
    (
        "host-path",
        "set spec.volumes[host-root].hostPath",
        "hostPath",
    ),
    ("host-network", "set spec.hostNetwork", "hostNetwork"),
    (
        "service-account",
        "set spec.serviceAccountName",
        "serviceAccountName",
    ),
    (
        "extra-container",
        "set spec.containers[miner]",
        "containers",
    ),
    (
        "add-capability",
        "set spec.containers[di-container].securityContext.capabilities.add",
        "capabilities",
    ),
];

fn spec_of(pod: &Pod) -> &k8s_openapi::api::core::v1::PodSpec {
    pod.spec.as_ref().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_capability_is_refused_at_load_naming_field_and_grant_and_loads_when_granted() {
    let reg = registry();
    let hostile = wasm("hostile_mutator");
    for (mode, field, grant) in MODES {
        let err = reg
            .apply(
                mutator(mode, mode, "", FailurePolicy::Fail),
                hostile.clone(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.reason(), "NotGranted", "{mode}: {err}");
        let text = err.to_string();
        assert!(
            text.contains(&format!(
                "it {field}, which needs the grant {grant} in its ConfigMap"
            )),
            "{mode}: {text}"
        );
        let status = reg.status_of(mode).unwrap();
        assert!(
            !status.healthy && status.sha256.is_none() && status.last_error == Some(text),
            "{mode}: {status:?}"
        );
        // Nothing serves it and its failurePolicy is Fail: its pods are refused, naming it
        // (fail closed), never created unmutated.
        let (ctx, pod) = sample::pod("learner");
        let blocked = reg.mutate_pod(&ctx, pod.clone()).await.unwrap_err();
        assert_eq!(blocked.reason(), "NotLoaded", "{mode}: {blocked}");
        assert!(blocked.to_string().contains(mode), "{mode}: {blocked}");

        // The same ConfigMap with the grant: loaded, and the change applies.
        reg.apply(
            mutator(mode, mode, grant, FailurePolicy::Fail),
            hostile.clone(),
        )
        .await
        .unwrap_or_else(|e| panic!("{mode} granted {grant}: {e}"));
        assert_eq!(
            reg.status_of(mode).unwrap().grants,
            Grants::parse(grant).unwrap()
        );
        let out = reg.mutate_pod(&ctx, pod.clone()).await.unwrap();
        assert_ne!(out, pod, "{mode}");
        assert!(reg.remove(mode).await);
    }

    // The issue's ConfigMap: all four at once needs all four grants; each missing one is named.
    let all = "privileged,host-path,host-network,service-account";
    let err = reg
        .apply(
            mutator(
                "owner",
                all,
                "privileged,hostPath,hostNetwork",
                FailurePolicy::Fail,
            ),
            hostile.clone(),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("it set spec.serviceAccountName, which needs the grant serviceAccountName")
            && !err.contains("also"),
        "{err}"
    );
    reg.apply(
        mutator(
            "owner",
            all,
            "privileged,hostPath,hostNetwork,serviceAccountName",
            FailurePolicy::Fail,
        ),
        hostile.clone(),
    )
    .await
    .unwrap();
    let (ctx, pod) = sample::pod("learner");
    let out = reg.mutate_pod(&ctx, pod).await.unwrap();
    let spec = spec_of(&out);
    assert_eq!(spec.host_network, Some(true));
    assert_eq!(spec.service_account_name.as_deref(), Some("cluster-admin"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_beyond_the_grants_at_call_time_follows_the_failure_policy() {
    // One registry (one compile of each component); the mutator "m" is replaced per case.
    let reg = registry();
    let hostile = wasm("hostile_mutator");
    // Runs after "m" (order 1), to show a skipped mutator does not stop the next one.
    let mut accel = mutator("accel", "", "", FailurePolicy::Fail);
    accel.order = 1;
    reg.apply(accel, wasm("accel_env")).await.unwrap();
    // `later:` passes the smoke call (rank 0) and asks for the capability on rank 1 pods.
    let (mut ctx, pod) = sample::pod("learner");
    ctx.rank = 1;
    for (mode, field, grant) in MODES {
        let config = format!("later:{mode}");

        // failurePolicy Fail: the pod is not created, the error names field and grant.
        reg.apply(
            mutator("m", &config, "", FailurePolicy::Fail),
            hostile.clone(),
        )
        .await
        .unwrap();
        let err = reg.mutate_pod(&ctx, pod.clone()).await.unwrap_err();
        assert_eq!(err.reason(), "NotGranted", "{mode}: {err}");
        assert!(
            err.to_string()
                .contains(&format!("it {field}, which needs the grant {grant}")),
            "{mode}: {err}"
        );

        // failurePolicy Ignore: the pod is created as it was, the next mutator still runs.
        reg.apply(
            mutator("m", &config, "", FailurePolicy::Ignore),
            hostile.clone(),
        )
        .await
        .unwrap();
        let out = reg.mutate_pod(&ctx, pod.clone()).await.unwrap();
        let (spec, was) = (spec_of(&out), spec_of(&pod));
        assert_eq!(spec.host_network, None, "{mode}");
        assert_eq!(spec.service_account_name, None, "{mode}");
        assert_eq!(spec.volumes, was.volumes, "{mode}");
        assert_eq!(spec.containers.len(), 1, "{mode}");
        assert_eq!(
            spec.containers[0].security_context, was.containers[0].security_context,
            "{mode}"
        );
        assert!(
            spec.containers[0]
                .env
                .as_ref()
                .unwrap()
                .iter()
                .any(|e| e.name == "NCCL_DEBUG"),
            "{mode}: the next mutator ran"
        );

        // Granted: applied.
        reg.apply(
            mutator("m", &config, grant, FailurePolicy::Fail),
            hostile.clone(),
        )
        .await
        .unwrap();
        let out = reg.mutate_pod(&ctx, pod.clone()).await.unwrap();
        let (spec, was) = (spec_of(&out), spec_of(&pod));
        assert!(
            spec.host_network.is_some()
                || spec.service_account_name.is_some()
                || spec.volumes != was.volumes
                || spec.containers.len() != 1
                || spec.containers[0].security_context != was.containers[0].security_context,
            "{mode}: granted but not applied"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_mutators_need_no_grant() {
    let reg = registry();
    reg.apply(
        mutator(
            "node-placement",
            r#"{"*": {"nodeSelector": {"pool": "gpu"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}}"#,
            "",
            FailurePolicy::Fail,
        ),
        wasm("node_placement"),
    )
    .await
    .unwrap();
    reg.apply(
        mutator(
            "accel-env",
            r#"{"interface": "ib0", "rdma": true}"#,
            "",
            FailurePolicy::Fail,
        ),
        wasm("accel_env"),
    )
    .await
    .unwrap();
    let (ctx, pod) = sample::pod("learner");
    let out = reg.mutate_pod(&ctx, pod).await.unwrap();
    assert_eq!(spec_of(&out).node_selector.as_ref().unwrap()["pool"], "gpu");
    assert!(
        spec_of(&out).containers[0]
            .env
            .as_ref()
            .unwrap()
            .iter()
            .any(|e| e.name == "NCCL_SOCKET_IFNAME")
    );
}
