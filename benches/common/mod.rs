//! Shared pieces of the bench binaries: a `diorch-sandbox serve --no-cluster` process and its
//! resident memory.
#![allow(dead_code)] // each bench uses its own subset

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use kube::Client;

/// A running `diorch-sandbox serve --no-cluster` (the sandbox crate's binary), killed on drop.
pub struct Sandbox {
    pub child: Child,
    pub client: Client,
    pub kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn start() -> anyhow::Result<Sandbox> {
        Sandbox::start_with(&["--no-cluster"])
    }

    /// `diorch-sandbox serve` with `args` (e.g. `--nodes 100`).
    pub fn start_with(args: &[&str]) -> anyhow::Result<Sandbox> {
        let dir = tempfile::tempdir()?;
        let kubeconfig = dir.path().join("kubeconfig");
        let mut child = Command::new(sandbox_binary()?)
            .arg("serve")
            .args(args)
            .args(["--listen", "127.0.0.1:0", "--kubeconfig-out"])
            .arg(&kubeconfig)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
        let mut url = String::new();
        let mut lines = BufReader::new(stdout).lines();
        for line in lines.by_ref() {
            let line = line?;
            if let Some(rest) = line.strip_prefix("sandbox ready: ") {
                url = rest
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string();
                break;
            }
        }
        // Keep reading, so the sandbox never writes into a closed pipe.
        std::thread::spawn(move || lines.for_each(drop));
        anyhow::ensure!(!url.is_empty(), "sandbox did not start");
        let client = Client::try_from(kube::Config::new(url.parse()?))?;
        Ok(Sandbox {
            child,
            client,
            kubeconfig,
            _dir: dir,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `diorch-sandbox` binary beside the operator's, built with the bench's profile first
/// when it is missing (it is another package: cargo does not build it for this one's benches).
fn sandbox_binary() -> anyhow::Result<PathBuf> {
    let operator = std::path::Path::new(env!("CARGO_BIN_EXE_diorch"));
    let binary = operator.with_file_name("diorch-sandbox");
    let release = operator
        .parent()
        .is_some_and(|dir| dir.ends_with("release"));
    let mut build = Command::new(env!("CARGO"));
    build.args([
        "build",
        "--locked",
        "-p",
        "diorch-sandbox",
        "--bin",
        "diorch-sandbox",
    ]);
    if release {
        build.arg("--release");
    }
    // Always: cargo does nothing when it is current, and a stale sandbox would measure old code.
    anyhow::ensure!(build.status()?.success(), "cannot build diorch-sandbox");
    anyhow::ensure!(binary.is_file(), "{} is missing", binary.display());
    Ok(binary)
}

/// Resident memory of a process, in MiB.
pub fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A running `diorch run` (the real binary) against `kubeconfig`, killed on drop.
pub struct Operator(pub Child);

impl Operator {
    /// `diorch run` with no client-side rate limit and no endpoints, plus `extra` flags.
    pub fn start(kubeconfig: &std::path::Path, extra: &[&str]) -> anyhow::Result<Operator> {
        let child = Command::new(env!("CARGO_BIN_EXE_diorch"))
            .args([
                "run",
                "--qps",
                "0",
                "--metric-addr",
                "0",
                "--probe-addr",
                "0",
                "--server-bind-address",
                "0",
                "--webhook-addr",
                "0",
                "--kubeconfig",
            ])
            .arg(kubeconfig)
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()?;
        Ok(Operator(child))
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
