//! Shared harness for the integration tests (sandbox, real binary) and the e2e suite (real
//! cluster): a target cluster reached through a kubeconfig, driven with `kubectl` as a user
//! would, and with the `kube` client.
#![allow(dead_code)] // each test binary uses its own subset

pub mod allocation;
pub mod api;
pub mod controller;
pub mod foundation;
pub mod ha;
pub mod kubelet;
pub mod webhook;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running `diorch sandbox` process (the real binary), killed on drop.
pub struct SandboxProcess {
    child: Child,
    pub dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
    pub server_url: String,
}

impl SandboxProcess {
    /// Starts `diorch sandbox` on a free loopback port with extra flags, and waits until it
    /// prints that it is ready.
    pub fn start(extra_args: &[&str]) -> SandboxProcess {
        SandboxProcess::start_command("sandbox", extra_args, "sandbox ready: ").0
    }

    /// Starts `diorch <command>` (`sandbox` or `demo`) and waits for its ready line; also
    /// returns the first stdout line starting with `until` (or the ready line) and a receiver
    /// of the later stdout lines.
    pub fn start_command(
        command: &str,
        extra_args: &[&str],
        until: &str,
    ) -> (SandboxProcess, Vec<String>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = dir.path().join("kubeconfig");
        let mut child = Command::new(env!("CARGO_BIN_EXE_diorch"))
            .arg(command)
            .args(["--listen", "127.0.0.1:0", "--kubeconfig-out"])
            .arg(&kubeconfig)
            .args(extra_args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn diorch sandbox");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                println!("[sandbox] {line}");
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut server_url = String::new();
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(url) = line.strip_prefix("sandbox ready: ") {
                        server_url = url
                            .split_whitespace()
                            .next()
                            .unwrap_or_default()
                            .to_string();
                    }
                    let done = line.starts_with(until);
                    seen.push(line);
                    if done {
                        break;
                    }
                }
                Err(_) => {
                    let _ = child.kill();
                    panic!("diorch {command} did not print {until:?} within 60 s: {seen:?}");
                }
            }
        }
        let sandbox = SandboxProcess {
            child,
            dir,
            kubeconfig,
            server_url,
        };
        (sandbox, seen)
    }

    pub fn kubectl(&self) -> Kubectl {
        Kubectl::new(&self.kubeconfig, self.dir.path())
    }
}

impl Drop for SandboxProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `kubectl` bound to one kubeconfig and its own discovery cache.
#[derive(Clone)]
pub struct Kubectl {
    kubeconfig: PathBuf,
    cache_dir: PathBuf,
    namespace: Option<String>,
}

impl Kubectl {
    pub fn new(kubeconfig: &Path, scratch: &Path) -> Kubectl {
        Kubectl {
            kubeconfig: kubeconfig.to_path_buf(),
            cache_dir: scratch.join("kubectl-cache"),
            namespace: None,
        }
    }

    /// The same kubectl, defaulting to `namespace`.
    pub fn in_namespace(&self, namespace: &str) -> Kubectl {
        Kubectl {
            namespace: Some(namespace.to_string()),
            ..self.clone()
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("kubectl");
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache_dir)
            .arg("--request-timeout=30s");
        if let Some(ns) = &self.namespace {
            cmd.args(["--namespace", ns]);
        }
        cmd.args(args);
        cmd
    }

    /// Starts kubectl (e.g. a watch) with stdout piped; the caller kills it.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn kubectl")
    }

    /// Runs kubectl and returns its output whatever the exit status.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run kubectl")
    }

    /// Runs kubectl with `stdin` as standard input.
    pub fn run_stdin(&self, args: &[&str], stdin: &str) -> Output {
        use std::io::Write;
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn kubectl");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(stdin.as_bytes())
            .expect("write stdin");
        child.wait_with_output().expect("kubectl output")
    }

    /// Runs kubectl, asserting success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        expect_success(args, self.run(args))
    }

    /// Runs kubectl with one more environment variable (e.g. `KUBE_EDITOR`), asserting
    /// success; returns stdout.
    pub fn ok_env(&self, args: &[&str], key: &str, value: &std::ffi::OsStr) -> String {
        let out = self
            .command(args)
            .env(key, value)
            .output()
            .expect("run kubectl");
        expect_success(args, out)
    }

    /// Runs kubectl with stdin, asserting success; returns stdout.
    pub fn ok_stdin(&self, args: &[&str], stdin: &str) -> String {
        expect_success(args, self.run_stdin(args, stdin))
    }

    /// Runs kubectl, asserting failure; returns stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        expect_failure(args, self.run(args))
    }

    /// Runs kubectl with stdin, asserting failure; returns stderr.
    pub fn fails_stdin(&self, args: &[&str], stdin: &str) -> String {
        expect_failure(args, self.run_stdin(args, stdin))
    }

    /// Polls `kubectl get ... -o jsonpath=<path>` until `pred` holds (at most `timeout`).
    pub fn wait_for(
        &self,
        args: &[&str],
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + timeout;
        let mut last = String::new();
        while Instant::now() < deadline {
            let out = self.run(args);
            last = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            if out.status.success() && pred(&String::from_utf8_lossy(&out.stdout)) {
                return String::from_utf8_lossy(&out.stdout).into_owned();
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!(
            "timed out after {timeout:?} waiting on kubectl {}; last output: {last}",
            args.join(" ")
        );
    }
}

fn expect_success(args: &[&str], out: Output) -> String {
    assert!(
        out.status.success(),
        "kubectl {} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn expect_failure(args: &[&str], out: Output) -> String {
    assert!(
        !out.status.success(),
        "kubectl {} unexpectedly succeeded: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Repository root, for `crds/` and `examples/`.
/// The words of line `n` of a `kubectl get` table (0: the header).
pub fn table_row(table: &str, n: usize) -> Vec<&str> {
    table
        .lines()
        .nth(n)
        .unwrap_or_default()
        .split_whitespace()
        .collect()
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The DI-orchestrator v2 sample manifests shipped under `examples/`.
pub fn di_orchestrator_samples() -> Vec<PathBuf> {
    let dir = repo_root().join("examples/di-orchestrator-samples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("samples dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no samples in {}", dir.display());
    files
}
