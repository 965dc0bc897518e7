//! Plugins in Python and JavaScript, through the same host as Rust ones:
//! - parity: the bin-pack, spread and accel-env examples in Rust, Python and JS give identical
//!   answers (node indices and reasons, refusals with their variant and message, mutated pods) on random
//!   clusters and task contexts from one shared generator (property-based, deterministic seed;
//!   `DIORCH_PARITY_CASES` raises the count);
//! - bounds: the hostile modes tested for Rust guests, written again in each language, are
//!   contained the same way (deadline, trap, memory, host checks, capabilities).
//!
//! Components come from `scripts/build-lang-plugins.sh` (target/plugins/{py,js}_*.wasm); where it
//! could not install a toolchain it writes target/lang/SKIPPED and these tests say SKIPPED.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use diorch::plugin::capabilities::Grants;
use diorch::plugin::registry::PluginRegistry;
use diorch::plugin::spec::{FailurePolicy, PluginKind, PluginSpec};
use diorch::plugin::{
    HostConfig, Job, JobAllocation, Limits, NativePolicy, Node, PluginError, PluginHost, Resources,
    Taint, TaintEffect, Task, TaskContext, WasmMutator, WasmPolicy, sample,
};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// The languages compared; `DIORCH_PARITY_LANGS=rust,python` narrows it while one is being
/// worked on (Rust, the reference, always comes first).
fn langs() -> Vec<&'static str> {
    let all = ["rust", "python", "js"];
    match std::env::var("DIORCH_PARITY_LANGS") {
        Ok(only) => all
            .into_iter()
            .filter(|l| *l == "rust" || only.split(',').any(|o| o.trim() == *l))
            .collect(),
        Err(_) => all.to_vec(),
    }
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// True (after saying so) when the language toolchains could not be installed here.
fn skipped(test: &str) -> bool {
    match std::fs::read_to_string(root().join("target/lang/SKIPPED")) {
        Ok(why) => {
            println!("SKIPPED {test}: {}", why.trim());
            true
        }
        Err(_) => false,
    }
}

/// The component file of an example in a language: `binpack` → binpack.wasm, py_binpack.wasm,
/// js_binpack.wasm.
fn component(lang: &str, name: &str) -> PathBuf {
    let file = match lang {
        "rust" => format!("{name}.wasm"),
        "python" => format!("py_{name}.wasm"),
        _ => format!("js_{name}.wasm"),
    };
    root().join("target/plugins").join(file)
}

fn bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; build the components first with scripts/build-plugins.sh and \
             scripts/build-lang-plugins.sh",
            path.display()
        )
    })
}

/// One host for the whole binary, compiled components cached on disk under target/ (shared
/// with the other test binaries and runs): a Python component takes seconds to compile.
/// Results, not speed, are under test here: a roomy deadline.
fn host() -> &'static PluginHost {
    static HOST: OnceLock<PluginHost> = OnceLock::new();
    HOST.get_or_init(|| {
        PluginHost::new(HostConfig {
            limits: Limits {
                deadline: Duration::from_secs(10),
                ..Limits::default()
            },
            cache_dir: Some(root().join("target/plugin-compile-cache")),
            ..HostConfig::default()
        })
        .unwrap()
    })
}

