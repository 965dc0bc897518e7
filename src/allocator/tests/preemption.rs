//! The allocator's preemption: victims, their hand-over to the controller, cool-down and
//! growing back (`src/allocator/preempt.rs`).

use super::*;
use diorch_core::placement::{Preempted, Preemption as Action};

/// `n` 8-GPU nodes and the built-in bin-pack policy, with `settings`.
fn preempting(n: usize, settings: Settings) -> Harness {
    let mut h = harness(n, vec![], None);
    let (allocator, retries) = Allocator::new(
        Arc::new(Fake(HashMap::new(), HashMap::new())),
        h.allocator.nodes.clone(),
        h.allocator.jobs.clone(),
        settings,
        h.metrics.clone(),
    );
    h.allocator = allocator;
    h.retries = retries;
    h
}

fn settings(preemption: Preemption) -> Settings {
    Settings {
        preemption,
        preemption_cooldown: Duration::from_secs(300),
        preemption_min_run_time: Duration::from_secs(600),
        ..Settings::default()
    }
}

/// A job of a learner and `collectors` collectors (1 GPU each; collectors elastic down to
/// `min`), running on `node` for `minutes`, at `priority`.
fn elastic(name: &str, collectors: i32, min: i32, node: &str, minutes: i64, high: bool) -> DIJob {
    let task = |task: &str, replicas: i32, min: i32| {
        json!({"type": task, "name": task, "replicas": replicas, "minReplicas": min,
            "maxReplicas": replicas,
            "template": {"spec": {"containers": [{"name": "di-container", "image": "i",
                "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}]}}})
    };
    let started = jiff::Timestamp::now() - jiff::SignedDuration::from_mins(minutes);
    let mut ranks = vec![format!("{name}-learner-0")];
    ranks.extend((0..collectors).map(|i| format!("{name}-collector-{i}")));
    serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1",
        "kind": "DIJob",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
            "creationTimestamp": started.to_string()},
        "spec": {"preemptible": true, "priority": if high { "high" } else { "normal" },
            "tasks": [task("learner", 1, 1), task("collector", collectors, min)]},
        "status": {"phase": "Running",
            "conditions": [{"type": "Running", "status": "True",
                "lastTransitionTime": started.to_string()}],
            "ranks": ranks,
            "allocation": vec![node; ranks.len()]}
    }))
    .expect("job")
}

/// A pending high-priority job of `replicas` learners of `gpus` GPUs.
fn urgent(name: &str, replicas: i32, gpus: i32) -> DIJob {
    let mut j = job(name, replicas, gpus, None);
    j.spec.priority = diorch_core::api::Priority::High;
    j
}

async fn running_jobs(h: &mut Harness, jobs: &[&DIJob]) {
    for j in jobs {
        cache(h, j);
        h.allocator.observe(j).await;
    }
}

fn preemptions(h: &Harness, action: &str) -> bool {
    metric(
        h,
        &format!("diorch_allocator_preemptions_total{{action=\"{action}\"}} 1"),
    )
}

#[tokio::test]
async fn an_urgent_job_shrinks_collectors_instead_of_waiting_and_no_room_is_taken_twice() {
    let mut h = preempting(2, settings(Preemption::Shrink));
    let a = elastic("a", 7, 1, "n0", 30, false);
    let b = elastic("b", 7, 1, "n1", 30, false);
    running_jobs(&mut h, &[&a, &b]).await;

    let u = urgent("u", 4, 1);
    let Admission::Placed { nodes, why, .. } = h.allocator.admit(&u).await else {
        panic!("the urgent job is placed at once");
    };
    assert_eq!(nodes.as_slice(), ["n0"; 4]);
    let reason = why.reason.expect("a reason");
    assert!(reason.contains("shrank ns/a (collector 7 → 3)"), "{reason}");
    assert!(preemptions(&h, "shrink"));
    // a's reconcile gets the shrink: its 4 highest collectors go, the rest keep n0.
    let Some(Admission::Preempted(Preempted {
        action:
            Action::Shrink {
                nodes,
                replicas,
                before,
            },
        for_job,
        message,
        ..
    })) = h.allocator.consult(&a).await
    else {
        panic!("a is shrunk");
    };
    assert_eq!((replicas, before), (vec![1, 3], vec![1, 7]));
    assert_eq!(nodes.as_slice(), ["n0"; 4]);
    assert_eq!(for_job, "ns/u");
    assert!(message.contains("priority 100 > 0"), "{message}");
    // b is untouched.
    assert_eq!(h.allocator.consult(&b).await, None);

    // A second urgent job does not get u's room: b shrinks for it (a is cooling down).
    let u2 = urgent("u2", 4, 1);
    let Admission::Placed { nodes, why, .. } = h.allocator.admit(&u2).await else {
        panic!("u2 is placed");
    };
    assert_eq!(nodes.as_slice(), ["n1"; 4]);
    assert!(why.reason.unwrap_or_default().contains("ns/b"));
    // A third finds nobody left to shrink or evict in time: it waits.
    let u3 = urgent("u3", 2, 1);
    assert!(matches!(
        h.allocator.admit(&u3).await,
        Admission::Waiting { .. }
    ));
}

#[tokio::test]
async fn eviction_takes_the_job_that_loses_least_and_only_when_shrinking_is_not_enough() {
    let mut h = preempting(2, settings(Preemption::Shrink));
    // Rigid jobs (min = replicas): nothing to shrink. a ran 60 min, b 15.
    let a = elastic("a", 7, 7, "n0", 60, false);
    let b = elastic("b", 7, 7, "n1", 15, false);
    running_jobs(&mut h, &[&a, &b]).await;

    let u = urgent("u", 1, 8);
    let Admission::Placed { nodes, why, .. } = h.allocator.admit(&u).await else {
        panic!("the urgent job is placed at once");
    };
    assert_eq!(nodes.as_slice(), ["n1"]);
    assert!(why.reason.unwrap_or_default().contains("evicted ns/b"));
    assert!(preemptions(&h, "evict"));
    // 8 GPUs × 15 minutes.
    assert!(metric(
        &h,
        "diorch_allocator_work_lost_gpu_seconds_total 7200"
    ));
    let Some(Admission::Preempted(Preempted {
        action: Action::Evict,
        ..
    })) = h.allocator.consult(&b).await
    else {
        panic!("b is evicted");
    };
    assert_eq!(h.allocator.consult(&a).await, None);
    // Until b's status says so, it keeps being told; then it waits like any job, the room
    // being u's.
    assert!(matches!(
        h.allocator.consult(&b).await,
        Some(Admission::Preempted(_))
    ));
    let mut evicted = b.clone();
    let status = evicted.status.as_mut().expect("status");
    status.allocation = None;
    status.phase = Some(diorch_core::api::Phase::Pending);
    cache(&mut h, &evicted);
    assert!(matches!(
        h.allocator.consult(&evicted).await,
        Some(Admission::Waiting { .. })
    ));
}

#[tokio::test]
async fn young_jobs_equal_priority_and_preemption_off_are_left_alone() {
    // Ran 5 minutes: under the 10-minute minimum, and rigid.
    let young = elastic("a", 7, 7, "n0", 5, false);
    let mut h = preempting(1, settings(Preemption::Shrink));
    running_jobs(&mut h, &[&young]).await;
    assert!(matches!(
        h.allocator.admit(&urgent("u", 1, 4)).await,
        Admission::Waiting { .. }
    ));

    // Equal priority: an elastic high-priority job is not shrunk for another.
    let peer = elastic("a", 7, 1, "n0", 30, true);
    let mut h = preempting(1, settings(Preemption::Shrink));
    running_jobs(&mut h, &[&peer]).await;
    assert!(matches!(
        h.allocator.admit(&urgent("u", 1, 4)).await,
        Admission::Waiting { .. }
    ));

    // Off: nothing is taken.
    let low = elastic("a", 7, 1, "n0", 30, false);
    let mut h = preempting(1, settings(Preemption::Off));
    running_jobs(&mut h, &[&low]).await;
    assert!(matches!(
        h.allocator.admit(&urgent("u", 1, 4)).await,
        Admission::Waiting { .. }
    ));
    assert!(!metric(&h, "diorch_allocator_preemptions_total{"));

    // Evict mode evicts where shrinking would have done.
    let mut h = preempting(1, settings(Preemption::Evict));
    running_jobs(&mut h, &[&low]).await;
    let Admission::Placed { why, .. } = h.allocator.admit(&urgent("u", 1, 4)).await else {
        panic!("placed by evicting");
    };
    assert!(why.reason.unwrap_or_default().contains("evicted ns/a"));
}

#[tokio::test]
async fn a_shrunk_job_grows_back_when_room_frees_after_its_cool_down() {
    let mut s = settings(Preemption::Shrink);
    s.preemption_cooldown = Duration::ZERO;
    let mut h = preempting(1, s);
    let a = elastic("a", 7, 1, "n0", 30, false);
    running_jobs(&mut h, &[&a]).await;
    let u = urgent("u", 4, 1);
    assert!(matches!(
        h.allocator.admit(&u).await,
        Admission::Placed { .. }
    ));
    let Some(Admission::Preempted(Preempted {
        action: Action::Shrink {
            nodes, replicas, ..
        },
        ..
    })) = h.allocator.consult(&a).await
    else {
        panic!("a is shrunk");
    };
    // a's status records the shrink as the planner writes it.
    let mut shrunk = diorch_core::build::with_task_replicas(&a, &replicas);
    let status = shrunk.status.as_mut().expect("status");
    status.ranks = Some(
        [
            "a-learner-0",
            "a-collector-0",
            "a-collector-1",
            "a-collector-2",
        ]
        .map(String::from)
        .to_vec(),
    );
    status.allocation = Some(Vec::from(nodes));
    status.preemption = Some(diorch_core::api::PreemptionStatus {
        time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
        action: diorch_core::api::PreemptionAction::Shrunk,
        for_job: "ns/u".into(),
        replicas_before: Some(BTreeMap::from([
            ("learner".to_string(), 1),
            ("collector".to_string(), 7),
        ])),
    });
    cache(&mut h, &shrunk);
    assert_eq!(
        h.allocator.consult(&shrunk).await,
        None,
        "the shrink landed"
    );
    // While u runs there is no room to grow into.
    h.allocator.optimize_once().await;
    assert_eq!(h.allocator.consult(&shrunk).await, None);
    // u ends: a grows back to 7 collectors; the survivors stay on n0.
    h.allocator.forget(&ObjectKey::new("ns", "u")).await;
    h.allocator.optimize_once().await;
    let Some(Admission::Placed {
        replicas,
        nodes,
        why,
        ..
    }) = h.allocator.consult(&shrunk).await
    else {
        panic!("a grows back");
    };
    assert_eq!(replicas, Some(vec![1, 7]));
    assert_eq!(nodes.as_slice(), ["n0"; 8]);
    assert!(
        why.reason
            .unwrap_or_default()
            .starts_with("grown back after the preemption for ns/u: collector 3 → 7")
    );
}

#[test]
fn work_lost_counts_from_the_checkpoint_but_never_past_the_run() {
    let now = jiff::Timestamp::now();
    let mut j = elastic("a", 7, 7, "n0", 30, false);
    let run = 30 * 60;
    assert_eq!(super::super::preempt::lost_seconds(&j, run, now), run);
    let at = |minutes_ago: i64| {
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            now - jiff::SignedDuration::from_mins(minutes_ago),
        ))
    };
    let status = j.status.as_mut().expect("status");
    status.last_checkpoint_time = at(5);
    assert_eq!(super::super::preempt::lost_seconds(&j, run, now), 300);
    // A checkpoint before this run (a report forged into the past, or from before a restart)
    // cannot make the job cost more than its run.
    j.status.as_mut().expect("status").last_checkpoint_time = at(600);
    assert_eq!(super::super::preempt::lost_seconds(&j, run, now), run);
    // One "in the future" loses nothing: only the job itself is the likelier victim.
    j.status.as_mut().expect("status").last_checkpoint_time = at(-60);
    assert_eq!(super::super::preempt::lost_seconds(&j, run, now), 0);
}

