//! Issue 21's job controls, planned: `spec.suspend`, `spec.activeDeadlineSeconds` and
//! `spec.ttlSecondsAfterFinished`.

use super::*;

fn set_suspend(sim: &mut Sim, suspend: Option<bool>) {
    sim.job.spec.suspend = suspend;
}

fn condition(sim: &Sim, type_: &str) -> JobCondition {
    sim.status()
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} condition: {:?}", sim.status()))
}

fn ranks_of(sim: &Sim) -> Vec<(String, i32)> {
    sim.names()
        .into_iter()
        .map(|n| {
            let r = sim.rank(&n);
            (n, r)
        })
        .collect()
}

#[test]
fn a_job_created_suspended_creates_nothing_until_resumed() {
    let mut sim = Sim::new(job_with(json!({"suspend": true})));
    sim.settle();
    assert_eq!(sim.phase(), Some(Phase::Suspended));
    assert!(sim.pods.is_empty(), "no pods: {:?}", sim.names());
    assert!(sim.service.is_none(), "no service");
    assert_eq!(sim.transitions, [Phase::Suspended]);
    let c = condition(&sim, "Suspended");
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref()),
        ("True", Some(SUSPENDED_REASON))
    );
    assert_eq!(c.last_transition_time, Some(t(1)), "says since when");
    assert_eq!(sim.status().start_time, None, "not started");
    let e = sim
        .events
        .iter()
        .find(|e| e.reason == SUSPENDED_REASON)
        .expect("a JobSuspended Event");
    assert_eq!(e.type_, EventType::Normal);
    assert!(e.message.contains("suspended"), "{}", e.message);
    // Steady while suspended: no write, no action.
    let plan = sim.step();
    assert_eq!((plan.status, plan.actions.len()), (None, 0));

    sim.clock = 100;
    set_suspend(&mut sim, Some(false));
    let plan = sim.step();
    let tr = plan.transition.expect("resumed");
    assert_eq!((tr.to, tr.reason), (Phase::Pending, RESUMED_REASON));
    assert!(
        plan.actions
            .iter()
            .any(|a| matches!(a, Action::CreatePod(_))),
        "pods created on resume: {:?}",
        plan.actions
    );
    assert_eq!(sim.status().start_time, Some(t(101)));
    let c = condition(&sim, "Suspended");
    assert_eq!(
        (c.status.as_str(), c.last_transition_time),
        ("False", Some(t(101)))
    );
    sim.settle();
    assert_eq!(sim.pods.len(), 4);
    assert!(sim.service.is_some());
    sim.all("Running", true);
    sim.settle();
    assert_eq!(sim.phase(), Some(Phase::Running));
}

#[test]
fn suspending_a_running_job_deletes_its_pods_gracefully_and_keeps_ranks_and_counters() {
    let mut sim = Sim::running(job_with(json!({"backoffLimit": 5})));
    // A restart first, so there is a counter to keep.
    sim.set_pod("j-collector-1", "Failed", false);
    sim.settle();
    sim.all("Running", true);
    sim.settle();
    assert_eq!(
        (sim.phase(), sim.status().restarts),
        (Some(Phase::Running), 1)
    );
    let ranks = ranks_of(&sim);
    let status_ranks = sim.status().ranks;
    sim.linger = true;

    set_suspend(&mut sim, Some(true));
    let plan = sim.step();
    assert_eq!(
        plan.transition.as_ref().map(|t| t.to),
        Some(Phase::Suspended)
    );
    assert!(
        plan.status_first(),
        "Suspended is committed before the deletions, so they are never read as failures"
    );
    let deleted: Vec<_> = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::DeletePod {
                name, grace, why, ..
            } => Some((name.clone(), *grace, *why)),
            _ => None,
        })
        .collect();
    assert_eq!(deleted.len(), 4, "{:?}", plan.actions);
    assert!(
        deleted
            .iter()
            .all(|(_, grace, why)| grace.is_none() && *why == "suspended"),
        "running pods get their own grace period: {deleted:?}"
    );
    assert!(
        plan.actions
            .iter()
            .any(|a| matches!(a, Action::DeleteService { .. }))
    );
    // While they terminate: nothing is deleted twice, nothing created, no restart counted.
    let plan = sim.step();
    assert!(plan.actions.is_empty(), "{:?}", plan.actions);
    sim.pods.clear();
    sim.settle();
    assert!(sim.pods.is_empty() && sim.service.is_none());
    let status = sim.status();
    assert_eq!(status.phase, Some(Phase::Suspended));
    assert_eq!((status.restarts, status.reschedules), (1, 0));
    assert_eq!(status.ranks, status_ranks, "ranks kept");
    assert_eq!(status.ready_replicas, 0);

    set_suspend(&mut sim, None);
    sim.settle();
    assert_eq!(ranks_of(&sim), ranks, "every pod back with its rank");
    sim.all("Running", true);
    sim.settle();
    assert_eq!(sim.phase(), Some(Phase::Running));
    assert_eq!(sim.status().restarts, 1, "a suspension is not a restart");
    assert_eq!(
        sim.transitions[sim.transitions.len() - 4..],
        [
            Phase::Suspended,
            Phase::Pending,
            Phase::Starting,
            Phase::Running
        ]
    );
}

