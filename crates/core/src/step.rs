//! The decision step: everything the controller decides about one DIJob in one pass, given what
//! it observed, what it remembers of its own earlier writes, and the time.
//!
//! A pass is: [`gate`] (whether to look at the job now at all), [`decide`] (the planner's plan
//! with the rules that depend on this process's own writes: a service it created that the cache
//! does not show yet, a status write of replica counts alone held back to fold several pod
//! changes into one), carrying out the plan (the caller's part, the only I/O), [`settle`] (what
//! the writes' outcomes mean: the Events, whether the pass failed, whether a pod the API server
//! refused as invalid fails the job through [`refused`]) and [`Decision::requeue`] (when to look
//! again). The operator's executor and the simulator both call these, so a simulated reconcile
//! differs from a real one only in who performs the writes.
//!
//! Owns: those rules, the per-job [`Memory`] they read, and the timing constants of the pass.
//! Must not touch: the clock (callers hand in `now`), a kube client, or the phase rules (the
//! planner's).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::DIJob;
use crate::build::BuildContext;
use crate::placement::Admission;
use crate::planner::{self, Action, EventType, JobEvent, Observed, Plan};

/// How long a service this process created is taken as there without the cache showing it.
pub const SERVICE_EXPECTATION: Duration = Duration::from_secs(5);

/// Least time between a job's status writes when the later one changes only replica counts.
pub const COUNTS_WRITE_INTERVAL: Duration = Duration::from_secs(1);

/// How long a change of replica counts alone waits before it is written: the pods of a job
/// start (and end) within moments of each other, so their counts fold into the phase write
/// that follows, or into one count write. `kubectl get dijobs` shows the counts this late at
/// most; a phase change is never held.
pub const COUNTS_HOLD: Duration = Duration::from_secs(3);

/// How often a job waiting for capacity is tried again without any capacity event.
pub const WAITING_RETRY: Duration = Duration::from_secs(30);

/// A pass before the caches have synced tries again this soon.
pub const CACHES_SYNCING_RETRY: Duration = Duration::from_millis(500);

/// A pass that finds the cache not yet showing this process's own writes tries again this late
/// at the latest. Only a safety net: the watch event that shows the write (the pod's, the
/// service's, the job's own) triggers a pass by itself. On a busy API server the watch shows a
/// write seconds late, and a retry each second was a third of all passes.
pub const OWN_WRITES_RETRY: Duration = Duration::from_secs(5);

/// A write refused because the job changed since it was read (409) is planned again this soon,
/// from the newer job.
pub const CONFLICT_RETRY: Duration = Duration::from_millis(200);

/// Most distinct `once` notices remembered per job; past it they are not recorded, so pods with
/// ever-new bad annotations cannot grow the set or flood the events API.
pub const MAX_NOTICES_PER_JOB: usize = 64;

/// What the controller remembers about one job between passes (forgotten with the job).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// When this process created the job's service, until the cache shows it.
    pub service_created: Option<Instant>,
    /// When this process last wrote the job's status.
    pub status_written: Option<Instant>,
    /// Since when a change of replica counts alone has been held back, unwritten.
    pub counts_held_since: Option<Instant>,
    /// The resourceVersion the job had when this process last wrote its status, if the write
    /// changed it: a pass that sees the job still at this version plans from a status older
    /// than its own write, and its write would only be refused (409).
    pub status_unseen: Option<String>,
    /// The resourceVersion this process's last status write gave the job, until the job's next
    /// watch event: when that event is this very write (its echo) and the pass that wrote it
    /// left nothing for a pass on its echo to do ([`echo_quiet`]), the echo brings no pass
    /// ([`echo_needs_pass`]). Cleared by a pass that waited for the write to show.
    pub status_echo: Option<String>,
    /// Reconcile errors in a row (the backoff's exponent).
    pub failures: u32,
    /// When this process last began a pass of the job: the rolling resync passes over a job
    /// that had one within the sync period.
    pub last_pass: Option<Instant>,
    /// Notes of the `once` notices already recorded.
    pub notices: BTreeSet<String>,
    /// What the job's last pass read from the caches, when that pass decided nothing
    /// ([`Decision::quiet`]) and placement had no say in it: the rolling resync skips the job
    /// while the caches still show exactly this ([`resync_needed`]).
    pub quiet: Option<Seen>,
}

