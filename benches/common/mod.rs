//! Shared pieces of the bench binaries: the API servers a bench runs on (a fresh
//! `diorch-sandbox serve` per run, and the real API server of `BENCH_KUBECONFIG` with the
//! sandbox's simulated nodes and kubelet attached to it), the operator process, its metrics,
//! CPU time and resident memory.
#![allow(dead_code)] // each bench uses its own subset

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};

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
        let url = ready_line(&mut child, "sandbox ready: ")?
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string();
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

/// The rest of the first stdout line of `child` that starts with `prefix`; the lines after it
/// are read and dropped on a thread, so the child never writes into a closed pipe.
fn ready_line(child: &mut Child, prefix: &str) -> anyhow::Result<String> {
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let mut lines = BufReader::new(stdout).lines();
    let found = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix(prefix).map(str::to_string));
    std::thread::spawn(move || lines.for_each(drop));
    found.ok_or_else(|| anyhow::anyhow!("no line starting {prefix:?}"))
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
    // What cargo sets for the running bench is not for this build: ring's build script
    // reruns when CARGO_MANIFEST_DIR changes, and each rebuild of it rebuilds half the tree,
    // here and again in the next `cargo bench`.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_PKG_")
            || matches!(
                name.as_ref(),
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
                    | "OUT_DIR"
            )
        {
            build.env_remove(name.as_ref());
        }
    }
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

/// mimalloc's settings as deploy/base/deployment.yaml gives them to the operator (arenas
/// committed lazily), unless the bench's own environment sets them; the child inherits any
/// other MIMALLOC_* variable as it is.
pub fn mimalloc_env() -> Vec<(&'static str, String)> {
    [("MIMALLOC_ARENA_EAGER_COMMIT", "0")]
        .into_iter()
        .map(|(name, value)| (name, std::env::var(name).unwrap_or_else(|_| value.into())))
        .collect()
}

/// Resident memory of a process, in MiB.
pub fn rss_mib(pid: u32) -> f64 {
    status_mib(&format!("/proc/{pid}/status"), "VmRSS:").unwrap_or(f64::NAN)
}

/// A process's peak resident memory so far (VmHWM), in MiB.
pub fn peak_rss_of_mib(pid: u32) -> f64 {
    status_mib(&format!("/proc/{pid}/status"), "VmHWM:").unwrap_or(f64::NAN)
}

/// This process's peak resident memory so far (VmHWM), in MiB.
pub fn peak_rss_mib() -> f64 {
    status_mib("/proc/self/status", "VmHWM:").unwrap_or(0.0)
}

/// The kB figure of `field` in a `/proc/…/status` file, in MiB.
fn status_mib(path: &str, field: &str) -> Option<f64> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
}

pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The sizes to run per server: `SIZES` (comma separated, default 100,1000) on the sandbox,
/// `REAL_SIZES` (default: the same) on a real server, where N = 1000 takes minutes per path.
pub fn env_sizes() -> (Vec<usize>, Vec<usize>) {
    let parse = |list: String| -> Vec<usize> {
        list.split(',')
            .filter_map(|s| s.trim().parse().ok())
            .collect()
    };
    let sizes = parse(std::env::var("SIZES").unwrap_or_else(|_| "100,1000".to_string()));
    let real = std::env::var("REAL_SIZES").map_or_else(|_| sizes.clone(), parse);
    (sizes, real)
}

/// A running `diorch run` (the real binary) against `kubeconfig`, killed on drop.
pub struct Operator {
    pub child: Child,
    /// Where its `/metrics` are served, when asked for.
    pub metrics: Option<String>,
    /// Started under `OPERATOR_WRAPPER`, in a process group of its own.
    wrapped: bool,
}

impl Operator {
    /// `diorch run` with no client-side rate limit and no endpoints, plus `extra` flags.
    pub fn start(kubeconfig: &std::path::Path, extra: &[&str]) -> anyhow::Result<Operator> {
        Operator::start_with(kubeconfig, extra, false)
    }