#[test]
fn a_job_suspended_while_restarting_or_pending_is_suspended_and_a_finished_one_is_not() {
    let mut sim = Sim::new(job());
    sim.step(); // Pending, pods created
    set_suspend(&mut sim, Some(true));
    sim.settle();
    assert_eq!(sim.phase(), Some(Phase::Suspended));
    assert!(sim.pods.is_empty());

    let mut done = Sim::running(job());
    done.all("Succeeded", false);
    done.settle();
    set_suspend(&mut done, Some(true));
    let plan = done.step();
    assert_eq!(plan.transition, None);
    assert_eq!(done.phase(), Some(Phase::Succeeded), "finished is final");
}

#[test]
fn a_suspended_preemptible_job_gives_its_allocation_back_and_is_placed_again_on_resume() {
    let mut sim = Sim::running(job_with(json!({"preemptible": true})));
    assert!(sim.status().allocation.is_some());
    assert!(crate::placement::holds_placement(&sim.job));
    set_suspend(&mut sim, Some(true));
    assert!(!crate::placement::holds_placement(&sim.job));
    assert!(!crate::placement::needs_allocation(&sim.job));
    sim.settle();
    assert_eq!(sim.status().allocation, None);
    let c = allocated_condition(&sim);
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref()),
        ("False", Some(SUSPENDED_REASON))
    );
    let plan = sim.step();
    assert_eq!(plan.status, None, "said once");
    assert!(!crate::placement::needs_allocation(&sim.job));

    set_suspend(&mut sim, Some(false));
    assert!(crate::placement::needs_allocation(&sim.job));
    sim.settle();
    assert!(sim.status().allocation.is_some());
    assert_eq!(allocated_condition(&sim).status, "True");
    assert!(
        sim.pods
            .iter()
            .all(|p| pod_annotation(p, labels::ANNOTATION_NODE).is_some()),
        "placed again"
    );
}

#[test]
fn a_job_active_past_its_deadline_fails_with_deadline_exceeded_and_is_cleaned() {
    let mut sim = Sim::new(job_with(json!({"activeDeadlineSeconds": 30})));
    let plan = sim.step();
    assert_eq!(sim.status().start_time, Some(t(1)));
    assert_eq!(
        plan.wake_after,
        Some(std::time::Duration::from_millis(30_010)),
        "woken when the deadline runs out"
    );
    sim.settle();
    sim.all("Running", true);
    sim.settle();
    assert_eq!(sim.phase(), Some(Phase::Running));
    sim.clock = 20;
    let plan = sim.step();
    assert_eq!(plan.transition, None);
    assert_eq!(
        plan.wake_after,
        Some(std::time::Duration::from_millis(10_010))
    );
    sim.clock = 30; // the next pass is at 31: one second past
    let plan = sim.step();
    let tr = plan.transition.clone().expect("failed");
    assert_eq!(
        (tr.to, tr.reason),
        (Phase::Failed, DEADLINE_EXCEEDED_REASON)
    );
    assert_eq!(
        tr.message,
        "job was active longer than its activeDeadlineSeconds (30 s)"
    );
    assert!(plan.status_first());
    let e = plan.events.last().expect("event");
    assert_eq!(
        (e.type_, e.reason, e.message.as_str()),
        (
            EventType::Warning,
            DEADLINE_EXCEEDED_REASON,
            tr.message.as_str()
        )
    );
    assert_eq!(
        condition(&sim, "Failed").reason.as_deref(),
        Some("DeadlineExceeded")
    );
    // cleanPodPolicy Running (the default) deletes the running pods on the next pass.
    sim.settle();
    assert!(sim.pods.is_empty(), "{:?}", sim.names());
    assert_eq!(sim.phase(), Some(Phase::Failed));
}