/// What a pass read of the caches, by version: the job's resourceVersion, the version of its
/// cached pods (any event of any of its pods moves it) and its service's identity. Equal
/// `Seen`s mean the planner's inputs from the caches are the same.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    pub job: Option<String>,
    pub pods: Option<u64>,
    /// The cached service's uid and whether it is being deleted: all a pass reads of it.
    pub service: Option<(Option<String>, bool)>,
}

impl Seen {
    pub fn new(
        job: Option<&str>,
        pods: Option<u64>,
        service: Option<&crate::cached::CachedService>,
    ) -> Seen {
        Seen {
            job: job.map(str::to_string),
            pods,
            service: service.map(|s| {
                (
                    s.metadata.uid.clone(),
                    s.metadata.deletion_timestamp.is_some(),
                )
            }),
        }
    }
}

/// Whether a pass that decided `decision` about `job` leaves a quiet the resync may skip on
/// ([`resync_needed`]): a quiet pass placement had no say in (`admission`), of a job that is not
/// preemptible (its placement can change with no event of the job, as for [`echo_quiet`]).
pub fn quiet_for_resync(job: &DIJob, decision: &Decision, admission: Option<&Admission>) -> bool {
    decision.quiet() && admission.is_none() && !job.spec.preemptible
}

/// Whether the rolling resync must pass over a job whose caches show `now`: unless its last
/// pass decided nothing from exactly what they show. A pass is a pure function of the caches,
/// this process's memory of its own writes and the time; a quiet pass wrote nothing (so the
/// memory it leaves holds), and had no wake (so time alone changes nothing,
/// `a_quiet_pass_stays_quiet_from_the_same_caches_at_any_later_time`): its resync pass would
/// read the same and decide nothing again. A change the watches never delivered is not in the
/// caches either, so no pass would see it; what the allocator changes comes with a trigger of
/// its own. At 1 000 running jobs these passes were ~17 a second on an operator at rest.
pub fn resync_needed(memory: &Memory, now: &Seen) -> bool {
    memory.quiet.as_ref() != Some(now)
}

/// When to look at the job again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requeue {
    /// Only when something about the job changes (a watch event).
    AwaitChange,
    After(Duration),
}

/// Why a pass does not look at the job now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// The job is being deleted: garbage collection removes its pods and service through their
    /// owner references. Its expectations are dropped.
    Deleting,
    /// The caches have not synced (or placement is not ready): nothing they show is complete.
    CachesSyncing,
    /// The cache does not show this process's own latest pod writes yet (planning from it could
    /// create a pod twice), or its latest status write (a status write would be refused).
    OwnWritesUnseen,
}

impl Gate {
    pub fn requeue(self) -> Requeue {
        match self {
            Gate::Deleting => Requeue::AwaitChange,
            Gate::CachesSyncing => Requeue::After(CACHES_SYNCING_RETRY),
            Gate::OwnWritesUnseen => Requeue::After(OWN_WRITES_RETRY),
        }
    }
}

/// Whether the job at `resource_version` (the cache's) shows this process's last status write.
pub fn own_status_seen(memory: &Memory, resource_version: Option<&str>) -> bool {
    memory
        .status_unseen
        .as_deref()
        .is_none_or(|before| resource_version != Some(before))
}

/// What the memory's `status_unseen` becomes after a status write of the job at `before`
/// answered with the job at `after`: nothing to wait for when the version did not move.
pub fn status_written(before: Option<&str>, after: Option<&str>) -> Option<String> {
    match (before, after) {
        (Some(before), Some(after)) if before != after => Some(before.to_string()),
        _ => None,
    }
}

