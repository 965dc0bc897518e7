//! Integration tests: the sandbox (in-process, a dev-dependency) driven with `kubectl` as a user
//! would, the demo running the real `diorch` binary on it, and `diorch run` against it. The
//! `diorch-sandbox` binary's own flags are tested in crates/sandbox/tests/cli.rs.

use crate::common;

use std::time::Duration;

use common::{SandboxProcess, foundation, kubelet};

#[test]
fn kubectl_installs_crd_applies_samples_and_refuses_invalid_jobs() {
    let sandbox = SandboxProcess::start(&[]);
    let k = sandbox.kubectl();
    foundation::install_crd(&k);
    foundation::create_namespace(&k, "samples");
    foundation::samples_apply_and_print_columns(&k, "samples");
    foundation::invalid_dijobs_are_refused(&k, "samples");
    foundation::status_subresource_split(&k, "samples");
    foundation::owner_deletion_cascades(&k, "samples");
}

/// Graceful deletion as a real kubelet does it: the same scenario runs on a real API server in
/// tests/e2e.rs (`e2e_kubelet`).
#[test]
fn deleted_pods_keep_their_name_until_their_containers_stopped() {
    let sandbox = SandboxProcess::start(&["--nodes", "1"]);
    let k = sandbox.kubectl();
    foundation::create_namespace(&k, "graceful");
    kubelet::graceful_deletion(&k, "graceful");
}

fn pod_manifest(name: &str, annotations: &str, cpu: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  annotations:\n{annotations}spec:\n  restartPolicy: Never\n  containers:\n  - name: main\n    image: busybox\n    resources:\n      requests:\n        cpu: \"{cpu}\"\n"
    )
}

#[test]
fn simulated_kubelet_runs_and_ends_pods_by_annotation() {
    let sandbox = SandboxProcess::start(&["--nodes", "2", "--node-cpu", "4"]);
    let k = sandbox.kubectl().in_namespace("default");
    let nodes = k.ok(&["get", "nodes", "-o", "name"]);
    assert_eq!(nodes.lines().count(), 2, "{nodes}");

    k.ok_stdin(
        &["apply", "-f", "-"],
        &pod_manifest("ok", "    sandbox.diorch.io/exit-after: 2s\n", "1"),
    );
    k.ok_stdin(
        &["apply", "-f", "-"],
        &pod_manifest(
            "crash",
            "    sandbox.diorch.io/exit-after: 2s\n    sandbox.diorch.io/exit-code: \"3\"\n",
            "1",
        ),
    );
    // Running, with an IP and a Ready condition, before it ends.
    let running = k.wait_for(
        &[
            "get",
            "pod",
            "ok",
            "-o",
            "jsonpath={.status.phase} {.status.podIP} {.spec.nodeName}",
        ],
        Duration::from_secs(30),
        |out| out.starts_with("Running ") || out.starts_with("Succeeded "),
    );
    let fields: Vec<&str> = running.split_whitespace().collect();
    assert_eq!(fields.len(), 3, "{running}");
    assert!(fields[2].starts_with("sandbox-node-"), "{running}");

    k.wait_for(
        &["get", "pod", "ok", "-o", "jsonpath={.status.phase}"],
        Duration::from_secs(30),
        |out| out == "Succeeded",
    );
    let state = k.ok(&[
        "get",
        "pod",
        "ok",
        "-o",
        "jsonpath={.status.containerStatuses[0].state.terminated.exitCode} {.status.containerStatuses[0].state.terminated.reason}",
    ]);
    assert_eq!(state, "0 Completed");

    k.wait_for(
        &["get", "pod", "crash", "-o", "jsonpath={.status.phase}"],
        Duration::from_secs(30),
        |out| out == "Failed",
    );
    let state = k.ok(&[
        "get",
        "pod",
        "crash",
        "-o",
        "jsonpath={.status.containerStatuses[0].state.terminated.exitCode} {.status.containerStatuses[0].state.terminated.reason}",
    ]);
    assert_eq!(state, "3 Error");

    // No node has 64 CPUs: the pod stays Pending with PodScheduled=False and an event.
    k.ok_stdin(
        &["apply", "-f", "-"],
        &pod_manifest("huge", "    a: b\n", "64"),
    );
    k.wait_for(
        &[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=huge,reason=FailedScheduling",
            "-o",
            "name",
        ],
        Duration::from_secs(30),
        |out| !out.trim().is_empty(),
    );
    let scheduled = k.ok(&[
        "get",
        "pod",
        "huge",
        "-o",
        "jsonpath={.status.phase} {.status.conditions[?(@.type==\"PodScheduled\")].status}",
    ]);
    assert_eq!(scheduled, "Pending False");
    let described = k.ok(&["describe", "pod", "huge"]);
    assert!(described.contains("FailedScheduling"), "{described}");
    assert!(described.contains("Insufficient cpu"), "{described}");
}

