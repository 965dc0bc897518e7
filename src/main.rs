//! The `diorch` command: the operator, its CRD, its webhooks' certificate, the plugin tools and
//! the replica API client. The sandbox and the demo are `diorch-sandbox` (crates/sandbox).
//!
//! This file parses the command line, sets up logging and the async runtime, and hands the
//! command to `diorch::cli`, which owns every subcommand.

use std::process::ExitCode;

use tracing_subscriber::EnvFilter;

use diorch::cli::{self, Command, LogFormat};

/// mimalloc instead of glibc malloc: less resident memory for the same caches and less CPU per
/// watch event (measured in docs/performance.md).
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    diorch_shutdown::shutdown_signal().await;
    tracing::info!("shutdown signal received: finishing in-flight work");
}

/// The operator on one CPU (deploy/'s limit of 1: the standard library's available parallelism
/// reads the cgroup's quota; or `TOKIO_WORKER_THREADS=1`) runs on a current-thread runtime: a
/// multi-thread runtime with one worker still polls `block_on`'s future (the controller's
/// watches) on the main thread, so every watch event and every reconcile crossed between two
/// threads that share that one CPU. At N = 1 000 (benches/controller_scale.rs, 2 cores, one
/// worker's worth) that cost 28 % of the operator's CPU on the sandbox and 9 % on a real API
/// server. With more CPUs, and for every other command, a multi-thread runtime with one worker
/// per CPU.
fn runtime_for(command: &Command) -> tokio::runtime::Builder {
    let env = std::env::var("TOKIO_WORKER_THREADS").ok();
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (workers, ignored) = worker_threads(env.as_deref(), available);
    if let Some(value) = ignored {
        // tokio itself would panic on it.
        tracing::warn!(
            value,
            "TOKIO_WORKER_THREADS is not a positive number; ignored"
        );
    }
    if workers == 1 && matches!(command, Command::Run { .. }) {
        tracing::info!("one CPU: the operator runs on a current-thread runtime");
        return tokio::runtime::Builder::new_current_thread();
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    // Set, so that tokio does not read (and panic on) the variable itself.
    builder.worker_threads(workers);
    builder
}

/// The runtime's worker count: `TOKIO_WORKER_THREADS` when it is a positive number, else the
/// CPUs available; and the variable's value when it was not a number and so was ignored.
fn worker_threads(env: Option<&str>, available: usize) -> (usize, Option<&str>) {
    match env.map(|v| (v, v.trim().parse::<usize>())) {
        Some((_, Ok(n))) if n > 0 => (n, None),
        Some((value, _)) => (available.max(1), Some(value)),
        None => (available.max(1), None),
    }
}

fn main() -> ExitCode {
    let cli = cli::parse();
    init_tracing(cli.log_format, matches!(cli.command, Command::Simulate(_)));
    let runtime = match runtime_for(&cli.command).enable_all().build() {
        Ok(rt) => rt,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cli::run(cli.command, shutdown_signal())) {
        Ok(()) => ExitCode::SUCCESS,
        // One line: the chain of causes, outermost first.
        Err(error) => {
            eprintln!("error: {}", cli::error_line(&error));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::worker_threads;

    #[test]
    fn the_worker_count_is_the_variable_if_it_is_a_positive_number_else_the_cpus() {
        assert_eq!(worker_threads(None, 2), (2, None));
        assert_eq!(worker_threads(None, 0), (1, None));
        assert_eq!(worker_threads(Some("1"), 8), (1, None));
        assert_eq!(worker_threads(Some(" 3 "), 1), (3, None));
        assert_eq!(worker_threads(Some("0"), 2), (2, Some("0")));
        assert_eq!(worker_threads(Some("many"), 2), (2, Some("many")));
        assert_eq!(worker_threads(Some("-1"), 4), (4, Some("-1")));
    }
}