/// Whether a pass that wrote `plan`'s status may leave its echo (the job's watch event that
/// shows the write) without a pass of its own, given `echo`: the decision a pass on the echo
/// would make from the same pods, as the job, the memory and the time are once the write is done
/// (the executor decides it right after the write, from the server's answer; called only when
/// the rules below need it).
///
/// - Never for a write whose next step no watch event of a pod or service brings: a PodGroup,
///   the job's deletion or spec, a pass that ends the job, a new allocation or a counted restart
///   (the allocator's answer depends on the written status), nor for a preemptible job (its
///   placement can change between two passes with no event of the job).
/// - A pass that also wrote pods or the service: each of those writes comes back as a watch
///   event that brings the next pass (after the echo: a pass that sees the job without its write
///   waits for it, [`own_status_seen`]), so the echo's pass would be one more of the same.
/// - Otherwise only if `echo` plans nothing: no write, transition, Event or held counts, and no
///   earlier wake than the pass's own. One transition per pass: a job whose pods all run when
///   it is written Starting is written Running by the pass on that echo.
pub fn echo_quiet(
    job: &DIJob,
    plan: &Plan,
    pass: &Decision,
    echo: impl FnOnce() -> Decision,
) -> bool {
    let excluded = job.spec.preemptible
        || plan.transition.as_ref().is_some_and(|t| t.to.is_terminal())
        || plan.spec_patch.is_some()
        || plan.delete_job
        || plan.allocated
        || plan.counted
        || plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::EnsurePodGroup(_)));
    if excluded {
        return false;
    }
    if !plan.actions.is_empty() {
        return true;
    }
    let echo = echo();
    echo.plan.writes_nothing()
        && echo.held_counts.is_none()
        && echo.wake().unwrap_or(Duration::MAX) >= pass.wake().unwrap_or(Duration::MAX)
}

/// Whether the job's watch event at `resource_version` brings a pass: every event does, except
/// the echo of a status write that left nothing to do ([`echo_quiet`]). Only the job's next
/// event is compared: the echo comes first, since the write was guarded by the version it was
/// planned from.
pub fn echo_needs_pass(memory: &mut Memory, resource_version: Option<&str>) -> bool {
    match memory.status_echo.take() {
        Some(echo) => resource_version != Some(echo.as_str()),
        None => true,
    }
}

/// Whether a watch event of one of the job's pods or of its service brings a pass, the job
/// being at `resource_version` in the cache: not while the cache does not show this process's
/// last status write, as such a pass would only wait for it ([`Gate::OwnWritesUnseen`]). The
/// job's echo of that write then brings the pass instead: as a pass that waited does, this
/// clears the memory's `status_echo` ([`echo_needs_pass`]). The echo is sure to come: the
/// write moved the job's version, so the job's watch delivers that version or a later one (a
/// relist too), or its deletion, which needs no pass. The caller reads `resource_version`
/// while holding `memory`, so that the job's watch cannot store the echo and pass over it in
/// between.
pub fn owned_event_needs_pass(memory: &mut Memory, resource_version: Option<&str>) -> bool {
    if own_status_seen(memory, resource_version) {
        return true;
    }
    memory.status_echo = None;
    false
}

/// Whether a pass looks at the job now (`None`) or not, in this order.
pub fn gate(
    deleting: bool,
    caches_ready: bool,
    own_writes_seen: impl FnOnce() -> bool,
) -> Option<Gate> {
    if deleting {
        Some(Gate::Deleting)
    } else if !caches_ready {
        Some(Gate::CachesSyncing)
    } else if !own_writes_seen() {
        Some(Gate::OwnWritesUnseen)
    } else {
        None
    }
}

/// What one pass saw.
#[derive(Clone, Debug)]
pub struct Input<'a> {
    pub job: &'a DIJob,
    pub observed: Observed<'a>,
    pub memory: &'a Memory,
    /// Monotonic time, for the memory's instants.
    pub now: Instant,
    /// Wall time, stamped on conditions.
    pub wall: &'a Time,
}

/// What one pass decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// What to write, after the rules below.
    pub plan: Plan,
    /// A service create was dropped: this process created the service moments ago and the cache
    /// does not show it yet (a create now would only get a 409).
    pub service_expected: bool,
    /// The memory of a created service is done with (the cache shows it, or it is old).
    pub forget_service: bool,
    /// A status write of replica counts alone is held back this long (the plan carries none).
    pub held_counts: Option<Duration>,
    /// What the memory's `counts_held_since` becomes after this pass.
    pub counts_held_since: Option<Instant>,
    /// The job waits for capacity.
    pub waiting: bool,
}

