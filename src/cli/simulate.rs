//! `diorch simulate`: the command line of the simulator (`crate::simulate`). A trace of jobs
//! runs against a cluster in virtual time once per `--policy` and `--preemption` mode, and the
//! runs' figures are printed side by side and written as CSV files and an HTML report.
//!
//! Owns: the command's arguments, loading the policies, the output directory. Must not touch:
//! the simulation itself (`simulate::engine`) or the operator's runtime (no API server, no
//! watches).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use crate::allocator::Preemption;
use crate::plugin::{HostConfig, Limits, NativePolicy, PluginHost};
use crate::simulate::engine::{self, Options, PolicyChoice};
use crate::simulate::input::{Cluster, Trace};
use crate::simulate::{generate, html, report};

#[derive(clap::Subcommand, Debug)]
pub enum SimulateCommand {
    /// Write a synthetic trace (YAML) from a seed; docs/simulator.md gives its distributions.
    Generate(generate::GenerateArgs),
    /// Feed the decisions recorded by `diorch run --record-decisions DIR` to a policy and say,
    /// per decision, whether it agrees with the recorded answer, then the totals.
    Replay(ReplayArgs),
}

#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// The recording directory.
    pub dir: PathBuf,
    /// The policy: `builtin:binpack`, `builtin:spread`, `builtin:goodput`, a component
    /// (`.wasm`), or one in a registry.
    #[arg(long)]
    pub policy: String,
    #[command(flatten)]
    pub registry: crate::cli::plugin::publish::RegistryArgs,
    /// A component's per-call deadline in milliseconds, as its ConfigMap's.
    #[arg(long, default_value_t = 50)]
    pub deadline_ms: u64,
    /// A component's memory cap in MiB, as its ConfigMap's.
    #[arg(long, default_value_t = 64)]
    pub memory_mib: usize,
}

#[derive(clap::Args, Debug)]
#[command(subcommand_negates_reqs = true, args_conflicts_with_subcommands = true)]
pub struct SimulateArgs {
    #[command(subcommand)]
    pub command: Option<SimulateCommand>,
    /// The cluster: a YAML file of nodes, or a `diorch plugin snapshot` file.
    #[arg(long, required = true)]
    pub cluster: Option<PathBuf>,
    /// The workload: a YAML file of jobs (see docs/simulator.md).
    #[arg(long, required = true)]
    pub trace: Option<PathBuf>,
    /// A policy to run: `builtin:binpack`, `builtin:spread`, `builtin:goodput`, a policy
    /// component (`.wasm`), or one in a registry (`registry.example/policies/fair:v1`,
    /// `oci://…`). Repeat to compare.
    #[arg(long = "policy", required = true)]
    pub policies: Vec<String>,
    /// Where the CSV files go (created if missing).
    #[arg(long, required = true)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub registry: crate::cli::plugin::publish::RegistryArgs,
    /// Seconds between re-plans (`optimize`), as the operator's --optimize-period; 0 = never.
    #[arg(long, default_value_t = 60)]
    pub optimize_period: u64,
    /// Seconds a job waits between two moves, as the operator's --min-reschedule-interval.
    #[arg(long, default_value_t = 300)]
    pub min_reschedule_interval: u64,
    /// Seconds from a pod's creation to its start (image pull, container start).
    #[arg(long, default_value_t = 30)]
    pub pod_start: u64,
    /// The built-in policy that serves when a component fails, as the operator's
    /// --builtin-policy.
    #[arg(long, value_enum, default_value_t = crate::allocator::BuiltinPolicy::Binpack)]
    pub fallback: crate::allocator::BuiltinPolicy,
    /// Also re-plan a second after each job ends, as the operator does. Closer to the
    /// operator, and much slower on large clusters (a pass every few seconds of virtual time).
    #[arg(long)]
    pub replan_after_end: bool,
    /// Seconds between timeline samples.
    #[arg(long, default_value_t = 60)]
    pub sample_every: u64,
    /// A component's per-call deadline in milliseconds, as its ConfigMap's.
    #[arg(long, default_value_t = 50)]
    pub deadline_ms: u64,
    /// A component's memory cap in MiB, as its ConfigMap's.
    #[arg(long, default_value_t = 64)]
    pub memory_mib: usize,
    /// Whether and how a job that does not fit takes room from running jobs of lower
    /// priority, as the operator's --preemption. Repeat to compare: every policy runs once per
    /// mode, and with more than one mode each run is labelled `<policy>/<mode>`.
    #[arg(long = "preemption", value_enum, default_values_t = [Preemption::Shrink])]
    pub preemptions: Vec<Preemption>,
    /// Seconds a job's pods must have run before it may be evicted, as the operator's
    /// --preemption-min-run-time.
    #[arg(long, default_value_t = 600)]
    pub preemption_min_run_time: u64,
    /// Seconds a shrunk or evicted job is left alone, as the operator's --preemption-cooldown.
    #[arg(long, default_value_t = 300)]
    pub preemption_cooldown: u64,
}