fn policy(lang: &str, name: &str) -> WasmPolicy {
    let path = component(lang, name);
    host()
        .load_policy_blocking(&format!("{lang}-{name}"), &bytes(&path), None)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn mutator(lang: &str, name: &str) -> WasmMutator {
    let path = component(lang, name);
    host()
        .load_mutator_blocking(&format!("{lang}-{name}"), &bytes(&path), None)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

// --- the shared generator ---------------------------------------------------------------------

const ZONE: &str = "topology.kubernetes.io/zone";
const GIB: u64 = 1 << 30;

fn resources(cpu_millis: u64, memory_bytes: u64, gpus: u32, rdma: Option<u64>) -> Resources {
    Resources {
        cpu_millis,
        memory_bytes,
        gpus,
        extended: rdma
            .map(|q| vec![("rdma/hca".to_string(), q)])
            .unwrap_or_default(),
    }
}

fn arb_node(i: usize) -> impl Strategy<Value = Node> {
    (
        prop::sample::select(vec![
            (4_000u64, 16u64, 0u32),
            (32_000, 128, 4),
            (96_000, 1024, 8),
            (16_000, 64, 0),
        ]),
        0u32..=100,
        proptest::option::of(0u64..=8),
        proptest::option::of(prop::sample::select(vec!["a", "b", "c", ""])),
        prop::sample::select(vec![None, None, None, Some(0u8), Some(1), Some(2)]),
        prop::bool::weighted(0.9),
    )
        .prop_map(
            move |((cpu, mem_gib, gpus), used_pct, rdma, zone, taint, ready)| {
                let used = |x: u64| x - x * u64::from(used_pct) / 100;
                let allocatable = resources(cpu, mem_gib * GIB, gpus, rdma);
                let free = resources(
                    used(cpu),
                    used(mem_gib * GIB),
                    gpus - (gpus * used_pct / 100),
                    rdma.map(|q| q.saturating_sub(u64::from(used_pct) / 25)),
                );
                let mut labels = vec![("kubernetes.io/hostname".to_string(), format!("n{i}"))];
                if let Some(z) = zone {
                    labels.push((ZONE.to_string(), z.to_string()));
                }
                let taints = taint
                    .map(|code| Taint {
                        key: "k".into(),
                        value: "v".into(),
                        effect: match code {
                            0 => TaintEffect::NoSchedule,
                            1 => TaintEffect::PreferNoSchedule,
                            _ => TaintEffect::NoExecute,
                        },
                    })
                    .into_iter()
                    .collect();
                Node {
                    name: format!("n{i}"),
                    labels,
                    taints,
                    allocatable,
                    free,
                    ready,
                }
            },
        )
}

fn arb_nodes() -> impl Strategy<Value = Vec<Node>> {
    (1usize..=24).prop_flat_map(|n| (0..n).map(arb_node).collect::<Vec<_>>())
}

fn arb_task() -> impl Strategy<Value = Task> {
    (
        prop::sample::select(vec!["learner", "collector", "evaluator"]),
        0u32..=5,
        prop::sample::select(vec![250u64, 1_000, 4_000, 16_000]),
        prop::sample::select(vec![1u64, 4, 32]),
        prop::sample::select(vec![0u32, 0, 1, 2]),
        proptest::option::weighted(0.2, 1u64..=2),
    )
        .prop_map(|(kind, replicas, cpu, mem_gib, gpus, rdma)| Task {
            name: kind.into(),
            task_type: kind.into(),
            replicas,
            min_replicas: replicas.min(1),
            max_replicas: replicas + 2,
            requests: resources(cpu, mem_gib * GIB, gpus, rdma),
        })
}

/// A job over `nodes` node indices: 1-3 tasks (the same type at most once), a current placement
/// sometimes (complete, partial, or naming a node that is gone).
fn arb_job(key: String, nodes: usize) -> impl Strategy<Value = Job> {
    (
        prop::collection::vec(arb_task(), 1..=3),
        prop::sample::select(vec![0i32, 0, 5, 50]),
        0u64..100_000,
        prop::sample::select(vec![0u8, 0, 1, 2]),
        prop::collection::vec(0u32..(nodes as u32 + 2), 16),
    )
        .prop_map(
            move |(mut tasks, priority, age_seconds, current_kind, picks)| {
                tasks.dedup_by(|a, b| a.task_type == b.task_type);
                let total: usize = tasks.iter().map(|t| t.replicas as usize).sum();
                let current = match current_kind {
                    0 => vec![],
                    1 => (0..total).map(|r| Some(picks[r % picks.len()])).collect(),
                    _ => (0..total)
                        .map(|r| Some(picks[r % picks.len()]).filter(|_| r % 2 == 0))
                        .collect(),
                };
                Job {
                    key: key.clone(),
                    priority,
                    preemptible: true,
                    tasks,
                    current,
                    profilings: String::new(),
                    age_seconds,
                }
            },
        )
}

type OptimizeCase = (Vec<Job>, Vec<Node>, Vec<JobAllocation>);

fn arb_allocate() -> impl Strategy<Value = (Job, Vec<Node>)> {
    arb_nodes().prop_flat_map(|nodes| {
        let n = nodes.len();
        (arb_job("default/job".into(), n), Just(nodes))
    })
}

fn arb_optimize() -> impl Strategy<Value = OptimizeCase> {
    (arb_nodes(), 1usize..=6).prop_flat_map(|(nodes, jobs)| {
        let n = nodes.len();
        let jobs: Vec<_> = (0..jobs)
            .map(|j| arb_job(format!("ns-{}/job-{j}", j % 2), n))
            .collect();
        (
            jobs,
            Just(nodes),
            prop::collection::vec((0u32..8, 0u32..(n as u32 + 1)), 0..4),
        )
            .prop_map(|(jobs, nodes, hints)| {
                let previous = hints
                    .into_iter()
                    .filter(|(j, _)| (*j as usize) < jobs.len())
                    .map(|(j, at)| JobAllocation {
                        job: j,
                        nodes: vec![at; jobs[j as usize].total_replicas()],
                        reason: None,
                    })
                    .collect();
                (jobs, nodes, previous)
            })
    })
}

/// Random values of `strategy`, from a fixed seed (the same cases on every run and machine).
fn cases<S: Strategy>(strategy: S, seed: u8) -> Vec<S::Value> {
    let count: usize = std::env::var("DIORCH_PARITY_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[seed; 32]),
    );
    (0..count)
        .map(|_| strategy.new_tree(&mut runner).unwrap().current())
        .collect()
}

/// What a policy call gave, comparable across languages: indices, or the error's reason and,
/// for a refusal, its variant and text.
fn outcome<T: std::fmt::Debug>(r: Result<T, PluginError>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(PluginError::Refused { error, .. }) => format!("refused {error:?}"),
        Err(e) => format!("failed {}", e.reason()),
    }
}

#[test]
fn example_policies_decide_alike_in_rust_python_and_js() {
    if skipped("example_policies_decide_alike_in_rust_python_and_js") {
        return;
    }
    let langs = langs();
    let allocate_cases = cases(arb_allocate(), 7);
    let optimize_cases = cases(arb_optimize(), 11);
    for name in ["binpack", "spread"] {
        let policies: Vec<WasmPolicy> = langs.iter().map(|l| policy(l, name)).collect();
        let (mut placed, mut refused) = (0, 0);
        for (i, (job, nodes)) in allocate_cases.iter().enumerate() {
            let answers: Vec<String> = policies
                .iter()
                .map(|p| outcome(p.allocate_raw(job, nodes)))
                .collect();
            for (lang, answer) in langs.iter().zip(&answers).skip(1) {
                assert_eq!(
                    answer, &answers[0],
                    "{name} allocate case {i}: {lang} differs from rust\njob {job:?}\nnodes {nodes:?}"
                );
            }
            if answers[0].starts_with("ok") {
                // Contract 0.4.0: the answers compared include each policy's reason, word
                // for word; every placement has one.
                assert!(
                    answers[0].contains("reason: Some("),
                    "{name} allocate case {i}: {}",
                    answers[0]
                );
                placed += 1;
            } else {
                refused += 1;
            }
        }
        for (i, (jobs, nodes, previous)) in optimize_cases.iter().enumerate() {
            let answers: Vec<String> = policies
                .iter()
                .map(|p| outcome(p.optimize_raw(jobs, nodes, previous)))
                .collect();
            for (lang, answer) in langs.iter().zip(&answers).skip(1) {
                assert_eq!(
                    answer, &answers[0],
                    "{name} optimize case {i}: {lang} differs from rust\njobs {jobs:?}\nnodes \
                     {nodes:?}\nprevious {previous:?}"
                );
            }
        }
        println!(
            "{name}: {} allocate cases ({placed} placed, {refused} refused) and {} optimize cases \
             alike in {langs:?}",
            allocate_cases.len(),
            optimize_cases.len()
        );
        // The generator must exercise both answers, or the comparison proves little.
        assert!(
            placed > 5 && refused > 5,
            "{name}: {placed} placed, {refused} refused"
        );
    }
}

/// Contract 0.5.0: the Python and JavaScript examples are built against it and load as 0.5.0
/// components, but do not preempt (their SDKs' `preempt` answers none: a known gap), where the
/// Rust one makes the built-in policy's room.
#[test]
fn only_the_rust_examples_preempt() {
    if skipped("only_the_rust_examples_preempt") {
        return;
    }
    let (job, candidates, nodes) = diorch::plugin::sample::preempt_input(true);
    for lang in langs() {
        for name in ["binpack", "spread"] {
            let p = policy(lang, name);
            assert_eq!(p.contract(), diorch::plugin::Contract::V5, "{lang} {name}");
            let answer = p.preempt_blocking(&job, &candidates, &nodes).unwrap();
            assert_eq!(
                answer.is_some(),
                lang == "rust",
                "{lang} {name}: {answer:?}"
            );
        }
    }
}

/// Task contexts and configs for the env mutator: valid configs, each field of the wrong type,
/// operator env, configs that are not JSON or not objects, other task types.
fn arb_mutation() -> impl Strategy<Value = (TaskContext, bool)> {
    let field = |key: &'static str, values: Vec<&'static str>| {
        proptest::option::of(prop::sample::select(values))
            .prop_map(move |v| v.map(|v| format!("\"{key}\":{v}")))
    };
    let object = (
        field(
            "taskTypes",
            vec![
                "[\"learner\"]",
                "[\"collector\",\"learner\"]",
                "[1,\"evaluator\"]",
                "\"learner\"",
                "null",
            ],
        ),
        field("interface", vec!["\"ib0\"", "\"eth1\"", "7", "null"]),
        field("rdma", vec!["true", "false", "\"yes\"", "null"]),
        field("debug", vec!["\"INFO\"", "[]"]),
        field(
            "env",
            vec![
                "{\"Z\":\"1\",\"A\":\"2\",\"M\":\"3\"}",
                "{\"DI_RANK\":\"9\"}",
                "{\"X\":1}",
                "[]",
                "{}",
            ],
        ),
    )
        .prop_map(|(a, b, c, d, e)| {
            let fields: Vec<String> = [a, b, c, d, e].into_iter().flatten().collect();
            format!("{{{}}}", fields.join(","))
        });
    let config = prop_oneof![
        4 => object,
        1 => prop::sample::select(vec!["", "  ", "{", "5", "[1]", "null", "\"text\""]).prop_map(String::from),
    ];
    (
        config,
        prop::sample::select(vec!["learner", "learner", "collector", "evaluator"]),
        0u32..4,
        prop::bool::weighted(0.8),
    )
        .prop_map(|(config, task_type, task_rank, di_container)| {
            let (mut ctx, _) = sample::pod(task_type);
            ctx.config = config;
            ctx.task_rank = task_rank;
            ctx.rank = task_rank;
            (ctx, di_container)
        })
}

#[test]
fn the_env_mutator_gives_the_same_pods_in_rust_python_and_js() {
    if skipped("the_env_mutator_gives_the_same_pods_in_rust_python_and_js") {
        return;
    }
    let langs = langs();
    let mutators: Vec<WasmMutator> = langs.iter().map(|l| mutator(l, "accel_env")).collect();
    let (mut changed, mut refused) = (0, 0);
    for (i, (ctx, di_container)) in cases(arb_mutation(), 3).into_iter().enumerate() {
        let (_, mut pod) = sample::pod(&ctx.task_type);
        let spec = pod.spec.as_mut().unwrap();
        if !di_container {
            // No container named di-container: the env goes into every container.
            spec.containers[0].name = "main".into();
        }
        spec.containers.push(k8s_openapi::api::core::v1::Container {
            name: "sidecar".into(),
            ..Default::default()
        });
        let answers: Vec<String> = mutators
            .iter()
            .map(|m| match m.mutate_blocking(&ctx, &pod) {
                Ok(out) => format!("ok {}", serde_json::to_string(&out).unwrap()),
                // A JSON parser's own words differ between languages; what the plugin says
                // around them must not.
                Err(PluginError::Refused { error, .. }) => {
                    let text = format!("{error:?}");
                    match text.find("config is not JSON: ") {
                        Some(at) => format!("refused {}", &text[..at + 20]),
                        None => format!("refused {text}"),
                    }
                }
                Err(e) => format!("failed {e}"),
            })
            .collect();
        for (lang, answer) in langs.iter().zip(&answers).skip(1) {
            assert_eq!(
                answer, &answers[0],
                "accel-env case {i}: {lang} differs from rust\nconfig {:?} task {} rank {} \
                 di-container {di_container}",
                ctx.config, ctx.task_type, ctx.task_rank
            );
        }
        match answers[0].split_once(' ') {
            Some(("ok", pod_json)) if pod_json.contains("NCCL_") => changed += 1,
            Some(("refused", _)) => refused += 1,
            _ => {}
        }
    }
    println!("accel-env: {changed} pods changed, {refused} refusals, alike in {langs:?}");
    assert!(
        changed > 5 && refused > 5,
        "{changed} changed, {refused} refused"
    );
}

// --- bounds -------------------------------------------------------------------------------------

fn hostile_job(mode: &str) -> Job {
    sample::job(&format!("default/{mode}"), 2)
}

/// Each hostile policy mode, in Python and in JS, ends by the bound the Rust guest's does, and a
/// good call of the same component succeeds right after it.
#[test]
fn hostile_policies_in_python_and_js_are_contained_like_rust_ones() {
    if skipped("hostile_policies_in_python_and_js_are_contained_like_rust_ones") {
        return;
    }
    let deadline = Duration::from_secs(2);
    let nodes = sample::nodes(20);
    let expected: &[(&str, &[&str])] = &[
        ("loop", &["Timeout"]),
        // Python's time.sleep and a JS wait reach a stubbed WASI clock (a trap) or spin until
        // the deadline; either way the call ends by a bound, never after 30 s.
        ("sleep", &["Trap", "Timeout"]),
        // The memory cap stops the growth: a trap, or the language's own out-of-memory error
        // reaching the host as `internal`.
        ("oom", &["MemoryCap", "Trap", "Refused"]),
        ("trap", &["Trap"]),
        // Unbounded recursion: the Wasm stack (a trap) or, where the interpreter keeps its
        // frames on the heap (CPython), the memory cap.
        ("recurse", &["Trap", "MemoryCap"]),
        ("garbage", &["MalformedOutput"]),
        ("wrong-count", &["MalformedOutput"]),
        ("huge-no-fit", &["Refused"]),
    ];
    for lang in langs().into_iter().skip(1) {
        let path = component(lang, "hostile_policy");
        let p = host()
            .load_policy_blocking(
                &format!("{lang}-hostile"),
                &bytes(&path),
                Some(Limits {
                    deadline,
                    ..Limits::default()
                }),
            )
            .unwrap();
        for &(mode, reasons) in expected {
            let started = Instant::now();
            let out = p.allocate_blocking(&hostile_job(mode), &nodes);
            let took = started.elapsed();
            let reason = out.as_ref().err().map_or("ok", |e| e.reason());
            println!("{lang} hostile {mode:12} -> {reason:15} in {took:?}");
            assert!(reasons.contains(&reason), "{lang} {mode}: {out:?}");
            if let Err(PluginError::Refused { error, .. }) = &out {
                // Refusal texts are capped by the host, whatever the guest sent.
                assert!(
                    error.to_string().len() <= diorch::plugin::ERROR_TEXT_CAP + 64,
                    "{lang} {mode}: {} bytes",
                    error.to_string().len()
                );
            }
            // Only the busy loop may run to the deadline; generous room for a loaded machine.
            assert!(
                took < deadline + Duration::from_secs(5),
                "{lang} {mode} took {took:?}"
            );
            let good = p.allocate_blocking(&hostile_job("fine"), &nodes);
            assert_eq!(
                good.map(|a| a.nodes.len()).ok(),
                Some(7),
                "{lang}: after {mode}"
            );
        }
        // Reasons (contract 0.4.0): whatever a guest sends comes out bounded and without
        // control characters, or, past the host's copy cap, the call ends as a huge answer's does.
        for mode in ["huge-reason", "control-reason"] {
            let out = p.allocate_blocking(&hostile_job(mode), &nodes);
            println!(
                "{lang} hostile {mode:12} -> {:?}",
                out.as_ref().map(|a| &a.reason)
            );
            match &out {
                Ok(answer) => {
                    assert_eq!(answer.nodes.len(), 7, "{lang} {mode}");
                    let reason = answer.reason.as_deref().unwrap_or_default();
                    assert!(!reason.is_empty(), "{lang} {mode}: the reason is kept");
                    assert!(
                        reason.len() <= diorch_core::reason::MAX_REASON_BYTES,
                        "{lang} {mode}: {} bytes",
                        reason.len()
                    );
                    assert!(
                        !reason.chars().any(|c| c.is_control() || c == '\u{202e}'),
                        "{lang} {mode}: {reason:?}"
                    );
                }
                Err(e) => assert!(
                    mode == "huge-reason"
                        && e.to_string().contains("too much data is being copied"),
                    "{lang} {mode}: {e}"
                ),
            }
        }
    }
}

fn mutator_spec(name: &str, config: &str, grants: &str) -> PluginSpec {
    let mut spec = PluginSpec::new(name, PluginKind::Mutator);
    spec.config = config.into();
    spec.grants = Grants::parse(grants).unwrap();
    spec.failure_policy = FailurePolicy::Fail;
    spec
}

/// Hostile mutators in Python and JS: invariant edits, capabilities without a grant, loops,
/// refusals and garbage are each caught as for Rust guests; granted, a capability loads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_mutators_in_python_and_js_are_caught_like_rust_ones() {
    if skipped("hostile_mutators_in_python_and_js_are_caught_like_rust_ones") {
        return;
    }
    let cases: &[(&str, &str, &str)] = &[
        ("rename", "MalformedOutput", "metadata.name"),
        ("namespace", "MalformedOutput", "metadata.namespace"),
        ("label", "MalformedOutput", "diengine/job"),
        ("drop-rank", "MalformedOutput", "DI_RANK"),
        ("loop", "Timeout", "deadline"),
        ("error", "Refused", "refuses on purpose"),
        ("garbage", "MalformedOutput", ""),
    ];
    for lang in langs().into_iter().skip(1) {
        let bytes: Arc<[u8]> = bytes(&component(lang, "hostile_mutator")).into();
        let m = host()
            .load_mutator_blocking(
                &format!("{lang}-hostile-mutator"),
                &bytes,
                Some(Limits {
                    deadline: Duration::from_secs(2),
                    ..Limits::default()
                }),
            )
            .unwrap();
        for &(config, reason, needle) in cases {
            let (mut ctx, pod) = sample::pod("learner");
            ctx.config = config.into();
            let err = m.mutate_blocking(&ctx, &pod).unwrap_err();
            assert_eq!(err.reason(), reason, "{lang} {config}: {err}");
            assert!(err.to_string().contains(needle), "{lang} {config}: {err}");
        }
        let (ctx, pod) = sample::pod("learner");
        let out = m.mutate_blocking(&ctx, &pod).unwrap();
        assert_eq!(
            out.metadata.labels.unwrap()["hostile.test/seen"],
            "yes",
            "{lang}"
        );

        // Capabilities go through the registry, as in the operator.
        let reg = PluginRegistry::new(host().clone(), NativePolicy::BinPack);
        for (mode, grant) in [
            ("privileged", "privileged"),
            ("host-path", "hostPath"),
            ("host-network", "hostNetwork"),
        ] {
            let err = reg
                .apply(mutator_spec(mode, mode, ""), bytes.clone())
                .await
                .unwrap_err();
            assert_eq!(err.reason(), "NotGranted", "{lang} {mode}: {err}");
            assert!(
                err.to_string()
                    .contains(&format!("needs the grant {grant}")),
                "{lang} {mode}: {err}"
            );
            reg.apply(mutator_spec(mode, mode, grant), bytes.clone())
                .await
                .unwrap_or_else(|e| panic!("{lang} {mode} granted {grant}: {e}"));
            assert!(reg.remove(mode).await);
        }
    }
}

