//! The decision step's rules, one test each: gating, held count writes, the expected service,
//! the requeue, an invalid pod, the backoff, notices, and what writes' outcomes mean.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::*;
use crate::cached::CachedService;
use crate::planner::JobEvent;

#[test]
fn successes_of_a_pass_fold_into_one_event_each_and_failures_do_not() {
    let event = |type_, reason: &'static str, message: &str| JobEvent {
        type_,
        reason,
        message: message.to_string(),
    };
    let related = |name: &str| {
        Some(ObjectReference {
            name: Some(name.to_string()),
            ..ObjectReference::default()
        })
    };
    let ok = |m| event(EventType::Normal, "SuccessfulCreate", m);
    let folded = coalesce_successes(vec![
        (ok("pod a was successfully created"), related("a")),
        (
            event(EventType::Warning, "FailedCreate", "failed to create pod b"),
            related("b"),
        ),
        (ok("service s was successfully created"), related("s")),
        (
            event(
                EventType::Normal,
                "SuccessfulDelete",
                "pod c was successfully deleted",
            ),
            related("c"),
        ),
    ]);
    let seen: Vec<(&str, &str, Option<&str>)> = folded
        .iter()
        .map(|(e, r)| {
            (
                e.reason,
                e.message.as_str(),
                r.as_ref().and_then(|r| r.name.as_deref()),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                "SuccessfulCreate",
                "pod a was successfully created; service s was successfully created",
                None
            ),
            ("FailedCreate", "failed to create pod b", Some("b")),
            // Alone in its pass: DI-orchestrator's Event, related object and all.
            (
                "SuccessfulDelete",
                "pod c was successfully deleted",
                Some("c")
            ),
        ]
    );
}

#[test]
fn backoff_doubles_per_failure_up_to_five_minutes() {
    let delays: Vec<u64> = (1..=4).map(|n| backoff(n).as_millis() as u64).collect();
    assert_eq!(delays, [500, 1000, 2000, 4000]);
    assert_eq!(backoff(30), Duration::from_secs(300));
    assert_eq!(backoff(u32::MAX), Duration::from_secs(300));
}

/// The words Events, logs and errors use for a write, and its metric labels, as they were
/// when writes were described by strings.
#[test]
fn writes_keep_their_texts_and_labels() {
    let refused = || "no".to_string();
    let write = |verb, target, ended| Write {
        verb,
        target,
        ended,
    };
    let pod = || Target::Pod("j-learner-0".into());
    let service = || Target::Service("di-j".into());
    assert_eq!(pod().to_string(), "pod j-learner-0");
    assert_eq!(service().to_string(), "service di-j");
    let labels: Vec<&str> = [
        write(Verb::Create, pod(), Ended::Done),
        write(Verb::Delete, pod(), Ended::Done),
        write(Verb::Create, service(), Ended::Done),
        write(Verb::Delete, service(), Ended::Done),
    ]
    .iter()
    .map(Write::action)
    .collect();
    assert_eq!(
        labels,
        [
            "create_pod",
            "delete_pod",
            "create_service",
            "delete_service"
        ]
    );
    assert_eq!(Ended::Refused(refused()).kind(Verb::Create), "mutate");
    assert_eq!(
        Ended::Failed {
            code: None,
            message: refused()
        }
        .kind(Verb::Create),
        "create"
    );
    assert_eq!(
        Ended::Failed {
            code: None,
            message: refused()
        }
        .kind(Verb::Delete),
        "delete"
    );

    let job: DIJob = serde_json::from_value(serde_json::json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
        "metadata": {"name": "j", "namespace": "ns"}, "spec": {"tasks": []}
    }))
    .expect("job");
    let reference = service().reference(&job);
    assert_eq!(
        (
            reference.api_version.as_deref(),
            reference.kind.as_deref(),
            reference.name.as_deref(),
            reference.namespace.as_deref()
        ),
        (Some("v1"), Some("Service"), Some("di-j"), Some("ns"))
    );
    assert_eq!(pod().reference(&job).kind.as_deref(), Some("Pod"));
}

fn wall(s: i64) -> Time {
    Time(jiff::Timestamp::from_second(1_700_000_000 + s).expect("time"))
}

fn two_task_job() -> DIJob {
    serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1",
        "kind": "DIJob",
        "metadata": {"name": "j", "namespace": "default", "uid": "uid-1"},
        "spec": {"tasks": [
            {"name": "learner", "type": "learner", "replicas": 1, "template": {"spec": {"containers": [{"name": "di-container", "image": "i"}]}}},
            {"name": "collector", "type": "collector", "replicas": 2, "template": {"spec": {"containers": [{"name": "di-container", "image": "i"}]}}}
        ]}
    }))
    .expect("job")
}