/// Largest value of the seconds options (a year): keeps every virtual time in range.
const MAX_OPTION_SECONDS: u64 = 365 * 24 * 3600;

impl SimulateArgs {
    fn options(&self) -> anyhow::Result<Options> {
        for (name, v) in [
            ("--optimize-period", self.optimize_period),
            ("--min-reschedule-interval", self.min_reschedule_interval),
            ("--pod-start", self.pod_start),
            ("--sample-every", self.sample_every),
            ("--preemption-min-run-time", self.preemption_min_run_time),
            ("--preemption-cooldown", self.preemption_cooldown),
        ] {
            anyhow::ensure!(
                v <= MAX_OPTION_SECONDS,
                "{name} {v}: at most {MAX_OPTION_SECONDS} seconds"
            );
        }
        let mut seen = std::collections::BTreeSet::new();
        for mode in &self.preemptions {
            anyhow::ensure!(
                seen.insert(mode.as_str()),
                "--preemption {} is given twice",
                mode.as_str()
            );
        }
        anyhow::ensure!(
            self.sample_every > 0,
            "--sample-every must be at least 1 second"
        );
        // A component gets the bounds its ConfigMap could give it, no more.
        let max_ms = crate::plugin::spec::MAX_DEADLINE.as_millis();
        anyhow::ensure!(
            (1..=max_ms).contains(&u128::from(self.deadline_ms)),
            "--deadline-ms {}: not in 1..={max_ms}, the limits of a plugin ConfigMap's deadlineMs",
            self.deadline_ms
        );
        let max_mib = crate::plugin::spec::MAX_MEMORY_MIB;
        anyhow::ensure!(
            (1..=max_mib).contains(&self.memory_mib),
            "--memory-mib {}: not in 1..={max_mib}, the limits of a plugin ConfigMap's memoryMiB",
            self.memory_mib
        );
        Ok(Options {
            optimize_period: Duration::from_secs(self.optimize_period),
            min_reschedule_interval: Duration::from_secs(self.min_reschedule_interval),
            pod_start: Duration::from_secs(self.pod_start),
            fallback: NativePolicy::from(self.fallback),
            sample_every: Duration::from_secs(self.sample_every),
            replan_after_end: self.replan_after_end,
            record_passes: false,
            preemption: Preemption::default(),
            preemption_min_run_time: Duration::from_secs(self.preemption_min_run_time),
            preemption_cooldown: Duration::from_secs(self.preemption_cooldown),
        })
    }

    /// The runs: every policy under every `--preemption` mode, policy by policy; with more
    /// than one mode, each labelled `<policy>/<mode>`.
    fn runs(&self, choices: &[PolicyChoice], options: &Options) -> Vec<(PolicyChoice, Options)> {
        let several = self.preemptions.len() > 1;
        choices
            .iter()
            .flat_map(|choice| {
                self.preemptions.iter().map(move |mode| {
                    let mut choice = choice.clone();
                    if several {
                        choice.label = format!("{}/{}", choice.label, mode.as_str());
                    }
                    let options = Options {
                        preemption: *mode,
                        ..options.clone()
                    };
                    (choice, options)
                })
            })
            .collect()
    }
}

/// Loads each `--policy`: built-ins by name, components through the operator's plugin host
/// with the same checks and bounds.
async fn policies(args: &SimulateArgs) -> anyhow::Result<Vec<PolicyChoice>> {
    load_policies(
        &args.policies,
        &args.registry,
        args.deadline_ms,
        args.memory_mib,
    )
    .await
}

