//! The DIJob lifecycle controller end to end: the real `diorch run` binary against the sandbox
//! (the sandbox, in-process, with its simulated kubelet), driven with kubectl. The same
//! scenarios run against a real cluster in `tests/e2e.rs`.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::controller::{self as scenario, OperatorProcess};
use common::{SandboxProcess, foundation};

/// A sandbox with the CRD installed and the operator running.
fn cluster() -> (SandboxProcess, OperatorProcess) {
    let sandbox = SandboxProcess::start(&["--nodes", "4", "--pod-start-delay", "100ms"]);
    foundation::install_crd(&sandbox.kubectl());
    let operator = OperatorProcess::start(&sandbox.kubeconfig);
    (sandbox, operator)
}

#[test]
fn job_runs_then_succeeds() {
    let (sandbox, operator) = cluster();
    scenario::runs_to_success(&sandbox.kubectl(), "default");
    // One structured log line per reconcile that acted, naming the job and its actions.
    let lines = operator.lines();
    assert!(
        lines.iter().any(|l| l.contains("reconciled")
            && l.contains("job=default/lifecycle")
            && l.contains("create pod lifecycle-learner-0")),
        "{lines:#?}"
    );
}

#[test]
fn replica_api_serves_a_running_job_from_the_cache_and_stores_profilings() {
    let (sandbox, operator) = cluster();
    let k = sandbox.kubectl().in_namespace("default");
    scenario::apply(&k, &scenario::standard_job("api", ""));
    scenario::wait_phase(&k, "api", "Running");
    let api = operator.api_url();
    let pods = scenario::pods(&k, "api");
    // The pod IPs by rank, as DI-engine workers read them.
    let mut want = vec![String::new(); 4];
    for pod in pods.values() {
        let ip = pod["status"]["podIP"].as_str().expect("pod IP");
        want[scenario::rank(pod) as usize] = format!("{ip}:22270");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = scenario::http(&api, "GET", "/v2alpha1/job/default.api/replicas", "");
        assert_eq!(status, 200, "{body}");
        if body["data"] == serde_json::json!(want) {
            assert_eq!(body["message"], "successfully get replicas");
            break;
        }
        assert!(Instant::now() < deadline, "replicas {body}, want {want:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The same through the CLI client.
    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_diorch"))
            .args(["replicas", "--server", &api])
            .args(args)
            // A bare name's namespace comes from the kubeconfig: the sandbox's, whose context
            // names none, so `default`.
            .env("KUBECONFIG", &sandbox.kubeconfig)
            .output()
            .expect("diorch replicas")
    };
    let out = cli(&["get", "api"]);
    assert!(out.status.success(), "{out:?}");
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    let expected: Vec<String> = want
        .iter()
        .enumerate()
        .map(|(r, a)| format!("{r}\t{a}"))
        .collect();
    assert_eq!(lines, expected);
    let out = cli(&["add", "default/api", "2"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "job default/api is not preemptible: scale it by editing spec.tasks[].replicas"
        ),
        "{stderr}"
    );
    let (status, body) = scenario::http(&api, "GET", "/v2alpha1/job/default.nope/replicas", "");
    assert_eq!((status, body["code"].as_i64()), (404, Some(1)));
    let (status, body) = scenario::http(
        &api,
        "POST",
        "/v2alpha1/default.api/profilings",
        r#"{"data": {"collector": {"throughput": 12.5}}}"#,
    );
    assert_eq!(
        (status, body["message"].as_str()),
        (200, Some("successfully report profilings"))
    );
    let stored = scenario::jsonpath(&k, "dijob/api", "{.status.profilings.collector.throughput}");
    assert_eq!(stored, "12.5");
    // The operator's own status writes keep what workers reported.
    k.ok(&["delete", "pod", "api-learner-0", "--wait=false"]);
    k.wait_for(
        &["get", "dijob/api", "-o", "jsonpath={.status.reschedules}"],
        scenario::T,
        |r| r == "1",
    );
    scenario::wait_phase(&k, "api", "Running");
    let stored = scenario::jsonpath(&k, "dijob/api", "{.status.profilings.collector.throughput}");
    assert_eq!(stored, "12.5");
}

#[test]
fn replica_api_with_kubernetes_auth_answers_401_403_and_200() {
    let dir = tempfile::tempdir().expect("tempdir");
    let auth_file = dir.path().join("auth.yaml");
    std::fs::write(
        &auth_file,
        "tokens:\n- {token: alice-token, user: alice}\n- {token: bob-token, user: bob}\n- {token: carol-token, user: carol, groups: [ml]}\nrules:\n- {user: alice, namespaces: [default], verbs: [get], resources: [dijobs/replicas]}\n- {group: ml, verbs: ['*'], resources: ['dijobs/replicas']}\n",
    )
    .expect("auth file");
    let sandbox = SandboxProcess::start(&["--auth-file", auth_file.to_str().expect("utf-8")]);
    foundation::install_crd(&sandbox.kubectl());
    let operator =
        OperatorProcess::start_with(&sandbox.kubeconfig, &["--server-auth", "kubernetes"]);
    let k = sandbox.kubectl().in_namespace("default");
    scenario::apply(&k, &scenario::standard_job("secure", ""));
    scenario::wait_phase(&k, "secure", "Running");
    let api = operator.api_url();
    let get = "/v2alpha1/job/default.secure/replicas";
    let profile = "/v2alpha1/job/default.secure/profilings";
    let cases = [
        (
            "GET",
            get,
            None,
            401,
            "a bearer token is required (Authorization: Bearer <token>)",
        ),
        (
            "GET",
            get,
            Some("mallory-token"),
            401,
            "the bearer token was not accepted: invalid bearer token",
        ),
        (
            "GET",
            get,
            Some("bob-token"),
            403,
            "user bob cannot get dijobs/replicas of secure in namespace default",
        ),
        (
            "GET",
            get,
            Some("alice-token"),
            200,
            "successfully get replicas",
        ),
        (
            "POST",
            profile,
            Some("alice-token"),
            403,
            "user alice cannot update dijobs/replicas of secure in namespace default",
        ),
        (
            "POST",
            profile,
            Some("carol-token"),
            200,
            "successfully report profilings",
        ),
        // Issue 17, item 1: a percent-encoded dot is authorised as the id it decodes to, never
        // let through.
        (
            "GET",
            "/v2alpha1/job/default%2Esecure/replicas",
            Some("x"),
            401,
            "the bearer token was not accepted",
        ),
        (
            "DELETE",
            "/v2alpha1/default%2esecure/replicas",
            None,
            401,
            "a bearer token is required",
        ),
        (
            "POST",
            "/v2alpha1/job/default%2Esecure/profilings",
            Some("alice-token"),
            403,
            "user alice cannot update dijobs/replicas of secure in namespace default",
        ),
        (
            "GET",
            "/v2alpha1/job/default%2Esecure/replicas",
            Some("alice-token"),
            200,
            "successfully get replicas",
        ),
    ];
    for (method, path, token, want, message) in cases {
        let (status, body) = scenario::http_as(&api, method, path, r#"{"data": {"x": 1}}"#, token);
        assert_eq!(status, want, "{method} {path} as {token:?}: {body}");
        let got = body["message"].as_str().unwrap_or_default();
        assert!(
            got.starts_with(message),
            "{method} {path} as {token:?}: {got}"
        );
    }
    // Health and metrics stay open.
    assert_eq!(scenario::http(&api, "GET", "/readyz", "").0, 200);
}

#[test]
fn failing_worker_restarts_once_then_fails() {
    let (sandbox, _operator) = cluster();
    scenario::failing_worker_restarts_then_fails(&sandbox.kubectl(), "default");
}

#[test]
fn clean_pod_policies_leave_the_right_pods() {
    let (sandbox, _operator) = cluster();
    scenario::clean_pod_policies(&sandbox.kubectl(), "default");
}

#[test]
fn hand_deleted_pod_comes_back_once_with_its_rank() {
    let (sandbox, _operator) = cluster();
    scenario::hand_deleted_pod_comes_back_once(&sandbox.kubectl(), "default");
}

#[test]
fn editing_replicas_scales_up_and_down() {
    let (sandbox, _operator) = cluster();
    scenario::scales_up_and_down(&sandbox.kubectl(), "default");
}

#[test]
fn template_edit_rolls_only_that_tasks_pods() {
    let (sandbox, _operator) = cluster();
    scenario::template_edit_rolls_pods(&sandbox.kubectl(), "default");
}

#[test]
fn a_suspended_job_has_no_pods_and_resumes_with_its_ranks() {
    let (sandbox, _operator) = cluster();
    common::job_controls::suspend_and_resume(&sandbox.kubectl(), "default");
}

#[test]
fn a_restart_pod_task_restarts_alone_and_listed_exit_codes_fail_the_job() {
    let (sandbox, _operator) = cluster();
    common::job_controls::restart_policies(&sandbox.kubectl(), "default");
}

#[test]
fn server_side_apply_of_unnamed_tasks_keeps_the_tasks() {
    let (sandbox, _operator) = cluster();
    common::job_controls::server_side_apply_of_unnamed_tasks(&sandbox.kubectl(), "default");
}

#[test]
fn deadlines_fail_jobs_and_ttls_delete_finished_ones() {
    let (sandbox, _operator) = cluster();
    common::job_controls::deadline_and_ttl(&sandbox.kubectl(), "default");
}

#[test]
fn deleting_the_job_deletes_pods_and_service() {
    let (sandbox, _operator) = cluster();
    scenario::deleting_the_job_cascades(&sandbox.kubectl(), "default");
}

#[test]
fn invalid_jobs_fail_with_di_orchestrator_messages() {
    let (sandbox, _operator) = cluster();
    scenario::validation_cases(&sandbox.kubectl(), "default");
}

#[test]
fn sandbox_workers_finishing_by_annotation_complete_the_job() {
    // The demo's path: workers end on their own (simulated kubelet), not by status patches.
    let (sandbox, _operator) = cluster();
    let k = sandbox.kubectl().in_namespace("default");
    let manifest = scenario::standard_job("timed", "").replace(
        "    template:\n",
        "    template:\n      metadata:\n        annotations:\n          sandbox.diorch.io/exit-after: 2s\n",
    );
    scenario::apply(&k, &manifest);
    scenario::wait_phase(&k, "timed", "Running");
    scenario::wait_phase(&k, "timed", "Succeeded");
    // Template metadata reaches the pods (DI-orchestrator dropped it).
    let annotation = scenario::jsonpath(
        &k,
        "pod/timed-learner-0",
        "{.metadata.annotations.sandbox\\.diorch\\.io/exit-after}",
    );
    assert_eq!(annotation, "2s");
}

#[test]
fn operator_killed_mid_creation_and_restarted_leaves_exactly_the_right_pods() {
    let sandbox = SandboxProcess::start(&["--nodes", "8", "--node-pods", "200"]);
    let k = sandbox.kubectl();
    foundation::install_crd(&k);
    let k = k.in_namespace("default");
    let jobs = 30;
    let mut manifests = String::new();
    for i in 0..jobs {
        manifests.push_str(&scenario::standard_job(&format!("crash-{i}"), ""));
        manifests.push_str("---\n");
    }
    scenario::apply(&k, &manifests);
    // Kill the operator as soon as it has started creating pods, several times.
    for round in 0..3 {
        let operator = OperatorProcess::start(&sandbox.kubeconfig);
        let deadline = Instant::now() + Duration::from_secs(30);
        let before = count_pods(&k);
        while count_pods(&k) <= before && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        println!(
            "round {round}: killing the operator at {} pods",
            count_pods(&k)
        );
        operator.kill();
    }
    let _operator = OperatorProcess::start(&sandbox.kubeconfig);
    for i in 0..jobs {
        let job = format!("crash-{i}");
        scenario::wait_phase(&k, &job, "Running");
        let pods = scenario::pods(&k, &job);
        assert_eq!(pods.len(), 4, "{job}: {:?}", pods.keys());
        scenario::assert_ranks_consistent("default", &job, &pods);
        let counters = scenario::jsonpath(
            &k,
            &format!("dijob/{job}"),
            "{.status.restarts} {.status.reschedules}",
        );
        assert_eq!(counters, "0 0", "{job}: no phantom restart or reschedule");
    }
    // No pod was ever created twice under one name: every pod ever made is still there.
    let all = k.ok(&[
        "get",
        "pods",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}{\"\\n\"}{end}",
    ]);
    let names: Vec<&str> = all.lines().collect();
    let unique: BTreeSet<&str> = names.iter().copied().collect();
    assert_eq!(names.len(), unique.len());
    assert_eq!(names.len(), jobs * 4);
}

fn count_pods(k: &common::Kubectl) -> usize {
    k.ok(&["get", "pods", "-o", "name"]).lines().count()
}

/// `diorch replicas` names a bare job in the kubeconfig context's namespace, as kubectl does;
/// `--namespace` overrides it, and without a readable kubeconfig it is `default`. A one-shot
/// HTTP server records the path each call asks for.
#[test]
fn replicas_cli_takes_a_bare_name_in_the_kubeconfig_namespace() {
    use std::io::{BufRead, BufReader, Write};

    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
         clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n\
         users: [{name: u, user: {token: t}}]\n\
         contexts: [{name: c, context: {cluster: k, user: u, namespace: team-a}}]\n",
    )
    .expect("write kubeconfig");
    let asked = |kubeconfig: &std::path::Path, args: &[&str]| -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let server = format!("http://{}", listener.local_addr().expect("address"));
        let answer = std::thread::spawn(move || {
            let (stream, _) = listener.accept().expect("accept");
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut request_line = String::new();
            reader.read_line(&mut request_line).expect("request line");
            let mut line = String::new();
            while reader.read_line(&mut line).expect("header") > 2 {
                line.clear();
            }
            let body = r#"{"success":true,"code":0,"message":"ok","data":null}"#;
            let mut stream = stream;
            write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .expect("answer");
            request_line
        });
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_diorch"))
            .args(["replicas", "--server", &server])
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
            .expect("diorch replicas");
        assert!(out.status.success(), "{out:?}");
        answer.join().expect("server thread")
    };
    assert_eq!(
        asked(&kubeconfig, &["get", "j"]),
        "GET /v2alpha1/job/team-a.j/replicas HTTP/1.1\r\n"
    );
    assert_eq!(
        asked(&kubeconfig, &["-n", "other", "get", "j"]),
        "GET /v2alpha1/job/other.j/replicas HTTP/1.1\r\n"
    );
    assert_eq!(
        asked(&kubeconfig, &["get", "ns.j"]),
        "GET /v2alpha1/job/ns.j/replicas HTTP/1.1\r\n"
    );
    assert_eq!(
        asked(&dir.path().join("missing"), &["get", "j"]),
        "GET /v2alpha1/job/default.j/replicas HTTP/1.1\r\n"
    );
}