/// The pods and service a plan creates, as the cache would show them (pods in `phase`).
fn created(plan: &Plan, phase: &str) -> (Vec<crate::cached::CachedPod>, Option<CachedService>) {
    let mut pods = Vec::new();
    let mut service = None;
    for (i, action) in plan.actions.iter().enumerate() {
        match action {
            Action::CreatePod(pod) => {
                let mut pod = (**pod).clone();
                pod.metadata.uid = Some(format!("pod-{i}"));
                pod.status = Some(k8s_openapi::api::core::v1::PodStatus {
                    phase: Some(phase.into()),
                    ..Default::default()
                });
                pods.push(crate::cached::CachedPod::from(pod));
            }
            Action::CreateService(svc) => {
                let mut meta = svc.metadata.clone();
                meta.uid = Some("svc".into());
                service = Some(CachedService {
                    metadata: meta.into(),
                });
            }
            _ => {}
        }
    }
    (pods, service)
}

fn decide_at(
    job: &DIJob,
    pods: &[crate::cached::CachedPod],
    service: Option<&CachedService>,
    memory: &Memory,
    now: Instant,
) -> Decision {
    let at = wall(10);
    let input = Input {
        job,
        observed: Observed {
            pods: pods.iter().collect(),
            service,
            admission: None,
        },
        memory,
        now,
        wall: &at,
    };
    decide(&input, &BuildContext::default())
}

fn creates_service(plan: &Plan) -> bool {
    plan.actions
        .iter()
        .any(|a| matches!(a, Action::CreateService(_)))
}

#[test]
fn a_pass_is_gated_by_deletion_then_syncing_caches_then_unseen_own_writes() {
    let never = || -> bool { panic!("the cache is not read for a job being deleted") };
    assert_eq!(gate(true, false, never), Some(Gate::Deleting));
    assert_eq!(gate(false, false, || true), Some(Gate::CachesSyncing));
    assert_eq!(gate(false, true, || false), Some(Gate::OwnWritesUnseen));
    assert_eq!(gate(false, true, || true), None);
    assert_eq!(Gate::Deleting.requeue(), Requeue::AwaitChange);
    assert_eq!(
        Gate::CachesSyncing.requeue(),
        Requeue::After(Duration::from_millis(500))
    );
    // A safety net only: the watch event that shows the write triggers a pass itself.
    assert_eq!(
        Gate::OwnWritesUnseen.requeue(),
        Requeue::After(Duration::from_secs(5))
    );
}

#[test]
fn a_service_created_moments_ago_and_not_cached_yet_is_not_created_again() {
    let job = two_task_job();
    let now = Instant::now();
    let fresh = Memory {
        service_created: Some(now - Duration::from_secs(2)),
        ..Memory::default()
    };
    let d = decide_at(&job, &[], None, &fresh, now);
    assert!(d.service_expected && !d.forget_service);
    assert!(!creates_service(&d.plan), "{}", d.plan.summary());
    // The pods are still created: only the service is expected.
    assert!(d.plan.summary().contains("create pod j-learner-0"));

    // Older than the expectation: the create goes out again, and the memory is dropped.
    let old = Memory {
        service_created: Some(now - SERVICE_EXPECTATION),
        ..Memory::default()
    };
    let d = decide_at(&job, &[], None, &old, now);
    assert!(!d.service_expected && d.forget_service);
    assert!(creates_service(&d.plan));

    // Never created by this process: nothing expected, nothing to forget.
    let d = decide_at(&job, &[], None, &Memory::default(), now);
    assert!(!d.service_expected && !d.forget_service && creates_service(&d.plan));
}

#[test]
fn a_cached_service_ends_the_expectation() {
    let job = two_task_job();
    let now = Instant::now();
    let first = decide_at(&job, &[], None, &Memory::default(), now);
    let (_, service) = created(&first.plan, "Pending");
    let memory = Memory {
        service_created: Some(now),
        ..Memory::default()
    };
    let d = decide_at(&job, &[], service.as_ref(), &memory, now);
    assert!(!d.service_expected && d.forget_service);
}

