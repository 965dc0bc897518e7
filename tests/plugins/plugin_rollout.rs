//! Policy rollouts in the registry, with real components: which plugin answers for a policy
//! name (its own, or one promoted over it with `diorch.io/replaces`), which are its shadows
//! (`diorch.io/shadow-of`, never serving), and what the plugin status says about each.

use std::sync::Arc;

use diorch::plugin::registry::PluginRegistry;
use diorch::plugin::spec::{PluginKind, PluginSpec, Rollout};
use diorch::plugin::{HostConfig, NativePolicy, PluginHost};

fn wasm(name: &str) -> Arc<[u8]> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/plugins")
        .join(format!("{name}.wasm"));
    std::fs::read(&path)
        .unwrap_or_else(|e| {
            panic!(
                "cannot read {}: {e}; run scripts/build-plugins.sh first",
                path.display()
            )
        })
        .into()
}

fn policy(name: &str, rollout: Rollout) -> PluginSpec {
    let mut spec = PluginSpec::new(name, PluginKind::Policy);
    spec.rollout = rollout;
    spec
}

/// Who answers for `name`: the serving plugin's name, if any.
fn serving(registry: &PluginRegistry, name: &str) -> Option<String> {
    registry.serving(name).map(|p| p.name().to_string())
}

fn shadows(registry: &PluginRegistry, name: &str) -> Vec<String> {
    registry
        .shadows(name)
        .iter()
        .map(|p| {
            p.describe()
                .split('@')
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

fn warning(registry: &PluginRegistry, name: &str) -> Option<String> {
    registry.status_of(name).and_then(|s| s.rollout_warning)
}

#[tokio::test]
async fn shadows_never_serve_a_promoted_policy_answers_and_its_removal_rolls_back() {
    let registry = PluginRegistry::new(
        PluginHost::new(HostConfig::default()).unwrap(),
        NativePolicy::BinPack,
    );
    // A shadow of a policy that is not loaded: loaded, given no input, and the status says so.
    registry
        .apply(
            policy("next", Rollout::ShadowOf("team".into())),
            wasm("binpack"),
        )
        .await
        .unwrap();
    assert_eq!(serving(&registry, "next"), None, "a shadow never serves");
    assert_eq!(shadows(&registry, "team"), ["next"]);
    let w = warning(&registry, "next").unwrap();
    assert!(w.contains("team, which is not loaded"), "{w}");

    registry
        .apply(policy("team", Rollout::Own), wasm("spread"))
        .await
        .unwrap();
    assert_eq!(serving(&registry, "team").as_deref(), Some("team"));
    assert_eq!(warning(&registry, "next"), None);
    let status = serde_json::to_value(registry.status_of("next").unwrap()).unwrap();
    assert_eq!(status["rollout"], serde_json::json!({"shadowOf": "team"}));

    // Promotion: `next` answers for `team`; `team` stays loaded, standing by.
    registry
        .apply(
            policy("next", Rollout::Replaces("team".into())),
            wasm("binpack"),
        )
        .await
        .unwrap();
    assert_eq!(serving(&registry, "team").as_deref(), Some("next"));
    assert!(shadows(&registry, "team").is_empty());
    assert!(registry.wasm_policy("team").is_some(), "standing by");
    assert_eq!(
        registry.policy(Some("team")).describe().split('@').next(),
        Some("next")
    );

    // A second policy promoted over `team`: the first by name answers; the other is told.
    registry
        .apply(
            policy("zzz", Rollout::Replaces("team".into())),
            wasm("spread"),
        )
        .await
        .unwrap();
    assert_eq!(serving(&registry, "team").as_deref(), Some("next"));
    let w = warning(&registry, "zzz").unwrap();
    assert!(w.contains("next answers for it"), "{w}");
    assert!(registry.remove("zzz").await);

    // Rollback: the label goes (the same version reloads as itself); `team` answers again.
    registry
        .apply(policy("next", Rollout::Own), wasm("binpack"))
        .await
        .unwrap();
    assert_eq!(serving(&registry, "team").as_deref(), Some("team"));
    assert_eq!(serving(&registry, "next").as_deref(), Some("next"));
    // Removing a promoted plugin rolls back too.
    registry
        .apply(
            policy("next", Rollout::Replaces("team".into())),
            wasm("binpack"),
        )
        .await
        .unwrap();
    assert!(registry.remove("next").await);
    assert_eq!(serving(&registry, "team").as_deref(), Some("team"));
}

/// A preemptible DIJob named `name` (the hostile policy misbehaves by the job's name) asking
/// for policy `team`: one 1-GPU learner.
fn dijob(name: &str) -> diorch_core::api::DIJob {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1",
        "kind": "DIJob",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
            "annotations": {"diorch.io/policy": "team"}},
        "spec": {"preemptible": true, "tasks": [
            {"name": "learner", "type": "learner", "replicas": 1, "template": {"spec": {"containers": [
                {"name": "di-container", "image": "busybox", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}]}}}]}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_shadow_is_contained_as_an_active_policy_is_and_never_touches_the_active_answers()
{
    use diorch::allocator::{Allocator, Settings};
    use diorch_core::placement::Admission;
    use k8s_openapi::api::core::v1::Node;
    use kube::runtime::reflector;

    let registry = PluginRegistry::new(
        PluginHost::new(HostConfig::default()).unwrap(),
        NativePolicy::Spread,
    );
    registry
        .apply(policy("team", Rollout::Own), wasm("binpack"))
        .await
        .unwrap();
    let mut hostile = policy("hostile", Rollout::ShadowOf("team".into()));
    // A short deadline: the looping call ends by it quickly.
    hostile.deadline = Some(std::time::Duration::from_millis(200));
    registry
        .apply(hostile, wasm("hostile_policy"))
        .await
        .unwrap();

    let (nodes, mut writer) = reflector::store::<Node>();
    for i in 0..4 {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("n{i}"), "resourceVersion": "1"},
            "status": {
                "allocatable": {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": "8"},
                "conditions": [{"type": "Ready", "status": "True"}]
            }
        }))
        .unwrap();
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(node));
    }
    let (jobs, _jobs_writer) = reflector::store();
    // What a hostile shadow's calls end in is under test here, not their CPU priority: at
    // nice 19 on a CI machine saturated by the other tests, any of them can run past its
    // deadline instead (the allocator's shadow tests and bench cover the priority).
    let settings = Settings {
        shadow_nice: 0,
        ..Settings::default()
    };
    let reports = settings.shadow_reports.clone();
    let (allocator, _retries) = Allocator::new(
        Arc::new(registry),
        nodes,
        jobs,
        settings,
        Arc::new(diorch::metrics::Metrics::new()),
    );
    // Loops, allocates 1 GiB, traps, sleeps, answers 8 MiB, answers a node that does not exist.
    let hostile = [
        "loop",
        "oom",
        "trap",
        "sleep",
        "huge-answer",
        "unknown-node",
    ];
    for name in hostile {
        let answer = allocator.admit(&dijob(name)).await;
        let Admission::Placed { by, fallback, .. } = &answer else {
            panic!("{name}: {answer:?}")
        };
        assert!(
            by.starts_with("team@") && fallback.is_none(),
            "{name}: {answer:?}"
        );
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let report = loop {
        let report = reports.get("team");
        if let Some(r) = &report
            && r.shadows
                .get("hostile")
                .is_some_and(|c| c.failed == hostile.len() as u64)
        {
            break report.unwrap();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the hostile shadow's calls did not all end as failed: {report:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let failures: Vec<String> = report
        .divergences
        .iter()
        .map(|d| serde_json::to_string(&d.comparison.jobs[0].shadow).unwrap())
        .collect();
    for (needle, what) in [
        ("deadline", "loop"),
        ("memory cap", "oom"),
        ("traps on purpose", "trap"),
        ("denied", "sleep"),
        ("too much data", "huge-answer"),
        ("nodes exist", "unknown-node"),
    ] {
        assert!(
            failures.iter().any(|f| f.contains(needle)),
            "{what}: no failure says {needle:?}: {failures:#?}"
        );
    }
}
