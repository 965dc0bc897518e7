//! The `diorch` command: the operator, its CRD, its webhooks' certificate, the plugin tools and
//! the replica API client. The sandbox and the demo are `diorch-sandbox` (crates/sandbox).

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use tracing_subscriber::EnvFilter;

use diorch::operator;

/// mimalloc instead of glibc malloc: less resident memory for the same caches and less CPU per
/// watch event (measured in docs/performance.md).
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "diorch",
    version,
    about = "Kubernetes operator for DI-engine DIJobs",
    // As Go's flag package (DI-orchestrator's flags): a repeated flag's last value wins.
    args_override_self = true
)]
struct Cli {
    /// Log lines as `text` (human-readable) or `json` (one object per line, for log pipelines).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "DIORCH_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

// Parsed once per process: the size of the `run` variant costs nothing worth a Box.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Print the DIJob CustomResourceDefinition (YAML), e.g. `diorch crd | kubectl apply -f -`.
    Crd,
    /// Wasm plugin tools: check a component, print its ConfigMap.
    Plugin {
        #[command(subcommand)]
        command: diorch::cli::plugin::PluginCommand,
    },
    /// Run a workload trace against a cluster in virtual time with one or more scheduling
    /// policies and compare them (see docs/simulator.md).
    Simulate(diorch::cli::simulate::SimulateArgs),
    /// Run the operator against a cluster (the current kubeconfig context by default).
    Run {
        #[command(flatten)]
        cluster: diorch::cluster::ClusterArgs,
        #[command(flatten)]
        args: operator::RunArgs,
    },
    /// Create (or keep, while valid) the admission webhooks' CA and serving certificate, store
    /// them in a Secret (or files), and patch the CA into the webhook configurations' caBundle.
    WebhookCert {
        #[command(flatten)]
        cluster: diorch::cluster::ClusterArgs,
        #[command(flatten)]
        args: diorch::cli::webhook_cert::CertArgs,
    },
    /// Call the replica API (di-server compatible) of a running operator.
    Replicas {
        /// URL of the replica API.
        #[arg(long, env = "DIORCH_SERVER", default_value = "http://127.0.0.1:8081")]
        server: String,
        /// Namespace of a job given by bare name (default: the kubeconfig context's namespace,
        /// in a pod its own namespace, else `default`, as kubectl picks it).
        #[arg(short, long)]
        namespace: Option<String>,
        #[command(subcommand)]
        action: ReplicasAction,
    },
}

#[derive(Subcommand)]
enum ReplicasAction {
    /// List the job's replicas by rank (`--detail` adds pod, task, phase and node).
    Get {
        /// `namespace.name`, `namespace/name`, or a name in `--namespace`.
        job: String,
        #[arg(long)]
        detail: bool,
    },
    /// Scale a preemptible job out by N replicas.
    Add {
        job: String,
        replicas: u32,
        /// The elastic task, when the job has several.
        #[arg(long)]
        task: Option<String>,
    },
    /// Scale a preemptible job in by N replicas (highest ranks first), or remove named pods.
    Remove {
        job: String,
        replicas: Option<u32>,
        /// Pods to remove, comma-separated.
        #[arg(long, value_delimiter = ',')]
        pods: Vec<String>,
        #[arg(long)]
        task: Option<String>,
    },
    /// Report profilings (a JSON object), merged into the job's status.profilings.
    Profile { job: String, data: String },
}

/// Prints a line to stdout, ignoring a closed stdout (a pipe whose reader went away must not
/// panic the process, as `println!` would).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

fn init_tracing(format: LogFormat, quiet: bool) {
    // kube's client logs every failed request at ERROR; the operator reports those itself.
    // A simulation logs each of its thousands of decisions at info: only warnings by default.
    let default = if quiet {
        "warn"
    } else {
        "info,kube_client::client::builder=off"
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        // Spans (the reconcile's job key) become fields of each line.
        LogFormat::Json => logs.json().with_current_span(true).init(),
    }
}