#[tokio::test]
async fn a_recent_checkpoint_makes_the_older_job_the_cheaper_victim() {
    let mut h = preempting(2, settings(Preemption::Shrink));
    // a ran 60 minutes but checkpointed a minute ago; b ran 15 minutes without one.
    let mut a = elastic("a", 7, 7, "n0", 60, false);
    a.status.as_mut().expect("status").last_checkpoint_time =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::now() - jiff::SignedDuration::from_mins(1),
        ));
    let b = elastic("b", 7, 7, "n1", 15, false);
    running_jobs(&mut h, &[&a, &b]).await;
    let Admission::Placed { nodes, why, .. } = h.allocator.admit(&urgent("u", 1, 8)).await else {
        panic!("placed");
    };
    assert_eq!(nodes.as_slice(), ["n0"]);
    assert!(why.reason.unwrap_or_default().contains("evicted ns/a"));
}

/// A clock the test moves.
#[derive(Debug)]
struct Manual(std::sync::Mutex<(Instant, jiff::Timestamp)>);

impl crate::clock::Clock for Manual {
    fn now(&self) -> Instant {
        self.0.lock().expect("clock").0
    }
    fn wall(&self) -> jiff::Timestamp {
        self.0.lock().expect("clock").1
    }
}

impl Manual {
    fn advance(&self, by: Duration) {
        let mut t = self.0.lock().expect("clock");
        t.0 += by;
        t.1 += by;
    }
}