/// The pass's decision: [`planner::plan`], then the rules that depend on this process's own
/// earlier writes.
pub fn decide(input: &Input<'_>, build: &BuildContext) -> Decision {
    let cached = input.observed.service.is_some();
    let (service_expected, forget_service) = match input.memory.service_created {
        Some(at) if !cached && input.now.saturating_duration_since(at) < SERVICE_EXPECTATION => {
            (true, false)
        }
        Some(_) => (false, true),
        None => (false, false),
    };
    let mut plan = planner::plan(input.job, &input.observed, build, input.wall);
    if service_expected {
        plan.actions
            .retain(|a| !matches!(a, Action::CreateService(_)));
    }
    let held_counts = held_counts(input, &plan);
    let counts_held_since =
        held_counts.map(|_| input.memory.counts_held_since.unwrap_or(input.now));
    if held_counts.is_some() {
        plan.status = None;
    }
    Decision {
        plan,
        service_expected,
        forget_service,
        held_counts,
        counts_held_since,
        waiting: matches!(input.observed.admission, Some(Admission::Waiting { .. })),
    }
}

/// How long a status write that changes only replica counts must wait (`None`: it may go now):
/// until [`COUNTS_HOLD`] after the first such change was held, and [`COUNTS_WRITE_INTERVAL`]
/// after the last write. Pods of a job change one by one (created, scheduled, running,
/// finished); folding their counts keeps a job at one status write per phase, plus at most one
/// of counts when its pods are spread over more than [`COUNTS_HOLD`] (docs/performance.md).
fn held_counts(input: &Input<'_>, plan: &Plan) -> Option<Duration> {
    let status = plan.status.as_ref()?;
    if plan.transition.is_some() || !planner::counts_only(input.job.status.as_ref(), status) {
        return None;
    }
    let since = input.memory.counts_held_since.unwrap_or(input.now);
    let hold = COUNTS_HOLD.checked_sub(input.now.saturating_duration_since(since));
    let interval = input.memory.status_written.and_then(|last| {
        COUNTS_WRITE_INTERVAL.checked_sub(input.now.saturating_duration_since(last))
    });
    hold.max(interval).filter(|d| !d.is_zero())
}

impl Decision {
    /// Whether this pass has nothing to do: no write, Event, notice or held counts, no wake and
    /// no wait for capacity or for a service this process created.
    pub fn quiet(&self) -> bool {
        self.plan.writes_nothing()
            && self.plan.once.is_empty()
            && !self.service_expected
            && !self.waiting
            && self.wake().is_none()
    }

    /// When the job's decision may change with no event at all: the held counts are due, or a
    /// deadline or TTL runs out.
    pub fn wake(&self) -> Option<Duration> {
        match (self.held_counts, self.plan.wake_after) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When to look again after a pass that carried the decision out with no error: when the
    /// decision may change with no event ([`Decision::wake`]), and for a job waiting for capacity
    /// [`WAITING_RETRY`] at the latest; otherwise only on an event. The operator's rolling resync
    /// passes over every job once a sync period besides, with no timer of the job's own.
    pub fn requeue(&self) -> Requeue {
        if self.plan.spec_patch.is_some() {
            // The patched job comes back as a watch event.
            return Requeue::AwaitChange;
        }
        let wake = self.wake();
        if self.waiting {
            // Capacity changes wake waiting jobs at once; this is the safety net.
            return Requeue::After(wake.map_or(WAITING_RETRY, |w| w.min(WAITING_RETRY)));
        }
        wake.map_or(Requeue::AwaitChange, Requeue::After)
    }
}

/// The plan after the API server refused a pod of this pass as invalid: retrying cannot help,
/// so the job fails, planned from `latest` (the job as this pass's own status write left it).
pub fn refused(latest: &DIJob, message: String, wall: &Time) -> Plan {
    planner::fail(latest, message, wall)
}

/// The backoff after `failures` reconcile errors in a row: 0.5 s after the first, doubling, at
/// most 5 minutes.
pub fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    Duration::from_millis(500u64.saturating_mul(1 << exp)).min(Duration::from_secs(300))
}

