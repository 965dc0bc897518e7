//! The reconcile planner: a pure function from a DIJob and the pods and service observed for it
//! to the actions to take and the job's new status (spec sections 6 to 8, minus the bugs of
//! section 15; rules in docs/design/controller.md).
//!
//! Owns the phase state machine, pod classification, replica status, conditions, cleanup and the
//! choice of which pods to create or delete. It performs no I/O and reads no clock: the executor
//! passes `now` in and carries the plan out.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde_json::Value;

use crate::api::{
    AllocationDecision, CleanPodPolicy, DIJob, DIJobStatus, DecisionAction, JobCondition, Phase,
    PreemptionAction, PreemptionStatus, RestartPolicy, SmallMap, TaskReplicaStatus, labels,
};
use crate::build::{self, BuildContext, ReplicaSlot};
use crate::cached::{CachedMeta, CachedPod, CachedService, PodAnnotation, PodLabel};
use crate::placement::{Admission, Preempted, Preemption, RankNodes, Why};
use crate::ranks::RankTable;
use crate::validate;

/// Annotation holding a hash of what a pod was built from (its task's template and the job's
/// volumes), so that a template edit rolls exactly that task's pods. Pods without it (created
/// by DI-orchestrator before a migration) are taken as built from the template diorch first
/// saw them with (`status.adoptedTemplateHashes`).
pub const TEMPLATE_HASH_ANNOTATION: &str = crate::api::labels::ANNOTATION_TEMPLATE_HASH;

/// What the executor observed for one job, from its caches.
#[derive(Clone, Debug, Default)]
pub struct Observed<'a> {
    /// Every cached pod in the job's namespace carrying its `diengine/job` label, owned or not.
    pub pods: Vec<&'a CachedPod>,
    /// The cached service named `di-<job>`, if any.
    pub service: Option<&'a CachedService>,
    /// The allocator's answer, when the job is preemptible and needs an allocation.
    pub admission: Option<&'a Admission>,
}

/// Longest condition message or Event note the planner writes. Events over 1 KiB are refused
/// by the API server (events.k8s.io/v1 `note`), and a policy's `no-fit` text, a plugin's error or
/// a name in an invalid job are as long as their author made them.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// Most pods one reconcile creates. Every pod carries `DI_NODES` (one FQDN per replica of the
/// job), so a plan holding all of a large job's pods would cost memory in the square of its
/// replicas; the rest are created by the next passes, which the creations themselves trigger.
pub const MAX_CREATES_PER_PASS: usize = 32;

/// Reason of the Warning Event saying a pod's rank annotation was ignored.
pub const RANK_IGNORED_REASON: &str = "RankIgnored";

/// Reason of the Failed condition and Event of a job past its `activeDeadlineSeconds`
/// (batch/v1 Job's word).
pub const DEADLINE_EXCEEDED_REASON: &str = "DeadlineExceeded";

/// Reasons of the Suspended condition and of the Pending one a resumed job enters (batch/v1
/// Job's words).
pub const SUSPENDED_REASON: &str = "JobSuspended";
pub const RESUMED_REASON: &str = "JobResumed";

/// Reasons of the Pending condition and Event of a job evicted for a job of higher priority,
/// and of the Event of a job shrunk for one.
pub const EVICTED_REASON: &str = "JobEvicted";
pub const SHRUNK_REASON: &str = "JobShrunk";

/// Reason of the Failed condition and Event of a job whose pod exited with one of
/// `spec.nonRetryableExitCodes`.
pub const NON_RETRYABLE_REASON: &str = "NonRetryableExitCode";

/// `text` cut to at most `max` bytes on a character boundary, ending in `…` when cut.
pub fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    const ELLIPSIS: &str = "…";
    let cut = text.floor_char_boundary(max.saturating_sub(ELLIPSIS.len()));
    format!("{}{ELLIPSIS}", &text[..cut])
}

/// Entries kept in `status.decisions` (newest first).
pub const MAX_DECISIONS: usize = 10;

/// Most bytes of a decision entry's `policy`, `hostChanged` and `message` (its `reason` is
/// bounded by [`crate::reason::MAX_REASON_BYTES`]).
pub const MAX_DECISION_TEXT_BYTES: usize = 256;

/// Condition (not a phase) saying whether a preemptible job holds an allocation, and from
/// which policy. Kept first in `status.conditions`, so the current phase stays last.
pub const ALLOCATED_CONDITION: &str = "Allocated";

/// Kind of an Event the executor records on the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// An Event to record on the DIJob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobEvent {
    pub type_: EventType,
    pub reason: &'static str,
    pub message: String,
}

/// A phase change decided by this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    pub from: Option<Phase>,
    pub to: Phase,
    pub reason: &'static str,
    pub message: String,
}

/// One write to the API server.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    CreatePod(Box<Pod>),
    /// Delete a pod, guarded by its uid. `grace` 0 for pods whose containers have stopped,
    /// `None` (the pod's own grace period) for pods that may still be running.
    DeletePod {
        name: String,
        uid: String,
        grace: Option<u32>,
        why: &'static str,
    },
    CreateService(Box<Service>),
    /// Create (or update the minMember of) the job's gang-scheduler PodGroup; carried out
    /// before the pods of the same plan.
    EnsurePodGroup(Box<build::PodGroup>),
    DeleteService {
        name: String,
        uid: String,
    },
}

