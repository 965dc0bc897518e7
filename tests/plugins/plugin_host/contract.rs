//! Components built against the frozen 0.2.0 (lists of records), 0.3.0 (columns, no reasons) and
//! 0.4.0 (no `preempt`) contracts, loaded and called next to 0.5.0 ones (columns, answers with
//! reasons, `preempt`).

use std::sync::Arc;

use diorch::plugin::registry::PluginRegistry;
use diorch::plugin::spec::{PluginKind, PluginSpec};
use diorch::plugin::{
    Checked, Contract, Job, NativePolicy, Node, PluginError, PodMutator, PolicyError,
    PreemptAnswer, SchedulingPolicy, TaintEffect, World, sample,
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
    assert_eq!(current.contract(), Contract::V5);

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
        report.contains("world:    diorch:plugins/scheduling-policy@0.5.0"),
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
    assert_eq!(contract("new"), "0.5.0");
    assert_eq!(contract("old-mutator"), "0.2.0");

    // A 0.2 component of the other world is refused, named against the current version.
    let err = host
        .load_mutator_blocking("legacy-as-mutator", &wasm("legacy_policy"), None)
        .err()
        .unwrap();
    assert!(is_wrong_world(&err, World::PodMutator), "{err}");
    assert!(err.to_string().contains("pod-mutator@0.5.0"), "{err}");
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

/// A 0.4.0-or-later component's reasons reach the caller sanitised and bounded, whatever it sends: the
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
    assert_eq!(hostile.contract(), Contract::V5);
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

/// A component built against the frozen 0.4.0 contract (`plugins/testdata/v04-policy`: plain
/// wit-bindgen on `wit/v0.4`, no `preempt` export) keeps loading and working: the same first fit
/// with its reason, inline and on the pool, its plans kept, its status naming 0.4.0; asked to
/// preempt, the host answers for it that it does not (the job waits), without calling it. So do
/// the 0.3 and 0.2 ones.
#[tokio::test]
async fn components_of_the_0_4_contract_are_still_loaded_and_never_preempt() {
    let host = roomy_host();
    let v04 = host
        .load_policy_blocking("v04", &wasm("v04_policy"), None)
        .unwrap();
    assert_eq!(v04.contract(), Contract::V4);

    let (mut job, mut nodes) = sample::allocate_input(30, 2);
    nodes[0].labels.push(("legacy/skip".into(), "yes".into()));
    job.tasks[0].requests.extended = vec![("rdma/hca".into(), 1)];
    let want = legacy_first_fit(&job, &nodes);
    let answer = v04.allocate_blocking(&job, &nodes).unwrap();
    assert_eq!(answer.nodes, want);
    assert_eq!(answer.reason.as_deref(), Some("v0.4 first fit"));
    let via_trait = v04
        .clone()
        .allocate(Arc::new(job.clone()), nodes.clone().into())
        .await
        .unwrap();
    assert_eq!(via_trait.nodes, want, "the inline path serves 0.4 too");
    let (mut jobs, plan_nodes) = sample::optimize_input(3, 20);
    jobs[1].current = vec![Some(4); jobs[1].total_replicas()];
    let plan = v04.optimize_blocking(&jobs, &plan_nodes, &[]).unwrap();
    assert_eq!(plan.len(), 1, "{plan:?}");
    assert_eq!(plan[0].job, jobs[1].key);

    // Preemption: a job that does not fit, and candidates that would make room for it.
    let (urgent, candidates, full) = sample::preempt_input(true);
    assert!(matches!(
        v04.allocate_blocking(&urgent, &full),
        Err(PluginError::Refused {
            error: PolicyError::NoFit(_),
            ..
        })
    ),);
    assert_eq!(v04.preempt_raw(&urgent, &candidates, &full).unwrap(), None);
    for (name, file) in [
        ("v04", "v04_policy"),
        ("v03", "v03_policy"),
        ("legacy", "legacy_policy"),
    ] {
        let policy = host.load_policy_blocking(name, &wasm(file), None).unwrap();
        let answer = policy
            .preempt(
                Arc::new(urgent.clone()),
                candidates.clone().into(),
                full.clone().into(),
            )
            .await;
        assert_eq!(answer, Ok(None), "{name}");
        let checked = Checked::plugin(Arc::new(policy))
            .preempt(
                Arc::new(urgent.clone()),
                candidates.clone().into(),
                full.clone().into(),
            )
            .await;
        assert_eq!(checked, Ok(None), "{name}");
    }

    let report = diorch::cli::plugin::check(&wasm("v04_policy"), roomy(), "", "learner").unwrap();
    assert!(
        report.contains("world:    diorch:plugins/scheduling-policy@0.4.0"),
        "{report}"
    );
    assert!(
        report.contains("preempt:  not in contract 0.4.0"),
        "{report}"
    );
    let registry = PluginRegistry::new(roomy_host(), NativePolicy::BinPack);
    registry
        .apply(
            PluginSpec::new("v04", PluginKind::Policy),
            wasm("v04_policy").into(),
        )
        .await
        .unwrap();
    let status = serde_json::to_value(registry.status_of("v04").unwrap()).unwrap();
    assert_eq!(status["contract"], "0.4.0");
}

/// A 0.5.0 component built on the Rust SDK preempts exactly as the built-in policy it wraps:
/// the same shrink (one job's highest collectors) and the same eviction (the job losing the
/// least work), through the real Wasm host, the shape checks and the room check.
#[tokio::test]
async fn a_0_5_component_preempts_as_the_builtin_policy_does() {
    let host = roomy_host();
    for (file, native) in [
        ("binpack", NativePolicy::BinPack),
        ("spread", NativePolicy::Spread),
        ("goodput", NativePolicy::Goodput),
    ] {
        let policy = host.load_policy_blocking(file, &wasm(file), None).unwrap();
        assert_eq!(policy.contract(), Contract::V5);
        for shrink in [true, false] {
            let (job, candidates, nodes) = sample::preempt_input(shrink);
            // Called only after allocate said no-fit: so it does, as the built-in policy does.
            assert!(
                matches!(
                    policy.allocate_blocking(&job, &nodes),
                    Err(PluginError::Refused {
                        error: PolicyError::NoFit(_),
                        ..
                    })
                ),
                "{file}"
            );
            assert!(native.allocate_now(&job, &nodes).is_err());
            let builtin = Checked::builtin(native)
                .preempt_now(&job, &candidates, &nodes)
                .unwrap()
                .expect("the built-in policy makes room");
            let plugin = Checked::plugin(Arc::new(policy.clone()))
                .preempt(
                    Arc::new(job.clone()),
                    candidates.clone().into(),
                    nodes.clone().into(),
                )
                .await
                .unwrap()
                .expect("the plugin makes room");
            assert_eq!(plugin, builtin, "{file}, shrink {shrink}");
            if file == "binpack" {
                let want = if shrink {
                    // low-a (first by key at equal priority) loses 4 of its 7 collectors.
                    PreemptAnswer {
                        nodes: vec!["gpu-0".into(); 4],
                        shrinks: vec![(0, vec![1, 3])],
                        evictions: vec![],
                        reason: None,
                    }
                } else {
                    // Shrinking frees 6 GPUs a node, not 8: low-b, which loses less work, goes.
                    PreemptAnswer {
                        nodes: vec!["gpu-1".into()],
                        shrinks: vec![],
                        evictions: vec![1],
                        reason: None,
                    }
                };
                assert_eq!(plugin, want, "shrink {shrink}");
            }
        }
        // Nothing to take: no preemption, no error.
        let (job, mut candidates, nodes) = sample::preempt_input(false);
        for c in &mut candidates {
            c.may_evict = false;
        }
        assert_eq!(
            policy.preempt_blocking(&job, &candidates, &nodes).unwrap(),
            None,
            "{file}"
        );
    }

    let report = diorch::cli::plugin::check(&wasm("binpack"), roomy(), "", "learner").unwrap();
    assert!(
        report.contains("preempt:  job of 4 replicas on 2 full nodes -> 1 shrunk, 0 evicted, placed on gpu-0,gpu-0,gpu-0,gpu-0"),
        "{report}"
    );
}

/// A 0.5.0 component's `preempt` answer that names victims it may not have, or shrinks them
/// wrongly, is refused as a malformed output (the job then waits): an eviction past the
/// candidates, a victim named twice, a shrink without a count per task, a shrink below one
/// replica. The same component's good answers are the built-in policy's.
#[tokio::test]
async fn preempt_answers_a_component_may_not_give_are_refused() {
    let host = roomy_host();
    let hostile = host
        .load_policy_blocking("hostile", &wasm("hostile_policy"), None)
        .unwrap();
    let (job, candidates, nodes) = sample::preempt_input(true);
    let good = hostile
        .preempt_blocking(&job, &candidates, &nodes)
        .unwrap()
        .unwrap();
    assert_eq!(
        Some(good),
        NativePolicy::BinPack
            .preempt_now(&job, &candidates, &nodes)
            .unwrap()
    );
    for (mode, says) in [
        (
            "evict-out-of-range",
            "job index 3, but only 2 candidates exist",
        ),
        ("evict-twice", "ns/low-a is preempted twice"),
        ("shrink-wrong-length", "gives 0 counts for 2 tasks"),
        ("shrink-too-far", "learner 0 replicas, not within 1..=1"),
    ] {
        let mut bad = job.clone();
        bad.key = format!("ns/{mode}");
        let err = hostile
            .clone()
            .preempt(
                Arc::new(bad.clone()),
                candidates.clone().into(),
                nodes.clone().into(),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(&err, PluginError::MalformedOutput { plugin, message } if plugin == "hostile" && message.contains(says)),
            "{mode}: {err}"
        );
    }
}
