//! `diorch plugin run`: a policy component replayed on a cluster snapshot, with where each
//! job's replicas would go, the host's check of the answer, the call time and, when asked, a
//! built-in policy's answer beside it.
//!
//! Owns: the replay and its report. Must not touch: the snapshot format (`plugin::snapshot`) or
//! the host's checks, which it calls as the operator does.

use std::fmt::Write as _;
use std::time::Instant;

use crate::plugin::snapshot::{self, Snapshot};
use crate::plugin::{
    Checked, HostConfig, Job, JobPlan, Limits, NativePolicy, Node, PluginError, PluginHost,
    PolicyAnswer, SchedulingPolicy as _, WasmPolicy, checks,
};

use super::timing::{micros, timed};

/// The policy entry point `plugin run` calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RunCall {
    /// Place each unplaced job of the snapshot (or `--job`), one after the other.
    Allocate,
    /// Re-plan all preemptible jobs of the snapshot at once.
    Optimize,
}

/// A built-in policy to compare with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Builtin {
    Binpack,
    Spread,
}

impl From<Builtin> for NativePolicy {
    fn from(b: Builtin) -> NativePolicy {
        match b {
            Builtin::Binpack => NativePolicy::BinPack,
            Builtin::Spread => NativePolicy::Spread,
        }
    }
}

/// What `plugin run` was asked to do, with the names to print for its inputs.
pub struct RunOptions {
    pub plugin_file: String,
    pub snapshot_file: String,
    pub call: RunCall,
    pub job: Option<String>,
    pub compare: Option<NativePolicy>,
    pub limits: Limits,
}

/// The `run` report and how its calls went.
pub struct RunReport {
    pub text: String,
    /// Plugin calls made (timing repeats not counted).
    pub calls: usize,
    /// Calls that trapped, timed out or returned an answer the host's checks refuse.
    pub failures: usize,
}

/// Timing repeats per call: the answer is deterministic, the best time is the least noisy.
const RUN_REPEATS: usize = 5;

/// Runs the policy in `bytes` on `snapshot` (blocking) and renders the report. An error means
/// the inputs are unusable (not a policy component); plugin failures are counted in the report.
pub fn run_snapshot(
    bytes: &[u8],
    snapshot: &Snapshot,
    options: &RunOptions,
) -> anyhow::Result<RunReport> {
    let host = PluginHost::new(HostConfig {
        limits: options.limits,
        ..HostConfig::default()
    })?;
    let name = std::path::Path::new(&options.plugin_file)
        .file_stem()
        .map_or_else(
            || "plugin".to_string(),
            |s| s.to_string_lossy().into_owned(),
        );
    let started = Instant::now();
    let policy = match host.load_policy_blocking(&name, bytes, None) {
        Ok(p) => p,
        Err(e) => {
            if host.load_mutator_blocking(&name, bytes, None).is_ok() {
                anyhow::bail!(
                    "{} is a pod mutator, not a scheduling policy (try `diorch plugin check`)",
                    options.plugin_file
                );
            }
            return Err(e.into());
        }
    };
    let compile = started.elapsed();
    let mut report = RunReport {
        text: String::new(),
        calls: 0,
        failures: 0,
    };
    let out = &mut report.text;
    let schedulable = snapshot.nodes.iter().filter(|n| n.schedulable()).count();
    writeln!(
        out,
        "snapshot  {}: {} nodes ({schedulable} schedulable), {} jobs ({} unplaced), taken {}",
        options.snapshot_file,
        snapshot.nodes.len(),
        snapshot.jobs.len(),
        snapshot.unplaced_jobs().count(),
        if snapshot.taken_at.is_empty() {
            "-"
        } else {
            &snapshot.taken_at
        }
    )?;
    writeln!(
        out,
        "plugin    {}: scheduling policy, sha256 {}, compiled in {:.1} ms",
        options.plugin_file,
        &policy.sha256()[..12],
        compile.as_secs_f64() * 1e3
    )?;
    match options.call {
        RunCall::Allocate => run_allocate(&policy, snapshot, options, &mut report)?,
        RunCall::Optimize => run_optimize(&policy, snapshot, options, &mut report)?,
    }
    Ok(report)
}