/// The outcome of planning one reconcile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Task-name defaulting (a JSON patch of the spec). When set, nothing else is planned: the
    /// update brings the job back with its names.
    pub spec_patch: Option<Value>,
    /// The job's new status, when it differs from the current one.
    pub status: Option<DIJobStatus>,
    pub transition: Option<Transition>,
    pub actions: Vec<Action>,
    pub events: Vec<JobEvent>,
    /// Events about what this pass saw but will see again on every pass while it lasts (a pod
    /// whose rank annotation is ignored): the executor records each once per job, not once per
    /// reconcile.
    pub once: Vec<JobEvent>,
    /// The status carries a new allocation: it is written before pods are placed on it.
    pub allocated: bool,
    /// The status counts a pod restart (`restartPolicy: RestartPod`): written before the
    /// failed pod is deleted, so it is counted once.
    pub counted: bool,
    /// `spec.ttlSecondsAfterFinished` has run out: delete the job (its pods and service go
    /// with it through their owner references).
    pub delete_job: bool,
    /// When to look at the job again even if nothing changes: the active deadline or the
    /// finished job's TTL runs out then.
    pub wake_after: Option<std::time::Duration>,
}

impl Plan {
    /// Whether the status must be written before the actions run. A transition that counts
    /// (Restarting, Rescheduling) or ends the job is committed first, guarded by the job's
    /// resourceVersion, so the deletions that follow can never make it be missed or counted
    /// twice. Plain creations go first: a rank they use is recovered from the pod if the status
    /// write is lost.
    pub fn status_first(&self) -> bool {
        self.allocated
            || self.counted
            || self
                .transition
                .as_ref()
                .is_some_and(|t| !matches!(t.to, Phase::Pending | Phase::Starting | Phase::Running))
    }

    /// Whether carrying the plan out writes nothing: no spec patch, status, transition, action
    /// or Event, and no deletion of the job.
    pub fn writes_nothing(&self) -> bool {
        self.spec_patch.is_none()
            && self.status.is_none()
            && self.transition.is_none()
            && self.actions.is_empty()
            && self.events.is_empty()
            && !self.delete_job
    }

    /// Short text of the actions for the reconcile log line.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if self.spec_patch.is_some() {
            parts.push("default task names".to_string());
        }
        if self.delete_job {
            parts.push("delete job (ttlSecondsAfterFinished)".to_string());
        }
        if let Some(t) = &self.transition {
            let from = t.from.map_or("\"\"", Phase::as_str);
            parts.push(format!("{from}->{}", t.to));
        }
        for action in &self.actions {
            parts.push(match action {
                Action::CreatePod(p) => {
                    format!("create pod {}", p.metadata.name.as_deref().unwrap_or(""))
                }
                Action::DeletePod { name, why, .. } => format!("delete pod {name} ({why})"),
                Action::CreateService(s) => {
                    format!(
                        "create service {}",
                        s.metadata.name.as_deref().unwrap_or("")
                    )
                }
                Action::DeleteService { name, .. } => format!("delete service {name}"),
                Action::EnsurePodGroup(pg) => format!(
                    "ensure podgroup {} (minMember {})",
                    pg.metadata.name.as_deref().unwrap_or_default(),
                    pg.spec.min_member
                ),
            });
        }
        if parts.is_empty() {
            "none".to_string()
        } else {
            parts.join(", ")
        }
    }
}

/// How a live pod counts for its job (spec 6.6, with section 15's fixes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodState {
    /// Not yet running, or running but not ready.
    Waiting,
    /// Running with its Ready condition true: the whole pod, not each container (spec 15.8).
    Ready,
    Succeeded,
    /// The worker failed: counts against backoffLimit.
    Failed,
    /// The pod was rejected by its node or preempted: not the worker's fault, so it does not
    /// count as a failure, but it is replaced (DI-orchestrator left such pods forever, 15.9).
    Lost,
}

/// Classifies a pod that is not being deleted.
pub fn pod_state(pod: &CachedPod, preemptible: bool) -> PodState {
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    match phase {
        "Succeeded" => PodState::Succeeded,
        "Failed" | "Unknown" => {
            let reason = status.and_then(|s| s.reason.as_deref()).unwrap_or("");
            let preempted = preemptible
                && status
                    .and_then(|s| s.container_statuses.as_ref())
                    .is_some_and(|cs| {
                        cs.iter().any(|c| {
                            c.state
                                .as_ref()
                                .and_then(|s| s.terminated.as_ref())
                                .is_some_and(|t| t.exit_code == 143)
                        })
                    });
            // Kubelet admission rejections are `OutOf<resource>` (DI-orchestrator's `Outof`
            // prefix never matched them).
            let rejected = reason == "UnexpectedAdmissionError"
                || reason
                    .get(..5)
                    .is_some_and(|p| p.eq_ignore_ascii_case("outof"));
            if rejected || preempted {
                PodState::Lost
            } else {
                PodState::Failed
            }
        }
        "Running" if is_ready(pod) => PodState::Ready,
        _ => PodState::Waiting,
    }
}

