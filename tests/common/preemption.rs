//! Preemption against the real `diorch run` binary (issue 38): a cluster full of low-priority
//! elastic jobs, an urgent job arrives and starts at once because collectors shrink (the
//! highest ranks go, survivors are the same pods), and the shrunk job grows back when it ends;
//! an urgent job that shrinking cannot serve evicts the job that loses least, which waits and
//! comes back with its counters. Shared by the sandbox tests and the real-cluster e2e suite.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::Kubectl;
use super::allocation::{wait_allocated, wait_event};
use super::controller::{self as scenario, T};

/// The operator flags this scenario needs: short minimum run time and cool-down, re-plans every
/// second (so growing back is quick).
pub const FLAGS: [&str; 6] = [
    "--preemption-min-run-time",
    "1s",
    "--preemption-cooldown",
    "1s",
    "--optimize-period",
    "1s",
];

/// A low-priority job filling one 8-GPU node: a learner and 7 collectors of 1 GPU each,
/// collectors elastic down to 1.
fn low(name: &str) -> String {
    let task = |task: &str, replicas: i32, min: i32| {
        format!(
            "  - {{type: {task}, name: {task}, replicas: {replicas}, minReplicas: {min}, maxReplicas: {replicas}, template: {{spec: {{containers: [{{name: di-container, image: busybox, command: [sleep, \"3600\"], resources: {{requests: {{cpu: 500m, nvidia.com/gpu: 1}}, limits: {{nvidia.com/gpu: 1}}}}}}]}}}}}}\n"
        )
    };
    format!(
        "apiVersion: diengine.opendilab.org/v2alpha1\nkind: DIJob\nmetadata:\n  name: {name}\nspec:\n  preemptible: true\n  tasks:\n{}{}",
        task("learner", 1, 1),
        task("collector", 7, 1)
    )
}

/// A high-priority job of one learner asking `gpus` GPUs.
fn urgent(name: &str, gpus: i32) -> String {
    format!(
        "apiVersion: diengine.opendilab.org/v2alpha1\nkind: DIJob\nmetadata:\n  name: {name}\nspec:\n  priority: high\n  preemptible: true\n  tasks:\n  - {{type: learner, name: learner, replicas: 1, template: {{spec: {{containers: [{{name: di-container, image: busybox, command: [sleep, \"3600\"], resources: {{requests: {{cpu: 500m, nvidia.com/gpu: {gpus}}}, limits: {{nvidia.com/gpu: {gpus}}}}}}}]}}}}}}\n"
    )
}

