//! A shadow policy's answer compared with the active policy's, on the same input: the same,
//! different (which jobs get other nodes or other sizes), or failed (the shadow's call failed).
//!
//! Owns: that comparison and its bounds. Must not touch: calling either policy, or applying
//! anything (a shadow's answer never is).

use std::collections::BTreeMap;

use serde::Serialize;

use super::JobPlan;
use super::admit::Answer;
use crate::planner::clip;

/// Jobs listed in one comparison; more differing jobs are counted, not listed.
pub const MAX_LISTED_JOBS: usize = 32;
/// Longest text (a policy's words, an error) kept in a comparison.
pub const MAX_TEXT_BYTES: usize = 256;

/// How a shadow's answer compares with the active one's
/// (`diorch_policy_shadow_decisions_total{result}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Same,
    Different,
    Failed,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Same => "same",
            Verdict::Different => "different",
            Verdict::Failed => "failed",
        }
    }
}

/// What one side answered for one job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Side {
    /// Placed: a node per replica, and new task replica counts if resized.
    Placed {
        nodes: Vec<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        replicas: Option<Vec<u32>>,
    },
    /// `allocate`'s no-fit, in the policy's words; or a job an `optimize` plan leaves out.
    Waits(String),
    /// The call failed: why.
    Failed(String),
}

/// A job the two answers treat differently.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobDiff {
    pub job: String,
    pub active: Side,
    pub shadow: Side,
}

/// The comparison of one decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Comparison {
    pub verdict: Verdict,
    /// Jobs treated differently (at most [`MAX_LISTED_JOBS`]).
    pub jobs: Vec<JobDiff>,
    /// How many jobs are treated differently, listed or not.
    pub differing: usize,
}

fn side_of(answer: &Answer) -> Side {
    match answer {
        Answer::Slots(slots) => Side::Placed {
            nodes: slots.as_slice().to_vec(),
            replicas: None,
        },
        Answer::NoFit(why) => Side::Waits(clip(why, MAX_TEXT_BYTES)),
        Answer::Failed { message, .. } => Side::Failed(clip(message, MAX_TEXT_BYTES)),
    }
}

/// Two answers to `allocate` for `job`. Two no-fits are the same whatever their words.
pub fn allocation(job: &str, active: &Answer, shadow: &Answer) -> Comparison {
    let same = match (active, shadow) {
        (_, Answer::Failed { .. }) => return failed(job, side_of(active), side_of(shadow)),
        (Answer::Slots(a), Answer::Slots(b)) => a == b,
        (Answer::NoFit(_), Answer::NoFit(_)) => true,
        _ => false,
    };
    if same {
        return Comparison {
            verdict: Verdict::Same,
            jobs: Vec::new(),
            differing: 0,
        };
    }
    Comparison {
        verdict: Verdict::Different,
        jobs: vec![JobDiff {
            job: job.to_string(),
            active: side_of(active),
            shadow: side_of(shadow),
        }],
        differing: 1,
    }
}

fn failed(job: &str, active: Side, shadow: Side) -> Comparison {
    Comparison {
        verdict: Verdict::Failed,
        jobs: vec![JobDiff {
            job: job.to_string(),
            active,
            shadow,
        }],
        differing: 0,
    }
}

/// A call's failure, as both comparisons read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure(pub String);

