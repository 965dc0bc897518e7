//! Unit tests of `src/allocator/mod.rs`.

use super::*;
use diorch_core::allocation::admit::PLUGIN_TRIES;
use futures::FutureExt as _;
use futures::future::BoxFuture;
use kube::runtime::watcher::Event as WatchEvent;
use serde_json::json;

use crate::plugin::{Job, JobPlan};

/// A policy that always gives the same answer (and, for optimize, the plans in turn).
struct Fixed(
    Result<Vec<String>, PluginError>,
    std::sync::Mutex<Vec<Result<Vec<JobPlan>, PluginError>>>,
);

impl Fixed {
    fn allocating(answer: Result<Vec<String>, PluginError>) -> Fixed {
        Fixed(answer, std::sync::Mutex::new(vec![]))
    }

    fn planning(plans: Vec<Result<Vec<JobPlan>, PluginError>>) -> Fixed {
        Fixed(Ok(vec![]), std::sync::Mutex::new(plans))
    }
}

/// A plan entry's reason [`Fixed`] replaces with the name of the thread it plans on.
const THREAD_NAME: &str = "the thread's name";

/// What [`Fixed`] says of each of its placements.
const FIXED_REASON: &str = "the answer this test fixed";

impl SchedulingPolicy for Fixed {
    fn describe(&self) -> String {
        "fixed@1234".into()
    }
    fn allocate(
        &self,
        _: Arc<Job>,
        _: Arc<[plugin::Node]>,
    ) -> BoxFuture<'static, Result<plugin::PolicyAnswer, PluginError>> {
        let answer = self.0.clone().map(|nodes| plugin::PolicyAnswer {
            nodes,
            reason: Some(FIXED_REASON.to_string()),
        });
        async move { answer }.boxed()
    }
    fn optimize(
        &self,
        _: Arc<[Job]>,
        _: Arc<[plugin::Node]>,
        _: Vec<JobPlan>,
    ) -> BoxFuture<'static, Result<Vec<JobPlan>, PluginError>> {
        let mut plans = self.1.lock().expect("plans");
        let mut answer = if plans.is_empty() {
            Ok(vec![])
        } else {
            plans.remove(0)
        };
        // A reason of THREAD_NAME says which thread the call ran on.
        for entry in answer.iter_mut().flatten() {
            if entry.reason.as_deref() == Some(THREAD_NAME) {
                entry.reason = std::thread::current().name().map(str::to_string);
            }
        }
        async move { answer }.boxed()
    }
}

struct Fake(
    HashMap<String, Arc<dyn SchedulingPolicy>>,
    /// Shadows, by the policy they shadow.
    HashMap<String, Vec<Arc<dyn SchedulingPolicy>>>,
);

impl Policies for Fake {
    fn named(&self, name: &str) -> Option<Arc<dyn SchedulingPolicy>> {
        self.0.get(name).cloned()
    }
    fn builtin(&self) -> NativePolicy {
        NativePolicy::BinPack
    }
    fn shadows(&self, name: &str) -> Vec<Arc<dyn SchedulingPolicy>> {
        self.1.get(name).cloned().unwrap_or_default()
    }
}

struct Harness {
    allocator: Arc<Allocator>,
    retries: futures::channel::mpsc::UnboundedReceiver<ObjectKey>,
    jobs: reflector::store::Writer<CachedJob>,
    nodes: reflector::store::Writer<Node>,
    metrics: Arc<Metrics>,
}

impl Harness {
    /// A pod event, to the allocator, as the watch delivers it.
    async fn pod_event(&mut self, event: WatchEvent<view::UsagePod>) {
        self.allocator.pod_event(&event).await;
    }
}

/// `n` ready nodes of 8 GPUs and 32 CPUs; `named` policies loaded.
fn harness(n: usize, named: Vec<(&str, Fixed)>, default_policy: Option<&str>) -> Harness {
    harness_with_shadows(n, named, HashMap::new(), default_policy)
}

/// [`harness`] with `shadows` of the named policies.
fn harness_with_shadows(
    n: usize,
    named: Vec<(&str, Fixed)>,
    shadows: HashMap<String, Vec<Arc<dyn SchedulingPolicy>>>,
    default_policy: Option<&str>,
) -> Harness {
    let (nodes, mut node_writer) = reflector::store::<Node>();
    for i in 0..n {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": format!("n{i}")},
            "status": {
                "allocatable": {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": "8"},
                "conditions": [{"type": "Ready", "status": "True"}]
            }
        }))
        .expect("node");
        node_writer.apply_watcher_event(&WatchEvent::Apply(node));
    }
    let (jobs, job_writer) = reflector::store::<CachedJob>();
    let policies = Fake(
        named
            .into_iter()
            .map(|(k, v)| (k.to_string(), Arc::new(v) as Arc<dyn SchedulingPolicy>))
            .collect(),
        shadows,
    );
    let metrics = Arc::new(Metrics::new());
    let (allocator, retries) = Allocator::new(
        Arc::new(policies),
        nodes,
        jobs,
        Settings {
            default_policy: default_policy.map(String::from),
            ..Settings::default()
        },
        metrics.clone(),
    );
    Harness {
        allocator,
        retries,
        jobs: job_writer,
        nodes: node_writer,
        metrics,
    }
}

/// A preemptible job of `replicas` learners asking `gpus` GPUs each.
fn job(name: &str, replicas: i32, gpus: i32, policy: Option<&str>) -> DIJob {
    let annotations = policy.map(|p| json!({"diorch.io/policy": p}));
    serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1",
        "kind": "DIJob",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "annotations": annotations},
        "spec": {"preemptible": true, "tasks": [{"type": "learner", "name": "learner", "replicas": replicas,
            "template": {"spec": {"containers": [{"name": "di-container", "image": "i",
                "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": gpus.to_string()}}}]}}}]}
    }))
    .expect("job")
}