#[test]
fn a_suspended_job_s_clock_stops_and_resuming_restarts_it() {
    let mut sim = Sim::new(job_with(json!({"activeDeadlineSeconds": 30})));
    sim.settle();
    set_suspend(&mut sim, Some(true));
    sim.clock = 20;
    sim.settle();
    assert_eq!(sim.phase(), Some(Phase::Suspended));
    sim.clock = 1000;
    let plan = sim.step();
    assert_eq!(plan.transition, None, "no deadline while suspended");
    assert_eq!(plan.wake_after, None);
    set_suspend(&mut sim, Some(false));
    sim.settle();
    assert_eq!(sim.status().start_time, Some(t(1002)));
    assert_eq!(sim.phase(), Some(Phase::Starting));
    sim.clock = 1030;
    sim.step();
    assert_eq!(sim.phase(), Some(Phase::Starting), "29 s since the resume");
    sim.step();
    assert_eq!(sim.phase(), Some(Phase::Failed));
}

#[test]
fn huge_deadlines_and_ttls_never_overflow_and_a_job_without_start_gets_one() {
    let mut sim = Sim::new(job_with(json!({"activeDeadlineSeconds": i64::MAX})));
    let plan = sim.step();
    assert_eq!(
        plan.wake_after, None,
        "past the last representable time: never"
    );
    sim.clock = 1_000_000_000;
    sim.settle();
    assert_ne!(sim.phase(), Some(Phase::Failed));

    // A job running since before the operator recorded starts.
    let mut old = Sim::running(job_with(json!({"activeDeadlineSeconds": 60})));
    old.job.status.as_mut().expect("status").start_time = None;
    old.clock = 500;
    let plan = old.step();
    assert_eq!(plan.transition, None, "not failed at once");
    assert_eq!(old.status().start_time, Some(t(501)));

    let mut done = Sim::running(job_with(json!({"ttlSecondsAfterFinished": i32::MAX})));
    done.all("Succeeded", false);
    done.settle();
    let finished = done.status().completion_timestamp.expect("finished");
    let plan = done.step();
    assert!(!plan.delete_job);
    let since = u64::try_from(t(done.clock).0.duration_since(finished.0).as_secs()).expect("after");
    assert_eq!(
        plan.wake_after.map(|d| d.as_secs()),
        Some(u64::try_from(i32::MAX).expect("fits") - since),
        "due in 68 years, counted from the completion"
    );
}

#[test]
fn a_finished_job_is_deleted_once_its_ttl_runs_out_counted_from_completion() {
    let mut sim = Sim::running(job_with(json!({"ttlSecondsAfterFinished": 100})));
    sim.all("Succeeded", false);
    let plan = sim.step();
    assert_eq!(plan.transition.map(|t| t.to), Some(Phase::Succeeded));
    let finished = sim.clock;
    assert_eq!(sim.status().completion_timestamp, Some(t(finished)));
    let plan = sim.step();
    assert!(!plan.delete_job);
    assert_eq!(
        plan.wake_after,
        Some(std::time::Duration::from_millis(99_010))
    );

    // An operator restart keeps no timer: a fresh planner reads completionTimestamp.
    let restarted = Sim {
        clock: finished + 99,
        ..Sim::new(sim.job.clone())
    };
    assert!(!restarted.plan().delete_job, "1 s early");
    let restarted = Sim {
        clock: finished + 100,
        ..Sim::new(sim.job.clone())
    };
    let plan = restarted.plan();
    assert!(plan.delete_job);
    assert!(plan.summary().contains("delete job"), "{}", plan.summary());

    // 0: deleted on the first pass after it finished; failed jobs too.
    let mut failed = Sim::running(job_with(json!({
        "ttlSecondsAfterFinished": 0, "backoffLimit": 0
    })));
    failed.set_pod("j-learner-0", "Failed", false);
    let plan = failed.step();
    assert!(!plan.delete_job, "the Failed status is written first");
    assert_eq!(failed.phase(), Some(Phase::Failed));
    assert!(failed.step().delete_job);

    // Without a TTL a finished job stays.
    let mut kept = Sim::running(job());
    kept.all("Succeeded", false);
    kept.settle();
    kept.clock = 1_000_000;
    let plan = kept.step();
    assert!(!plan.delete_job && plan.wake_after.is_none());
}

