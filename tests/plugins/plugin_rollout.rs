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