#[test]
fn a_status_write_of_counts_alone_waits_for_more_changes_and_a_second_after_the_last_write() {
    let mut job = two_task_job();
    let now = Instant::now();
    let first = decide_at(&job, &[], None, &Memory::default(), now);
    job.status = first.plan.status.clone();
    let (mut pods, service) = created(&first.plan, "Pending");
    let starting = decide_at(&job, &pods, service.as_ref(), &Memory::default(), now);
    job.status = starting.plan.status.clone();
    // One pod of three runs: the counts change, the phase does not.
    if let Some(s) = pods[0].status.as_mut() {
        s.phase = Some("Running".into());
    }
    let memory = |held: Option<Duration>, written: Option<Duration>| Memory {
        counts_held_since: held.map(|ago| now - ago),
        status_written: written.map(|ago| now - ago),
        ..Memory::default()
    };
    let decide = |m: &Memory| decide_at(&job, &pods, service.as_ref(), m, now);

    // First seen: held for the whole hold, and remembered from now.
    let first = decide(&memory(None, None));
    assert_eq!(first.held_counts, Some(COUNTS_HOLD));
    assert_eq!(first.counts_held_since, Some(now));
    assert_eq!(first.plan.status, None);
    assert_eq!(first.wake(), Some(COUNTS_HOLD));
    assert_eq!(first.requeue(), Requeue::After(COUNTS_HOLD));
    // Held a second already: two to go, since unchanged.
    let held = decide(&memory(Some(Duration::from_secs(1)), None));
    assert_eq!(held.held_counts, Some(COUNTS_HOLD - Duration::from_secs(1)));
    assert_eq!(held.counts_held_since, Some(now - Duration::from_secs(1)));
    // The hold is over: written now, and the memory of it cleared.
    let due = decide(&memory(Some(COUNTS_HOLD), None));
    assert_eq!(due.held_counts, None);
    assert_eq!(due.counts_held_since, None);
    let status = due.plan.status.clone().expect("the counts are written");
    assert!(
        due.plan.transition.is_none() && planner::counts_only(job.status.as_ref(), &status),
        "the scenario is a counts-only change: {}",
        due.plan.summary()
    );
    // Over, but the last write was 300 ms ago: a second between writes still holds.
    let recent = decide(&memory(
        Some(COUNTS_HOLD * 2),
        Some(Duration::from_millis(300)),
    ));
    assert_eq!(recent.held_counts, Some(Duration::from_millis(700)));
    let both = decide(&memory(
        Some(COUNTS_HOLD * 2),
        Some(COUNTS_WRITE_INTERVAL * 2),
    ));
    assert_eq!(both.held_counts, None);
    assert_eq!(both.plan.status, Some(status));
}

#[test]
fn a_phase_change_is_never_held() {
    let job = two_task_job();
    let now = Instant::now();
    let memory = Memory {
        status_written: Some(now),
        ..Memory::default()
    };
    let d = decide_at(&job, &[], None, &memory, now);
    assert!(d.plan.transition.is_some());
    assert!(d.plan.status.is_some() && d.held_counts.is_none());
}

#[test]
fn the_requeue_meets_deadlines_waits_for_capacity_follows_a_spec_patch_and_else_awaits_an_event() {
    let base = Decision {
        plan: Plan::default(),
        service_expected: false,
        forget_service: false,
        held_counts: None,
        counts_held_since: None,
        waiting: false,
    };
    // Nothing due: only an event (or the operator's rolling resync) brings the next pass.
    assert_eq!(base.requeue(), Requeue::AwaitChange);
    assert_eq!(base.wake(), None);
    let mut deadline = base.clone();
    deadline.plan.wake_after = Some(Duration::from_secs(5));
    assert_eq!(deadline.requeue(), Requeue::After(Duration::from_secs(5)));
    assert_eq!(deadline.wake(), Some(Duration::from_secs(5)));
    // A TTL days away is still met on time, by the job's own timer.
    let mut ttl = base.clone();
    ttl.plan.wake_after = Some(Duration::from_secs(3 * 86_400));
    assert_eq!(
        ttl.requeue(),
        Requeue::After(Duration::from_secs(3 * 86_400))
    );
    let mut waiting = base.clone();
    waiting.waiting = true;
    assert_eq!(waiting.requeue(), Requeue::After(WAITING_RETRY));
    waiting.held_counts = Some(Duration::from_millis(10));
    assert_eq!(waiting.requeue(), Requeue::After(Duration::from_millis(10)));
    waiting.held_counts = None;
    waiting.plan.wake_after = Some(WAITING_RETRY * 2);
    assert_eq!(waiting.requeue(), Requeue::After(WAITING_RETRY));
    let mut patch = base;
    patch.plan.spec_patch = Some(json!([]));
    patch.plan.wake_after = Some(Duration::from_secs(5));
    assert_eq!(patch.requeue(), Requeue::AwaitChange);
}