#[test]
fn out_of_range_deadlines_and_ttls_are_refused_by_validation() {
    for (spec, field) in [
        (
            json!({"activeDeadlineSeconds": 0}),
            "spec.activeDeadlineSeconds",
        ),
        (
            json!({"activeDeadlineSeconds": -5}),
            "spec.activeDeadlineSeconds",
        ),
        (
            json!({"ttlSecondsAfterFinished": -1}),
            "spec.ttlSecondsAfterFinished",
        ),
    ] {
        let err = validate::validate(&job_with(spec.clone())).expect_err("refused");
        assert_eq!(err.field, field, "{spec}");
    }
    for spec in [
        json!({"activeDeadlineSeconds": 1}),
        json!({"ttlSecondsAfterFinished": 0}),
        json!({"suspend": false}),
    ] {
        assert!(
            validate::validate(&job_with(spec.clone())).is_ok(),
            "{spec}"
        );
    }
    // An invalid job fails without pods, as any invalid job does.
    let mut sim = Sim::new(job_with(json!({"activeDeadlineSeconds": 0})));
    sim.settle();
    assert_eq!(sim.phase(), Some(Phase::Failed));
    assert!(sim.pods.is_empty());
}

#[test]
fn status_and_conditions_carry_the_generation_they_were_planned_from() {
    let mut j = job();
    j.metadata.generation = Some(3);
    let mut sim = Sim::new(j);
    sim.settle();
    let status = sim.status();
    assert_eq!(status.observed_generation, Some(3));
    assert!(
        status
            .conditions
            .iter()
            .flatten()
            .all(|c| c.observed_generation == Some(3)),
        "{:?}",
        status.conditions
    );
    // A spec edit that changes nothing else: one write, of the generation only.
    sim.job.metadata.generation = Some(4);
    let before = sim.status();
    let plan = sim.step();
    let after = plan.status.expect("written");
    assert_eq!(after.observed_generation, Some(4));
    assert!(plan.transition.is_none() && plan.actions.is_empty());
    let same = |s: &DIJobStatus| DIJobStatus {
        observed_generation: None,
        conditions: s.conditions.clone().map(|cs| {
            cs.into_iter()
                .map(|c| JobCondition {
                    observed_generation: None,
                    ..c
                })
                .collect()
        }),
        ..s.clone()
    };
    assert_eq!(same(&before), same(&after), "nothing else moved");
    assert!(sim.step().status.is_none(), "and then nothing");
    // The task-name defaulting pass writes no status.
    let mut unnamed = job_with(json!({"tasks": [
        {"type": "learner", "replicas": 1, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}
    ]}));
    unnamed.metadata.generation = Some(1);
    let plan = Sim::new(unnamed).plan();
    assert!(plan.spec_patch.is_some() && plan.status.is_none());
}

/// A job whose collectors restart alone: learner 1, evaluator 1, collectors 2.
fn restart_pod_job(extra: Value) -> DIJob {
    let container = json!({"spec": {"containers": [{"name": "di-container", "image": "i"}]}});
    let mut spec = json!({"tasks": [
        {"name": "learner", "type": "learner", "replicas": 1, "template": container},
        {"name": "evaluator", "type": "evaluator", "replicas": 1, "template": container},
        {"name": "collector", "type": "collector", "replicas": 2, "template": container,
         "restartPolicy": "RestartPod"}
    ]});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    job_with(spec)
}

