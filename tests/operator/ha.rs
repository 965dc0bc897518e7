//! Production operations of the real `diorch run` against the sandbox. Two `--leader-elect`
//! processes: exactly one reconciles; killing it hands the work to the other within the lease
//! duration, with no pod duplicated or lost; SIGTERM releases the lease and exits 0; a lost
//! lease stops the process, and a leader cut off from the API server stops before a standby
//! can take over. And what operators watch: JSON logs with the reconcile span, and the metrics.

use crate::common;

use std::time::{Duration, Instant};

use common::controller::{self as scenario, OperatorProcess};
use common::ha::{
    LEASE, LEASE_DURATION, api_calls, elected, free_local_addr, leads, scrape, wait_until,
};
use common::{Kubectl, SandboxProcess, allocation, foundation, ha};

/// A sandbox started with `args`, the DIJob CRD installed, and kubectl in `default`.
fn sandbox_with_crd(args: &[&str]) -> (SandboxProcess, Kubectl) {
    let sandbox = SandboxProcess::start(args);
    let k = sandbox.kubectl().in_namespace("default");
    foundation::install_crd(&k);
    (sandbox, k)
}

#[test]
fn one_leader_reconciles_a_standby_takes_over_and_sigterm_releases_the_lease() {
    let (sandbox, k) = sandbox_with_crd(&["--nodes", "4", "--pod-start-delay", "100ms"]);
    ha::one_leader_reconciles_a_standby_takes_over_and_sigterm_releases_the_lease(
        &k,
        "default",
        &sandbox.kubeconfig,
    );
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
    // A long lease, so its next renewal is 58 s after it became the leader: the watch of the
    // Lease must be what notices, long before that (a bound of half the renewal period holds
    // on a loaded machine; the log says which mechanism stopped it).
    let lease = Duration::from_secs(60);
    let (stopped, by_watch) =
        ha::a_leader_that_loses_its_lease_stops(&k, "default", &sandbox.kubeconfig, lease);
    assert!(
        by_watch,
        "the renewal, not the watch, noticed the other holder"
    );
    assert!(
        stopped < (lease - Duration::from_secs(2)) / 2,
        "{stopped:?}"
    );
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
    let mut leader = elected(&kubeconfig, "default");
    wait_until("a leader", scenario::T, || leads(&leader));
    let standby = elected(&sandbox.kubeconfig, "default");
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

/// The RBAC check that needs no reading of the code: run the operator through the controller,
/// allocator, replica API, plugin watcher and leader election scenarios, and compare every API
/// call its client made with `tests/common/rbac.rs` (which a unit test keeps equal to
/// `deploy/base/rbac.yaml`). `tests/e2e.rs` runs the same scenarios on a real API server with
/// the operator holding only those rights.
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
    ha::exercise_the_api_surface(&k, "default", "default", &operator.api_url(), None);
    ha::assert_calls_granted_and_seen(&api_calls(&scrape(&addr)), &[]);
}

/// `diorch_reconcile_queue_depth`: with one worker held, jobs submitted together wait in the
/// queue; once the worker is free and all run, nothing waits (no trigger is counted and never
/// taken out).
///
/// The worker is held by a mutator that loops on pods of rank 1 and above until its deadline,
/// so every reconcile of a new job takes at least that deadline and the queue fills whatever the
/// machine's speed. Timing alone (ten quick reconciles against a 5 ms scrape) was not enough on
/// a loaded CI machine.
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
    allocation::upload(
        &k,
        &allocation::plugin_file("hostile_mutator"),
        "hold",
        "mutator",
        &["--config", "later:loop", "--deadline-ms", "1000"],
    );
    allocation::wait_event(&k, "ConfigMap", "plugin-hold", "PluginLoaded", 1);
    let jobs: Vec<String> = (0..10)
        .map(|i| scenario::standard_job(&format!("q{i}"), ""))
        .collect();
    scenario::apply(&k, &jobs.join("\n---\n"));
    let mut deepest = 0;
    wait_until("jobs to wait for the held worker", scenario::T, || {
        deepest = deepest.max(depth());
        deepest >= 2
    });
    println!("deepest reconcile queue seen: {deepest}");
    k.ok(&["delete", "configmap", "plugin-hold"]);
    for i in 0..10 {
        scenario::wait_phase(&k, &format!("q{i}"), "Running");
    }
    wait_until("the queue to drain", scenario::T, || depth() == 0);
}