#[test]
fn a_pod_refused_as_invalid_fails_the_job_and_is_not_an_error_to_retry() {
    let job = two_task_job();
    let pod = |name: &str| Target::Pod(name.into());
    let writes = [
        Write {
            verb: Verb::Create,
            target: pod("j-learner-0"),
            ended: Ended::Failed {
                code: Some(422),
                message: "spec.containers[0].image: Required value".into(),
            },
        },
        Write {
            verb: Verb::Create,
            target: pod("j-collector-0"),
            ended: Ended::Done,
        },
    ];
    let s = settle(&job, &writes);
    assert_eq!(
        s.invalid.as_deref(),
        Some("pod j-learner-0 failed to create: spec.containers[0].image: Required value")
    );
    assert_eq!(s.failed, [0]);
    assert!(!s.error, "the job fails instead of retrying");
    let failed = refused(&job, s.invalid.clone().unwrap_or_default(), &wall(3));
    assert_eq!(
        failed.transition.as_ref().map(|t| t.to),
        Some(crate::api::Phase::Failed)
    );

    // Another failure besides it: the pass is an error too.
    let mut more = writes.to_vec();
    more.push(Write {
        verb: Verb::Delete,
        target: pod("old"),
        ended: Ended::Failed {
            code: Some(500),
            message: "etcd".into(),
        },
    });
    let s = settle(&job, &more);
    assert!(s.error && s.invalid.is_some());
    assert_eq!(s.failed, [0, 2]);
}

#[test]
fn writes_that_find_their_goal_met_are_not_failures() {
    let job = two_task_job();
    let w = |verb, target, code| Write {
        verb,
        target,
        ended: Ended::Failed {
            code: Some(code),
            message: "x".into(),
        },
    };
    let s = settle(
        &job,
        &[
            w(Verb::Create, Target::Service("di-j".into()), 409),
            w(Verb::Delete, Target::Pod("a".into()), 404),
            w(Verb::Delete, Target::Pod("b".into()), 409),
            Write {
                verb: Verb::Create,
                target: Target::Pod("c".into()),
                ended: Ended::Found,
            },
        ],
    );
    assert_eq!(s, Settled::default());
    // A pod create refused by a mutator is a failure, with its own Event.
    let s = settle(
        &job,
        &[Write {
            verb: Verb::Create,
            target: Target::Pod("c".into()),
            ended: Ended::Refused("denied".into()),
        }],
    );
    assert!(s.error);
    assert_eq!(s.events[0].0.reason, "MutatorFailed");
    assert_eq!(s.events[0].0.message, "pod c was not created: denied");
}

#[test]
fn each_notice_is_recorded_once_per_job_and_at_most_sixty_four() {
    let notice = |m: String| JobEvent {
        type_: EventType::Warning,
        reason: "RankIgnored",
        message: m,
    };
    let mut memory = Memory::default();
    let first = fresh_notices(&mut memory, &[notice("a".into()), notice("a".into())]);
    assert_eq!(first.len(), 1);
    assert!(fresh_notices(&mut memory, &[notice("a".into())]).is_empty());
    let many: Vec<JobEvent> = (0..100).map(|i| notice(format!("n{i}"))).collect();
    assert_eq!(
        fresh_notices(&mut memory, &many).len(),
        MAX_NOTICES_PER_JOB - 1
    );
    assert_eq!(memory.notices.len(), MAX_NOTICES_PER_JOB);
}

#[test]
fn a_pass_waits_for_the_cache_to_show_its_own_status_write() {
    let mut memory = Memory::default();
    assert!(own_status_seen(&memory, Some("1")), "nothing written yet");
    memory.status_unseen = status_written(Some("1"), Some("2"));
    assert_eq!(memory.status_unseen.as_deref(), Some("1"));
    assert!(!own_status_seen(&memory, Some("1")), "the cache is behind");
    assert!(own_status_seen(&memory, Some("2")), "the cache shows it");
    assert!(
        own_status_seen(&memory, Some("7")),
        "or something newer: versions are only compared for equality"
    );
    assert!(own_status_seen(&memory, None));
    // A write that changed nothing leaves the version: nothing to wait for.
    assert_eq!(status_written(Some("2"), Some("2")), None);
    assert_eq!(status_written(None, Some("2")), None);
    assert_eq!(status_written(Some("2"), None), None);
}

/// `pod` in `phase`, Ready when Running (as a kubelet reports a started container).
fn set_phase(pod: &mut crate::cached::CachedPod, phase: &str) {
    if let Some(s) = pod.status.as_mut() {
        s.phase = Some(phase.into());
        s.conditions = (phase == "Running").then(|| {
            vec![crate::cached::CachedCondition {
                type_: "Ready".into(),
                status: "True".into(),
            }]
        });
    }
}

