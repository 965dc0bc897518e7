//! The contract between the controller and whatever places preemptible jobs.
//!
//! Owns [`Admission`] (the answer the planner plans from), [`needs_allocation`] (whether to ask
//! at all), the two orders an allocation comes in ([`SlotNodes`], [`RankNodes`]) and the [`Placement`] trait the
//! operator's allocator implements. The controller only sees this trait, so neither module
//! imports the other. Performs no I/O: implementations do.

use crate::api::{DIJob, Phase};
use crate::key::{BoxFuture, ObjectKey};
use crate::ranks::RankTable;
use crate::{build, model};

/// One node per replica slot, in slot order: tasks in spec order, then local rank (the order
/// `build::desired_slots` lists a job's pods in, and a policy answers in). `""` where a slot
/// has no node. What the allocator holds and hands the planner.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlotNodes(Vec<String>);

/// One node per global rank, as `status.allocation` persists them: `""` where a rank has no
/// node (a free rank, or one not placed). What pods are built from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankNodes(Vec<String>);

impl SlotNodes {
    /// `nodes` are in slot order.
    pub fn new(nodes: Vec<String>) -> SlotNodes {
        SlotNodes(nodes)
    }

    /// The same placement by global rank: each slot's node goes to the rank `ranks` gives the
    /// slot's pod (`slot_pods`: the pod names in slot order). Ranks no slot holds stay `""`;
    /// a slot whose pod holds no rank, or past the end of `slot_pods`, is dropped.
    pub fn by_rank(&self, slot_pods: &[String], ranks: &RankTable) -> RankNodes {
        let mut by_rank = vec![String::new(); ranks.len()];
        for (pod, node) in slot_pods.iter().zip(&self.0) {
            if let Some(entry) = ranks.rank_of(pod).and_then(|r| by_rank.get_mut(r)) {
                entry.clone_from(node);
            }
        }
        RankNodes(by_rank)
    }
}

/// Slot order, as [`SlotNodes::new`].
impl FromIterator<String> for SlotNodes {
    fn from_iter<I: IntoIterator<Item = String>>(nodes: I) -> SlotNodes {
        SlotNodes(nodes.into_iter().collect())
    }
}

impl RankNodes {
    /// `nodes` are by global rank (as in `status.allocation`).
    pub fn new(nodes: Vec<String>) -> RankNodes {
        RankNodes(nodes)
    }
}

/// What the two orders share: the nodes as a slice, their count, and the `Vec` they wrap (a
/// `RankNodes` is what `status.allocation` stores). One body for both, since they differ only in
/// the order they promise.
macro_rules! node_list {
    ($($nodes:ident),*) => {$(
        impl $nodes {
            pub fn as_slice(&self) -> &[String] {
                &self.0
            }

            pub fn len(&self) -> usize {
                self.0.len()
            }

            pub fn is_empty(&self) -> bool {
                self.0.is_empty()
            }
        }

        impl From<$nodes> for Vec<String> {
            fn from(nodes: $nodes) -> Vec<String> {
                nodes.0
            }
        }
    )*};
}

node_list!(SlotNodes, RankNodes);

/// What an admission records about the policy beyond its name (`by`): the deciding component
/// and the policy's own reason.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Why {
    /// sha256 (hex) of the Wasm component that decided; `None` for a built-in policy.
    pub sha256: Option<String>,
    /// The policy's reason (contract 0.4.0), already passed through
    /// [`crate::reason::sanitize`]; `None` when it gave none.
    pub reason: Option<String>,
}

/// The allocator's answer for a preemptible job that needs an allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    Placed {
        /// One node per replica.
        nodes: SlotNodes,
        /// The policy that decided, e.g. `binpack@3f2a…` or `builtin-binpack`.
        by: String,
        /// Why the built-in policy answered instead of the requested one.
        fallback: Option<String>,
        /// A periodic re-plan moving a placed job (not its first placement).
        replan: bool,
        /// New replica count per task (spec order) when an elastic policy resized the job;
        /// `nodes` are the slots at these counts.
        replicas: Option<Vec<u32>>,
        why: Why,
    },
    /// Not every replica fits now; the job waits in Pending.
    Waiting {
        message: String,
        by: String,
        why: Why,
    },
    /// Room is taken from this running job for a job of higher priority.
    Preempted(Preempted),
}

/// Room taken from a running job for a job of higher priority.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preempted {
    pub action: Preemption,
    /// The job the room goes to, `namespace/name`.
    pub for_job: String,
    /// The policy that chose the victims, as `Placed::by`.
    pub by: String,
    /// Why, for people: which job, the priorities, what is lost (bounded by the allocator).
    pub message: String,
}

/// What a preemption does to its victim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Preemption {
    /// Elastic replicas go, highest local ranks first (survivors keep their names): the job
    /// runs `replicas` per task (spec order) on `nodes`, its slots at those counts.
    Shrink {
        nodes: SlotNodes,
        replicas: Vec<u32>,
        /// The counts before (what the job grows back to when room frees).
        before: Vec<u32>,
    },
    /// The whole job: its pods are deleted and it waits again, counters intact.
    Evict,
}

