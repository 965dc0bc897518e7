//! Switching a cluster from DI-orchestrator v2 to diorch and back (docs/migration.md), on a real
//! API server (`tests/e2e.rs`, `e2e_migration_from_di_orchestrator`).
//!
//! DI-orchestrator's Go binary is not available, so the scenario plays what it leaves on a
//! cluster: its own CRD (`../shared/fixtures`), its install (`config/di-manager.yaml` without
//! the CRD), DIJobs created from its samples, and for three of them the pods, headless service
//! and status its operator writes (spec sections 2 to 8: two running, one of them restarted
//! once, and one succeeded), built here field by field from the spec, not from diorch's code.
//! Then it switches to diorch the way docs/migration.md says (running the doc's own removal
//! commands), checks what the doc promises, and goes back.
//!
//! This file holds the scenario's outline and what the e2e suite uses; its children hold the
//! played install, the doc's removal commands and the switch (`install`), the played jobs
//! (`played`), the reads and checks the phases share (`reads`), what diorch does with the jobs
//! (`under_diorch`) and the way back (`back`).

mod back;
mod install;
mod played;
mod reads;
mod under_diorch;

use std::path::{Path, PathBuf};

use super::Kubectl;
use super::controller::OperatorProcess;

const CRD: &str = "customresourcedefinition.apiextensions.k8s.io/dijobs.diengine.opendilab.org";

/// `DI_SERVER_URL` in the pods DI-orchestrator creates: its `--di-server-url` default, which its
/// kustomize install does not override (spec sections 5 and 13).
pub const DI_ORCHESTRATOR_SERVER_URL: &str = "http://di-server.di-system.svc.cluster.local:8081";

/// `DI_SERVER_URL` as diorch's install sets it (`--di-server-url` in deploy/base/deployment.yaml).
pub const DIORCH_SERVER_URL: &str = "http://diorch-server.diorch-system.svc.cluster.local:8081";

/// The line of docs/migration.md that marks the removal commands this scenario runs.
pub const REMOVAL_MARKER: &str =
    "<!-- removal: the block below is run by tests/common/migration/ -->";

/// `../shared/fixtures` (or `$DIORCH_SHARED/fixtures`): DI-orchestrator's own CRD and samples.
pub fn fixtures() -> PathBuf {
    let shared = std::env::var_os("DIORCH_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| super::repo_root().join("../shared"));
    let dir = shared.join("fixtures");
    assert!(
        dir.join("di-orchestrator-dijob-crd.yaml").is_file(),
        "the migration scenario needs DI-orchestrator's CRD and samples in {}: set DIORCH_SHARED to the folder holding fixtures/, or run with --skip e2e_migration_from_di_orchestrator",
        dir.display()
    );
    dir
}

/// Puts diorch's CRD back when dropped (the scenario ends on it, but an assertion may fail
/// while DI-orchestrator's is installed), so the next test finds what it expects.
pub struct RestoreDiorchCrd<'a>(pub &'a Kubectl);

impl Drop for RestoreDiorchCrd<'_> {
    fn drop(&mut self) {
        let crds = super::repo_root().join("crds");
        let _ = self
            .0
            .run(&["apply", "-f", crds.to_str().unwrap_or("crds")]);
    }
}

/// The whole migration: DI-orchestrator's cluster with two running jobs and a finished one,
/// the switch, adoption, a new job, and the way back. `ns` is the jobs' namespace,
/// `install_ns` plays `di-system`, and `suffix` names the cluster-scoped objects of the played
/// install (labelled `diorch.io/e2e=suffix`); the caller creates both namespaces and cleans up.
pub fn from_di_orchestrator_and_back(
    k: &Kubectl,
    kubeconfig: &Path,
    ns: &str,
    install_ns: &str,
    suffix: &str,
) {
    let fixtures = fixtures();
    let old_crd = fixtures.join("di-orchestrator-dijob-crd.yaml");
    let samples = fixtures.join("di-orchestrator-samples");
    let n = k.in_namespace(ns);

    let played = played::cluster(k, &n, &old_crd, &samples, install_ns, suffix);
    let crds = install::switch(k, &n, &played, install_ns, suffix);
    let mut operator =
        OperatorProcess::start_with(kubeconfig, &["--di-server-url", DIORCH_SERVER_URL]);
    let api = operator.api_url();
    under_diorch::clean_job_adopted(&n, &api, ns, &played);
    under_diorch::finished_job_left(&n, &played);
    under_diorch::restarted_job_continues(&n, &api, ns, &played);
    under_diorch::new_jobs_run_beside_adopted_ones(&n, ns, &samples, &played);
    back::to_di_orchestrator(k, &n, &mut operator, &old_crd, &crds, &played);
}
