//! Production operations of the real `diorch run` against the sandbox. Two `--leader-elect`
//! processes: exactly one reconciles; killing it hands the work to the other within the lease
//! duration, with no pod duplicated or lost; SIGTERM releases the lease and exits 0; a lost
//! lease stops the process, and a leader cut off from the API server stops before a standby
//! can take over. And what operators watch: JSON logs with the reconcile span, and the metrics.

mod common;

use std::time::{Duration, Instant};

use common::controller::{self as scenario, OperatorProcess};
use common::{Kubectl, SandboxProcess, allocation, foundation};

const LEASE: &str = "4s";
const LEASE_DURATION: Duration = Duration::from_secs(4);

fn elected(sandbox: &SandboxProcess) -> OperatorProcess {
    elected_via(&sandbox.kubeconfig)
}

fn elected_via(kubeconfig: &std::path::Path) -> OperatorProcess {
    OperatorProcess::start_with(
        kubeconfig,
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

/// A sandbox started with `args`, the DIJob CRD installed, and kubectl in `default`.
fn sandbox_with_crd(args: &[&str]) -> (SandboxProcess, Kubectl) {
    let sandbox = SandboxProcess::start(args);
    let k = sandbox.kubectl().in_namespace("default");
    foundation::install_crd(&k);
    (sandbox, k)
}

/// `127.0.0.1:<a port free now>`, for an operator's metrics endpoint.
fn free_local_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    format!("127.0.0.1:{port}")
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
    let (sandbox, k) = sandbox_with_crd(&["--nodes", "4", "--pod-start-delay", "100ms"]);
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
    // It stopped leading before it drained, and released the lease after.
    let lines = standby.lines();
    let at = |what: &str| lines.iter().position(|l| l.contains(what));
    let (stepped_down, released) = (
        at("stopped leading; finishing in-flight reconciles"),
        at("released the lease"),
    );
    assert!(
        stepped_down.is_some() && released.is_some() && stepped_down < released,
        "{lines:#?}"
    );
    assert_eq!(holder(&k), "", "the lease is free for the next replica");
}

/// A plugin uploaded while no replica leads is loaded by the standby, which may not write its
/// status then; once it leads it writes it, without waiting for the ConfigMap's next change.
#[test]
fn a_standby_that_takes_over_writes_the_plugin_status_it_could_not_write() {
    let (sandbox, k) = sandbox_with_crd(&["--nodes", "2"]);
    // A longer lease than the other tests': the upload must load before the standby leads.
    let elect = || {
        OperatorProcess::start_with(
            &sandbox.kubeconfig,
            &[
                "--leader-elect",
                "--leader-election-namespace",
                "default",
                "--leader-elect-lease-duration",
                "10s",
                "--leader-elect-renew-grace",
                "2s",
            ],
        )
    };
    let (first, second) = (elect(), elect());
    wait_until("a leader", scenario::T, || leads(&first) || leads(&second));
    let (leader, standby) = if leads(&first) {
        (first, second)
    } else {
        (second, first)
    };
    leader.kill();
    allocation::upload(
        &k,
        &allocation::plugin_file("binpack"),
        "packer",
        "policy",
        &[],
    );
    let loaded = |o: &OperatorProcess| {
        o.lines()
            .iter()
            .position(|l| l.contains("plugin loaded") && l.contains("plugin=packer"))
    };
    wait_until("the standby to load the upload", scenario::T, || {
        loaded(&standby).is_some()
    });
    let state = || {
        k.ok(&[
            "get",
            "configmap",
            "plugin-packer",
            "-o",
            "jsonpath={.metadata.labels.diorch\\.io/plugin-state}",
        ])
    };
    let led_at = || {
        standby
            .lines()
            .iter()
            .position(|l| l.contains("became the leader"))
    };
    assert!(
        led_at().is_none(),
        "the standby led before the upload loaded; this test needs a longer lease"
    );
    assert_eq!(state(), "", "a standby wrote the status");
    wait_until("the standby to lead", Duration::from_secs(30), || {
        led_at().is_some()
    });
    wait_until("the status on the ConfigMap", scenario::T, || {
        state() == "Loaded"
    });
}

#[test]
fn a_leader_that_loses_its_lease_stops_at_once() {
    let (sandbox, k) = sandbox_with_crd(&["--nodes", "1"]);
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
    let stopped = started.elapsed();
    println!("the leader stopped {stopped:?} after another holder took its lease");
    // It watches its Lease: it need not wait for its next renewal (2 s here) to notice.
    assert!(stopped < Duration::from_millis(1500), "{stopped:?}");
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
    let (sandbox, k) = sandbox_with_crd(&["--nodes", "4", "--pod-start-delay", "100ms"]);
    let addr = free_local_addr();
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

/// A TCP forwarder to the sandbox that can be cut, as a network partition cuts one replica off
/// the API server while the others still reach it.
struct Partition {
    addr: std::net::SocketAddr,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    open: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl Partition {
    fn forward_to(target: &str) -> Partition {
        use std::net::{TcpListener, TcpStream};
        use std::sync::atomic::Ordering;
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the forwarder");
        let addr = listener.local_addr().expect("forwarder address");
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let open = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (target, is_cut, conns) = (target.to_string(), cut.clone(), open.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                if is_cut.load(Ordering::SeqCst) {
                    continue; // dropped: the connection closes at once
                }
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                let mut sockets = conns.lock().expect("connections");
                for (mut from, mut to) in [
                    (client.try_clone(), server.try_clone()),
                    (server.try_clone(), client.try_clone()),
                ]
                .into_iter()
                .filter_map(|(a, b)| Some((a.ok()?, b.ok()?)))
                {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
                sockets.extend([client, server]);
            }
        });
        Partition { addr, cut, open }
    }

    /// From now on nothing gets through: open connections are closed, new ones refused.
    fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        for socket in self.open.lock().expect("connections").drain(..) {
            let _ = socket.shutdown(std::net::Shutdown::Both);
        }
    }
}

#[test]
fn a_leader_cut_off_from_the_api_server_stops_before_a_standby_takes_over() {
    let (sandbox, _) = sandbox_with_crd(&["--nodes", "1"]);
    let server = sandbox
        .server_url
        .trim_start_matches("http://")
        .trim_end_matches('/');
    let partition = Partition::forward_to(server);
    let kubeconfig = sandbox.dir.path().join("through-the-partition.kubeconfig");
    let text = std::fs::read_to_string(&sandbox.kubeconfig).expect("kubeconfig");
    assert!(text.contains(server), "{text}");
    std::fs::write(
        &kubeconfig,
        text.replace(server, &partition.addr.to_string()),
    )
    .expect("write kubeconfig");
    let mut leader = elected_via(&kubeconfig);
    wait_until("a leader", scenario::T, || leads(&leader));
    let standby = elected(&sandbox);
    wait_until("the standby to wait", scenario::T, || {
        standby
            .lines()
            .iter()
            .any(|l| l.contains("waiting to lead"))
    });

    partition.cut();
    let cut = Instant::now();
    let (mut stopped, mut took_over) = (None, None);
    while (stopped.is_none() || took_over.is_none()) && cut.elapsed() < LEASE_DURATION * 4 {
        if stopped.is_none() && leader.try_exit().is_some() {
            stopped = Some(cut.elapsed());
        }
        if took_over.is_none() && leads(&standby) {
            took_over = Some(cut.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let stopped =
        stopped.unwrap_or_else(|| panic!("the cut-off leader went on: {:#?}", leader.lines()));
    let took_over = took_over.unwrap_or_else(|| panic!("no takeover: {:#?}", standby.lines()));
    println!(
        "cut off: the leader stopped after {stopped:?}, the standby led after {took_over:?} (lease {LEASE})"
    );
    assert!(
        stopped < took_over,
        "two leaders: the cut-off one stopped at {stopped:?}, the standby led at {took_over:?}"
    );
    assert!(stopped < LEASE_DURATION, "{stopped:?}");
    assert!(
        leader
            .lines()
            .iter()
            .any(|l| l.contains("the lease was not renewed in time")),
        "{:#?}",
        leader.lines()
    );
}

/// The operator's API calls as its audit layer counted them: (group, resource, verb) of every
/// `diorch_kube_api_requests_total` series that names a resource.
fn api_calls(metrics: &str) -> std::collections::BTreeSet<(String, String, String)> {
    let label = |line: &str, name: &str| -> String {
        line.split(&format!("{name}=\""))
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or_default()
            .to_string()
    };
    metrics
        .lines()
        .filter(|l| l.starts_with("diorch_kube_api_requests_total{"))
        .map(|l| (label(l, "group"), label(l, "resource"), label(l, "verb")))
        .filter(|(_, resource, _)| !resource.is_empty())
        .collect()
}

/// The RBAC check that needs no reading of the code: run the operator through the controller,
/// allocator, replica API, plugin watcher and leader election scenarios, and compare every API
/// call its client made with `src/rbac.rs` (which a unit test keeps equal to
/// `deploy/base/rbac.yaml`).
#[test]
fn every_api_call_the_operator_makes_is_granted_by_the_rbac_manifest() {
    let sandbox = allocation::gpu_sandbox();
    let k = sandbox.kubectl();
    let addr = free_local_addr();
    let operator = OperatorProcess::start_with(
        &sandbox.kubeconfig,
        &[
            "--metric-addr",
            &addr,
            "--leader-elect",
            "--leader-election-namespace",
            "default",
        ],
    );
    let clear = |ns: &str| {
        k.in_namespace(ns)
            .ok(&["delete", "dijobs", "--all", "--wait=true"]);
        wait_until("the pods to go", scenario::T, || {
            k.in_namespace(ns)
                .ok(&["get", "pods", "-o", "name"])
                .trim()
                .is_empty()
        });
    };
    // A policy plugin loads (status labels, Event) and places a preemptible job.
    let d = k.in_namespace("default");
    allocation::upload(
        &d,
        &allocation::plugin_file("spread"),
        "team",
        "policy",
        &[],
    );
    allocation::wait_event(&d, "ConfigMap", "plugin-team", "PluginLoaded", 1);
    scenario::apply(&d, &allocation::gpu_job("spread", "team", 4, 1));
    allocation::wait_allocated(&d, "spread", "True");
    scenario::wait_phase(&d, "spread", "Running");
    clear("default");
    allocation::replica_api_scales_a_preemptible_job(&k, "default", &operator.api_url());
    clear("default");
    scenario::scales_up_and_down(&k, "default");

    let calls = api_calls(&scrape(&addr));
    let granted: std::collections::BTreeSet<(String, String, String)> = diorch::rbac::PERMISSIONS
        .iter()
        .flat_map(|p| {
            p.verbs
                .iter()
                .map(|v| (p.group.to_string(), p.resource.to_string(), v.to_string()))
        })
        .collect();
    let refused: Vec<_> = calls.difference(&granted).collect();
    assert!(
        refused.is_empty(),
        "calls a cluster would refuse (add them to src/rbac.rs and deploy/base/rbac.yaml): {refused:?}"
    );
    let unexercised: Vec<_> = granted.difference(&calls).collect();
    println!("granted, not exercised by these scenarios: {unexercised:?}");
    // The audit saw the calls these scenarios must make (so the comparison means something).
    for (group, resource, verb) in [
        ("", "pods", "create"),
        ("", "pods", "delete"),
        ("", "pods", "watch"),
        ("", "services", "create"),
        ("", "nodes", "watch"),
        ("", "configmaps", "watch"),
        ("", "configmaps", "patch"),
        ("diengine.opendilab.org", "dijobs", "watch"),
        ("events.k8s.io", "events", "create"),
        ("coordination.k8s.io", "leases", "patch"),
        ("coordination.k8s.io", "leases", "watch"),
    ] {
        let call = (group.to_string(), resource.to_string(), verb.to_string());
        assert!(calls.contains(&call), "{call:?} not seen in {calls:?}");
    }
    assert!(
        calls
            .iter()
            .any(|(g, r, _)| g == "diengine.opendilab.org" && r == "dijobs/status"),
        "{calls:?}"
    );
}

/// `diorch_reconcile_queue_depth`: with one worker, jobs submitted together wait in the queue;
/// once all run, nothing waits (no trigger is counted and never taken out).
#[test]
fn the_reconcile_queue_fills_while_jobs_wait_for_a_worker_and_drains() {
    let (sandbox, k) = sandbox_with_crd(&["--nodes", "4", "--pod-start-delay", "100ms"]);
    let addr = free_local_addr();
    let _operator = OperatorProcess::start_with(
        &sandbox.kubeconfig,
        &["--metric-addr", &addr, "--concurrency", "1"],
    );
    let depth = || -> i64 {
        scrape(&addr)
            .lines()
            .find_map(|l| l.strip_prefix("diorch_reconcile_queue_depth "))
            .and_then(|v| v.trim().parse().ok())
            .expect("diorch_reconcile_queue_depth")
    };
    wait_until("the operator to serve metrics", scenario::T, || {
        std::net::TcpStream::connect(&addr).is_ok()
    });
    assert_eq!(depth(), 0);
    let jobs: Vec<String> = (0..10)
        .map(|i| scenario::standard_job(&format!("q{i}"), ""))
        .collect();
    scenario::apply(&k, &jobs.join("\n---\n"));
    let mut deepest = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        deepest = deepest.max(depth());
        std::thread::sleep(Duration::from_millis(5));
    }
    for i in 0..10 {
        scenario::wait_phase(&k, &format!("q{i}"), "Running");
    }
    println!("deepest reconcile queue seen: {deepest}");
    assert!(deepest >= 2, "the queue never held jobs: {deepest}");
    wait_until("the queue to drain", scenario::T, || depth() == 0);
}