/// The `once` notices of a pass not recorded for this job before (each recorded once per job,
/// at most [`MAX_NOTICES_PER_JOB`] distinct ones); `memory` remembers them.
pub fn fresh_notices(memory: &mut Memory, notices: &[JobEvent]) -> Vec<JobEvent> {
    notices
        .iter()
        .filter(|e| {
            if memory.notices.len() >= MAX_NOTICES_PER_JOB && !memory.notices.contains(&e.message) {
                return false;
            }
            memory.notices.insert(e.message.clone())
        })
        .cloned()
        .collect()
}

/// What a write asks of its object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Create,
    Delete,
}

/// The pod or service a write is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Pod(String),
    Service(String),
}

impl std::fmt::Display for Target {
    /// `pod <name>` / `service <name>`: how Events, log lines and errors name the object.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Pod(name) => write!(f, "pod {name}"),
            Target::Service(name) => write!(f, "service {name}"),
        }
    }
}

impl Target {
    /// A reference to this object of `job`, so each object's Events stay apart instead of
    /// folding into one series.
    pub fn reference(&self, job: &DIJob) -> ObjectReference {
        let (kind, name) = match self {
            Target::Pod(name) => ("Pod", name),
            Target::Service(name) => ("Service", name),
        };
        ObjectReference {
            api_version: Some("v1".to_string()),
            kind: Some(kind.to_string()),
            name: Some(name.clone()),
            namespace: job.metadata.namespace.clone(),
            ..ObjectReference::default()
        }
    }
}

/// How a write ended, as the API server (or a mutator) answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// Done as asked.
    Done,
    /// A pod create found this very pod there: a retried create whose first answer was lost.
    /// Nothing to report; its expectation is met by the watch.
    Found,
    /// A mutator with failurePolicy Fail refused the pod: it was never sent.
    Refused(String),
    /// The API server refused the write (`code`, its HTTP status), or it got no answer.
    Failed { code: Option<u16>, message: String },
}

impl Ended {
    pub fn failed(&self) -> bool {
        matches!(self, Ended::Refused(_) | Ended::Failed { .. })
    }

    /// The error's message, for a write that did not end as asked.
    pub fn message(&self) -> Option<&str> {
        match self {
            Ended::Done | Ended::Found => None,
            Ended::Refused(message) | Ended::Failed { message, .. } => Some(message),
        }
    }

    /// The `kind` of the reconcile error (and of its metric) when this write failed.
    pub fn kind(&self, verb: Verb) -> &'static str {
        match (self, verb) {
            (Ended::Refused(_), _) => "mutate",
            (_, Verb::Create) => "create",
            (_, Verb::Delete) => "delete",
        }
    }
}

/// One pod or service write of a pass, and how it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    pub verb: Verb,
    pub target: Target,
    pub ended: Ended,
}

impl Write {
    /// Its `action` label on the writes metric.
    pub fn action(&self) -> &'static str {
        match (self.verb, &self.target) {
            (Verb::Create, Target::Pod(_)) => "create_pod",
            (Verb::Delete, Target::Pod(_)) => "delete_pod",
            (Verb::Create, Target::Service(_)) => "create_service",
            (Verb::Delete, Target::Service(_)) => "delete_service",
        }
    }
}

/// What a pass's writes mean.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Settled {
    /// DI-orchestrator's SuccessfulCreate / FailedCreate / SuccessfulDelete / FailedDelete /
    /// MutatorFailed Events, successes folded (see [`coalesce_successes`]), each with the
    /// object it is about.
    pub events: Vec<(JobEvent, Option<ObjectReference>)>,
    /// Writes that failed to meet their goal (indices into the pass's writes), in order.
    pub failed: Vec<usize>,
    /// The first pod the API server refused as invalid, as a condition message: the job fails
    /// ([`refused`]).
    pub invalid: Option<String>,
    /// Whether the pass is an error to retry with backoff. An invalid pod that is the only
    /// failure is not: the job fails instead.
    pub error: bool,
}

