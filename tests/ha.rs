//! Production operations of the real `diorch run` against the sandbox. Two `--leader-elect`
//! processes: exactly one reconciles; killing it hands the work to the other within the lease
//! duration, with no pod duplicated or lost; SIGTERM releases the lease and exits 0; a lost
//! lease stops the process. And what operators watch: JSON logs with the reconcile span, and
//! the metrics.

mod common;

use std::time::{Duration, Instant};

use common::controller::{self as scenario, OperatorProcess};
use common::{Kubectl, SandboxProcess, foundation};

const LEASE: &str = "4s";
const LEASE_DURATION: Duration = Duration::from_secs(4);

fn elected(sandbox: &SandboxProcess) -> OperatorProcess {
    OperatorProcess::start_with(
        &sandbox.kubeconfig,
        &[
            "--leader-elect",
            "--leader-election-namespace",
            "default",
            "--leader-elect-lease-duration",
            LEASE,
            "--leader-elect-renew-grace",
            "2s",
        ],
    )
}

fn leads(operator: &OperatorProcess) -> bool {
    operator
        .lines()
        .iter()
        .any(|l| l.contains("became the leader"))
}

fn holder(k: &Kubectl) -> String {
    k.ok(&[
        "get",
        "lease",
        "diorch-leader",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ])
}

/// Names and uids of the job's live pods.
fn pods(k: &Kubectl, job: &str) -> Vec<String> {
    scenario::pods(k, job)
        .into_iter()
        .map(|(name, pod)| format!("{name}={}", pod["metadata"]["uid"].as_str().unwrap_or("")))
        .collect()
}

fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < within, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    started.elapsed()
}

#[test]
fn one_leader_reconciles_a_standby_takes_over_and_sigterm_releases_the_lease() {
    let sandbox = SandboxProcess::start(&["--nodes", "4", "--pod-start-delay", "100ms"]);
    let k = sandbox.kubectl().in_namespace("default");
    foundation::install_crd(&k);
    let first = elected(&sandbox);
    let second = elected(&sandbox);
    wait_until("a leader", scenario::T, || leads(&first) || leads(&second));
    let (leader, standby) = if leads(&first) {
        (first, second)
    } else {
        (second, first)
    };
    assert!(!leads(&standby), "two leaders");

    // Only the leader reconciles.
    scenario::apply(&k, &scenario::standard_job("ha", ""));
    scenario::wait_phase(&k, "ha", "Running");
    let reconciled = |o: &OperatorProcess| {
        o.lines()
            .iter()
            .any(|l| l.contains("reconciled") && l.contains("job=default/ha"))
    };
    assert!(reconciled(&leader), "{:#?}", leader.lines());
    assert!(!reconciled(&standby), "{:#?}", standby.lines());
    let before = pods(&k, "ha");
    assert_eq!(before.len(), 4, "{before:?}");

    // The leader dies without releasing: the standby takes over once the lease expires.
    let held_by = holder(&k);
    leader.kill();
    let killed = Instant::now();
    wait_until("the standby to lead", LEASE_DURATION * 3, || {
        leads(&standby)
    });
    let takeover = killed.elapsed();
    println!("takeover after the leader was killed: {takeover:?} (lease {LEASE})");
    assert_ne!(holder(&k), held_by);
    // It reconciles what it inherited without touching the pods, and runs new work.
    scenario::apply(&k, &scenario::standard_job("after", ""));
    scenario::wait_phase(&k, "after", "Running");
    assert_eq!(pods(&k, "ha"), before, "pods were re-created or lost");
    assert_eq!(pods(&k, "after").len(), 4);
    assert!(
        standby
            .lines()
            .iter()
            .any(|l| l.contains("reconciled") && l.contains("job=default/after"))
    );

    // SIGTERM: in-flight work finishes, the lease is released, the process exits 0.
    let mut standby = standby;
    let status = standby
        .terminate(Duration::from_secs(20))
        .expect("exited within 20 s");
    assert!(status.success(), "{status:?}: {:#?}", standby.lines());
    assert!(
        standby
            .lines()
            .iter()
            .any(|l| l.contains("released the lease")),
        "{:#?}",
        standby.lines()
    );
    assert_eq!(holder(&k), "", "the lease is free for the next replica");
}

#[test]
fn a_leader_that_loses_its_lease_stops_at_once() {
    let sandbox = SandboxProcess::start(&["--nodes", "1"]);
    let k = sandbox.kubectl().in_namespace("default");
    foundation::install_crd(&k);
    let mut leader = elected(&sandbox);
    wait_until("a leader", scenario::T, || leads(&leader));
    // Another holder takes the lease (as a replica with a skewed clock, or an admin, could).
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    k.ok(&[
        "patch",
        "lease",
        "diorch-leader",
        "--type=merge",
        "-p",
        &format!(
            r#"{{"spec":{{"holderIdentity":"intruder","renewTime":"{now}","leaseDurationSeconds":60}}}}"#
        ),
    ]);
    let started = Instant::now();
    let mut status = None;
    while status.is_none() && started.elapsed() < LEASE_DURATION * 3 {
        status = leader.try_exit();
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = status.expect("the leader stopped");
    assert!(!status.success());
    assert!(
        leader
            .lines()
            .iter()
            .any(|l| l.contains("lost the leader lease; stopped so that no write follows")),
        "{:#?}",
        leader.lines()
    );
}

/// `GET /metrics` over a plain TCP connection.
fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to /metrics");
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut out = String::new();
    stream.read_to_string(&mut out).expect("response");
    out
}

#[test]
fn json_logs_carry_the_reconcile_span_and_metrics_show_leadership_and_phases() {
    let sandbox = SandboxProcess::start(&["--nodes", "4", "--pod-start-delay", "100ms"]);
    let k = sandbox.kubectl().in_namespace("default");
    foundation::install_crd(&k);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let addr = format!("127.0.0.1:{port}");
    let operator = OperatorProcess::start_with(
        &sandbox.kubeconfig,
        &[
            "--log-format",
            "json",
            "--metric-addr",
            &addr,
            "--leader-elect",
            "--leader-election-namespace",
            "default",
        ],
    );
    scenario::apply(&k, &scenario::standard_job("obs", ""));
    scenario::wait_phase(&k, "obs", "Running");
    let lines = operator.lines();
    let reconciled = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["fields"]["message"] == "reconciled" && v["span"]["job"] == "default/obs");
    let line = reconciled.unwrap_or_else(|| panic!("no JSON reconcile line: {lines:#?}"));
    assert_eq!(line["span"]["name"], "reconcile");
    assert_eq!(line["level"], "INFO");
    // Gauges refresh every few seconds.
    let mut metrics = String::new();
    wait_until("the jobs gauge", scenario::T, || {
        metrics = scrape(&addr);
        metrics.contains("diorch_jobs{phase=\"Running\"} 1")
    });
    for expected in [
        "diorch_leader 1",
        "diorch_jobs{phase=\"Failed\"} 0",
        "# TYPE diorch_reconciles_in_flight gauge",
        "diorch_reconciles_total{result=\"ok\"}",
    ] {
        assert!(
            metrics.contains(expected),
            "{expected} missing from:\n{metrics}"
        );
    }
}
