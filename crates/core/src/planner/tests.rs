//! The planner's unit tests: every decision of `plan` from observed state, one scenario each.

use super::*;
use crate::placement::SlotNodes;
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
    service: Option<CachedService>,
    clock: i64,
    next_uid: u32,
    transitions: Vec<Phase>,
    events: Vec<JobEvent>,
    /// What the allocator answers while the job needs an allocation.
    admission: Option<Admission>,
    ctx: BuildContext,
    /// PodGroups as last ensured.
    pod_groups: Vec<build::PodGroup>,
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
            crate::placement::needs_allocation(&self.job)
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
                    self.service = Some(CachedService::from(svc));
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
    sim.service = Some(CachedService::from(foreign));
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
                nodes: SlotNodes::new(vec!["n0".into()]),
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

/// `template_hash` is stored on every pod (its label) and compared on every reconcile: a change
/// of its value (a serializer's field order, a new optional field, a k8s-openapi upgrade) would
/// roll every running job's pods at once. Pinned on DI-orchestrator's samples, so such a change
/// fails here and is made on purpose.
#[test]
fn template_hash_is_pinned_on_the_di_orchestrator_samples() {
    let samples = [
        include_str!("../../../../examples/di-orchestrator-samples/atari-dqn-dist.yaml"),
        include_str!("../../../../examples/di-orchestrator-samples/dijob-serial.yaml"),
    ];
    let mut got = Vec::new();
    for yaml in samples {
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(yaml).expect("valid YAML");
        for doc in docs.into_iter().filter(|d| d["kind"] == "DIJob") {
            let job: DIJob = serde_json::from_value(doc).expect("a DIJob");
            for i in 0..job.spec.tasks.len() {
                got.push(template_hash(&job, i));
            }
        }
    }
    assert_eq!(got, GOLDEN_TEMPLATE_HASHES);
}

/// atari-dqn-dist's learner, evaluator and collector tasks; dijob-serial's one task.
const GOLDEN_TEMPLATE_HASHES: [&str; 4] = [
    "b7dda7353c1d9acc",
    "de8e22611ae71188",
    "9a78d40313ce3388",
    "6bb96049e410d6c4",
];

#[test]
fn counts_only_is_true_for_replica_counts_and_nothing_else() {
    let base = DIJobStatus {
        phase: Some(Phase::Starting),
        replicas: 4,
        ready_replicas: 1,
        task_status: Some(BTreeMap::from([(
            "collector".to_string(),
            BTreeMap::from([("Pending".to_string(), 2)]),
        )])),
        ..DIJobStatus::default()
    };
    let counts = DIJobStatus {
        ready_replicas: 3,
        task_status: Some(BTreeMap::from([(
            "collector".to_string(),
            BTreeMap::from([("Running".to_string(), 2)]),
        )])),
        ..base.clone()
    };
    assert!(counts_only(Some(&base), &counts));
    assert!(counts_only(Some(&base), &base));
    // No status yet: the first write is never held back.
    assert!(!counts_only(None, &counts));
    for other in [
        DIJobStatus {
            phase: Some(Phase::Running),
            ..counts.clone()
        },
        DIJobStatus {
            restarts: 1,
            ..counts.clone()
        },
        DIJobStatus {
            allocation: Some(vec!["n1".into()]),
            ..counts.clone()
        },
        DIJobStatus {
            ranks: Some(vec!["a".into()]),
            ..counts.clone()
        },
    ] {
        assert!(!counts_only(Some(&base), &other), "{other:?}");
    }
}

mod lifecycle;