#[test]
fn the_echo_of_a_status_write_is_compared_once() {
    let mut memory = Memory {
        status_echo: Some("6".into()),
        ..Memory::default()
    };
    assert!(!echo_needs_pass(&mut memory, Some("6")));
    assert!(echo_needs_pass(&mut memory, Some("6")), "compared once");
    memory.status_echo = Some("6".into());
    assert!(echo_needs_pass(&mut memory, Some("7")), "another change");
    assert_eq!(memory.status_echo, None);
    assert!(echo_needs_pass(&mut Memory::default(), Some("6")));
}

/// A pod or service event while the cache shows the job from before this process's own status
/// write brings no pass (it would only wait), and hands the pass to the write's echo, even an
/// echo that the write's own pass had marked as needing none.
#[test]
fn an_owned_event_before_the_echo_of_a_status_write_leaves_the_pass_to_the_echo() {
    let mut memory = Memory {
        status_unseen: Some("5".into()),
        status_echo: Some("6".into()),
        ..Memory::default()
    };
    assert!(!owned_event_needs_pass(&mut memory, Some("5")));
    assert_eq!(memory.status_echo, None, "the echo must bring the pass");
    assert!(echo_needs_pass(&mut memory, Some("6")));
    // The status_unseen it compares with is what the gate compares with.
    assert!(!own_status_seen(&memory, Some("5")));

    // Once the cache shows the write (or anything later), events bring passes again, and the
    // echo's own rule stands.
    let mut memory = Memory {
        status_unseen: Some("5".into()),
        status_echo: Some("6".into()),
        ..Memory::default()
    };
    assert!(owned_event_needs_pass(&mut memory, Some("6")));
    assert!(owned_event_needs_pass(&mut memory, Some("9")));
    assert_eq!(memory.status_echo.as_deref(), Some("6"));
    // No write of this process to wait for: every event brings a pass.
    assert!(owned_event_needs_pass(&mut Memory::default(), Some("5")));
    assert!(owned_event_needs_pass(&mut Memory::default(), None));
}

/// The echo a pass may leave without a pass: the one after creates (their own events bring the
/// next pass), and after a write whose echo pass would plan nothing; not the echo of Starting
/// written while every pod already runs (one transition per pass: Running comes on the echo).
#[test]
fn an_echo_is_quiet_when_its_pass_would_plan_nothing() {
    let mut job = two_task_job();
    let now = Instant::now();
    let memory = Memory::default();
    let first = decide_at(&job, &[], None, &memory, now);
    job.status = first.plan.status.clone();
    let (mut pods, service) = created(&first.plan, "Pending");
    for pod in &mut pods {
        set_phase(pod, "Running");
    }
    let echo = decide_at(&job, &[], None, &memory, now);
    assert!(
        echo_quiet(&job, &first.plan, &first, || echo.clone()),
        "creates bring passes"
    );

    let starting = decide_at(&job, &pods, service.as_ref(), &memory, now);
    assert!(
        starting.plan.actions.is_empty(),
        "{}",
        starting.plan.summary()
    );
    let mut written = job.clone();
    written.status = starting.plan.status.clone();
    let echo = decide_at(&written, &pods, service.as_ref(), &memory, now);
    assert!(echo.plan.transition.is_some(), "{}", echo.plan.summary());
    assert!(!echo_quiet(&job, &starting.plan, &starting, || echo.clone()));

    let mut running = written.clone();
    running.status = echo.plan.status.clone();
    let after = decide_at(&running, &pods, service.as_ref(), &memory, now);
    assert!(
        echo_quiet(&written, &echo.plan, &echo, || after.clone()),
        "{}",
        after.plan.summary()
    );

    // Writes whose next step no pod or service event brings keep their echo's pass.
    let mut preemptible = written.clone();
    preemptible.spec.preemptible = true;
    assert!(!echo_quiet(&preemptible, &echo.plan, &echo, || after.clone()));
    for plan in [
        Plan {
            allocated: true,
            ..echo.plan.clone()
        },
        Plan {
            counted: true,
            ..echo.plan.clone()
        },
        Plan {
            delete_job: true,
            ..echo.plan.clone()
        },
        Plan {
            transition: Some(planner::Transition {
                from: Some(crate::api::Phase::Running),
                to: crate::api::Phase::Succeeded,
                reason: "JobSucceeded",
                message: "job succeeded".into(),
            }),
            ..echo.plan.clone()
        },
    ] {
        assert!(
            !echo_quiet(&written, &plan, &echo, || after.clone()),
            "{}",
            plan.summary()
        );
    }
    // An echo pass that would wake sooner (a deadline it alone sees) is not quiet.
    let sooner = Decision {
        plan: Plan {
            wake_after: Some(Duration::from_secs(1)),
            ..Plan::default()
        },
        ..after.clone()
    };
    assert!(!echo_quiet(&written, &echo.plan, &echo, || sooner.clone()));
}

