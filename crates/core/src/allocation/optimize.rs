//! Which optimize results are applied: the pure part of the periodic re-plan.
//!
//! Owns: comparing a policy's plan with the jobs' current allocations, keeping jobs the plan
//! leaves out where they are, and rate-limiting moves per job so a flapping policy cannot
//! thrash training. Must not touch: policy calls, the ledger or the API.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::JobPlan;
use crate::key::ObjectKey;
use crate::placement::SlotNodes;

/// What happens to one job after an optimize pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Move to `slots`; `moved` replicas change node.
    Move {
        job: ObjectKey,
        slots: SlotNodes,
        /// New replica count per task (spec order) when the job is resized.
        replicas: Option<Vec<u32>>,
        moved: usize,
    },
    /// The plan would move the job, but it moved less than the minimum interval ago.
    Suppressed { job: ObjectKey, retry_in: Duration },
}

/// The decisions for `plan` given the jobs' `current` allocations (a plan's nodes are in slot
/// order too). Jobs the plan
/// leaves out keep their allocation (this version never preempts a running job outright); jobs
/// whose plan equals their allocation are left alone. A plan names jobs by the plugin model's
/// key string; an entry naming none of `current` is skipped.
pub fn decide(
    plan: &[JobPlan],
    current: &HashMap<ObjectKey, SlotNodes>,
    counts: &HashMap<ObjectKey, Vec<u32>>,
    last_moved: &HashMap<ObjectKey, Instant>,
    now: Instant,
    min_interval: Duration,
) -> Vec<Decision> {
    let mut out = Vec::new();
    for entry in plan {
        let Ok(job) = entry.job.parse::<ObjectKey>() else {
            continue;
        };
        let Some(now_on) = current.get(&job) else {
            continue;
        };
        // A resize to the counts the job has is no resize.
        let replicas = entry
            .replicas
            .clone()
            .filter(|r| counts.get(&job) != Some(r));
        if now_on.as_slice() == entry.nodes && replicas.is_none() {
            continue;
        }
        if let Some(at) = last_moved.get(&job) {
            let since = now.saturating_duration_since(*at);
            if since < min_interval {
                out.push(Decision::Suppressed {
                    job,
                    retry_in: min_interval - since,
                });
                continue;
            }
        }
        let moved = now_on
            .as_slice()
            .iter()
            .zip(&entry.nodes)
            .filter(|(a, b)| a != b)
            .count()
            + now_on.len().abs_diff(entry.nodes.len());
        out.push(Decision::Move {
            job,
            slots: SlotNodes::new(entry.nodes.clone()),
            replicas,
            moved,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(job: &str, nodes: &[&str]) -> JobPlan {
        JobPlan {
            job: job.into(),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            replicas: None,
            reason: None,
        }
    }

    fn key(job: &str) -> ObjectKey {
        ObjectKey::new("ns", job)
    }

    fn current(entries: &[(&str, &[&str])]) -> HashMap<ObjectKey, SlotNodes> {
        entries
            .iter()
            .map(|(k, v)| (key(k), v.iter().map(|n| n.to_string()).collect()))
            .collect()
    }

    #[test]
    fn only_changed_jobs_move_and_left_out_jobs_stay() {
        let now = Instant::now();
        let cur = current(&[("a", &["n1", "n2"]), ("b", &["n1"]), ("c", &["n3"])]);
        let decisions = decide(
            &[
                plan("ns/a", &["n1", "n3"]),
                plan("ns/b", &["n1"]),
                plan("ns/zz", &["n1"]),
                plan("not-a-key", &["n1"]),
            ],
            &cur,
            &HashMap::new(),
            &HashMap::new(),
            now,
            Duration::from_secs(60),
        );
        assert_eq!(
            decisions,
            vec![Decision::Move {
                job: key("a"),
                slots: SlotNodes::new(vec!["n1".into(), "n3".into()]),
                replicas: None,
                moved: 1
            }]
        );
    }

    #[test]
    fn a_job_moved_recently_is_not_moved_again() {
        let now = Instant::now();
        let cur = current(&[("a", &["n1"])]);
        let recently = HashMap::from([(key("a"), now - Duration::from_secs(10))]);
        let decisions = decide(
            &[plan("ns/a", &["n2"])],
            &cur,
            &HashMap::new(),
            &recently,
            now,
            Duration::from_secs(60),
        );
        assert_eq!(
            decisions,
            vec![Decision::Suppressed {
                job: key("a"),
                retry_in: Duration::from_secs(50)
            }]
        );
        let long_ago = HashMap::from([(key("a"), now - Duration::from_secs(61))]);
        let decisions = decide(
            &[plan("ns/a", &["n2"])],
            &cur,
            &HashMap::new(),
            &long_ago,
            now,
            Duration::from_secs(60),
        );
        assert!(matches!(decisions[..], [Decision::Move { moved: 1, .. }]));
    }
}