/// Pod name → uid of a job's live pods.
fn uids(k: &Kubectl, job: &str) -> BTreeMap<String, String> {
    scenario::pods(k, job)
        .into_iter()
        .map(|(name, pod)| {
            let uid = pod["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            (name, uid)
        })
        .collect()
}

fn collectors(k: &Kubectl, job: &str) -> String {
    scenario::jsonpath(
        k,
        &format!("dijob/{job}"),
        "{.status.taskReplicas.collector}",
    )
}

fn job_json(k: &Kubectl, job: &str) -> Value {
    serde_json::from_str(&k.ok(&["get", &format!("dijob/{job}"), "-o", "json"])).expect("job")
}

/// Waits until `job` runs with `want` collectors (and as many collector pods).
fn wait_collectors(k: &Kubectl, job: &str, want: usize) {
    let deadline = Instant::now() + T;
    loop {
        let count = collectors(k, job);
        let phase = scenario::jsonpath(k, &format!("dijob/{job}"), "{.status.phase}");
        let pods = scenario::pods(k, job).len();
        if (count == want.to_string() || (count.is_empty() && want == 7))
            && phase == "Running"
            && pods == want + 1
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{job}: collectors {count:?}, phase {phase}, {pods} pods; want {want}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn urgent_jobs_shrink_collectors_before_evicting(k: &Kubectl, ns: &str) {
    let k = k.in_namespace(ns);
    let lows: Vec<String> = (0..4).map(|i| format!("low-{i}")).collect();
    for name in &lows {
        scenario::apply(&k, &low(name));
    }
    for name in &lows {
        scenario::wait_phase(&k, name, "Running");
    }
    let before: BTreeMap<String, BTreeMap<String, String>> =
        lows.iter().map(|j| (j.clone(), uids(&k, j))).collect();
    // Past the scenario's 1 s minimum run time.
    std::thread::sleep(Duration::from_secs(2));

    // 1. Shrink: 4 GPUs on one node come from one job's 4 highest collectors.
    let arrived = Instant::now();
    scenario::apply(&k, &urgent("urgent", 4));
    scenario::wait_phase(&k, "urgent", "Running");
    println!(
        "preemption: the urgent job ran {:?} after it was created",
        arrived.elapsed()
    );
    let (_, _, message) = wait_allocated(&k, "urgent", "True");
    assert!(
        message.contains("made room by preempting lower-priority jobs: shrank"),
        "{message}"
    );
    // It never waited: its first decision placed it (no re-plan period passed first).
    let decisions = job_json(&k, "urgent")["status"]["decisions"].clone();
    let actions: Vec<&str> = decisions
        .as_array()
        .map(|d| d.iter().filter_map(|e| e["action"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(actions, ["Placed"], "{decisions}");
    let shrunk: Vec<&String> = lows.iter().filter(|j| collectors(&k, j) == "3").collect();
    assert_eq!(shrunk.len(), 1, "exactly one job shrinks");
    let victim = shrunk[0].clone();
    wait_collectors(&k, &victim, 3);
    let now = uids(&k, &victim);
    let mut names: Vec<&str> = now.keys().map(String::as_str).collect();
    names.sort_unstable();
    let want: Vec<String> = ["collector-0", "collector-1", "collector-2", "learner-0"]
        .iter()
        .map(|s| format!("{victim}-{s}"))
        .collect();
    assert_eq!(names, want.iter().map(String::as_str).collect::<Vec<_>>());
    for (name, uid) in &now {
        assert_eq!(
            before[&victim].get(name),
            Some(uid),
            "{name} survived as the same pod"
        );
    }
    let note = wait_event(&k, "DIJob", &victim, "JobShrunk", 1);
    assert!(
        note.contains(&format!("to make room for {ns}/urgent (priority 100 > 0)")),
        "{note}"
    );
    let status = job_json(&k, &victim)["status"].clone();
    assert_eq!(status["preemption"]["action"], "Shrunk", "{status}");
    assert_eq!(status["preemption"]["forJob"], format!("{ns}/urgent"));
    assert_eq!(status["preemption"]["replicasBefore"]["collector"], 7);
    for other in lows.iter().filter(|j| **j != victim) {
        assert_eq!(uids(&k, other), before[other], "{other} is untouched");
    }

    // 2. The urgent job ends: the shrunk job grows back to 7, no longer preempted.
    k.ok(&["delete", "dijob", "urgent", "--wait=false"]);
    wait_collectors(&k, &victim, 7);
    let deadline = Instant::now() + T;
    while !job_json(&k, &victim)["status"]["preemption"].is_null() {
        assert!(Instant::now() < deadline, "status.preemption is cleared");
        std::thread::sleep(Duration::from_millis(100));
    }
    for name in &lows {
        scenario::wait_phase(&k, name, "Running");
    }
    std::thread::sleep(Duration::from_secs(2));

    // 3. Evict: 8 GPUs on one node are more than shrinking frees anywhere (6): one whole job
    // goes, the one that loses least (the one that ran the shortest: the grown-back job).
    scenario::apply(&k, &urgent("urgent-big", 8));
    scenario::wait_phase(&k, "urgent-big", "Running");
    let (_, _, message) = wait_allocated(&k, "urgent-big", "True");
    assert!(message.contains("evicted"), "{message}");
    // While it waits, its Allocated condition says it was evicted, and for whom.
    let (_, reason, evicted_message) = wait_allocated(&k, &victim, "False");
    assert_eq!(reason, "Evicted", "{evicted_message}");
    assert!(
        evicted_message.contains(&format!("{ns}/urgent-big")),
        "{evicted_message}"
    );
    let note = wait_event(&k, "DIJob", &victim, "JobEvicted", 1);
    assert!(
        note.contains(&format!(
            "evicted to make room for {ns}/urgent-big (priority 100 > 0)"
        )),
        "{note}"
    );
    assert_eq!(
        scenario::jsonpath(&k, &format!("dijob/{victim}"), "{.status.phase}"),
        "Pending"
    );
    let restarts = || scenario::jsonpath(&k, &format!("dijob/{victim}"), "{.status.restarts}");
    assert!(matches!(restarts().as_str(), "" | "0"), "not a restart");
    for other in lows.iter().filter(|j| **j != victim) {
        assert!(
            matches!(collectors(&k, other).as_str(), "" | "7"),
            "{other} is not shrunk when an eviction serves"
        );
    }

    // 4. It ends: the evicted job is placed again and runs, counters intact.
    k.ok(&["delete", "dijob", "urgent-big", "--wait=false"]);
    wait_collectors(&k, &victim, 7);
    assert!(matches!(restarts().as_str(), "" | "0"));
    assert!(job_json(&k, &victim)["status"]["preemption"].is_null());
}
