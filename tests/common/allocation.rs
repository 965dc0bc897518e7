//! Allocation and plugin scenarios against the real `diorch run` binary: policy plugins
//! uploaded as ConfigMaps place preemptible jobs, hot swaps reach the next job, a bad upload
//! keeps the last good version, mutators change pods, and a job that does not fit waits with a
//! clear condition until capacity frees. Written against a `Kubectl` so the sandbox tests and
//! the real-cluster e2e suite share them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::Kubectl;
use super::controller::{self as scenario, T};

/// The sandbox the allocation scenarios need (4 nodes of 8 GPUs, pods start after 100 ms), with
/// the DIJob CRD installed.
pub fn gpu_sandbox() -> super::SandboxProcess {
    gpu_sandbox_with(&[])
}

/// [`gpu_sandbox`] with extra `diorch-sandbox serve` flags.
pub fn gpu_sandbox_with(extra: &[&str]) -> super::SandboxProcess {
    let mut args = vec![
        "--nodes",
        "4",
        "--node-gpus",
        "8",
        "--pod-start-delay",
        "100ms",
    ];
    args.extend_from_slice(extra);
    let sandbox = super::SandboxProcess::start(&args);
    super::foundation::install_crd(&sandbox.kubectl());
    sandbox
}

/// A built example plugin (`scripts/build-plugins.sh` puts them in target/plugins).
pub fn plugin_file(name: &str) -> String {
    let path = super::repo_root()
        .join("target/plugins")
        .join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: run scripts/build-plugins.sh first",
        path.display()
    );
    path.display().to_string()
}

/// Uploads `file` as plugin `name` with `diorch plugin configmap ... | kubectl apply -f -`.
pub fn upload(k: &Kubectl, file: &str, name: &str, kind: &str, extra: &[&str]) {
    upload_by("apply", k, file, name, kind, extra);
}

/// [`upload`] with `kubectl <verb>`: `create` for the larger test plugins, whose copy in
/// `apply`'s last-applied annotation would pass its 256 KiB limit.
pub fn upload_by(verb: &str, k: &Kubectl, file: &str, name: &str, kind: &str, extra: &[&str]) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_diorch"))
        .args(["plugin", "configmap", file, "--name", name, "--kind", kind])
        .args(extra)
        .output()
        .expect("diorch plugin configmap");
    assert!(out.status.success(), "{out:?}");
    k.ok_stdin(&[verb, "-f", "-"], &String::from_utf8_lossy(&out.stdout));
}

/// The Events recorded on `kind/name`, oldest first, as (type, reason, note).
pub fn events_of(k: &Kubectl, kind: &str, name: &str) -> Vec<(String, String, String)> {
    let out = k.ok(&[
        "get",
        "events.v1.events.k8s.io",
        "--field-selector",
        &format!("regarding.kind={kind},regarding.name={name}"),
        "-o",
        "json",
    ]);
    let list: Value = serde_json::from_str(&out).expect("event list");
    let mut events: Vec<(String, String, String, String)> = list["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|e| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (
                s(&e["eventTime"]),
                s(&e["type"]),
                s(&e["reason"]),
                s(&e["note"]),
            )
        })
        .collect();
    events.sort();
    events.into_iter().map(|(_, t, r, n)| (t, r, n)).collect()
}