fn placed_nodes(a: &Admission) -> Vec<String> {
    match a {
        Admission::Placed { nodes, .. } => nodes.as_slice().to_vec(),
        Admission::Waiting { message, .. } => panic!("waiting: {message}"),
        Admission::Preempted(p) => panic!("preempted: {p:?}"),
    }
}

fn metric(h: &Harness, needle: &str) -> bool {
    h.metrics.encode().lines().any(|l| l.contains(needle))
}

fn gpu_node(name: &str, rv: Option<&str>, gpus: u32) -> Arc<Node> {
    let mut node: Node = serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {
            "allocatable": {"cpu": "8", "nvidia.com/gpu": gpus.to_string()},
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    }))
    .expect("node");
    node.metadata.resource_version = rv.map(String::from);
    Arc::new(node)
}

#[test]
fn node_models_are_parsed_again_only_when_a_node_changes() {
    let mut models = NodeModels::default();
    let gpus = |m: &[Arc<view::NodeModel>]| -> Vec<(String, u32)> {
        m.iter()
            .map(|m| (m.name().to_string(), m.with_used(None).allocatable.gpus))
            .collect()
    };
    let first = models.refresh(&[gpu_node("b", Some("1"), 8), gpu_node("a", Some("1"), 4)]);
    assert_eq!(
        gpus(&first),
        [("a".into(), 4), ("b".into(), 8)],
        "in name order"
    );
    // Same versions: the very same models.
    let again = models.refresh(&[gpu_node("a", Some("1"), 4), gpu_node("b", Some("1"), 8)]);
    assert!(Arc::ptr_eq(&first[0], &again[0]) && Arc::ptr_eq(&first[1], &again[1]));
    // A new version is parsed again; a node gone is dropped; one added is taken in.
    let changed = models.refresh(&[gpu_node("a", Some("2"), 2), gpu_node("c", Some("1"), 1)]);
    assert_eq!(gpus(&changed), [("a".into(), 2), ("c".into(), 1)]);
    // Without a version a node is never taken from the cache.
    models.refresh(&[gpu_node("x", None, 1)]);
    let fresh = models.refresh(&[gpu_node("x", None, 3)]);
    assert_eq!(gpus(&fresh), [("x".into(), 3)]);
}

#[tokio::test]
async fn reservations_count_before_pods_exist_so_nothing_is_double_booked() {
    let h = harness(4, vec![], None);
    let a = h.allocator.admit(&job("a", 3, 8, None)).await;
    assert_eq!(placed_nodes(&a).len(), 3);
    // Asked again before its status shows it (e.g. after a 409): the same answer.
    let again = h.allocator.admit(&job("a", 3, 8, None)).await;
    assert_eq!(placed_nodes(&again), placed_nodes(&a));
    // a holds 3 whole nodes though none of its pods exist: b (2 whole nodes) must wait.
    let b = h.allocator.admit(&job("b", 2, 8, None)).await;
    let Admission::Waiting { message, by, .. } = b else {
        panic!("b placed: {b:?}")
    };
    assert_eq!(by, "builtin-binpack");
    assert!(
        message.starts_with("waiting for capacity: 2 replicas: 16 GPUs, 2 CPUs, 0 GiB do not all fit (free: 8 GPUs (at most 8 on one node)"),
        "{message}"
    );
    assert!(metric(
        &h,
        "diorch_allocator_decisions_total{policy=\"builtin-binpack\",result=\"waiting\"} 1"
    ));
    // A smaller job takes the last node.
    let c = h.allocator.admit(&job("c", 1, 8, None)).await;
    let nodes_a = placed_nodes(&a);
    assert!(!nodes_a.contains(&placed_nodes(&c)[0]));
}

#[tokio::test]
async fn pod_slots_count_so_cpu_only_replicas_do_not_overfill_a_node() {
    let mut h = harness(0, vec![], None);
    let (nodes, mut writer) = reflector::store::<Node>();
    let small: Node = serde_json::from_value(json!({
        "metadata": {"name": "small"},
        "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "3"},
            "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .expect("node");
    writer.apply_watcher_event(&WatchEvent::Apply(small));
    let (allocator, _) = Allocator::new(
        Arc::new(Fake(HashMap::new(), HashMap::new())),
        nodes,
        h.allocator.jobs.clone(),
        Settings::default(),
        h.metrics.clone(),
    );
    h.allocator = allocator;
    assert!(matches!(
        h.allocator.admit(&job("four", 4, 0, None)).await,
        Admission::Waiting { .. }
    ));
    assert_eq!(
        placed_nodes(&h.allocator.admit(&job("three", 3, 0, None)).await).len(),
        3
    );
    assert!(matches!(
        h.allocator.admit(&job("one", 1, 0, None)).await,
        Admission::Waiting { .. }
    ));
}

#[tokio::test]
async fn freeing_a_job_wakes_the_waiting_ones() {
    let mut h = harness(2, vec![], None);
    placed_nodes(&h.allocator.admit(&job("a", 2, 8, None)).await);
    assert!(matches!(
        h.allocator.admit(&job("b", 1, 8, None)).await,
        Admission::Waiting { .. }
    ));
    h.allocator.forget(&ObjectKey::new("ns", "a")).await;
    let woken = h.retries.next().await.expect("a wake-up");
    assert_eq!(woken, ObjectKey::new("ns", "b"));
    assert_eq!(
        placed_nodes(&h.allocator.admit(&job("b", 1, 8, None)).await).len(),
        1
    );
}

#[tokio::test]
async fn pods_of_other_workloads_take_room_and_finished_ones_do_not() {
    let mut h = harness(1, vec![], None);
    let pod = |name: &str, phase: &str| -> view::UsagePod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "other"},
            "spec": {"nodeName": "n0", "containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"nvidia.com/gpu": "6"}}}]},
            "status": {"phase": phase}
        }))
        .expect("pod")
    };
    h.pod_event(WatchEvent::Apply(pod("busy", "Running"))).await;
    assert!(matches!(
        h.allocator.admit(&job("a", 1, 4, None)).await,
        Admission::Waiting { .. }
    ));
    h.pod_event(WatchEvent::Apply(pod("busy", "Succeeded")))
        .await;
    assert_eq!(
        placed_nodes(&h.allocator.admit(&job("a", 1, 4, None)).await),
        ["n0"]
    );
}

