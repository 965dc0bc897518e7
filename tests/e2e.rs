//! End-to-end suite against a real Kubernetes cluster: the same scenarios as the sandbox
//! integration tests. Runs only when DIORCH_E2E_KUBECONFIG names a kubeconfig; it installs
//! `crds/` itself, works in its own namespace, and deletes that namespace at the end.

mod common;

use std::path::PathBuf;

use common::allocation;
use common::controller::{self as scenario, OperatorProcess};
use common::{Kubectl, foundation, webhook};

fn target() -> Option<(PathBuf, tempfile::TempDir)> {
    match std::env::var_os("DIORCH_E2E_KUBECONFIG") {
        Some(path) => Some((PathBuf::from(path), tempfile::tempdir().expect("tempdir"))),
        None => {
            eprintln!(
                "skipping the real-cluster e2e suite: set DIORCH_E2E_KUBECONFIG to a kubeconfig to run it"
            );
            None
        }
    }
}

/// One `diorch run` at a time: two would both reconcile every DIJob of the cluster.
static ONE_OPERATOR: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Deletes the scenario namespace even when an assertion fails.
struct NamespaceGuard<'a>(&'a Kubectl, &'a str);

impl Drop for NamespaceGuard<'_> {
    fn drop(&mut self) {
        let _ = self.0.run(&["delete", "namespace", self.1, "--wait=false"]);
    }
}

#[test]
fn e2e_foundation() {
    let Some((kubeconfig, scratch)) = target() else {
        return;
    };
    let k = Kubectl::new(&kubeconfig, scratch.path());
    let ns = format!("diorch-e2e-{}", std::process::id());
    foundation::install_crd(&k);
    foundation::create_namespace(&k, &ns);
    let _guard = NamespaceGuard(&k, &ns);
    foundation::samples_apply_and_print_columns(&k, &ns);
    foundation::invalid_dijobs_are_refused(&k, &ns);
    foundation::status_subresource_split(&k, &ns);
    foundation::owner_deletion_cascades(&k, &ns);
}

/// The controller scenarios against the real cluster, with `diorch run` started here against it.
/// No kubelet follows sandbox annotations there, so the scenarios end pods through the pod
/// status subresource.
type Scenario = fn(&Kubectl, &str);

#[test]
fn e2e_controller() {
    let Some((kubeconfig, scratch)) = target() else {
        return;
    };
    let k = Kubectl::new(&kubeconfig, scratch.path());
    foundation::install_crd(&k);
    let _one = ONE_OPERATOR.lock().unwrap_or_else(|e| e.into_inner());
    let _operator = OperatorProcess::start(&kubeconfig);
    let scenarios: [(&str, Scenario); 8] = [
        ("lifecycle", scenario::runs_to_success),
        ("backoff", scenario::failing_worker_restarts_then_fails),
        ("cleanup", scenario::clean_pod_policies),
        ("selfheal", scenario::hand_deleted_pod_comes_back_once),
        ("scaling", scenario::scales_up_and_down),
        ("rolling", scenario::template_edit_rolls_pods),
        ("cascade", scenario::deleting_the_job_cascades),
        ("validation", scenario::validation_cases),
    ];
    for (name, run) in scenarios {
        let ns = format!("diorch-e2e-{name}-{}", std::process::id());
        foundation::create_namespace(&k, &ns);
        let _guard = NamespaceGuard(&k, &ns);
        run(&k, &ns);
    }
}

/// The admission scenarios against the operator installed from `deploy/`: the API server must
/// reach its webhooks, which a `diorch run` started here cannot promise. Set DIORCH_E2E_DEPLOYED=1
/// once `kubectl apply -k deploy/` runs in the cluster (and run the suite with
/// `--skip e2e_controller --skip e2e_plugins`: two operators would both reconcile).
#[test]
fn e2e_admission() {
    let Some((kubeconfig, scratch)) = target() else {
        return;
    };
    if std::env::var_os("DIORCH_E2E_DEPLOYED").is_none() {
        eprintln!(
            "skipping the admission scenarios: install deploy/ in the cluster and set DIORCH_E2E_DEPLOYED=1"
        );
        return;
    }
    let k = Kubectl::new(&kubeconfig, scratch.path());
    let ns = format!("diorch-e2e-admission-{}", std::process::id());
    foundation::create_namespace(&k, &ns);
    let _guard = NamespaceGuard(&k, &ns);
    webhook::invalid_jobs_are_refused(&k, &ns);
    webhook::valid_jobs_are_defaulted(&k, &ns);
    webhook::updates_are_checked(&k, &ns);
}

/// The plugin and placement scenarios against the real cluster, with `diorch run` started here
/// and plugins read from the scenario namespace. Capacity-sized scenarios (a job holding whole
/// 8-GPU nodes) need such nodes and are left to clusters that have them: set
/// DIORCH_E2E_GPU_NODES=1 when at least 4 ready nodes have 8 free `nvidia.com/gpu` each.
#[test]
fn e2e_plugins_and_placement() {
    let Some((kubeconfig, scratch)) = target() else {
        return;
    };
    let k = Kubectl::new(&kubeconfig, scratch.path());
    foundation::install_crd(&k);
    let ns = format!("diorch-e2e-plugins-{}", std::process::id());
    foundation::create_namespace(&k, &ns);
    let _guard = NamespaceGuard(&k, &ns);
    let _one = ONE_OPERATOR.lock().unwrap_or_else(|e| e.into_inner());
    let operator = OperatorProcess::start_with(&kubeconfig, &["--plugin-namespace", &ns]);
    allocation::mutator_changes_pods(&k, &ns, &ns);
    allocation::replica_api_scales_a_preemptible_job(&k, &ns, &operator.api_url());
    if std::env::var_os("DIORCH_E2E_GPU_NODES").is_some() {
        allocation::policy_plugins_place_jobs_and_hot_swap(&k, &ns, &ns);
        allocation::oversized_job_waits_for_capacity(&k, &ns);
        // Re-planning: goodput by default, every second, each job moved at most once.
        drop(operator);
        let ns2 = format!("{ns}-replan");
        foundation::create_namespace(&k, &ns2);
        let _guard2 = NamespaceGuard(&k, &ns2);
        let replanner = OperatorProcess::start_with(
            &kubeconfig,
            &[
                "--plugin-namespace",
                &ns2,
                "--default-policy",
                "goodput",
                "--optimize-period",
                "1s",
                "--min-reschedule-interval",
                "1h",
            ],
        );
        allocation::goodput_grows_and_shrinks_collectors(&k, &ns2, &ns2, &replanner.api_url());
        allocation::flapping_policy_is_rate_limited(&k, &ns2, &ns2);
    } else {
        eprintln!(
            "skipping the GPU placement scenarios: set DIORCH_E2E_GPU_NODES=1 on a cluster with 4 nodes of 8 free GPUs"
        );
    }
}
