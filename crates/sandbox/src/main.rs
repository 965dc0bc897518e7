//! The `diorch-sandbox` command: a no-cluster Kubernetes API to try diorch in, its simulated
//! nodes attached to a real API server, and the demo.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use diorch_sandbox::cli::{ServeArgs, client_from_kubeconfig};
use diorch_shutdown::shutdown_signal;
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    name = "diorch-sandbox",
    version,
    about = "An in-memory Kubernetes API with simulated nodes, for trying and testing diorch",
    args_override_self = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run an in-memory Kubernetes API server with simulated nodes, scheduler and kubelet, and
    /// write a kubeconfig for it; runs until Ctrl-C. With --attach, play the nodes on another
    /// API server instead.
    Serve(ServeArgs),
    /// Start a sandbox, install the DIJob CRD and webhooks, run the operator (`diorch run`),
    /// submit DI-orchestrator's atari-dqn-dist sample and show what to try next with kubectl;
    /// runs until Ctrl-C.
    Demo {
        /// The operator binary (default: `diorch` beside this binary, else from PATH).
        #[arg(long)]
        operator: Option<PathBuf>,
        #[command(flatten)]
        args: ServeArgs,
    },
}

/// Prints a line to stdout, ignoring a closed stdout (a pipe whose reader went away must not
/// panic the process, as `println!` would).
fn say(line: String) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stdout(), "{line}");
}

/// Runs a sandbox (with the demo on top, if asked) until Ctrl-C. The first stdout line is the
/// `sandbox ready: <url> kubeconfig <path>` line that scripts and tests wait for.
async fn serve(args: ServeArgs, demo: Option<PathBuf>) -> anyhow::Result<()> {
    if args.attach {
        if demo.is_some() {
            anyhow::bail!("the demo runs its own sandbox: --attach is for diorch-sandbox serve");
        }
        return attach(args).await;
    }
    let sandbox = diorch_sandbox::launch(args.options()?).await?;
    let kubeconfig = sandbox.kubeconfig_display();
    say(format!(
        "sandbox ready: {} kubeconfig {kubeconfig}",
        sandbox.url()
    ));
    match demo {
        Some(operator) => {
            let mut running = diorch_sandbox::demo::run(&sandbox, &operator, Arc::new(say)).await?;
            tokio::select! {
                () = shutdown_signal() => {}
                exited = running.operator_exited() => {
                    let status = exited.map_or_else(|e| e.to_string(), |s| s.to_string());
                    anyhow::bail!("the operator stopped: {status}");
                }
            }
        }
        None => {
            say(format!("try: kubectl --kubeconfig {kubeconfig} get nodes"));
            shutdown_signal().await;
        }
    }
    sandbox.stop().await;
    Ok(())
}

/// `diorch-sandbox serve --attach`: the simulated nodes and kubelet on another API server, until
/// SIGINT/SIGTERM. Its first stdout line, `sandbox attached: <n> nodes on <url>`, says the nodes
/// are registered and Ready.
async fn attach(args: ServeArgs) -> anyhow::Result<()> {
    let Some(kubeconfig) = args.kubeconfig.as_deref() else {
        anyhow::bail!("--attach needs --kubeconfig");
    };
    let (client, url) = client_from_kubeconfig(kubeconfig, args.context.clone()).await?;
    let nodes = args.cluster.nodes;
    diorch_sandbox::kubelet::run_attached(
        client,
        args.cluster,
        |names| {
            tracing::info!(server = %url, nodes = ?names, "sandbox kubelets attached");
            say(format!("sandbox attached: {nodes} nodes on {url}"));
        },
        shutdown_signal(),
    )
    .await?;
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("info,kube_client::client::builder=off")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
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
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve(args, None).await,
            Command::Demo { operator, args } => {
                let operator = operator.unwrap_or_else(diorch_sandbox::demo::default_operator);
                serve(args, Some(operator)).await
            }
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let chain: Vec<String> = error.chain().map(|c| c.to_string()).collect();
            eprintln!("error: {}", chain.join(": "));
            ExitCode::FAILURE
        }
    }
}