/// Resolves on Ctrl-C (SIGINT) or SIGTERM, what Kubernetes sends a pod it stops.
async fn shutdown_signal() {
    let interrupt = async {
        // If the handler cannot be installed there is nothing to wait for: run until killed.
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
    tracing::info!("shutdown signal received: finishing in-flight work");
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Crd => {
            print!("{}", diorch_core::api::crd::dijob_crd_yaml()?);
            Ok(())
        }
        Command::Plugin { command } => diorch::cli::plugin::run(command).await,
        Command::Simulate(args) => diorch::cli::simulate::run(args).await,
        Command::Run { cluster, args } => {
            let conn = diorch::cluster::connect(&cluster.target()).await?;
            operator::run(conn, args, shutdown_signal()).await?;
            Ok(())
        }
        Command::WebhookCert { cluster, args } => {
            diorch::cli::webhook_cert::run(cluster, args).await
        }
        Command::Replicas {
            server,
            namespace,
            action,
        } => {
            let namespace = match namespace {
                Some(namespace) => namespace,
                // Only a default to fill in: a kubeconfig that cannot be read leaves `default`.
                None => kube::Config::infer()
                    .await
                    .map_or_else(|_| "default".to_string(), |c| c.default_namespace),
            };
            replicas(&server, &namespace, action).await?;
            Ok(())
        }
    }
}

/// `diorch replicas ...`: one call, its answer printed for people.
async fn replicas(server: &str, namespace: &str, action: ReplicasAction) -> anyhow::Result<()> {
    use axum::http::Method;
    use diorch::server::client::{api_job_id, call};
    use serde_json::{Value, json};

    let path =
        |job: &str, what: &str| format!("/v2alpha1/job/{}/{what}", api_job_id(job, namespace));
    match action {
        ReplicasAction::Get { job, detail } => {
            let query = if detail { "?detail=true" } else { "" };
            let data = call(
                server,
                Method::GET,
                &format!("{}{query}", path(&job, "replicas")),
                None,
            )
            .await?;
            match data {
                Value::Array(items) if !items.is_empty() => {
                    for (rank, item) in items.iter().enumerate() {
                        match item {
                            Value::String(address) => {
                                say!("{rank}\t{}", if address.is_empty() { "-" } else { address })
                            }
                            other => say!(
                                "{}\t{}\t{}\t{}\t{}\t{}",
                                other["rank"],
                                other["address"].as_str().unwrap_or("-"),
                                other["pod"].as_str().unwrap_or("-"),
                                other["task"].as_str().unwrap_or("-"),
                                other["phase"].as_str().unwrap_or("-"),
                                other["node"].as_str().unwrap_or("-")
                            ),
                        }
                    }
                }
                _ => say!("no replicas with an address yet"),
            }
        }
        ReplicasAction::Add {
            job,
            replicas,
            task,
        } => {
            let body = json!({"replicas": replicas, "task": task});
            call(server, Method::POST, &path(&job, "replicas"), Some(&body)).await?;
            say!("requested {replicas} more replicas for {job}");
        }
        ReplicasAction::Remove {
            job,
            replicas,
            pods,
            task,
        } => {
            let body = match (replicas, pods.is_empty()) {
                (Some(n), true) => json!({"replicas": n, "task": task}),
                (None, false) => json!({"pods": pods}),
                _ => anyhow::bail!("give either a replica count or --pods, not both or neither"),
            };
            call(server, Method::DELETE, &path(&job, "replicas"), Some(&body)).await?;
            say!("requested the removal for {job}");
        }
        ReplicasAction::Profile { job, data } => {
            let data: Value = serde_json::from_str(&data)
                .map_err(|e| anyhow::anyhow!("profilings must be JSON: {e}"))?;
            call(
                server,
                Method::POST,
                &path(&job, "profilings"),
                Some(&json!({"data": data})),
            )
            .await?;
            say!("reported profilings for {job}");
        }
    }
    Ok(())
}

/// The name kubectl runs this binary by as a plugin (`kubectl dijob …`, through a link of
/// that name on PATH).
const KUBECTL_PLUGIN: &str = "kubectl-dijob";

/// The command line, with help and errors naming `kubectl dijob` when run as that plugin.
fn parse_cli() -> Cli {
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

fn main() -> ExitCode {
    let cli = parse_cli();
    init_tracing(cli.log_format, matches!(cli.command, Command::Simulate(_)));
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