/// What the capacity check of an answer that passed it says.
const CAPACITY_OK: &str = "every node's replicas within its free capacity";

fn run_allocate(
    policy: &WasmPolicy,
    snapshot: &Snapshot,
    options: &RunOptions,
    report: &mut RunReport,
) -> anyhow::Result<()> {
    let out = &mut report.text;
    let (jobs, mut nodes): (Vec<&Job>, Vec<Node>) = match &options.job {
        Some(key) => (
            vec![snapshot.job(key)?],
            // A job placed already is allocated as if re-admitted: its own usage is free again.
            snapshot.nodes_without(&[key.as_str()]),
        ),
        None => (snapshot.unplaced_jobs().collect(), snapshot.nodes.clone()),
    };
    if jobs.is_empty() {
        writeln!(
            out,
            "call      allocate: every job of the snapshot is placed; name one with --job"
        )?;
        return Ok(());
    }
    match &options.job {
        Some(key) => writeln!(
            out,
            "call      allocate {key}, as if re-admitted: its current usage counts as free"
        )?,
        None => writeln!(
            out,
            "call      allocate, {} unplaced job(s) in snapshot order; each placement uses \
             capacity the next job then lacks",
            jobs.len()
        )?,
    }
    let (mut placed, mut refused) = (0, 0);
    // The operator's own check of every answer (`plugin::Checked`): an answer that
    // over-commits a node fails here as it would fall back there.
    let checked = Checked::new(policy, policy.name().to_string());
    for job in jobs {
        writeln!(out)?;
        writeln!(out, "job {}: {}", job.key, describe_job(job))?;
        let (raw, time) = timed(RUN_REPEATS, || policy.allocate_raw(job, &nodes));
        report.calls += 1;
        let answer = raw
            .and_then(|raw| {
                let names = checks::allocation(policy.name(), job, &nodes, &raw.nodes)?;
                Ok(PolicyAnswer::new(names, raw.reason.as_deref()))
            })
            .and_then(|a| checked.fits(job, &nodes, &a.nodes).map(|()| a));
        let before = nodes.clone();
        let ours = match answer {
            Ok(PolicyAnswer {
                nodes: names,
                reason,
            }) => {
                write_placement(out, "  ", job, &names)?;
                // As the job's status will show it: sanitised and bounded.
                if let Some(reason) = reason {
                    writeln!(out, "  reason    {reason}")?;
                }
                writeln!(out, "  check     ok: one ready node per replica")?;
                writeln!(out, "  capacity  ok: {CAPACITY_OK}")?;
                snapshot::take(&mut nodes, job, &names);
                placed += 1;
                Some(names)
            }
            Err(PluginError::Refused { error, .. }) => {
                writeln!(out, "  refused   {error}")?;
                refused += 1;
                None
            }
            Err(e) => {
                writeln!(out, "  FAILED    {} ({})", e, e.reason())?;
                report.failures += 1;
                None
            }
        };
        writeln!(
            out,
            "  time      {} (best of {RUN_REPEATS}; fresh instance + call)",
            micros(time)
        )?;
        if let Some(native) = options.compare {
            let theirs = native.allocate_now(job, &before).map(|a| a.nodes);
            write_comparison(out, native, job, ours.as_deref(), theirs)?;
        }
    }
    writeln!(out)?;
    writeln!(
        out,
        "summary   {placed} placed, {refused} refused, {} failed",
        report.failures
    )?;
    Ok(())
}