async fn load_policies(
    specs: &[String],
    registry: &crate::cli::plugin::publish::RegistryArgs,
    deadline_ms: u64,
    memory_mib: usize,
) -> anyhow::Result<Vec<PolicyChoice>> {
    let mut host: Option<PluginHost> = None;
    let mut out = Vec::new();
    for spec in specs {
        if let Some(name) = spec.strip_prefix("builtin:") {
            let choice = PolicyChoice::builtin(name)
                .with_context(|| format!("--policy {spec}: the built-in policies are builtin:binpack, builtin:spread and builtin:goodput"))?;
            out.push(choice);
            continue;
        }
        let path = Path::new(spec);
        let bytes = match crate::cli::plugin::publish::ComponentArg::parse(spec)? {
            crate::cli::plugin::publish::ComponentArg::File(_) => read_component(path)?,
            crate::cli::plugin::publish::ComponentArg::Image(_) => {
                crate::cli::plugin::publish::read_component(spec, registry)
                    .await
                    .with_context(|| format!("--policy {spec}"))?
                    .0
            }
        };
        let host = match &host {
            Some(h) => h.clone(),
            None => {
                let h = PluginHost::new(HostConfig::default())?;
                host = Some(h.clone());
                h
            }
        };
        let limits = Limits {
            deadline: Duration::from_millis(deadline_ms),
            memory_bytes: memory_mib.saturating_mul(1 << 20),
        };
        // A reference's last path component, without tag or digest, names it as a file's stem.
        let stem = spec.rsplit('/').next().unwrap_or(spec);
        let stem = stem.split(['@', ':']).next().unwrap_or(stem);
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .filter(|_| path.exists())
            .unwrap_or(stem)
            .to_string();
        let policy = host
            .load_policy(&name, bytes.into(), Some(limits))
            .await
            .with_context(|| format!("--policy {spec}"))?;
        out.push(PolicyChoice {
            label: path
                .file_name()
                .and_then(|s| s.to_str())
                .unwrap_or(spec)
                .to_string(),
            policy: Arc::new(policy),
        });
    }
    let mut seen = std::collections::BTreeSet::new();
    for p in &out {
        anyhow::ensure!(
            seen.insert(p.label.clone()),
            "--policy {} is given twice",
            p.label
        );
    }
    Ok(out)
}

fn read_component(path: &Path) -> anyhow::Result<Vec<u8>> {
    let size = std::fs::metadata(path)
        .with_context(|| format!("--policy {}", path.display()))?
        .len();
    anyhow::ensure!(
        size <= crate::plugin::MAX_COMPONENT_BYTES as u64,
        "--policy {}: {size} bytes, over the {}-byte component limit",
        path.display(),
        crate::plugin::MAX_COMPONENT_BYTES
    );
    std::fs::read(path).with_context(|| format!("--policy {}", path.display()))
}

/// The command: runs every policy, prints the table, writes the files.
pub async fn run(args: SimulateArgs) -> anyhow::Result<()> {
    if let Some(SimulateCommand::Replay(r)) = &args.command {
        // A component gets the bounds its ConfigMap could give it, no more.
        let max_ms = crate::plugin::spec::MAX_DEADLINE.as_millis();
        anyhow::ensure!(
            (1..=max_ms).contains(&u128::from(r.deadline_ms)),
            "--deadline-ms {}: not in 1..={max_ms}",
            r.deadline_ms
        );
        anyhow::ensure!(
            (1..=crate::plugin::spec::MAX_MEMORY_MIB).contains(&r.memory_mib),
            "--memory-mib {}: not in 1..={}",
            r.memory_mib,
            crate::plugin::spec::MAX_MEMORY_MIB
        );
        let choice = load_policies(
            std::slice::from_ref(&r.policy),
            &r.registry,
            r.deadline_ms,
            r.memory_mib,
        )
        .await?
        .pop()
        .context("no policy loaded")?;
        let records = crate::simulate::replay::read(&r.dir)?;
        let replayed = crate::simulate::replay::replay(records, choice.policy).await;
        print!(
            "{}",
            crate::simulate::replay::report(&choice.label, &replayed)
        );
        return Ok(());
    }
    if let Some(SimulateCommand::Generate(g)) = &args.command {
        let text = generate::generate(g).map_err(anyhow::Error::msg)?;
        return match &g.output {
            Some(path) => {
                std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
            }
            None => {
                print!("{text}");
                Ok(())
            }
        };
    }
    let (Some(cluster), Some(trace), Some(out)) = (&args.cluster, &args.trace, &args.out) else {
        anyhow::bail!("--cluster, --trace and --out are required");
    };
    let options = args.options()?;
    let choices = policies(&args).await?;
    let planned = args.runs(&choices, &options);
    let cluster = Cluster::load(cluster)?;
    let trace = Trace::load(trace)?;
    std::fs::create_dir_all(out).with_context(|| format!("--out {}", out.display()))?;
    let mut runs = Vec::new();
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    for (choice, options) in &planned {
        let started = std::time::Instant::now();
        let mut shown = started;
        let mut progress = |p: engine::Progress| {
            // A line redrawn at most ten times a second, only on a terminal.
            if terminal && shown.elapsed() >= Duration::from_millis(100) {
                shown = std::time::Instant::now();
                eprint!(
                    "\r{}: {}/{} jobs ended, {:.1} h of virtual time  ",
                    choice.label,
                    p.ended,
                    p.jobs,
                    p.virtual_ms as f64 / 3_600_000.0
                );
            }
        };
        let run =
            engine::run_with_progress(&cluster, &trace, choice, options, &mut progress).await?;
        if terminal {
            eprint!("\r\x1b[2K");
        }
        eprintln!(
            "{}: {} jobs on {} nodes simulated in {:.1} s",
            choice.label,
            trace.jobs.len(),
            cluster.nodes.len(),
            started.elapsed().as_secs_f64()
        );
        runs.push(run);
    }
    let summaries: Vec<report::Summary> = runs.iter().map(report::Summary::of).collect();
    print!("{}", report::table(&summaries));
    write(out, "summary.csv", &report::summary_csv(&summaries))?;
    write(out, "jobs.csv", &report::jobs_csv(&runs))?;
    write(out, "timeline.csv", &report::timeline_csv(&runs))?;
    write(out, "calls.csv", &report::calls_csv(&summaries))?;
    let name = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("?")
            .to_string()
    };
    let title = format!(
        "diorch simulate: {} on {}",
        name(&args.trace.clone().unwrap_or_default()),
        name(&args.cluster.clone().unwrap_or_default())
    );
    write(out, "report.html", &html::page(&runs, &summaries, &title))?;
    eprintln!("files in {}", out.display());
    Ok(())
}

