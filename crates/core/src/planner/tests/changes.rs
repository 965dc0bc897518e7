//! Changes to a running job: phase Events, scaling, template edits, replaced pods, invalid jobs.

use super::*;

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
            .any(|c| c.message.as_deref() == Some("the number of collector task is more than one")),
        "{status:?}"
    );
}
