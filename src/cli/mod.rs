//! The `diorch` command line: the top-level command and its subcommands' arguments, the
//! dispatch to what each one runs, and what they print for people (results on stdout, the
//! one-line error on stderr).
//!
//! Owns: parsing and printing: `crd`, `plugin …`, `simulate`, `webhook-cert`, `replicas …`, and
//! the flags of `run`. Must not touch: decisions (placement, reconciling, what a certificate or
//! a plugin must be: they stay in the modules it calls, with the same checks the operator
//! makes). Nothing imports it but the binary (`src/main.rs`: logging, the runtime, the exit
//! code).

use std::future::Future;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// Prints a line to stdout, ignoring a closed stdout (a pipe whose reader went away must not
/// panic the process, as `println!` would).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

pub mod crd;
pub mod explain;
pub mod plugin;
pub mod replicas;
pub mod simulate;
pub mod webhook_cert;

#[derive(Parser)]
#[command(
    name = "diorch",
    version,
    about = "Kubernetes operator for DI-engine DIJobs",
    // As Go's flag package (DI-orchestrator's flags): a repeated flag's last value wins.
    args_override_self = true
)]
pub struct Cli {
    /// Log lines as `text` (human-readable) or `json` (one object per line, for log pipelines).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "DIORCH_LOG_FORMAT")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

// Parsed once per process: the size of the `run` variant costs nothing worth a Box.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub enum Command {
    /// Print the DIJob CustomResourceDefinition (YAML), e.g. `diorch crd | kubectl apply -f -`.
    Crd,
    /// Wasm plugin tools: check a component, print its ConfigMap.
    Plugin {
        #[command(subcommand)]
        command: plugin::PluginCommand,
    },
    /// Run a workload trace against a cluster in virtual time with one or more scheduling
    /// policies and compare them (see docs/simulator.md).
    Simulate(simulate::SimulateArgs),
    /// Run the operator against a cluster (the current kubeconfig context by default).
    Run {
        #[command(flatten)]
        cluster: crate::cluster::ClusterArgs,
        #[command(flatten)]
        args: crate::operator::RunArgs,
    },
    /// Create (or keep, while valid) the admission webhooks' CA and serving certificate, store
    /// them in a Secret (or files), and patch the CA into the webhook configurations' caBundle.
    WebhookCert {
        #[command(flatten)]
        cluster: crate::cluster::ClusterArgs,
        #[command(flatten)]
        args: webhook_cert::CertArgs,
    },
    /// Call the replica API (di-server compatible) of a running operator.
    Replicas(replicas::ReplicasArgs),
    /// Why a DIJob's replicas run where they do: its latest allocation decisions, newest
    /// first, with the policy, its component and reason (`kubectl dijob explain JOB`).
    Explain(explain::ExplainArgs),
}

/// The name kubectl runs this binary by as a plugin (`kubectl dijob …`, through a link of
/// that name on PATH).
const KUBECTL_PLUGIN: &str = "kubectl-dijob";

/// The command line, with help and errors naming `kubectl dijob` when run as that plugin.
pub fn parse() -> Cli {
    let as_plugin = std::env::args_os()
        .next()
        .and_then(|arg0| {
            std::path::Path::new(&arg0)
                .file_name()
                .map(|name| name == KUBECTL_PLUGIN)
        })
        .unwrap_or(false);
    let mut command = Cli::command();
    if as_plugin {
        command = command.bin_name("kubectl dijob");
    }
    let matches = command.get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|error| error.exit())
}

/// Runs `command`; `diorch run` stops when `shutdown` resolves.
pub async fn run(
    command: Command,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    match command {
        Command::Crd => crd::run(),
        Command::Plugin { command } => plugin::run(command).await,
        Command::Simulate(args) => simulate::run(args).await,
        Command::Run { cluster, args } => {
            let conn = crate::cluster::connect(&cluster.target()).await?;
            crate::operator::run(conn, args, shutdown).await?;
            Ok(())
        }
        Command::WebhookCert { cluster, args } => webhook_cert::run(cluster, args).await,
        Command::Replicas(args) => replicas::run(args).await,
        Command::Explain(args) => explain::run(args).await,
    }
}

/// An error as one line: the chain of causes, outermost first.
pub fn error_line(error: &anyhow::Error) -> String {
    let chain: Vec<String> = error.chain().map(|c| c.to_string()).collect();
    dedup_chain(&chain)
}

/// Joins an error chain, skipping causes already quoted by the message above them.
fn dedup_chain(chain: &[String]) -> String {
    let mut out = String::new();
    for part in chain {
        if out.contains(part.as_str()) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(part);
    }
    out
}
