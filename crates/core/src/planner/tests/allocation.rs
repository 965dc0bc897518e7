//! Allocations from the allocator's answers: waiting, placement, fallback, re-plans, gangs.

use super::*;

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
    assert!(sim.events.iter().any(
        |e| e.reason == "JobAllocated" && e.message == "placed by binpack@abc on a×1, b×1, c×2"
    ));
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
        nodes: SlotNodes::new(["n0", "n1", "n2", "n1"].map(String::from).to_vec()),
        by: "goodput@1".into(),
        fallback: None,
        replan: true,
        replicas: None,
        why: Why::default(),
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
        why: Why::default(),
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
        !crate::placement::needs_allocation(&sim.job),
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
    assert!(crate::placement::needs_allocation(&sim.job));
    sim.admission = Some(placed(&["n0", "n1", "n0", "n1", "n2", "n2"], None));
    sim.settle();
    assert_eq!(sim.status().reschedules, 1);
    assert_eq!(sim.pods.len(), 6);
    assert_eq!(sim.status().allocation.map(|a| a.len()), Some(6));
    assert_eq!(sim.rank("j-collector-3"), 5);
    sim.all("Running", true);
    sim.settle();
    assert_eq!(sim.phase(), Some(Phase::Running));
    assert!(!crate::placement::needs_allocation(&sim.job));
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
    assert_eq!(group.api_version, "scheduling.x-k8s.io/v1alpha1");
    assert_eq!(group.metadata.name.as_deref(), Some("j"));
    assert_eq!(group.spec.min_member, 4);
    assert_eq!(
        group.metadata.owner_references.as_ref().expect("owner")[0].uid,
        "uid-1"
    );
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
    assert_eq!(sim.pod_groups.last().expect("group").spec.min_member, 6);
    // Volcano groups by annotation.
    let mut sim = Sim::new(job());
    sim.ctx.gang = Some(build::Gang {
        kind: build::GangKind::Volcano,
        scheduler_name: "volcano".into(),
    });
    sim.step();
    assert_eq!(
        sim.pod_groups[0].api_version,
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

/// Each allocation decision is explained where a user looks: the policy's reason in the
/// `Allocated` condition and the Event, and an entry in `status.decisions` (newest first, at
/// most `MAX_DECISIONS`) with the policy, its component, what the host changed and why. A wait
/// is recorded once per new message; a retried answer adds nothing.
#[test]
fn every_decision_is_recorded_with_its_policy_and_reason() {
    let mut sim = Sim::new(job_with(json!({"preemptible": true})));
    let why = |reason: &str| Why {
        sha256: Some("ab".repeat(32)),
        reason: Some(reason.to_string()),
    };
    sim.admission = Some(Admission::Waiting {
        message: "full".into(),
        by: "binpack@abab".into(),
        why: why("nothing fits"),
    });
    sim.settle();
    sim.step();
    let decisions = sim.status().decisions.unwrap();
    assert_eq!(decisions.len(), 1, "a wait is recorded once: {decisions:?}");
    assert_eq!(decisions[0].action, DecisionAction::Waiting);
    assert_eq!(decisions[0].message, "full (policy binpack@abab)");

    sim.admission = Some(Admission::Placed {
        nodes: SlotNodes::new(["a", "b", "c", "c"].map(String::from).to_vec()),
        by: "binpack@abab".into(),
        fallback: None,
        replan: false,
        replicas: None,
        why: why("a-3 has the 2 free GPUs"),
    });
    sim.step();
    let c = allocated_condition(&sim);
    assert_eq!(
        c.message.as_deref(),
        Some("placed by binpack@abab on a×1, b×1, c×2; why: a-3 has the 2 free GPUs")
    );
    assert!(sim.events.iter().any(|e| e.reason == "JobAllocated"
        && e.message == "placed by binpack@abab on a×1, b×1, c×2; why: a-3 has the 2 free GPUs"));
    let decisions = sim.status().decisions.unwrap();
    assert_eq!(decisions.len(), 2);
    let d = &decisions[0];
    assert_eq!(d.action, DecisionAction::Placed);
    assert_eq!(d.policy, "binpack@abab");
    assert_eq!(d.sha256.as_deref(), Some("ab".repeat(32).as_str()));
    assert_eq!(d.host_changed, None);
    assert_eq!(d.reason.as_deref(), Some("a-3 has the 2 free GPUs"));
    assert_eq!(d.message, "placed by binpack@abab on a×1, b×1, c×2");
    // The same answer again (a retry) is not a decision.
    sim.step();
    assert_eq!(sim.status().decisions.unwrap().len(), 2);

    // A re-plan by the built-in policy after the plugin failed: the host changed the answer.
    sim.admission = Some(Admission::Placed {
        nodes: SlotNodes::new(["a", "a", "b", "b"].map(String::from).to_vec()),
        by: "builtin-binpack".into(),
        fallback: Some("plugin binpack trapped: unreachable".into()),
        replan: true,
        replicas: None,
        why: Why {
            sha256: None,
            reason: Some("bin-pack, fullest fitting node first: a×2, b×2".into()),
        },
    });
    sim.step();
    let d = &sim.status().decisions.unwrap()[0];
    assert_eq!(d.action, DecisionAction::Moved);
    assert_eq!(d.sha256, None);
    assert_eq!(
        d.host_changed.as_deref(),
        Some("plugin binpack trapped: unreachable")
    );

    // Only the newest MAX_DECISIONS stay, newest first.
    for i in 0..2 * MAX_DECISIONS {
        let nodes = if i % 2 == 0 {
            ["a", "b", "a", "b"]
        } else {
            ["b", "a", "b", "a"]
        };
        sim.admission = Some(Admission::Placed {
            nodes: SlotNodes::new(nodes.map(String::from).to_vec()),
            by: "binpack@abab".into(),
            fallback: None,
            replan: true,
            replicas: None,
            why: why(&format!("move {i}")),
        });
        sim.step();
    }
    let decisions = sim.status().decisions.unwrap();
    assert_eq!(decisions.len(), MAX_DECISIONS);
    assert_eq!(
        decisions[0].reason.as_deref(),
        Some(format!("move {}", 2 * MAX_DECISIONS - 1).as_str())
    );
    assert!(decisions.iter().all(|d| d.action == DecisionAction::Moved));
}

/// A resize says so, and the entry's texts are bounded whatever the policy's name or the
/// fallback's error.
#[test]
fn a_resize_is_recorded_as_one_and_entry_texts_are_bounded() {
    let elastic = json!({"preemptible": true, "tasks": [
        {"name": "learner", "type": "learner", "replicas": 1, "template": {"spec": {"containers": [{"name": "di-container", "image": "i"}]}}},
        {"name": "collector", "type": "collector", "replicas": 2, "minReplicas": 1, "maxReplicas": 4, "template": {"spec": {"containers": [{"name": "di-container", "image": "i"}]}}}
    ]});
    let mut sim = Sim::running(job_with(elastic));
    let long = "x".repeat(5_000);
    sim.admission = Some(Admission::Placed {
        nodes: SlotNodes::new(["n0", "n1", "n0", "n2"].map(String::from).to_vec()),
        by: long.clone(),
        fallback: Some(long.clone()),
        replan: true,
        replicas: Some(vec![1, 3]),
        why: Why::default(),
    });
    sim.step();
    let d = &sim.status().decisions.unwrap()[0];
    assert_eq!(d.action, DecisionAction::Resized);
    assert!(d.policy.len() <= MAX_DECISION_TEXT_BYTES);
    assert!(d.host_changed.as_ref().unwrap().len() <= MAX_DECISION_TEXT_BYTES);
    assert!(d.message.len() <= MAX_DECISION_TEXT_BYTES);
    assert_eq!(d.reason, None);
}