fn exit_with(sim: &mut Sim, pod: &str, code: i32) {
    let mut status = pod_status("Failed", false, 1);
    if let Some(c) = status
        .container_statuses
        .as_mut()
        .and_then(|c| c.first_mut())
    {
        c.name = "di-container".into();
        c.state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    sim.pod_mut(pod).status = Some(status);
}

#[test]
fn a_restart_pod_task_replaces_only_the_failed_pod_while_the_job_keeps_running() {
    let mut sim = Sim::running(restart_pod_job(json!({"backoffLimit": 2})));
    let learner = sim
        .pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some("j-learner-0"))
        .and_then(|p| p.metadata.uid.clone());
    let rank = sim.rank("j-collector-1");
    let transitions = sim.transitions.len();
    exit_with(&mut sim, "j-collector-1", 2);
    sim.linger = true;
    let plan = sim.step();
    assert_eq!(plan.transition, None, "the job keeps running");
    assert!(
        plan.status_first(),
        "the count is written before the deletion"
    );
    assert!(
        matches!(plan.actions.as_slice(), [Action::DeletePod { name, grace: Some(0), .. }] if name == "j-collector-1"),
        "{:?}",
        plan.actions
    );
    let status = sim.status();
    assert_eq!(
        status
            .pod_restarts
            .as_ref()
            .and_then(|r| r.get("collector")),
        Some(&1)
    );
    assert_eq!(status.restarts, 0);
    // Seen again while it terminates: counted once, deleted once.
    let plan = sim.step();
    assert!(plan.actions.is_empty(), "{:?}", plan.actions);
    assert_eq!(
        sim.status()
            .pod_restarts
            .and_then(|r| r.get("collector").copied()),
        Some(1)
    );
    sim.pods.retain(|p| p.metadata.deletion_timestamp.is_none());
    sim.linger = false;
    sim.settle();
    assert_eq!(sim.rank("j-collector-1"), rank, "back with its rank");
    assert_eq!(sim.phase(), Some(Phase::Running));
    sim.all("Running", true);
    sim.settle();
    assert_eq!(
        sim.transitions.len(),
        transitions,
        "no Restarting, no Rescheduling"
    );
    let status = sim.status();
    assert_eq!((status.restarts, status.reschedules), (0, 0));
    assert_eq!(
        status.counted_failures, None,
        "forgotten once the pod is gone"
    );
    assert_eq!(
        sim.pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some("j-learner-0"))
            .and_then(|p| p.metadata.uid.clone()),
        learner,
        "the learner is untouched"
    );

    // A second failure spends the budget (backoffLimit 2); the third is the job's.
    exit_with(&mut sim, "j-collector-0", 2);
    sim.settle();
    sim.all("Running", true);
    sim.settle();
    assert_eq!(
        sim.status()
            .pod_restarts
            .and_then(|r| r.get("collector").copied()),
        Some(2)
    );
    exit_with(&mut sim, "j-collector-0", 2);
    let plan = sim.step();
    assert_eq!(plan.transition.map(|t| t.to), Some(Phase::Restarting));
    assert_eq!(sim.status().restarts, 1);
    a_learner_failure_is_the_job_s();
}

/// A RestartJob task (the default) in the same job still restarts the job.
fn a_learner_failure_is_the_job_s() {
    let mut sim = Sim::running(restart_pod_job(json!({"backoffLimit": 2})));
    exit_with(&mut sim, "j-learner-0", 2);
    let plan = sim.step();
    assert_eq!(plan.transition.map(|t| t.to), Some(Phase::Restarting));
    assert_eq!(sim.status().pod_restarts, None);
}

