//! The planner's allocation rules: the allocation a preemptible job is planned from, the
//! `Allocated` condition, and the Events of a placement, a resize or a wait for capacity.
//!
//! Owns: how an admission shows in the status. Must not touch: the admission itself (the
//! allocator's) or the phase machine (the parent's).

use super::*;

impl Planner<'_> {
    /// The allocation `status.allocation` holds (empty when none).
    pub(super) fn status_allocation(&self) -> RankNodes {
        RankNodes::new(self.status.allocation.clone().unwrap_or_default())
    }

    /// Records a new allocation with its condition, Event and decision entry.
    pub(super) fn allocated(
        &mut self,
        allocation: RankNodes,
        by: &str,
        fallback: Option<&str>,
        replan: bool,
        resized: bool,
        why: &Why,
    ) {
        let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
        for node in allocation.as_slice().iter().filter(|n| !n.is_empty()) {
            *per_node.entry(node).or_default() += 1;
        }
        let spread = per_node
            .iter()
            .map(|(node, n)| format!("{node}×{n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let message = if replan {
            let before = self.status_allocation();
            let moved = allocation
                .as_slice()
                .iter()
                .enumerate()
                .filter(|(r, n)| !n.is_empty() && before.as_slice().get(*r) != Some(n))
                .count();
            format!("re-planned by {by}: {moved} replicas move; now on {spread}")
        } else {
            format!("placed by {by} on {spread}")
        };
        let action = if resized {
            DecisionAction::Resized
        } else if replan {
            DecisionAction::Moved
        } else {
            DecisionAction::Placed
        };
        self.decided(action, by, fallback, why, &message);
        let message = match &why.reason {
            Some(reason) => format!("{message}; why: {reason}"),
            None => message,
        };
        self.status.allocation = Some(allocation.into());
        self.plan.allocated = true;
        if let Some(why) = fallback {
            // The plugin's error text: bounded before it reaches the Event.
            self.plan.events.push(JobEvent {
                type_: EventType::Warning,
                reason: "PolicyFallback",
                message: clip(
                    &format!("{why}; the built-in policy {by} placed the job instead"),
                    MAX_MESSAGE_BYTES,
                ),
            });
        }
        self.plan.events.push(JobEvent {
            type_: EventType::Normal,
            reason: if replan {
                "JobReallocated"
            } else {
                "JobAllocated"
            },
            message: message.clone(),
        });
        self.set_allocated_condition("True", "Allocated", message);
    }

    /// Records a shrink for a job of higher priority: the smaller allocation, its decision
    /// entry and Events, and `status.preemption` (keeping the counts from before the first of
    /// consecutive shrinks, which the job grows back to).
    pub(super) fn shrunk(
        &mut self,
        allocation: RankNodes,
        before: &[u32],
        for_job: &str,
        by: &str,
        message: &str,
    ) {
        let why = Why {
            sha256: None,
            reason: crate::reason::sanitize(message),
        };
        self.allocated(allocation, by, None, true, true, &why);
        self.resized_event();
        let sizes = |counts: &[u32]| {
            self.job
                .spec
                .tasks
                .iter()
                .zip(counts)
                .map(|(t, n)| (build::task_name(t), i32::try_from(*n).unwrap_or(i32::MAX)))
                .collect::<BTreeMap<String, i32>>()
        };
        let replicas_before = match self.status.preemption.take() {
            Some(PreemptionStatus {
                action: PreemptionAction::Shrunk,
                replicas_before: Some(earlier),
                ..
            }) => earlier,
            _ => sizes(before),
        };
        self.status.preemption = Some(PreemptionStatus {
            time: self.now.clone(),
            action: PreemptionAction::Shrunk,
            for_job: for_job.to_string(),
            replicas_before: Some(replicas_before),
        });
        self.plan.events.push(JobEvent {
            type_: EventType::Normal,
            reason: SHRUNK_REASON,
            message: clip(message, MAX_MESSAGE_BYTES),
        });
    }

    /// A job placed afresh (after an eviction) or resized (grown back, or by its policy) is no
    /// longer preempted.
    pub(super) fn restored(&mut self, replan: bool) {
        let Some(p) = self.status.preemption.as_ref() else {
            return;
        };
        if !replan || p.action == PreemptionAction::Shrunk {
            self.status.preemption = None;
        }
    }

    /// Says what an elastic policy resized the job to.
    pub(super) fn resized_event(&mut self) {
        let sizes = self
            .job
            .spec
            .tasks
            .iter()
            .enumerate()
            .map(|(i, t)| {
                format!(
                    "{}×{}",
                    build::task_name(t),
                    build::task_replicas(self.job, i)
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        self.plan.events.push(JobEvent {
            type_: EventType::Normal,
            reason: "JobResized",
            message: format!("replicas per task are now {sizes}"),
        });
    }

    /// Keeps a job that does not fit waiting, saying why (the Event and the decision entry only
    /// when the reason changes).
    pub(super) fn waiting(&mut self, message: &str, by: &str, why: &Why) {
        // A policy's no-fit text is as long as the policy made it; the policy's name stays
        // readable at the end however long that is.
        let by = clip(by, MAX_MESSAGE_BYTES / 4);
        let suffix = format!(" (policy {by})");
        // An evicted job says so while it waits: the condition keeps its reason.
        let evicted_for = self
            .status
            .preemption
            .as_ref()
            .filter(|p| p.action == PreemptionAction::Evicted)
            .map(|p| clip(&p.for_job, MAX_MESSAGE_BYTES / 4));
        let prefix = evicted_for
            .as_ref()
            .map(|job| format!("evicted for {job}; "))
            .unwrap_or_default();
        let message = format!(
            "{prefix}{}{suffix}",
            clip(
                message,
                MAX_MESSAGE_BYTES.saturating_sub(suffix.len() + prefix.len())
            )
        );
        let same = self
            .status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == ALLOCATED_CONDITION && c.message.as_deref() == Some(&message));
        if !same {
            self.decided(DecisionAction::Waiting, &by, None, why, &message);
            self.plan.events.push(JobEvent {
                type_: EventType::Warning,
                reason: "FailedAllocation",
                message: message.clone(),
            });
            let reason = if evicted_for.is_some() {
                "Evicted"
            } else {
                "Unschedulable"
            };
            self.set_allocated_condition("False", reason, message);
        }
    }

    /// Puts a decision first in `status.decisions`, keeping the newest [`MAX_DECISIONS`]. Its
    /// texts are cut to [`MAX_DECISION_TEXT_BYTES`]: the condition keeps the whole message, and
    /// ten entries stay a few KiB of the object every cache holds.
    pub(super) fn decided(
        &mut self,
        action: DecisionAction,
        by: &str,
        fallback: Option<&str>,
        why: &Why,
        message: &str,
    ) {
        let entry = AllocationDecision {
            time: self.now.clone(),
            action,
            policy: clip(by, MAX_DECISION_TEXT_BYTES),
            sha256: why.sha256.clone(),
            host_changed: fallback.map(|f| clip(f, MAX_DECISION_TEXT_BYTES)),
            reason: why.reason.clone(),
            message: clip(message, MAX_DECISION_TEXT_BYTES),
        };
        let decisions = self.status.decisions.get_or_insert_with(Vec::new);
        decisions.insert(0, entry);
        decisions.truncate(MAX_DECISIONS);
    }

    pub(super) fn set_allocated_condition(&mut self, status: &str, reason: &str, message: String) {
        let message = clip(&message, MAX_MESSAGE_BYTES);
        let conditions = self.status.conditions.get_or_insert_with(Vec::new);
        let old = conditions
            .iter()
            .position(|c| c.type_ == ALLOCATED_CONDITION)
            .map(|i| conditions.remove(i));
        let transitioned = old.as_ref().is_none_or(|c| c.status != status);
        conditions.insert(
            0,
            JobCondition {
                type_: ALLOCATED_CONDITION.to_string(),
                status: status.to_string(),
                reason: Some(reason.to_string()),
                message: Some(message),
                last_update_time: Some(self.now.clone()),
                last_transition_time: if transitioned {
                    Some(self.now.clone())
                } else {
                    old.and_then(|c| c.last_transition_time)
                },
                observed_generation: self.job.metadata.generation,
            },
        );
    }
}