/// What the outcomes of a pass's `writes` mean for `job`.
pub fn settle(job: &DIJob, writes: &[Write]) -> Settled {
    let mut out = Settled::default();
    let mut events = Vec::new();
    for (
        i,
        Write {
            verb,
            target,
            ended,
        },
    ) in writes.iter().enumerate()
    {
        let (reason, type_, message) = match (verb, ended) {
            // This very pod is already there (a retried create the cache had not shown yet).
            (_, Ended::Found) => continue,
            (Verb::Create, Ended::Done) => (
                "SuccessfulCreate",
                EventType::Normal,
                format!("{target} was successfully created"),
            ),
            (Verb::Delete, Ended::Done) => (
                "SuccessfulDelete",
                EventType::Normal,
                format!("{target} was successfully deleted"),
            ),
            // The service is there already (the planner creates it only while none is cached
            // under its name): the goal is met. Pods are checked by the caller (a 409 on a pod
            // is `Found`, or a name another pod holds).
            (
                Verb::Create,
                Ended::Failed {
                    code: Some(409), ..
                },
            ) if matches!(target, Target::Service(_)) => {
                continue;
            }
            // Already gone: the goal is met.
            (
                Verb::Delete,
                Ended::Failed {
                    code: Some(404 | 409),
                    ..
                },
            ) => continue,
            // A mutator with failurePolicy Fail refused the pod: it is not created, like a pod
            // an admission webhook rejects, and the job retries with backoff.
            (_, Ended::Refused(message)) => (
                "MutatorFailed",
                EventType::Warning,
                format!("{target} was not created: {message}"),
            ),
            (Verb::Create, Ended::Failed { code, message }) => {
                if *code == Some(422) && matches!(target, Target::Pod(_)) && out.invalid.is_none() {
                    out.invalid = Some(format!("{target} failed to create: {message}"));
                }
                (
                    "FailedCreate",
                    EventType::Warning,
                    format!("failed to create {target} error: {message}"),
                )
            }
            (Verb::Delete, Ended::Failed { message, .. }) => (
                "FailedDelete",
                EventType::Warning,
                format!("failed to delete {target} error: {message}"),
            ),
        };
        if ended.failed() {
            out.failed.push(i);
        }
        events.push((
            JobEvent {
                type_,
                reason,
                message,
            },
            Some(target.reference(job)),
        ));
    }
    out.error = !out.failed.is_empty() && (out.invalid.is_none() || out.failed.len() != 1);
    out.events = coalesce_successes(events);
    out
}

/// Folds a pass's successful creates, and its successful deletes, into one Event each: a
/// 4-pod job's start is one `SuccessfulCreate` whose note lists DI-orchestrator's message for
/// each object, not five Events (each an API write, and a cache entry of the recorder). This is
/// what client-go's correlator does to similar Events, sooner. A lone success keeps its
/// object as the Event's related object; failures are never folded.
pub fn coalesce_successes(
    events: Vec<(JobEvent, Option<ObjectReference>)>,
) -> Vec<(JobEvent, Option<ObjectReference>)> {
    const FOLDED: [&str; 2] = ["SuccessfulCreate", "SuccessfulDelete"];
    let count = |reason: &str| events.iter().filter(|(e, _)| e.reason == reason).count();
    let fold: Vec<&str> = FOLDED.into_iter().filter(|r| count(r) > 1).collect();
    if fold.is_empty() {
        return events;
    }
    let mut out: Vec<(JobEvent, Option<ObjectReference>)> = Vec::new();
    for (event, related) in events {
        if !fold.contains(&event.reason) {
            out.push((event, related));
            continue;
        }
        match out.iter_mut().find(|(e, _)| e.reason == event.reason) {
            Some((folded, _)) => {
                folded.message.push_str("; ");
                folded.message.push_str(&event.message);
            }
            None => out.push((event, None)),
        }
    }
    out
}

#[cfg(test)]
mod tests;
