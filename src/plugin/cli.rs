//! `diorch plugin ...`: the platform team's local tools. `check` validates a component against
//! the worlds and runs it on the built-in samples; `configmap` prints the manifest that loads it.
//!
//! Owns: the subcommand arguments and their output. Must not touch: cluster state (both
//! commands are offline).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::spec::{self, FailurePolicy, PluginKind, PluginSpec};
use super::{HostConfig, Limits, PluginHost, TaskContext, sample};

#[derive(clap::Subcommand)]
pub enum PluginCommand {
    /// Validate a component against the plugin worlds, print its imports, exports and size,
    /// run it on sample inputs and show results and timings. Exits non-zero if it is unusable.
    Check {
        /// The component (`.wasm`, built for wasm32-wasip2).
        file: PathBuf,
        /// Config string handed to a mutator.
        #[arg(long, default_value = "")]
        config: String,
        /// Task type of the sample pod handed to a mutator.
        #[arg(long, default_value = "learner")]
        task_type: String,
        /// Per-call deadline in milliseconds.
        #[arg(long, default_value_t = 50)]
        deadline_ms: u64,
        /// Memory cap in MiB.
        #[arg(long, default_value_t = 64)]
        memory_mib: usize,
    },
    /// Print a plugin ConfigMap (YAML) for `kubectl apply -f -`.
    Configmap {
        file: PathBuf,
        /// Plugin name (a DNS label); the ConfigMap is `plugin-<name>`.
        #[arg(long)]
        name: String,
        #[arg(long, value_parser = ["policy", "mutator"])]
        kind: String,
        /// Namespace the operator watches for plugins.
        #[arg(long)]
        namespace: Option<String>,
        /// Mutators: comma-separated task types (default all).
        #[arg(long, default_value = "")]
        task_types: String,
        /// Mutators: lower runs first.
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        order: i32,
        /// Config string handed to the plugin.
        #[arg(long, conflicts_with = "config_file")]
        config: Option<String>,
        /// Read the config string from a file.
        #[arg(long)]
        config_file: Option<PathBuf>,
        #[arg(long)]
        deadline_ms: Option<u64>,
        #[arg(long)]
        memory_mib: Option<usize>,
        #[arg(long, value_parser = ["Fail", "Ignore"], default_value = "Fail")]
        failure_policy: String,
    },
}

pub async fn run(command: PluginCommand) -> anyhow::Result<()> {
    match command {
        PluginCommand::Check {
            file,
            config,
            task_type,
            deadline_ms,
            memory_mib,
        } => {
            let bytes =
                std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
            let limits = Limits {
                deadline: Duration::from_millis(deadline_ms),
                memory_bytes: memory_mib << 20,
            };
            // Wasm compiles and runs are blocking work: keep them off the async runtime.
            let report =
                tokio::task::spawn_blocking(move || check(&bytes, limits, &config, &task_type))
                    .await
                    .context("the check thread failed")??;
            emit(&report)
        }
        PluginCommand::Configmap {
            file,
            name,
            kind,
            namespace,
            task_types,
            order,
            config,
            config_file,
            deadline_ms,
            memory_mib,
            failure_policy,
        } => {
            let bytes =
                std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
            let config = match config_file {
                Some(path) => std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?,
                None => config.unwrap_or_default(),
            };
            let kind: PluginKind = kind.parse()?;
            let mut spec = PluginSpec::new(&name, kind);
            spec.task_types = task_types
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_string)
                .collect();
            spec.order = order;
            spec.config = config;
            spec.deadline = deadline_ms.map(Duration::from_millis);
            spec.memory_bytes = memory_mib.map(|m| m << 20);
            spec.failure_policy = if failure_policy == "Ignore" {
                FailurePolicy::Ignore
            } else {
                FailurePolicy::Fail
            };
            let cm = spec::to_configmap(&spec, bytes, namespace.as_deref());
            // Round-trip through the parser so a manifest we print is one the operator accepts.
            spec::from_configmap(&cm)?;
            emit(&serde_saphyr::to_string(&cm)?)
        }
    }
}

/// Writes to stdout; a closed pipe (`| head`) is not an error.
fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// Times `f` over a few runs and returns its last result and the best time.
fn timed<T>(runs: usize, mut f: impl FnMut() -> T) -> (T, Duration) {
    let mut best = Duration::MAX;
    let mut last = None;
    for _ in 0..runs.max(1) {
        let started = Instant::now();
        last = Some(f());
        best = best.min(started.elapsed());
    }
    // ok: runs.max(1) iterations ran, so `last` is set.
    #[allow(clippy::expect_used)]
    (last.expect("ran at least once"), best)
}

/// The `check` report; an error when the component implements neither world or fails a call.
pub fn check(
    bytes: &[u8],
    limits: Limits,
    config: &str,
    task_type: &str,
) -> anyhow::Result<String> {
    use std::fmt::Write as _;
    let host = PluginHost::new(HostConfig {
        limits,
        ..HostConfig::default()
    })?;
    let mut out = String::new();
    let info = host.inspect(bytes)?;
    writeln!(out, "size:     {} bytes", bytes.len())?;
    writeln!(out, "sha256:   {}", info.sha256)?;
    writeln!(
        out,
        "compile:  {:.1} ms",
        info.compile_time.as_secs_f64() * 1e3
    )?;
    writeln!(out, "exports:  {}", info.exports.join(", "))?;
    writeln!(out, "imports:  {}", info.imports.join(", "))?;
    writeln!(
        out,
        "limits:   deadline {:?}, memory {} MiB",
        limits.deadline,
        limits.memory_bytes >> 20
    )?;
    let policy = host.load_policy_blocking("checked", bytes, None);
    let mutator = host.load_mutator_blocking("checked", bytes, None);
    match (policy, mutator) {
        (Ok(policy), _) => {
            writeln!(out, "world:    diorch:plugins/scheduling-policy@0.1.0")?;
            for n in [100, 1000] {
                let (job, nodes) = sample::allocate_input(n, 2);
                let (result, t) = timed(20, || policy.allocate_blocking(&job, &nodes));
                let result = result?;
                writeln!(
                    out,
                    "allocate: job of {} replicas on {n} nodes -> {} in {} (fresh instance + call)",
                    job.total_replicas(),
                    result.join(","),
                    micros(t)
                )?;
            }
            let (jobs, nodes) = sample::optimize_input(50, 100);
            let (plan, t) = timed(5, || policy.optimize_blocking(&jobs, &nodes, &[]));
            let plan = plan?;
            writeln!(
                out,
                "optimize: 50 jobs on 100 nodes -> {} jobs placed in {}",
                plan.len(),
                micros(t)
            )?;
        }
        (Err(_), Ok(mutator)) => {
            writeln!(out, "world:    diorch:plugins/pod-mutator@0.1.0")?;
            let (mut ctx, pod): (TaskContext, _) = sample::pod(task_type);
            ctx.config = config.to_string();
            let (result, t) = timed(20, || mutator.mutate_blocking(&ctx, &pod));
            let mutated = result?;
            let before = serde_json::to_value(&pod)?;
            let after = serde_json::to_value(&mutated)?;
            let patch = json_patch::diff(&before, &after);
            writeln!(
                out,
                "mutate:   sample {task_type} pod in {} (fresh instance + call)",
                micros(t)
            )?;
            writeln!(out, "changes:  {}", serde_json::to_string(&patch)?)?;
        }
        (Err(p), Err(m)) => {
            return Err(anyhow::anyhow!(
                "not a diorch plugin: as a policy: {p}; as a mutator: {m}"
            ));
        }
    }
    Ok(out)
}
