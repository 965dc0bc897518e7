//! Wasm plugin host: the example plugins through the host, hostile components (each a clear
//! error while other calls keep being served), output checks, and hot swaps under load.
//! Components come from `scripts/build-plugins.sh` (target/plugins/*.wasm). This file holds
//! the set-up the tests share; the tests are in its children, one concern each.

mod call_paths;
mod contract;
mod hostile;
mod loading;
mod policies;
mod registry;

use std::time::Duration;

use diorch::plugin::registry::PluginRegistry;
use diorch::plugin::spec::{FailurePolicy, PluginKind, PluginSpec};
use diorch::plugin::{HostConfig, Limits, NativePolicy, PluginError, PluginHost, World, sample};

fn wasm(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/plugins")
        .join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; build the plugins first with scripts/build-plugins.sh",
            path.display()
        )
    })
}

fn host() -> PluginHost {
    PluginHost::new(HostConfig::default()).unwrap()
}

/// Limits for tests of results, not of bounds: a debug build on a busy 2-core CI machine can
/// take longer than the 50 ms default for a 1 000-node call.
fn roomy() -> Limits {
    Limits {
        deadline: Duration::from_secs(5),
        ..Limits::default()
    }
}

fn roomy_host() -> PluginHost {
    PluginHost::new(HostConfig {
        limits: roomy(),
        ..HostConfig::default()
    })
    .unwrap()
}

/// A registry on a default host, falling back to the native bin-packing policy.
fn default_registry() -> PluginRegistry {
    PluginRegistry::new(host(), NativePolicy::BinPack)
}

fn hostile_job(name: &str) -> diorch::plugin::Job {
    sample::job(&format!("default/{name}"), 2)
}

fn mutator_spec(name: &str, order: i32, config: &str, failure: FailurePolicy) -> PluginSpec {
    let mut spec = PluginSpec::new(name, PluginKind::Mutator);
    spec.order = order;
    spec.config = config.into();
    spec.failure_policy = failure;
    spec.task_types = vec!["learner".into()];
    spec
}

/// Whether `err` refuses a component for not implementing `world`.
fn is_wrong_world(err: &PluginError, world: World) -> bool {
    matches!(err, PluginError::WrongWorld { world: w, .. } if *w == world)
}