/// Another workload's pod taking 6 of n0's 8 GPUs.
fn busy_pod() -> view::UsagePod {
    serde_json::from_value(json!({
        "metadata": {"name": "busy", "namespace": "other"},
        "spec": {"nodeName": "n0", "containers": [{"name": "c", "image": "i",
            "resources": {"requests": {"nvidia.com/gpu": "6"}}}]},
        "status": {"phase": "Running"}
    }))
    .expect("pod")
}

#[tokio::test]
async fn a_relist_forgets_the_pods_it_no_longer_lists() {
    let mut h = harness(1, vec![], None);
    let busy = busy_pod();
    h.pod_event(WatchEvent::Apply(busy)).await;
    assert!(matches!(
        h.allocator.admit(&job("a", 1, 4, None)).await,
        Admission::Waiting { .. }
    ));
    // Deleted while the watch was down: the re-list does not have it.
    h.pod_event(WatchEvent::Init).await;
    h.pod_event(WatchEvent::InitDone).await;
    assert!(matches!(
        h.allocator.admit(&job("a", 1, 4, None)).await,
        Admission::Placed { .. }
    ));
}

#[tokio::test]
async fn ready_once_the_book_has_taken_in_the_first_pod_list() {
    let mut h = harness(1, vec![], None);
    let busy = busy_pod();
    h.nodes.apply_watcher_event(&WatchEvent::InitDone);
    let ready = h.allocator.wait_until_ready();
    let mut ready = std::pin::pin!(ready);
    // Part of the list is in: not ready.
    let allocator = h.allocator.clone();
    allocator.pod_event(&WatchEvent::Init).await;
    allocator.pod_event(&WatchEvent::InitApply(busy)).await;
    assert!(futures::poll!(ready.as_mut()).is_pending());
    allocator.pod_event(&WatchEvent::InitDone).await;
    tokio::time::timeout(Duration::from_secs(5), ready)
        .await
        .expect("ready")
        .expect("writers live");
    // The listed pod takes room.
    assert!(matches!(
        h.allocator.admit(&job("a", 1, 4, None)).await,
        Admission::Waiting { .. }
    ));
}

#[tokio::test]
async fn a_plugin_answering_nonsense_falls_back_to_the_built_in_policy() {
    let nonsense = [
        Fixed::allocating(Ok(vec!["n0".into(); 3])), // 24 GPUs on one 8-GPU node
        Fixed::allocating(Ok(vec!["nowhere".into(), "n1".into()])), // an unknown node
        Fixed::allocating(Ok(vec!["n1".into()])),    // one node for two replicas
        Fixed::allocating(Err(PluginError::Timeout {
            plugin: "p".into(),
            deadline: Duration::from_millis(50),
        })),
    ];
    for (i, policy) in nonsense.into_iter().enumerate() {
        let h = harness(4, vec![("p", policy)], None);
        let a = h.allocator.admit(&job("a", 2, 8, Some("p"))).await;
        let Admission::Placed {
            nodes,
            by,
            fallback,
            why,
            ..
        } = a
        else {
            panic!("case {i}: {a:?}")
        };
        assert_eq!(by, "builtin-binpack", "case {i}");
        // The built-in policy's own reason, not the failed plugin's words; no component.
        assert_eq!(why.sha256, None, "case {i}");
        assert!(
            why.reason
                .as_deref()
                .is_some_and(|r| r.starts_with("bin-pack, fullest fitting node first: ")),
            "case {i}: {why:?}"
        );
        assert_eq!(nodes.len(), 2);
        let nodes = nodes.as_slice();
        assert_ne!(nodes[0], nodes[1], "case {i}: 8 GPUs each need 2 nodes");
        let why = fallback.expect("why");
        assert!(!why.is_empty(), "case {i}");
        assert!(
            metric(&h, "diorch_allocator_fallbacks_total{policy=\"fixed\""),
            "case {i}"
        );
        assert!(metric(&h, "result=\"placed_by_fallback\"} 1"), "case {i}");
    }
}

#[tokio::test]
async fn a_plugin_saying_no_fit_is_an_answer_not_a_failure() {
    let no_fit = Fixed::allocating(Err(PluginError::Refused {
        plugin: "p".into(),
        error: PolicyError::NoFit("only whole racks".into()),
    }));
    let h = harness(4, vec![("p", no_fit)], Some("p"));
    let a = h.allocator.admit(&job("a", 1, 1, None)).await;
    let Admission::Waiting { message, by, .. } = a else {
        panic!("{a:?}")
    };
    assert_eq!(by, "fixed@1234");
    assert!(message.ends_with("; only whole racks"), "{message}");
}

#[tokio::test]
async fn the_annotation_wins_over_the_default_and_a_missing_plugin_is_reported() {
    let h = harness(
        4,
        vec![
            ("p", Fixed::allocating(Ok(vec!["n3".into()]))),
            ("q", Fixed::allocating(Ok(vec!["n2".into()]))),
        ],
        Some("p"),
    );
    let a = h.allocator.admit(&job("a", 1, 1, None)).await;
    assert_eq!(placed_nodes(&a), ["n3"]);
    // The plugin's reason travels with its answer.
    let Admission::Placed { why, .. } = &a else {
        panic!("{a:?}")
    };
    assert_eq!(why.reason.as_deref(), Some(FIXED_REASON));
    assert_eq!(
        placed_nodes(&h.allocator.admit(&job("b", 1, 1, Some("q"))).await),
        ["n2"]
    );
    let c = h.allocator.admit(&job("c", 1, 1, Some("gone"))).await;
    let Admission::Placed { by, fallback, .. } = c else {
        panic!("{c:?}")
    };
    assert_eq!(by, "builtin-binpack");
    assert_eq!(
        fallback.as_deref(),
        Some("policy plugin gone is not loaded")
    );
}

