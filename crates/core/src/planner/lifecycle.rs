//! The planner's rules at the ends of a job's life: a finished job's cleanup and TTL, a
//! suspended job, and the active deadline.
//!
//! Owns: what a terminal, suspended or overdue job is planned to. Must not touch: the phase
//! machine of an active job (the parent's).

use super::*;

impl Planner<'_> {
    /// Deletes the job's service unless it is already going.
    pub(super) fn delete_service(&mut self, service: Option<&CachedService>) {
        if let Some(svc) = service.filter(|s| s.metadata.deletion_timestamp.is_none()) {
            self.plan.actions.push(Action::DeleteService {
                name: svc.metadata.name.clone().unwrap_or_default(),
                uid: svc.metadata.uid.clone().unwrap_or_default(),
            });
        }
    }

    /// Succeeded and Failed are absorbing (15.11, Kubeflow Trainer's recurring bug): clean up by
    /// policy, never create.
    pub(super) fn terminal(&mut self, owned: &[&CachedPod], service: Option<&CachedService>) {
        if self.status.completion_timestamp.is_none() {
            self.status.completion_timestamp = Some(self.now.clone());
        }
        self.status.ready_replicas = 0;
        self.status.task_status = None;
        no_ready_replicas(&mut self.status);
        self.delete_service(service);
        for pod in owned.iter().filter(|p| !is_terminating(p)) {
            let delete = match self.job.spec.clean_pod_policy {
                CleanPodPolicy::All => true,
                CleanPodPolicy::Running => still_running(pod),
                CleanPodPolicy::None => false,
            };
            if delete {
                self.plan.actions.push(delete_pod(pod, "cleanPodPolicy"));
            }
        }
    }

    /// A suspended job (`spec.suspend`, batch/v1 Job's semantics): no pods and no service.
    /// Running pods are deleted with their own grace period; ranks, restarts and reschedules
    /// stay in status for the resume, and a preemptible job gives its allocation back.
    pub(super) fn suspended(&mut self, owned: &[&CachedPod], service: Option<&CachedService>) {
        self.transition(
            Phase::Suspended,
            SUSPENDED_REASON,
            "job is suspended: its pods and service are deleted until spec.suspend is false"
                .to_string(),
        );
        self.status.ready_replicas = 0;
        self.status.task_status = None;
        no_ready_replicas(&mut self.status);
        if self.job.spec.preemptible {
            self.status.allocation = None;
            let said = self.status.conditions.iter().flatten().any(|c| {
                c.type_ == ALLOCATED_CONDITION
                    && c.status == "False"
                    && c.reason.as_deref() == Some(SUSPENDED_REASON)
            });
            if !said {
                self.set_allocated_condition(
                    "False",
                    SUSPENDED_REASON,
                    "the job is suspended; it is placed again when resumed".to_string(),
                );
            }
        }
        self.delete_service(service);
        for pod in owned.iter().filter(|p| !is_terminating(p)) {
            self.plan.actions.push(delete_pod(pod, "suspended"));
        }
    }

    /// Evicted for a job of higher priority: back to Pending with its counters (restarts,
    /// reschedules, ranks) intact, pods deleted with their grace period, the service kept, the
    /// allocation given back. Not a restart: nothing of the job failed.
    pub(super) fn evicted(&mut self, evicted: &Preempted, owned: &[&CachedPod]) {
        let message = clip(&evicted.message, MAX_MESSAGE_BYTES);
        self.transition(Phase::Pending, EVICTED_REASON, message.clone());
        self.status.ready_replicas = 0;
        self.status.task_status = None;
        no_ready_replicas(&mut self.status);
        self.status.allocation = None;
        let why = Why {
            sha256: None,
            reason: None,
        };
        self.decided(DecisionAction::Evicted, &evicted.by, None, &why, &message);
        self.set_allocated_condition("False", "Evicted", message);
        self.status.preemption = Some(PreemptionStatus {
            time: self.now.clone(),
            action: PreemptionAction::Evicted,
            for_job: evicted.for_job.clone(),
            replicas_before: None,
        });
        for pod in owned.iter().filter(|p| !is_terminating(p)) {
            self.plan
                .actions
                .push(delete_pod(pod, "evicted for a job of higher priority"));
        }
    }

    /// When `spec.activeDeadlineSeconds` runs out, counted from `status.startTime`; `None`
    /// without a deadline or a start, or beyond the last representable time.
    pub(super) fn deadline(&self) -> Option<(i64, jiff::Timestamp)> {
        let seconds = self.job.spec.active_deadline_seconds?;
        let start = self.status.start_time.as_ref()?;
        if self.status.phase == Some(Phase::Suspended) {
            // Resuming resets the start: a suspended job's clock is stopped.
            return None;
        }
        let at = start
            .0
            .checked_add(jiff::SignedDuration::from_secs(seconds))
            .ok()?;
        Some((seconds, at))
    }

    /// `spec.activeDeadlineSeconds` if the job has been active longer.
    pub(super) fn deadline_exceeded(&self) -> Option<i64> {
        self.deadline()
            .filter(|(_, at)| self.now.0 >= *at)
            .map(|(seconds, _)| seconds)
    }

    pub(super) fn wake_at_deadline(&mut self) {
        if let Some((_, at)) = self.deadline() {
            self.wake_at(at);
        }
    }

    /// Asks for a pass at `at` (the earliest of all asked).
    pub(super) fn wake_at(&mut self, at: jiff::Timestamp) {
        let wait = std::time::Duration::try_from(at.duration_since(self.now.0))
            .unwrap_or_default()
            // The clock's rounding must not wake the job a moment early, to find nothing due.
            .saturating_add(std::time::Duration::from_millis(10));
        self.plan.wake_after = Some(self.plan.wake_after.map_or(wait, |w| w.min(wait)));
    }

    /// `spec.ttlSecondsAfterFinished` for a finished job: delete it once it has run out (from
    /// `status.completionTimestamp`, so an operator restart loses no timer), else wake then.
    pub(super) fn expire_after_ttl(&mut self) {
        let Some(ttl) = self.job.spec.ttl_seconds_after_finished else {
            return;
        };
        let Some(finished) = self.status.completion_timestamp.as_ref() else {
            return;
        };
        let Ok(at) = finished
            .0
            .checked_add(jiff::SignedDuration::from_secs(i64::from(ttl.max(0))))
        else {
            return;
        };
        if self.now.0 >= at {
            self.plan.delete_job = true;
        } else {
            self.wake_at(at);
        }
    }
}
