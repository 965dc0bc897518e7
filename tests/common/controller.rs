//! DIJob lifecycle scenarios run against the real `diorch run` binary, written against a
//! `Kubectl` so the sandbox integration tests and the real-cluster e2e suite share them. Pods
//! are ended through the pod status subresource (as DI-orchestrator's envtest suite does), so
//! no simulated-kubelet annotation is needed and a real cluster behaves the same.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use super::Kubectl;

pub const T: Duration = Duration::from_secs(60);

/// A running `diorch run` (the real binary), killed on drop; keeps its log lines.
pub struct OperatorProcess {
    child: Child,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl OperatorProcess {
    pub fn start(kubeconfig: &Path) -> OperatorProcess {
        OperatorProcess::start_with(kubeconfig, &[])
    }

    /// Starts it with extra `diorch run` flags.
    pub fn start_with(kubeconfig: &Path, extra: &[&str]) -> OperatorProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_diorch"))
            .args([
                "run",
                "--metric-addr",
                "0",
                "--probe-addr",
                "0",
                "--server-bind-address",
                "127.0.0.1:0",
                "--webhook-addr",
                "0",
                "--kubeconfig",
            ])
            .arg(kubeconfig)
            .args(extra)
            .env(
                "RUST_LOG",
                std::env::var("TEST_OPERATOR_LOG")
                    .unwrap_or_else(|_| "info,kube_client::client::builder=off".into()),
            )
            .env("NO_COLOR", "1")
            // As deploy/ runs it: its CPU limit of 1 gives the operator a current-thread
            // runtime (src/main.rs `runtime_for`).
            .env("TOKIO_WORKER_THREADS", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn diorch run");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                println!("[operator] {line}");
                sink.lock().expect("log").push(line);
            }
        });
        OperatorProcess { child, log }
    }

    /// Sends SIGTERM (what Kubernetes sends a pod it stops) and waits up to `within` for the
    /// exit; `None` if it did not exit by then (it is killed).
    pub fn terminate(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -TERM {pid}");
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        None
    }

    /// The operator's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The operator's resident set size in KiB (`VmRSS` of `/proc/<pid>/status`).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("the operator's /proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS")
    }

    /// The exit status if the process has ended.
    pub fn try_exit(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Kills the process at once (SIGKILL), as a crash or an evicted pod would end it.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn lines(&self) -> Vec<String> {
        self.log.lock().expect("log").clone()
    }

    /// `http://<addr>` of the replica API, from the operator's log.
    pub fn api_url(&self) -> String {
        let deadline = std::time::Instant::now() + T;
        loop {
            let found = self.lines().iter().find_map(|l| {
                l.contains("serving the replica API")
                    .then(|| l.split("address=").nth(1))
                    .flatten()
                    .and_then(|a| a.split_whitespace().next())
                    .map(|a| format!("http://{a}"))
            });
            if let Some(url) = found {
                return url;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no replica API address in the log"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A DIJob manifest: `tasks` as (name, type, replicas); `name` may be empty for no name.
pub fn job_manifest(name: &str, spec_extra: &str, tasks: &[(&str, &str, i32)]) -> String {
    let mut out = format!(
        "apiVersion: diengine.opendilab.org/v2alpha1\nkind: DIJob\nmetadata:\n  name: {name}\nspec:\n{spec_extra}  tasks:\n"
    );
    for (task, type_, replicas) in tasks {
        out.push_str(&format!("  - type: {type_}\n    replicas: {replicas}\n"));
        if !task.is_empty() {
            out.push_str(&format!("    name: {task}\n"));
        }
        out.push_str(
            "    template:\n      spec:\n        containers:\n        - name: di-container\n          image: busybox\n          command: [\"sh\", \"-c\", \"sleep 3600\"]\n",
        );
    }
    out
}

/// The learner / evaluator / 2 collectors job of DI-orchestrator's tests.
pub fn standard_job(name: &str, spec_extra: &str) -> String {
    job_manifest(
        name,
        spec_extra,
        &[
            ("learner", "learner", 1),
            ("evaluator", "evaluator", 1),
            ("collector", "collector", 2),
        ],
    )
}

pub fn apply(k: &Kubectl, manifest: &str) {
    k.ok_stdin(&["apply", "-f", "-"], manifest);
}

pub fn jsonpath(k: &Kubectl, what: &str, path: &str) -> String {
    k.ok(&["get", what, "-o", &format!("jsonpath={path}")])
}

pub fn wait_phase(k: &Kubectl, job: &str, phase: &str) {
    let target = format!("dijob/{job}");
    let deadline = std::time::Instant::now() + T;
    loop {
        let out = k.run(&["get", &target, "-o", "jsonpath={.status.phase}"]);
        if out.status.success() && String::from_utf8_lossy(&out.stdout) == phase {
            return;
        }
        if std::time::Instant::now() > deadline {
            let yaml = k.run(&["get", &target, "-o", "yaml"]);
            let pods = k.run(&[
                "get",
                "pods",
                "-l",
                &format!("diengine/job={job}"),
                "-o",
                "wide",
            ]);
            panic!(
                "{job} did not reach {phase} within {T:?}; last: {:?} {:?}\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&yaml.stdout),
                String::from_utf8_lossy(&pods.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The job's live (not terminating) pods as JSON, by name.
pub fn pods(k: &Kubectl, job: &str) -> BTreeMap<String, Value> {
    let out = k.ok(&[
        "get",
        "pods",
        "-l",
        &format!("diengine/job={job}"),
        "-o",
        "json",
    ]);
    let list: Value = serde_json::from_str(&out).expect("pod list");
    list["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| (p["metadata"]["name"].as_str().unwrap_or("").to_string(), p))
        .collect()
}

/// Waits until the job's live pods are exactly `names`.
pub fn wait_pods(k: &Kubectl, job: &str, names: &[String]) -> BTreeMap<String, Value> {
    let want: BTreeSet<String> = names.iter().cloned().collect();
    let deadline = std::time::Instant::now() + T;
    loop {
        let now = pods(k, job);
        if now.keys().cloned().collect::<BTreeSet<_>>() == want {
            return now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "pods of {job}: {:?}, want {want:?}",
            now.keys().collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn env(pod: &Value, name: &str) -> String {
    pod["spec"]["containers"][0]["env"]
        .as_array()
        .and_then(|e| e.iter().find(|v| v["name"] == name))
        .and_then(|v| v["value"].as_str())
        .unwrap_or("")
        .to_string()
}

pub fn uid(pod: &Value) -> String {
    pod["metadata"]["uid"].as_str().unwrap_or("").to_string()
}

pub fn rank(pod: &Value) -> i64 {
    pod["metadata"]["annotations"]["diengine/rank"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .expect("rank annotation")
}

/// For every pod: `DI_NODES[DI_RANK]` is its own FQDN, its rank annotation matches, and ranks
/// are unique.
pub fn assert_ranks_consistent(ns: &str, job: &str, pods: &BTreeMap<String, Value>) {
    let mut ranks = BTreeSet::new();
    for (name, pod) in pods {
        let r: usize = env(pod, "DI_RANK").parse().expect("DI_RANK");
        assert_eq!(r as i64, rank(pod), "{name}");
        let nodes: Vec<String> = env(pod, "DI_NODES").split(',').map(String::from).collect();
        assert_eq!(
            nodes.get(r).map(String::as_str),
            Some(format!("{name}.di-{job}.{ns}.svc.cluster.local").as_str()),
            "DI_NODES[DI_RANK] of {name}"
        );
        assert!(ranks.insert(r), "rank {r} used twice");
    }
}

/// Ends a pod through its status subresource.
pub fn end_pod(k: &Kubectl, pod: &str, phase: &str) {
    let patch = format!(r#"{{"status":{{"phase":"{phase}"}}}}"#);
    k.ok(&[
        "patch",
        "pod",
        pod,
        "--subresource=status",
        "--type=merge",
        "-p",
        &patch,
    ]);
}

fn names(job: &str, slots: &[(&str, i32)]) -> Vec<String> {
    slots
        .iter()
        .flat_map(|(task, n)| (0..*n).map(move |i| format!("{job}-{task}-{i}")))
        .collect()
}

fn standard_names(job: &str) -> Vec<String> {
    names(job, &[("learner", 1), ("evaluator", 1), ("collector", 2)])
}

/// 1 learner / 1 evaluator / 2 collectors: Running with DI-orchestrator's names, labels,
/// annotations, env and service, then Succeeded once every pod has succeeded.
pub fn runs_to_success(k: &Kubectl, ns: &str) {
    let k = k.in_namespace(ns);
    let job = "lifecycle";
    apply(&k, &standard_job(job, ""));
    wait_phase(&k, job, "Running");
    let pods = wait_pods(&k, job, &standard_names(job));
    assert_ranks_consistent(ns, job, &pods);
    let learner = &pods[&format!("{job}-learner-0")];
    assert_eq!(
        learner["metadata"]["labels"]["diengine/task-type"],
        "learner"
    );
    assert_eq!(
        learner["metadata"]["labels"]["diengine/operator"],
        "di-operator"
    );
    assert_eq!(learner["metadata"]["annotations"]["diengine/replicas"], "4");
    assert_eq!(learner["spec"]["hostname"], format!("{job}-learner-0"));
    assert_eq!(learner["spec"]["subdomain"], format!("di-{job}"));
    assert_eq!(learner["spec"]["restartPolicy"], "Never");
    assert_eq!(
        learner["metadata"]["ownerReferences"][0]["blockOwnerDeletion"],
        true
    );
    assert_eq!(env(learner, "DI_JOB_ID"), format!("{ns}/{job}"));
    let collector = &pods[&format!("{job}-collector-1")];
    assert_eq!(
        env(collector, "DI_COLLECTOR_NODES"),
        format!(
            "{job}-collector-0.di-{job}.{ns}.svc.cluster.local,{job}-collector-1.di-{job}.{ns}.svc.cluster.local"
        )
    );
    // Spec 14: the DI_NODES entries of all pods add up to N².
    let total: usize = pods
        .values()
        .map(|p| env(p, "DI_NODES").split(',').count())
        .sum();
    assert_eq!(total, 16);
    let svc = jsonpath(
        &k,
        &format!("service/di-{job}"),
        "{.spec.clusterIP} {.spec.ports[0].name} {.spec.ports[0].port}",
    );
    assert_eq!(svc, "None di-port 22270");
    let status = jsonpath(
        &k,
        &format!("dijob/{job}"),
        "{.status.replicas} {.status.readyReplicas} {.status.taskStatus.collector.Running}",
    );
    assert_eq!(status, "4 4 2");
    // The CRD's category lists it (`kubectl get ai`), and `-o wide` adds the allocation column.
    let listed = k.ok(&["get", "ai", "-o", "name"]);
    assert!(
        listed
            .lines()
            .any(|l| l == format!("dijob.diengine.opendilab.org/{job}")),
        "`kubectl get ai` does not list the job: {listed}"
    );
    let wide = k.ok(&["get", "dijob", job, "-o", "wide"]);
    let header = wide.lines().next().unwrap_or_default();
    assert!(header.ends_with("ALLOCATION"), "{wide}");
    assert!(!k.ok(&["get", "dijob", job]).contains("ALLOCATION"));

    // A status-only change does nothing: no pod is touched, no transition counted.
    k.ok(&[
        "patch",
        &format!("dijob/{job}"),
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"profilings":{"note":"status only"}}}"#,
    ]);
    std::thread::sleep(Duration::from_secs(2));
    let after = self::pods(&k, job);
    for (name, pod) in &pods {
        assert_eq!(
            uid(pod),
            uid(&after[name]),
            "{name} untouched by a status change"
        );
    }
    let counters = jsonpath(
        &k,
        &format!("dijob/{job}"),
        "{.status.phase} {.status.restarts} {.status.reschedules} {.status.profilings.note}",
    );
    assert_eq!(counters, "Running 0 0 status only");

    for pod in pods.keys() {
        end_pod(&k, pod, "Succeeded");
    }
    wait_phase(&k, job, "Succeeded");
    let done = jsonpath(
        &k,
        &format!("dijob/{job}"),
        "{.status.readyReplicas} {.status.completionTimestamp}",
    );
    assert!(done.starts_with("0 20"), "{done}");
    // cleanPodPolicy Running keeps succeeded pods; the service goes.
    k.wait_for(&["get", "services", "-o", "name"], T, |s| {
        !s.contains(&format!("di-{job}"))
    });
    assert_eq!(pods_len(&k, job), 4);
    // Events go out behind the critical writes, once the controller is idle: wait for them.
    wait_job_events(
        &k,
        job,
        &[
            "JobPending: ",
            "JobStarting: ",
            "JobRunning: ",
            "JobSucceeded: ",
            "SuccessfulCreate: ",
        ],
    );
}

fn pods_len(k: &Kubectl, job: &str) -> usize {
    pods(k, job).len()
}

/// The job's Events as `reason: message` lines.
pub fn job_events(k: &Kubectl, job: &str) -> String {
    k.ok(&[
        "get",
        "events",
        "--field-selector",
        &format!("involvedObject.name={job}"),
        "-o",
        "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}",
    ])
}

/// Waits (up to [`T`]) until the job's Events hold every one of `reasons` (as `Reason: `), and
/// returns them. Events are recorded asynchronously, behind the pod, service and status writes
/// (as client-go's recorder does too), so a test that reads them once races the recorder.
pub fn wait_job_events(k: &Kubectl, job: &str, reasons: &[&str]) -> String {
    let deadline = std::time::Instant::now() + T;
    loop {
        let events = job_events(k, job);
        if reasons.iter().all(|r| events.contains(r)) {
            return events;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not all of {reasons:?} within {T:?}: {events}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// backoffLimit 1: the first failure restarts only the failed pod (same rank), the second fails
/// the job.
///
/// The failed pod's name stays taken after the operator deletes it: a finalizer holds it
/// Terminating (as a log collector's would; a real kubelet's graceful stop does the same for a
/// while), and its `diengine/operator` label is taken off, as one detaches a pod from its
/// controller to keep it for debugging, so the operator's watch no longer shows it. Its
/// re-create then answers 409 AlreadyExists: the operator must not take that for a creation
/// (and wait for its 60 s sync period, as nothing else re-triggers the job: issue 18's restart
/// stall), but say why the pod is not created and create it once the name is free.
pub fn failing_worker_restarts_then_fails(k: &Kubectl, ns: &str) {
    let k = k.in_namespace(ns);
    let job = "backoff";
    apply(
        &k,
        &standard_job(job, "  backoffLimit: 1\n  cleanPodPolicy: None\n"),
    );
    wait_phase(&k, job, "Running");
    let before = wait_pods(&k, job, &standard_names(job));
    let victim = format!("{job}-collector-0");
    k.ok(&[
        "patch",
        "pod",
        &victim,
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":["diorch.io/e2e-hold"]}}"#,
    ]);
    end_pod(&k, &victim, "Failed");
    k.wait_for(
        &[
            "get",
            &format!("dijob/{job}"),
            "-o",
            "jsonpath={.status.restarts}",
        ],
        T,
        |r| r == "1",
    );
    // The operator deleted it; the finalizer keeps it, name taken.
    k.wait_for(
        &[
            "get",
            "pod",
            &victim,
            "-o",
            "jsonpath={.metadata.deletionTimestamp}",
        ],
        T,
        |t| !t.is_empty(),
    );
    k.ok(&["label", "pod", &victim, "diengine/operator-"]);
    let refused = format!(
        "FailedCreate: failed to create pod {victim} error: a pod of that name is still being deleted"
    );
    wait_job_events(&k, job, &[&refused]);
    assert_eq!(
        jsonpath(&k, &format!("dijob/{job}"), "{.status.phase}"),
        "Restarting"
    );
    let released = std::time::Instant::now();
    k.ok(&[
        "patch",
        "pod",
        &victim,
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]);
    wait_phase(&k, job, "Running");
    println!(
        "backoff: Running {:?} after the old pod's name was freed",
        released.elapsed()
    );
    // A restart, not a reschedule: Restarting -> Starting -> Running.
    assert_eq!(
        jsonpath(
            &k,
            &format!("dijob/{job}"),
            "{.status.restarts} {.status.reschedules}"
        ),
        "1 0"
    );
    let after = wait_pods(&k, job, &standard_names(job));
    assert_ne!(
        uid(&before[&victim]),
        uid(&after[&victim]),
        "failed pod replaced"
    );
    assert_eq!(
        rank(&after[&victim]),
        rank(&before[&victim]),
        "with its rank"
    );
    for name in standard_names(job).iter().filter(|n| **n != victim) {
        assert_eq!(uid(&before[name]), uid(&after[name]), "{name} untouched");
    }
    assert_ranks_consistent(ns, job, &after);
    end_pod(&k, &format!("{job}-learner-0"), "Failed");
    wait_phase(&k, job, "Failed");
    let status = jsonpath(
        &k,
        &format!("dijob/{job}"),
        "{.status.restarts}|{.status.conditions[-1].message}",
    );
    assert_eq!(
        status,
        "1|job failed since 1 pods failed. and exceed backoff limit"
    );
    // Terminal is absorbing: with cleanPodPolicy None nothing is deleted or re-created.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(pods_len(&k, job), 4);
}

/// Each cleanPodPolicy leaves exactly the right pods after the job fails.
pub fn clean_pod_policies(k: &Kubectl, ns: &str) {
    let k = k.in_namespace(ns);
    for (policy, left) in [("Running", 1), ("All", 0), ("None", 3)] {
        let job = format!("clean-{}", policy.to_lowercase());
        apply(
            &k,
            &job_manifest(
                &job,
                &format!("  backoffLimit: 0\n  cleanPodPolicy: {policy}\n"),
                &[("learner", "learner", 1), ("collector", "collector", 2)],
            ),
        );
        wait_phase(&k, &job, "Running");
        end_pod(&k, &format!("{job}-collector-0"), "Failed");
        wait_phase(&k, &job, "Failed");
        let deadline = std::time::Instant::now() + T;
        while pods_len(&k, &job) != left {
            assert!(
                std::time::Instant::now() < deadline,
                "{policy}: {} pods",
                pods_len(&k, &job)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        if left == 1 {
            assert!(
                pods(&k, &job).contains_key(&format!("{job}-collector-0")),
                "the failed pod stays"
            );
        }
        k.wait_for(&["get", "services", "-o", "name"], T, |s| {
            !s.contains(&format!("di-{job}"))
        });
    }
}

/// A pod deleted by hand while the job runs comes back exactly once, with its rank.
pub fn hand_deleted_pod_comes_back_once(k: &Kubectl, ns: &str) {
    let k = k.in_namespace(ns);
    let job = "selfheal";
    apply(&k, &standard_job(job, ""));
    wait_phase(&k, job, "Running");
    let before = wait_pods(&k, job, &standard_names(job));
    let victim = format!("{job}-evaluator-0");
    k.ok(&["delete", "pod", &victim, "--wait=false"]);
    k.wait_for(
        &[
            "get",
            &format!("dijob/{job}"),
            "-o",
            "jsonpath={.status.reschedules}",
        ],
        T,
        |r| r == "1",
    );
    wait_phase(&k, job, "Running");
    let after = wait_pods(&k, job, &standard_names(job));
    assert_ne!(uid(&before[&victim]), uid(&after[&victim]));
    assert_eq!(rank(&after[&victim]), 1);
    assert_ranks_consistent(ns, job, &after);
    std::thread::sleep(Duration::from_secs(2));
    let settled = pods(&k, job);
    assert_eq!(
        uid(&settled[&victim]),
        uid(&after[&victim]),
        "no second re-creation"
    );
    assert_eq!(
        jsonpath(&k, &format!("dijob/{job}"), "{.status.reschedules}"),
        "1"
    );
}

/// Editing `spec.tasks[].replicas` scales: only the difference is created or deleted,
/// survivors keep their pods and ranks (DI-orchestrator's e2e: 7 pods with new ranks 4, 5, 6,
/// then back to 4 pods).
pub fn scales_up_and_down(k: &Kubectl, ns: &str) {
    let k = k.in_namespace(ns);
    let job = "scaling";
    apply(&k, &standard_job(job, ""));
    wait_phase(&k, job, "Running");
    let before = wait_pods(&k, job, &standard_names(job));
    let patch = r#"[{"op":"replace","path":"/spec/tasks/0/replicas","value":2},{"op":"replace","path":"/spec/tasks/1/replicas","value":2},{"op":"replace","path":"/spec/tasks/2/replicas","value":3}]"#;
    k.ok(&["patch", "dijob", job, "--type=json", "-p", patch]);
    let up = wait_pods(
        &k,
        job,
        &names(job, &[("learner", 2), ("evaluator", 2), ("collector", 3)]),
    );
    wait_phase(&k, job, "Running");
    let up = {
        let now = pods(&k, job);
        assert_eq!(now.len(), up.len());
        now
    };
    assert_eq!(rank(&up[&format!("{job}-learner-1")]), 4);
    assert_eq!(rank(&up[&format!("{job}-evaluator-1")]), 5);
    assert_eq!(rank(&up[&format!("{job}-collector-2")]), 6);
    for (name, pod) in &before {
        assert_eq!(uid(pod), uid(&up[name]), "{name} survives scale-up");
    }
    assert_ranks_consistent(ns, job, &up);
    let running = jsonpath(
        &k,
        &format!("dijob/{job}"),
        "{.status.replicas} {.status.reschedules}",
    );
    assert_eq!(running, "7 1");
    // Each task's scale reads from status, without decoding the spec.
    let per_task = "{.status.taskReplicaStatus.learner.replicas}/{.status.taskReplicaStatus.learner.readyReplicas} {.status.taskReplicaStatus.collector.replicas}/{.status.taskReplicaStatus.collector.readyReplicas}";
    k.wait_for(
        &["get", "dijob", job, "-o", &format!("jsonpath={per_task}")],
        T,
        |out| out == "2/2 3/3",
    );

    let down = r#"[{"op":"replace","path":"/spec/tasks/0/replicas","value":1},{"op":"replace","path":"/spec/tasks/1/replicas","value":1},{"op":"replace","path":"/spec/tasks/2/replicas","value":2}]"#;
    k.ok(&["patch", "dijob", job, "--type=json", "-p", down]);
    let after = wait_pods(&k, job, &standard_names(job));
    wait_phase(&k, job, "Running");
    for (name, pod) in &before {
        assert_eq!(uid(pod), uid(&after[name]), "{name} survives scale-down");
    }
    let status = jsonpath(
        &k,
        &format!("dijob/{job}"),
        "{.status.replicas} {.status.reschedules}",
    );
    assert_eq!(status, "4 2");
    k.wait_for(
        &["get", "dijob", job, "-o", &format!("jsonpath={per_task}")],
        T,
        |out| out == "1/1 2/2",
    );
}

/// The job's pods once `done` holds for them, polled every 200 ms for up to [`T`].
pub fn wait_pods_until(
    k: &Kubectl,
    job: &str,
    what: &str,
    mut done: impl FnMut(&BTreeMap<String, Value>) -> bool,
) -> BTreeMap<String, Value> {
    let deadline = std::time::Instant::now() + T;
    loop {
        let now = pods(k, job);
        if done(&now) {
            return now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "waiting for {what}: {:?}",
            now.keys()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Editing a task's template rolls that task's pods only.
pub fn template_edit_rolls_pods(k: &Kubectl, ns: &str) {
    let k = k.in_namespace(ns);
    let job = "rolling";
    apply(&k, &standard_job(job, ""));
    wait_phase(&k, job, "Running");
    let before = wait_pods(&k, job, &standard_names(job));
    let patch = r#"[{"op":"replace","path":"/spec/tasks/2/template/spec/containers/0/image","value":"busybox:1.36"}]"#;
    k.ok(&["patch", "dijob", job, "--type=json", "-p", patch]);
    let after = wait_pods_until(&k, job, "the collectors to roll", |now| {
        let rolled = now
            .values()
            .filter(|p| p["spec"]["containers"][0]["image"] == "busybox:1.36")
            .count();
        rolled == 2 && now.len() == 4
    });
    for (name, pod) in &before {
        let same = uid(pod) == uid(&after[name]);
        assert_eq!(same, !name.contains("collector"), "{name}");
    }
    assert_ranks_consistent(ns, job, &after);
    wait_phase(&k, job, "Running");
}

/// Deleting the DIJob removes its pods and service through owner references.
pub fn deleting_the_job_cascades(k: &Kubectl, ns: &str) {
    let k = k.in_namespace(ns);
    let job = "cascade";
    apply(&k, &standard_job(job, ""));
    wait_phase(&k, job, "Running");
    k.ok(&["delete", "dijob", job]);
    wait_no_pods(&k, job);
    wait_no_service(&k, job);
}

/// Waits until the job has no pods at all, terminating ones included.
pub fn wait_no_pods(k: &Kubectl, job: &str) {
    k.wait_for(
        &[
            "get",
            "pods",
            "-l",
            &format!("diengine/job={job}"),
            "-o",
            "name",
        ],
        T,
        str::is_empty,
    );
}

/// Waits until the job's service `di-<job>` is gone.
pub fn wait_no_service(k: &Kubectl, job: &str) {
    k.wait_for(&["get", "services", "-o", "name"], T, |s| {
        !s.lines().any(|l| l == format!("service/di-{job}"))
    });
}

/// Spec section 11's e2e cases: invalid task sets fail with DI-orchestrator's messages;
/// typed tasks without names are named after their type and run.
pub fn validation_cases(k: &Kubectl, ns: &str) {
    let k = k.in_namespace(ns);
    let cases = [
        (
            "dup-names",
            vec![("name-test", "evaluator", 1), ("name-test", "collector", 1)],
            "there is more than one task named name-test",
        ),
        (
            "two-collectors",
            vec![("a", "collector", 1), ("b", "collector", 1)],
            "the number of collector task is more than one",
        ),
    ];
    for (job, tasks, _) in &cases {
        apply(&k, &job_manifest(job, "", tasks));
    }
    // DI-orchestrator admitted an unnamed task of type none and failed it later; the CRD's
    // CEL rule refuses it at once, on every cluster, with the same words.
    let err = k.fails_stdin(
        &["apply", "-f", "-"],
        &job_manifest("none-unnamed", "", &[("l", "learner", 1), ("", "none", 1)]),
    );
    // Compared by field name and the rule's message: servers before 1.28 report the rule on
    // `spec.tasks.` (no index, no fieldPath), 1.28+ on `spec.tasks[1].name`.
    super::foundation::assert_says(&err, &["spec.tasks[1]", ": none type task has no name"]);
    apply(
        &k,
        &job_manifest("unnamed", "", &[("", "learner", 1), ("", "collector", 1)]),
    );
    apply(
        &k,
        &job_manifest("empty", "", &[]).replace("  tasks:\n", "  tasks: []\n"),
    );
    for (job, _, message) in &cases {
        wait_phase(&k, job, "Failed");
        let got = jsonpath(
            &k,
            &format!("dijob/{job}"),
            "{.status.conditions[-1].reason}|{.status.conditions[-1].message}",
        );
        assert_eq!(got, format!("JobFailed|{message}"));
        assert_eq!(pods_len(&k, job), 0, "{job} created no pods");
    }
    wait_phase(&k, "empty", "Failed");
    assert_eq!(
        jsonpath(&k, "dijob/empty", "{.status.conditions[-1].message}"),
        "job has no tasks"
    );
    wait_phase(&k, "unnamed", "Running");
    assert_eq!(
        jsonpath(&k, "dijob/unnamed", "{.spec.tasks[*].name}"),
        "learner collector"
    );
    wait_pods(
        &k,
        "unnamed",
        &[
            "unnamed-learner-0".to_string(),
            "unnamed-collector-0".to_string(),
        ],
    );
    // A job name that makes hostnames too long is refused with a clear condition, no pods.
    let long = "x".repeat(58);
    apply(&k, &job_manifest(&long, "", &[("learner", "learner", 1)]));
    wait_phase(&k, &long, "Failed");
    let message = jsonpath(
        &k,
        &format!("dijob/{long}"),
        "{.status.conditions[-1].message}",
    );
    assert!(
        message.contains("must be no more than 63 characters"),
        "{message}"
    );
    assert_eq!(
        jsonpath(&k, &format!("dijob/{long}"), "{.status.restarts}"),
        "0"
    );
}

/// One HTTP/1.1 request over a fresh connection: (status code, body as JSON).
pub fn http(url: &str, method: &str, path: &str, body: &str) -> (u16, Value) {
    http_as(url, method, path, body, None)
}

/// [`http`] with an optional bearer token.
pub fn http_as(
    url: &str,
    method: &str,
    path: &str,
    body: &str,
    token: Option<&str>,
) -> (u16, Value) {
    use std::io::{Read, Write};
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let addr = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to the replica API");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response.split("\r\n\r\n").nth(1).unwrap_or("");
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}