fn is_ready(pod: &CachedPod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn is_terminating(pod: &CachedPod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Whether `meta` names the object with `uid` as its controller.
fn owned_by(meta: &CachedMeta, uid: &str) -> bool {
    meta.owned_by(uid)
}

fn annotation(pod: &CachedPod, key: PodAnnotation) -> Option<&str> {
    pod.annotation(key)
}

/// FNV-1a of what a task's pods are built from. Hand-written because it must stay stable across
/// Rust and crate versions (an operator upgrade must not roll every pod); `std`'s hasher is not.
pub fn template_hash(job: &DIJob, task_index: usize) -> String {
    let task = job.spec.tasks.get(task_index);
    let input = serde_json::to_vec(&(
        task.map(|t| &t.template),
        task.and_then(|t| t.type_),
        &job.spec.volumes,
    ))
    .unwrap_or_default();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in input {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// `status.taskReplicaStatus`: each task's desired slots and, of those, the Ready pods. `None`
/// for a job without tasks.
fn task_replica_status(
    job: &DIJob,
    slots: &[Slot<'_>],
    preemptible: bool,
) -> Option<SmallMap<TaskReplicaStatus>> {
    let mut counts = vec![TaskReplicaStatus::default(); job.spec.tasks.len()];
    for slot in slots {
        if let Some(c) = counts.get_mut(slot.task_index) {
            c.replicas += 1;
            if slot
                .live
                .is_some_and(|p| pod_state(p, preemptible) == PodState::Ready)
            {
                c.ready_replicas += 1;
            }
        }
    }
    let by_name: SmallMap<TaskReplicaStatus> = job
        .spec
        .tasks
        .iter()
        .zip(counts)
        .map(|(t, c)| (t.name.clone().unwrap_or_default(), c))
        .collect();
    (!by_name.is_empty()).then_some(by_name)
}

/// A job with no pods running (finished or suspended) keeps each task's scale, none ready.
fn no_ready_replicas(status: &mut DIJobStatus) {
    for task in status
        .task_replica_status
        .iter_mut()
        .flat_map(|m| m.iter_mut().map(|(_, task)| task))
    {
        task.ready_replicas = 0;
    }
}

/// Whole seconds `job` has been in its current phase at `now` ([`crate::api::phase_since`]).
pub fn time_in_phase(meta: &ObjectMeta, status: Option<&DIJobStatus>, now: jiff::Timestamp) -> i64 {
    crate::api::seconds_since(crate::api::phase_since(meta, status).1, now)
}

/// Plans one reconcile of `job`. `now` stamps conditions and completionTimestamp.
pub fn plan(job: &DIJob, observed: &Observed<'_>, ctx: &BuildContext, now: &Time) -> Plan {
    let current = job.status.clone().unwrap_or_default();
    // A resize decided by the allocator is planned as if already recorded: the slots, ranks and
    // DI_NODES follow the new counts, and the status write records them.
    let resized;
    let job = match observed.admission {
        Some(
            Admission::Placed {
                replicas: Some(counts),
                ..
            }
            | Admission::Preempted(Preempted {
                action:
                    Preemption::Shrink {
                        replicas: counts, ..
                    },
                ..
            }),
        ) if job.spec.preemptible && !current.phase.is_some_and(Phase::is_terminal) => {
            resized = build::with_task_replicas(job, counts);
            &resized
        }
        _ => job,
    };
    let phase = current.phase;
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let owned: Vec<&CachedPod> = observed
        .pods
        .iter()
        .copied()
        .filter(|p| owned_by(&p.metadata, &uid))
        .collect();
    let service = observed.service.filter(|s| owned_by(&s.metadata, &uid));

    let mut out = Planner {
        job,
        ctx,
        now,
        status: job.status.clone().unwrap_or_default(),
        plan: Plan::default(),
    };
    if phase.is_some_and(Phase::is_terminal) {
        out.terminal(&owned, service);
        out.expire_after_ttl();
    } else if let Err(invalid) = validate::validate(job) {
        // Judged on the effective names, before any defaulting patch: a patch of an invalid job
        // could be refused by the validating webhook and would then never let it fail.
        out.transition(Phase::Failed, "JobFailed", invalid.condition_message());
    } else if let Some(patch) = validate::task_name_defaults(job) {
        out.plan.spec_patch = Some(patch);
    } else if job.is_suspended() {
        out.suspended(&owned, service);
    } else if let Some(Admission::Preempted(
        evicted @ Preempted {
            action: Preemption::Evict,
            ..
        },
    )) = observed.admission
        && job.spec.preemptible
    {
        out.evicted(evicted, &owned);
    } else if let Some(seconds) = out.deadline_exceeded() {
        // Cleaned by cleanPodPolicy on the next pass, from the Failed status this one writes.
        out.transition(
            Phase::Failed,
            DEADLINE_EXCEEDED_REASON,
            format!("job was active longer than its activeDeadlineSeconds ({seconds} s)"),
        );
    } else {
        out.active(&owned, observed);
        out.wake_at_deadline();
    }
    if out.plan.spec_patch.is_none() {
        // Every condition is re-judged on every pass, so each holds for the spec planned from
        // (metav1.Condition's meaning of the field), as the status as a whole does.
        let generation = job.metadata.generation;
        out.status.observed_generation = generation;
        for c in out.status.conditions.iter_mut().flatten() {
            c.observed_generation = generation;
        }
    }
    let mut plan = out.plan;
    if out.status != current {
        plan.status = Some(out.status);
    }
    plan
}

/// Whether `new` differs from `old` only in the replica counts (`replicas`, `readyReplicas`,
/// `taskStatus`, `taskReplicaStatus`): a status write that shows no phase, condition, rank,
/// allocation, restart or timestamp, which the executor may hold back for a moment to fold the
/// counts of several pod changes into one write.
pub fn counts_only(old: Option<&DIJobStatus>, new: &DIJobStatus) -> bool {
    let Some(old) = old else {
        return false;
    };
    let without_counts = |s: &DIJobStatus| DIJobStatus {
        replicas: 0,
        ready_replicas: 0,
        task_status: None,
        task_replica_status: None,
        ..s.clone()
    };
    without_counts(old) == without_counts(new)
}

/// A plan that only marks the job Failed with `message`: for errors found while carrying out a
/// plan that retrying cannot fix (the API server refusing a pod as invalid).
pub fn fail(job: &DIJob, message: String, now: &Time) -> Plan {
    let current = job.status.clone().unwrap_or_default();
    if current.phase.is_some_and(Phase::is_terminal) {
        return Plan::default();
    }
    let ctx = BuildContext::default();
    let mut out = Planner {
        job,
        ctx: &ctx,
        now,
        status: current.clone(),
        plan: Plan::default(),
    };
    out.transition(Phase::Failed, "JobFailed", message);
    let mut plan = out.plan;
    plan.status = Some(out.status);
    plan
}

struct Planner<'a> {
    job: &'a DIJob,
    ctx: &'a BuildContext,
    now: &'a Time,
    status: DIJobStatus,
    plan: Plan,
}

/// Pod counts over the desired slots, for the state machine.
#[derive(Clone, Copy, Debug)]
struct Counts {
    r: i32,
    ready: i32,
    succeeded: i32,
    failed: usize,
    all_present: bool,
    mismatch: bool,
    extra: bool,
}

/// A desired replica slot and what was observed for it.
struct Slot<'a> {
    pod_name: String,
    task_index: usize,
    local_rank: i32,
    live: Option<&'a CachedPod>,
    /// A pod of this name exists but is being deleted, or is not the job's: the name is taken.
    blocked: bool,
}

impl Planner<'_> {
    /// Moves to `to`: condition bookkeeping (spec 6.4), counters and completionTimestamp (spec
    /// 7.1, fixed by 15.11 and 15.12), and the phase Event.
    fn transition(&mut self, to: Phase, reason: &'static str, message: String) {
        let from = self.status.phase;
        if from == Some(to) {
            return;
        }
        // Messages name tasks and quote policies before anything bounded their length.
        let message = clip(&message, MAX_MESSAGE_BYTES);
        self.status.phase = Some(to);
        match to {
            // Saturating: the counters are in status, which others can write too.
            Phase::Restarting => self.status.restarts = self.status.restarts.saturating_add(1),
            Phase::Rescheduling => {
                self.status.reschedules = self.status.reschedules.saturating_add(1)
            }
            Phase::Succeeded | Phase::Failed => {
                self.status.completion_timestamp = Some(self.now.clone());
                self.status.ready_replicas = 0;
                self.status.task_status = None;
            }
            _ => {}
        }
        let conditions = self.status.conditions.get_or_insert_with(Vec::new);
        conditions.retain(|c| c.type_ != to.as_str());
        for c in conditions
            .iter_mut()
            .filter(|c| c.type_ != ALLOCATED_CONDITION)
        {
            if c.status != "False" {
                c.status = "False".to_string();
                c.last_update_time = Some(self.now.clone());
                c.last_transition_time = Some(self.now.clone());
            }
        }
        conditions.push(JobCondition {
            type_: to.as_str().to_string(),
            status: "True".to_string(),
            reason: Some(reason.to_string()),
            message: Some(message.clone()),
            last_update_time: Some(self.now.clone()),
            last_transition_time: Some(self.now.clone()),
            observed_generation: self.job.metadata.generation,
        });
        let (type_, event_message) = phase_event(to);
        let event_message = match (to, reason) {
            // A job refused by validation says why, not "some replicas are failed".
            (Phase::Failed, "JobFailed") if !message.starts_with("job failed since") => {
                message.clone()
            }
            // diorch's own reasons, which DI-orchestrator has no text for.
            (
                _,
                DEADLINE_EXCEEDED_REASON
                | SUSPENDED_REASON
                | RESUMED_REASON
                | NON_RETRYABLE_REASON
                | EVICTED_REASON,
            ) => message.clone(),
            _ => event_message.to_string(),
        };
        self.plan.events.push(JobEvent {
            type_,
            reason,
            message: event_message,
        });
        self.plan.transition = Some(Transition {
            from,
            to,
            reason,
            message,
        });
    }

    /// `status.adoptedTemplateHashes`, kept and read: a task with live pods lacking the hash
    /// annotation records the template hash of this pass the first time (the template they
    /// are taken to be built from); a task without such pods loses its entry. Returns the
    /// recorded hash per task index.
    fn adopted_template_hashes(&mut self, slots: &[Slot<'_>]) -> Vec<Option<String>> {
        let job = self.job;
        let mut recorded = self
            .status
            .adopted_template_hashes
            .take()
            .unwrap_or_default();
        let mut unhashed = vec![false; job.spec.tasks.len()];
        for slot in slots {
            let live_unhashed = slot
                .live
                .is_some_and(|p| annotation(p, PodAnnotation::TemplateHash).is_none());
            if let (true, Some(u)) = (live_unhashed, unhashed.get_mut(slot.task_index)) {
                *u = true;
            }
        }
        let mut by_task = vec![None; job.spec.tasks.len()];
        let mut keep = BTreeMap::new();
        for (index, task) in job.spec.tasks.iter().enumerate() {
            if !unhashed[index] {
                continue;
            }
            let name = task.name.clone().unwrap_or_default();
            let hash = recorded
                .remove(&name)
                .unwrap_or_else(|| template_hash(job, index));
            by_task[index] = Some(hash.clone());
            keep.insert(name, hash);
        }
        self.status.adopted_template_hashes = (!keep.is_empty()).then_some(keep);
        by_task
    }

    fn active(&mut self, owned: &[&CachedPod], observed: &Observed<'_>) {
        let job = self.job;
        let preemptible = job.spec.preemptible;
        let uid = job.metadata.uid.as_deref().unwrap_or_default();
        // A new job (or one whose phase someone set to Unknown, which the operator never uses)
        // starts over in Pending, and so does a resumed one; that is this pass's one
        // transition. The active deadline counts from here.
        let entering = !matches!(
            self.status.phase,
            Some(p) if p != Phase::Unknown && p != Phase::Suspended
        );
        if entering {
            if self.status.phase == Some(Phase::Suspended) {
                self.transition(
                    Phase::Pending,
                    RESUMED_REASON,
                    "job is resumed: its pods are created again".to_string(),
                );
            } else {
                self.transition(Phase::Pending, "JobPending", "job created.".to_string());
            }
            self.status.start_time = Some(self.now.clone());
        } else if self.status.start_time.is_none() {
            // Started before the operator recorded starts: its deadline counts from now.
            self.status.start_time = Some(self.now.clone());
        }
        let phase = self.status.phase.unwrap_or(Phase::Pending);

        // Slots and ranks.
        let desired = build::desired_slots(job);
        let desired_names: Vec<String> = desired.iter().map(|(n, _, _)| n.clone()).collect();
        let live: BTreeMap<&str, &CachedPod> = owned
            .iter()
            .filter(|p| !is_terminating(p))
            .map(|p| (p.metadata.name.as_deref().unwrap_or_default(), *p))
            .collect();
        let taken: BTreeSet<&str> = observed
            .pods
            .iter()
            .filter(|p| is_terminating(p) || !owned_by(&p.metadata, uid))
            .filter_map(|p| p.metadata.name.as_deref())
            .collect();
        let table = self.rank_table(&live, desired_names.len());
        let ranks = table.plan(&desired_names);
        self.status.ranks = Some(ranks.entries().to_vec());
        let slots: Vec<Slot<'_>> = desired
            .into_iter()
            .map(|(pod_name, task_index, local_rank)| Slot {
                live: live.get(pod_name.as_str()).copied(),
                blocked: taken.contains(pod_name.as_str()),
                pod_name,
                task_index,
                local_rank,
            })
            .collect();
        let r = slots.len() as i32;

        // Where a preemptible job's replicas go.
        let mut placed = !preemptible;
        if preemptible {
            match observed.admission {
                Some(Admission::Placed {
                    nodes,
                    by,
                    fallback,
                    replan,
                    replicas,
                    why,
                }) => {
                    let allocation = nodes.by_rank(&desired_names, &ranks);
                    // The same allocation again (a retried answer) is nothing new.
                    if self.status.allocation.as_deref() != Some(allocation.as_slice()) {
                        self.allocated(
                            allocation,
                            by,
                            fallback.as_deref(),
                            *replan,
                            replicas.is_some(),
                            why,
                        );
                        if replicas.is_some() {
                            self.resized_event();
                        }
                    }
                    if replicas.is_some() || !*replan {
                        self.restored(*replan);
                    }
                    placed = true;
                }
                Some(Admission::Preempted(Preempted {
                    action: Preemption::Shrink { nodes, before, .. },
                    for_job,
                    by,
                    message,
                })) => {
                    let allocation = nodes.by_rank(&desired_names, &ranks);
                    if self.status.allocation.as_deref() != Some(allocation.as_slice()) {
                        self.shrunk(allocation, before, for_job, by, message);
                    }
                    placed = true;
                }
                // Evicted above, before this branch; nothing placed.
                Some(Admission::Preempted(_)) => {}
                Some(Admission::Waiting { message, by, why }) => self.waiting(message, by, why),
                // Allocated already (or the allocator has not answered: nothing is placed).
                None => {
                    placed = self
                        .status
                        .allocation
                        .as_ref()
                        .is_some_and(|a| !a.is_empty())
                }
            }
        }

        // A rank freed by a scale-in holds no node: its allocation entry goes too.
        if preemptible && let Some(allocation) = self.status.allocation.as_mut() {
            for (r, node) in allocation.iter_mut().enumerate() {
                if ranks.entries().get(r).is_none_or(String::is_empty) {
                    node.clear();
                }
            }
        }

        // What differs from the spec.
        let allocation = self.status_allocation();
        let mut failed = Vec::new();
        let mut replace = Vec::new(); // live pods to delete and re-create
        let mut succeeded = 0;
        let mut ready = 0;
        let mut missing = Vec::new();
        let adopted = self.adopted_template_hashes(&slots);
        // Each task's hash once per pass: it serialises the task's whole template.
        let mut hashes: Vec<Option<String>> = vec![None; job.spec.tasks.len()];
        let mut hash_of = |task: usize| -> String {
            match hashes.get_mut(task) {
                Some(cached) => cached
                    .get_or_insert_with(|| template_hash(job, task))
                    .clone(),
                None => template_hash(job, task),
            }
        };
        for slot in &slots {
            let Some(pod) = slot.live else {
                missing.push(slot);
                continue;
            };
            match pod_state(pod, preemptible) {
                PodState::Failed => failed.push((pod, slot.task_index)),
                PodState::Lost => replace.push((pod, "lost")),
                PodState::Succeeded => succeeded += 1,
                PodState::Ready => ready += 1,
                PodState::Waiting => {}
            }
            let hash = annotation(pod, PodAnnotation::TemplateHash)
                .or_else(|| adopted.get(slot.task_index).and_then(Option::as_deref));
            if hash.is_some_and(|h| h != hash_of(slot.task_index)) {
                replace.push((pod, "template changed"));
            } else if preemptible && !allocation.is_empty() {
                let rank = ranks.rank_of(&slot.pod_name);
                let want = rank
                    .and_then(|r| allocation.as_slice().get(r))
                    .map(String::as_str);
                if want.is_some() && annotation(pod, PodAnnotation::Node) != want {
                    replace.push((pod, "allocation changed"));
                }
            }
        }
        replace.dedup_by(|a, b| std::ptr::eq(a.0, b.0));
        let desired_set: BTreeSet<&str> = slots.iter().map(|s| s.pod_name.as_str()).collect();
        let mut extra: Vec<&CachedPod> = live
            .iter()
            .filter(|(name, _)| !desired_set.contains(*name))
            .map(|(_, p)| *p)
            .collect();
        // Scale-in removes the highest ranks first.
        extra.sort_by_key(|p| {
            std::cmp::Reverse(
                annotation(p, PodAnnotation::Rank)
                    .and_then(|r| r.parse::<i64>().ok())
                    .unwrap_or(i64::MAX),
            )
        });
        // `restartPolicy: RestartPod`: a failed pod is replaced in place, within its task's
        // budget; beyond it, or under RestartJob, the failure is the job's.
        let in_place_task = |task_index: usize| {
            job.spec
                .tasks
                .get(task_index)
                .and_then(|t| t.restart_policy)
                == Some(RestartPolicy::RestartPod)
        };
        let fatal = failed.iter().find_map(|(pod, _)| self.non_retryable(pod));
        let mut in_place = Vec::new();
        let failed: Vec<&CachedPod> = failed
            .into_iter()
            .filter_map(|(pod, task_index)| {
                if in_place_task(task_index) && self.count_pod_restart(pod) {
                    in_place.push(pod);
                    None
                } else {
                    Some(pod)
                }
            })
            .collect();
        self.prune_counted_failures(owned);
        // While Starting or Running, a RestartPod task's missing pod is re-created in place,
        // not by rescheduling the job.
        let steady = matches!(phase, Phase::Starting | Phase::Running);
        let mismatch = missing
            .iter()
            .any(|s| !(steady && in_place_task(s.task_index)))
            || !extra.is_empty()
            || !replace.is_empty();

        // Replica status (spec 6.5), ready pods not containers.
        self.status.replicas = r;
        self.status.ready_replicas = live
            .values()
            .filter(|p| pod_state(p, preemptible) == PodState::Ready)
            .count() as i32;
        let mut task_status: SmallMap<SmallMap<i32>> = SmallMap::new();
        for pod in owned {
            let task = pod
                .label(PodLabel::TaskName)
                .unwrap_or_default()
                .to_string();
            let pod_phase = pod
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_else(|| "Pending".to_string());
            *task_status
                .entry(task)
                .or_default()
                .entry(pod_phase)
                .or_default() += 1;
        }
        self.status.task_status = (!task_status.is_empty()).then_some(task_status);
        self.status.task_replica_status = task_replica_status(job, &slots, preemptible);

        // The state machine (spec 6.4): one transition per pass, first match wins.
        if let Some(message) = fatal.filter(|_| !entering) {
            self.transition(Phase::Failed, NON_RETRYABLE_REASON, message);
        } else if !entering {
            let counts = Counts {
                r,
                ready,
                succeeded,
                failed: failed.len(),
                all_present: missing.is_empty(),
                mismatch,
                extra: !extra.is_empty(),
            };
            self.step(phase, counts, &allocation);
        }

        // Converge pods in the phases that change them.
        let phase = self.status.phase.unwrap_or(Phase::Pending);
        let converging = matches!(
            phase,
            Phase::Pending | Phase::Restarting | Phase::Rescheduling
        );
        // Starting or Running: only RestartPod tasks' failed pods are replaced, in place.
        let replacing = matches!(phase, Phase::Starting | Phase::Running);
        if placed && (converging || replacing) {
            // A pod can be failed and scaled in and stale at once: delete it once.
            let mut deleted = BTreeSet::new();
            let victims: Vec<(&CachedPod, &'static str)> = if converging {
                failed
                    .iter()
                    .map(|p| (*p, "failed"))
                    .chain(
                        in_place
                            .iter()
                            .map(|p| (*p, "failed (restartPolicy RestartPod)")),
                    )
                    .chain(extra.iter().map(|p| (*p, "scaled in")))
                    .chain(replace.iter().copied())
                    .collect()
            } else {
                in_place
                    .iter()
                    .map(|p| (*p, "failed (restartPolicy RestartPod)"))
                    .collect()
            };
            for (pod, why) in victims {
                if deleted.insert(pod.metadata.uid.as_deref().unwrap_or_default()) {
                    self.plan.actions.push(delete_pod(pod, why));
                }
            }
            let creatable: Vec<_> = missing
                .iter()
                .filter(|s| !s.blocked && (converging || in_place_task(s.task_index)))
                .take(MAX_CREATES_PER_PASS)
                .collect();
            // Built only for a pass that creates: most passes create nothing.
            let world = (!creatable.is_empty()).then(|| build::world(job, &ranks, self.ctx));
            for slot in creatable {
                let Some(world) = world.as_ref() else { break };
                let Some(rank) = ranks.rank_of(&slot.pod_name) else {
                    continue;
                };
                let replica = ReplicaSlot {
                    task_index: slot.task_index,
                    local_rank: slot.local_rank,
                    global_rank: rank as i32,
                };
                let node = if preemptible {
                    allocation.as_slice().get(rank).map(String::as_str)
                } else {
                    None
                };
                if let Some(mut pod) = build::build_pod(job, &replica, world, self.ctx, node) {
                    pod.metadata
                        .annotations
                        .get_or_insert_with(BTreeMap::new)
                        .insert(
                            TEMPLATE_HASH_ANNOTATION.to_string(),
                            hash_of(slot.task_index),
                        );
                    self.plan.actions.push(Action::CreatePod(Box::new(pod)));
                }
            }
        }
        // The gang scheduler must know the group before it sees any of its pods.
        if let Some(gang) = &self.ctx.gang
            && self
                .plan
                .actions
                .iter()
                .any(|a| matches!(a, Action::CreatePod(_)))
        {
            self.plan.actions.insert(
                0,
                Action::EnsurePodGroup(Box::new(build::build_pod_group(job, gang.kind, r))),
            );
        }
        // A service of that name that is not the job's, or is being deleted, takes the name: wait.
        if observed.service.is_none() {
            self.plan
                .actions
                .push(Action::CreateService(Box::new(build::build_service(job))));
        }
    }

    /// Why `pod` failing must fail the job at once: a container exited with one of
    /// `spec.nonRetryableExitCodes`.
    fn non_retryable(&self, pod: &CachedPod) -> Option<String> {
        let codes = self.job.spec.non_retryable_exit_codes.as_deref()?;
        let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
        statuses.iter().find_map(|c| {
            let code = c.state.as_ref()?.terminated.as_ref()?.exit_code;
            codes.contains(&code).then(|| {
                format!(
                    "job failed since pod {} failed: container {} exited with code {code}, listed in nonRetryableExitCodes",
                    pod.metadata.name.as_deref().unwrap_or_default(),
                    c.name
                )
            })
        })
    }

    /// Counts the failed `pod` of a RestartPod task as one pod restart of its task, once per
    /// pod (its uid is remembered while it exists); false when the task's count has reached
    /// backoffLimit, so the failure is the job's.
    fn count_pod_restart(&mut self, pod: &CachedPod) -> bool {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if self
            .status
            .counted_failures
            .iter()
            .flatten()
            .any(|u| *u == uid)
        {
            return true;
        }
        let task = pod
            .label(PodLabel::TaskName)
            .unwrap_or_default()
            .to_string();
        let done = self
            .status
            .pod_restarts
            .as_ref()
            .and_then(|r| r.get(&task).copied())
            .unwrap_or(0);
        if self
            .job
            .spec
            .backoff_limit
            .is_some_and(|limit| done >= limit)
        {
            return false;
        }
        self.status
            .pod_restarts
            .get_or_insert_with(BTreeMap::new)
            .insert(task, done.saturating_add(1));
        self.status
            .counted_failures
            .get_or_insert_with(Vec::new)
            .push(uid);
        // Written under the job's resourceVersion before the pod is deleted, as a job restart
        // is: counted exactly once.
        self.plan.counted = true;
        true
    }

    /// Forgets counted failures whose pods are gone (the list stays as small as the pods
    /// being replaced).
    fn prune_counted_failures(&mut self, owned: &[&CachedPod]) {
        if let Some(counted) = self.status.counted_failures.as_mut() {
            counted.retain(|uid| {
                owned
                    .iter()
                    .any(|p| p.metadata.uid.as_deref() == Some(uid.as_str()))
            });
            if counted.is_empty() {
                self.status.counted_failures = None;
            }
        }
    }

    /// The phase transition for this pass, if any.
    fn step(&mut self, phase: Phase, c: Counts, allocation: &RankNodes) {
        let r = c.r;
        if c.all_present && c.succeeded == r && !c.extra {
            self.transition(
                Phase::Succeeded,
                "JobSucceeded",
                "job succeeded since all the replicas are succeeded.".to_string(),
            );
        } else if c.failed > 0 && phase != Phase::Restarting {
            let n = c.failed;
            let within = self
                .job
                .spec
                .backoff_limit
                .is_none_or(|limit| self.status.restarts < limit);
            if within {
                self.transition(
                    Phase::Restarting,
                    "JobRestarting",
                    format!("job is restarting since {n} pods failed."),
                );
            } else {
                self.transition(
                    Phase::Failed,
                    "JobFailed",
                    format!("job failed since {n} pods failed. and exceed backoff limit"),
                );
            }
        } else if c.mismatch && matches!(phase, Phase::Starting | Phase::Running) {
            let message = if phase == Phase::Running {
                format!(
                    "job is rescheduling since replicas changed, replicas: {r}, allocation: [{}].",
                    allocation.as_slice().join(" ")
                )
            } else {
                "job is rescheduling since replicas or allocation changed.".to_string()
            };
            self.transition(Phase::Rescheduling, "JobRescheduling", message);
        } else if !c.mismatch && c.failed == 0 {
            match phase {
                Phase::Pending => self.transition(
                    Phase::Starting,
                    "JobStarting",
                    "job is starting since all pods are created.".to_string(),
                ),
                Phase::Restarting | Phase::Rescheduling => self.transition(
                    Phase::Starting,
                    "JobStarting",
                    format!("job is starting since the created pods {r} are matched replicas {r}."),
                ),
                Phase::Starting if c.ready == r => self.transition(
                    Phase::Running,
                    "JobRunning",
                    "job is running since all pods are ready.".to_string(),
                ),
                _ => {}
            }
        }
    }

    /// The persisted rank table, plus the ranks of live pods it does not know (created just
    /// before a lost status write, or by DI-orchestrator before a migration). Their annotations
    /// are taken only within the job's size: the ranks the table holds, the job's slots now, or
    /// its tasks at their largest, whichever is most (bounded by validation). Others are
    /// reported once and left to `plan`.
    fn rank_table(&mut self, live: &BTreeMap<&str, &CachedPod>, slots: usize) -> RankTable {
        let persisted = RankTable::from_status(self.status.ranks.as_deref());
        let largest: usize = self
            .job
            .spec
            .tasks
            .iter()
            .map(|t| usize::try_from(t.replicas.max(t.max_replicas())).unwrap_or(0))
            .fold(0, usize::saturating_add);
        let size = persisted.len().max(slots).max(largest);
        let unknown = live
            .iter()
            .filter(|(name, _)| persisted.rank_of(name).is_none())
            .map(|(name, pod)| (*name, annotation(pod, PodAnnotation::Rank)));
        let (table, ignored) = persisted.adopt(unknown, size);
        let last = size.min(super::ranks::MAX_RANKS).saturating_sub(1);
        for i in ignored {
            self.plan.once.push(JobEvent {
                type_: EventType::Warning,
                reason: RANK_IGNORED_REASON,
                message: format!(
                    "pod {}: annotation {}=\"{}\" is not a rank of this job (0 to {last}); ignored",
                    i.pod,
                    labels::ANNOTATION_RANK,
                    i.value
                ),
            });
        }
        table
    }
}

/// The Event DI-orchestrator records on entering `phase` (spec 6.7).
fn phase_event(phase: Phase) -> (EventType, &'static str) {
    match phase {
        Phase::Pending => (EventType::Normal, "job created."),
        Phase::Starting => (
            EventType::Normal,
            "job is starting since all replicas are created.",
        ),
        Phase::Running => (
            EventType::Normal,
            "job is running since all replicas are ready.",
        ),
        Phase::Restarting => (
            EventType::Warning,
            "job is restarting since conditions changed.",
        ),
        Phase::Rescheduling => (
            EventType::Warning,
            "job is rescheduling since replicas or allocation changed.",
        ),
        Phase::Failed => (
            EventType::Warning,
            "job is failed since some replicas are failed.",
        ),
        Phase::Succeeded => (
            EventType::Normal,
            "job is succeeded since all the replicas are succeeded.",
        ),
        Phase::Unknown => (EventType::Warning, "job phase is unknown."),
        Phase::Suspended => (EventType::Normal, "job is suspended."),
    }
}

/// cleanPodPolicy `Running` (spec 8): phase Running or Pending, no container terminated and
/// none in CrashLoopBackOff.
fn still_running(pod: &CachedPod) -> bool {
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    if phase != "Running" && phase != "Pending" {
        return false;
    }
    !status
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.state.as_ref().is_some_and(|s| {
                    s.terminated.is_some()
                        || s.waiting
                            .as_ref()
                            .is_some_and(|w| w.reason.as_deref() == Some("CrashLoopBackOff"))
                })
            })
        })
}

fn delete_pod(pod: &CachedPod, why: &'static str) -> Action {
    let stopped = matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    Action::DeletePod {
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        grace: stopped.then_some(0),
        why,
    }
}

mod allocation;
mod lifecycle;

#[cfg(test)]
pub(crate) mod tests;