fn run_optimize(
    policy: &WasmPolicy,
    snapshot: &Snapshot,
    options: &RunOptions,
    report: &mut RunReport,
) -> anyhow::Result<()> {
    let out = &mut report.text;
    let jobs: Vec<Job> = snapshot.preemptible_jobs().cloned().collect();
    if jobs.is_empty() {
        writeln!(
            out,
            "call      optimize: the snapshot has no preemptible job"
        )?;
        return Ok(());
    }
    let keys: Vec<&str> = jobs.iter().map(|j| j.key.as_str()).collect();
    // As the operator does: the jobs being re-planned give their current capacity back.
    let nodes = snapshot.nodes_without(&keys);
    writeln!(
        out,
        "call      optimize over {} preemptible job(s), previous plan of {} job(s); their \
         current usage counts as free",
        jobs.len(),
        snapshot.previous.len()
    )?;
    let previous = checks::plan_to_indices(&jobs, &nodes, &snapshot.previous);
    let (raw, time) = timed(RUN_REPEATS, || {
        policy.optimize_raw(&jobs, &nodes, &previous)
    });
    report.calls += 1;
    let checked = Checked::new(policy, policy.name().to_string());
    let answer = raw
        .and_then(|plan| checks::plan(policy.name(), &jobs, &nodes, &plan))
        .and_then(|plan| checked.plan_fits(&jobs, &nodes, &plan).map(|()| plan));
    let theirs = options.compare.map(|native| {
        (
            native,
            native.optimize_now(&jobs, &nodes, &snapshot.previous),
        )
    });
    let plan = match answer {
        Ok(plan) => plan,
        Err(e) => {
            let what = match &e {
                PluginError::Refused { error, .. } => format!("refused   {error}"),
                e => {
                    report.failures += 1;
                    format!("FAILED    {e} ({})", e.reason())
                }
            };
            writeln!(out)?;
            writeln!(out, "plan      {what}")?;
            writeln!(
                out,
                "time      {} (best of {RUN_REPEATS}; fresh instance + call)",
                micros(time)
            )?;
            if let Some((native, Ok(theirs))) = &theirs {
                writeln!(out, "{}  places {} job(s)", native.describe(), theirs.len())?;
            }
            return Ok(());
        }
    };
    let find =
        |plan: &[JobPlan], key: &str| plan.iter().find(|p| p.job == key).map(|p| p.nodes.clone());
    for job in &jobs {
        writeln!(out)?;
        writeln!(out, "job {}: {}", job.key, describe_job(job))?;
        let ours = find(&plan, &job.key);
        match &ours {
            Some(names) => write_placement(out, "  ", job, names)?,
            None => writeln!(out, "  not placed by this plan (waits for capacity)")?,
        }
        let was = find(&snapshot.previous, &job.key);
        match (&ours, &was) {
            (Some(now), Some(was)) => {
                writeln!(out, "  previous  previous → now: {}", diff(job, was, now))?;
            }
            (Some(_), None) => writeln!(out, "  previous  not in the previous plan")?,
            (None, Some(_)) => writeln!(out, "  previous  was placed by the previous plan")?,
            (None, None) => {}
        }
        if let Some((native, theirs)) = &theirs {
            let theirs = match theirs {
                Ok(plan) => Ok(find(plan, &job.key)),
                Err(e) => Err(e.clone()),
            };
            match theirs {
                Ok(Some(names)) => {
                    write_comparison(out, *native, job, ours.as_deref(), Ok(names))?;
                }
                Ok(None) => writeln!(out, "  {}  does not place it", native.describe())?,
                Err(e) => write_comparison(out, *native, job, ours.as_deref(), Err(e))?,
            }
        }
    }
    writeln!(out)?;
    writeln!(
        out,
        "check     ok: known jobs, each once, one ready node per replica"
    )?;
    writeln!(out, "capacity  ok: {CAPACITY_OK}")?;
    writeln!(
        out,
        "time      {} (best of {RUN_REPEATS}; fresh instance + call)",
        micros(time)
    )?;
    writeln!(
        out,
        "summary   {} of {} job(s) placed",
        plan.len(),
        jobs.len()
    )?;
    Ok(())
}