// --- plugin new ---------------------------------------------------------------------------------

/// `diorch plugin new` in every language and world writes a project whose one command
/// (`build.sh`) passes the project's own tests and builds a component that `plugin check`
/// accepts. The toolchains are the ones scripts/build-lang-plugins.sh installed (no download);
/// the Rust projects share the plugin workspace's target folder.
#[test]
fn new_projects_test_themselves_and_build_in_every_language() {
    if skipped("new_projects_test_themselves_and_build_in_every_language") {
        return;
    }
    let diorch = env!("CARGO_BIN_EXE_diorch");
    let tmp = tempfile::tempdir().unwrap();
    for lang in ["rust", "python", "js"] {
        for world in ["policy", "mutator"] {
            let name = format!("new-{lang}-{world}");
            let dir = tmp.path().join(&name);
            let status = std::process::Command::new(diorch)
                .args([
                    "plugin", "new", "--lang", lang, "--world", world, &name, "--dir",
                ])
                .arg(&dir)
                .status()
                .unwrap();
            assert!(status.success(), "plugin new {lang} {world}");
            let started = Instant::now();
            let out = std::process::Command::new("bash")
                .arg(dir.join("build.sh"))
                .env("PYTHON", root().join("target/lang/py/bin/python"))
                .env("DIORCH_JS_TOOLS", root().join("target/lang/js"))
                .env(
                    "CARGO_TARGET_DIR",
                    // Where scripts/build-plugins.sh builds the plugin workspace.
                    std::env::var_os("CARGO_TARGET_DIR")
                        .map_or_else(|| root().join("plugins/target"), PathBuf::from),
                )
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{lang} {world}: build.sh failed\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let wasm = dir.join(format!("{name}.wasm"));
            println!(
                "{lang} {world}: tests and build in {:?}, {} KiB",
                started.elapsed(),
                std::fs::metadata(&wasm).unwrap().len() >> 10
            );
            let check = std::process::Command::new(diorch)
                .args(["plugin", "check", "--deadline-ms", "5000"])
                .arg(&wasm)
                .output()
                .unwrap();
            let report = String::from_utf8_lossy(&check.stdout);
            assert!(
                check.status.success(),
                "{lang} {world}: {report}\n{}",
                String::from_utf8_lossy(&check.stderr)
            );
            let expected = if world == "policy" {
                "scheduling-policy@0.5.0"
            } else {
                "pod-mutator@0.5.0"
            };
            assert!(report.contains(expected), "{lang} {world}: {report}");
            // Contract 0.5.0: a Python or JS policy does not preempt (a known gap).
            if world == "policy" {
                assert!(
                    report.contains("-> no preemption (the job waits)"),
                    "{lang} {world}: {report}"
                );
            }
        }
    }
}

