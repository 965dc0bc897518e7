//! Placement and plugins end to end: the real `diorch run` against the sandbox (in-process)
//! (4 simulated nodes of 8 GPUs), driven with kubectl. Policy plugins uploaded as ConfigMaps
//! place preemptible jobs and hot-swap, garbage uploads keep the last good version, mutators
//! change pods, and oversized jobs wait for capacity. The same scenarios run against a real
//! cluster in `tests/e2e.rs`.

use crate::common;

use common::allocation as scenario;
use common::controller::OperatorProcess;
use common::{SandboxProcess, foundation};

fn cluster() -> (SandboxProcess, OperatorProcess) {
    let sandbox = scenario::gpu_sandbox();
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
fn a_shadow_policy_is_compared_on_live_decisions_then_promoted_and_rolled_back() {
    let sandbox = scenario::gpu_sandbox();
    let metrics = common::ha::free_local_addr();
    let _operator = OperatorProcess::start_with(&sandbox.kubeconfig, &["--metric-addr", &metrics]);
    scenario::shadow_policy_compared_promoted_and_rolled_back(
        &sandbox.kubectl(),
        "default",
        "default",
        &metrics,
    );
}

#[test]
fn recorded_decisions_replayed_by_the_policy_that_made_them_agree_in_full() {
    let sandbox = scenario::gpu_sandbox();
    let dir = tempfile::tempdir().expect("recording dir");
    let recording = dir.path().to_str().expect("utf-8 path");
    let _operator = OperatorProcess::start_with(
        &sandbox.kubeconfig,
        &["--record-decisions", recording, "--optimize-period", "1s"],
    );
    scenario::recorded_decisions_replay_in_full_agreement(
        &sandbox.kubectl(),
        "default",
        "default",
        dir.path(),
    );
}

#[test]
fn a_signed_policy_from_a_registry_places_jobs_swaps_hot_and_refuses_the_untrusted() {
    if !common::registry::registry_available("a_signed_policy_from_a_registry") {
        return;
    }
    let registry = common::registry::Registry::start();
    let sandbox = scenario::gpu_sandbox();
    let flags = common::oci::operator_flags(&registry);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let _operator = OperatorProcess::start_with(&sandbox.kubeconfig, &flags);
    common::oci::signed_policy_from_a_registry(&sandbox.kubectl(), "default", "default", &registry);
}

#[test]
fn a_policy_whose_registry_is_down_loads_once_it_is_up() {
    if !common::registry::registry_available("a_policy_whose_registry_is_down") {
        return;
    }
    let mut registry = common::registry::Registry::start();
    let sandbox = SandboxProcess::start(&[]);
    foundation::install_crd(&sandbox.kubectl());
    let flags = common::oci::operator_flags(&registry);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let _operator = OperatorProcess::start_with(&sandbox.kubeconfig, &flags);
    common::oci::a_pull_that_failed_is_tried_again(&sandbox.kubectl(), "default", &mut registry);
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

#[test]
fn a_snapshot_of_the_sandbox_replays_with_plugin_run() {
    let (sandbox, _operator) = cluster();
    let k = sandbox.kubectl().in_namespace("default");
    common::controller::apply(&k, &scenario::gpu_job("placed", "", 2, 4));
    common::controller::wait_phase(&k, "placed", "Running");
    common::controller::apply(&k, &scenario::gpu_job("toobig", "", 5, 8));
    scenario::wait_allocated(&k, "toobig", "False");
    let file = sandbox.dir.path().join("snapshot.json");
    let diorch = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_diorch"))
            .args(args)
            .output()
            .expect("diorch")
    };
    let out = diorch(&[
        "plugin",
        "snapshot",
        "--kubeconfig",
        &sandbox.kubeconfig.display().to_string(),
        "-o",
        &file.display().to_string(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(
        summary.contains("4 nodes, 2 preemptible jobs (1 placed)"),
        "{summary}"
    );
    let snapshot: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("file")).expect("json");
    assert_eq!(snapshot["previous"][0]["job"], "default/placed");
    // The placed job's pods use 8 of the 32 GPUs.
    let free: u64 = snapshot["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["free"]["gpus"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(free, 24);
    let out = diorch(&[
        "plugin",
        "run",
        &scenario::plugin_file("binpack"),
        "--input",
        &file.display().to_string(),
        "--job",
        "default/placed",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("default/placed"), "{text}");
}

#[test]
fn the_replica_api_scales_a_preemptible_job_within_its_bounds() {
    let (sandbox, operator) = cluster();
    scenario::replica_api_scales_a_preemptible_job(
        &sandbox.kubectl(),
        "default",
        &operator.api_url(),
    );
}

#[test]
fn a_flapping_policy_moves_a_job_once_then_is_rate_limited() {
    let sandbox = SandboxProcess::start(&["--nodes", "4", "--pod-start-delay", "100ms"]);
    foundation::install_crd(&sandbox.kubectl());
    let operator = OperatorProcess::start_with(
        &sandbox.kubeconfig,
        &["--optimize-period", "1s", "--min-reschedule-interval", "1h"],
    );
    scenario::flapping_policy_is_rate_limited(&sandbox.kubectl(), "default", "default");
    let lines = operator.lines();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("re-plan would move the job again too soon")),
        "{lines:#?}"
    );
}

#[test]
fn goodput_grows_a_job_that_gains_and_shrinks_one_that_does_not() {
    let sandbox = SandboxProcess::start(&["--nodes", "4", "--pod-start-delay", "100ms"]);
    foundation::install_crd(&sandbox.kubectl());
    let operator = OperatorProcess::start_with(
        &sandbox.kubeconfig,
        &[
            "--default-policy",
            "goodput",
            "--optimize-period",
            "1s",
            "--min-reschedule-interval",
            "1s",
        ],
    );
    scenario::goodput_grows_and_shrinks_collectors(
        &sandbox.kubectl(),
        "default",
        "default",
        &operator.api_url(),
    );
}

/// Issue 17 item 5 end to end: a mutator ConfigMap asking for privileged, hostPath `/`,
/// hostNetwork and another service account without grants is refused at load (a Warning Event
/// names field and grant) and touches no pod; one that passes its load check but asks for
/// hostNetwork on real pods (failurePolicy Fail) blocks those pods with a MutatorFailed Event
/// naming field and grant, and once it is deleted the job starts: no job is lost.
#[test]
fn a_mutator_without_grants_cannot_take_over_the_pods_of_the_next_job() {
    use common::controller as jobs;
    let (sandbox, _operator) = cluster();
    let k = sandbox.kubectl();
    let hostile = scenario::plugin_file("hostile_mutator");
    scenario::upload(
        &k,
        &hostile,
        "owner",
        "mutator",
        &[
            "--config",
            "privileged,host-path,host-network,service-account",
        ],
    );
    let note = scenario::wait_event(&k, "ConfigMap", "plugin-owner", "NotGranted", 1);
    for needle in [
        "it set spec.containers[di-container].securityContext.privileged, which needs the grant privileged",
        "hostPath (set spec.volumes[host-root].hostPath)",
        "hostNetwork (set spec.hostNetwork)",
        "serviceAccountName (set spec.serviceAccountName)",
    ] {
        assert!(note.contains(needle), "{needle}: {note}");
    }
    // Refused with failurePolicy Fail (the default), it would block the pods of its task types
    // until it loads (fail closed, tested in tests/plugins/plugin_watch.rs); deleting it lifts
    // that. The watcher applies the deletion before the next upload below.
    k.ok(&["delete", "configmap", "plugin-owner"]);

    // `later:` passes the load-time smoke call (rank 0) and asks on pods of rank 1 and above.
    scenario::upload(
        &k,
        &hostile,
        "late",
        "mutator",
        &["--config", "later:host-network"],
    );
    scenario::wait_event(&k, "ConfigMap", "plugin-late", "PluginLoaded", 1);
    jobs::apply(&k, &jobs::standard_job("guarded", ""));
    let note = scenario::wait_event(&k, "DIJob", "guarded", "MutatorFailed", 1);
    assert!(
        note.contains("it set spec.hostNetwork, which needs the grant hostNetwork"),
        "{note}"
    );
    let pods = jobs::pods(&k, "guarded");
    assert!(
        pods.values().all(|p| p["spec"]["hostNetwork"].is_null()
            && !p["spec"]["volumes"].to_string().contains("hostPath")),
        "{pods:#?}"
    );
    assert!(
        pods.len() < 4,
        "pods of rank 1 and above are not created: {pods:#?}"
    );

    k.ok(&["delete", "configmap", "plugin-late"]);
    jobs::wait_phase(&k, "guarded", "Running");
    let pods = jobs::pods(&k, "guarded");
    assert_eq!(pods.len(), 4, "{pods:#?}");
    assert!(pods.values().all(|p| p["spec"]["hostNetwork"].is_null()));
}

/// Issue 38: a cluster full of low-priority elastic jobs makes room for urgent ones, shrinking
/// collectors before evicting anyone (`tests/common/preemption.rs`; e2e_gpu_placement runs the
/// same on a real API server).
#[test]
fn urgent_jobs_shrink_collectors_before_evicting_and_victims_come_back() {
    let sandbox = scenario::gpu_sandbox();
    let operator = OperatorProcess::start_with(&sandbox.kubeconfig, &common::preemption::FLAGS);
    common::preemption::urgent_jobs_shrink_collectors_before_evicting(
        &sandbox.kubectl(),
        "default",
        &operator.api_url(),
    );
}
