//! A real OCI registry for tests: Debian's `docker-registry` (the CNCF distribution registry)
//! serving on a free loopback port, its storage and log in a temporary folder; killed on drop.
//! Stand-alone (no other `common` module), so a test binary can include just this file.
#![allow(dead_code)] // each test binary uses its own subset

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `DIORCH_SKIP_REGISTRY_TESTS=1` (set by scripts/test.sh where the package cannot be installed)
/// turns a missing registry into a reported skip; otherwise it fails the test.
pub const SKIP_ENV: &str = "DIORCH_SKIP_REGISTRY_TESTS";

pub struct Registry {
    child: Child,
    pub dir: tempfile::TempDir,
    /// `127.0.0.1:<port>`, as references and `--insecure-registry` name it.
    pub host: String,
}

fn registry_binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .map(|dir| dir.join("docker-registry"))
        .find(|candidate| candidate.is_file())
}

/// Whether the registry binary is here; when it is not, a skip is printed and `false` returned
/// if [`SKIP_ENV`] is `1`, else the test fails: a registry test that passes without a registry
/// would prove nothing.
pub fn registry_available(test: &str) -> bool {
    if registry_binary().is_some() {
        return true;
    }
    assert!(
        std::env::var(SKIP_ENV).as_deref() == Ok("1"),
        "{test} needs Debian's docker-registry package (/usr/bin/docker-registry; scripts/test.sh \
         installs it). Set {SKIP_ENV}=1 to skip the tests that need it."
    );
    // Straight to stderr: libtest hides what a passing test prints.
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: {test}: no docker-registry binary and {SKIP_ENV}=1"
    );
    false
}

/// A port free a moment ago (another process may take it first: [`Registry::start`] retries).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Registry {
    /// A registry serving `GET /v2/`; panics when the binary is missing (check
    /// [`registry_available`] first) or it does not serve within 20 s.
    pub fn start() -> Registry {
        let binary = registry_binary().expect("docker-registry (see registry_available)");
        let mut failures = Vec::new();
        for _ in 0..3 {
            let dir = tempfile::tempdir().expect("tempdir");
            let host = format!("127.0.0.1:{}", free_port());
            std::fs::write(
                dir.path().join("config.yml"),
                format!(
                    "version: 0.1\n\
                     log:\n  level: error\n  accesslog:\n    disabled: true\n\
                     storage:\n  filesystem:\n    rootdirectory: \"{}\"\n  delete:\n    enabled: true\n\
                     http:\n  addr: {host}\n",
                    dir.path().join("storage").display()
                ),
            )
            .expect("write the registry config");
            let child = serve(&binary, dir.path());
            let mut registry = Registry { child, dir, host };
            match registry.wait_ready() {
                Ok(()) => return registry,
                Err(exited) => failures.push(exited),
            }
        }
        panic!(
            "docker-registry exited before serving, 3 times:\n{}",
            failures.join("\n")
        );
    }

    /// Stops serving (the storage stays).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Serves again on the same address from the same storage.
    pub fn resume(&mut self) {
        let binary = registry_binary().expect("docker-registry");
        self.child = serve(&binary, self.dir.path());
        if let Err(exited) = self.wait_ready() {
            panic!("docker-registry did not serve again: {exited}");
        }
    }

    /// Waits until `GET /v2/` answers 200; `Err` when the process exited first (its port was
    /// taken in the meantime).
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("{status}: {}", self.log()));
            }
            if answers_v2(&self.host) {
                return Ok(());
            }
            assert!(
                Instant::now() < deadline,
                "docker-registry did not answer GET /v2/ with 200 within 20 s; its output:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// The file holding blob `digest` (`sha256:<hex>`) in the filesystem driver's layout.
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
        self.dir
            .path()
            .join("storage/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

fn serve(binary: &Path, dir: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("registry.log"))
        .expect("registry log");
    Command::new(binary)
        .arg("serve")
        .arg(dir.join("config.yml"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("registry log"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()))
}

/// A plain HTTP/1.1 `GET /v2/` answered 200.
fn answers_v2(host: &str) -> bool {
    use std::io::{Read as _, Write as _};
    let Ok(mut stream) = std::net::TcpStream::connect(host) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET /v2/ HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    let mut answer = String::new();
    stream.write_all(request.as_bytes()).is_ok()
        && stream.read_to_string(&mut answer).is_ok()
        && answer.starts_with("HTTP/1.1 200")
}
