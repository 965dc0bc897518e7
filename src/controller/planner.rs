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

use super::build::{self, BuildContext, ReplicaSlot};
use super::cache::CachedPod;
use super::ranks::RankTable;
use super::validate;
use crate::api::{CleanPodPolicy, DIJob, DIJobStatus, JobCondition, Phase, labels};

/// Annotation holding a hash of what a pod was built from (its task's template and the job's
/// volumes), so that a template edit rolls exactly that task's pods. Pods without it (created
/// by DI-orchestrator before a migration) are treated as current.
pub const TEMPLATE_HASH_ANNOTATION: &str = "diorch.io/template-hash";

/// What the executor observed for one job, from its caches.
#[derive(Clone, Debug, Default)]
pub struct Observed<'a> {
    /// Every cached pod in the job's namespace carrying its `diengine/job` label, owned or not.
    pub pods: Vec<&'a CachedPod>,
    /// The cached service named `di-<job>`, if any.
    pub service: Option<&'a Service>,
    /// The allocator's answer, when the job is preemptible and needs an allocation.
    pub admission: Option<&'a Admission>,
}

/// The allocator's answer for a preemptible job that needs an allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// One node per replica in slot order (tasks in spec order, then local rank).
    Placed {
        nodes: Vec<String>,
        /// The policy that decided, e.g. `binpack@3f2a…` or `builtin-binpack`.
        by: String,
        /// Why the built-in policy answered instead of the requested one.
        fallback: Option<String>,
        /// A periodic re-plan moving a placed job (not its first placement).
        replan: bool,
        /// New replica count per task (spec order) when an elastic policy resized the job;
        /// `nodes` is in slot order at these counts.
        replicas: Option<Vec<u32>>,
    },
    /// Not every replica fits now; the job waits in Pending.
    Waiting { message: String, by: String },
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

/// `text` cut to at most `max` bytes on a character boundary, ending in `…` when cut.
pub fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    const ELLIPSIS: &str = "…";
    let mut cut = max.saturating_sub(ELLIPSIS.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{ELLIPSIS}", &text[..cut])
}

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
    EnsurePodGroup(Box<Value>),
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
}

impl Plan {
    /// Whether the status must be written before the actions run. A transition that counts
    /// (Restarting, Rescheduling) or ends the job is committed first, guarded by the job's
    /// resourceVersion, so the deletions that follow can never make it be missed or counted
    /// twice. Plain creations go first: a rank they use is recovered from the pod if the status
    /// write is lost.
    pub fn status_first(&self) -> bool {
        self.allocated
            || self
                .transition
                .as_ref()
                .is_some_and(|t| !matches!(t.to, Phase::Pending | Phase::Starting | Phase::Running))
    }