/// `job(...)` as placed and running on `nodes` (slot order = rank order here).
fn running(name: &str, nodes: &[&str], gpus: i32, policy: Option<&str>) -> DIJob {
    let mut j = job(name, nodes.len() as i32, gpus, policy);
    j.status = Some(diorch_core::api::DIJobStatus {
        phase: Some(diorch_core::api::Phase::Running),
        allocation: Some(nodes.iter().map(|n| n.to_string()).collect()),
        ranks: Some(
            (0..nodes.len())
                .map(|i| format!("{name}-learner-{i}"))
                .collect(),
        ),
        ..Default::default()
    });
    j
}

fn cache(h: &mut Harness, j: &DIJob) {
    let cached: CachedJob =
        serde_json::from_value(serde_json::to_value(j).expect("json")).expect("cached");
    h.jobs.apply_watcher_event(&WatchEvent::Apply(cached));
}

fn plan(job: &str, nodes: &[&str]) -> JobPlan {
    JobPlan {
        job: job.into(),
        nodes: nodes.iter().map(|n| n.to_string()).collect(),
        replicas: None,
        reason: None,
    }
}

#[tokio::test]
async fn a_plan_may_not_take_the_room_of_a_job_it_leaves_where_it_is() {
    // a fills n0 (8 GPUs), b has 4 on n1. The plan leaves a out (a policy that cannot
    // place a job keeps it where it is) and moves b into a's room on n0.
    let greedy = Fixed::planning(vec![Ok(vec![plan("ns/b", &["n0"])])]);
    let mut h = harness(2, vec![("greedy", greedy)], Some("greedy"));
    let a = running("a", &["n0"], 8, None);
    let b = running("b", &["n1"], 4, None);
    for j in [&a, &b] {
        cache(&mut h, j);
        assert_eq!(h.allocator.consult(j).await, None);
    }
    // Carried out, n0 would hold 12 GPUs. The built-in policy plans b around a instead:
    // b stays on n1, so nothing moves.
    let decisions = h.allocator.optimize_once().await;
    assert_eq!(decisions, vec![], "{decisions:?}");
    assert_eq!(h.allocator.consult(&b).await, None);
}

#[tokio::test]
async fn optimize_moves_jobs_through_the_controller_and_rate_limits_flapping() {
    // A flapping policy: n0 -> n1 -> n0 ...
    let mut first = plan("ns/a", &["n1"]);
    first.reason = Some("n1 is emptier".into());
    let flap = Fixed::planning(vec![Ok(vec![first]), Ok(vec![plan("ns/a", &["n0"])])]);
    let mut h = harness(2, vec![("flap", flap)], Some("flap"));
    let a = running("a", &["n0"], 4, None);
    cache(&mut h, &a);
    assert_eq!(h.allocator.consult(&a).await, None, "placed, nothing to do");
    let decisions = h.allocator.optimize_once().await;
    assert_eq!(
        decisions,
        vec![optimize::Decision::Move {
            job: ObjectKey::new("ns", "a"),
            slots: SlotNodes::new(vec!["n1".into()]),
            replicas: None,
            moved: 1
        }]
    );
    // The controller is asked to reconcile the job, and gets the new allocation.
    assert_eq!(h.retries.next().await, Some(ObjectKey::new("ns", "a")));
    let Some(Admission::Placed {
        nodes,
        replan,
        by,
        why,
        fallback,
        ..
    }) = h.allocator.consult(&a).await
    else {
        panic!("no re-plan")
    };
    assert_eq!(
        (nodes.as_slice(), replan, by.as_str()),
        (&["n1".to_string()][..], true, "fixed@1234")
    );
    // The plan entry's reason comes with the move; the plugin's plan was applied as given.
    assert_eq!(why.reason.as_deref(), Some("n1 is emptier"));
    assert_eq!(fallback, None);
    // Once the status shows it, the proposal is done.
    let moved = running("a", &["n1"], 4, None);
    cache(&mut h, &moved);
    assert_eq!(h.allocator.consult(&moved).await, None);
    // The policy flips back at once: suppressed.
    let decisions = h.allocator.optimize_once().await;
    assert!(
        matches!(&decisions[..], [optimize::Decision::Suppressed { job, .. }] if *job == ObjectKey::new("ns", "a")),
        "{decisions:?}"
    );
    assert!(metric(&h, "result=\"suppressed\"} 1"));
}

#[tokio::test]
async fn a_periodic_pass_runs_on_a_thread_of_its_own_and_moves_jobs_as_any_pass() {
    let mut first = plan("ns/a", &["n1"]);
    first.reason = Some(THREAD_NAME.into());
    let p = Fixed::planning(vec![Ok(vec![first])]);
    let mut h = harness(2, vec![("p", p)], Some("p"));
    let a = running("a", &["n0"], 4, None);
    cache(&mut h, &a);
    assert_eq!(h.allocator.consult(&a).await, None, "placed, nothing to do");
    h.allocator.clone().optimize_on_own_thread().await;
    // The move reaches the controller as from a pass on the caller's runtime.
    assert_eq!(h.retries.next().await, Some(ObjectKey::new("ns", "a")));
    let Some(Admission::Placed { nodes, why, .. }) = h.allocator.consult(&a).await else {
        panic!("no re-plan")
    };
    assert_eq!(nodes.as_slice(), &["n1".to_string()][..]);
    // The policy was called on the pass's own thread, not the test's.
    assert_eq!(why.reason.as_deref(), Some("diorch-optimize"));
    assert!(metric(
        &h,
        "diorch_allocator_optimize_duration_seconds_count 1"
    ));
}

