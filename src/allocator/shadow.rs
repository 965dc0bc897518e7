//! Shadow policies at work: every `allocate` and `optimize` input a policy answers is queued for
//! that policy's shadows (`diorch.io/shadow-of`), which one worker calls off the critical path,
//! through the same output checks ([`Checked`]), never applying their answers. Each answer is
//! compared with the active one's (`core::allocation::shadow`), counted, and, when it differs or
//! fails, kept in a bounded record of the latest such decisions per policy.
//!
//! The queue is bounded ([`QUEUE_CAPACITY`]): when it is full the shadow call is dropped and
//! counted (`diorch_policy_shadow_dropped_total`); submitting never waits. One worker calls one
//! shadow at a time, and starts one only when no active policy call is in flight and none ended
//! within [`QUIET`] ([`Shadows::active_call`]): shadows use the time active policies leave idle,
//! take at most one of the host's call slots, and in a burst of admissions fall behind (and
//! drop) rather than slow it. Each call is bounded by the host as an active call is (deadline, memory).
//!
//! The worker is a thread of its own at the lowest CPU priority (nice 19, on Linux), with its
//! own single-threaded runtime; the threads it starts for pooled Wasm calls inherit that
//! priority. A shadow call that is running when the next admission arrives (the gate cannot
//! know the future) then yields the CPU to it instead of sharing it: on 2 cores, sharing was
//! what a shadow cost the active policy's p99.
//!
//! Owns: the queue, the worker, the counts and the record. Must not touch: the ledger (a
//! shadow's answer is never applied) or the active call (it never waits for a shadow).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::{Notify, mpsc};

use super::{answer_of, policy_label};
use crate::metrics::{Metrics, PolicyCallLabels, ShadowLabels};
use crate::plugin::{self, Checked, SchedulingPolicy};
use diorch_core::allocation::admit::Answer;
pub use diorch_core::allocation::shadow::Failure;
use diorch_core::allocation::shadow::{self as compare, Comparison, Verdict};

/// The shadows' thread's default niceness: the lowest CPU priority (see the module doc).
pub const LOWEST_PRIORITY: i32 = 19;

/// Shadow calls waiting for the worker, across all shadows; more are dropped.
pub const QUEUE_CAPACITY: usize = 256;
/// Divergent (different or failed) decisions kept per policy, newest first.
pub const RECORD_CAPACITY: usize = 64;

/// One input the active policy answered, and its answer (checked, as the allocator read it).
pub enum Call {
    Allocate {
        job: Arc<plugin::Job>,
        nodes: Arc<[plugin::Node]>,
        active: Answer,
    },
    Optimize {
        jobs: Arc<[plugin::Job]>,
        nodes: Arc<[plugin::Node]>,
        previous: Vec<plugin::JobPlan>,
        active: Result<Vec<plugin::JobPlan>, Failure>,
    },
}

impl Call {
    fn name(&self) -> &'static str {
        match self {
            Call::Allocate { .. } => "allocate",
            Call::Optimize { .. } => "optimize",
        }
    }
}

struct Task {
    /// The policy jobs asked for.
    policy: String,
    /// Who answered for it.
    active_by: String,
    shadow: Checked<Arc<dyn SchedulingPolicy>>,
    call: Arc<Call>,
}

/// A divergent decision: what each side answered, for what input.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Divergence {
    /// RFC 3339.
    pub at: String,
    pub call: &'static str,
    /// The plugin that answered for the policy (name@sha256 prefix).
    pub active: String,
    /// The shadow (name@sha256 prefix).
    pub shadow: String,
    /// The input's size: jobs and nodes the policies were shown.
    pub input_jobs: usize,
    pub input_nodes: usize,
    /// The shadow's own reason for its `allocate` answer (contract 0.4.0; sanitised, 256
    /// bytes), so a platform team reads why the candidate would place the job otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shadow_reason: Option<String>,
    #[serde(flatten)]
    pub comparison: Comparison,
}

/// One shadow's counts.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Counts {
    pub same: u64,
    pub different: u64,
    pub failed: u64,
    pub dropped: u64,
}

/// What `GET /v1/policies/NAME/shadow` answers.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub policy: String,
    /// By shadow plugin name.
    pub shadows: BTreeMap<String, Counts>,
    /// The latest divergent decisions, newest first (at most [`RECORD_CAPACITY`]).
    pub divergences: VecDeque<Divergence>,
}

/// What every policy's shadows did, by policy; shared by the worker and the route showing it.
#[derive(Clone, Debug, Default)]
pub struct Reports(Arc<Mutex<BTreeMap<String, Report>>>);

impl Reports {
    /// What the shadows of `policy` did, if it has had any.
    pub fn get(&self, policy: &str) -> Option<Report> {
        lock(&self.0).get(policy).cloned()
    }
}

