//! A job preempted for one of higher priority: shrunk (highest ranks go, survivors keep their
//! names) or evicted (back to Pending, counters intact), and restored.

use super::*;
use crate::placement::{Preempted, Preemption};

fn elastic() -> DIJob {
    job_with(json!({"preemptible": true, "tasks": [
        {"name": "learner", "type": "learner", "replicas": 1, "template": {"spec": {"containers": [{"name": "di-container", "image": "i"}]}}},
        {"name": "collector", "type": "collector", "replicas": 4, "minReplicas": 1, "maxReplicas": 4,
         "template": {"spec": {"containers": [{"name": "di-container", "image": "i"}]}}}
    ]}))
}

fn shrink(counts: &[u32], nodes: &[&str]) -> Admission {
    Admission::Preempted(Preempted {
        action: Preemption::Shrink {
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            replicas: counts.to_vec(),
            before: vec![1, 4],
        },
        for_job: "ns/urgent".into(),
        by: "builtin-binpack".into(),
        message: "collector 4 → 2 to make room for ns/urgent (priority 100 > 0)".into(),
    })
}

fn evict() -> Admission {
    Admission::Preempted(Preempted {
        action: Preemption::Evict,
        for_job: "ns/urgent".into(),
        by: "builtin-binpack".into(),
        message: "evicted to make room for ns/urgent (priority 100 > 0)".into(),
    })
}

#[test]
fn a_shrink_removes_the_highest_ranks_and_survivors_keep_their_names_and_nodes() {
    let mut sim = Sim::running(elastic());
    let before: Vec<(String, String)> = sim
        .pods
        .iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap_or_default(),
                p.metadata.uid.clone().unwrap_or_default(),
            )
        })
        .collect();
    let restarts = sim.status().restarts;
    // Slots at the new counts: learner-0, collector-0, collector-1, where they ran.
    sim.admission = Some(shrink(&[1, 2], &["n0", "n1", "n0"]));
    sim.step();
    sim.admission = None;
    sim.settle();
    assert_eq!(
        sim.names(),
        ["j-collector-0", "j-collector-1", "j-learner-0"]
    );
    // The survivors are the same pods (not re-created).
    for pod in &sim.pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        assert!(
            before.contains(&(name, pod.metadata.uid.clone().unwrap_or_default())),
            "{:?} was re-created",
            pod.metadata.name
        );
    }
    let status = sim.status();
    assert_eq!(status.restarts, restarts);
    let p = status.preemption.expect("status.preemption");
    assert_eq!(p.action, PreemptionAction::Shrunk);
    assert_eq!(p.for_job, "ns/urgent");
    assert_eq!(
        p.replicas_before,
        Some(BTreeMap::from([
            ("collector".to_string(), 4),
            ("learner".to_string(), 1)
        ]))
    );
    assert!(
        sim.events
            .iter()
            .any(|e| e.reason == SHRUNK_REASON && e.message.contains("make room for ns/urgent"))
    );
    let decision = &status.decisions.expect("decisions")[0];
    assert_eq!(decision.action, DecisionAction::Resized);
    assert!(
        decision
            .reason
            .as_deref()
            .unwrap_or_default()
            .contains("ns/urgent")
    );

    // A second shrink keeps the counts from before the first.
    sim.all("Running", true);
    sim.settle();
    sim.admission = Some(shrink(&[1, 1], &["n0", "n1"]));
    sim.step();
    sim.admission = None;
    sim.settle();
    assert_eq!(sim.names(), ["j-collector-0", "j-learner-0"]);
    let p = sim.status().preemption.expect("still preempted");
    assert_eq!(p.replicas_before.expect("before")["collector"], 4);

    // Grown back (a resize): no longer preempted.
    sim.all("Running", true);
    sim.settle();
    sim.admission = Some(Admission::Placed {
        nodes: ["n0", "n1", "n0", "n1", "n0"]
            .map(String::from)
            .into_iter()
            .collect(),
        by: "builtin-binpack".into(),
        fallback: None,
        replan: true,
        replicas: Some(vec![1, 4]),
        why: Why::default(),
    });
    sim.step();
    sim.admission = None;
    sim.settle();
    assert_eq!(sim.pods.len(), 5);
    assert_eq!(sim.status().preemption, None);
}

#[test]
fn an_evicted_job_waits_again_with_its_counters_and_is_not_restarted() {
    let mut sim = Sim::running(elastic());
    let mut status = sim.status();
    status.restarts = 2;
    status.reschedules = 1;
    sim.job.status = Some(status);
    sim.linger = true;
    sim.admission = Some(evict());
    let plan = sim.step();
    // Every pod goes, with its grace period; the service stays.
    let deletes = plan
        .actions
        .iter()
        .filter(|a| matches!(a, Action::DeletePod { .. }))
        .count();
    assert_eq!(deletes, 5);
    assert!(
        !plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::DeleteService { .. }))
    );
    let status = sim.status();
    assert_eq!(status.phase, Some(Phase::Pending));
    assert_eq!(status.allocation, None);
    assert_eq!(status.restarts, 2);
    assert_eq!(status.reschedules, 1);
    assert_eq!(status.ready_replicas, 0);
    assert_eq!(
        status.preemption.as_ref().map(|p| p.action),
        Some(PreemptionAction::Evicted)
    );
    assert_eq!(
        status.decisions.as_ref().expect("decisions")[0].action,
        DecisionAction::Evicted
    );
    let allocated = allocated_condition(&sim);
    assert_eq!(allocated.status, "False");
    assert_eq!(allocated.reason.as_deref(), Some("Evicted"));
    assert!(
        sim.events
            .iter()
            .any(|e| e.reason == EVICTED_REASON && e.message.contains("ns/urgent"))
    );
    assert!(crate::placement::needs_allocation(&sim.job));

    // While it waits, its terminating pods are no failure and nothing is created; its
    // condition still says it was evicted, and for whom.
    sim.all("Failed", false);
    sim.admission = Some(waiting("no room"));
    sim.settle();
    let allocated = allocated_condition(&sim);
    assert_eq!(allocated.reason.as_deref(), Some("Evicted"));
    assert!(
        allocated
            .message
            .as_deref()
            .unwrap_or_default()
            .starts_with("evicted for ns/urgent; no room"),
        "{allocated:?}"
    );
    assert_eq!(sim.status().restarts, 2);
    assert_eq!(sim.phase(), Some(Phase::Pending));
    sim.pods.clear();
    sim.settle();
    assert!(sim.pods.is_empty(), "nothing is created while it waits");

    // Placed again: the same pod names come back and it is no longer preempted.
    sim.linger = false;
    sim.admission = Some(placed(&["n1", "n1", "n1", "n1", "n1"], None));
    sim.settle();
    assert_eq!(sim.pods.len(), 5);
    assert_eq!(sim.status().preemption, None);
    assert_eq!(sim.status().restarts, 2);
    sim.all("Running", true);
    sim.settle();
    assert_eq!(sim.phase(), Some(Phase::Running));
}
