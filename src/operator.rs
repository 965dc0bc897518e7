//! The operator process (`diorch run`): connects to a cluster, checks that the DIJob CRD is
//! installed, and runs the controllers over reflector caches.
//!
//! Owns client construction and start-up checks. It must not contain reconcile logic (that is
//! the controller's) and must not know about the sandbox: it treats every API server alike.

use std::path::PathBuf;

use futures::StreamExt;
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Config};

use tracing::{info, warn};

use crate::api::DIJob;

/// Why the operator could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error("cannot read kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("cannot use the requested kubeconfig context: {0}")]
    Context(#[source] kube::config::KubeconfigError),
    #[error("no usable cluster configuration: {0}")]
    Infer(#[from] kube::config::InferConfigError),
    #[error("cannot build a Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    #[error("cannot reach the Kubernetes API server at {url}: {source}")]
    Unreachable {
        url: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "the DIJob CRD (dijobs.diengine.opendilab.org) is not installed on {url}: install it with `kubectl apply -f crds/` or `diorch crd | kubectl apply -f -`"
    )]
    CrdMissing { url: String },
    #[error("cannot list DIJobs on {url}: {source}")]
    ListDijobs {
        url: String,
        #[source]
        source: kube::Error,
    },
    #[error("the DIJob watch ended unexpectedly")]
    WatchEnded,
}

/// Where to find the cluster.
#[derive(Clone, Debug, Default)]
pub struct ClusterTarget {
    /// Explicit kubeconfig file; `None` infers (KUBECONFIG, ~/.kube/config, in-cluster).
    pub kubeconfig: Option<PathBuf>,
    /// Context to use within the kubeconfig.
    pub context: Option<String>,
}

/// A client and the URL of the API server it talks to (for messages).
#[derive(Clone)]
pub struct Connection {
    pub client: Client,
    pub url: String,
}

/// Builds a client for the target cluster.
pub async fn connect(target: &ClusterTarget) -> Result<Connection, OperatorError> {
    let options = KubeConfigOptions {
        context: target.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match &target.kubeconfig {
        Some(path) => {
            let kubeconfig =
                Kubeconfig::read_from(path).map_err(|source| OperatorError::Kubeconfig {
                    path: path.clone(),
                    source,
                })?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|source| OperatorError::Kubeconfig {
                    path: path.clone(),
                    source,
                })?
        }
        None if target.context.is_some() => Config::from_kubeconfig(&options)
            .await
            .map_err(OperatorError::Context)?,
        None => Config::infer().await?,
    };
    let url = config.cluster_url.to_string();
    let client = Client::try_from(config).map_err(OperatorError::Client)?;
    Ok(Connection { client, url })
}

/// Checks that the API server answers and serves DIJobs.
pub async fn preflight(conn: &Connection) -> Result<(), OperatorError> {
    let url = conn.url.clone();
    conn.client
        .apiserver_version()
        .await
        .map_err(|source| OperatorError::Unreachable {
            url: url.clone(),
            source,
        })?;
    let jobs: Api<DIJob> = Api::all(conn.client.clone());
    match jobs.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => {
            Err(OperatorError::CrdMissing { url })
        }
        Err(source) => Err(OperatorError::ListDijobs { url, source }),
    }
}

/// Runs the operator until the watch ends or `shutdown` resolves.
pub async fn run(
    conn: Connection,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), OperatorError> {
    preflight(&conn).await?;
    info!(server = %conn.url, "connected; watching DIJobs");
    let jobs: Api<DIJob> = Api::all(conn.client);
    let (reader, writer) = reflector::store::<DIJob>();
    let stream = reflector(writer, watcher(jobs, watcher::Config::default()))
        .default_backoff()
        .applied_objects();
    futures::pin_mut!(stream);
    let shutdown = shutdown;
    futures::pin_mut!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => {
                info!("shutting down");
                return Ok(());
            }
            next = stream.next() => match next {
                Some(Ok(job)) => {
                    let phase = job.status.as_ref().and_then(|s| s.phase).map(|p| p.as_str()).unwrap_or("");
                    info!(job = %format!("{}/{}", job.metadata.namespace.as_deref().unwrap_or(""), job.metadata.name.as_deref().unwrap_or("")), phase, cached = reader.len(), "DIJob observed");
                }
                Some(Err(error)) => warn!(%error, "DIJob watch error; retrying with backoff"),
                None => return Err(OperatorError::WatchEnded),
            }
        }
    }
}
