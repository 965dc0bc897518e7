//! Cleanup and the status: cleanPodPolicy, failing, completion time, conditions.

use super::*;

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
