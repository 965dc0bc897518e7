//! The plugin tests, in one test binary (linked once, not once per file): the Wasm plugin host
//! and its capabilities, the plugins in every language, `diorch plugin`, policy rollouts (shadows,
//! promotion) in the registry, the ConfigMap watcher,
//! components in OCI registries, and the policy simulator (`diorch simulate`). Run one file's
//! tests with its module name as the filter, e.g. `cargo test --test plugins plugin_host::`.
//!
//! simulate.rs's proptest regressions are in tests/proptest-regressions/simulate.txt: proptest
//! puts them beside the directory holding this binary's main.rs.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a panic is its report

/// The real OCI registry harness, stand-alone (the rest of tests/common is not needed here).
#[path = "../common/registry.rs"]
mod registry;

mod oci_registry;
mod plugin_capabilities;
mod plugin_host;
mod plugin_languages;
mod plugin_rollout;
mod plugin_run;
mod plugin_watch;
mod simulate;
