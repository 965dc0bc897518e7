//! The `diorch-sandbox` command line: how to start a sandbox, shared by the binary and the
//! tests that start one in-process with the same flags.

use std::path::PathBuf;

use crate::{SandboxError, SandboxOptions, auth, sim_config};

/// Flags of `diorch-sandbox serve` and `diorch-sandbox demo`.
#[derive(clap::Args, Clone, Debug)]
pub struct ServeArgs {
    /// Address to serve the API on (plain HTTP; port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: std::net::SocketAddr,
    /// Where to write the kubeconfig for the sandbox.
    #[arg(long, default_value = "diorch-sandbox.kubeconfig")]
    pub kubeconfig_out: PathBuf,
    /// Serve the API only: no simulated nodes, scheduler or kubelet.
    #[arg(long, conflicts_with = "attach")]
    pub no_cluster: bool,
    /// Serve no API: register the simulated nodes on another API server (--kubeconfig) and
    /// play their kubelet there, beside its own kube-scheduler. Prints `sandbox attached: ...`
    /// once the nodes are Ready; stops on SIGINT/SIGTERM and leaves the nodes registered.
    #[arg(long, requires = "kubeconfig")]
    pub attach: bool,
    /// With --attach: the kubeconfig of the API server to attach to.
    #[arg(long, requires = "attach")]
    pub kubeconfig: Option<PathBuf>,
    /// With --attach: the kubeconfig context to use.
    #[arg(long, requires = "attach")]
    pub context: Option<String>,
    /// Tokens and permissions TokenReview and SubjectAccessReview answer from (YAML; format in
    /// crates/sandbox/src/auth.rs and the README). Without it every token is refused.
    #[arg(long)]
    pub auth_file: Option<PathBuf>,
    #[command(flatten)]
    pub cluster: sim_config::ClusterArgs,
}

/// `ServeArgs` parsed on their own (as `diorch-sandbox serve` would), for tests.
#[derive(clap::Parser, Debug)]
#[command(name = "diorch-sandbox serve")]
pub struct ServeCommand {
    #[command(flatten)]
    pub args: ServeArgs,
}

impl ServeArgs {
    /// The options to [`crate::launch`] a sandbox with.
    pub fn options(self) -> Result<SandboxOptions, SandboxError> {
        let auth = match &self.auth_file {
            Some(path) => auth::AuthConfig::load(path).map_err(SandboxError::AuthFile)?,
            None => Default::default(),
        };
        Ok(SandboxOptions {
            auth,
            listen: self.listen,
            kubeconfig_out: Some(self.kubeconfig_out),
            cluster: (!self.no_cluster).then_some(self.cluster),
        })
    }
}

/// A kube client for `kubeconfig` (its current context, or `context`), and the server's URL.
pub async fn client_from_kubeconfig(
    kubeconfig: &std::path::Path,
    context: Option<String>,
) -> Result<(kube::Client, String), SandboxError> {
    let bad = |reason: String| SandboxError::BadKubeconfig {
        path: kubeconfig.to_path_buf(),
        reason,
    };
    let file = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| bad(e.to_string()))?;
    let options = kube::config::KubeConfigOptions {
        context,
        ..Default::default()
    };
    let config = kube::Config::from_custom_kubeconfig(file, &options)
        .await
        .map_err(|e| bad(e.to_string()))?;
    let url = config
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_string();
    let client = kube::Client::try_from(config).map_err(SandboxError::Client)?;
    Ok((client, url))
}
