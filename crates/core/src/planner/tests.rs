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

/// A job named `j` (uid `uid-1`) with `spec`; a learner, an evaluator and two collectors when
/// it names no tasks. The step tests build theirs with it too.
pub(crate) fn job_with(spec: Value) -> DIJob {
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
                why: Why::default(),
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
                || matches!(
                    a,
                    Admission::Placed { replan: true, .. } | Admission::Preempted(_)
                )
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

#[test]
fn task_status_counts_pods_per_task_and_phase_including_terminating() {
    let mut sim = Sim::running(job());
    sim.set_pod("j-collector-1", "Pending", false);
    sim.pod_mut("j-learner-0").metadata.deletion_timestamp = Some(t(0));
    sim.step();
    let ts = sim.status().task_status.expect("task status");
    let counts = |task: &str| {
        ts.get(task).map(|m| {
            m.iter()
                .map(|(p, n)| (p.clone(), *n))
                .collect::<BTreeMap<_, _>>()
        })
    };
    assert_eq!(
        counts("collector"),
        Some(BTreeMap::from([
            ("Running".to_string(), 1),
            ("Pending".to_string(), 1)
        ]))
    );
    assert_eq!(
        counts("learner"),
        Some(BTreeMap::from([("Running".to_string(), 1)]))
    );
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
    let foreign_refs = foreign.metadata.owner_references.clone();
    sim.service = Some(CachedService::from(foreign));
    let mut other = Pod::default();
    other.metadata.name = Some("j-learner-0".into());
    other.metadata.owner_references = foreign_refs;
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
                why: Why::default(),
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
        task_status: Some(SmallMap::from_iter([(
            "collector".to_string(),
            SmallMap::from_iter([("Pending".to_string(), 2)]),
        )])),
        ..DIJobStatus::default()
    };
    let counts = DIJobStatus {
        ready_replicas: 3,
        task_status: Some(SmallMap::from_iter([(
            "collector".to_string(),
            SmallMap::from_iter([("Running".to_string(), 2)]),
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

fn waiting(message: &str) -> Admission {
    Admission::Waiting {
        message: message.into(),
        by: "binpack@abc".into(),
        why: Why::default(),
    }
}

fn placed(nodes: &[&str], fallback: Option<&str>) -> Admission {
    Admission::Placed {
        nodes: nodes.iter().map(|n| n.to_string()).collect(),
        by: "binpack@abc".into(),
        fallback: fallback.map(String::from),
        replan: false,
        replicas: None,
        why: Why::default(),
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

mod allocation;
mod changes;
mod lifecycle;
mod preemption;
mod status;