#[test]
fn a_non_retryable_exit_code_fails_the_job_at_once_and_others_retry() {
    let spec = json!({"backoffLimit": 5, "nonRetryableExitCodes": [1, 2]});
    let mut sim = Sim::running(restart_pod_job(spec.clone()));
    exit_with(&mut sim, "j-collector-0", 1);
    let plan = sim.step();
    let tr = plan.transition.clone().expect("failed");
    assert_eq!((tr.to, tr.reason), (Phase::Failed, NON_RETRYABLE_REASON));
    assert_eq!(
        tr.message,
        "job failed since pod j-collector-0 failed: container di-container exited with code 1, listed in nonRetryableExitCodes"
    );
    assert_eq!(
        plan.events.last().map(|e| (e.type_, e.message.as_str())),
        Some((EventType::Warning, tr.message.as_str()))
    );
    sim.settle();
    assert_eq!(sim.phase(), Some(Phase::Failed));

    // 137 (an eviction, say) is not listed: the learner's failure restarts the job.
    let mut sim = Sim::running(restart_pod_job(spec));
    exit_with(&mut sim, "j-learner-0", 137);
    let plan = sim.step();
    assert_eq!(plan.transition.map(|t| t.to), Some(Phase::Restarting));

    for (codes, field) in [
        (json!([0]), "spec.nonRetryableExitCodes[0]"),
        (json!([1, 256]), "spec.nonRetryableExitCodes[1]"),
        (
            json!((1..=33).collect::<Vec<i32>>()),
            "spec.nonRetryableExitCodes",
        ),
    ] {
        let err = validate::validate(&job_with(json!({"nonRetryableExitCodes": codes})))
            .expect_err("refused");
        assert_eq!(err.field, field);
    }
}

/// `diorch_job_phase_max_age_seconds` (and the stuck-job alert) reads this.
#[test]
fn time_in_phase_counts_from_the_phase_condition_else_from_creation() {
    let mut sim = Sim::new(job());
    sim.job.metadata.creation_timestamp = Some(t(0));
    let now = |s: i64| t(s).0;
    assert_eq!(
        time_in_phase(&sim.job.metadata, None, now(30)),
        30,
        "no status"
    );
    sim.settle();
    let status = sim.status();
    let phase = status.phase.expect("a phase");
    let since = condition(&sim, phase.as_str())
        .last_transition_time
        .expect("stamped");
    let at = since.0.as_second() - t(0).0.as_second();
    assert_eq!(
        time_in_phase(&sim.job.metadata, Some(&status), now(at + 7)),
        7,
        "{phase:?} since {since:?}"
    );
    // A clock behind the stamp is 0, not negative; a status whose phase has no True
    // condition counts from creation.
    assert_eq!(
        time_in_phase(&sim.job.metadata, Some(&status), now(at - 5)),
        0
    );
    let mut foreign = status.clone();
    foreign.conditions = None;
    assert_eq!(
        time_in_phase(&sim.job.metadata, Some(&foreign), now(90)),
        90
    );
    let mut no_meta = sim.job.metadata.clone();
    no_meta.creation_timestamp = None;
    assert_eq!(time_in_phase(&no_meta, Some(&foreign), now(90)), 0);
}

fn task_scale(sim: &Sim) -> Vec<(String, i32, i32)> {
    sim.status()
        .task_replica_status
        .unwrap_or_default()
        .into_iter()
        .map(|(name, t)| (name, t.replicas, t.ready_replicas))
        .collect()
}

fn scale(name: &str, replicas: i32, ready: i32) -> (String, i32, i32) {
    (name.to_string(), replicas, ready)
}

/// `status.taskReplicaStatus`: each task's scale and Ready pods, following a resize, written
/// with the other counts, and with nothing ready once the job is over.
#[test]
fn task_replica_status_follows_each_tasks_scale_and_readiness() {
    let mut sim = Sim::new(job());
    sim.settle();
    assert_eq!(
        task_scale(&sim),
        [
            scale("collector", 2, 0),
            scale("evaluator", 1, 0),
            scale("learner", 1, 0)
        ]
    );
    sim.set_pod("j-collector-0", "Running", true);
    sim.settle();
    assert_eq!(task_scale(&sim)[0], scale("collector", 2, 1));
    sim.all("Running", true);
    sim.settle();
    assert_eq!(sim.phase(), Some(Phase::Running));
    // A resize (as the replica API writes it) shows before the new pod is ready.
    sim.job.spec.tasks[2].replicas = 3;
    sim.step();
    assert_eq!(task_scale(&sim)[0], scale("collector", 3, 2));
    // Only counts changed from the last write: the executor may fold it with others.
    let before = sim.status();
    let mut after = before.clone();
    if let Some(t) = after
        .task_replica_status
        .as_mut()
        .and_then(|m| m.get_mut("collector"))
    {
        t.ready_replicas = 3;
    }
    assert!(counts_only(Some(&before), &after));

    sim.all("Succeeded", false);
    sim.settle();
    assert_eq!(sim.phase(), Some(Phase::Succeeded));
    assert_eq!(
        task_scale(&sim),
        [
            scale("collector", 3, 0),
            scale("evaluator", 1, 0),
            scale("learner", 1, 0)
        ]
    );
}