fn write(dir: &Path, name: &str, text: &str) -> anyhow::Result<()> {
    let path = dir.join(name);
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: SimulateArgs,
    }

    fn parse(extra: &[&str]) -> SimulateArgs {
        let base = [
            "simulate",
            "--cluster",
            "c",
            "--trace",
            "t",
            "--out",
            "o",
            "--policy",
            "x",
        ];
        Cli::try_parse_from(base.iter().chain(extra)).unwrap().args
    }

    fn choices() -> Vec<PolicyChoice> {
        ["binpack", "goodput"]
            .iter()
            .map(|p| PolicyChoice::builtin(p).unwrap())
            .collect()
    }

    /// One mode, the operator's default (shrink): one run per policy, labelled as before.
    #[test]
    fn preemption_defaults_to_the_operators_and_keeps_the_labels() {
        let args = parse(&[]);
        let options = args.options().unwrap();
        assert_eq!(options.preemption_min_run_time, Duration::from_secs(600));
        assert_eq!(options.preemption_cooldown, Duration::from_secs(300));
        let runs = args.runs(&choices(), &options);
        let labels: Vec<_> = runs
            .iter()
            .map(|(c, o)| (c.label.as_str(), o.preemption))
            .collect();
        assert_eq!(
            labels,
            [
                ("builtin:binpack", Preemption::Shrink),
                ("builtin:goodput", Preemption::Shrink)
            ]
        );
    }

    /// Several modes: every policy under every mode, labelled `<policy>/<mode>`, the seconds
    /// passed through.
    #[test]
    fn repeated_preemption_modes_run_every_policy_under_each() {
        let args = parse(&[
            "--preemption",
            "off",
            "--preemption",
            "evict",
            "--preemption",
            "shrink",
            "--preemption-min-run-time",
            "120",
            "--preemption-cooldown",
            "0",
        ]);
        let options = args.options().unwrap();
        let runs = args.runs(&choices(), &options);
        let labels: Vec<_> = runs.iter().map(|(c, _)| c.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "builtin:binpack/off",
                "builtin:binpack/evict",
                "builtin:binpack/shrink",
                "builtin:goodput/off",
                "builtin:goodput/evict",
                "builtin:goodput/shrink"
            ]
        );
        for (choice, o) in &runs {
            assert!(choice.label.ends_with(o.preemption.as_str()));
            assert_eq!(o.preemption_min_run_time, Duration::from_secs(120));
            assert_eq!(o.preemption_cooldown, Duration::ZERO);
        }
    }

    #[test]
    fn bad_preemption_options_are_refused() {
        let twice = parse(&["--preemption", "off", "--preemption", "off"]);
        let err = twice.options().unwrap_err().to_string();
        assert!(err.contains("--preemption off is given twice"), "{err}");
        for flag in ["--preemption-min-run-time", "--preemption-cooldown"] {
            let err = parse(&[flag, "99999999999"])
                .options()
                .unwrap_err()
                .to_string();
            assert!(err.contains(flag), "{err}");
        }
        let bad = [
            "simulate",
            "--cluster",
            "c",
            "--trace",
            "t",
            "--out",
            "o",
            "--policy",
            "x",
        ]
        .iter()
        .chain(&["--preemption", "sometimes"]);
        assert!(Cli::try_parse_from(bad).is_err());
    }
}
