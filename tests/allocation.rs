//! Placement and plugins end to end: the real `diorch run` against the real `diorch sandbox`
//! (4 simulated nodes of 8 GPUs), driven with kubectl. Policy plugins uploaded as ConfigMaps
//! place preemptible jobs and hot-swap, garbage uploads keep the last good version, mutators
//! change pods, and oversized jobs wait for capacity. The same scenarios run against a real
//! cluster in `tests/e2e.rs`.

mod common;

use common::allocation as scenario;
use common::controller::OperatorProcess;
use common::{SandboxProcess, foundation};

fn cluster() -> (SandboxProcess, OperatorProcess) {
    let sandbox = SandboxProcess::start(&[
        "--nodes",
        "4",
        "--node-gpus",
        "8",
        "--pod-start-delay",
        "100ms",
    ]);
    foundation::install_crd(&sandbox.kubectl());
    let operator = OperatorProcess::start(&sandbox.kubeconfig);
    (sandbox, operator)
}

#[test]
fn policy_plugins_place_jobs_hot_swap_and_survive_garbage() {
    let (sandbox, operator) = cluster();
    scenario::policy_plugins_place_jobs_and_hot_swap(&sandbox.kubectl(), "default", "default");
    let lines = operator.lines();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("allocation decided") && l.contains("job=default/spread")),
        "{lines:#?}"
    );
}

#[test]
fn mutators_change_the_pods_they_apply_to() {
    let (sandbox, _operator) = cluster();
    scenario::mutator_changes_pods(&sandbox.kubectl(), "default", "default");
}

#[test]
fn an_oversized_job_waits_with_a_reason_and_starts_when_capacity_frees() {
    let (sandbox, _operator) = cluster();
    scenario::oversized_job_waits_for_capacity(&sandbox.kubectl(), "default");
}

#[test]
fn a_gang_scheduler_gets_a_podgroup_per_job() {
    let sandbox = SandboxProcess::start(&["--nodes", "2", "--pod-start-delay", "100ms"]);
    let k = sandbox.kubectl();
    foundation::install_crd(&k);
    k.ok_stdin(&["apply", "-f", "-"], scenario::POD_GROUP_CRD);
    // The sandbox's scheduler is default-scheduler: the pods name it so they still run.
    let _operator = OperatorProcess::start_with(
        &sandbox.kubeconfig,
        &[
            "--gang-scheduler",
            "scheduler-plugins",
            "--gang-scheduler-name",
            "default-scheduler",
        ],
    );
    scenario::gang_scheduled_job_gets_a_podgroup(&k, "default", "default-scheduler");
}
