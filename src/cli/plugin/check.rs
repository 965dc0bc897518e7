//! `diorch plugin check`: a component validated against the plugin worlds and run on the
//! built-in samples, with its size, imports, exports, timings and, for a mutator, the
//! capabilities its change to the sample pod uses and the grants it needs.
//!
//! Owns: the check's report. Must not touch: the host's checks and the capability rules, which
//! it calls as the operator does.

use std::fmt::Write as _;

use crate::plugin::capabilities::{self, Capability, Grants};
use crate::plugin::{
    Contract, HostConfig, Limits, PluginError, PluginHost, TaskContext, World, sample,
};

use super::configmap::inline_advice;
use super::timing::{micros, timed};

/// The `check` report; an error when the component implements neither world, fails a call or
/// (a mutator) changes the sample pod beyond the default capabilities.
pub fn check(
    bytes: &[u8],
    limits: Limits,
    config: &str,
    task_type: &str,
) -> anyhow::Result<String> {
    let report = check_granted(bytes, limits, config, task_type, Grants::NONE)?;
    match report.refused {
        Some(refusal) => Err(anyhow::anyhow!("{refusal}")),
        None => Ok(report.text),
    }
}

/// A `check` report, and for a mutator whose sample change needs grants it was not given, why
/// the operator would refuse it.
pub struct CheckReport {
    pub text: String,
    pub refused: Option<String>,
}

/// The `check` report for a mutator granted `grants` (ignored for policies); an error when
/// the component implements neither world or a call fails.
pub fn check_granted(
    bytes: &[u8],
    limits: Limits,
    config: &str,
    task_type: &str,
    grants: Grants,
) -> anyhow::Result<CheckReport> {
    let mut refused = None;
    let host = PluginHost::new(HostConfig {
        limits,
        ..HostConfig::default()
    })?;
    let mut out = String::new();
    let info = host.inspect(bytes)?;
    writeln!(out, "size:     {} bytes", bytes.len())?;
    writeln!(out, "inline:   {}", inline_advice(bytes))?;
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
            let world = World::SchedulingPolicy.at(policy.contract());
            writeln!(out, "world:    {world}")?;
            // A call past the deadline at one size is reported, not fatal: the policy serves
            // smaller clusters as it is, and larger ones with a longer deadline (interpreted
            // guests, Python and JS, take milliseconds per hundred nodes).
            let mut over_deadline = Vec::new();
            let mut served = 0;
            for n in [100, 1000] {
                let (job, nodes) = sample::allocate_input(n, 2);
                let (result, t) = timed(20, || policy.allocate_blocking(&job, &nodes));
                match result {
                    Ok(result) => {
                        served += 1;
                        writeln!(
                            out,
                            "allocate: job of {} replicas on {n} nodes -> {} in {} (fresh instance + call)",
                            job.total_replicas(),
                            result.nodes.join(","),
                            micros(t)
                        )?;
                    }
                    Err(PluginError::Timeout { deadline, .. }) => {
                        writeln!(
                            out,
                            "allocate: job of {} replicas on {n} nodes -> ran past the {deadline:?} deadline",
                            job.total_replicas(),
                        )?;
                        over_deadline.push(format!("allocate on {n} nodes"));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            let (jobs, nodes) = sample::optimize_input(50, 100);
            let (plan, t) = timed(5, || policy.optimize_blocking(&jobs, &nodes, &[]));
            match plan {
                Ok(plan) => writeln!(
                    out,
                    "optimize: 50 jobs on 100 nodes -> {} jobs placed in {}",
                    plan.len(),
                    micros(t)
                )?,
                Err(PluginError::Timeout { deadline, .. }) => {
                    writeln!(
                        out,
                        "optimize: 50 jobs on 100 nodes -> ran past the {deadline:?} deadline"
                    )?;
                    over_deadline.push("optimize of 50 jobs on 100 nodes".to_string());
                }
                Err(e) => return Err(e.into()),
            }
            // Contract 0.5.0: room for a job that does not fit, from lower-priority jobs.
            if policy.contract() == Contract::V5 {
                let (job, candidates, nodes) = sample::preempt_input(true);
                let (answer, t) = timed(5, || policy.preempt_blocking(&job, &candidates, &nodes));
                match answer {
                    Ok(Some(a)) => writeln!(
                        out,
                        "preempt:  job of {} replicas on 2 full nodes -> {} shrunk, {} evicted, placed on {} in {}",
                        job.total_replicas(),
                        a.shrinks.len(),
                        a.evictions.len(),
                        a.nodes.join(","),
                        micros(t)
                    )?,
                    Ok(None) => writeln!(
                        out,
                        "preempt:  job of {} replicas on 2 full nodes -> no preemption (the job waits) in {}",
                        job.total_replicas(),
                        micros(t)
                    )?,
                    Err(PluginError::Timeout { deadline, .. }) => {
                        writeln!(out, "preempt:  ran past the {deadline:?} deadline")?;
                        over_deadline.push("preempt on 2 nodes".to_string());
                    }
                    Err(e) => return Err(e.into()),
                }
            } else {
                writeln!(
                    out,
                    "preempt:  not in contract {} (a job that does not fit waits)",
                    policy.contract()
                )?;
            }
            if served == 0 {
                anyhow::bail!(
                    "every allocate call ran past the {:?} deadline: measure with a longer \
                     --deadline-ms, and give the plugin that much with its ConfigMap's deadlineMs",
                    limits.deadline
                );
            }
            if !over_deadline.is_empty() {
                writeln!(
                    out,
                    "deadline: {} ran past {:?}: on clusters that large, give the plugin more with \
                     its ConfigMap's deadlineMs (measure with --deadline-ms here)",
                    over_deadline.join(" and "),
                    limits.deadline
                )?;
            }
        }
        (Err(_), Ok(mutator)) => {
            let world = World::PodMutator.at(mutator.contract());
            writeln!(out, "world:    {world}")?;
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
            // The same check the operator makes on every call and at load.
            let uses = capabilities::uses(&before, &after);
            let list = |grants: bool| -> String {
                let items: Vec<String> = uses
                    .by_capability
                    .iter()
                    .filter(|(c, _)| c.grant().is_some() == grants && **c != Capability::Operator)
                    .map(|(c, change)| format!("{c} ({change})"))
                    .collect();
                if items.is_empty() {
                    "none".to_string()
                } else {
                    items.join(", ")
                }
            };
            writeln!(out, "uses:     {} (default capabilities)", list(false))?;
            writeln!(out, "needs:    {}", list(true))?;
            writeln!(
                out,
                "granted:  {}",
                if grants.is_empty() {
                    "none".to_string()
                } else {
                    grants.to_string()
                }
            )?;
            refused = uses
                .refusal(grants)
                .map(|why| format!("the operator would refuse this mutator: {why}"));
            if refused.is_none() {
                let needs = uses.needs();
                writeln!(
                    out,
                    "ConfigMap: {}",
                    if needs.is_empty() {
                        "no grants needed".to_string()
                    } else {
                        format!("data.grants must include {needs}")
                    }
                )?;
            }
        }
        (Err(p), Err(m)) => {
            return Err(anyhow::anyhow!(
                "not a diorch plugin: as a policy: {p}; as a mutator: {m}"
            ));
        }
    }
    Ok(CheckReport { text: out, refused })
}
