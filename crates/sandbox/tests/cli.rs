//! The `diorch-sandbox` binary as a user runs it: `serve` prints its ready line and writes a
//! kubeconfig kubectl uses, `serve --attach` plays nodes on another API server, and `demo`
//! refuses clearly when the operator binary is missing. The sandbox's behaviour under the
//! operator is tested from the operator's own tests (tests/ at the repository root).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a panic is its report

#[path = "../../../tests/common/kubectl.rs"]
#[allow(dead_code)]
mod kubectl;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kubectl::Kubectl;

/// A `diorch-sandbox` process, killed on drop.
struct Running(Child);

impl Running {
    /// Starts `diorch-sandbox <args> <path>` and returns it with its first stdout line.
    fn start(args: &[&str], path: &Path) -> (Running, String) {
        let child = Command::new(env!("CARGO_BIN_EXE_diorch-sandbox"))
            .args(args)
            .arg(path)
            .args(["--listen", "127.0.0.1:0"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn diorch-sandbox");
        let mut running = Running(child);
        let first = running.first_line();
        (running, first)
    }

    /// The first line the process prints (the ready line); empty if it exits first. Waits at
    /// most 60 s, so that a process that never answers fails the test instead of hanging it.
    fn first_line(&mut self) -> String {
        let stdout = self.0.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = tx.send(lines.next().and_then(Result::ok).unwrap_or_default());
            // Keep draining, so that later lines never block the process on a full pipe.
            for _ in lines {}
        });
        rx.recv_timeout(Duration::from_secs(60))
            .expect("diorch-sandbox printed no line within 60 s")
    }

    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

fn pod_manifest(name: &str, annotations: &str, cpu: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  annotations:\n{annotations}spec:\n  restartPolicy: Never\n  containers:\n  - name: main\n    image: busybox\n    resources:\n      requests:\n        cpu: \"{cpu}\"\n"
    )
}

#[test]
fn serve_prints_its_ready_line_and_serves_kubectl_the_simulated_nodes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    let (_server, ready) =
        Running::start(&["serve", "--nodes", "3", "--kubeconfig-out"], &kubeconfig);
    assert!(
        ready.starts_with("sandbox ready: http://127.0.0.1:"),
        "{ready}"
    );
    assert!(
        ready
            .trim_end()
            .ends_with(&format!("kubeconfig {}", kubeconfig.display())),
        "{ready}"
    );
    let k = Kubectl::new(&kubeconfig, dir.path());
    assert_eq!(k.ok(&["get", "nodes", "-o", "name"]).lines().count(), 3);
}

#[test]
fn demo_without_an_operator_binary_fails_with_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-such-diorch");
    let out = Command::new(env!("CARGO_BIN_EXE_diorch-sandbox"))
        .args(["demo", "--listen", "127.0.0.1:0", "--operator"])
        .arg(&missing)
        .arg("--kubeconfig-out")
        .arg(dir.path().join("kubeconfig"))
        .env("RUST_LOG", "off")
        .output()
        .expect("run diorch-sandbox demo");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(stderr.contains(&missing.display().to_string()), "{stderr}");
}

/// `diorch-sandbox serve --attach` against another API server (here `diorch-sandbox serve
/// --no-cluster`): it registers Ready nodes, plays their kubelet for pods bound to them, binds
/// nothing itself (that is the real scheduler's job), and stops on SIGTERM leaving the nodes.
#[test]
fn attached_kubelets_run_pods_bound_to_their_nodes_and_bind_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    let (mut server, ready) =
        Running::start(&["serve", "--no-cluster", "--kubeconfig-out"], &kubeconfig);
    assert!(
        ready.starts_with("sandbox ready: http://127.0.0.1:"),
        "{ready}"
    );
    let k = Kubectl::new(&kubeconfig, dir.path()).in_namespace("default");
    let attached = Command::new(env!("CARGO_BIN_EXE_diorch-sandbox"))
        .args(["serve", "--attach", "--kubeconfig"])
        .arg(&kubeconfig)
        .args([
            "--nodes",
            "2",
            "--node-gpus",
            "8",
            "--node-labels",
            "team=rl",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn diorch-sandbox serve --attach");
    let mut attached = Running(attached);
    let first = attached.first_line();
    assert!(
        first.starts_with("sandbox attached: 2 nodes on http://127.0.0.1:"),
        "{first}"
    );
    let nodes = k.ok(&[
        "get",
        "nodes",
        "-l",
        "team=rl",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.status.conditions[?(@.type==\"Ready\")].status} {.status.allocatable.nvidia\\.com/gpu}{\"\\n\"}{end}",
    ]);
    assert_eq!(
        nodes, "sandbox-node-0 True 8\nsandbox-node-1 True 8\n",
        "{nodes}"
    );
    k.ok_stdin(
        &["apply", "-f", "-"],
        &pod_manifest("unbound", "    a: b\n", "1"),
    );
    k.ok_stdin(
        &["apply", "-f", "-"],
        &pod_manifest("bound", "    a: b\n", "1").replace(
            "  restartPolicy: Never\n",
            "  restartPolicy: Never\n  nodeName: sandbox-node-1\n",
        ),
    );
    let running = k.wait_for(
        &[
            "get",
            "pod",
            "bound",
            "-o",
            "jsonpath={.status.phase} {.status.podIP}",
        ],
        Duration::from_secs(60),
        |out| out.starts_with("Running "),
    );
    assert!(running.starts_with("Running 10.244.1."), "{running}");
    // Created before `bound` ran: a scheduler in this process would have bound it by now.
    assert_eq!(
        k.ok(&["get", "pod", "unbound", "-o", "jsonpath={.spec.nodeName}"]),
        ""
    );
    let pid = attached.0.id().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status();
    assert!(sent.is_ok_and(|s| s.success()));
    let status = attached
        .0
        .wait()
        .expect("wait for diorch-sandbox serve --attach");
    assert!(status.success(), "{status}");
    assert_eq!(
        k.ok(&["get", "nodes", "-o", "name"]).lines().count(),
        2,
        "the nodes stay registered"
    );
    server.stop();
}
