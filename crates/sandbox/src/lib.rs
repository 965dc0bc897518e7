//! diorch-sandbox: an in-process, in-memory subset of the Kubernetes API server, with simulated
//! nodes, scheduler and kubelet, for running diorch and `kubectl` with no cluster, and the demo
//! that runs the operator on it.
//!
//! It is a test bed, not the product: the operator crate has it only as a dev-dependency, so the
//! operator's binary and image do not contain it, and operator code never depends on anything
//! here. Its own dependency on the operator side is `diorch-core` (resource quantities, the DIJob
//! CRD and sample for the demo); the demo runs the operator's binary, as a user would.
//!
//! Where this sits among the crates:
#![doc = include_str!("../../../docs/design/crates.md")]

pub mod admission;
pub mod api_core;
pub mod api_crd;
pub mod api_kinds;
pub mod api_proto;
pub mod api_status;
pub mod auth;
pub mod cel;
pub mod cli;
pub mod demo;
mod field_manager;
pub mod gc;
pub mod gofmt;
pub mod kubelet;
pub mod openapi;
#[cfg(test)]
mod parse_props;
pub mod patch;
pub mod registry;
pub mod schema;
pub mod selector;
pub mod server;
mod sim_config;
pub mod sim_loop;
pub mod sim_pod;
pub mod sim_sched;
pub mod ssa;
pub mod store;
pub mod table;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Why the sandbox could not start.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the simulated cluster: {0}")]
    Cluster(#[source] sim_config::SimError),
    #[error("invalid sandbox URL {url}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("cannot build a client for the sandbox: {0}")]
    Client(#[source] kube::Error),
    #[error("{0}")]
    AuthFile(String),
    #[error("cannot use kubeconfig {path}: {reason}")]
    BadKubeconfig { path: PathBuf, reason: String },
}

/// Renders a kubeconfig whose current context points at a sandbox server. No credentials: the
/// sandbox serves plain HTTP on loopback and authorises everything.
pub fn kubeconfig_yaml(server_url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: diorch-sandbox\n  cluster:\n    server: {server_url}\ncontexts:\n- name: diorch-sandbox\n  context:\n    cluster: diorch-sandbox\n    user: diorch-sandbox\n    namespace: default\nusers:\n- name: diorch-sandbox\n  user: {{}}\ncurrent-context: diorch-sandbox\npreferences: {{}}\n"
    )
}

/// Writes the kubeconfig for `server_url` to `path`, creating parent directories.
pub fn write_kubeconfig(path: &Path, server_url: &str) -> Result<(), SandboxError> {
    let err = |source| SandboxError::Kubeconfig {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(err)?;
    }
    std::fs::write(path, kubeconfig_yaml(server_url)).map_err(err)
}

/// A kube client for a sandbox at `server_url` (plain HTTP, no credentials).
pub fn client_for(server_url: &str) -> Result<kube::Client, SandboxError> {
    let uri: http::Uri =
        server_url
            .parse()
            .map_err(|e: http::uri::InvalidUri| SandboxError::BadUrl {
                url: server_url.to_string(),
                reason: e.to_string(),
            })?;
    let config = kube::Config::new(uri);
    kube::Client::try_from(config).map_err(SandboxError::Client)
}

/// How to start a sandbox.
#[derive(Clone, Debug)]
pub struct SandboxOptions {
    /// Address to serve on (port 0 picks a free one).
    pub listen: SocketAddr,
    /// Where to write a kubeconfig for it, if anywhere.
    pub kubeconfig_out: Option<PathBuf>,
    /// The simulated cluster; `None` serves the API alone.
    pub cluster: Option<sim_config::ClusterArgs>,
    /// Tokens and rules TokenReview and SubjectAccessReview answer from (`auth.rs`).
    pub auth: auth::AuthConfig,
}

/// A sandbox running in this process; `stop` shuts it down.
pub struct RunningSandbox {
    addr: SocketAddr,
    url: String,
    kubeconfig: Option<PathBuf>,
    shutdown: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl RunningSandbox {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn kubeconfig(&self) -> Option<&Path> {
        self.kubeconfig.as_deref()
    }

    /// The kubeconfig path for messages (`-` when none was written).
    pub fn kubeconfig_display(&self) -> String {
        self.kubeconfig
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "-".to_string())
    }

    /// A kube client for this sandbox.
    pub fn client(&self) -> Result<kube::Client, SandboxError> {
        client_for(&self.url)
    }

    /// Stops the simulated cluster and the server and waits for them.
    pub async fn stop(self) {
        let _ = self.shutdown.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// Resolves once `true` is sent, or the sender is dropped.
async fn shutdown_future(mut rx: tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

/// Starts the API server (and the simulated cluster) in this process. Returns once the server
/// accepts connections and the simulated nodes exist, so the kubeconfig is usable at once.
pub async fn launch(options: SandboxOptions) -> Result<RunningSandbox, SandboxError> {
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|source| SandboxError::Bind {
            addr: options.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| SandboxError::Bind {
        addr: options.listen,
        source,
    })?;
    let url = format!("http://{addr}");
    let (shutdown, rx) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();

    let server = server::ApiServer::new(server::ServerOptions {
        auth: std::sync::Arc::new(options.auth),
        ..server::ServerOptions::default()
    });
    let stop = shutdown_future(rx.clone());
    tasks.push(tokio::spawn(async move {
        if let Err(error) = server.serve(listener, stop).await {
            tracing::error!(%error, "sandbox API server stopped");
        }
    }));

    if let Some(cluster) = options.cluster {
        let client = client_for(&url)?;
        kubelet::ensure_nodes(&client, &cluster)
            .await
            .map_err(SandboxError::Cluster)?;
        let stop = shutdown_future(rx.clone());
        tasks.push(tokio::spawn(async move {
            if let Err(error) = kubelet::run_scheduler_and_kubelets(client, cluster, stop).await {
                tracing::error!(%error, "sandbox cluster simulation stopped");
            }
        }));
    }

    if let Some(path) = &options.kubeconfig_out {
        write_kubeconfig(path, &url)?;
    }
    Ok(RunningSandbox {
        addr,
        url,
        kubeconfig: options.kubeconfig_out,
        shutdown,
        tasks,
    })
}
