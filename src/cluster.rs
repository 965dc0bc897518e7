//! Reaching a cluster: the `--kubeconfig`/`--context` flags, the client (with the API-call
//! audit layer every request goes through) and the start-up check that the API server answers
//! and serves DIJobs.
//!
//! Owns the connection and its errors. Shared by `diorch run`, `diorch webhook-cert` and
//! `diorch plugin snapshot`; must not touch what runs on the connection.

use std::path::PathBuf;

use diorch_core::api::DIJob;
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

/// Why a cluster could not be reached or used.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
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
}

/// The flags that choose the cluster.
#[derive(Clone, Debug, clap::Args)]
pub struct ClusterArgs {
    /// Kubeconfig file to use instead of KUBECONFIG / ~/.kube/config / in-cluster config.
    #[arg(long, env = "DIORCH_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use.
    #[arg(long)]
    pub context: Option<String>,
}

impl ClusterArgs {
    pub fn target(self) -> ClusterTarget {
        ClusterTarget {
            kubeconfig: self.kubeconfig,
            context: self.context,
        }
    }
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
    /// The client's API calls (`diorch_kube_api_requests_total`); empty for a client built
    /// elsewhere.
    pub api_requests: crate::audit::ApiRequests,
}

/// Builds a client for the target cluster.
pub async fn connect(target: &ClusterTarget) -> Result<Connection, ClusterError> {
    let options = KubeConfigOptions {
        context: target.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match &target.kubeconfig {
        Some(path) => {
            let kubeconfig =
                Kubeconfig::read_from(path).map_err(|source| ClusterError::Kubeconfig {
                    path: path.clone(),
                    source,
                })?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|source| ClusterError::Kubeconfig {
                    path: path.clone(),
                    source,
                })?
        }
        None if target.context.is_some() => Config::from_kubeconfig(&options)
            .await
            .map_err(ClusterError::Context)?,
        None => Config::infer().await?,
    };
    let url = config.cluster_url.to_string();
    let api_requests = crate::audit::ApiRequests::default();
    let client = kube::client::ClientBuilder::try_from(config)
        .map_err(ClusterError::Client)?
        .with_layer(&api_requests.layer())
        .with_layer(&crate::writes::FieldManagerLayer)
        .build();
    Ok(Connection {
        client,
        url,
        api_requests,
    })
}

/// Checks that the API server answers and serves DIJobs.
pub async fn preflight(conn: &Connection) -> Result<(), ClusterError> {
    let url = conn.url.clone();
    conn.client
        .apiserver_version()
        .await
        .map_err(|source| ClusterError::Unreachable {
            url: url.clone(),
            source,
        })?;
    let jobs: Api<DIJob> = Api::all(conn.client.clone());
    match jobs.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => {
            Err(ClusterError::CrdMissing { url })
        }
        Err(source) => Err(ClusterError::ListDijobs { url, source }),
    }
}