/// Skipping quiet echoes changes nothing a job goes through (and neither does skipping a pod's
/// event that moved only its node): random jobs, whose pods change
/// phase, go away and wait in random batches, each batch followed by a pass, are reconciled
/// twice, as the executor carries passes out: once with a pass on every status write's echo,
/// once skipping the echoes [`echo_quiet`] calls quiet (a pass that also created or deleted
/// pods is followed by the pass their events bring). The jobs' statuses and pods agree after
/// every batch.
mod status_echo {
    use proptest::prelude::*;

    use super::*;
    use crate::cached::CachedPod;

    #[derive(Clone, Debug)]
    enum Change {
        /// Pod `index` (modulo the pods there are) goes to `PHASES[phase]`.
        Phase(u8, u8),
        /// Pod `index` is gone.
        Gone(u8),
        /// Every pod runs (a fast kubelet between two passes).
        AllRunning,
        /// Time passes.
        Later(u16),
        /// The batch ends: a pass.
        Pass,
    }

    const PHASES: [&str; 4] = ["Pending", "Running", "Succeeded", "Failed"];

    fn change() -> impl Strategy<Value = Change> {
        prop_oneof![
            4 => (any::<u8>(), 0..4u8).prop_map(|(i, p)| Change::Phase(i, p)),
            1 => any::<u8>().prop_map(Change::Gone),
            1 => Just(Change::AllRunning),
            2 => (0..8000u16).prop_map(Change::Later),
            3 => Just(Change::Pass),
        ]
    }

    fn job(collectors: u8, policy: u8, backoff: u8, deadline: bool, ttl: bool) -> DIJob {
        let template = json!({"spec": {"containers": [{"name": "di-container", "image": "i"}]}});
        let policy = ["Running", "All", "None"][usize::from(policy % 3)];
        let mut spec = json!({
            "cleanPodPolicy": policy,
            "backoffLimit": backoff,
            "tasks": [
                {"name": "learner", "type": "learner", "replicas": 1, "template": template},
                {"name": "collector", "type": "collector", "replicas": collectors,
                 "template": template}
            ]
        });
        if deadline {
            spec["activeDeadlineSeconds"] = json!(20);
        }
        if ttl {
            spec["ttlSecondsAfterFinished"] = json!(5);
        }
        crate::planner::tests::job_with(spec)
    }

    /// A job of `job`'s shape: 0–3 collectors, any clean-pod policy, backoff 0–2, with or
    /// without a deadline and a TTL.
    fn any_job() -> impl Strategy<Value = DIJob> {
        (0..4u8, 0..3u8, 0..3u8, any::<bool>(), any::<bool>()).prop_map(
            |(collectors, policy, backoff, deadline, ttl)| {
                job(collectors, policy, backoff, deadline, ttl)
            },
        )
    }

    #[derive(Clone)]
    struct World {
        job: DIJob,
        pods: Vec<CachedPod>,
        service: Option<CachedService>,
        memory: Memory,
        start: Instant,
        ms: u64,
        uids: u32,
        skip: bool,
    }

    impl World {
        /// `job` before its first pass, skipping quiet echoes or not.
        fn new(job: DIJob, skip: bool) -> World {
            World {
                job,
                pods: Vec::new(),
                service: None,
                memory: Memory::default(),
                start: Instant::now(),
                ms: 0,
                uids: 0,
                skip,
            }
        }

        fn decide(&self) -> Decision {
            let now = self.start + Duration::from_millis(self.ms);
            let at = wall(i64::try_from(self.ms / 1000).expect("small"));
            let input = Input {
                job: &self.job,
                observed: Observed {
                    pods: self.pods.iter().collect(),
                    service: self.service.as_ref(),
                    admission: None,
                },
                memory: &self.memory,
                now,
                wall: &at,
            };
            decide(&input, &BuildContext::default())
        }

