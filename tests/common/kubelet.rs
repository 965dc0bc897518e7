//! Scenarios of the simulated kubelet (`crates/sandbox/src/kubelet.rs`) that hold on the sandbox and on
//! a real API server with `diorch-sandbox serve --attach` playing the nodes: graceful deletion as a
//! real kubelet does it.

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use super::Kubectl;

/// A pod with `annotations` (YAML lines, 4 spaces in) and a tiny CPU request.
fn pod(name: &str, grace: u32, annotations: &str, node_selector: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  annotations:\n    sandbox.diorch.io/scenario: kubelet\n{annotations}spec:\n  restartPolicy: Never\n  terminationGracePeriodSeconds: {grace}\n{node_selector}  containers:\n  - name: main\n    image: busybox\n    resources:\n      requests:\n        cpu: 10m\n"
    )
}

/// Creates a pod; a new namespace on a real server refuses pods until its `default`
/// ServiceAccount exists, which the controller-manager creates a moment later.
fn create(k: &Kubectl, manifest: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = k.run_stdin(&["create", "-f", "-"], manifest);
        if out.status.success() {
            return;
        }
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            err.contains("serviceaccount") && Instant::now() < deadline,
            "kubectl create failed: {err}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn wait_running(k: &Kubectl, name: &str) {
    k.wait_for(
        &["get", "pod", name, "-o", "jsonpath={.status.phase}"],
        Duration::from_secs(60),
        |out| out == "Running",
    );
}

fn wait_gone(k: &Kubectl, name: &str) {
    k.ok(&[
        "wait",
        "--for=delete",
        &format!("pod/{name}"),
        "--timeout=120s",
    ]);
}

/// A deleted pod on a node stays, Terminating and with its name taken (a create of the same
/// name answers AlreadyExists), until its containers stopped: killed with exit code 137 at the
/// end of its grace period when they would take longer, or stopped with their own code
/// (0 here) before. The kubelet writes those terminated states before it deletes the pod. An
/// unbound pod goes at once: no kubelet is involved.
pub fn graceful_deletion(k: &Kubectl, ns: &str) {
    let k = k.in_namespace(ns);
    // Containers that would take 10 minutes to stop, in a pod with 8 s of grace: killed.
    create(
        &k,
        &pod("slow", 8, "    sandbox.diorch.io/stop-after: 10m\n", ""),
    );
    // Containers that stop 1 s after SIGTERM (the default) within a 30 s grace period.
    create(&k, &pod("quick", 30, "", ""));
    // A pod no node can take: never bound.
    create(
        &k,
        &pod(
            "unbound",
            30,
            "",
            "  nodeSelector:\n    diorch.io/no-such-node: \"true\"\n",
        ),
    );
    wait_running(&k, "slow");
    wait_running(&k, "quick");

    // Every change of the two pods, up to their removal.
    let mut watch = k.spawn(&[
        "get",
        "pods",
        "--watch",
        "--request-timeout=0",
        "-o",
        "jsonpath={.metadata.name} {.status.phase} {.status.containerStatuses[0].state.terminated.exitCode}{\"\\n\"}",
    ]);

    k.ok(&["delete", "pod", "unbound", "--wait=false"]);
    let gone = k.run(&["get", "pod", "unbound", "-o", "name"]);
    assert!(
        !gone.status.success() && String::from_utf8_lossy(&gone.stderr).contains("NotFound"),
        "an unbound pod is removed at once: {}",
        String::from_utf8_lossy(&gone.stdout)
    );

    k.ok(&["delete", "pod", "slow", "quick", "--wait=false"]);
    // The kubelet cannot have killed `slow` yet: its grace period runs 8 s from the delete.
    let terminating = k.ok(&[
        "get",
        "pod",
        "slow",
        "-o",
        "jsonpath={.metadata.deletionTimestamp} {.metadata.deletionGracePeriodSeconds}",
    ]);
    assert!(
        terminating.ends_with(" 8") && terminating.len() > 2,
        "a deleted pod on a node stays Terminating: {terminating}"
    );
    let refused = k.fails_stdin(&["create", "-f", "-"], &pod("slow", 8, "", ""));
    assert!(
        refused.contains("AlreadyExists") || refused.contains("already exists"),
        "the Terminating pod's name is taken: {refused}"
    );

    // The watch shows the terminated states the kubelet wrote before deleting the pods.
    let lines = watch.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(lines).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let wanted = ["slow Failed 137", "quick Succeeded 0"];
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !wanted.iter().all(|w| seen.iter().any(|l| l == w)) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => {
                let _ = watch.kill();
                panic!(
                    "the kubelet did not write the stopped containers (slow killed with 137, quick exited 0) before deleting the pods; the watch saw:\n{}",
                    seen.join("\n")
                );
            }
        }
    }
    let _ = watch.kill();
    let _ = watch.wait();
    wait_gone(&k, "quick");
    wait_gone(&k, "slow");
    // Nothing re-created the name meanwhile.
    let none = k.ok(&["get", "pods", "-o", "name"]);
    assert!(none.trim().is_empty(), "{none}");
}