/// `job`, evicted: its status as the planner leaves it.
fn evicted(job: &DIJob) -> DIJob {
    let mut j = job.clone();
    let status = j.status.as_mut().expect("status");
    status.allocation = None;
    status.phase = Some(diorch_core::api::Phase::Pending);
    j
}

#[tokio::test]
async fn a_storm_of_urgent_jobs_cannot_evict_the_same_job_twice_within_its_cool_down() {
    let clock = Arc::new(Manual(std::sync::Mutex::new((
        Instant::now(),
        jiff::Timestamp::now(),
    ))));
    let mut s = settings(Preemption::Shrink);
    s.clock = clock.clone();
    s.preemption_min_run_time = Duration::ZERO;
    let mut h = preempting(1, s);
    let a = elastic("a", 7, 7, "n0", 60, false);
    running_jobs(&mut h, &[&a]).await;

    let u1 = urgent("u1", 1, 8);
    assert!(matches!(
        h.allocator.admit(&u1).await,
        Admission::Placed { .. }
    ));
    let out = evicted(&a);
    cache(&mut h, &out);
    assert!(matches!(
        h.allocator.consult(&out).await,
        Some(Admission::Waiting { .. })
    ));
    // u1 ends at once; a is placed again and runs.
    h.allocator.forget(&ObjectKey::new("ns", "u1")).await;
    assert!(matches!(
        h.allocator.consult(&out).await,
        Some(Admission::Placed { .. })
    ));
    running_jobs(&mut h, &[&a]).await;

    // Urgent jobs keep coming within a's cool-down: none evicts it again.
    for i in 0..5 {
        clock.advance(Duration::from_secs(50));
        let u = urgent(&format!("storm-{i}"), 1, 8);
        assert!(
            matches!(h.allocator.admit(&u).await, Admission::Waiting { .. }),
            "storm-{i}"
        );
    }
    assert!(metric(
        &h,
        "diorch_allocator_preemptions_total{action=\"evict\"} 1"
    ));
    // Past it, the next one may.
    clock.advance(Duration::from_secs(60));
    assert!(matches!(
        h.allocator.admit(&urgent("late", 1, 8)).await,
        Admission::Placed { .. }
    ));
    assert!(metric(
        &h,
        "diorch_allocator_preemptions_total{action=\"evict\"} 2"
    ));
}