fn describe_job(job: &Job) -> String {
    let tasks: Vec<String> = job
        .tasks
        .iter()
        .map(|t| format!("{}×{}", t.name, t.replicas))
        .collect();
    format!(
        "{} replicas ({}), priority {}{}",
        job.total_replicas(),
        tasks.join(", "),
        job.priority,
        if job.preemptible { ", preemptible" } else { "" }
    )
}

/// `0-3` for consecutive ranks, `0,2` otherwise.
fn ranges(ranks: &[usize]) -> String {
    let mut parts: Vec<String> = vec![];
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            ranks[i].to_string()
        } else {
            format!("{}-{}", ranks[i], ranks[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// One row per node, in order of first use: the node, its replica count and which ranks of
/// which task it runs.
fn write_placement(
    out: &mut String,
    indent: &str,
    job: &Job,
    nodes: &[String],
) -> std::fmt::Result {
    /// A node and, per task, the global ranks it runs.
    type Row<'a> = (&'a str, Vec<(&'a str, Vec<usize>)>);
    let mut rows: Vec<Row<'_>> = vec![];
    for (rank, (task, node)) in job.replicas().zip(nodes).enumerate() {
        let i = match rows.iter().position(|(n, _)| *n == node.as_str()) {
            Some(i) => i,
            None => {
                rows.push((node, vec![]));
                rows.len() - 1
            }
        };
        let row = &mut rows[i].1;
        match row.iter_mut().find(|(t, _)| *t == task.name.as_str()) {
            Some((_, ranks)) => ranks.push(rank),
            None => row.push((&task.name, vec![rank])),
        }
    }
    let width = rows.iter().map(|(n, _)| n.len()).max().unwrap_or(0).max(4);
    writeln!(out, "{indent}{:width$}  REPLICAS  RANKS", "NODE")?;
    for (node, tasks) in rows {
        let count: usize = tasks.iter().map(|(_, r)| r.len()).sum();
        let ranks: Vec<String> = tasks
            .iter()
            .map(|(t, r)| format!("{t} {}", ranges(r)))
            .collect();
        writeln!(
            out,
            "{indent}{node:width$}  {count:<8}  {}",
            ranks.join(", ")
        )?;
    }
    Ok(())
}

/// Where two placements of `job` differ, rank by rank.
fn diff(job: &Job, from: &[String], to: &[String]) -> String {
    const SHOWN: usize = 6;
    let moved: Vec<String> = job
        .replicas()
        .zip(from.iter().zip(to))
        .enumerate()
        .filter(|(_, (_, (a, b)))| a != b)
        .map(|(rank, (task, (a, b)))| format!("rank {rank} ({}) {a} → {b}", task.name))
        .collect();
    if moved.is_empty() {
        return "same placement".to_string();
    }
    let more = moved.len().saturating_sub(SHOWN);
    let mut text = format!(
        "{} of {} replicas differ: {}",
        moved.len(),
        job.total_replicas(),
        moved[..moved.len().min(SHOWN)].join(", ")
    );
    if more > 0 {
        let _ = write!(text, ", and {more} more");
    }
    text
}

/// The built-in policy's answer for `job` and how the plugin's differs from it.
fn write_comparison(
    out: &mut String,
    native: NativePolicy,
    job: &Job,
    ours: Option<&[String]>,
    theirs: Result<Vec<String>, PluginError>,
) -> anyhow::Result<()> {
    let name = native.describe();
    match (theirs, ours) {
        (Ok(theirs), Some(ours)) if theirs == ours => {
            writeln!(out, "  {name}  same placement")?;
        }
        (Ok(theirs), ours) => {
            writeln!(out, "  {name}")?;
            write_placement(out, "    ", job, &theirs)?;
            if let Some(ours) = ours {
                writeln!(
                    out,
                    "  diff      built-in → plugin: {}",
                    diff(job, &theirs, ours)
                )?;
            }
        }
        (Err(e), _) => writeln!(out, "  {name}  {e}")?,
    }
    Ok(())
}