/// Two answers to `optimize` for the group `jobs` (keys in the order the policies saw them):
/// a job is treated the same when both plans place it on the same nodes at the same size, or
/// both leave it out.
pub fn plan(
    jobs: &[String],
    active: &Result<Vec<JobPlan>, Failure>,
    shadow: &Result<Vec<JobPlan>, Failure>,
) -> Comparison {
    let shadow = match shadow {
        Ok(plan) => plan,
        Err(Failure(why)) => {
            let active = match active {
                Ok(_) => Side::Waits(String::new()),
                Err(Failure(a)) => Side::Failed(clip(a, MAX_TEXT_BYTES)),
            };
            return failed("*", active, Side::Failed(clip(why, MAX_TEXT_BYTES)));
        }
    };
    let by_job = |plan: &[JobPlan]| -> BTreeMap<String, Side> {
        plan.iter()
            .map(|e| {
                (
                    e.job.clone(),
                    Side::Placed {
                        nodes: e.nodes.clone(),
                        replicas: e.replicas.clone(),
                    },
                )
            })
            .collect()
    };
    let theirs = by_job(shadow);
    let (ours, active_failed) = match active {
        Ok(plan) => (by_job(plan), None),
        Err(Failure(why)) => (BTreeMap::new(), Some(clip(why, MAX_TEXT_BYTES))),
    };
    let left_out = || Side::Waits("left out of the plan".to_string());
    let mut listed = Vec::new();
    let mut differing = 0;
    for job in jobs {
        let a = match &active_failed {
            Some(why) => Side::Failed(why.clone()),
            None => ours.get(job).cloned().unwrap_or_else(left_out),
        };
        let b = theirs.get(job).cloned().unwrap_or_else(left_out);
        if a != b {
            differing += 1;
            if listed.len() < MAX_LISTED_JOBS {
                listed.push(JobDiff {
                    job: job.clone(),
                    active: a,
                    shadow: b,
                });
            }
        }
    }
    Comparison {
        verdict: if differing == 0 {
            Verdict::Same
        } else {
            Verdict::Different
        },
        jobs: listed,
        differing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::SlotNodes;

    fn slots(nodes: &[&str]) -> Answer {
        Answer::Slots(SlotNodes::new(
            nodes.iter().map(|n| n.to_string()).collect(),
        ))
    }

    fn entry(job: &str, nodes: &[&str], replicas: Option<Vec<u32>>) -> JobPlan {
        JobPlan {
            job: job.to_string(),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            replicas,
            reason: None,
        }
    }

    #[test]
    fn allocations_on_the_same_nodes_or_both_waiting_are_the_same() {
        let same = allocation("ns/a", &slots(&["n1", "n2"]), &slots(&["n1", "n2"]));
        assert_eq!(same.verdict, Verdict::Same);
        assert!(same.jobs.is_empty());
        let waits = allocation(
            "ns/a",
            &Answer::NoFit("2 GPUs".into()),
            &Answer::NoFit("no room".into()),
        );
        assert_eq!(waits.verdict, Verdict::Same);
    }

    #[test]
    fn other_nodes_or_other_outcomes_are_different_and_name_the_job() {
        let moved = allocation("ns/a", &slots(&["n1", "n2"]), &slots(&["n2", "n1"]));
        assert_eq!(moved.verdict, Verdict::Different);
        assert_eq!(moved.differing, 1);
        assert_eq!(moved.jobs[0].job, "ns/a");
        let waits = allocation("ns/a", &slots(&["n1"]), &Answer::NoFit("full".into()));
        assert_eq!(waits.verdict, Verdict::Different);
        assert_eq!(waits.jobs[0].shadow, Side::Waits("full".into()));
        // The active call failed (the built-in policy placed the job); the shadow answered.
        let active_failed = Answer::Failed {
            reason: "Timeout",
            message: "deadline".into(),
        };
        assert_eq!(
            allocation("ns/a", &active_failed, &slots(&["n1"])).verdict,
            Verdict::Different
        );
    }

    #[test]
    fn a_failed_shadow_call_is_failed_whatever_the_active_answered() {
        let trap = Answer::Failed {
            reason: "Trap",
            message: "unreachable".repeat(100),
        };
        let c = allocation("ns/a", &slots(&["n1"]), &trap);
        assert_eq!(c.verdict, Verdict::Failed);
        let Side::Failed(why) = &c.jobs[0].shadow else {
            panic!("{c:?}")
        };
        assert!(why.len() <= MAX_TEXT_BYTES, "bounded: {}", why.len());
        let plan_failed = plan(
            &["ns/a".to_string()],
            &Ok(vec![]),
            &Err(Failure("trap".into())),
        );
        assert_eq!(plan_failed.verdict, Verdict::Failed);
    }

    #[test]
    fn plans_differ_by_the_jobs_placed_elsewhere_resized_or_left_out() {
        let jobs: Vec<String> = ["ns/a", "ns/b", "ns/c", "ns/d"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let active = Ok(vec![
            entry("ns/a", &["n1"], None),
            entry("ns/b", &["n2"], None),
            entry("ns/c", &["n3", "n3"], Some(vec![1, 1])),
        ]);
        let shadow = Ok(vec![
            entry("ns/a", &["n1"], None),
            entry("ns/b", &["n3"], None),
            entry("ns/c", &["n3", "n3", "n3"], Some(vec![1, 2])),
            entry("ns/d", &["n4"], None),
        ]);
        let c = plan(&jobs, &active, &shadow);
        assert_eq!(c.verdict, Verdict::Different);
        assert_eq!(c.differing, 3);
        let named: Vec<&str> = c.jobs.iter().map(|d| d.job.as_str()).collect();
        assert_eq!(named, ["ns/b", "ns/c", "ns/d"]);
        assert_eq!(c.jobs[2].active, Side::Waits("left out of the plan".into()));
        assert_eq!(plan(&jobs, &active, &active.clone()).verdict, Verdict::Same);
    }

    #[test]
    fn a_comparison_lists_a_bounded_number_of_jobs_and_counts_them_all() {
        let jobs: Vec<String> = (0..100).map(|i| format!("ns/j{i}")).collect();
        let active = Ok(jobs.iter().map(|j| entry(j, &["n1"], None)).collect());
        let shadow = Ok(jobs.iter().map(|j| entry(j, &["n2"], None)).collect());
        let c = plan(&jobs, &active, &shadow);
        assert_eq!(c.differing, 100);
        assert_eq!(c.jobs.len(), MAX_LISTED_JOBS);
    }
}