#[tokio::test]
async fn a_job_held_back_only_by_a_minimum_run_time_is_asked_again_after_the_next_re_plan() {
    let clock = Arc::new(Manual(std::sync::Mutex::new((
        Instant::now(),
        jiff::Timestamp::now(),
    ))));
    let mut s = settings(Preemption::Shrink);
    s.clock = clock.clone();
    let mut h = preempting(1, s);
    // Rigid and 5 minutes into its run: not evictable for 5 more minutes.
    let a = elastic("a", 7, 7, "n0", 5, false);
    running_jobs(&mut h, &[&a]).await;
    let u = urgent("u", 1, 8);
    assert!(matches!(
        h.allocator.admit(&u).await,
        Admission::Waiting { .. }
    ));
    while h.retries.try_recv().is_ok() {}
    // Nothing frees; the re-plan after the minimum run time asks u again, and it gets a's room.
    clock.advance(Duration::from_secs(301));
    h.allocator.optimize_once().await;
    let mut asked = Vec::new();
    while let Ok(key) = h.retries.try_recv() {
        asked.push(key);
    }
    assert!(asked.contains(&ObjectKey::new("ns", "u")), "{asked:?}");
    assert!(matches!(
        h.allocator.admit(&u).await,
        Admission::Placed { .. }
    ));
    // A job with nobody below it is not asked again.
    let mut h = preempting(1, settings(Preemption::Shrink));
    let peer = elastic("a", 7, 7, "n0", 60, true);
    running_jobs(&mut h, &[&peer]).await;
    assert!(matches!(
        h.allocator.admit(&u).await,
        Admission::Waiting { .. }
    ));
    while h.retries.try_recv().is_ok() {}
    h.allocator.optimize_once().await;
    let mut asked = Vec::new();
    while let Ok(key) = h.retries.try_recv() {
        asked.push(key);
    }
    assert!(!asked.contains(&ObjectKey::new("ns", "u")), "{asked:?}");
}

