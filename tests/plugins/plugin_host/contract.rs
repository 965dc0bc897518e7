//! Components built against the frozen 0.2.0 (lists of records) and 0.3.0 (columns, no reasons)
//! contracts, loaded and called next to 0.4.0 ones (columns, answers with reasons).

use std::sync::Arc;

use diorch::plugin::registry::PluginRegistry;
use diorch::plugin::spec::{PluginKind, PluginSpec};
use diorch::plugin::{
    Contract, Job, NativePolicy, Node, PluginError, PodMutator, PolicyError, SchedulingPolicy,
    TaintEffect, World, sample,
};

use super::{is_wrong_world, roomy, roomy_host, wasm};

/// What `plugins/testdata/legacy-policy` computes, on the plain model: each replica on the first
/// node that is ready, not tainted NoSchedule, not labelled `legacy/skip`, and still has room.
fn legacy_first_fit(job: &Job, nodes: &[Node]) -> Vec<String> {
    let mut free: Vec<Option<diorch::plugin::Resources>> = nodes
        .iter()
        .map(|n| {
            let usable = n.ready
                && !n.taints.iter().any(|t| t.effect == TaintEffect::NoSchedule)
                && !n.labels.iter().any(|(k, _)| k == "legacy/skip");
            usable.then(|| n.free.clone())
        })
        .collect();
    let mut answer = Vec::new();
    for task in &job.tasks {
        for _ in 0..task.replicas {
            let i = free
                .iter_mut()
                .position(|f| {
                    f.as_mut().is_some_and(|f| {
                        let fits = f.fits(&task.requests);
                        if fits {
                            f.take(&task.requests);
                        }
                        fits
                    })
                })
                .expect("the sample fits");
            answer.push(nodes[i].name.clone());
        }
    }
    answer
}

/// Components built against the frozen 0.2.0 contract (lists of records) keep loading and are
/// called in their own layout, next to 0.3.0 ones (columns), with the same checks.
#[tokio::test]
async fn components_of_the_0_2_contract_are_still_loaded_and_called() {
    let host = roomy_host();
    let legacy = host
        .load_policy_blocking("legacy", &wasm("legacy_policy"), None)
        .unwrap();
    assert_eq!(legacy.contract(), Contract::V2);
    let current = host
        .load_policy_blocking("binpack", &wasm("binpack"), None)
        .unwrap();
    assert_eq!(current.contract(), Contract::V4);

    // Every part of the input matters to the answer: readiness and taints (the sample's every
    // 10th and 7th node), a label, and an extended resource of which each node has one.
    let (mut job, mut nodes) = sample::allocate_input(30, 2);
    nodes[0].labels.push(("legacy/skip".into(), "yes".into()));
    job.tasks[0].requests.extended = vec![("rdma/hca".into(), 1)];
    let want = legacy_first_fit(&job, &nodes);
    assert!(!want.contains(&nodes[0].name), "{want:?}");
    let answer = legacy.allocate_blocking(&job, &nodes).unwrap();
    assert_eq!(answer.nodes, want);
    assert_eq!(answer.reason, None, "0.2 answers carry no reason");
    let arc = legacy.clone();
    let via_trait = arc
        .allocate(Arc::new(job.clone()), nodes.clone().into())
        .await;
    assert_eq!(
        via_trait.unwrap().nodes,
        want,
        "the inline path serves 0.2 too"
    );
    // Its refusal is typed as a 0.3 one's is.
    let mut huge = job.clone();
    huge.tasks[0].replicas = 1_000;
    assert!(
        matches!(legacy.allocate_blocking(&huge, &nodes), Err(PluginError::Refused { error: PolicyError::NoFit(m), .. }) if m.contains("learner")),
    );
    // optimize: the legacy policy keeps every placed job; none is placed here.
    let (jobs, nodes) = sample::optimize_input(5, 20);
    assert_eq!(
        legacy.optimize_blocking(&jobs, &nodes, &[]).unwrap(),
        vec![]
    );

    let mutator = host
        .load_mutator("legacy-mutator", wasm("legacy_mutator").into(), None)
        .await
        .unwrap();
    assert_eq!(mutator.contract(), Contract::V2);
    let (ctx, pod) = sample::pod("collector");
    let out = mutator.mutate(ctx.clone(), pod.clone()).await.unwrap();
    let labels = out.metadata.labels.clone().unwrap();
    assert_eq!(
        labels["legacy-mutator"],
        format!("{}-{}", ctx.task_type, ctx.rank)
    );

    // `plugin check` names the version a component was built against.
    let limits = roomy();
    let report = diorch::cli::plugin::check(&wasm("legacy_policy"), limits, "", "learner").unwrap();
    assert!(
        report.contains("world:    diorch:plugins/scheduling-policy@0.2.0"),
        "{report}"
    );
    let report = diorch::cli::plugin::check(&wasm("binpack"), limits, "", "learner").unwrap();
    assert!(
        report.contains("world:    diorch:plugins/scheduling-policy@0.4.0"),
        "{report}"
    );
    let report =
        diorch::cli::plugin::check(&wasm("legacy_mutator"), limits, "", "learner").unwrap();
    assert!(
        report.contains("world:    diorch:plugins/pod-mutator@0.2.0"),
        "{report}"
    );

    // The plugin status says which version each serving component was built against.
    let registry = PluginRegistry::new(roomy_host(), NativePolicy::BinPack);
    for (name, file, kind) in [
        ("old", "legacy_policy", PluginKind::Policy),
        ("new", "binpack", PluginKind::Policy),
        ("old-mutator", "legacy_mutator", PluginKind::Mutator),
    ] {
        registry
            .apply(PluginSpec::new(name, kind), wasm(file).into())
            .await
            .unwrap();
    }
    let contract = |name: &str| {
        let status = registry.status_of(name).unwrap();
        serde_json::to_value(&status).unwrap()["contract"].clone()
    };
    assert_eq!(contract("old"), "0.2.0");
    assert_eq!(contract("new"), "0.4.0");
    assert_eq!(contract("old-mutator"), "0.2.0");

    // A 0.2 component of the other world is refused, named against the current version.
    let err = host
        .load_mutator_blocking("legacy-as-mutator", &wasm("legacy_policy"), None)
        .err()
        .unwrap();
    assert!(is_wrong_world(&err, World::PodMutator), "{err}");
    assert!(err.to_string().contains("pod-mutator@0.4.0"), "{err}");
}