#[test]
fn demo_runs_the_sample_job_to_success_with_the_operator_binary() {
    let operator = std::path::Path::new(env!("CARGO_BIN_EXE_diorch"));
    let (sandbox, lines) = SandboxProcess::start_demo(operator);
    let output = lines.join("\n");
    assert!(
        output.contains("installed CRD dijobs.diengine.opendilab.org"),
        "{output}"
    );
    assert!(
        output.contains("submitted DIJob default/job-with-tasks"),
        "{output}"
    );
    assert!(output.contains("kubectl get dijobs"), "{output}");
    // The operator binary ran the job; its phases were shown live, in order.
    let phases: Vec<&str> = output
        .lines()
        .filter_map(|l| l.strip_prefix("  job-with-tasks: "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let mut distinct = phases.clone();
    distinct.dedup();
    assert_eq!(
        distinct,
        ["Pending", "Starting", "Running", "Succeeded"],
        "{output}"
    );
    let k = sandbox.kubectl().in_namespace("default");
    let tasks = k.ok(&[
        "get",
        "dijob",
        "job-with-tasks",
        "-o",
        "jsonpath={.spec.tasks[*].replicas} {.spec.tasks[0].template.metadata.annotations}",
    ]);
    assert!(tasks.starts_with("1 1 2 "), "{tasks}");
    assert!(tasks.contains("sandbox.diorch.io/exit-after"), "{tasks}");
    // The demo installed the admission webhooks: the invalid example it suggests is refused.
    let example = common::repo_root().join("examples/invalid-two-collectors.yaml");
    let err = k.fails(&["apply", "-f", &example.display().to_string()]);
    assert!(
        err.contains("admission webhook \"vdijob.diengine.opendilab.org\" denied the request: spec.tasks[1].type: the number of collector task is more than one"),
        "{err}"
    );
}

#[test]
fn operator_run_refuses_a_cluster_without_the_crd_then_reconciles_dijobs() {
    let sandbox = SandboxProcess::start(&["--nodes", "1"]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_diorch"))
        .args(["run", "--kubeconfig"])
        .arg(&sandbox.kubeconfig)
        .output()
        .expect("run diorch run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let error_lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(error_lines.len(), 1, "{stderr}");
    assert!(
        error_lines[0].contains("DIJob CRD (dijobs.diengine.opendilab.org) is not installed"),
        "{stderr}"
    );

    let k = sandbox.kubectl();
    common::foundation::install_crd(&k);
    let operator = common::controller::OperatorProcess::start(&sandbox.kubeconfig);
    k.in_namespace("default").ok(&[
        "apply",
        "-f",
        common::repo_root()
            .join("examples/di-orchestrator-samples/dijob-serial.yaml")
            .to_str()
            .expect("utf-8"),
    ]);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !operator
        .lines()
        .iter()
        .any(|l| l.contains("default/serial-test"))
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    let seen = operator.lines();
    operator.kill();
    assert!(
        seen.iter()
            .any(|l| l.contains("running the DIJob controller")),
        "{seen:#?}"
    );
    assert!(
        seen.iter()
            .any(|l| l.contains("reconciled") && l.contains("job=default/serial-test")),
        "{seen:#?}"
    );
}