#[tokio::test]
async fn an_elastic_plan_resizes_through_the_controller_and_holds_the_new_size() {
    let mut grow = plan("ns/a", &["n0", "n1", "n1"]);
    grow.replicas = Some(vec![3]);
    let p = Fixed::planning(vec![Ok(vec![grow])]);
    let mut h = harness(2, vec![("elastic", p)], Some("elastic"));
    let mut a = running("a", &["n0"], 4, None);
    a.spec.tasks[0].max_replicas = Some(3);
    cache(&mut h, &a);
    h.allocator.consult(&a).await;
    let decisions = h.allocator.optimize_once().await;
    assert!(
        matches!(&decisions[..], [optimize::Decision::Move { replicas: Some(r), moved: 2, .. }] if r == &vec![3]),
        "{decisions:?}"
    );
    let Some(Admission::Placed {
        replicas, nodes, ..
    }) = h.allocator.consult(&a).await
    else {
        panic!("no re-plan")
    };
    assert_eq!(replicas, Some(vec![3]));
    assert_eq!(nodes.len(), 3);
    // The resized job holds 3 × 4 GPUs: n1 has no room for an 8-GPU job any more.
    assert!(matches!(
        h.allocator.admit(&job("b", 1, 8, None)).await,
        Admission::Waiting { .. }
    ));
}

#[tokio::test]
async fn a_failing_or_nonsense_optimize_falls_back_to_the_built_in_policy() {
    for (i, answer) in [
        Err(PluginError::Trap {
            plugin: "p".into(),
            message: "unreachable".into(),
        }),
        Ok(vec![plan("ns/a", &["n0", "n0"])]), // two 8-GPU replicas on one 8-GPU node
        Ok(vec![plan("ns/a", &["n0"])]),       // the wrong count
    ]
    .into_iter()
    .enumerate()
    {
        let mut h = harness(2, vec![("p", Fixed::planning(vec![answer]))], Some("p"));
        let a = running("a", &["n0", "n1"], 8, None);
        cache(&mut h, &a);
        h.allocator.consult(&a).await;
        // The built-in policy keeps the job where it is.
        assert_eq!(h.allocator.optimize_once().await, vec![], "case {i}");
        assert!(
            metric(&h, "diorch_allocator_fallbacks_total{policy=\"fixed\""),
            "case {i}"
        );
    }
}

/// When the built-in policy re-plans because the plugin failed, the move says so: the
/// plugin's error as what the operator changed, the built-in policy's reason, no component.
#[tokio::test]
async fn a_re_plan_by_the_fallback_records_why_the_plugin_was_not_followed() {
    let trap = Err(PluginError::Trap {
        plugin: "p".into(),
        message: "unreachable".into(),
    });
    let mut h = harness(2, vec![("p", Fixed::planning(vec![trap]))], Some("p"));
    // Its second replica's node is gone: the built-in policy moves it.
    let a = running("a", &["n0", "n9"], 4, None);
    cache(&mut h, &a);
    h.allocator.consult(&a).await;
    let decisions = h.allocator.optimize_once().await;
    assert!(
        matches!(&decisions[..], [optimize::Decision::Move { .. }]),
        "{decisions:?}"
    );
    let Some(Admission::Placed {
        by, fallback, why, ..
    }) = h.allocator.consult(&a).await
    else {
        panic!("no re-plan")
    };
    assert_eq!(by, "builtin-binpack");
    let fallback = fallback.expect("the plugin's failure");
    assert!(fallback.contains("trapped"), "{fallback}");
    assert_eq!(why.sha256, None);
    assert!(
        why.reason
            .as_deref()
            .is_some_and(|r| r.starts_with("re-planned by bin-pack: ")),
        "{why:?}"
    );
}

/// A policy that, on each call, says so on `entered` and waits for a permit on `release`
/// before answering: bin-pack on what it was given (allocate), or its next plan (optimize).
struct Gated {
    entered: tokio::sync::mpsc::UnboundedSender<()>,
    release: Arc<tokio::sync::Semaphore>,
    calls: Arc<std::sync::atomic::AtomicUsize>,
    plans: std::sync::Mutex<Vec<Vec<JobPlan>>>,
}

/// The test's side of a [`Gated`] policy.
struct Gate {
    entered: tokio::sync::mpsc::UnboundedReceiver<()>,
    release: Arc<tokio::sync::Semaphore>,
    calls: Arc<std::sync::atomic::AtomicUsize>,
}

impl Gate {
    /// Waits until a call is in the policy (fails the test after a minute: a deadlock).
    async fn entered(&mut self) {
        tokio::time::timeout(Duration::from_secs(60), self.entered.recv())
            .await
            .expect("a policy call within a minute")
            .expect("policy alive");
    }

    fn release_one(&self) {
        self.release.add_permits(1);
    }

    fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::SeqCst)
    }
}

fn gated(plans: Vec<Vec<JobPlan>>) -> (Gated, Gate) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    (
        Gated {
            entered: tx,
            release: release.clone(),
            calls: calls.clone(),
            plans: std::sync::Mutex::new(plans),
        },
        Gate {
            entered: rx,
            release,
            calls,
        },
    )
}

impl Gated {
    fn wait(&self) -> impl Future<Output = ()> + Send + 'static {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let _ = self.entered.send(());
        let release = self.release.clone();
        async move {
            release.acquire().await.expect("gate open").forget();
        }
    }
}