/// What places preemptible jobs, as the controller sees it. The operator's allocator
/// implements it over its caches and the active scheduling policy.
pub trait Placement: Send + Sync {
    /// The answer for `job`, when it [`needs_allocation`]; `None` when it needs none or the
    /// placer has nothing to say yet.
    fn consult<'a>(&'a self, job: &'a DIJob) -> BoxFuture<'a, Option<Admission>>;

    /// `job` is gone: release what it held.
    fn forget(&self, job: ObjectKey) -> BoxFuture<'_, ()>;

    /// Resolves once the placer's own caches have synced (reconciles wait for it).
    fn ready(&self) -> BoxFuture<'_, ()>;
}

/// Whether the allocator keeps a place for `job`: preemptible, not finished, not suspended (a
/// suspended job gives its nodes back and is placed again when resumed).
pub fn holds_placement(job: &DIJob) -> bool {
    job.spec.preemptible
        && !job.is_suspended()
        && !job
            .status
            .as_ref()
            .and_then(|s| s.phase)
            .is_some_and(Phase::is_terminal)
}

/// Whether `job` needs an allocation: it holds a placement ([`holds_placement`]) and its
/// status does not hold one node per replica. A pure function of the job, so the executor can
/// ask before planning.
pub fn needs_allocation(job: &DIJob) -> bool {
    if !holds_placement(job) {
        return false;
    }
    let status = job.status.as_ref();
    if status.is_some_and(|s| s.ranks.is_some()) {
        // Every slot the job runs has a node (slots removed by a scale-in need none).
        let placed = model::placed_pods(job);
        return !model::slot_pods(job)
            .iter()
            .all(|(pod, _)| placed.contains_key(pod));
    }
    let placed = status
        .and_then(|s| s.allocation.as_ref())
        .map_or(0, |a| a.iter().filter(|n| !n.is_empty()).count());
    let want: i64 = (0..job.spec.tasks.len())
        .map(|i| i64::from(build::task_replicas(job, i)))
        .sum();
    i64::try_from(placed).unwrap_or(i64::MAX) != want
}

/// The job's current allocation in slot order, from its status (`""` where a slot has no
/// node): what a policy's answer for the job is compared with.
pub fn placed_slots(job: &DIJob) -> SlotNodes {
    SlotNodes::new(model::slot_nodes(job))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn slot_nodes_go_to_the_ranks_of_their_pods() {
        // Slots in spec order: learner-0, collector-0, collector-1. Ranks from an earlier plan:
        // collector-1 kept rank 0, rank 2 is free, learner-0 took rank 3.
        let pods = names(&["j-learner-0", "j-collector-0", "j-collector-1"]);
        let ranks = RankTable::from_status(Some(&names(&[
            "j-collector-1",
            "j-collector-0",
            "",
            "j-learner-0",
        ])));
        let slots: SlotNodes = names(&["n-l0", "n-c0", "n-c1"]).into_iter().collect();
        let by_rank = slots.by_rank(&pods, &ranks);
        assert_eq!(
            by_rank,
            RankNodes::new(names(&["n-c1", "n-c0", "", "n-l0"]))
        );
        assert_eq!(Vec::from(by_rank), names(&["n-c1", "n-c0", "", "n-l0"]));
        // A slot with no node leaves its rank without one.
        let partial = SlotNodes::new(names(&["n-l0", "", "n-c1"]));
        assert_eq!(
            partial.by_rank(&pods, &ranks).as_slice(),
            names(&["n-c1", "", "", "n-l0"])
        );
    }

    #[test]
    fn slots_without_a_rank_are_dropped_and_free_ranks_stay_empty() {
        let pods = names(&["j-a-0", "j-a-1", "j-a-2"]);
        // j-a-2 holds no rank (not planned yet); rank 1 holds a pod that is no slot.
        let ranks = RankTable::from_status(Some(&names(&["j-a-1", "gone", "j-a-0"])));
        let slots = SlotNodes::new(names(&["n0", "n1", "n2"]));
        assert_eq!(
            slots.by_rank(&pods, &ranks).as_slice(),
            names(&["n1", "", "n0"])
        );
        // More nodes than slot pods: the extra nodes have no slot to go to.
        assert_eq!(
            SlotNodes::new(names(&["n0", "n1", "n2", "n3"]))
                .by_rank(&pods[..2], &ranks)
                .as_slice(),
            names(&["n1", "", "n0"])
        );
        assert!(
            SlotNodes::default()
                .by_rank(&pods, &RankTable::default())
                .is_empty()
        );
        assert_eq!(slots.len(), 3);
        assert!(!slots.is_empty());
        assert_eq!(Vec::from(slots), names(&["n0", "n1", "n2"]));
    }

    #[test]
    fn a_jobs_placed_slots_follow_slot_order_from_its_ranks_and_allocation() {
        let j = crate::fixtures::elastic_job(serde_json::json!({
            "ranks": ["j-learner-0", "", "j-collector-1", "j-collector-0"],
            "allocation": ["n1", "", "n2", "gone"],
        }));
        // Slots: learner-0, collector-0, collector-1.
        assert_eq!(
            placed_slots(&j),
            SlotNodes::new(["n1", "gone", "n2"].map(String::from).to_vec())
        );
        let none = crate::fixtures::elastic_job(serde_json::json!({}));
        assert_eq!(placed_slots(&none).as_slice(), ["", "", ""]);
    }
}
