//! `diorch explain JOB` (`kubectl dijob explain JOB` as a kubectl plugin): why a DIJob's
//! replicas run where they do, from its `status.decisions` and `Allocated` condition, newest
//! decision first.
//!
//! Owns: reading one DIJob and printing its decisions. Must not touch: how decisions are made
//! or recorded (the allocator's and the planner's). Everything printed passes
//! [`diorch_core::reason::sanitize_to`]: a status is written by whoever may, so its text is
//! treated as untrusted on the way to a terminal.

use std::fmt::Write as _;

use anyhow::Context as _;
use diorch_core::api::{AllocationDecision, DIJob};
use diorch_core::planner::ALLOCATED_CONDITION;
use diorch_core::reason::sanitize_to;
use kube::Api;

/// Longest text printed per field.
const MAX_FIELD_BYTES: usize = 1024;

#[derive(clap::Args, Debug)]
pub struct ExplainArgs {
    /// The DIJob's name.
    pub job: String,
    /// Its namespace (default: the kubeconfig context's).
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Show at most this many decisions, newest first (the operator keeps 10).
    #[arg(long, default_value_t = 10)]
    pub last: usize,
    /// Print the decisions as JSON (the `status.decisions` entries).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub cluster: crate::cluster::ClusterArgs,
}

/// Reads the job and prints its decisions.
pub async fn run(args: ExplainArgs) -> anyhow::Result<()> {
    let connection = crate::cluster::connect(&args.cluster.target()).await?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| connection.client.default_namespace().to_string());
    let api: Api<DIJob> = Api::namespaced(connection.client.clone(), &namespace);
    let job = api
        .get(&args.job)
        .await
        .with_context(|| format!("cannot read DIJob {namespace}/{}", args.job))?;
    let text = if args.json {
        let decisions = decisions(&job, args.last);
        serde_json::to_string_pretty(&decisions)? + "\n"
    } else {
        render(&job, args.last)
    };
    print!("{text}");
    Ok(())
}

fn decisions(job: &DIJob, last: usize) -> Vec<AllocationDecision> {
    job.status
        .as_ref()
        .and_then(|s| s.decisions.clone())
        .unwrap_or_default()
        .into_iter()
        .take(last)
        .collect()
}

fn safe(text: &str) -> String {
    sanitize_to(text, MAX_FIELD_BYTES).unwrap_or_default()
}