impl SchedulingPolicy for Gated {
    fn describe(&self) -> String {
        "gated@1".into()
    }
    fn allocate(
        &self,
        job: Arc<Job>,
        nodes: Arc<[plugin::Node]>,
    ) -> BoxFuture<'static, Result<plugin::PolicyAnswer, PluginError>> {
        let wait = self.wait();
        async move {
            wait.await;
            NativePolicy::BinPack.allocate_now(&job, &nodes)
        }
        .boxed()
    }
    fn optimize(
        &self,
        _: Arc<[Job]>,
        _: Arc<[plugin::Node]>,
        _: Vec<JobPlan>,
    ) -> BoxFuture<'static, Result<Vec<JobPlan>, PluginError>> {
        let wait = self.wait();
        let mut plans = self.plans.lock().expect("plans");
        let plan = if plans.is_empty() {
            vec![]
        } else {
            plans.remove(0)
        };
        async move {
            wait.await;
            Ok(plan)
        }
        .boxed()
    }
}

/// The harness with `policy` loaded as `gated`.
fn gated_harness(n: usize, policy: Gated) -> Harness {
    let mut h = harness(n, vec![], None);
    let policies = Fake(
        HashMap::from([(
            "gated".to_string(),
            Arc::new(policy) as Arc<dyn SchedulingPolicy>,
        )]),
        HashMap::new(),
    );
    let (allocator, retries) = Allocator::new(
        Arc::new(policies),
        h.allocator.nodes.clone(),
        h.allocator.jobs.clone(),
        Settings::default(),
        h.metrics.clone(),
    );
    h.allocator = allocator;
    h.retries = retries;
    h
}

/// Admits `job` on a task of its own (the policy call may be parked at a gate).
fn admit_in_background(h: &Harness, job: DIJob) -> tokio::task::JoinHandle<Admission> {
    let allocator = h.allocator.clone();
    tokio::spawn(async move { allocator.admit(&job).await })
}

/// Admits `job` here; a minute without an answer fails the test (it waits for a lock
/// that a parked policy call holds).
async fn admit_now(h: &Harness, job: &DIJob) -> Admission {
    tokio::time::timeout(Duration::from_secs(60), h.allocator.admit(job))
        .await
        .expect("admitted while another job's policy call is parked")
}

#[tokio::test]
async fn a_parked_plugin_call_does_not_stop_other_admissions() {
    let (policy, mut gate) = gated(vec![]);
    let h = gated_harness(2, policy);
    let a = admit_in_background(&h, job("a", 1, 8, Some("gated")));
    gate.entered().await;
    // The plugin call for a is parked (as behind a full call slot); b is admitted now.
    let b = admit_now(&h, &job("b", 1, 8, None)).await;
    assert_eq!(placed_nodes(&b).len(), 1);
    // a's answer was made before b took its node; a still gets the other one.
    gate.release.add_permits(PLUGIN_TRIES);
    let a = a.await.expect("admission a");
    let Admission::Placed { nodes, by, .. } = &a else {
        panic!("{a:?}")
    };
    assert_eq!(by, "gated@1");
    assert_ne!(
        nodes.as_slice(),
        placed_nodes(&b),
        "{a:?} and {b:?} share a node"
    );
}

#[tokio::test]
async fn a_stale_plugin_answer_is_checked_again_and_exactly_one_job_gets_the_last_room() {
    let (policy, mut gate) = gated(vec![]);
    let mut h = gated_harness(1, policy);
    let a = admit_in_background(&h, job("a", 1, 8, Some("gated")));
    gate.entered().await;
    // The plugin answers n0 for a; meanwhile b takes all of n0.
    assert_eq!(
        placed_nodes(&admit_now(&h, &job("b", 1, 8, None)).await),
        ["n0"]
    );
    gate.release_one();
    // a's answer no longer fits: the plugin is asked again, sees n0 full and says no-fit.
    gate.entered().await;
    gate.release_one();
    let a = a.await.expect("admission a");
    let Admission::Waiting { by, message, .. } = &a else {
        panic!("a placed on b's room: {a:?}")
    };
    assert_eq!(by, "gated@1");
    assert!(message.contains("free: 0 GPUs"), "{message}");
    assert_eq!(gate.calls(), 2);
    // a waits like any job told to: b's end wakes it, and it is placed.
    h.allocator.forget(&ObjectKey::new("ns", "b")).await;
    assert_eq!(h.retries.next().await, Some(ObjectKey::new("ns", "a")));
    let again = admit_in_background(&h, job("a", 1, 8, Some("gated")));
    gate.entered().await;
    gate.release_one();
    assert_eq!(placed_nodes(&again.await.expect("admission a")), ["n0"]);
}

#[tokio::test]
async fn a_stale_answer_that_still_fits_is_taken_without_asking_again() {
    let (policy, mut gate) = gated(vec![]);
    let h = gated_harness(1, policy);
    let a = admit_in_background(&h, job("a", 1, 4, Some("gated")));
    gate.entered().await;
    assert_eq!(
        placed_nodes(&admit_now(&h, &job("b", 1, 4, None)).await),
        ["n0"]
    );
    gate.release_one();
    assert_eq!(placed_nodes(&a.await.expect("admission a")), ["n0"]);
    assert_eq!(gate.calls(), 1);
}

#[tokio::test]
async fn answers_that_keep_going_stale_give_way_to_the_built_in_policy() {
    let (policy, mut gate) = gated(vec![]);
    let h = gated_harness(PLUGIN_TRIES + 1, policy);
    let a = admit_in_background(&h, job("a", 1, 8, Some("gated")));
    // During each call another job takes the node the plugin is choosing.
    for i in 0..PLUGIN_TRIES {
        gate.entered().await;
        placed_nodes(&admit_now(&h, &job(&format!("b{i}"), 1, 8, None)).await);
        gate.release_one();
    }
    let a = a.await.expect("admission a");
    let Admission::Placed {
        nodes,
        by,
        fallback,
        ..
    } = &a
    else {
        panic!("{a:?}")
    };
    assert_eq!(by, "builtin-binpack");
    assert_eq!(nodes.as_slice(), [format!("n{PLUGIN_TRIES}")]);
    assert!(
        fallback
            .as_deref()
            .is_some_and(|f| f.contains("took the room")),
        "{fallback:?}"
    );
    assert_eq!(gate.calls(), PLUGIN_TRIES);
    assert!(metric(
        &h,
        "diorch_allocator_fallbacks_total{policy=\"gated\",result=\"Contended\"} 1"
    ));
}

