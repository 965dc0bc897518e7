//! The `diorch` command: the operator, its CRD, and a no-cluster sandbox to try it in.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

use diorch::operator::{self, ClusterTarget};

#[derive(Parser)]
#[command(
    name = "diorch",
    version,
    about = "Kubernetes operator for DI-engine DIJobs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the DIJob CustomResourceDefinition (YAML), e.g. `diorch crd | kubectl apply -f -`.
    Crd,
    /// Run an in-memory Kubernetes API server with simulated nodes, scheduler and kubelet, and
    /// write a kubeconfig for it; runs until Ctrl-C.
    Sandbox(SandboxArgs),
    /// Start a sandbox, install the DIJob CRD, submit DI-orchestrator's atari-dqn-dist sample and
    /// show what to try next with kubectl; runs until Ctrl-C.
    Demo(SandboxArgs),
    /// Wasm plugin tools: check a component, print its ConfigMap.
    Plugin {
        #[command(subcommand)]
        command: diorch::plugin::cli::PluginCommand,
    },
    /// Run the operator against a cluster (the current kubeconfig context by default).
    Run {
        /// Kubeconfig file to use instead of KUBECONFIG / ~/.kube/config / in-cluster config.
        #[arg(long, env = "DIORCH_KUBECONFIG")]
        kubeconfig: Option<PathBuf>,
        /// Kubeconfig context to use.
        #[arg(long)]
        context: Option<String>,
    },
}

#[derive(clap::Args)]
struct SandboxArgs {
    /// Address to serve the API on (plain HTTP; port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: std::net::SocketAddr,
    /// Where to write the kubeconfig for the sandbox.
    #[arg(long, default_value = "diorch-sandbox.kubeconfig")]
    kubeconfig_out: PathBuf,
    /// Serve the API only: no simulated nodes, scheduler or kubelet.
    #[arg(long)]
    no_cluster: bool,
    #[command(flatten)]
    cluster: diorch::sandbox::kubelet::ClusterArgs,
}

impl SandboxArgs {
    fn options(self) -> diorch::sandbox::SandboxOptions {
        diorch::sandbox::SandboxOptions {
            listen: self.listen,
            kubeconfig_out: Some(self.kubeconfig_out),
            cluster: (!self.no_cluster).then_some(self.cluster),
        }
    }
}

fn init_tracing() {
    // kube's client logs every failed request at ERROR; the operator reports those itself.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,kube_client::client::builder=off"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

async fn shutdown_signal() {
    // If the handler cannot be installed there is nothing to wait for: run until killed.
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Runs a sandbox (with the demo on top, if asked) until Ctrl-C. The first stdout line is the
/// `sandbox ready: <url> kubeconfig <path>` line that scripts and tests wait for.
async fn serve_sandbox(args: SandboxArgs, demo: bool) -> anyhow::Result<()> {
    let sandbox = diorch::sandbox::launch(args.options()).await?;
    let kubeconfig = sandbox.kubeconfig_display();
    println!("sandbox ready: {} kubeconfig {kubeconfig}", sandbox.url());
    if demo {
        diorch::demo::run(&sandbox).await?;
    } else {
        println!("try: kubectl --kubeconfig {kubeconfig} get nodes");
    }
    shutdown_signal().await;
    sandbox.stop().await;
    Ok(())
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Crd => {
            print!("{}", diorch::api::crd::dijob_crd_yaml()?);
            Ok(())
        }
        Command::Sandbox(args) => serve_sandbox(args, false).await,
        Command::Demo(args) => serve_sandbox(args, true).await,
        Command::Plugin { command } => diorch::plugin::cli::run(command).await,
        Command::Run {
            kubeconfig,
            context,
        } => {
            let conn = operator::connect(&ClusterTarget {
                kubeconfig,
                context,
            })
            .await?;
            operator::run(conn, shutdown_signal()).await?;
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // One line: the chain of causes, outermost first.
            let chain: Vec<String> = error.chain().map(|c| c.to_string()).collect();
            eprintln!("error: {}", dedup_chain(&chain));
            ExitCode::FAILURE
        }
    }
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