        /// One pass, carried out as the executor does; whether another pass follows it at once
        /// (on the echo of its status write).
        fn pass(&mut self) -> bool {
            let d = self.decide();
            let now = self.start + Duration::from_millis(self.ms);
            if d.forget_service {
                self.memory.service_created = None;
            }
            self.memory.counts_held_since = d.counts_held_since;
            let mut wrote = false;
            if let Some(status) = &d.plan.status
                && self.job.status.as_ref() != Some(status)
            {
                self.job.status = Some(status.clone());
                self.memory.status_written = Some(now);
                wrote = true;
            }
            for action in &d.plan.actions {
                match action {
                    Action::CreatePod(pod) => {
                        let mut pod = (**pod).clone();
                        self.uids += 1;
                        pod.metadata.uid = Some(format!("pod-{}", self.uids));
                        pod.status = Some(k8s_openapi::api::core::v1::PodStatus {
                            phase: Some("Pending".into()),
                            ..Default::default()
                        });
                        self.pods.push(CachedPod::from(pod));
                    }
                    Action::DeletePod { uid, .. } => {
                        self.pods.retain(|p| p.metadata.uid.as_deref() != Some(uid));
                    }
                    Action::CreateService(svc) => {
                        let mut meta = svc.metadata.clone();
                        meta.uid = Some("svc".into());
                        self.service = Some(CachedService {
                            metadata: meta.into(),
                        });
                        self.memory.service_created = Some(now);
                    }
                    Action::DeleteService { .. } => self.service = None,
                    Action::EnsurePodGroup(_) => {}
                }
            }
            if !d.plan.actions.is_empty() {
                // The events of the pods and service it wrote bring the next pass, and the
                // echo's with them (one pass of both, after the debounce): the next batch's.
                return false;
            }
            // The echo of a status write alone brings a pass at once, unless skipped.
            wrote && !(self.skip && echo_quiet(&self.job, &d.plan, &d, || self.decide()))
        }

        /// Passes until one leaves nothing to follow it (at most 20: a fixpoint is near).
        fn settle(&mut self) {
            for _ in 0..20 {
                if !self.pass() {
                    return;
                }
            }
            panic!("no fixpoint in 20 passes");
        }

        fn apply(&mut self, change: &Change) {
            let n = self.pods.len();
            match *change {
                Change::Phase(i, phase) if n > 0 => {
                    set_phase(
                        &mut self.pods[usize::from(i) % n],
                        PHASES[usize::from(phase)],
                    );
                }
                Change::Gone(i) if n > 0 => {
                    self.pods.remove(usize::from(i) % n);
                }
                Change::AllRunning => {
                    for pod in &mut self.pods {
                        set_phase(pod, "Running");
                    }
                }
                Change::Later(ms) => self.ms += u64::from(ms),
                Change::Pass => self.settle(),
                _ => {}
            }
        }

        fn seen(&self) -> (Option<crate::api::DIJobStatus>, Vec<(String, String)>) {
            let pods = self
                .pods
                .iter()
                .map(|p| {
                    let phase = p.status.as_ref().and_then(|s| s.phase.clone());
                    (
                        p.metadata.name.clone().unwrap_or_default(),
                        phase.unwrap_or_default(),
                    )
                })
                .collect();
            (self.job.status.clone(), pods)
        }
    }

    proptest! {
        #[test]
        fn skipping_quiet_echoes_changes_nothing_a_job_goes_through(
            job in any_job(),
            changes in proptest::collection::vec(change(), 0..60),
        ) {
            let mut every = World::new(job, false);
            let mut quiet = World { skip: true, ..every.clone() };
            every.settle();
            quiet.settle();
            prop_assert_eq!(every.seen(), quiet.seen());
            for change in &changes {
                every.apply(change);
                quiet.apply(change);
                prop_assert_eq!(every.seen(), quiet.seen(), "after {:?}", change);
            }
        }

        /// The pod watch brings no pass for an event that changed only a pod's node
        /// (`CachedPod::same_for_a_pass`): sound only while no pass reads the node. Through
        /// random histories, a pass decides the same whichever nodes the pods are bound to.
        #[test]
        fn a_pass_decides_the_same_whichever_nodes_the_pods_are_bound_to(
            job in any_job(),
            changes in proptest::collection::vec(change(), 0..60),
            nodes in proptest::collection::vec(proptest::option::of(0..3u8), 8),
        ) {
            let mut world = World::new(job, true);
            world.settle();
            for change in &changes {
                world.apply(change);
                let mut bound = world.clone();
                for (pod, node) in bound.pods.iter_mut().zip(nodes.iter().cycle()) {
                    let before = pod.clone();
                    if let Some(spec) = pod.spec.as_mut() {
                        spec.node_name = node.map(|n| format!("node-{n}"));
                    }
                    prop_assert!(pod.same_for_a_pass(&before));
                }
                prop_assert_eq!(bound.decide(), world.decide(), "after {:?}", change);
            }
        }

        /// The rolling resync skips a job whose last pass was quiet while the caches show the
        /// same (`resync_needed`): sound only if such a pass, taken again from the same caches
        /// and the memory the quiet pass left, is quiet at any later time. Through random
        /// histories (deadlines and TTLs among them, which must show as a wake instead), every
        /// quiet pass is asked again up to an hour later.
        #[test]
        fn a_quiet_pass_stays_quiet_from_the_same_caches_at_any_later_time(
            job in any_job(),
            changes in proptest::collection::vec(change(), 0..60),
            later in proptest::collection::vec(0..3_600_000u64, 4),
        ) {
            let mut world = World::new(job, true);
            world.settle();
            for change in &changes {
                world.apply(change);
                let decision = world.decide();
                if !decision.quiet() {
                    continue;
                }
                // What the executor remembers of a quiet pass.
                let mut after = world.clone();
                after.memory.counts_held_since = decision.counts_held_since;
                if decision.forget_service {
                    after.memory.service_created = None;
                }
                for ms in &later {
                    let mut at = after.clone();
                    at.ms += ms;
                    let again = at.decide();
                    prop_assert!(
                        again.quiet(),
                        "quiet after {:?}, not {} ms later: {}",
                        change,
                        ms,
                        again.plan.summary()
                    );
                }
            }
        }
    }
}