/// A component built against the frozen 0.3.0 contract (`plugins/testdata/v03-policy`: plain
/// wit-bindgen on `wit/v0.3`, answers without a reason) keeps loading and working: the same
/// first fit as the 0.2 one, read from 0.3's columns, inline and on the pool, its refusals
/// typed, its plans kept, and its status naming 0.3.0.
#[tokio::test]
async fn components_of_the_0_3_contract_are_still_loaded_and_called() {
    let host = roomy_host();
    let v03 = host
        .load_policy_blocking("v03", &wasm("v03_policy"), None)
        .unwrap();
    assert_eq!(v03.contract(), Contract::V3);

    let (mut job, mut nodes) = sample::allocate_input(30, 2);
    nodes[0].labels.push(("legacy/skip".into(), "yes".into()));
    job.tasks[0].requests.extended = vec![("rdma/hca".into(), 1)];
    let want = legacy_first_fit(&job, &nodes);
    let answer = v03.allocate_blocking(&job, &nodes).unwrap();
    assert_eq!(answer.nodes, want);
    assert_eq!(answer.reason, None, "0.3 answers carry no reason");
    let via_trait = v03
        .clone()
        .allocate(Arc::new(job.clone()), nodes.clone().into())
        .await
        .unwrap();
    assert_eq!(via_trait.nodes, want, "the inline path serves 0.3 too");

    let mut huge = job.clone();
    huge.tasks[0].replicas = 1_000;
    assert!(
        matches!(v03.allocate_blocking(&huge, &nodes), Err(PluginError::Refused { error: PolicyError::NoFit(m), .. }) if m.contains("learner")),
    );
    // optimize keeps every placed job where it is, with no reason.
    let (mut jobs, nodes) = sample::optimize_input(3, 20);
    jobs[1].current = vec![Some(4); jobs[1].total_replicas()];
    let plan = v03.optimize_blocking(&jobs, &nodes, &[]).unwrap();
    assert_eq!(plan.len(), 1, "{plan:?}");
    assert_eq!(plan[0].job, jobs[1].key);
    assert_eq!(
        plan[0].nodes,
        vec![nodes[4].name.clone(); jobs[1].total_replicas()]
    );
    assert_eq!(plan[0].reason, None);

    let report = diorch::cli::plugin::check(&wasm("v03_policy"), roomy(), "", "learner").unwrap();
    assert!(
        report.contains("world:    diorch:plugins/scheduling-policy@0.3.0"),
        "{report}"
    );
    let registry = PluginRegistry::new(roomy_host(), NativePolicy::BinPack);
    registry
        .apply(
            PluginSpec::new("v03", PluginKind::Policy),
            wasm("v03_policy").into(),
        )
        .await
        .unwrap();
    let status = serde_json::to_value(registry.status_of("v03").unwrap()).unwrap();
    assert_eq!(status["contract"], "0.3.0");
}

/// A 0.4.0 component's reasons reach the caller sanitised and bounded, whatever it sends: the
/// example's own words unchanged, a 1 MiB reason cut to `MAX_REASON_BYTES`, newlines, NUL,
/// terminal escapes and a bidi override turned into spaces. The placement itself is the
/// policy's, untouched.
#[tokio::test]
async fn reasons_of_a_0_4_component_are_bounded_and_sanitised() {
    use diorch_core::reason::MAX_REASON_BYTES;

    let host = roomy_host();
    let hostile = host
        .load_policy_blocking("hostile", &wasm("hostile_policy"), None)
        .unwrap();
    assert_eq!(hostile.contract(), Contract::V4);
    let (mut job, nodes) = sample::allocate_input(10, 3);
    let good = NativePolicy::BinPack.allocate_now(&job, &nodes).unwrap();
    assert!(
        good.reason
            .as_deref()
            .is_some_and(|r| r.starts_with("bin-pack, fullest fitting node first: ")),
        "{good:?}"
    );

    job.key = "ns/huge-reason".into();
    let answer = hostile.allocate_blocking(&job, &nodes).unwrap();
    assert_eq!(answer.nodes, good.nodes);
    let reason = answer.reason.unwrap();
    assert!(reason.len() <= MAX_REASON_BYTES, "{}", reason.len());
    assert!(
        reason.starts_with("why why ") && reason.ends_with('…'),
        "{reason}"
    );
    // The same through the trait (the inline attempt first).
    let via_trait = hostile
        .clone()
        .allocate(Arc::new(job.clone()), nodes.clone().into())
        .await
        .unwrap();
    assert!(via_trait.reason.unwrap().len() <= MAX_REASON_BYTES);

    job.key = "ns/control-reason".into();
    let answer = hostile.allocate_blocking(&job, &nodes).unwrap();
    assert_eq!(answer.nodes, good.nodes);
    assert_eq!(
        answer.reason.as_deref(),
        Some("line one line two [31mred [0m desrever end")
    );
}