// --- the simulator ------------------------------------------------------------------------------

/// `diorch simulate` runs the Python and JS bin-pack through the operator's decision step and
/// gives the same jobs.csv as the Rust one on the shipped trace (rows differ only in the
/// policy's name).
#[test]
fn the_simulator_gives_the_same_jobs_with_the_python_and_js_policies() {
    if skipped("the_simulator_gives_the_same_jobs_with_the_python_and_js_policies") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let langs = langs();
    let files: Vec<PathBuf> = langs.iter().map(|l| component(l, "binpack")).collect();
    let mut args: Vec<std::ffi::OsString> = vec!["simulate".into(), "--cluster".into()];
    args.push(root().join("examples/simulator/cluster.yaml").into());
    args.push("--trace".into());
    args.push(root().join("examples/simulator/steady.yaml").into());
    args.push("--out".into());
    args.push(out.clone().into());
    for f in &files {
        args.push("--policy".into());
        args.push(f.into());
    }
    // Results, not call times, are compared: a roomy deadline for a loaded machine.
    args.extend(["--deadline-ms".into(), "5000".into()]);
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_diorch"))
        .args(&args)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let jobs = std::fs::read_to_string(out.join("jobs.csv")).unwrap();
    let mut rows: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for line in jobs.lines().skip(1) {
        let (policy, rest) = line.split_once(',').unwrap();
        rows.entry(policy.to_string())
            .or_default()
            .push(rest.to_string());
    }
    let rust = &rows["binpack.wasm"];
    assert_eq!(rust.len(), 300);
    for f in files.iter().skip(1) {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        assert_eq!(&rows[&name], rust, "{name} differs from binpack.wasm");
    }
}

/// How each language's components travel, as `plugin check` and `plugin configmap` say: Rust
/// ones inline as they are, JS (QuickJS) ones inline compressed, Python ones through a registry.
#[test]
fn check_says_how_each_language_travels() {
    if skipped("check_says_how_each_language_travels") {
        return;
    }
    for (lang, expected) in [
        ("rust", "fits a ConfigMap as it is"),
        ("js", "fits a ConfigMap compressed"),
        ("python", "plugin configmap --image"),
    ] {
        for name in ["binpack", "spread", "accel_env"] {
            let advice = diorch::cli::plugin::inline_advice(&bytes(&component(lang, name)));
            println!("{lang} {name}: {advice}");
            assert!(advice.contains(expected), "{lang} {name}: {advice}");
        }
    }
}
