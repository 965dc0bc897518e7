//! `kubectl` driven as a user would, bound to one kubeconfig. Uses nothing of diorch, so the
//! sandbox crate's tests include it too.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

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

    /// The kubeconfig file it uses (for other clients of the same cluster, e.g. `diorch
    /// explain`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
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