    /// As [`Operator::start`], serving `/metrics` on a free port when `metrics`.
    pub fn start_with(
        kubeconfig: &std::path::Path,
        extra: &[&str],
        metrics: bool,
    ) -> anyhow::Result<Operator> {
        let metrics = metrics.then(|| format!("127.0.0.1:{}", free_port()));
        // OPERATOR_WRAPPER, e.g. `heaptrack -o /tmp/heap`, runs the operator under a profiler.
        let wrapper = std::env::var("OPERATOR_WRAPPER").unwrap_or_default();
        let mut wrapper = wrapper.split_whitespace();
        let wrapped = wrapper.clone().next().is_some();
        let mut command = match wrapper.next() {
            Some(program) => {
                let mut command = Command::new(program);
                command.args(wrapper).arg(env!("CARGO_BIN_EXE_diorch"));
                // Its own process group, so that stopping it reaches the wrapper and the
                // operator both (see `Drop`).
                std::os::unix::process::CommandExt::process_group(&mut command, 0);
                command
            }
            None => Command::new(env!("CARGO_BIN_EXE_diorch")),
        };
        let child = command
            .args([
                "run",
                "--qps",
                "0",
                "--metric-addr",
                metrics.as_deref().unwrap_or("0"),
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
            // As deploy/base/deployment.yaml runs it: its CPU limit of 1 (the standard library's
            // available parallelism reads the cgroup's quota) gives it a current-thread runtime
            // (src/main.rs `runtime_for`). OPERATOR_WORKER_THREADS=2 runs it as on an unlimited
            // 2-core node: a multi-thread runtime of two workers.
            .env(
                "TOKIO_WORKER_THREADS",
                std::env::var("OPERATOR_WORKER_THREADS").unwrap_or_else(|_| "1".into()),
            )
            .envs(mimalloc_env())
            .env(
                "RUST_LOG",
                std::env::var("OPERATOR_RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::null())
            // OPERATOR_LOG=<file>: the operator's log goes there (with OPERATOR_RUST_LOG).
            .stderr(match std::env::var_os("OPERATOR_LOG") {
                Some(path) => Stdio::from(std::fs::File::create(path)?),
                None => Stdio::inherit(),
            })
            .spawn()?;
        Ok(Operator {
            child,
            metrics,
            wrapped,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if self.wrapped {
            // A profiler killed outright writes a truncated file and leaves the operator
            // running: SIGTERM to the group stops the operator, then the profiler finishes.
            let group = format!("-{}", self.child.id());
            let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
            while std::time::Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The API server a run goes to.
#[derive(Clone, Debug)]
pub enum Server {
    /// A fresh `diorch-sandbox serve` per run.
    Sandbox,
    /// The real API server of this kubeconfig (e.g. `../shared/kube/up.sh`); each run gets a
    /// fresh namespace, deleted afterwards.
    Real(PathBuf),
}

impl Server {
    /// The sandbox, then the real API server when `BENCH_KUBECONFIG` names one.
    pub fn all() -> Vec<Server> {
        let mut servers = vec![Server::Sandbox];
        match std::env::var_os("BENCH_KUBECONFIG") {
            Some(path) if !path.is_empty() => servers.push(Server::Real(PathBuf::from(path))),
            _ => println!(
                "  (real API server: skipped; set BENCH_KUBECONFIG, e.g. to the kubeconfig ../shared/kube/up.sh prints)"
            ),
        }
        servers
    }

    pub fn label(&self) -> &'static str {
        match self {
            Server::Sandbox => "sandbox",
            Server::Real(_) => "real API server",
        }
    }
}

/// The nodes and kubelet of a run: `diorch-sandbox serve` flags (`--nodes 40 ...`). On the
/// sandbox they are its own cluster; on a real server the same flags go to
/// `diorch-sandbox serve --attach`, which registers the nodes and plays their kubelet there.
#[derive(Clone, Debug)]
pub struct Nodes(pub Vec<String>);

impl Nodes {
    pub fn new(args: &[&str]) -> Nodes {
        Nodes(args.iter().map(|a| a.to_string()).collect())
    }
}

/// One run's cluster: a fresh sandbox, or a fresh namespace on the real server.
pub struct Cluster {
    pub client: Client,
    pub kubeconfig: PathBuf,
    pub namespace: String,
    /// The sandbox's process, whose CPU and memory are the API server's.
    pub sandbox: Option<Sandbox>,
    _attached: Option<Attached>,
}

static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Cluster {
    /// A cluster with `nodes`, and the DIJob CRD installed.
    pub async fn start(server: &Server, nodes: &Nodes) -> anyhow::Result<Cluster> {
        let cluster = match server {
            Server::Sandbox => {
                let args: Vec<&str> = nodes.0.iter().map(String::as_str).collect();
                let sandbox = Sandbox::start_with(&args)?;
                Cluster {
                    client: sandbox.client.clone(),
                    kubeconfig: sandbox.kubeconfig.clone(),
                    namespace: "default".into(),
                    sandbox: Some(sandbox),
                    _attached: None,
                }
            }
            Server::Real(kubeconfig) => {
                if let Some(up) = fresh_control_plane() {
                    let path = kubeconfig.clone();
                    tokio::task::spawn_blocking(move || restart_control_plane(&up, &path))
                        .await??;
                }
                let client = client_for(kubeconfig).await?;
                install_crd(&client).await?;
                let attached = Attached::start(kubeconfig, nodes)?;
                let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let namespace = format!("bench-{}-{run}", std::process::id());
                let namespaces: Api<Namespace> = Api::all(client.clone());
                namespaces
                    .create(
                        &PostParams::default(),
                        &serde_json::from_value(
                            serde_json::json!({"metadata": {"name": namespace}}),
                        )?,
                    )
                    .await?;
                Cluster {
                    client,
                    kubeconfig: kubeconfig.clone(),
                    namespace,
                    sandbox: None,
                    _attached: Some(attached),
                }
            }
        };
        if cluster.sandbox.is_some() {
            install_crd(&cluster.client).await?;
        }
        Ok(cluster)
    }

    /// Ends the run: on a real server its namespace is deleted and awaited (with the operator
    /// stopped first, so nothing recreates what the namespace controller deletes).
    pub async fn finish(self) -> anyhow::Result<()> {
        if self.sandbox.is_some() || fresh_control_plane().is_some() {
            // A fresh control plane replaces this one at the next run's start.
            return Ok(());
        }
        // Pods first, without grace: the namespace controller would delete them gracefully,
        // one kubelet round trip each, minutes for thousands. One by one, 32 at a time: a
        // deletecollection of 8 000 pods outlasts the API server's request timeout on 2 cores,
        // and a run must not leave its pods for the next run's operator to cache.
        let ns = &self.namespace;
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(self.client.clone(), ns);
        let now = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        delete_each(&pods, &now).await?;
        // The rest of what a run leaves, by this client too: the namespace controller and the
        // garbage collector of kube-controller-manager write at its 20 requests/s, minutes for
        // a thousand DIJobs, services and their Events.
        let jobs: Api<diorch_core::api::DIJob> = Api::namespaced(self.client.clone(), ns);
        delete_each(&jobs, &DeleteParams::background()).await?;
        let services: Api<k8s_openapi::api::core::v1::Service> =
            Api::namespaced(self.client.clone(), ns);
        delete_each(&services, &DeleteParams::background()).await?;
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(self.client.clone(), ns);
        delete_all(&events, &DeleteParams::default()).await?;
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        namespaces
            .delete(&self.namespace, &DeleteParams::default())
            .await?;
        let deadline = Instant::now() + Duration::from_secs(600);
        while namespaces.get_opt(&self.namespace).await?.is_some() {
            anyhow::ensure!(
                Instant::now() < deadline,
                "namespace {} still exists after 10 min",
                self.namespace
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Ok(())
    }

    pub fn is_real(&self) -> bool {
        self.sandbox.is_none()
    }
}

/// Deletes every object of `api` one by one, 32 requests at a time (an object already gone
/// counts as deleted).
async fn delete_each<K>(api: &Api<K>, params: &DeleteParams) -> anyhow::Result<()>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug + kube::Resource,
{
    let names: Vec<String> = api
        .list_metadata(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect();
    futures::stream::iter(names)
        .map(|name| async move {
            match api.delete(&name, params).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
                Err(err) => Err(err),
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Deletes every object of `api` with deletecollection (a run's Events: thousands, read by no
/// operator). One can outlast the API server's request timeout on 2 cores (a 500 "context
/// deadline exceeded" after deleting part of them): that is retried.
async fn delete_all<K>(api: &Api<K>, params: &DeleteParams) -> anyhow::Result<()>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug + kube::Resource,
{
    const ATTEMPTS: u32 = 10;
    for attempt in 1..=ATTEMPTS {
        match api.delete_collection(params, &ListParams::default()).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code >= 500 && attempt < ATTEMPTS => {
                eprintln!(
                    "  (cleanup: deletecollection attempt {attempt} timed out on the server: {}; again)",
                    status.message
                );
            }
            Err(err) => return Err(err.into()),
        }
    }
    Ok(())
}

/// `BENCH_KUBE_UP`, when set (scripts/bench.sh sets it to ../shared/kube/up.sh when it started
/// that control plane itself): every run on the real server starts on a control plane of its
/// own, started anew into the folder of `BENCH_KUBECONFIG`. One control plane for every run
/// slowed down with each run on it (pods exist 26.7, 37.8 and 48.2 s in three identical
/// operator runs back to back, history etcd keeps until it compacts), so a path's time
/// depended on how many runs came before it, and the operator's path came last in each round.
pub fn fresh_control_plane() -> Option<PathBuf> {
    std::env::var_os("BENCH_KUBE_UP")
        .filter(|up| !up.is_empty())
        .map(PathBuf::from)
}

/// Stops the control plane whose kubeconfig is `kubeconfig` and starts a fresh one (empty etcd)
/// in its folder with `up` (../shared/kube/up.sh), which writes the same kubeconfig path anew.
fn restart_control_plane(up: &std::path::Path, kubeconfig: &std::path::Path) -> anyhow::Result<()> {
    let dir = kubeconfig
        .parent()
        .ok_or_else(|| anyhow::anyhow!("{} has no folder", kubeconfig.display()))?;
    let out = Command::new("bash")
        .arg(up)
        .arg(dir)
        .stderr(Stdio::inherit())
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "{} {} failed ({})",
        up.display(),
        dir.display(),
        out.status
    );
    let printed = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    anyhow::ensure!(
        printed.canonicalize()? == kubeconfig.canonicalize()?,
        "{} wrote its kubeconfig to {}, not to BENCH_KUBECONFIG ({})",
        up.display(),
        printed.display(),
        kubeconfig.display()
    );
    Ok(())
}

/// A client for the current context of `kubeconfig`.
pub async fn client_for(kubeconfig: &std::path::Path) -> anyhow::Result<Client> {
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(kubeconfig)?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    Ok(Client::try_from(config)?)
}

/// Creates the DIJob CRD unless it exists, and waits until it is served.
pub async fn install_crd(client: &Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    match crds
        .create(&PostParams::default(), &diorch_core::api::crd::dijob_crd())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(err) => return Err(err.into()),
    }
    let jobs: Api<diorch_core::api::DIJob> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(60);
    while jobs
        .list_metadata(&ListParams::default().limit(1))
        .await
        .is_err()
    {
        anyhow::ensure!(Instant::now() < deadline, "the DIJob CRD is not served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// `diorch-sandbox serve --attach` on a real server, stopped (SIGTERM) on drop; the nodes stay
/// registered for the next run.
pub struct Attached(Child);

impl Attached {
    pub fn start(kubeconfig: &std::path::Path, nodes: &Nodes) -> anyhow::Result<Attached> {
        let mut child = Command::new(sandbox_binary()?)
            .args(["serve", "--attach", "--kubeconfig"])
            .arg(kubeconfig)
            .args(&nodes.0)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()?;
        let attached = ready_line(&mut child, "sandbox attached").is_ok();
        anyhow::ensure!(attached, "diorch-sandbox serve --attach did not attach");
        Ok(Attached(child))
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        // SIGTERM: it stops its loops; a kill would do as well, the nodes stay either way.
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

/// User plus system CPU seconds of a process so far (Linux `/proc`; 0 elsewhere).
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of proc(5), in clock ticks of 1/100 s.
    (ticks(11) + ticks(12)) / 100.0
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_or(0, |a| a.port())
}

/// A plain HTTP/1.0 GET, so the benches need no HTTP client crate.
pub async fn http_get(url: &str) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.trim_start_matches("http://");
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut stream = tokio::net::TcpStream::connect(host).await?;
    stream
        .write_all(format!("GET /{path} HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
        .await?;
    let mut body = String::new();
    stream.read_to_string(&mut body).await?;
    Ok(body
        .split_once("\r\n\r\n")
        .map_or(body.clone(), |(_, b)| b.to_string()))
}

/// The operator's API requests so far, by (resource, verb), from its
/// `diorch_kube_api_requests_total` (all status codes together), and its DIJob reconciles as
/// (`dijobs`, `reconcile <result>`) from `diorch_reconciles_total`: the passes the requests cost.
pub async fn api_requests(
    metrics_addr: &str,
) -> anyhow::Result<std::collections::BTreeMap<(String, String), f64>> {
    let text = http_get(&format!("http://{metrics_addr}/metrics")).await?;
    let mut counts = std::collections::BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("diorch_reconciles_total{result=\"") {
            if let Some((result, value)) = rest.split_once("\"} ") {
                let value: f64 = value.trim().parse().unwrap_or(0.0);
                *counts
                    .entry(("dijobs".to_string(), format!("reconcile {result}")))
                    .or_insert(0.0) += value;
            }
            continue;
        }
        // Watch events that brought no reconcile, as `reconcile skipped <reason>` (not a
        // request, and not a reconcile: readers split them off).
        if let Some(rest) = line.strip_prefix("diorch_reconcile_triggers_skipped_total{reason=\"") {
            if let Some((reason, value)) = rest.split_once("\"} ") {
                let value: f64 = value.trim().parse().unwrap_or(0.0);
                *counts
                    .entry(("dijobs".to_string(), format!("reconcile skipped {reason}")))
                    .or_insert(0.0) += value;
            }
            continue;
        }
        let Some(rest) = line.strip_prefix("diorch_kube_api_requests_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        let value: f64 = value.trim().parse().unwrap_or(0.0);
        // Refused requests (a 409 conflict, say) on a row of their own: `patch (409)`.
        let (verb, code) = (label("verb"), label("code"));
        let verb = match code.parse::<u16>() {
            Ok(code) if code >= 300 => format!("{verb} ({code})"),
            _ => verb,
        };
        *counts.entry((label("resource"), verb)).or_insert(0.0) += value;
    }
    Ok(counts)
}

/// Appends a line to the file `BENCH_CSV` names, when set (scripts/bench.sh collects them
/// into docs/performance.md).
pub fn csv_row(line: &str) {
    use std::io::Write as _;
    let Some(path) = std::env::var_os("BENCH_CSV") else {
        return;
    };
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(file, "{line}");
    }
}
