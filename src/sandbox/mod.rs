//! An in-process, in-memory subset of the Kubernetes API server, with simulated nodes,
//! scheduler and kubelet, for running diorch and `kubectl` with no cluster.
//!
//! It is a test bed, not the product: operator code never depends on anything here.

pub mod gc;
pub mod kubelet;
pub mod openapi;
pub mod patch;
pub mod registry;
pub mod schema;
pub mod selector;
pub mod server;
pub mod sim_loop;
pub mod sim_pod;
pub mod sim_sched;
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
    #[error("invalid sandbox URL {url}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("cannot build a client for the sandbox: {0}")]
    Client(#[source] kube::Error),
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
    let uri: http::Uri = server_url.parse().map_err(|e: http::uri::InvalidUri| {
        SandboxError::BadUrl {
            url: server_url.to_string(),
            reason: e.to_string(),
        }
    })?;
    let config = kube::Config::new(uri);
    kube::Client::try_from(config).map_err(SandboxError::Client)
}
