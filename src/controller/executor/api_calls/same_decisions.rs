//! The operator and the simulator decide the same: every pass a simulation made is replayed
//! through the executor's reconcile over the mock API server, from the same observations (the
//! job, its pods and service, the allocator's answer, the decision step's memory, the time),
//! and the executor's writes must be the ones the simulator performed. The trace is chosen so
//! the passes include a resize, a service the cache shows after its create, and pods the API
//! server refuses as invalid. Two states the simulator's cluster never shows (it starts all of
//! a job's pods at once and its cache is never behind) are made from a recorded pass and fed to
//! the decision step the simulator calls and to the executor: a status write of counts alone
//! within a second of the last, and a service created a moment ago that the cache does not show.

use std::time::Instant;

use super::*;
use crate::clock::Clock;
use crate::simulate::engine::{self, Options, Pass, PolicyChoice};
use crate::simulate::input::{Cluster, Trace};
use diorch_core::key::{BoxFuture, ObjectKey};
use diorch_core::placement::{Admission, Placement};
use diorch_core::step::{self, Ended};

/// The allocator's answer as the simulator got it.
struct Answer(Option<Admission>);

impl Placement for Answer {
    fn consult<'a>(&'a self, _job: &'a DIJob) -> BoxFuture<'a, Option<Admission>> {
        let answer = self.0.clone();
        Box::pin(async move { answer })
    }
    fn forget(&self, _job: ObjectKey) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
    fn ready(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// The simulator's virtual time at a pass.
#[derive(Debug)]
struct At(Instant, jiff::Timestamp);

impl Clock for At {
    fn now(&self) -> Instant {
        self.0
    }
    fn wall(&self) -> jiff::Timestamp {
        self.1
    }
}

/// The writes a pass decided, as comparable lines: what the simulator performed.
fn simulated(pass: &Pass) -> Vec<String> {
    let mut out = Vec::new();
    let phase_of = |status: &DIJobStatus, before: Option<&DIJobStatus>| {
        let phase = status.phase;
        if phase == before.and_then(|s| s.phase) {
            "unchanged".to_string()
        } else {
            phase.map_or_else(String::new, |p| p.as_str().to_string())
        }
    };
    let plan = &pass.decision.plan;
    if let Some(status) = &plan.status {
        out.push(format!(
            "status phase={}",
            phase_of(status, pass.job.status.as_ref())
        ));
    }
    for action in &plan.actions {
        match action {
            Action::CreatePod(p) => out.push(format!(
                "create pod {}",
                p.metadata.name.as_deref().unwrap_or_default()
            )),
            Action::DeletePod { name, .. } => out.push(format!("delete pod {name}")),
            Action::CreateService(s) => out.push(format!(
                "create service {}",
                s.metadata.name.as_deref().unwrap_or_default()
            )),
            Action::DeleteService { name, .. } => out.push(format!("delete service {name}")),
            Action::EnsurePodGroup(_) => {}
        }
    }
    if let Some(failed) = pass.refused.as_ref().and_then(|p| p.status.as_ref()) {
        let before = plan.status.as_ref().or(pass.job.status.as_ref());
        out.push(format!("status phase={}", phase_of(failed, before)));
    }
    out.sort();
    out
}

/// The executor's writes, as the same lines.
fn executed(calls: &[Call]) -> Vec<String> {
    let mut out: Vec<String> = calls
        .iter()
        .filter(|c| !c.is_event())
        .map(|c| {
            let path = c.path.split('?').next().unwrap_or_default();
            let last = path.rsplit('/').next().unwrap_or_default();
            let name = c.body["metadata"]["name"].as_str().unwrap_or_default();
            match c.method.as_str() {
                _ if path.ends_with("/status") => format!(
                    "status phase={}",
                    c.body["status"]["phase"].as_str().unwrap_or("unchanged")
                ),
                "POST" if path.ends_with("/pods") => format!("create pod {name}"),
                "POST" if path.ends_with("/services") => format!("create service {name}"),
                "DELETE" if path.contains("/pods/") => format!("delete pod {last}"),
                "DELETE" if path.contains("/services/") => format!("delete service {last}"),
                _ => c.line(),
            }
        })
        .collect();
    out.sort();
    out
}

/// Replays one simulated pass through the executor; returns its writes.
async fn replay(pass: &Pass, memory: step::Memory) -> Vec<String> {
    let settings = Settings {
        clock: Arc::new(At(pass.now, pass.wall.0)),
        ..Settings::default()
    };
    let mut h = Harness::with(&pass.job, settings, false);
    h.ctx.placement = Arc::new(Answer(pass.admission.clone()));
    h.server.set_job_rv("1");
    // Into the caches as the watches would show them (the mock's store is only read by a create
    // answered 409, which these passes never get).
    for pod in &pass.pods {
        let event = watcher::Event::Apply(pod.clone());
        h.pods.apply(event);
    }
    if let Some(svc) = &pass.service {
        h.services.apply(watcher::Event::Apply(svc.clone()));
    }
    for write in &pass.writes {
        if let (
            step::Target::Pod(name),
            Ended::Failed {
                code: Some(code),
                message,
            },
        ) = (&write.target, &write.ended)
        {
            h.server
                .fail("POST", "pods", name, *code, "Invalid", message);
        }
    }
    let key = ObjectKey::of(&pass.job.metadata);
    h.ctx
        .memory
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, memory);
    let job = h.server.job();
    let _ = h.reconcile(&job).await;
    executed(&h.server.take())
}

fn trace() -> Trace {
    let mut trace = Trace::from_yaml(
        r#"jobs:
  - name: elastic
    arrival: 0
    tasks:
      - {type: learner, replicas: 1, requests: {cpu: 4, memory: 16Gi, gpus: 2}}
      - {type: collector, replicas: 2, minReplicas: 1, maxReplicas: 4, requests: {cpu: 2, memory: 4Gi}}
    throughput: {1: 100, 2: 180, 4: 300}
    work: 20000
  - name: plain
    arrival: 5
    preemptible: false
    tasks: [{type: learner, replicas: 1, requests: {cpu: 1, memory: 1Gi}}]
    duration: 60
  - name: broken
    arrival: 10
    preemptible: false
    tasks: [{type: learner, replicas: 2, requests: {cpu: 1, memory: 1Gi}}]
    duration: 60
"#,
    )
    .expect("trace");
    // A template the API server refuses: its container has no image.
    let broken = trace
        .jobs
        .iter_mut()
        .find(|j| j.spec.name == "broken")
        .expect("broken job");
    for task in &mut broken.dijob.spec.tasks {
        for c in task
            .template
            .spec
            .iter_mut()
            .flat_map(|s| s.containers.iter_mut())
        {
            c.image = None;
        }
    }
    trace
}

#[tokio::test]
async fn the_executor_decides_what_the_simulator_decided_from_the_same_observations() {
    let cluster = Cluster::from_yaml(
        "nodes:\n  - name: n\n    count: 2\n    capacity: {cpu: 64, memory: 256Gi, gpus: 8}\n",
    )
    .expect("cluster");
    let options = Options {
        record_passes: true,
        ..Options::default()
    };
    let policy = PolicyChoice::builtin("goodput").expect("built-in policy");
    let run = engine::run(&cluster, &trace(), &policy, &options)
        .await
        .expect("simulation");
    let passes = &run.passes;
    // The cases the simulator used to miss are in the recording.
    assert!(
        passes.iter().any(|p| p.decision.forget_service),
        "a service the cache shows after its create"
    );
    assert!(passes.iter().any(|p| p.refused.is_some()), "a refused pod");
    assert_eq!(
        run.jobs
            .iter()
            .find(|j| j.name == "broken")
            .map(|j| j.phase.as_str()),
        Some("Failed")
    );

    for (i, pass) in passes.iter().enumerate() {
        let simulated = simulated(pass);
        let executed = replay(pass, pass.memory.clone()).await;
        assert_eq!(
            executed,
            simulated,
            "pass {i} of {} ({}), decision {:?}",
            passes.len(),
            pass.job.metadata.name.as_deref().unwrap_or_default(),
            pass.decision.plan.summary()
        );
    }

    // A service this process created a moment ago that the cache does not show yet: neither
    // creates it again.
    let first = passes
        .iter()
        .find(|p| {
            p.decision
                .plan
                .actions
                .iter()
                .any(|a| matches!(a, Action::CreateService(_)))
        })
        .expect("a pass that creates a service");
    let memory = step::Memory {
        service_created: Some(first.now),
        ..first.memory.clone()
    };
    let input = step::Input {
        job: &first.job,
        observed: Observed {
            pods: first.pods.iter().collect(),
            service: None,
            admission: first.admission.as_ref(),
        },
        memory: &memory,
        now: first.now,
        wall: &first.wall,
    };
    let decided = step::decide(&input, &BuildContext::default());
    assert!(decided.service_expected);
    let executed = replay(first, memory).await;
    assert!(
        !executed.iter().any(|w| w.starts_with("create service")),
        "{executed:?}"
    );
    assert!(
        executed.iter().any(|w| w.starts_with("create pod")),
        "{executed:?}"
    );

    // One pod of the starting job runs, a moment after the last status write: a change of
    // counts alone, held back by both.
    let starting = passes
        .iter()
        .find(|p| {
            p.decision
                .plan
                .transition
                .as_ref()
                .is_some_and(|t| t.to == Phase::Starting)
        })
        .expect("a pass to Starting");
    let mut later = starting.clone();
    later.job.status = starting.decision.plan.status.clone();
    if let Some(s) = later.pods.first_mut().and_then(|p| p.status.as_mut()) {
        s.phase = Some("Running".into());
    }
    later.memory.status_written = Some(later.now - Duration::from_millis(300));
    later.memory.counts_held_since = Some(later.now - step::COUNTS_HOLD);
    let input = step::Input {
        job: &later.job,
        observed: Observed {
            pods: later.pods.iter().collect(),
            service: later.service.as_ref(),
            admission: later.admission.as_ref(),
        },
        memory: &later.memory,
        now: later.now,
        wall: &later.wall,
    };
    let decided = step::decide(&input, &BuildContext::default());
    assert_eq!(decided.held_counts, Some(Duration::from_millis(700)));
    assert_eq!(
        replay(&later, later.memory.clone()).await,
        Vec::<String>::new()
    );
    // Once the second has passed, both write it.
    later.memory.status_written = Some(later.now - Duration::from_secs(2));
    assert_eq!(
        replay(&later, later.memory.clone()).await,
        ["status phase=unchanged"]
    );
}