/// Waits until `kind/name` has `count` Events with `reason`; returns the newest one's note.
pub fn wait_event(k: &Kubectl, kind: &str, name: &str, reason: &str, count: usize) -> String {
    let deadline = Instant::now() + T;
    loop {
        let events = events_of(k, kind, name);
        let matching: Vec<&(String, String, String)> =
            events.iter().filter(|e| e.1 == reason).collect();
        if matching.len() >= count {
            return matching.last().map(|e| e.2.clone()).unwrap_or_default();
        }
        assert!(
            Instant::now() < deadline,
            "no {count} {reason} Events on {kind}/{name}: {events:#?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A preemptible job of `replicas` learners asking `gpus` GPUs and 1 CPU each, placed by
/// policy `policy` (annotation; empty for the operator's default).
pub fn gpu_job(name: &str, policy: &str, replicas: i32, gpus: i32) -> String {
    let annotations = if policy.is_empty() {
        String::new()
    } else {
        format!("  annotations:\n    diorch.io/policy: {policy}\n")
    };
    format!(
        "apiVersion: diengine.opendilab.org/v2alpha1\nkind: DIJob\nmetadata:\n  name: {name}\n{annotations}spec:\n  preemptible: true\n  tasks:\n  - type: learner\n    name: learner\n    replicas: {replicas}\n    template:\n      spec:\n        containers:\n        - name: di-container\n          image: busybox\n          command: [\"sh\", \"-c\", \"sleep 3600\"]\n          resources:\n            requests: {{cpu: \"1\", nvidia.com/gpu: \"{gpus}\"}}\n            limits: {{nvidia.com/gpu: \"{gpus}\"}}\n"
    )
}

/// The job's `Allocated` condition as (status, reason, message), once it has one.
pub fn allocated(k: &Kubectl, job: &str) -> Option<(String, String, String)> {
    let out = k.run(&["get", &format!("dijob/{job}"), "-o", "json"]);
    if !out.status.success() {
        return None;
    }
    let job: Value = serde_json::from_slice(&out.stdout).ok()?;
    let c = job["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Allocated")?
        .clone();
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    Some((s(&c["status"]), s(&c["reason"]), s(&c["message"])))
}

pub fn wait_allocated(k: &Kubectl, job: &str, status: &str) -> (String, String, String) {
    let deadline = Instant::now() + T;
    loop {
        if let Some(c) = allocated(k, job).filter(|c| c.0 == status) {
            return c;
        }
        assert!(
            Instant::now() < deadline,
            "{job} has no Allocated={status} condition: {:?}",
            allocated(k, job)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Checks every pod runs on the node its job's allocation names, and returns pod → node.
pub fn placement(k: &Kubectl, job: &str) -> BTreeMap<String, String> {
    let pods = scenario::pods(k, job);
    let out = k.ok(&["get", &format!("dijob/{job}"), "-o", "json"]);
    let dijob: Value = serde_json::from_str(&out).expect("job");
    let allocation: Vec<String> = dijob["status"]["allocation"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|n| n.as_str().unwrap_or_default().to_string())
        .collect();
    pods.iter()
        .map(|(name, pod)| {
            let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
            let rank = scenario::rank(pod) as usize;
            assert_eq!(
                allocation.get(rank).map(String::as_str),
                Some(node),
                "{name} (rank {rank}) runs on {node:?}, allocation {allocation:?}"
            );
            assert_eq!(
                pod["metadata"]["annotations"]["diengine/node"].as_str(),
                Some(node)
            );
            (name.clone(), node.to_string())
        })
        .collect()
}

/// How many nodes a placement uses.
pub fn distinct(placement: &BTreeMap<String, String>) -> usize {
    placement.values().collect::<BTreeSet<_>>().len()
}

/// Upload the spread policy as `team`, place a job with it (one replica per node); replace
/// the ConfigMap with bin-pack, the next job after its PluginLoaded Event is packed on one node
/// by the new version;
/// upload garbage, a Warning Event names the cause and bin-pack keeps placing jobs.
/// Needs 4 ready nodes with at least 4 free GPUs each; plugins live in `plugin_ns`.
pub fn policy_plugins_place_jobs_and_hot_swap(k: &Kubectl, ns: &str, plugin_ns: &str) {
    let k = k.in_namespace(ns);
    let p = k.in_namespace(plugin_ns);
    upload(&p, &plugin_file("spread"), "team", "policy", &[]);
    wait_event(&p, "ConfigMap", "plugin-team", "PluginLoaded", 1);
    scenario::apply(&k, &gpu_job("spread", "team", 4, 1));
    let (_, reason, message) = wait_allocated(&k, "spread", "True");
    assert_eq!(reason, "Allocated");
    assert!(message.starts_with("placed by team@"), "{message}");
    scenario::wait_phase(&k, "spread", "Running");
    let spread = placement(&k, "spread");
    assert_eq!(spread.len(), 4);
    assert_eq!(
        distinct(&spread),
        4,
        "spread: one replica per node {spread:?}"
    );

    // Hot swap: the same plugin name now serves bin-pack.
    let swapped = Instant::now();
    upload(&p, &plugin_file("binpack"), "team", "policy", &[]);
    wait_event(&p, "ConfigMap", "plugin-team", "PluginLoaded", 2);
    scenario::apply(&k, &gpu_job("packed", "team", 4, 1));
    let (_, _, packed_by) = wait_allocated(&k, "packed", "True");
    // The swap is proven by what placed the next job (the new version, by its sha256), not by
    // a wall-clock bound a loaded machine can miss; the time is printed for the record (the
    // hot_swap bench measures it).
    println!("hot swap reached a job in {:?}", swapped.elapsed());
    assert!(packed_by.starts_with("placed by team@"), "{packed_by}");
    assert_ne!(
        packed_by.split_whitespace().nth(2),
        message.split_whitespace().nth(2),
        "the job after the swap was placed by the old version: {packed_by} / {message}"
    );
    scenario::wait_phase(&k, "packed", "Running");
    let packed = placement(&k, "packed");
    assert_eq!(distinct(&packed), 1, "bin-pack: one node {packed:?}");

    // Garbage: refused, the Warning names the cause, bin-pack keeps serving.
    let cm = p.ok(&["get", "configmap", "plugin-team", "-o", "json"]);
    let mut cm: Value = serde_json::from_str(&cm).expect("configmap");
    let key = cm["binaryData"]
        .as_object()
        .and_then(|m| m.keys().next().cloned())
        .expect("binaryData key");
    cm["binaryData"][&key] = Value::String("bm90IGEgd2FzbSBjb21wb25lbnQ=".into()); // "not a wasm component"
    cm["metadata"]
        .as_object_mut()
        .expect("metadata")
        .retain(|k, _| k == "name" || k == "namespace" || k == "labels" || k == "annotations");
    p.ok_stdin(&["apply", "-f", "-"], &cm.to_string());
    let note = wait_event(&p, "ConfigMap", "plugin-team", "CompileError", 1);
    assert!(note.contains("not a valid component"), "{note}");
    assert!(note.contains("last good version"), "{note}");
    scenario::apply(&k, &gpu_job("after-garbage", "team", 2, 1));
    let (_, _, message) = wait_allocated(&k, "after-garbage", "True");
    assert!(message.starts_with("placed by team@"), "{message}");
    scenario::wait_phase(&k, "after-garbage", "Running");
    assert_eq!(distinct(&placement(&k, "after-garbage")), 1);
    p.ok(&["delete", "configmap", "plugin-team"]);
}

/// A policy rollout as a platform team runs it (docs/policy-rollout.md): bin-pack loaded as a
/// shadow of `team` (spread) is given every input `team` answers and never applied; the
/// operator's report at `metrics` (`GET /v1/policies/team/shadow`, via `diorch plugin shadow`)
/// shows where it would have placed the job; promotion (one label edit) makes the next job
/// bin-packed; rollback (removing the label) makes the next one spread again.
pub fn shadow_policy_compared_promoted_and_rolled_back(
    k: &Kubectl,
    ns: &str,
    plugin_ns: &str,
    metrics: &str,
) {
    let k = k.in_namespace(ns);
    let p = k.in_namespace(plugin_ns);
    upload(&p, &plugin_file("spread"), "team", "policy", &[]);
    wait_event(&p, "ConfigMap", "plugin-team", "PluginLoaded", 1);
    upload(
        &p,
        &plugin_file("binpack"),
        "team-next",
        "policy",
        &["--shadow-of", "team"],
    );
    wait_event(&p, "ConfigMap", "plugin-team-next", "PluginLoaded", 1);

    // The shadow is given the job's input; the active policy places it.
    scenario::apply(&k, &gpu_job("first", "team", 4, 1));
    let (_, _, message) = wait_allocated(&k, "first", "True");
    assert!(message.starts_with("placed by team@"), "{message}");
    scenario::wait_phase(&k, "first", "Running");
    assert_eq!(distinct(&placement(&k, "first")), 4, "spread placed it");
    let url = format!("http://{metrics}");
    let shadow = |json: bool| {
        let mut args = vec!["plugin", "shadow", "team", "--url", url.as_str()];
        if json {
            args.push("--json");
        }
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_diorch"))
            .args(&args)
            .output()
            .expect("diorch plugin shadow");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let job = format!("{ns}/first");
    let deadline = Instant::now() + T;
    let report: Value = loop {
        let report: Value = serde_json::from_str(&shadow(true)).expect("report JSON");
        if report["shadows"]["team-next"]["different"].as_u64() >= Some(1) {
            break report;
        }
        assert!(
            Instant::now() < deadline,
            "no divergent shadow decision: {report:#}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let divergence = report["divergences"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["jobs"][0]["job"] == job.as_str()))
        .unwrap_or_else(|| panic!("no divergence for {job}: {report:#}"));
    assert_eq!(divergence["call"], "allocate");
    let shadow_nodes: BTreeSet<&str> = divergence["jobs"][0]["shadow"]["placed"]["nodes"]
        .as_array()
        .map(|n| n.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert_eq!(
        shadow_nodes.len(),
        1,
        "bin-pack would use one node: {divergence:#}"
    );
    let table = shadow(false);
    assert!(
        table.contains("team-next") && table.contains(&job),
        "{table}"
    );

    // Promotion: one label edit; the next job gets bin-pack.
    p.ok(&[
        "label",
        "configmap",
        "plugin-team-next",
        "diorch.io/shadow-of-",
        "diorch.io/replaces=team",
    ]);
    wait_event(&p, "ConfigMap", "plugin-team-next", "PluginLoaded", 2);
    scenario::apply(&k, &gpu_job("promoted", "team", 4, 1));
    let (_, _, message) = wait_allocated(&k, "promoted", "True");
    assert!(message.starts_with("placed by team-next@"), "{message}");
    // The policy's reason (contract 0.4.0) is in the condition, and `diorch explain` (kubectl
    // dijob explain) names the policy, its component and the reason.
    assert!(
        message.contains("; why: bin-pack, fullest fitting node first: "),
        "{message}"
    );
    scenario::wait_phase(&k, "promoted", "Running");
    assert_eq!(
        distinct(&placement(&k, "promoted")),
        1,
        "bin-pack placed it"
    );
    let explained = explain(&k, ns, "promoted");
    let binpack_sha = sha256_hex(&std::fs::read(plugin_file("binpack")).expect("binpack.wasm"));
    assert!(
        explained.contains("Placed  by team-next@")
            && explained.contains(&format!("component sha256 {binpack_sha}"))
            && explained.contains("    why: bin-pack, fullest fitting node first: ")
            && explained.contains("    the policy's answer applied as given"),
        "{explained}"
    );
    let decisions: Value = serde_json::from_str(&k.ok(&[
        "get",
        "dijob",
        "promoted",
        "-o",
        "jsonpath={.status.decisions}",
    ]))
    .expect("status.decisions survives the API server's schema");
    assert_eq!(decisions[0]["action"], "Placed", "{decisions:#}");
    assert_eq!(
        decisions[0]["sha256"],
        binpack_sha.as_str(),
        "{decisions:#}"
    );

    // Rollback: the label goes; `team` answers again.
    p.ok(&[
        "label",
        "configmap",
        "plugin-team-next",
        "diorch.io/replaces-",
    ]);
    wait_event(&p, "ConfigMap", "plugin-team-next", "PluginLoaded", 3);
    scenario::apply(&k, &gpu_job("rolled-back", "team", 4, 1));
    let (_, _, message) = wait_allocated(&k, "rolled-back", "True");
    assert!(message.starts_with("placed by team@"), "{message}");
    assert!(message.contains("; why: spread: 4 nodes in "), "{message}");
    scenario::wait_phase(&k, "rolled-back", "Running");
    assert_eq!(
        distinct(&placement(&k, "rolled-back")),
        4,
        "spread placed it"
    );
    p.ok(&["delete", "configmap", "plugin-team", "plugin-team-next"]);
}

/// `diorch explain JOB -n NS` against the cluster `k` talks to.
pub fn explain(k: &Kubectl, ns: &str, job: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_diorch"))
        .args(["explain", job, "-n", ns, "--kubeconfig"])
        .arg(k.kubeconfig())
        .output()
        .expect("diorch explain");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Hex sha256 of `bytes`, as the operator names a component.
fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Recorded decisions replayed (`diorch run --record-decisions DIR`, then
/// `diorch simulate replay DIR --policy P`): the policy that made every recorded decision agrees
/// with all of them (the fidelity test), its admissions and its re-plans (the operator runs with
/// `--optimize-period 1s`); another policy differs where it would place otherwise. `dir` is the
/// operator's recording directory.
pub fn recorded_decisions_replay_in_full_agreement(
    k: &Kubectl,
    ns: &str,
    plugin_ns: &str,
    dir: &std::path::Path,
) {
    let k = k.in_namespace(ns);
    let p = k.in_namespace(plugin_ns);
    upload(&p, &plugin_file("binpack"), "recorded", "policy", &[]);
    wait_event(&p, "ConfigMap", "plugin-recorded", "PluginLoaded", 1);
    let jobs = ["rec-a", "rec-b", "rec-c"];
    for job in jobs {
        scenario::apply(&k, &gpu_job(job, "recorded", 2, 1));
    }
    for job in jobs {
        let (_, _, message) = wait_allocated(&k, job, "True");
        assert!(message.starts_with("placed by recorded@"), "{message}");
    }
    // The recorder writes on a task of its own: wait until the three admissions and a re-plan
    // of the placed jobs are on disk.
    let recorded = |call: &str| -> usize {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                    .map(|text| {
                        text.lines()
                            .filter(|l| {
                                l.contains(&format!(r#""call":"{call}""#))
                                    && l.contains("recorded@")
                            })
                            .count()
                    })
                    .sum()
            })
            .unwrap_or(0)
    };
    let deadline = Instant::now() + T;
    loop {
        let (admissions, replans) = (recorded("allocate"), recorded("optimize"));
        if admissions >= jobs.len() && replans >= 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{admissions} admissions and {replans} re-plans recorded in {}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let replay = |policy: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_diorch"))
            .args(["simulate", "replay"])
            .arg(dir)
            .args(["--policy", policy])
            .output()
            .expect("diorch simulate replay");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let same = replay(&plugin_file("binpack"));
    let totals = same.lines().last().unwrap_or_default().to_string();
    let agree = totals
        .split("agrees on ")
        .nth(1)
        .and_then(|rest| rest.split(" decisions").next())
        .unwrap_or_default()
        .to_string();
    let (agreed, of) = agree.split_once(" of ").unwrap_or_default();
    assert!(
        !of.is_empty() && agreed == of && of.parse::<usize>().unwrap_or(0) >= jobs.len(),
        "the recording policy must agree on every decision: {same}"
    );
    assert!(totals.contains("(100.0 %)"), "{same}");
    let other = replay(&plugin_file("spread"));
    assert!(
        other.contains("differs"),
        "spread would place the 2-replica jobs apart: {other}"
    );
    for job in jobs {
        k.ok(&["delete", "dijob", job, "--wait=false"]);
    }
    p.ok(&["delete", "configmap", "plugin-recorded"]);
}

/// A mutator uploaded for learners changes learner pods only, in the order configured.
pub fn mutator_changes_pods(k: &Kubectl, ns: &str, plugin_ns: &str) {
    let k = k.in_namespace(ns);
    let p = k.in_namespace(plugin_ns);
    upload(
        &p,
        &plugin_file("accel_env"),
        "nccl",
        "mutator",
        &[
            "--task-types",
            "learner",
            "--config",
            r#"{"interface": "ib0", "env": {"TEAM": "rl"}}"#,
        ],
    );
    wait_event(&p, "ConfigMap", "plugin-nccl", "PluginLoaded", 1);
    scenario::apply(&k, &scenario::standard_job("mutated", ""));
    scenario::wait_phase(&k, "mutated", "Running");
    let pods = scenario::pods(&k, "mutated");
    let env_of = |pod: &str| container_env(&pods[pod]);
    let learner = env_of("mutated-learner-0");
    assert_eq!(
        learner.get("NCCL_SOCKET_IFNAME").map(String::as_str),
        Some("ib0")
    );
    assert_eq!(learner.get("TEAM").map(String::as_str), Some("rl"));
    assert_eq!(
        learner.get("DI_RANK").map(String::as_str),
        Some("0"),
        "operator env kept"
    );
    let collector = env_of("mutated-collector-0");
    assert!(
        !collector.contains_key("NCCL_SOCKET_IFNAME"),
        "{collector:?}"
    );
    p.ok(&["delete", "configmap", "plugin-nccl"]);
}

/// The env of a pod's first container, by name (plain values).
pub fn container_env(pod: &Value) -> BTreeMap<String, String> {
    pod["spec"]["containers"][0]["env"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap_or_default().to_string(),
                e["value"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// On 4 nodes of 8 GPUs: a job holding 3 whole nodes leaves room for one; a job asking two
/// whole nodes waits in Pending (no pods) with a condition and an Event saying why, and starts
/// once the first job is deleted.
pub fn oversized_job_waits_for_capacity(k: &Kubectl, ns: &str) {
    let k = k.in_namespace(ns);
    scenario::apply(&k, &gpu_job("holder", "", 3, 8));
    scenario::wait_phase(&k, "holder", "Running");
    scenario::apply(&k, &gpu_job("waiter", "", 2, 8));
    let (_, reason, message) = wait_allocated(&k, "waiter", "False");
    assert_eq!(reason, "Unschedulable");
    assert!(
        message.starts_with("waiting for capacity: 2 replicas: 16 GPUs"),
        "{message}"
    );
    assert!(message.contains("free: 8 GPUs"), "{message}");
    let note = wait_event(&k, "DIJob", "waiter", "FailedAllocation", 1);
    assert_eq!(note, message);
    std::thread::sleep(Duration::from_secs(1));
    assert!(scenario::pods(&k, "waiter").is_empty(), "no partial start");
    assert_eq!(
        scenario::jsonpath(&k, "dijob/waiter", "{.status.phase}"),
        "Pending"
    );
    let freed = Instant::now();
    k.ok(&["delete", "dijob", "holder", "--wait=false"]);
    wait_allocated(&k, "waiter", "True");
    scenario::wait_phase(&k, "waiter", "Running");
    println!(
        "waiting job started {:?} after capacity freed",
        freed.elapsed()
    );
    assert_eq!(distinct(&placement(&k, "waiter")), 2);
}

/// A minimal scheduler-plugins PodGroup CRD, for clusters without that scheduler.
pub const POD_GROUP_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: podgroups.scheduling.x-k8s.io
spec:
  group: scheduling.x-k8s.io
  names: {kind: PodGroup, listKind: PodGroupList, plural: podgroups, singular: podgroup, shortNames: [pg]}
  scope: Namespaced
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              minMember: {type: integer, format: int32}
              scheduleTimeoutSeconds: {type: integer, format: int32}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

/// With `--gang-scheduler scheduler-plugins`: the job's PodGroup exists before its pods, with
/// minMember = replicas and the job as owner; pods carry the group label and schedulerName;
/// scaling updates minMember; deleting the job deletes the PodGroup.
pub fn gang_scheduled_job_gets_a_podgroup(k: &Kubectl, ns: &str, scheduler_name: &str) {
    let k = k.in_namespace(ns);
    scenario::apply(&k, &scenario::standard_job("gang", ""));
    scenario::wait_phase(&k, "gang", "Running");
    let group: Value =
        serde_json::from_str(&k.ok(&["get", "podgroup", "gang", "-o", "json"])).expect("podgroup");
    assert_eq!(group["spec"]["minMember"], 4);
    assert_eq!(group["metadata"]["ownerReferences"][0]["kind"], "DIJob");
    assert_eq!(group["metadata"]["ownerReferences"][0]["controller"], true);
    for pod in scenario::pods(&k, "gang").values() {
        assert_eq!(pod["spec"]["schedulerName"], scheduler_name);
        assert_eq!(
            pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"],
            "gang"
        );
    }
    k.ok(&[
        "patch",
        "dijob",
        "gang",
        "--type=json",
        "-p",
        r#"[{"op": "replace", "path": "/spec/tasks/2/replicas", "value": 4}]"#,
    ]);
    let deadline = Instant::now() + T;
    while scenario::jsonpath(&k, "podgroup/gang", "{.spec.minMember}") != "6" {
        assert!(Instant::now() < deadline, "minMember not updated");
        std::thread::sleep(Duration::from_millis(100));
    }
    k.ok(&["delete", "dijob", "gang"]);
    let deadline = Instant::now() + T;
    while k.run(&["get", "podgroup", "gang"]).status.success() {
        assert!(Instant::now() < deadline, "podgroup not garbage-collected");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A preemptible job with an elastic collector task (1..4), scaled through the replica API:
/// POST adds collectors (allocated, created, the job back to Running), DELETE removes the
/// highest ranks; going past maxReplicas is refused with the bounds.
pub fn replica_api_scales_a_preemptible_job(k: &Kubectl, ns: &str, api: &str) {
    replica_api_scales_a_preemptible_job_as(k, ns, api, None);
}

/// [`replica_api_scales_a_preemptible_job`] with every call carrying `token` as its bearer token
/// (for an operator run with `--server-auth kubernetes` or `job-pods`).
pub fn replica_api_scales_a_preemptible_job_as(
    k: &Kubectl,
    ns: &str,
    api: &str,
    token: Option<&str>,
) {
    let http =
        |method: &str, path: &str, body: &str| scenario::http_as(api, method, path, body, token);
    let k = k.in_namespace(ns);
    let manifest = "apiVersion: diengine.opendilab.org/v2alpha1\nkind: DIJob\nmetadata:\n  name: elastic\nspec:\n  preemptible: true\n  tasks:\n  - {type: learner, name: learner, replicas: 1, template: {spec: {containers: [{name: di-container, image: busybox, command: [sleep, \"3600\"], resources: {requests: {cpu: 100m}}}]}}}\n  - {type: collector, name: collector, replicas: 2, minReplicas: 1, maxReplicas: 4, template: {spec: {containers: [{name: di-container, image: busybox, command: [sleep, \"3600\"], resources: {requests: {cpu: 100m}}}]}}}\n";
    scenario::apply(&k, manifest);
    scenario::wait_phase(&k, "elastic", "Running");
    let path = format!("/v2alpha1/job/{ns}.elastic/replicas");
    let (status, body) = http("POST", &path, r#"{"replicas": 2}"#);
    assert_eq!(
        (status, body["message"].as_str()),
        (200, Some("successfully add replicas")),
        "{body}"
    );
    let names = |n: i32| -> Vec<String> {
        std::iter::once("elastic-learner-0".to_string())
            .chain((0..n).map(|i| format!("elastic-collector-{i}")))
            .collect()
    };
    scenario::wait_pods(&k, "elastic", &names(4));
    scenario::wait_phase(&k, "elastic", "Running");
    assert_eq!(
        scenario::jsonpath(&k, "dijob/elastic", "{.status.taskReplicas.collector}"),
        "4"
    );
    assert_eq!(
        scenario::jsonpath(&k, "dijob/elastic", "{.status.replicas}"),
        "5"
    );
    placement(&k, "elastic");
    let (status, body) = http("POST", &path, r#"{"replicas": 1}"#);
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("may run 1 to 4")),
        "{body}"
    );
    let (status, body) = http("DELETE", &path, r#"{"replicas": 3}"#);
    assert_eq!(
        (status, body["message"].as_str()),
        (200, Some("successfully delete replicas")),
        "{body}"
    );
    scenario::wait_pods(&k, "elastic", &names(1));
    scenario::wait_phase(&k, "elastic", "Running");
    // Two clients add one collector each at the same time: both count (optimistic concurrency).
    let calls: Vec<_> = (0..2)
        .map(|_| {
            let (api, path, token) = (api.to_string(), path.clone(), token.map(String::from));
            std::thread::spawn(move || {
                scenario::http_as(&api, "POST", &path, r#"{"replicas": 1}"#, token.as_deref())
            })
        })
        .collect();
    for call in calls {
        let (status, body) = call.join().expect("client");
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(
        scenario::jsonpath(&k, "dijob/elastic", "{.status.taskReplicas.collector}"),
        "3"
    );
    scenario::wait_pods(&k, "elastic", &names(3));
    scenario::wait_phase(&k, "elastic", "Running");
    // Scale in by name: exactly that pod goes, the others keep their names and ranks.
    let before = scenario::pods(&k, "elastic");
    let (status, body) = http("DELETE", &path, r#"{"pods": ["elastic-collector-1"]}"#);
    assert_eq!(status, 200, "{body}");
    let left: Vec<String> = [
        "elastic-learner-0",
        "elastic-collector-0",
        "elastic-collector-2",
    ]
    .map(String::from)
    .to_vec();
    let after = scenario::wait_pods(&k, "elastic", &left);
    for name in &left {
        assert_eq!(
            scenario::uid(&after[name]),
            scenario::uid(&before[name]),
            "{name} kept"
        );
        assert_eq!(
            scenario::rank(&after[name]),
            scenario::rank(&before[name]),
            "{name} rank"
        );
    }
    scenario::wait_phase(&k, "elastic", "Running");
    // A name that is not a replica: refused, nothing changes.
    let (status, body) = http("DELETE", &path, r#"{"pods": ["elastic-collector-1"]}"#);
    assert_eq!(status, 400, "{body}");
    // Growing again appends a new rank; the removed name is not reused.
    let (status, body) = http("POST", &path, r#"{"replicas": 1}"#);
    assert_eq!(status, 200, "{body}");
    let mut grown = left.clone();
    grown.push("elastic-collector-3".to_string());
    let now = scenario::wait_pods(&k, "elastic", &grown);
    scenario::wait_phase(&k, "elastic", "Running");
    // Re-placing the grown job kept the survivors where they were (same pods, not moved).
    for name in &left {
        assert_eq!(
            scenario::uid(&now[name]),
            scenario::uid(&after[name]),
            "{name} moved"
        );
    }
    placement(&k, "elastic");
}

/// With a policy whose every `optimize` moves each job one node along, run with a short
/// `--optimize-period` and a long `--min-reschedule-interval`: a placed job is moved once
/// (JobReallocated Event, Rescheduling counted, pods on the new nodes, Running again) and then
/// left alone while the policy keeps asking. The policy is uploaded as `flap` in `plugin_ns`.
pub fn flapping_policy_is_rate_limited(k: &Kubectl, ns: &str, plugin_ns: &str) {
    let k = k.in_namespace(ns);
    let p = k.in_namespace(plugin_ns);
    upload(&p, &plugin_file("flapping_policy"), "flap", "policy", &[]);
    wait_event(&p, "ConfigMap", "plugin-flap", "PluginLoaded", 1);
    scenario::apply(&k, &gpu_job("flappy", "flap", 2, 1));
    // Where it was first placed, from the JobAllocated Event (`placed by … on node×n, …`).
    let first = wait_event(&k, "DIJob", "flappy", "JobAllocated", 1);
    let before: BTreeSet<String> = first
        .rsplit(" on ")
        .next()
        .unwrap_or_default()
        .split(", ")
        .filter_map(|n| n.split('×').next())
        .map(String::from)
        .collect();
    let note = wait_event(&k, "DIJob", "flappy", "JobReallocated", 1);
    assert!(note.starts_with("re-planned by flap@"), "{note}");
    let deadline = Instant::now() + T;
    loop {
        let reschedules = scenario::jsonpath(&k, "dijob/flappy", "{.status.reschedules}");
        let phase = scenario::jsonpath(&k, "dijob/flappy", "{.status.phase}");
        if reschedules == "1" && phase == "Running" {
            let after = placement(&k, "flappy");
            let nodes: BTreeSet<String> = after.values().cloned().collect();
            if after.len() == 2 && nodes.is_disjoint(&before) {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "not moved once: {reschedules} {phase}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Several more optimize periods: the policy still wants to move it, the limit says no.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        scenario::jsonpath(&k, "dijob/flappy", "{.status.reschedules}"),
        "1"
    );
    assert_eq!(
        scenario::jsonpath(&k, "dijob/flappy", "{.status.phase}"),
        "Running"
    );
}

/// A preemptible job with an elastic collector task (min 1, max 4) and `replicas` collectors.
fn elastic_job(name: &str, replicas: i32) -> String {
    format!(
        "apiVersion: diengine.opendilab.org/v2alpha1\nkind: DIJob\nmetadata:\n  name: {name}\nspec:\n  preemptible: true\n  tasks:\n  - {{type: learner, name: learner, replicas: 1, template: {{spec: {{containers: [{{name: di-container, image: busybox, command: [sleep, \"3600\"], resources: {{requests: {{cpu: 500m, nvidia.com/gpu: 1}}, limits: {{nvidia.com/gpu: 1}}}}}}]}}}}}}\n  - {{type: collector, name: collector, replicas: {replicas}, minReplicas: 1, maxReplicas: 4, template: {{spec: {{containers: [{{name: di-container, image: busybox, command: [sleep, \"3600\"], resources: {{requests: {{cpu: 500m}}}}}}]}}}}}}\n"
    )
}

fn wait_collectors(k: &Kubectl, job: &str, want: &str) {
    let deadline = Instant::now() + T;
    loop {
        let count = scenario::jsonpath(
            k,
            &format!("dijob/{job}"),
            "{.status.taskReplicas.collector}",
        );
        let phase = scenario::jsonpath(k, &format!("dijob/{job}"), "{.status.phase}");
        let pods = scenario::pods(k, job).len();
        if count == want
            && phase == "Running"
            && pods.to_string() == (want.parse::<usize>().unwrap_or(0) + 1).to_string()
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{job}: collectors {count:?}, phase {phase}, {pods} pods; want {want} collectors"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The goodput policy (Wasm) as the default, re-planning every second: a job whose reported
/// throughput still rises with more collectors grows, one whose collectors gain nothing
/// shrinks; both move through Rescheduling (counted) back to Running, with JobResized Events.
pub fn goodput_grows_and_shrinks_collectors(k: &Kubectl, ns: &str, plugin_ns: &str, api: &str) {
    let k = k.in_namespace(ns);
    let p = k.in_namespace(plugin_ns);
    // `create`: at 0.5.0 (with preempt) the component's copy in `apply`'s last-applied
    // annotation passes that annotation's 256 KiB limit.
    upload_by(
        "create",
        &p,
        &plugin_file("goodput"),
        "goodput",
        "policy",
        &[],
    );
    wait_event(&p, "ConfigMap", "plugin-goodput", "PluginLoaded", 1);
    scenario::apply(&k, &elastic_job("grower", 2));
    scenario::apply(&k, &elastic_job("shrinker", 3));
    scenario::wait_phase(&k, "grower", "Running");
    scenario::wait_phase(&k, "shrinker", "Running");
    let report = |job: &str, data: &str| {
        let (status, body) = scenario::http(
            api,
            "POST",
            &format!("/v2alpha1/job/{ns}.{job}/profilings"),
            &format!(r#"{{"data": {data}}}"#),
        );
        assert_eq!(status, 200, "{body}");
    };
    // Every added collector pays off: probe one more (3).
    report(
        "grower",
        r#"{"collectors": {"1": {"throughput": 100}, "2": {"throughput": 200}}}"#,
    );
    // The second and third collectors add nothing: back to 1.
    report(
        "shrinker",
        r#"{"collectors": {"1": {"throughput": 100}, "2": {"throughput": 101}, "3": {"throughput": 101}}}"#,
    );
    wait_collectors(&k, "grower", "3");
    wait_collectors(&k, "shrinker", "1");
    for job in ["grower", "shrinker"] {
        let reschedules: i64 =
            scenario::jsonpath(&k, &format!("dijob/{job}"), "{.status.reschedules}")
                .parse()
                .unwrap_or(0);
        assert!(reschedules >= 1, "{job}: reschedules {reschedules}");
        let note = wait_event(&k, "DIJob", job, "JobResized", 1);
        assert!(
            note.starts_with("replicas per task are now learner×1, collector×"),
            "{note}"
        );
        placement(&k, job);
    }
    let mut names: Vec<String> = scenario::pods(&k, "shrinker").into_keys().collect();
    names.sort();
    assert_eq!(names, ["shrinker-collector-0", "shrinker-learner-0"]);
}