#[tokio::test]
async fn a_job_deleted_during_its_policy_call_holds_nothing() {
    let (policy, mut gate) = gated(vec![]);
    let h = gated_harness(1, policy);
    let a = admit_in_background(&h, job("a", 1, 8, Some("gated")));
    gate.entered().await;
    let a_key = ObjectKey::new("ns", "a");
    tokio::time::timeout(Duration::from_secs(60), h.allocator.forget(&a_key))
        .await
        .expect("forgotten while its policy call is parked");
    gate.release_one();
    assert!(matches!(
        a.await.expect("admission a"),
        Admission::Waiting { .. }
    ));
    // Nothing of a is held: b gets the node.
    assert_eq!(
        placed_nodes(&admit_now(&h, &job("b", 1, 8, None)).await),
        ["n0"]
    );
}

#[tokio::test]
async fn a_parked_optimize_call_does_not_stop_admissions_and_its_stale_plan_is_dropped() {
    // The plan moves a from n0 to n1; while it is being made, b takes n1.
    let (policy, mut gate) = gated(vec![vec![plan("ns/a", &["n1"])]]);
    let mut h = gated_harness(2, policy);
    let a = running("a", &["n0"], 8, Some("gated"));
    cache(&mut h, &a);
    assert_eq!(h.allocator.consult(&a).await, None);
    let allocator = h.allocator.clone();
    let pass = tokio::spawn(async move { allocator.optimize_once().await });
    gate.entered().await;
    assert_eq!(
        placed_nodes(&admit_now(&h, &job("b", 1, 8, None)).await),
        ["n1"]
    );
    gate.release_one();
    assert_eq!(pass.await.expect("optimize pass"), vec![]);
    assert!(metric(&h, "result=\"stale\"} 1"));
    // a stays where it is: nothing proposed.
    assert_eq!(h.allocator.consult(&a).await, None);
}

#[tokio::test]
async fn a_plan_that_still_fits_after_the_ledger_changed_is_applied() {
    let (policy, mut gate) = gated(vec![vec![plan("ns/a", &["n2"])]]);
    let mut h = gated_harness(3, policy);
    let a = running("a", &["n0"], 8, Some("gated"));
    cache(&mut h, &a);
    h.allocator.consult(&a).await;
    let allocator = h.allocator.clone();
    let pass = tokio::spawn(async move { allocator.optimize_once().await });
    gate.entered().await;
    // b takes room, but not a's target.
    assert_eq!(
        placed_nodes(&admit_now(&h, &job("b", 1, 8, None)).await),
        ["n1"]
    );
    gate.release_one();
    assert!(
        matches!(&pass.await.expect("optimize pass")[..], [optimize::Decision::Move { slots, .. }] if slots.as_slice() == ["n2"]),
    );
}

#[test]
fn only_active_preemptible_jobs_short_of_an_allocation_need_one() {
    let mut j = job("a", 2, 1, None);
    assert!(needs_allocation(&j));
    j.status = Some(diorch_core::api::DIJobStatus {
        allocation: Some(vec!["n0".into(), "n1".into()]),
        ..Default::default()
    });
    assert!(!needs_allocation(&j));
    j.spec.tasks[0].replicas = 3;
    assert!(needs_allocation(&j), "scaled up");
    if let Some(s) = j.status.as_mut() {
        s.phase = Some(diorch_core::api::Phase::Succeeded);
    }
    assert!(!needs_allocation(&j), "finished");
    let mut k = job("k", 2, 1, None);
    k.spec.preemptible = false;
    assert!(!needs_allocation(&k));
}

/// A policy under another name (shadows are told apart by name).
struct Renamed(&'static str, Fixed);

impl SchedulingPolicy for Renamed {
    fn describe(&self) -> String {
        format!("{}@abcd", self.0)
    }
    fn allocate(
        &self,
        job: Arc<Job>,
        nodes: Arc<[plugin::Node]>,
    ) -> BoxFuture<'static, Result<plugin::PolicyAnswer, PluginError>> {
        self.1.allocate(job, nodes)
    }
    fn optimize(
        &self,
        jobs: Arc<[Job]>,
        nodes: Arc<[plugin::Node]>,
        previous: Vec<JobPlan>,
    ) -> BoxFuture<'static, Result<Vec<JobPlan>, PluginError>> {
        self.1.optimize(jobs, nodes, previous)
    }
}

/// A shadow that never answers (the host's deadline would end it; here nothing does).
struct Hanging;

impl SchedulingPolicy for Hanging {
    fn describe(&self) -> String {
        "hanging@abcd".into()
    }
    fn allocate(
        &self,
        _: Arc<Job>,
        _: Arc<[plugin::Node]>,
    ) -> BoxFuture<'static, Result<plugin::PolicyAnswer, PluginError>> {
        std::future::pending().boxed()
    }
    fn optimize(
        &self,
        _: Arc<[Job]>,
        _: Arc<[plugin::Node]>,
        _: Vec<JobPlan>,
    ) -> BoxFuture<'static, Result<Vec<JobPlan>, PluginError>> {
        std::future::pending().boxed()
    }
}