/// How long after the last active policy call ended a shadow call may start: back-to-back
/// admissions leave gaps of a fraction of a millisecond, and a shadow call started in one would
/// overlap (and slow) the next active call.
pub const QUIET: Duration = Duration::from_millis(2);

/// Active policy calls in flight, and when the last one ended: the worker starts a shadow call
/// only when none runs and none ended within [`QUIET`], so shadows use the time active policies
/// leave idle.
struct Gate {
    busy: AtomicUsize,
    idle: Notify,
    /// When the last active call ended, in nanoseconds since `base`. A std clock: the calls
    /// end on the operator's runtime and the worker reads it on its own.
    last_end: AtomicU64,
    base: Instant,
}

impl Default for Gate {
    fn default() -> Gate {
        Gate {
            busy: AtomicUsize::new(0),
            idle: Notify::new(),
            last_end: AtomicU64::new(0),
            base: Instant::now(),
        }
    }
}

impl Gate {
    fn now(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    async fn wait_idle(&self) {
        loop {
            // Registered before the check, so a call ending in between still wakes this.
            let idle = self.idle.notified();
            if self.busy.load(Ordering::Acquire) > 0 {
                idle.await;
                continue;
            }
            let since = Duration::from_nanos(
                self.now()
                    .saturating_sub(self.last_end.load(Ordering::Acquire)),
            );
            if since >= QUIET {
                return;
            }
            tokio::time::sleep(QUIET - since).await;
        }
    }
}

/// Held while an active policy call runs (see [`Shadows::active_call`]).
pub struct ActiveCall(Arc<Gate>);

impl Drop for ActiveCall {
    fn drop(&mut self) {
        self.0.last_end.store(self.0.now(), Ordering::Release);
        if self.0.busy.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// The shadow queue and what the worker found (see the module doc).
pub struct Shadows {
    metrics: Arc<Metrics>,
    queue: OnceLock<mpsc::Sender<Task>>,
    reports: Reports,
    gate: Arc<Gate>,
    /// The worker thread's niceness.
    nice: i32,
}

impl Shadows {
    pub fn new(metrics: Arc<Metrics>, reports: Reports, nice: i32) -> Shadows {
        Shadows {
            metrics,
            queue: OnceLock::new(),
            reports,
            gate: Arc::default(),
            nice,
        }
    }

    /// Marks an active policy call in flight until the guard drops: no shadow call starts
    /// meanwhile.
    pub fn active_call(&self) -> ActiveCall {
        self.gate.busy.fetch_add(1, Ordering::AcqRel);
        ActiveCall(self.gate.clone())
    }

    /// Queues `call`, answered for `policy` by `active_by`, for each of `shadows`; never waits.
    /// Must run inside a tokio runtime (the worker starts with the first call).
    pub fn submit(
        &self,
        policy: &str,
        active_by: &str,
        shadows: Vec<Arc<dyn SchedulingPolicy>>,
        call: Call,
    ) {
        if shadows.is_empty() {
            return;
        }
        let queue = self.queue.get_or_init(|| self.start());
        let call = Arc::new(call);
        for shadow in shadows {
            let shadow = Checked::plugin(shadow);
            let name = policy_label(shadow.by());
            let task = Task {
                policy: policy.to_string(),
                active_by: active_by.to_string(),
                shadow,
                call: call.clone(),
            };
            if queue.try_send(task).is_err() {
                self.metrics
                    .allocator
                    .shadow_dropped
                    .get_or_create(&ShadowLabels {
                        policy: policy.to_string(),
                        shadow: name.clone(),
                        result: call.name().to_string(),
                    })
                    .inc();
                let mut reports = lock(&self.reports.0);
                let report = report_of(&mut reports, policy);
                report.shadows.entry(name).or_default().dropped += 1;
            }
        }
    }

    /// What the shadows of `policy` did, if it has had any.
    pub fn report(&self, policy: &str) -> Option<Report> {
        self.reports.get(policy)
    }

    fn start(&self) -> mpsc::Sender<Task> {
        let (tx, mut rx) = mpsc::channel::<Task>(QUEUE_CAPACITY);
        let metrics = self.metrics.clone();
        let reports = self.reports.clone();
        let gate = self.gate.clone();
        let nice = self.nice;
        let worker = async move {
            while let Some(task) = rx.recv().await {
                gate.wait_idle().await;
                run(&metrics, &reports.0, task).await;
            }
        };
        let spawned = std::thread::Builder::new()
            .name("policy-shadows".into())
            .spawn(move || {
                lower_priority(nice);
                match tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                {
                    Ok(runtime) => runtime.block_on(worker),
                    Err(e) => tracing::error!(error = %e,
                        "cannot start the shadow policies' runtime; shadow calls queue and drop"),
                }
            });
        if let Err(e) = spawned {
            // The queue then fills and every shadow call is dropped and counted.
            tracing::error!(error = %e, "cannot start the shadow policies' thread");
        }
        tx
    }
}

/// Sets the calling thread's niceness to `nice` (19: the lowest CPU priority; 0 or less: left
/// as it is); threads it starts inherit it.
#[cfg(target_os = "linux")]
fn lower_priority(nice: i32) {
    if nice <= 0 {
        return;
    }
    // `setpriority(PRIO_PROCESS, 0, 19)`: on Linux id 0 names the calling thread (the nice
    // value is per thread under NPTL). Failure (e.g. a seccomp profile) leaves the thread at
    // normal priority, which only costs the active policy what it did before.
    if let Err(e) = rustix::process::setpriority_process(None, nice.min(LOWEST_PRIORITY)) {
        tracing::warn!(error = %e, "cannot lower the shadow policies' thread priority");
    }
}

#[cfg(not(target_os = "linux"))]
fn lower_priority(_nice: i32) {}

#[cfg(all(test, target_os = "linux"))]
#[test]
fn the_shadow_thread_runs_at_the_lowest_priority_and_others_do_not() {
    let nice = std::thread::spawn(|| {
        lower_priority(LOWEST_PRIORITY);
        let own = rustix::process::getpriority_process(None).unwrap();
        // A thread it starts (a pooled Wasm call's) inherits it.
        let child = std::thread::spawn(|| rustix::process::getpriority_process(None).unwrap())
            .join()
            .unwrap();
        (own, child)
    })
    .join()
    .unwrap();
    assert_eq!(nice, (19, 19));
    // The thread that started it is untouched: nice is per thread.
    assert!(rustix::process::getpriority_process(None).unwrap() < 19);
}

/// Calls one shadow, compares, counts and records.
async fn run(metrics: &Metrics, reports: &Mutex<BTreeMap<String, Report>>, task: Task) {
    let started = Instant::now();
    let (comparison, jobs, nodes, shadow_reason) = match task.call.as_ref() {
        Call::Allocate { job, nodes, active } => {
            let answer = task.shadow.allocate(job.clone(), nodes.clone()).await;
            let reason = answer.as_ref().ok().and_then(|a| a.why.reason.clone());
            let answer = answer_of(answer);
            (
                compare::allocation(&job.key, active, &answer),
                1,
                nodes.len(),
                reason,
            )
        }
        Call::Optimize {
            jobs,
            nodes,
            previous,
            active,
        } => {
            let answer = task
                .shadow
                .optimize(jobs.clone(), nodes.clone(), previous.clone())
                .await
                .map_err(|e| Failure(e.to_string()));
            let keys: Vec<String> = jobs.iter().map(|j| j.key.clone()).collect();
            (
                compare::plan(&keys, active, &answer),
                jobs.len(),
                nodes.len(),
                None,
            )
        }
    };
    let shadow = policy_label(task.shadow.by());
    metrics
        .allocator
        .policy_call_duration
        .get_or_create(&PolicyCallLabels {
            policy: task.policy.clone(),
            plugin: shadow.clone(),
            role: "shadow",
            call: task.call.name(),
        })
        .observe(started.elapsed().as_secs_f64());
    metrics
        .allocator
        .shadow_decisions
        .get_or_create(&ShadowLabels {
            policy: task.policy.clone(),
            shadow: shadow.clone(),
            result: comparison.verdict.as_str().to_string(),
        })
        .inc();
    tracing::debug!(policy = %task.policy, %shadow, call = task.call.name(),
        result = comparison.verdict.as_str(), differing = comparison.differing, "shadow decision");
    let mut reports = lock(reports);
    let report = report_of(&mut reports, &task.policy);
    let counts = report.shadows.entry(shadow).or_default();
    match comparison.verdict {
        Verdict::Same => {
            counts.same += 1;
            return;
        }
        Verdict::Different => counts.different += 1,
        Verdict::Failed => counts.failed += 1,
    }
    if report.divergences.len() == RECORD_CAPACITY {
        report.divergences.pop_back();
    }
    report.divergences.push_front(Divergence {
        at: jiff::Timestamp::now().to_string(),
        call: task.call.name(),
        active: task.active_by,
        shadow: task.shadow.by().to_string(),
        input_jobs: jobs,
        input_nodes: nodes,
        shadow_reason,
        comparison,
    });
}

fn report_of<'a>(reports: &'a mut BTreeMap<String, Report>, policy: &str) -> &'a mut Report {
    reports.entry(policy.to_string()).or_insert_with(|| Report {
        policy: policy.to_string(),
        ..Report::default()
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Entries are replaced whole: a panic cannot leave one half-written.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
