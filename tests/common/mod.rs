//! Shared harness for the integration tests (sandbox, real binary) and the e2e suite (real
//! cluster): a target cluster reached through a kubeconfig, driven with `kubectl` as a user
//! would, and with the `kube` client.
#![allow(dead_code)] // each test binary uses its own subset

pub mod allocation;
pub mod api;
pub mod controller;
pub mod foundation;
pub mod ha;
pub mod job_controls;
pub mod kubectl;
pub mod kubelet;
pub mod migration;
pub mod oci;
pub mod preemption;
pub mod rbac;
pub mod registry;
pub mod webhook;

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub use kubectl::Kubectl;

/// A sandbox (the `diorch-sandbox` library, a dev-dependency) serving on a free loopback port,
/// in this process but on its own thread and runtime, so the test's threads and the operator
/// binary reach it over HTTP as they would a real API server. Stopped on drop.
pub struct SandboxProcess {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    pub dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
    pub server_url: String,
}

impl SandboxProcess {
    /// Starts a sandbox with `diorch-sandbox serve`'s flags `extra_args`, and waits until it
    /// serves.
    pub fn start(extra_args: &[&str]) -> SandboxProcess {
        SandboxProcess::start_inner(extra_args, None).0
    }

    /// Starts a sandbox and runs the demo on it with `operator` (the real `diorch` binary);
    /// returns once the demo has shown its hints, with every line it printed.
    pub fn start_demo(operator: &Path) -> (SandboxProcess, Vec<String>) {
        SandboxProcess::start_inner(&[], Some(operator.to_path_buf()))
    }

    fn start_inner(extra_args: &[&str], demo: Option<PathBuf>) -> (SandboxProcess, Vec<String>) {
        use clap::Parser as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = dir.path().join("kubeconfig");
        let mut argv = vec!["diorch-sandbox serve", "--listen", "127.0.0.1:0"];
        let path = kubeconfig.to_str().expect("utf-8 temp path").to_string();
        argv.extend(["--kubeconfig-out", &path]);
        argv.extend(extra_args);
        let options = diorch_sandbox::cli::ServeCommand::try_parse_from(&argv)
            .unwrap_or_else(|e| panic!("bad sandbox flags {extra_args:?}: {e}"))
            .args
            .options()
            .expect("sandbox options");
        let (ready_tx, ready) = mpsc::channel::<Result<String, String>>();
        let (lines_tx, lines) = mpsc::channel::<String>();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let has_demo = demo.is_some();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("sandbox runtime");
            runtime.block_on(async move {
                let sandbox = match diorch_sandbox::launch(options).await {
                    Ok(sandbox) => sandbox,
                    Err(error) => {
                        let _ = ready_tx.send(Err(error.to_string()));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(sandbox.url().to_string()));
                let _demo = match demo {
                    Some(operator) => {
                        let say = std::sync::Arc::new(move |line: String| {
                            println!("[demo] {line}");
                            let _ = lines_tx.send(line);
                        });
                        match diorch_sandbox::demo::run(&sandbox, &operator, say).await {
                            Ok(demo) => Some(demo),
                            Err(error) => {
                                println!("[demo] error: {error}");
                                None
                            }
                        }
                    }
                    None => None,
                };
                let _ = stopped.await;
                sandbox.stop().await;
            });
        });
        let server_url = match ready.recv_timeout(Duration::from_secs(60)) {
            Ok(Ok(url)) => url,
            Ok(Err(error)) => panic!("the sandbox did not start: {error}"),
            Err(_) => panic!("the sandbox did not start within 60 s"),
        };
        let sandbox = SandboxProcess {
            stop: Some(stop),
            thread: Some(thread),
            dir,
            kubeconfig,
            server_url,
        };
        let mut seen = Vec::new();
        if has_demo {
            let deadline = Instant::now() + Duration::from_secs(180);
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match lines.recv_timeout(left) {
                    Ok(line) => {
                        let done = line.starts_with("the sandbox runs until");
                        seen.push(line);
                        if done {
                            break;
                        }
                    }
                    Err(_) => panic!("the demo did not finish within 180 s: {seen:#?}"),
                }
            }
        }
        (sandbox, seen)
    }

    pub fn kubectl(&self) -> Kubectl {
        Kubectl::new(&self.kubeconfig, self.dir.path())
    }
}

impl Drop for SandboxProcess {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
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