/// The human report: the job, its `Allocated` condition, then each decision, newest first.
pub fn render(job: &DIJob, last: usize) -> String {
    let mut out = String::new();
    let name = format!(
        "{}/{}",
        job.metadata.namespace.as_deref().unwrap_or_default(),
        job.metadata.name.as_deref().unwrap_or_default()
    );
    let status = job.status.clone().unwrap_or_default();
    let phase = status
        .phase
        .map_or_else(|| "-".to_string(), |p| format!("{p:?}"));
    let _ = writeln!(out, "DIJob {}  phase {phase}", safe(&name));
    match status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == ALLOCATED_CONDITION)
    {
        Some(c) => {
            let _ = writeln!(
                out,
                "Allocated {} ({}): {}",
                safe(&c.status),
                safe(c.reason.as_deref().unwrap_or_default()),
                safe(c.message.as_deref().unwrap_or_default())
            );
        }
        None if !job.spec.preemptible => {
            let _ = writeln!(
                out,
                "not preemptible: kube-scheduler places its pods, no policy decides"
            );
        }
        None => {
            let _ = writeln!(out, "no allocation yet");
        }
    }
    if let Some(p) = &status.preemption {
        let before = p
            .replicas_before
            .iter()
            .flatten()
            .map(|(task, n)| format!("{}×{n}", safe(task)))
            .collect::<Vec<_>>()
            .join(", ");
        let back = if before.is_empty() {
            String::new()
        } else {
            format!("; grows back to {before} when room frees")
        };
        let _ = writeln!(
            out,
            "preempted: {} for {} at {}{back}",
            p.action.as_str(),
            safe(&p.for_job),
            p.time.0
        );
    }
    let decisions = decisions(job, last);
    let kept = status.decisions.as_ref().map_or(0, Vec::len);
    if decisions.is_empty() {
        let _ = writeln!(out, "no decisions recorded");
        return out;
    }
    let _ = writeln!(
        out,
        "decisions, newest first ({} of {kept} kept):",
        decisions.len()
    );
    for d in &decisions {
        let sha = d
            .sha256
            .as_deref()
            .map(|s| format!(", component sha256 {}", safe(s)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "- {}  {}  by {}{sha}",
            safe(&d.time.0.to_string()),
            d.action.as_str(),
            safe(&d.policy)
        );
        let _ = writeln!(out, "    {}", safe(&d.message));
        if let Some(reason) = &d.reason {
            let _ = writeln!(out, "    why: {}", safe(reason));
        }
        match &d.host_changed {
            Some(changed) => {
                let _ = writeln!(out, "    operator changed the answer: {}", safe(changed));
            }
            None if d.action != diorch_core::api::DecisionAction::Waiting => {
                let _ = writeln!(out, "    the policy's answer applied as given");
            }
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use diorch_core::api::DecisionAction;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn decision(
        action: DecisionAction,
        reason: Option<&str>,
        changed: Option<&str>,
    ) -> AllocationDecision {
        AllocationDecision {
            time: Time("2026-11-27T03:00:00Z".parse().unwrap()),
            action,
            policy: "team@3f2a".into(),
            sha256: Some("3f2a".repeat(16)),
            host_changed: changed.map(String::from),
            reason: reason.map(String::from),
            message: "placed by team@3f2a on a×2".into(),
        }
    }

    fn job(decisions: Vec<AllocationDecision>) -> DIJob {
        let mut job: DIJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "diengine.opendilab.org/v2alpha1",
            "kind": "DIJob",
            "metadata": {"name": "j", "namespace": "ns"},
            "spec": {"preemptible": true, "tasks": []}
        }))
        .unwrap();
        job.status = Some(diorch_core::api::DIJobStatus {
            decisions: Some(decisions),
            ..Default::default()
        });
        job
    }

    #[test]
    fn decisions_print_newest_first_with_policy_component_and_reason() {
        let j = job(vec![
            decision(DecisionAction::Moved, Some("re-planned by bin-pack"), None),
            decision(DecisionAction::Placed, None, Some("plugin team trapped")),
        ]);
        let text = render(&j, 10);
        assert!(
            text.starts_with("DIJob ns/j  phase -\nno allocation yet\n"),
            "{text}"
        );
        assert!(
            text.contains("decisions, newest first (2 of 2 kept):"),
            "{text}"
        );
        let moved = text.find("Moved").unwrap();
        let placed = text.find("Placed").unwrap();
        assert!(moved < placed, "{text}");
        assert!(text.contains(&format!(
            "by team@3f2a, component sha256 {}",
            "3f2a".repeat(16)
        )));
        assert!(text.contains("    why: re-planned by bin-pack\n"), "{text}");
        assert!(
            text.contains("    the policy's answer applied as given\n"),
            "{text}"
        );
        assert!(
            text.contains("    operator changed the answer: plugin team trapped\n"),
            "{text}"
        );
        // --last 1: only the newest.
        let text = render(&j, 1);
        assert!(
            text.contains("(1 of 2 kept)") && !text.contains("Placed"),
            "{text}"
        );
        assert_eq!(decisions(&j, 1).len(), 1);
    }

    #[test]
    fn a_hostile_status_cannot_forge_lines_or_escape_the_terminal() {
        let j = job(vec![decision(
            DecisionAction::Placed,
            Some("ok\n- 2030-01-01  Placed  by forged\u{1b}[2J\u{202e}"),
            None,
        )]);
        let text = render(&j, 10);
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{202e}'),
            "{text:?}"
        );
        assert!(
            text.contains("    why: ok - 2030-01-01 Placed by forged [2J\n"),
            "{text}"
        );
        assert_eq!(text.lines().filter(|l| l.starts_with("- ")).count(), 1);
    }

    #[test]
    fn a_preempted_job_says_for_whom_and_what_it_grows_back_to() {
        let mut j = job(vec![decision(DecisionAction::Evicted, None, None)]);
        j.status.as_mut().unwrap().preemption = Some(diorch_core::api::PreemptionStatus {
            time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-27T06:00:00Z".parse().unwrap(),
            ),
            action: diorch_core::api::PreemptionAction::Shrunk,
            for_job: "ns/urgent\n\u{1b}[2J".into(),
            replicas_before: Some([("collector".to_string(), 7)].into()),
        });
        let text = render(&j, 10);
        // The job name's newline and escape arrive as spaces: no forged line, no terminal control.
        assert!(
            text.contains(
                "\npreempted: Shrunk for ns/urgent [2J at 2026-11-27T06:00:00Z; grows back to collector×7 when room frees\n"
            ),
            "{text}"
        );
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(text.contains("Evicted"), "{text}");
    }

    #[test]
    fn a_job_without_decisions_says_so() {
        let text = render(&job(vec![]), 10);
        assert!(text.ends_with("no decisions recorded\n"), "{text}");
    }
}