/// A preemptible job waiting for room shows the scale it asks for, none ready (as
/// `status.replicas`); placed on fewer replicas (an elastic task), the smaller scale.
#[test]
fn a_preemptible_job_shows_the_scale_it_waits_for_then_the_one_it_got() {
    let elastic = json!({"preemptible": true, "tasks": [
        {"name": "learner", "type": "learner", "replicas": 1, "template": {"spec": {"containers": [{"name": "di-container", "image": "i"}]}}},
        {"name": "collector", "type": "collector", "replicas": 4, "minReplicas": 1, "maxReplicas": 4, "template": {"spec": {"containers": [{"name": "di-container", "image": "i"}]}}}
    ]});
    let mut sim = Sim::new(job_with(elastic));
    sim.admission = Some(Admission::Waiting {
        message: "no room".into(),
        by: "test".into(),
        why: Why::default(),
    });
    sim.settle();
    assert!(sim.pods.is_empty());
    assert_eq!(
        task_scale(&sim),
        [scale("collector", 4, 0), scale("learner", 1, 0)]
    );
    let mut status = sim.status();
    status.task_replicas = Some(BTreeMap::from([("collector".to_string(), 2)]));
    sim.job.status = Some(status);
    sim.step();
    assert_eq!(
        task_scale(&sim),
        [scale("collector", 2, 0), scale("learner", 1, 0)]
    );
}

fn set_image(sim: &mut Sim, task: usize, image: &str) {
    sim.job.spec.tasks[task]
        .template
        .spec
        .as_mut()
        .expect("spec")
        .containers[0]
        .image = Some(image.into());
}

/// Pods DI-orchestrator made have no template hash: diorch records the template it adopted
/// them with, touches nothing then, and rolls them like its own pods on a later template edit
/// (a migration must not leave a task on mixed images). The record goes with the last such pod.
#[test]
fn adopted_pods_without_a_template_hash_roll_on_a_later_template_edit() {
    let mut sim = Sim::running(job());
    for pod in &mut sim.pods {
        if let Some(a) = pod.metadata.annotations.as_mut() {
            a.remove(TEMPLATE_HASH_ANNOTATION);
        }
    }
    let adopted = sim.names();
    let plan = sim.step();
    assert!(
        plan.actions.is_empty(),
        "adoption touches no pod: {:?}",
        plan.actions
    );
    let recorded = sim.status().adopted_template_hashes.expect("recorded");
    assert_eq!(
        recorded.keys().collect::<Vec<_>>(),
        ["collector", "evaluator", "learner"]
    );
    assert_eq!(recorded["collector"], template_hash(&sim.job, 2));
    let plan = sim.step();
    assert_eq!((plan.status, plan.actions.len()), (None, 0), "steady");

    set_image(&mut sim, 2, "i:2");
    let plan = sim.step();
    let mut rolled: Vec<&str> = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::DeletePod { name, why, .. } => Some((name.as_str(), *why)),
            _ => None,
        })
        .map(|(name, why)| {
            assert_eq!(why, "template changed");
            name
        })
        .collect();
    rolled.sort();
    assert_eq!(
        rolled,
        ["j-collector-0", "j-collector-1"],
        "only the edited task"
    );
    sim.all("Running", true);
    sim.settle();
    sim.all("Running", true);
    sim.settle();
    assert_eq!(sim.phase(), Some(Phase::Running));
    assert_eq!(sim.names(), adopted, "same names, re-created");
    let recorded = sim
        .status()
        .adopted_template_hashes
        .expect("still two adopted tasks");
    assert_eq!(
        recorded.keys().collect::<Vec<_>>(),
        ["evaluator", "learner"],
        "the collectors now carry their hash"
    );
    assert_eq!(recorded["learner"], template_hash(&sim.job, 0), "unchanged");
}