#[tokio::test]
async fn a_priority_class_orders_jobs_over_spec_priority() {
    let mut s = settings(Preemption::Shrink);
    s.priority_classes = crate::allocator::priorities::PriorityClasses::from_values([
        ("urgent", 1000),
        ("batch", -10),
    ]);
    let mut h = preempting(2, s);
    // `high` (100) but below the class's 1000; and a `normal` job whose class says -10.
    let a = elastic("a", 7, 1, "n0", 30, true);
    let mut b = elastic("b", 7, 1, "n1", 30, false);
    b.spec.priority_class_name = Some("batch".into());
    running_jobs(&mut h, &[&a, &b]).await;

    // A normal job (0) outranks only the batch job.
    let mut normal = job("n", 4, 1, None);
    normal.spec.priority = diorch_core::api::Priority::Normal;
    let Admission::Placed { why, .. } = h.allocator.admit(&normal).await else {
        panic!("placed by shrinking b");
    };
    assert!(why.reason.unwrap_or_default().contains("shrank ns/b"));
    // The class's job outranks the `high` one.
    let mut classed = job("c", 4, 1, None);
    classed.spec.priority_class_name = Some("urgent".into());
    let Admission::Placed { why, .. } = h.allocator.admit(&classed).await else {
        panic!("placed by shrinking a");
    };
    let reason = why.reason.unwrap_or_default();
    assert!(reason.contains("shrank ns/a"), "{reason}");
    let Some(Admission::Preempted(Preempted { message, .. })) = h.allocator.consult(&a).await
    else {
        panic!("a is shrunk");
    };
    assert!(message.contains("(priority 1000 > 100)"), "{message}");
}

/// A 0.5.0-like plugin: no room on `allocate`, and `preempt` answers `answer` (or what the
/// built-in bin-pack would, when `None`).
struct Preempting(Option<crate::plugin::PreemptAnswer>);