    /// Short text of the actions for the reconcile log line.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if self.spec_patch.is_some() {
            parts.push("default task names".to_string());
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
                    pg["metadata"]["name"].as_str().unwrap_or_default(),
                    pg["spec"]["minMember"]
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
fn owned_by(meta: &ObjectMeta, uid: &str) -> bool {
    meta.owner_references.as_ref().is_some_and(|refs| {
        refs.iter()
            .any(|r| r.controller == Some(true) && r.uid == uid)
    })
}

fn annotation<'a>(pod: &'a CachedPod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
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

/// Plans one reconcile of `job`. `now` stamps conditions and completionTimestamp.
pub fn plan(job: &DIJob, observed: &Observed<'_>, ctx: &BuildContext, now: &Time) -> Plan {
    let current = job.status.clone().unwrap_or_default();
    // A resize decided by the allocator is planned as if already recorded: the slots, ranks and
    // DI_NODES follow the new counts, and the status write records them.
    let resized;
    let job = match observed.admission {
        Some(Admission::Placed {
            replicas: Some(counts),
            ..
        }) if job.spec.preemptible && !current.phase.is_some_and(Phase::is_terminal) => {
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
    } else if let Err(invalid) = validate::validate(job) {
        // Judged on the effective names, before any defaulting patch: a patch of an invalid job
        // could be refused by the validating webhook and would then never let it fail.
        out.transition(Phase::Failed, "JobFailed", invalid.condition_message());
    } else if let Some(patch) = validate::task_name_defaults(job) {
        out.plan.spec_patch = Some(patch);
    } else {
        out.active(&owned, observed);
    }
    let mut plan = out.plan;
    if out.status != current {
        plan.status = Some(out.status);
    }
    plan
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
        });
        let (type_, event_message) = phase_event(to);
        let event_message = match (to, reason) {
            // A job refused by validation says why, not "some replicas are failed".
            (Phase::Failed, "JobFailed") if !message.starts_with("job failed since") => {
                message.clone()
            }
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

    /// Records a new allocation (by global rank) with its condition and Event.
    fn allocated(
        &mut self,
        allocation: Vec<String>,
        by: &str,
        fallback: Option<&str>,
        replan: bool,
    ) {
        let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
        for node in allocation.iter().filter(|n| !n.is_empty()) {
            *per_node.entry(node).or_default() += 1;
        }
        let spread = per_node
            .iter()
            .map(|(node, n)| format!("{node}×{n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let message = if replan {
            let before = self.status.allocation.clone().unwrap_or_default();
            let moved = allocation
                .iter()
                .enumerate()
                .filter(|(r, n)| !n.is_empty() && before.get(*r) != Some(n))
                .count();
            format!("re-planned by {by}: {moved} replicas move; now on {spread}")
        } else {
            format!("placed by {by} on {spread}")
        };
        self.status.allocation = Some(allocation);
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

    /// Says what an elastic policy resized the job to.
    fn resized_event(&mut self) {
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

    /// Keeps a job that does not fit waiting, saying why (the Event only when the reason changes).
    fn waiting(&mut self, message: &str, by: &str) {
        // A policy's no-fit text is as long as the policy made it; the policy's name stays
        // readable at the end however long that is.
        let by = clip(by, MAX_MESSAGE_BYTES / 4);
        let suffix = format!(" (policy {by})");
        let message = format!(
            "{}{suffix}",
            clip(message, MAX_MESSAGE_BYTES.saturating_sub(suffix.len()))
        );
        let same = self
            .status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == ALLOCATED_CONDITION && c.message.as_deref() == Some(&message));
        if !same {
            self.plan.events.push(JobEvent {
                type_: EventType::Warning,
                reason: "FailedAllocation",
                message: message.clone(),
            });
            self.set_allocated_condition("False", "Unschedulable", message);
        }
    }

    fn set_allocated_condition(&mut self, status: &str, reason: &str, message: String) {
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
            },
        );
    }

    /// Succeeded and Failed are absorbing (15.11, Kubeflow Trainer's recurring bug): clean up by
    /// policy, never create.
    fn terminal(&mut self, owned: &[&CachedPod], service: Option<&Service>) {
        if self.status.completion_timestamp.is_none() {
            self.status.completion_timestamp = Some(self.now.clone());
        }
        self.status.ready_replicas = 0;
        self.status.task_status = None;
        if let Some(svc) = service.filter(|s| s.metadata.deletion_timestamp.is_none()) {
            self.plan.actions.push(Action::DeleteService {
                name: svc.metadata.name.clone().unwrap_or_default(),
                uid: svc.metadata.uid.clone().unwrap_or_default(),
            });
        }
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

    fn active(&mut self, owned: &[&CachedPod], observed: &Observed<'_>) {
        let job = self.job;
        let preemptible = job.spec.preemptible;
        let uid = job.metadata.uid.as_deref().unwrap_or_default();
        // A new job (or one whose phase someone set to Unknown, which the operator never uses)
        // starts over in Pending; that is this pass's one transition.
        let entering = !matches!(self.status.phase, Some(p) if p != Phase::Unknown);
        if entering {
            self.transition(Phase::Pending, "JobPending", "job created.".to_string());
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
                }) => {
                    let mut allocation = vec![String::new(); ranks.entries().len()];
                    for (slot, node) in slots.iter().zip(nodes) {
                        if let Some(entry) = ranks
                            .rank_of(&slot.pod_name)
                            .and_then(|r| allocation.get_mut(r))
                        {
                            entry.clone_from(node);
                        }
                    }
                    // The same allocation again (a retried answer) is nothing new.
                    if self.status.allocation.as_ref() != Some(&allocation) {
                        self.allocated(allocation, by, fallback.as_deref(), *replan);
                        if replicas.is_some() {
                            self.resized_event();
                        }
                    }
                    placed = true;
                }
                Some(Admission::Waiting { message, by }) => self.waiting(message, by),
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
        let allocation = self.status.allocation.clone().unwrap_or_default();
        let mut failed = Vec::new();
        let mut replace = Vec::new(); // live pods to delete and re-create
        let mut succeeded = 0;
        let mut ready = 0;
        let mut missing = Vec::new();
        for slot in &slots {
            let Some(pod) = slot.live else {
                missing.push(slot);
                continue;
            };
            match pod_state(pod, preemptible) {
                PodState::Failed => failed.push(pod),
                PodState::Lost => replace.push((pod, "lost")),
                PodState::Succeeded => succeeded += 1,
                PodState::Ready => ready += 1,
                PodState::Waiting => {}
            }
            let hash = annotation(pod, TEMPLATE_HASH_ANNOTATION);
            if hash.is_some_and(|h| h != template_hash(job, slot.task_index)) {
                replace.push((pod, "template changed"));
            } else if preemptible && !allocation.is_empty() {
                let rank = ranks.rank_of(&slot.pod_name);
                let want = rank.and_then(|r| allocation.get(r)).map(String::as_str);
                if want.is_some() && annotation(pod, labels::ANNOTATION_NODE) != want {
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
                annotation(p, labels::ANNOTATION_RANK)
                    .and_then(|r| r.parse::<i64>().ok())
                    .unwrap_or(i64::MAX),
            )
        });
        let mismatch = !missing.is_empty() || !extra.is_empty() || !replace.is_empty();

        // Replica status (spec 6.5), ready pods not containers.
        self.status.replicas = r;
        self.status.ready_replicas = live
            .values()
            .filter(|p| pod_state(p, preemptible) == PodState::Ready)
            .count() as i32;
        let mut task_status: BTreeMap<String, BTreeMap<String, i32>> = BTreeMap::new();
        for pod in owned {
            let task = pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::TASK_NAME))
                .cloned()
                .unwrap_or_default();
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

        // The state machine (spec 6.4): one transition per pass, first match wins.
        if !entering {
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
        if placed
            && matches!(
                phase,
                Phase::Pending | Phase::Restarting | Phase::Rescheduling
            )
        {
            // A pod can be failed and scaled in and stale at once: delete it once.
            let mut deleted = BTreeSet::new();
            let victims = failed
                .iter()
                .map(|p| (*p, "failed"))
                .chain(extra.iter().map(|p| (*p, "scaled in")))
                .chain(replace.iter().copied());
            for (pod, why) in victims {
                if deleted.insert(pod.metadata.uid.as_deref().unwrap_or_default()) {
                    self.plan.actions.push(delete_pod(pod, why));
                }
            }
            let world = build::world(job, &ranks, self.ctx);
            let creatable = missing.iter().filter(|s| !s.blocked);
            for slot in creatable.take(MAX_CREATES_PER_PASS) {
                let Some(rank) = ranks.rank_of(&slot.pod_name) else {
                    continue;
                };
                let replica = ReplicaSlot {
                    task_index: slot.task_index,
                    local_rank: slot.local_rank,
                    global_rank: rank as i32,
                };
                let node = if preemptible {
                    allocation.get(rank).map(String::as_str)
                } else {
                    None
                };
                if let Some(mut pod) = build::build_pod(job, &replica, &world, self.ctx, node) {
                    pod.metadata
                        .annotations
                        .get_or_insert_with(BTreeMap::new)
                        .insert(
                            TEMPLATE_HASH_ANNOTATION.to_string(),
                            template_hash(job, slot.task_index),
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

    /// The phase transition for this pass, if any.
    fn step(&mut self, phase: Phase, c: Counts, allocation: &[String]) {
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
                    allocation.join(" ")
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
            .map(|(name, pod)| (*name, annotation(pod, labels::ANNOTATION_RANK)));
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodCondition, PodStatus,
    };
    use serde_json::json;

    fn t(s: i64) -> Time {
        Time(jiff::Timestamp::from_second(1_700_000_000 + s).expect("time"))
    }

    fn job_with(spec: Value) -> DIJob {
        let mut spec = spec;
        if spec.get("tasks").is_none() {
            spec["tasks"] = json!([
                {"name": "learner", "type": "learner", "replicas": 1, "template": {"spec": {"containers": [{"name": "di-container", "image": "i"}]}}},
                {"name": "evaluator", "type": "evaluator", "replicas": 1, "template": {"spec": {"containers": [{"name": "di-container", "image": "i"}]}}},
                {"name": "collector", "type": "collector", "replicas": 2, "template": {"spec": {"containers": [{"name": "di-container", "image": "i"}]}}}
            ]);
        }
        serde_json::from_value(json!({
            "apiVersion": "diengine.opendilab.org/v2alpha1",
            "kind": "DIJob",
            "metadata": {"name": "j", "namespace": "default", "uid": "uid-1"},
            "spec": spec
        }))
        .expect("job")
    }

    fn job() -> DIJob {
        job_with(json!({}))
    }

    /// A fake cluster: the job and its pods and service, to which plans are applied the way the
    /// executor would (status write, creates as Pending pods, deletes).
    struct Sim {
        job: DIJob,
        pods: Vec<Pod>,
        service: Option<Service>,
        clock: i64,
        next_uid: u32,
        transitions: Vec<Phase>,
        events: Vec<JobEvent>,
        /// What the allocator answers while the job needs an allocation.
        admission: Option<Admission>,
        ctx: BuildContext,
        /// PodGroups as last ensured.
        pod_groups: Vec<Value>,
        /// Deleted pods stay, Terminating with their names taken, until the test removes them
        /// (a kubelet stopping their containers, or a finalizer).
        linger: bool,
    }

    impl Sim {
        fn new(job: DIJob) -> Sim {
            Sim {
                pods: Vec::new(),
                service: None,
                clock: 0,
                next_uid: 0,
                transitions: Vec::new(),
                events: Vec::new(),
                // The allocator of this fake cluster places every replica on n0 or n1.
                admission: job.spec.preemptible.then(|| Admission::Placed {
                    nodes: (0..job.spec.tasks.iter().map(|t| t.replicas).sum::<i32>())
                        .map(|i| format!("n{}", i % 2))
                        .collect(),
                    by: "test-policy".into(),
                    fallback: None,
                    replan: false,
                    replicas: None,
                }),
                job,
                ctx: BuildContext::default(),
                pod_groups: Vec::new(),
                linger: false,
            }
        }

        fn plan(&self) -> Plan {
            let cached: Vec<CachedPod> = self.pods.iter().cloned().map(CachedPod::from).collect();
            let admission = self.admission.as_ref().filter(|a| {
                crate::allocator::needs_allocation(&self.job)
                    || matches!(a, Admission::Placed { replan: true, .. })
            });
            let observed = Observed {
                pods: cached.iter().collect(),
                service: self.service.as_ref(),
                admission,
            };
            plan(&self.job, &observed, &self.ctx, &t(self.clock))
        }

        /// Plans and applies one reconcile; returns the plan.
        fn step(&mut self) -> Plan {
            self.clock += 1;
            let plan = self.plan();
            assert!(plan.spec_patch.is_none(), "unexpected spec patch");
            if let Some(status) = &plan.status {
                self.job.status = Some(status.clone());
            }
            if let Some(tr) = &plan.transition {
                self.transitions.push(tr.to);
            }
            self.events.extend(plan.events.iter().cloned());
            for action in &plan.actions {
                match action {
                    Action::CreatePod(pod) => {
                        let mut pod = (**pod).clone();
                        assert!(
                            !self
                                .pods
                                .iter()
                                .any(|p| p.metadata.name == pod.metadata.name),
                            "duplicate create of {:?}",
                            pod.metadata.name
                        );
                        self.next_uid += 1;
                        pod.metadata.uid = Some(format!("pod-uid-{}", self.next_uid));
                        pod.status = Some(PodStatus {
                            phase: Some("Pending".into()),
                            ..Default::default()
                        });
                        self.pods.push(pod);
                    }
                    Action::DeletePod { uid, .. } if self.linger => {
                        let at = t(self.clock);
                        for pod in &mut self.pods {
                            if pod.metadata.uid.as_deref() == Some(uid) {
                                pod.metadata.deletion_timestamp.get_or_insert(at.clone());
                            }
                        }
                    }
                    Action::DeletePod { uid, .. } => {
                        self.pods.retain(|p| p.metadata.uid.as_deref() != Some(uid))
                    }
                    Action::CreateService(svc) => {
                        assert!(self.service.is_none(), "duplicate service create");
                        let mut svc = (**svc).clone();
                        svc.metadata.uid = Some("svc-uid".into());
                        self.service = Some(svc);
                    }
                    Action::DeleteService { .. } => self.service = None,
                    Action::EnsurePodGroup(group) => {
                        assert!(
                            plan.actions
                                .iter()
                                .position(|a| matches!(a, Action::EnsurePodGroup(_)))
                                < plan
                                    .actions
                                    .iter()
                                    .position(|a| matches!(a, Action::CreatePod(_))),
                            "the podgroup comes before the pods"
                        );
                        self.pod_groups.push((**group).clone());
                    }
                }
            }
            plan
        }

        /// Reconciles until nothing changes (at most 20 passes).
        fn settle(&mut self) {
            for _ in 0..20 {
                let plan = self.step();
                if plan.status.is_none() && plan.actions.is_empty() {
                    return;
                }
            }
            panic!("did not settle: {:?}", self.job.status);
        }

        fn phase(&self) -> Option<Phase> {
            self.job.status.as_ref().and_then(|s| s.phase)
        }

        fn status(&self) -> DIJobStatus {
            self.job.status.clone().unwrap_or_default()
        }

        fn pod_mut(&mut self, name: &str) -> &mut Pod {
            self.pods
                .iter_mut()
                .find(|p| p.metadata.name.as_deref() == Some(name))
                .expect("pod exists")
        }

        fn set_pod(&mut self, name: &str, phase: &str, ready: bool) {
            let pod = self.pod_mut(name);
            pod.status = Some(pod_status(phase, ready, 1));
        }

        fn all(&mut self, phase: &str, ready: bool) {
            for pod in &mut self.pods {
                pod.status = Some(pod_status(phase, ready, 1));
            }
        }

        fn names(&self) -> Vec<String> {
            let mut v: Vec<String> = self
                .pods
                .iter()
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            v.sort();
            v
        }

        fn rank(&self, name: &str) -> i32 {
            let pod = self
                .pods
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(name))
                .expect("pod");
            pod_annotation(pod, labels::ANNOTATION_RANK)
                .expect("rank")
                .parse()
                .expect("number")
        }

        /// Brings a fresh job to Running with every pod ready.
        fn running(job: DIJob) -> Sim {
            let mut sim = Sim::new(job);
            sim.settle();
            sim.all("Running", true);
            sim.settle();
            assert_eq!(sim.phase(), Some(Phase::Running));
            sim
        }
    }

    fn pod_status(phase: &str, ready: bool, containers: usize) -> PodStatus {
        PodStatus {
            phase: Some(phase.into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            container_statuses: Some(
                (0..containers)
                    .map(|i| ContainerStatus {
                        name: format!("c{i}"),
                        ready: ready && i == 0,
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn pod_annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
        pod.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    }

    fn env(pod: &Pod, name: &str) -> String {
        pod.spec.as_ref().expect("spec").containers[0]
            .env
            .as_ref()
            .and_then(|e| e.iter().find(|v| v.name == name))
            .and_then(|v| v.value.clone())
            .unwrap_or_default()
    }

    fn fqdn(pod: &str) -> String {
        format!("{pod}.di-j.default.svc.cluster.local")
    }

    fn assert_rank_consistency(sim: &Sim) {
        let mut ranks = BTreeSet::new();
        for pod in &sim.pods {
            let rank: usize = env(pod, "DI_RANK").parse().expect("rank");
            let nodes: Vec<String> = env(pod, "DI_NODES").split(',').map(String::from).collect();
            let name = pod.metadata.name.clone().expect("name");
            assert_eq!(
                nodes.get(rank),
                Some(&fqdn(&name)),
                "DI_NODES[DI_RANK] of {name}"
            );
            assert!(ranks.insert(rank), "rank {rank} used twice");
        }
    }

    #[test]
    fn new_job_goes_pending_and_creates_every_pod_and_the_service() {
        let mut sim = Sim::new(job());
        let plan = sim.step();
        let tr = plan.transition.clone().expect("transition");
        assert_eq!(
            (tr.from, tr.to, tr.reason),
            (None, Phase::Pending, "JobPending")
        );
        assert_eq!(tr.message, "job created.");
        assert!(
            !plan.status_first(),
            "creations go before the Pending write"
        );
        assert_eq!(
            plan.events,
            vec![JobEvent {
                type_: EventType::Normal,
                reason: "JobPending",
                message: "job created.".into()
            }]
        );
        assert_eq!(
            sim.names(),
            [
                "j-collector-0",
                "j-collector-1",
                "j-evaluator-0",
                "j-learner-0"
            ]
        );
        assert!(sim.service.is_some());
        let status = sim.status();
        assert_eq!(status.replicas, 4);
        assert_eq!(
            status.ranks.as_deref(),
            Some(
                &[
                    "j-learner-0",
                    "j-evaluator-0",
                    "j-collector-0",
                    "j-collector-1"
                ]
                .map(String::from)[..]
            )
        );
        for (name, rank) in [
            ("j-learner-0", 0),
            ("j-evaluator-0", 1),
            ("j-collector-0", 2),
            ("j-collector-1", 3),
        ] {
            assert_eq!(sim.rank(name), rank);
        }
        let collector = sim
            .pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some("j-collector-1"))
            .expect("pod");
        assert_eq!(
            env(collector, "DI_COLLECTOR_NODES"),
            format!("{},{}", fqdn("j-collector-0"), fqdn("j-collector-1"))
        );
        assert_eq!(env(collector, "DI_JOB_ID"), "default/j");
        assert_eq!(
            pod_annotation(collector, TEMPLATE_HASH_ANNOTATION),
            Some(template_hash(&sim.job, 2).as_str())
        );
        assert_rank_consistency(&sim);
        let conditions = status.conditions.expect("conditions");
        assert_eq!(conditions.len(), 1);
        assert_eq!(
            (conditions[0].type_.as_str(), conditions[0].status.as_str()),
            ("Pending", "True")
        );
    }

    #[test]
    fn pending_moves_to_starting_once_every_pod_is_observed() {
        let mut sim = Sim::new(job());
        sim.step();
        let plan = sim.step();
        let tr = plan.transition.expect("transition");
        assert_eq!(
            (tr.to, tr.message.as_str()),
            (
                Phase::Starting,
                "job is starting since all pods are created."
            )
        );
        assert!(plan.actions.is_empty());
    }

    #[test]
    fn pending_with_missing_or_terminating_pods_is_no_dead_end() {
        let mut sim = Sim::new(job());
        sim.step();
        // One pod vanished before the operator saw them all, another is being deleted.
        sim.pods
            .retain(|p| p.metadata.name.as_deref() != Some("j-collector-1"));
        sim.pod_mut("j-evaluator-0").metadata.deletion_timestamp = Some(t(0));
        let plan = sim.step();
        assert_eq!(plan.transition, None);
        let created: Vec<_> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::CreatePod(p) => p.metadata.name.clone(),
                _ => None,
            })
            .collect();
        assert_eq!(
            created,
            ["j-collector-1"],
            "creates the missing pod, waits for the terminating one"
        );
        assert!(
            !plan
                .actions
                .iter()
                .any(|a| matches!(a, Action::DeletePod { .. })),
            "deletes nothing"
        );
        sim.pods.retain(|p| p.metadata.deletion_timestamp.is_none());
        sim.settle();
        assert_eq!(sim.phase(), Some(Phase::Starting));
        assert_eq!(sim.rank("j-evaluator-0"), 1, "re-created with its rank");
        assert_rank_consistency(&sim);
    }

    #[test]
    fn starting_becomes_running_only_when_every_pod_is_ready() {
        let mut sim = Sim::new(job());
        sim.settle();
        sim.all("Running", true);
        sim.set_pod("j-collector-1", "Running", false);
        sim.settle();
        assert_eq!(sim.phase(), Some(Phase::Starting));
        assert_eq!(sim.status().ready_replicas, 3);
        sim.set_pod("j-collector-1", "Running", true);
        let plan = sim.step();
        let tr = plan.transition.expect("transition");
        assert_eq!(
            (tr.to, tr.message.as_str()),
            (Phase::Running, "job is running since all pods are ready.")
        );
        assert_eq!(sim.status().ready_replicas, 4);
    }

    #[test]
    fn ready_counts_pods_not_containers() {
        let mut sim = Sim::new(job());
        sim.settle();
        // Each pod has a sidecar; only the worker container is ready, the pod is Ready.
        for pod in &mut sim.pods {
            pod.status = Some(pod_status("Running", true, 2));
        }
        sim.settle();
        assert_eq!(sim.phase(), Some(Phase::Running));
        assert_eq!(sim.status().ready_replicas, 4);
        // Containers all ready but the pod not Ready (readiness gate): not counted.
        sim.pods[0].status = Some(pod_status("Running", false, 1));
        sim.pods[0]
            .status
            .as_mut()
            .and_then(|s| s.container_statuses.as_mut())
            .expect("cs")[0]
            .ready = true;
        sim.step();
        assert_eq!(sim.status().ready_replicas, 3);
    }

    #[test]
    fn all_pods_succeeded_ends_the_job_with_a_completion_time() {
        let mut sim = Sim::running(job());
        sim.all("Succeeded", false);
        let plan = sim.step();
        let tr = plan.transition.expect("transition");
        assert_eq!((tr.to, tr.reason), (Phase::Succeeded, "JobSucceeded"));
        assert_eq!(
            tr.message,
            "job succeeded since all the replicas are succeeded."
        );
        let status = sim.status();
        assert!(status.completion_timestamp.is_some());
        assert_eq!((status.ready_replicas, status.task_status), (0, None));
        // Succeeded is absorbing: cleanup (policy Running keeps succeeded pods), the service goes,
        // and nothing is ever created again, even when everything is deleted by hand.
        sim.settle();
        assert_eq!(sim.pods.len(), 4);
        assert!(sim.service.is_none());
        sim.pods.clear();
        sim.settle();
        assert!(sim.pods.is_empty() && sim.service.is_none());
        assert_eq!(sim.phase(), Some(Phase::Succeeded));
    }

    #[test]
    fn a_failure_restarts_within_the_backoff_limit_and_fails_beyond_it() {
        let mut sim = Sim::running(job_with(json!({"backoffLimit": 1})));
        sim.set_pod("j-collector-0", "Failed", false);
        let plan = sim.step();
        let tr = plan.transition.clone().expect("transition");
        assert_eq!(
            (tr.to, tr.message.as_str()),
            (Phase::Restarting, "job is restarting since 1 pods failed.")
        );
        assert!(
            plan.status_first(),
            "the counted transition is written before the deletion"
        );
        assert!(
            matches!(plan.actions.as_slice(), [Action::DeletePod { name, grace: Some(0), why: "failed", .. }] if name == "j-collector-0"),
            "{:?}",
            plan.actions
        );
        assert_eq!(sim.status().restarts, 1);
        sim.settle();
        assert_eq!(sim.phase(), Some(Phase::Starting));
        assert_eq!(sim.rank("j-collector-0"), 2, "re-created with its old rank");
        let last = sim
            .status()
            .conditions
            .expect("conditions")
            .pop()
            .expect("last");
        assert_eq!(
            last.message.as_deref(),
            Some("job is starting since the created pods 4 are matched replicas 4.")
        );
        assert_rank_consistency(&sim);
        sim.all("Running", true);
        sim.settle();
        sim.set_pod("j-learner-0", "Failed", false);
        sim.set_pod("j-evaluator-0", "Failed", false);
        let plan = sim.step();
        let tr = plan.transition.expect("transition");
        assert_eq!(
            (tr.to, tr.message.as_str()),
            (
                Phase::Failed,
                "job failed since 2 pods failed. and exceed backoff limit"
            )
        );
        assert_eq!(sim.status().restarts, 1);
        assert!(sim.status().completion_timestamp.is_some());
        assert_eq!(
            sim.transitions,
            [
                Phase::Pending,
                Phase::Starting,
                Phase::Running,
                Phase::Restarting,
                Phase::Starting,
                Phase::Running,
                Phase::Failed
            ]
        );
    }

    /// Issue 18: a restart whose failed pod lingers Terminating (a kubelet stopping it, a
    /// finalizer) waits for it to go, creates nothing under its name meanwhile, and goes
    /// Running -> Restarting -> Starting -> Running, never through Rescheduling.
    #[test]
    fn a_restart_waits_for_the_old_pod_to_go_and_never_reschedules() {
        let mut sim = Sim::running(job_with(json!({"backoffLimit": 1})));
        sim.linger = true;
        sim.set_pod("j-collector-0", "Failed", false);
        let plan = sim.step();
        assert_eq!(plan.transition.map(|t| t.to), Some(Phase::Restarting));
        // The old pod is Terminating: its name is taken; every pass waits and does nothing.
        for _ in 0..3 {
            let plan = sim.step();
            assert_eq!(plan.transition, None, "no phase change while it lingers");
            assert!(
                !plan
                    .actions
                    .iter()
                    .any(|a| matches!(a, Action::CreatePod(_) | Action::DeletePod { .. })),
                "{:?}",
                plan.actions
            );
            assert_eq!(sim.phase(), Some(Phase::Restarting));
        }
        // The other pods stay as they were, even when their status changes meanwhile.
        sim.set_pod("j-learner-0", "Running", false);
        assert_eq!(sim.step().transition, None);
        sim.set_pod("j-learner-0", "Running", true);
        // Gone: re-created with its rank in one pass, then Starting.
        sim.pods.retain(|p| p.metadata.deletion_timestamp.is_none());
        let plan = sim.step();
        assert!(
            matches!(plan.actions.as_slice(), [Action::CreatePod(p)] if p.metadata.name.as_deref() == Some("j-collector-0")),
            "{:?}",
            plan.actions
        );
        sim.settle();
        assert_eq!(sim.phase(), Some(Phase::Starting));
        assert_eq!(sim.rank("j-collector-0"), 2);
        sim.set_pod("j-collector-0", "Running", true);
        sim.settle();
        assert_eq!(
            sim.transitions,
            [
                Phase::Pending,
                Phase::Starting,
                Phase::Running,
                Phase::Restarting,
                Phase::Starting,
                Phase::Running
            ]
        );
        assert_eq!((sim.status().restarts, sim.status().reschedules), (1, 0));
        assert_rank_consistency(&sim);
    }

    #[test]
    fn backoff_limit_zero_fails_at_once_and_none_never_gives_up() {
        // Spec 14: backoffLimit 0 with pods Running/Failed/Succeeded/Pending.
        for (phase, want) in [
            ("Running", Phase::Running),
            ("Failed", Phase::Failed),
            ("Succeeded", Phase::Succeeded),
            ("Pending", Phase::Starting),
        ] {
            let mut sim = Sim::new(job_with(json!({"backoffLimit": 0})));
            sim.settle();
            sim.all(phase, phase == "Running");
            sim.settle();
            assert_eq!(sim.phase(), Some(want), "pods {phase}");
        }
        let mut job = job();
        job.spec.backoff_limit = None;
        let mut sim = Sim::running(job);
        for round in 1..=6 {
            sim.set_pod("j-learner-0", "Failed", false);
            sim.settle();
            assert_eq!(sim.status().restarts, round);
            assert_eq!(sim.phase(), Some(Phase::Starting));
            sim.all("Running", true);
            sim.settle();
        }
    }

    #[test]
    fn a_restart_is_counted_once_however_often_it_is_observed() {
        let mut sim = Sim::running(job());
        sim.set_pod("j-collector-1", "Failed", false);
        sim.set_pod("j-learner-0", "Failed", false);
        let first = sim.plan();
        // The executor's status write is accepted; its deletions are lost (operator killed).
        sim.job.status = first.status.clone();
        for _ in 0..3 {
            let again = sim.plan();
            assert_eq!(again.transition, None, "no second transition");
            assert_eq!(
                again.status, None,
                "status already right: nothing to count again"
            );
            assert_eq!(again.actions.len(), 2, "the two failed pods are deleted");
        }
        // A second failure while restarting joins the same restart.
        sim.step();
        sim.set_pod("j-evaluator-0", "Failed", false);
        sim.settle();
        assert_eq!(sim.status().restarts, 1);
        assert_eq!(sim.phase(), Some(Phase::Starting));
    }

    #[test]
    fn a_pod_deleted_while_running_reschedules_and_comes_back_with_its_rank() {
        let mut sim = Sim::running(job());
        sim.pods
            .retain(|p| p.metadata.name.as_deref() != Some("j-evaluator-0"));
        let plan = sim.step();
        let tr = plan.transition.clone().expect("transition");
        assert_eq!(tr.to, Phase::Rescheduling);
        assert_eq!(
            tr.message,
            "job is rescheduling since replicas changed, replicas: 4, allocation: []."
        );
        assert_eq!(plan.events[0].type_, EventType::Warning);
        let created: Vec<_> = plan
            .actions
            .iter()
            .filter(|a| matches!(a, Action::CreatePod(_)))
            .collect();
        assert_eq!(
            created.len(),
            1,
            "re-created exactly once, in the same pass"
        );
        assert_eq!(sim.status().reschedules, 1);
        assert_eq!(sim.rank("j-evaluator-0"), 1);
        sim.settle();
        assert_eq!(sim.phase(), Some(Phase::Starting));
        assert_eq!(sim.status().reschedules, 1);
        assert_eq!(sim.pods.len(), 4);
        assert_rank_consistency(&sim);
    }

    #[test]
    fn deleting_the_last_rank_pod_while_starting_reschedules_back_to_starting() {
        // Spec 14: Starting, replicas [1,1,2], delete the last-rank pod.
        let mut sim = Sim::new(job());
        sim.settle();
        sim.pods
            .retain(|p| p.metadata.name.as_deref() != Some("j-collector-1"));
        let plan = sim.step();
        assert_eq!(
            plan.transition.map(|t| t.message),
            Some("job is rescheduling since replicas or allocation changed.".to_string())
        );
        sim.settle();
        assert_eq!(sim.phase(), Some(Phase::Starting));
        assert_eq!(sim.status().reschedules, 1);
        assert_eq!(sim.rank("j-collector-1"), 3);
    }

    #[test]
    fn a_pod_with_several_reasons_to_go_is_deleted_once() {
        let mut sim = Sim::running(job());
        // Failed, and its template changed.
        sim.set_pod("j-collector-1", "Failed", false);
        sim.job.spec.tasks[2]
            .template
            .spec
            .as_mut()
            .expect("spec")
            .containers[0]
            .image = Some("i:2".into());
        let plan = sim.step();
        let deletes: Vec<_> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::DeletePod { name, .. } => Some(name.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            deletes,
            ["j-collector-1", "j-collector-0"],
            "{:?}",
            plan.actions
        );
    }

    #[test]
    fn restarting_also_removes_pods_beyond_the_spec() {
        let mut sim = Sim::running(job());
        sim.set_pod("j-learner-0", "Failed", false);
        sim.step();
        assert_eq!(sim.phase(), Some(Phase::Restarting));
        // The user scales the collectors in while the job restarts.
        sim.job.spec.tasks[2].replicas = 1;
        let plan = sim.step();
        assert!(
            plan.actions.iter().any(|a| matches!(a, Action::DeletePod { name, why: "scaled in", .. } if name == "j-collector-1")),
            "{:?}",
            plan.actions
        );
        sim.settle();
        assert_eq!(sim.phase(), Some(Phase::Starting));
        assert_eq!(
            sim.names(),
            ["j-collector-0", "j-evaluator-0", "j-learner-0"]
        );
        assert_eq!((sim.status().restarts, sim.status().reschedules), (1, 0));
    }

    fn waiting(message: &str) -> Admission {
        Admission::Waiting {
            message: message.into(),
            by: "binpack@abc".into(),
        }
    }

    fn placed(nodes: &[&str], fallback: Option<&str>) -> Admission {
        Admission::Placed {
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            by: "binpack@abc".into(),
            fallback: fallback.map(String::from),
            replan: false,
            replicas: None,
        }
    }

    fn allocated_condition(sim: &Sim) -> JobCondition {
        let conditions = sim.status().conditions.unwrap_or_default();
        assert_eq!(
            conditions.first().map(|c| c.type_.as_str()),
            Some(ALLOCATED_CONDITION),
            "the Allocated condition comes first"
        );
        conditions[0].clone()
    }

    #[test]
    fn a_preemptible_job_that_does_not_fit_waits_in_pending_without_pods() {
        let mut sim = Sim::new(job_with(json!({"preemptible": true})));
        sim.admission = Some(waiting("waiting for capacity: 4 replicas"));
        sim.settle();
        assert_eq!(sim.phase(), Some(Phase::Pending));
        assert!(sim.pods.is_empty(), "no partial start");
        assert!(sim.service.is_some(), "the service does not wait");
        assert_eq!(sim.status().allocation, None);
        let c = allocated_condition(&sim);
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("False", Some("Unschedulable"))
        );
        assert_eq!(
            c.message.as_deref(),
            Some("waiting for capacity: 4 replicas (policy binpack@abc)")
        );
        let conditions = sim.status().conditions.unwrap_or_default();
        assert_eq!(conditions.last().map(|c| c.type_.as_str()), Some("Pending"));
        let failed: Vec<_> = sim
            .events
            .iter()
            .filter(|e| e.reason == "FailedAllocation")
            .collect();
        assert_eq!(failed.len(), 1, "{:?}", sim.events);
        assert_eq!(failed[0].type_, EventType::Warning);
        // The same answer again: no new Event, no status write.
        let plan = sim.step();
        assert_eq!(plan.status, None);
        assert!(plan.events.is_empty());
        // A different reason is news.
        sim.admission = Some(waiting("waiting for capacity: other"));
        let plan = sim.step();
        assert_eq!(plan.events.len(), 1);
    }

    #[test]
    fn an_allocation_is_written_first_then_every_pod_goes_to_its_node() {
        let mut sim = Sim::new(job_with(json!({"preemptible": true})));
        sim.admission = Some(waiting("full"));
        sim.settle();
        sim.admission = Some(placed(&["a", "b", "c", "c"], None));
        let plan = sim.step();
        assert!(
            plan.allocated && plan.status_first(),
            "allocation before pods"
        );
        assert_eq!(
            plan.actions
                .iter()
                .filter(|a| matches!(a, Action::CreatePod(_)))
                .count(),
            4
        );
        assert_eq!(
            sim.status().allocation,
            Some(["a", "b", "c", "c"].map(String::from).to_vec())
        );
        let c = allocated_condition(&sim);
        assert_eq!(c.status, "True");
        assert_eq!(
            c.message.as_deref(),
            Some("placed by binpack@abc on a×1, b×1, c×2")
        );
        assert!(
            sim.events.iter().any(|e| e.reason == "JobAllocated"
                && e.message == "placed by binpack@abc on a×1, b×1, c×2")
        );
        for (pod, node) in [
            ("j-learner-0", "a"),
            ("j-evaluator-0", "b"),
            ("j-collector-1", "c"),
        ] {
            let p = sim
                .pods
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(pod))
                .expect("pod");
            assert_eq!(
                p.metadata.annotations.as_ref().expect("annotations")["diengine/node"],
                node
            );
            let terms = &p
                .spec
                .as_ref()
                .and_then(|s| s.affinity.as_ref())
                .and_then(|a| a.node_affinity.as_ref())
                .and_then(|n| {
                    n.required_during_scheduling_ignored_during_execution
                        .as_ref()
                })
                .expect("required affinity")
                .node_selector_terms;
            assert_eq!(
                terms[0].match_fields.as_ref().expect("fields")[0].values,
                Some(vec![node.to_string()])
            );
        }
        // Phase changes leave the Allocated condition alone.
        sim.settle();
        sim.all("Running", true);
        sim.settle();
        assert_eq!(sim.phase(), Some(Phase::Running));
        assert_eq!(allocated_condition(&sim).status, "True");
        let conditions = sim.status().conditions.unwrap_or_default();
        assert_eq!(
            conditions
                .last()
                .map(|c| (c.type_.as_str(), c.status.as_str())),
            Some(("Running", "True"))
        );
        assert_eq!(sim.status().replicas, 4);
    }

    #[test]
    fn a_re_plan_moves_only_the_replicas_whose_node_changed() {
        let mut sim = Sim::running(job_with(json!({"preemptible": true})));
        let before: BTreeMap<String, String> = sim
            .pods
            .iter()
            .map(|p| {
                (
                    p.metadata.name.clone().unwrap_or_default(),
                    p.metadata.uid.clone().unwrap_or_default(),
                )
            })
            .collect();
        // Slots: learner-0, evaluator-0, collector-0, collector-1 on n0, n1, n0, n1.
        sim.admission = Some(Admission::Placed {
            nodes: ["n0", "n1", "n2", "n1"].map(String::from).to_vec(),
            by: "goodput@1".into(),
            fallback: None,
            replan: true,
            replicas: None,
        });
        let plan = sim.step();
        assert!(plan.status_first());
        sim.admission = None;
        sim.settle();
        assert_eq!(sim.status().reschedules, 1);
        let event = sim
            .events
            .iter()
            .find(|e| e.reason == "JobReallocated")
            .expect("event");
        assert_eq!(
            event.message,
            "re-planned by goodput@1: 1 replicas move; now on n0×1, n1×2, n2×1"
        );
        for p in &sim.pods {
            let name = p.metadata.name.clone().unwrap_or_default();
            let same = before.get(&name) == p.metadata.uid.as_ref();
            assert_eq!(same, name != "j-collector-0", "{name}");
        }
        sim.all("Running", true);
        sim.settle();
        assert_eq!(sim.phase(), Some(Phase::Running));
    }

    #[test]
    fn an_elastic_resize_grows_and_shrinks_a_task_within_min_and_max() {
        let elastic = json!({"preemptible": true, "tasks": [
            {"name": "learner", "type": "learner", "replicas": 1, "template": {"spec": {"containers": [{"name": "di-container", "image": "i"}]}}},
            {"name": "collector", "type": "collector", "replicas": 2, "minReplicas": 1, "maxReplicas": 4,
             "template": {"spec": {"containers": [{"name": "di-container", "image": "i"}]}}}
        ]});
        let mut sim = Sim::running(job_with(elastic));
        let resize = |counts: &[u32], nodes: &[&str]| Admission::Placed {
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            by: "goodput@1".into(),
            fallback: None,
            replan: true,
            replicas: Some(counts.to_vec()),
        };
        // Grow the collectors 2 -> 4: the two new ones go to n2.
        sim.admission = Some(resize(&[1, 4], &["n0", "n1", "n0", "n2", "n2"]));
        sim.step();
        sim.admission = None;
        sim.settle();
        assert_eq!(
            sim.status().task_replicas,
            Some(BTreeMap::from([
                ("collector".to_string(), 4),
                ("learner".to_string(), 1)
            ]))
        );
        assert_eq!(sim.pods.len(), 5);
        assert_eq!(sim.rank("j-collector-3"), 4);
        assert_eq!(sim.status().reschedules, 1);
        assert!(sim.events.iter().any(|e| e.reason == "JobResized"
            && e.message == "replicas per task are now learner×1, collector×4"));
        assert!(
            !crate::allocator::needs_allocation(&sim.job),
            "the allocation matches the resize"
        );
        sim.all("Running", true);
        sim.settle();
        assert_eq!(sim.phase(), Some(Phase::Running));
        // Pods created after the resize see the new world (survivors keep theirs and ask the
        // replica API, as after any scale-up).
        let env = |sim: &Sim| {
            let newest = sim
                .pods
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some("j-collector-3"))
                .expect("collector-3");
            newest.spec.as_ref().expect("spec").containers[0]
                .env
                .iter()
                .flatten()
                .find(|e| e.name == "DI_COLLECTOR_NODES")
                .and_then(|e| e.value.clone())
                .unwrap_or_default()
        };
        assert_eq!(env(&sim).split(',').count(), 4);
        // Shrink to 1: the highest ranks go.
        sim.admission = Some(resize(&[1, 1], &["n0", "n1"]));
        sim.step();
        sim.admission = None;
        sim.settle();
        let mut names: Vec<String> = sim
            .pods
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        names.sort();
        assert_eq!(names, ["j-collector-0", "j-learner-0"]);
        assert_eq!(sim.status().reschedules, 2);
        // A resize past maxReplicas recorded by someone else is clamped.
        let mut status = sim.status();
        status.task_replicas = Some(BTreeMap::from([("collector".to_string(), 9)]));
        sim.job.status = Some(status);
        assert_eq!(build::task_replicas(&sim.job, 1), 4);
    }

    #[test]
    fn a_fallback_placement_says_why_in_a_warning() {
        let mut sim = Sim::new(job_with(json!({"preemptible": true})));
        sim.admission = Some(placed(
            &["a", "a", "a", "a"],
            Some("plugin binpack trapped: unreachable"),
        ));
        sim.step();
        let warning = sim
            .events
            .iter()
            .find(|e| e.reason == "PolicyFallback")
            .expect("fallback event");
        assert_eq!(warning.type_, EventType::Warning);
        assert!(
            warning
                .message
                .starts_with("plugin binpack trapped: unreachable; the built-in policy")
        );
    }

    #[test]
    fn scaling_a_placed_preemptible_job_reschedules_onto_the_new_allocation() {
        let mut sim = Sim::running(job_with(json!({"preemptible": true})));
        let before = sim.status().allocation.expect("allocation");
        assert_eq!(before, ["n0", "n1", "n0", "n1"].map(String::from).to_vec());
        // Two more collectors: the allocator places the whole job again.
        sim.job.spec.tasks[2].replicas = 4;
        assert!(crate::allocator::needs_allocation(&sim.job));
        sim.admission = Some(placed(&["n0", "n1", "n0", "n1", "n2", "n2"], None));
        sim.settle();
        assert_eq!(sim.status().reschedules, 1);
        assert_eq!(sim.pods.len(), 6);
        assert_eq!(sim.status().allocation.map(|a| a.len()), Some(6));
        assert_eq!(sim.rank("j-collector-3"), 5);
        sim.all("Running", true);
        sim.settle();
        assert_eq!(sim.phase(), Some(Phase::Running));
        assert!(!crate::allocator::needs_allocation(&sim.job));
    }

    #[test]
    fn a_gang_scheduled_job_ensures_its_podgroup_before_creating_pods() {
        let mut sim = Sim::new(job());
        sim.ctx.gang = Some(build::Gang {
            kind: build::GangKind::SchedulerPlugins,
            scheduler_name: "sp".into(),
        });
        sim.settle();
        assert_eq!(sim.pod_groups.len(), 1, "once, with the first pods");
        let group = &sim.pod_groups[0];
        assert_eq!(group["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
        assert_eq!(group["metadata"]["name"], "j");
        assert_eq!(group["spec"]["minMember"], 4);
        assert_eq!(group["metadata"]["ownerReferences"][0]["uid"], "uid-1");
        for pod in &sim.pods {
            let spec = pod.spec.as_ref().expect("spec");
            assert_eq!(spec.scheduler_name.as_deref(), Some("sp"));
            assert_eq!(
                pod.metadata.labels.as_ref().expect("labels")[build::COSCHEDULING_GROUP_LABEL],
                "j"
            );
        }
        // Scaling up updates minMember with the new pods.
        sim.all("Running", true);
        sim.settle();
        sim.job.spec.tasks[2].replicas = 4;
        sim.settle();
        assert_eq!(
            sim.pod_groups.last().expect("group")["spec"]["minMember"],
            6
        );
        // Volcano groups by annotation.
        let mut sim = Sim::new(job());
        sim.ctx.gang = Some(build::Gang {
            kind: build::GangKind::Volcano,
            scheduler_name: "volcano".into(),
        });
        sim.step();
        assert_eq!(
            sim.pod_groups[0]["apiVersion"],
            "scheduling.volcano.sh/v1beta1"
        );
        assert!(sim.pods.iter().all(|p| {
            p.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a[build::VOLCANO_GROUP_ANNOTATION] == "j")
        }));
    }

    #[test]
    fn without_a_gang_scheduler_there_is_no_podgroup() {
        let mut sim = Sim::new(job());
        sim.settle();
        assert!(sim.pod_groups.is_empty());
        assert!(
            sim.pods
                .iter()
                .all(|p| p.spec.as_ref().is_some_and(|s| s.scheduler_name.is_none()))
        );
    }

    #[test]
    fn a_changed_allocation_moves_only_the_misplaced_pods_of_a_preemptible_job() {
        let mut job = job_with(json!({"preemptible": true}));
        job.status = Some(DIJobStatus {
            allocation: Some(["n1", "n2", "n3", "n4"].map(String::from).to_vec()),
            ..Default::default()
        });
        let mut sim = Sim::new(job);
        sim.settle();
        let node = |sim: &Sim, name: &str| {
            sim.pods
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(name))
                .and_then(|p| p.metadata.annotations.as_ref())
                .and_then(|a| a.get(labels::ANNOTATION_NODE).cloned())
        };
        assert_eq!(node(&sim, "j-collector-0").as_deref(), Some("n3"));
        sim.all("Running", true);
        sim.settle();
        let before = sim
            .pods
            .iter()
            .map(|p| p.metadata.uid.clone())
            .collect::<Vec<_>>();
        if let Some(status) = sim.job.status.as_mut() {
            status.allocation = Some(["n1", "n2", "n9", "n4"].map(String::from).to_vec());
        }
        let plan = sim.step();
        let tr = plan.transition.expect("transition");
        assert_eq!(
            tr.message,
            "job is rescheduling since replicas changed, replicas: 4, allocation: [n1 n2 n9 n4]."
        );
        sim.settle();
        assert_eq!(node(&sim, "j-collector-0").as_deref(), Some("n9"));
        assert_eq!(sim.rank("j-collector-0"), 2);
        let after = sim
            .pods
            .iter()
            .map(|p| p.metadata.uid.clone())
            .collect::<Vec<_>>();
        assert_eq!(
            before.iter().filter(|u| after.contains(u)).count(),
            3,
            "only one pod moved"
        );
    }

    #[test]
    fn phase_events_use_di_orchestrators_reasons_types_and_messages() {
        let table = [
            (Phase::Pending, EventType::Normal, "job created."),
            (
                Phase::Starting,
                EventType::Normal,
                "job is starting since all replicas are created.",
            ),
            (
                Phase::Running,
                EventType::Normal,
                "job is running since all replicas are ready.",
            ),
            (
                Phase::Restarting,
                EventType::Warning,
                "job is restarting since conditions changed.",
            ),
            (
                Phase::Rescheduling,
                EventType::Warning,
                "job is rescheduling since replicas or allocation changed.",
            ),
            (
                Phase::Failed,
                EventType::Warning,
                "job is failed since some replicas are failed.",
            ),
            (
                Phase::Succeeded,
                EventType::Normal,
                "job is succeeded since all the replicas are succeeded.",
            ),
        ];
        for (phase, type_, message) in table {
            assert_eq!(phase_event(phase), (type_, message), "{phase}");
        }
        // Through the planner: a pod failure past the backoff limit.
        let mut sim = Sim::running(job_with(json!({"backoffLimit": 0})));
        sim.set_pod("j-learner-0", "Failed", false);
        let plan = sim.step();
        assert_eq!(
            plan.events,
            vec![JobEvent {
                type_: EventType::Warning,
                reason: "JobFailed",
                message: "job is failed since some replicas are failed.".into()
            }]
        );
    }

    #[test]
    fn scaling_up_adds_only_new_slots_with_new_ranks_in_task_order() {
        let mut sim = Sim::running(job());
        for task in &mut sim.job.spec.tasks {
            task.replicas += 1;
        }
        sim.step();
        assert_eq!(sim.phase(), Some(Phase::Rescheduling));
        sim.settle();
        assert_eq!(sim.phase(), Some(Phase::Starting));
        assert_eq!(sim.pods.len(), 7);
        // DI-orchestrator's e2e expectation: new ranks 4, 5, 6 in task order.
        assert_eq!(sim.rank("j-learner-1"), 4);
        assert_eq!(sim.rank("j-evaluator-1"), 5);
        assert_eq!(sim.rank("j-collector-2"), 6);
        for (name, rank) in [
            ("j-learner-0", 0),
            ("j-evaluator-0", 1),
            ("j-collector-0", 2),
            ("j-collector-1", 3),
        ] {
            assert_eq!(sim.rank(name), rank, "survivor {name} keeps its rank");
        }
        let newest = sim
            .pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some("j-collector-2"))
            .expect("pod");
        assert_eq!(env(newest, "DI_NODES").split(',').count(), 7);
        assert_eq!(
            pod_annotation(newest, labels::ANNOTATION_REPLICAS),
            Some("7")
        );
        assert_rank_consistency(&sim);
    }

    #[test]
    fn scaling_in_deletes_the_highest_ranks_and_frees_them() {
        let mut sim = Sim::running(job_with(json!({"tasks": [
            {"name": "learner", "type": "learner", "replicas": 1, "template": {"spec": {"containers": [{"name": "di-container", "image": "i"}]}}},
            {"name": "collector", "type": "collector", "replicas": 4, "template": {"spec": {"containers": [{"name": "di-container", "image": "i"}]}}}
        ]})));
        sim.job.spec.tasks[1].replicas = 2;
        let plan = sim.step();
        let deleted: Vec<_> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::DeletePod {
                    name, why, grace, ..
                } => Some((name.as_str(), *why, *grace)),
                _ => None,
            })
            .collect();
        assert_eq!(
            deleted,
            [
                ("j-collector-3", "scaled in", None),
                ("j-collector-2", "scaled in", None)
            ]
        );
        assert!(
            !plan
                .actions
                .iter()
                .any(|a| matches!(a, Action::CreatePod(_)))
        );
        sim.settle();
        // The survivors are ready: Running -> Rescheduling -> Starting -> Running.
        assert_eq!(
            sim.transitions[3..],
            [Phase::Rescheduling, Phase::Starting, Phase::Running]
        );
        assert_eq!(
            sim.names(),
            ["j-collector-0", "j-collector-1", "j-learner-0"]
        );
        assert_eq!(
            sim.status().ranks.map(|r| r.len()),
            Some(3),
            "trailing freed ranks trimmed"
        );
        assert_eq!(sim.status().reschedules, 1);
    }

    #[test]
    fn scale_in_of_a_middle_task_leaves_a_gap_that_scale_up_fills() {
        let mut sim = Sim::running(job_with(json!({"tasks": [
            {"name": "a", "type": "none", "replicas": 2, "template": {"spec": {"containers": [{"name": "di-container", "image": "i"}]}}},
            {"name": "b", "type": "none", "replicas": 1, "template": {"spec": {"containers": [{"name": "di-container", "image": "i"}]}}}
        ]})));
        sim.job.spec.tasks[0].replicas = 1; // j-a-1 (rank 1) goes; j-b-0 keeps rank 2
        sim.settle();
        assert_eq!(sim.rank("j-b-0"), 2);
        assert_eq!(
            sim.status().ranks,
            Some(vec!["j-a-0".into(), "".into(), "j-b-0".into()])
        );
        sim.all("Running", true);
        sim.settle();
        sim.job.spec.tasks[1].replicas = 2; // j-b-1 fills the gap
        sim.settle();
        assert_eq!(sim.rank("j-b-1"), 1);
        assert_rank_consistency(&sim);
    }

    #[test]
    fn a_template_edit_rolls_only_that_tasks_pods() {
        let mut sim = Sim::running(job());
        let before: BTreeMap<String, String> = sim
            .pods
            .iter()
            .map(|p| {
                (
                    p.metadata.name.clone().unwrap_or_default(),
                    p.metadata.uid.clone().unwrap_or_default(),
                )
            })
            .collect();
        sim.job.spec.tasks[2]
            .template
            .spec
            .as_mut()
            .expect("spec")
            .containers[0]
            .image = Some("i:2".into());
        let plan = sim.step();
        assert_eq!(plan.transition.map(|t| t.to), Some(Phase::Rescheduling));
        let deleted: BTreeSet<_> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::DeletePod {
                    name,
                    why: "template changed",
                    ..
                } => Some(name.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            deleted,
            BTreeSet::from(["j-collector-0".to_string(), "j-collector-1".to_string()])
        );
        sim.settle();
        for pod in &sim.pods {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let image = pod.spec.as_ref().expect("spec").containers[0]
                .image
                .clone()
                .unwrap_or_default();
            if name.contains("collector") {
                assert_eq!(image, "i:2");
                assert_ne!(before[&name], pod.metadata.uid.clone().unwrap_or_default());
            } else {
                assert_eq!(
                    before[&name],
                    pod.metadata.uid.clone().unwrap_or_default(),
                    "{name} untouched"
                );
            }
        }
        assert_rank_consistency(&sim);
    }

    #[test]
    fn a_status_only_change_or_a_steady_job_does_nothing() {
        let mut sim = Sim::running(job());
        let plan = sim.plan();
        assert_eq!(plan, Plan::default());
        if let Some(status) = sim.job.status.as_mut() {
            status.profilings = Some(json!({"x": 1}));
        }
        assert_eq!(sim.plan(), Plan::default());
    }

    #[test]
    fn rejected_and_preempted_pods_are_replaced_without_burning_restarts() {
        for (reason, exit_143, preemptible) in [
            ("OutOfcpu", false, false),
            ("OutOfnvidia.com/gpu", false, false),
            ("UnexpectedAdmissionError", false, false),
            ("Error", true, true),
        ] {
            let mut job = job();
            job.spec.preemptible = preemptible;
            let mut sim = Sim::running(job);
            let pod = sim.pod_mut("j-collector-0");
            let mut status = pod_status("Failed", false, 1);
            status.reason = Some(reason.into());
            if exit_143 {
                status.container_statuses.as_mut().expect("cs")[0].state = Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: 143,
                        ..Default::default()
                    }),
                    ..Default::default()
                });
            }
            pod.status = Some(status);
            sim.settle();
            assert_eq!(sim.phase(), Some(Phase::Starting), "{reason}");
            assert_eq!(
                (sim.status().restarts, sim.status().reschedules),
                (0, 1),
                "{reason}"
            );
            assert_eq!(sim.rank("j-collector-0"), 2);
            assert_eq!(sim.pods.len(), 4);
        }
        // Exit 143 of a non-preemptible job is an ordinary failure.
        let mut sim = Sim::running(job());
        let mut status = pod_status("Failed", false, 1);
        status.container_statuses.as_mut().expect("cs")[0].state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 143,
                ..Default::default()
            }),
            ..Default::default()
        });
        sim.pod_mut("j-learner-0").status = Some(status);
        sim.step();
        assert_eq!(sim.phase(), Some(Phase::Restarting));
    }

    #[test]
    fn invalid_jobs_fail_once_with_di_orchestrators_message() {
        let mut sim = Sim::new(job_with(json!({"tasks": [
            {"name": "a", "type": "collector", "template": {}},
            {"name": "b", "type": "collector", "template": {}}
        ]})));
        let plan = sim.step();
        let tr = plan.transition.clone().expect("transition");
        assert_eq!(
            (tr.to, tr.reason, tr.message.as_str()),
            (
                Phase::Failed,
                "JobFailed",
                "the number of collector task is more than one"
            )
        );
        assert_eq!(
            plan.events[0].message,
            "the number of collector task is more than one"
        );
        assert!(plan.actions.is_empty(), "nothing created");
        assert!(sim.status().completion_timestamp.is_some());
        sim.settle();
        assert_eq!(sim.transitions, [Phase::Failed]);
        assert!(sim.pods.is_empty() && sim.service.is_none());

        let mut empty = Sim::new(job_with(json!({"tasks": []})));
        empty.settle();
        assert_eq!(empty.phase(), Some(Phase::Failed));
        assert_eq!(
            empty.status().conditions.expect("c")[0].message.as_deref(),
            Some("job has no tasks")
        );
    }

    #[test]
    fn unnamed_typed_tasks_are_named_by_a_spec_patch_before_anything_else() {
        let job = job_with(json!({"tasks": [{"type": "learner", "template": {}}]}));
        let plan = plan(&job, &Observed::default(), &BuildContext::default(), &t(0));
        assert!(plan.spec_patch.is_some());
        assert_eq!(
            (plan.status, plan.transition, plan.actions.len()),
            (None, None, 0)
        );
    }

    #[test]
    fn an_invalid_job_fails_without_a_defaulting_patch() {
        // Two unnamed collectors: naming them would be refused by the validating webhook.
        let job = job_with(
            json!({"tasks": [{"type": "collector", "template": {}}, {"type": "collector", "template": {}}]}),
        );
        let plan = plan(&job, &Observed::default(), &BuildContext::default(), &t(0));
        assert!(plan.spec_patch.is_none());
        let status = plan.status.expect("status");
        assert_eq!(status.phase, Some(Phase::Failed));
        assert!(
            status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.message.as_deref()
                    == Some("the number of collector task is more than one")),
            "{status:?}"
        );
    }

    fn cleanup_of(policy: &str) -> (Vec<String>, bool) {
        let mut sim = Sim::running(job_with(json!({"cleanPodPolicy": policy})));
        sim.set_pod("j-learner-0", "Running", true);
        sim.set_pod("j-evaluator-0", "Running", true);
        sim.set_pod("j-collector-0", "Failed", false);
        sim.set_pod("j-collector-1", "Succeeded", false);
        let mut status = sim.status();
        status.phase = Some(Phase::Failed);
        sim.job.status = Some(status);
        sim.settle();
        (sim.names(), sim.service.is_some())
    }

    #[test]
    fn clean_pod_policy_leaves_exactly_the_right_pods_and_no_service() {
        assert_eq!(
            cleanup_of("Running"),
            (
                vec!["j-collector-0".to_string(), "j-collector-1".to_string()],
                false
            )
        );
        assert_eq!(cleanup_of("All"), (vec![], false));
        assert_eq!(cleanup_of("None").0.len(), 4);
        assert!(!cleanup_of("None").1);
        // A running pod with a terminated container is not "still running" (spec 8).
        let mut pod = Pod::default();
        let mut status = pod_status("Running", false, 1);
        status.container_statuses.as_mut().expect("cs")[0].state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated::default()),
            ..Default::default()
        });
        pod.status = Some(status);
        assert!(!still_running(&CachedPod::from(pod)));
    }

    #[test]
    fn fail_marks_an_active_job_failed_once() {
        let sim = Sim::running(job());
        let plan = fail(
            &sim.job,
            "pod j-learner-0 failed to create: bad".into(),
            &t(9),
        );
        let status = plan.status.expect("status");
        assert_eq!(status.phase, Some(Phase::Failed));
        assert_eq!(status.completion_timestamp, Some(t(9)));
        assert_eq!(
            plan.events[0].message,
            "pod j-learner-0 failed to create: bad"
        );
        let mut done = sim.job.clone();
        done.status = Some(status);
        assert_eq!(fail(&done, "again".into(), &t(10)), Plan::default());
    }

    #[test]
    fn a_terminal_job_without_completion_time_gets_one() {
        let mut job = job();
        job.status = Some(DIJobStatus {
            phase: Some(Phase::Succeeded),
            ..Default::default()
        });
        let plan = plan(&job, &Observed::default(), &BuildContext::default(), &t(5));
        assert_eq!(plan.status.and_then(|s| s.completion_timestamp), Some(t(5)));
        assert!(plan.actions.is_empty());
    }

    #[test]
    fn conditions_keep_one_entry_per_phase_current_last() {
        let mut sim = Sim::running(job());
        sim.pods.pop();
        sim.settle();
        sim.all("Running", true);
        sim.settle();
        let conditions = sim.status().conditions.expect("conditions");
        let summary: Vec<(&str, &str)> = conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect();
        assert_eq!(
            summary,
            [
                ("Pending", "False"),
                ("Rescheduling", "False"),
                ("Starting", "False"),
                ("Running", "True")
            ]
        );
        let running = conditions.last().expect("last");
        assert_eq!(running.last_transition_time, running.last_update_time);
        // A flipped condition's transition time moves with the flip (spec 15.17).
        assert_eq!(
            conditions[2].last_transition_time,
            running.last_transition_time
        );
    }

    #[test]
    fn task_status_counts_pods_per_task_and_phase_including_terminating() {
        let mut sim = Sim::running(job());
        sim.set_pod("j-collector-1", "Pending", false);
        sim.pod_mut("j-learner-0").metadata.deletion_timestamp = Some(t(0));
        sim.step();
        let ts = sim.status().task_status.expect("task status");
        assert_eq!(
            ts["collector"],
            BTreeMap::from([("Running".to_string(), 1), ("Pending".to_string(), 1)])
        );
        assert_eq!(ts["learner"], BTreeMap::from([("Running".to_string(), 1)]));
        assert_eq!(ts.values().map(|m| m.values().sum::<i32>()).sum::<i32>(), 4);
    }

    #[test]
    fn di_nodes_entries_sum_to_n_squared() {
        for (replicas, n) in [([1, 1, 1], 3), ([1, 1, 2], 4), ([2, 1, 3], 6)] {
            let mut job = job();
            for (task, r) in job.spec.tasks.iter_mut().zip(replicas) {
                task.replicas = r;
            }
            let mut sim = Sim::new(job);
            sim.step();
            let total: usize = sim
                .pods
                .iter()
                .map(|p| env(p, "DI_NODES").split(',').count())
                .sum();
            assert_eq!(total, n * n);
        }
    }

    #[test]
    fn job_volumes_are_added_to_every_pod() {
        let mut sim = Sim::new(job_with(
            json!({"volumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {}}]}),
        ));
        sim.step();
        for pod in &sim.pods {
            assert_eq!(
                pod.spec
                    .as_ref()
                    .and_then(|s| s.volumes.as_ref())
                    .map(Vec::len),
                Some(2)
            );
        }
    }

    #[test]
    fn foreign_pods_and_services_are_never_adopted_or_duplicated() {
        let mut sim = Sim::new(job());
        let mut foreign = build::build_service(&sim.job);
        foreign.metadata.owner_references.as_mut().expect("refs")[0].uid = "old".into();
        sim.service = Some(foreign);
        let mut other = Pod::default();
        other.metadata.name = Some("j-learner-0".into());
        other.metadata.owner_references = sim
            .service
            .as_ref()
            .and_then(|s| s.metadata.owner_references.clone());
        sim.pods.push(other);
        let plan = sim.plan();
        let created: Vec<_> = plan
            .actions
            .iter()
            .map(|a| match a {
                Action::CreatePod(p) => p.metadata.name.clone().unwrap_or_default(),
                Action::CreateService(_) => "service".into(),
                _ => "other".into(),
            })
            .collect();
        assert_eq!(created, ["j-evaluator-0", "j-collector-0", "j-collector-1"]);
    }

    #[test]
    fn a_hand_deleted_service_comes_back_while_active_only() {
        let mut sim = Sim::running(job());
        sim.service = None;
        let plan = sim.step();
        assert!(matches!(
            plan.actions.as_slice(),
            [Action::CreateService(_)]
        ));
        assert_eq!(plan.transition, None);
    }

    #[test]
    fn an_unknown_phase_starts_over_in_pending() {
        let mut job = job();
        job.status = Some(DIJobStatus {
            phase: Some(Phase::Unknown),
            ..Default::default()
        });
        let mut sim = Sim::new(job);
        sim.settle();
        assert_eq!(sim.phase(), Some(Phase::Starting));
    }

    #[test]
    fn lost_status_is_rebuilt_from_pods_without_changing_ranks() {
        let mut sim = Sim::running(job());
        sim.job.spec.tasks[2].replicas = 3;
        sim.settle();
        // The status (and its rank table) is lost; ranks come back from the pods.
        sim.job.status = Some(DIJobStatus {
            phase: Some(Phase::Running),
            ..Default::default()
        });
        let plan = sim.plan();
        let ranks = plan.status.and_then(|s| s.ranks).expect("ranks");
        for pod in &sim.pods {
            let name = pod.metadata.name.clone().unwrap_or_default();
            assert_eq!(
                ranks.iter().position(|p| *p == name),
                Some(sim.rank(&name) as usize)
            );
        }
        assert!(plan.actions.is_empty());
    }

    #[test]
    fn oversized_jobs_fail_naming_the_field_before_any_slot_is_built() {
        // What the CRD schema and the webhook refuse, reaching the controller anyway (an older
        // CRD, the webhook down with failurePolicy Ignore): two billion replicas would be two
        // billion pod names, ranks and pods.
        let cases = [
            (
                json!([{"name": "c", "type": "collector", "replicas": 2_000_000_000, "template": {}}]),
                "spec.tasks[0].replicas: task c has replicas 2000000000, more than the 1000",
            ),
            (
                json!([{"name": "c", "type": "collector", "replicas": 1, "maxReplicas": 2_000_000_000, "template": {}}]),
                "spec.tasks[0].maxReplicas: task c has maxReplicas 2000000000",
            ),
            (
                Value::Array(
                    (0..65)
                        .map(|i| json!({"name": format!("t{i}"), "type": "none", "replicas": 1000, "template": {}}))
                        .collect(),
                ),
                "spec.tasks: job has 65 tasks",
            ),
            (
                Value::Array(
                    (0..5)
                        .map(|i| json!({"name": format!("t{i}"), "type": "none", "replicas": 1000, "template": {}}))
                        .collect(),
                ),
                "spec.tasks: job has 5000 replicas over its tasks",
            ),
        ];
        for (tasks, want) in cases {
            for preemptible in [false, true] {
                let job = job_with(json!({"tasks": tasks.clone(), "preemptible": preemptible}));
                // Even with an allocator answer and a status full of ranks (neither is used).
                let mut job = job;
                job.status = Some(DIJobStatus {
                    phase: Some(Phase::Running),
                    ranks: Some(vec!["j-c-0".into(); 10]),
                    ..Default::default()
                });
                let admission = Admission::Placed {
                    nodes: vec!["n0".into()],
                    by: "p".into(),
                    fallback: None,
                    replan: false,
                    replicas: Some(vec![u32::MAX; 70]),
                };
                let observed = Observed {
                    admission: Some(&admission),
                    ..Observed::default()
                };
                let plan = plan(&job, &observed, &BuildContext::default(), &t(0));
                let tr = plan.transition.expect("fails");
                assert_eq!((tr.to, tr.reason), (Phase::Failed, "JobFailed"));
                assert!(tr.message.starts_with(want), "{}", tr.message);
                assert!(plan.actions.is_empty(), "nothing created");
                assert_eq!(plan.events[0].message, tr.message, "the Event says why");
            }
        }
    }

    #[test]
    fn a_foreign_rank_annotation_is_ignored_reported_and_never_allocated() {
        let mut sim = Sim::running(job());
        let huge = "7".repeat(100_000);
        for (pod, value) in [
            ("j-collector-1", "2000000000"),
            ("j-collector-0", "-3"),
            ("j-evaluator-0", "rank-one"),
            ("j-learner-0", huge.as_str()),
        ] {
            sim.pod_mut(pod)
                .metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(labels::ANNOTATION_RANK.into(), value.into());
        }
        // Known pods: their annotations are not read at all.
        let plan = sim.step();
        assert!(plan.once.is_empty(), "{:?}", plan.once);
        assert_eq!(plan.status, None);
        // The rank table is lost (status is writable by others): every pod is unknown, and
        // its annotation is all there is.
        let mut status = sim.status();
        status.ranks = None;
        sim.job.status = Some(status);
        let plan = sim.step();
        let ranks = plan
            .status
            .as_ref()
            .and_then(|s| s.ranks.clone())
            .expect("ranks");
        assert_eq!(ranks.len(), 4, "{ranks:?}");
        let mut reported: Vec<String> = plan
            .once
            .iter()
            .map(|e| {
                assert_eq!(
                    (e.type_, e.reason),
                    (EventType::Warning, RANK_IGNORED_REASON)
                );
                assert!(e.message.len() < 200, "{}", e.message);
                e.message.split(':').next().unwrap_or_default().to_string()
            })
            .collect();
        reported.sort();
        assert_eq!(
            reported,
            [
                "pod j-collector-0",
                "pod j-collector-1",
                "pod j-evaluator-0",
                "pod j-learner-0"
            ]
        );
        assert!(
            plan.once.iter().any(|e| e.message.contains(
                "annotation diengine/rank=\"2000000000\" is not a rank of this job (0 to 3); ignored"
            )),
            "{:?}",
            plan.once
        );
        // The job keeps running on a table of its own size.
        assert_eq!(sim.phase(), Some(Phase::Running));
        assert!(plan.actions.is_empty(), "{:?}", plan.summary());
    }

    #[test]
    fn a_large_job_is_created_in_bounded_batches() {
        let tasks = json!([{"name": "c", "type": "collector", "replicas": 250,
            "template": {"spec": {"containers": [{"name": "di-container", "image": "i"}]}}}]);
        let mut sim = Sim::new(job_with(json!({ "tasks": tasks })));
        let plan = sim.step();
        let created = |p: &Plan| {
            p.actions
                .iter()
                .filter(|a| matches!(a, Action::CreatePod(_)))
                .count()
        };
        assert_eq!(created(&plan), MAX_CREATES_PER_PASS);
        assert_eq!(sim.phase(), Some(Phase::Pending));
        sim.settle();
        assert_eq!(sim.pods.len(), 250);
        assert_eq!(sim.phase(), Some(Phase::Starting));
        assert_rank_consistency(&sim);
    }

    #[test]
    fn policy_text_is_bounded_before_status_and_events() {
        let mut sim = Sim::new(job_with(json!({"preemptible": true})));
        let essay = format!("no fit: {}", "é".repeat(200_000));
        sim.admission = Some(waiting(&essay));
        sim.settle();
        let c = allocated_condition(&sim);
        let message = c.message.unwrap_or_default();
        assert!(message.len() <= MAX_MESSAGE_BYTES, "{}", message.len());
        assert!(message.ends_with("… (policy binpack@abc)"), "{message}");
        let failed: Vec<&JobEvent> = sim
            .events
            .iter()
            .filter(|e| e.reason == "FailedAllocation")
            .collect();
        assert_eq!(failed.len(), 1, "the same long text again is no news");
        assert!(failed[0].message.len() <= MAX_MESSAGE_BYTES);
        // A fallback's error text, too.
        sim.admission = Some(placed(&["a", "b", "c", "c"], Some(&"x".repeat(50_000))));
        let plan = sim.step();
        let fallback = plan
            .events
            .iter()
            .find(|e| e.reason == "PolicyFallback")
            .expect("fallback event");
        assert!(fallback.message.len() <= MAX_MESSAGE_BYTES);
        assert!(fallback.message.ends_with('…'));
        for c in sim.status().conditions.into_iter().flatten() {
            assert!(c.message.unwrap_or_default().len() <= MAX_MESSAGE_BYTES);
        }
    }

    #[test]
    fn clip_cuts_on_a_character_boundary_within_the_limit() {
        assert_eq!(clip("short", 10), "short");
        assert_eq!(clip("abcdefghij", 10), "abcdefghij");
        assert_eq!(clip("abcdefghijk", 10), "abcdefg…");
        let cut = clip(&"é".repeat(10), 10); // 2-byte chars: 7 bytes left for text -> 3 chars
        assert_eq!(cut, "ééé…");
        assert!(cut.len() <= 10);
    }

    #[test]
    fn counters_written_by_others_saturate() {
        let mut job = job();
        job.spec.backoff_limit = None;
        let mut sim = Sim::running(job);
        let mut status = sim.status();
        status.restarts = i32::MAX;
        sim.job.status = Some(status);
        sim.set_pod("j-learner-0", "Failed", false);
        let plan = sim.step();
        assert_eq!(plan.transition.map(|t| t.to), Some(Phase::Restarting));
        assert_eq!(sim.status().restarts, i32::MAX);
    }
}