#[test]
fn a_pass_is_quiet_only_with_nothing_to_write_record_wait_for_or_wake_for() {
    let mut job = two_task_job();
    let now = Instant::now();
    let memory = Memory::default();
    let first = decide_at(&job, &[], None, &memory, now);
    assert!(!first.quiet(), "creates: {}", first.plan.summary());
    let (mut pods, service) = created(&first.plan, "Pending");
    for pod in &mut pods {
        set_phase(pod, "Running");
    }
    // Written until it settles: Pending, Starting, Running.
    let mut passes = 0;
    let settled = loop {
        let d = decide_at(&job, &pods, service.as_ref(), &memory, now);
        if d.plan.status.is_none() {
            break d;
        }
        job.status = d.plan.status.clone();
        passes += 1;
        assert!(passes < 5, "no fixpoint");
    };
    assert!(settled.quiet(), "{}", settled.plan.summary());
    let not_quiet = [
        Decision {
            service_expected: true,
            ..settled.clone()
        },
        Decision {
            waiting: true,
            ..settled.clone()
        },
        Decision {
            held_counts: Some(Duration::from_secs(1)),
            ..settled.clone()
        },
        Decision {
            plan: Plan {
                wake_after: Some(Duration::from_secs(20)),
                ..settled.plan.clone()
            },
            ..settled.clone()
        },
        Decision {
            plan: Plan {
                once: vec![JobEvent {
                    type_: EventType::Warning,
                    reason: "Ignored",
                    message: "m".into(),
                }],
                ..settled.plan.clone()
            },
            ..settled.clone()
        },
    ];
    for d in not_quiet {
        assert!(!d.quiet(), "{d:?}");
    }
    // What the resync may skip on: not a preemptible job's, nor one placement answered.
    assert!(quiet_for_resync(&job, &settled, None));
    let mut preemptible = job.clone();
    preemptible.spec.preemptible = true;
    assert!(!quiet_for_resync(&preemptible, &settled, None));
    let placed = crate::placement::Admission::Waiting {
        message: "no room".into(),
        by: "builtin-binpack".into(),
        why: crate::placement::Why::default(),
    };
    assert!(!quiet_for_resync(&job, &settled, Some(&placed)));
    // A deadline is a wake: never quiet while the job runs.
    let mut deadline = job.clone();
    deadline.spec.active_deadline_seconds = Some(600);
    let d = decide_at(&deadline, &pods, service.as_ref(), &memory, now);
    assert!(d.plan.wake_after.is_some() && !d.quiet(), "{d:?}");
}

#[test]
fn the_resync_passes_over_a_job_unless_its_last_pass_was_quiet_on_what_the_caches_still_show() {
    let service = CachedService {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("j".into()),
            uid: Some("svc-1".into()),
            ..Default::default()
        }
        .into(),
    };
    let seen = Seen::new(Some("41"), Some(7), Some(&service));
    assert!(
        resync_needed(&Memory::default(), &seen),
        "no quiet pass yet"
    );
    let memory = Memory {
        quiet: Some(seen.clone()),
        ..Memory::default()
    };
    assert!(!resync_needed(&memory, &seen));
    let mut deleting = service.clone();
    deleting.metadata.deletion_timestamp = Some(wall(0));
    let mut recreated = service.clone();
    recreated.metadata.uid = Some("svc-2".into());
    for changed in [
        Seen::new(Some("42"), Some(7), Some(&service)),
        Seen::new(Some("41"), Some(8), Some(&service)),
        Seen::new(Some("41"), None, Some(&service)),
        Seen::new(Some("41"), Some(7), None),
        Seen::new(Some("41"), Some(7), Some(&deleting)),
        Seen::new(Some("41"), Some(7), Some(&recreated)),
        Seen::new(None, Some(7), Some(&service)),
    ] {
        assert!(resync_needed(&memory, &changed), "{changed:?}");
    }
}