/// Waits until the shadows of `policy` made `decisions` decisions (the worker runs apart).
async fn shadow_report(h: &Harness, policy: &str, decisions: u64) -> shadow::Report {
    for _ in 0..500 {
        if let Some(r) = h.allocator.shadow_report(policy)
            && r.shadows
                .values()
                .map(|c| c.same + c.different + c.failed)
                .sum::<u64>()
                >= decisions
        {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the shadows of {policy} made fewer than {decisions} decisions");
}

#[tokio::test]
async fn a_shadow_is_given_the_active_policys_input_and_its_answer_is_compared_never_applied() {
    let shadows: Vec<Arc<dyn SchedulingPolicy>> = vec![
        Arc::new(Renamed("agrees", Fixed::allocating(Ok(vec!["n0".into()])))),
        Arc::new(Renamed("differs", Fixed::allocating(Ok(vec!["n1".into()])))),
        Arc::new(Renamed(
            "traps",
            Fixed::allocating(Err(PluginError::Trap {
                plugin: "traps".into(),
                message: "unreachable".into(),
            })),
        )),
        // Over-commits n0 (9 GPUs on 8): the same output checks refuse it.
        Arc::new(Renamed(
            "garbage",
            Fixed::allocating(Ok(vec!["nowhere".into()])),
        )),
    ];
    let h = harness_with_shadows(
        2,
        vec![("p", Fixed::allocating(Ok(vec!["n0".into()])))],
        HashMap::from([("p".to_string(), shadows)]),
        None,
    );
    let a = h.allocator.admit(&job("a", 1, 8, Some("p"))).await;
    assert_eq!(
        placed_nodes(&a),
        ["n0"],
        "the active policy's answer is applied"
    );
    let report = shadow_report(&h, "p", 4).await;
    let counts = |name: &str| {
        let c = &report.shadows[name];
        (c.same, c.different, c.failed)
    };
    assert_eq!(counts("agrees"), (1, 0, 0));
    assert_eq!(counts("differs"), (0, 1, 0));
    assert_eq!(counts("traps"), (0, 0, 1));
    assert_eq!(counts("garbage"), (0, 0, 1));
    assert_eq!(report.divergences.len(), 3, "{report:?}");
    let differs = report
        .divergences
        .iter()
        .find(|d| d.shadow == "differs@abcd")
        .expect("the divergent decision is recorded");
    assert_eq!(differs.call, "allocate");
    assert_eq!(differs.active, "fixed@1234");
    // The shadow's reason is kept with its divergent answer.
    assert_eq!(differs.shadow_reason.as_deref(), Some(FIXED_REASON));
    assert_eq!(differs.comparison.jobs[0].job, "ns/a");
    assert!(metric(
        &h,
        r#"diorch_policy_shadow_decisions_total{policy="p",shadow="differs",result="different"} 1"#
    ));
    assert!(metric(
        &h,
        r#"diorch_policy_call_duration_seconds_count{policy="p",plugin="fixed",role="active",call="allocate"} 1"#
    ));
    assert!(metric(
        &h,
        r#"diorch_policy_call_duration_seconds_count{policy="p",plugin="agrees",role="shadow",call="allocate"} 1"#
    ));
}

#[tokio::test]
async fn a_shadow_that_never_answers_delays_no_admission_and_a_full_queue_drops_its_calls() {
    let h = harness_with_shadows(
        40,
        vec![("p", Fixed::allocating(Ok(vec!["n0".into()])))],
        HashMap::from([(
            "p".to_string(),
            vec![Arc::new(Hanging) as Arc<dyn SchedulingPolicy>],
        )]),
        None,
    );
    // The worker holds the first call forever; the queue takes QUEUE_CAPACITY more; the rest
    // are dropped. Every admission is answered meanwhile (by the active policy until n0's 32
    // CPUs are taken, then by the built-in one).
    let extra = 5;
    for i in 0..shadow::QUEUE_CAPACITY + 1 + extra {
        let a = h
            .allocator
            .admit(&job(&format!("j{i}"), 1, 0, Some("p")))
            .await;
        assert_eq!(placed_nodes(&a).len(), 1);
    }
    let dropped = h
        .allocator
        .shadow_report("p")
        .map(|r| r.shadows["hanging"].dropped)
        .unwrap_or_default();
    // The worker may not have taken the first call off the queue yet: one more may drop.
    assert!(
        dropped == extra as u64 || dropped == extra as u64 + 1,
        "{dropped} dropped"
    );
    assert!(metric(
        &h,
        &format!(
            r#"diorch_policy_shadow_dropped_total{{policy="p",shadow="hanging",result="allocate"}} {dropped}"#
        )
    ));
}

#[tokio::test]
async fn a_shadow_is_given_each_optimize_input_and_its_plan_is_compared_never_applied() {
    // The active policy moves a to n1; the shadow would keep it on n0.
    let active = Fixed::planning(vec![Ok(vec![plan("ns/a", &["n1"])])]);
    let shadow = Renamed(
        "keeper",
        Fixed::planning(vec![Ok(vec![plan("ns/a", &["n0"])])]),
    );
    let mut h = harness_with_shadows(
        2,
        vec![("p", active)],
        HashMap::from([(
            "p".to_string(),
            vec![Arc::new(shadow) as Arc<dyn SchedulingPolicy>],
        )]),
        Some("p"),
    );
    let a = running("a", &["n0"], 4, None);
    cache(&mut h, &a);
    assert_eq!(h.allocator.consult(&a).await, None);
    let decisions = h.allocator.optimize_once().await;
    assert!(
        matches!(&decisions[..], [optimize::Decision::Move { slots, .. }] if slots.as_slice() == ["n1"]),
        "the active plan is applied: {decisions:?}"
    );
    let report = shadow_report(&h, "p", 1).await;
    assert_eq!(report.shadows["keeper"].different, 1);
    let d = &report.divergences[0];
    assert_eq!((d.call, d.input_jobs), ("optimize", 1));
    assert_eq!(d.comparison.jobs[0].job, "ns/a");
}

mod preemption;