impl SchedulingPolicy for Preempting {
    fn describe(&self) -> String {
        "team@abcd".into()
    }
    fn allocate(
        &self,
        _: Arc<Job>,
        _: Arc<[plugin::Node]>,
    ) -> BoxFuture<'static, Result<plugin::PolicyAnswer, PluginError>> {
        async {
            Err(PluginError::Refused {
                plugin: "team".into(),
                error: PolicyError::NoFit("no room".into()),
            })
        }
        .boxed()
    }
    fn optimize(
        &self,
        _: Arc<[Job]>,
        _: Arc<[plugin::Node]>,
        _: Vec<JobPlan>,
    ) -> BoxFuture<'static, Result<Vec<JobPlan>, PluginError>> {
        async { Ok(vec![]) }.boxed()
    }
    fn preempt(
        &self,
        job: Arc<Job>,
        candidates: Arc<[diorch_policies::preempt::Running]>,
        nodes: Arc<[plugin::Node]>,
    ) -> BoxFuture<'static, Result<Option<crate::plugin::PreemptAnswer>, PluginError>> {
        match &self.0 {
            Some(answer) => {
                let answer = answer.clone();
                async move { Ok(Some(answer)) }.boxed()
            }
            None => SchedulingPolicy::preempt(&NativePolicy::BinPack, job, candidates, nodes),
        }
    }
}

fn with_plugin(policy: Preempting) -> Harness {
    let mut h = harness(2, vec![], None);
    let mut named: HashMap<String, Arc<dyn SchedulingPolicy>> = HashMap::new();
    named.insert("team".into(), Arc::new(policy));
    let (allocator, retries) = Allocator::new(
        Arc::new(Fake(named, HashMap::new())),
        h.allocator.nodes.clone(),
        h.allocator.jobs.clone(),
        Settings {
            default_policy: Some("team".into()),
            ..settings(Preemption::Shrink)
        },
        h.metrics.clone(),
    );
    h.allocator = allocator;
    h.retries = retries;
    h
}

#[tokio::test]
async fn a_plugin_may_make_room_and_its_answer_is_checked_before_anything_is_taken() {
    // The plugin's own answer, the built-in bin-pack's victim choice inside the component.
    let mut h = with_plugin(Preempting(None));
    let a = elastic("a", 7, 1, "n0", 30, false);
    let b = elastic("b", 7, 1, "n1", 30, false);
    running_jobs(&mut h, &[&a, &b]).await;
    let Admission::Placed { by, why, .. } = h.allocator.admit(&urgent("u", 4, 1)).await else {
        panic!("the plugin made room");
    };
    assert_eq!(by, "team@abcd");
    assert!(
        why.reason
            .unwrap_or_default()
            .contains("shrank ns/a (collector 7 → 3)")
    );
    assert!(matches!(
        h.allocator.consult(&a).await,
        Some(Admission::Preempted(_))
    ));

    // Answers that bend the rules take nothing, and the job waits: a victim that is not a
    // candidate, a shrink below the minimum, room that does not fit the job.
    for bad in [
        crate::plugin::PreemptAnswer {
            nodes: vec!["n0".into(); 4],
            evictions: vec![7],
            ..Default::default()
        },
        crate::plugin::PreemptAnswer {
            nodes: vec!["n0".into(); 4],
            shrinks: vec![(0, vec![1, 0])],
            ..Default::default()
        },
        crate::plugin::PreemptAnswer {
            nodes: vec!["n0".into(); 4],
            shrinks: vec![(0, vec![1, 6])],
            ..Default::default()
        },
    ] {
        let mut h = with_plugin(Preempting(Some(bad.clone())));
        running_jobs(&mut h, &[&a, &b]).await;
        assert!(
            matches!(
                h.allocator.admit(&urgent("u", 4, 1)).await,
                Admission::Waiting { .. }
            ),
            "{bad:?}"
        );
        assert_eq!(h.allocator.consult(&a).await, None, "{bad:?}");
        assert!(
            !metric(&h, "diorch_allocator_preemptions_total{"),
            "{bad:?}"
        );
    }
}
