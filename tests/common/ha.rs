//! Production-operation scenarios of the real `diorch run`, written against a `Kubectl`, a
//! namespace and the kubeconfig the operators use, so the sandbox tests (`tests/operator/ha.rs`)
//! and the real-cluster e2e suite (`tests/e2e.rs`) share them: leader election between two
//! `--leader-elect` processes, and the RBAC check (every API call the operator makes through a
//! set of scenarios, compared with `tests/common/rbac.rs`).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use super::Kubectl;
use super::allocation;
use super::controller::{self as scenario, OperatorProcess};

/// The lease the election tests use: short, so a takeover is quick.
pub const LEASE: &str = "4s";
pub const LEASE_DURATION: Duration = Duration::from_secs(4);

/// kube-lease-manager's largest wait (random, 0.1 to 1 s) between force-releasing an expired
/// lease and taking it, so two standbys rarely collide.
const RELEASE_WAIT: Duration = Duration::from_secs(1);

/// Room for process scheduling and API round trips on a loaded machine (CI runs 2 cores with a
/// CPU hog beside the tests): never what a bound is made of, only added to one.
const SCHEDULING_ALLOWANCE: Duration = Duration::from_secs(10);

/// How long after the leader's death a standby leads at most: the dead leader last renewed at
/// most a lease duration before its lease expires, the standby sleeps until that expiry, then
/// force-releases the lease and waits up to `RELEASE_WAIT` before it takes it.
pub const TAKEOVER_BOUND: Duration = Duration::from_secs(
    LEASE_DURATION.as_secs() + RELEASE_WAIT.as_secs() + SCHEDULING_ALLOWANCE.as_secs(),
);

/// `diorch run --leader-elect` with the short lease, its Lease in `lease_namespace`.
pub fn elected(kubeconfig: &Path, lease_namespace: &str) -> OperatorProcess {
    elected_with(kubeconfig, lease_namespace, LEASE)
}

/// `diorch run --leader-elect` with a lease of `lease` (renewed 2 s before it expires).
pub fn elected_with(kubeconfig: &Path, lease_namespace: &str, lease: &str) -> OperatorProcess {
    OperatorProcess::start_with(
        kubeconfig,
        &[
            "--leader-elect",
            "--leader-election-namespace",
            lease_namespace,
            "--leader-elect-lease-duration",
            lease,
            "--leader-elect-renew-grace",
            "2s",
        ],
    )
}

pub fn leads(operator: &OperatorProcess) -> bool {
    operator
        .lines()
        .iter()
        .any(|l| l.contains("became the leader"))
}

/// The identity the operator logged when it became the leader.
fn identity(operator: &OperatorProcess) -> Option<String> {
    operator.lines().iter().find_map(|l| {
        l.contains("became the leader")
            .then(|| l.split("identity=").nth(1))
            .flatten()
            .and_then(|rest| rest.split_whitespace().next())
            .map(|id| id.trim_matches('"').to_string())
    })
}

/// `spec.holderIdentity` of the Lease (empty once released). `k` is in the lease's namespace.
pub fn holder(k: &Kubectl) -> String {
    k.ok(&[
        "get",
        "lease",
        "diorch-leader",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ])
}

/// Names and uids of the job's live pods.
pub fn pods(k: &Kubectl, job: &str) -> Vec<String> {
    scenario::pods(k, job)
        .into_iter()
        .map(|(name, pod)| format!("{name}={}", pod["metadata"]["uid"].as_str().unwrap_or("")))
        .collect()
}

/// `127.0.0.1:<a port free now>`, for an operator's metrics endpoint.
pub fn free_local_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    format!("127.0.0.1:{port}")
}

/// Polls `done` every 50 ms; fails after `within`. Returns how long it took.
pub fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < within, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    started.elapsed()
}

/// `GET /metrics` over a plain TCP connection.
pub fn scrape(addr: &str) -> String {
    scrape_as(addr, None)
}

/// `GET /metrics` with an optional bearer token (needed unless `--server-auth none`); fails
/// unless the answer is 200.
pub fn scrape_as(addr: &str, token: Option<&str>) -> String {
    use std::io::{Read, Write};
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to /metrics");
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )
    .expect("request");
    let mut out = String::new();
    stream.read_to_string(&mut out).expect("response");
    assert!(
        out.starts_with("HTTP/1.1 200"),
        "GET /metrics: {}",
        out.lines().take(3).collect::<Vec<_>>().join(" | ")
    );
    out
}

/// Two `--leader-elect` operators with their Lease in `ns`, where the job runs: exactly one
/// leads and reconciles; killing it (SIGKILL, no release) hands the work to the other within
/// [`TAKEOVER_BOUND`], with the pods it made unchanged (same names and uids: none duplicated or
/// lost); SIGTERM then stops leading, drains, releases the lease (holder cleared) and exits 0.
pub fn one_leader_reconciles_a_standby_takes_over_and_sigterm_releases_the_lease(
    k: &Kubectl,
    ns: &str,
    kubeconfig: &Path,
) {
    let k = k.in_namespace(ns);
    let first = elected(kubeconfig, ns);
    let second = elected(kubeconfig, ns);
    wait_until("a leader", scenario::T, || leads(&first) || leads(&second));
    let (leader, standby) = if leads(&first) {
        (first, second)
    } else {
        (second, first)
    };
    assert!(!leads(&standby), "two leaders");
    assert_eq!(
        Some(holder(&k)),
        identity(&leader),
        "the Lease names the leader"
    );

    // Only the leader reconciles.
    scenario::apply(&k, &scenario::standard_job("ha", ""));
    scenario::wait_phase(&k, "ha", "Running");
    let reconciled = |o: &OperatorProcess, job: &str| {
        let span = format!("job={ns}/{job}");
        o.lines()
            .iter()
            .any(|l| l.contains("reconciled") && l.contains(&span))
    };
    assert!(reconciled(&leader, "ha"), "{:#?}", leader.lines());
    assert!(!reconciled(&standby, "ha"), "{:#?}", standby.lines());
    assert!(!leads(&standby), "two leaders");
    let before = pods(&k, "ha");
    assert_eq!(before.len(), 4, "{before:?}");

    // The leader dies without releasing: the standby takes over once the lease expires.
    let held_by = holder(&k);
    leader.kill();
    let killed = Instant::now();
    wait_until("the standby to lead", TAKEOVER_BOUND, || leads(&standby));
    let takeover = killed.elapsed();
    println!("takeover after the leader was killed: {takeover:?} (lease {LEASE})");
    assert_ne!(holder(&k), held_by);
    // It reconciles what it inherited without touching the pods, and runs new work.
    scenario::apply(&k, &scenario::standard_job("after", ""));
    scenario::wait_phase(&k, "after", "Running");
    assert_eq!(pods(&k, "ha"), before, "pods were re-created or lost");
    assert_eq!(pods(&k, "after").len(), 4);
    assert!(reconciled(&standby, "after"), "{:#?}", standby.lines());

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

/// A leader whose Lease another holder takes (as a replica with a skewed clock, or an admin,
/// could) stops with a non-zero exit and says why. `lease` is its lease duration (the renewal
/// comes 2 s before it ends). Returns how long after the change it stopped, and whether its
/// watch of the Lease noticed (rather than its own next renewal).
pub fn a_leader_that_loses_its_lease_stops(
    k: &Kubectl,
    ns: &str,
    kubeconfig: &Path,
    lease: Duration,
) -> (Duration, bool) {
    let k = k.in_namespace(ns);
    let mut leader = elected_with(kubeconfig, ns, &format!("{}s", lease.as_secs()));
    wait_until("a leader", scenario::T, || leads(&leader));
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
    // At the latest its own renewal, at most a lease duration later, finds the other holder.
    while status.is_none() && started.elapsed() < lease + SCHEDULING_ALLOWANCE {
        status = leader.try_exit();
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = status.unwrap_or_else(|| panic!("the leader went on: {:#?}", leader.lines()));
    let stopped = started.elapsed();
    let lines = leader.lines();
    let by_watch = lines
        .iter()
        .any(|l| l.contains("lost the lease; stopping") && l.contains("another replica holds"));
    println!(
        "the leader stopped {stopped:?} after another holder took its lease (noticed by {})",
        if by_watch { "its watch" } else { "its renewal" }
    );
    assert!(!status.success());
    assert!(
        lines
            .iter()
            .any(|l| l.contains("lost the leader lease; stopped so that no write follows")),
        "{lines:#?}"
    );
    (stopped, by_watch)
}

/// One kind of API call the operator's audit layer counted: (group, resource, verb).
pub type ApiCall = (String, String, String);

fn label(line: &str, name: &str) -> String {
    line.split(&format!("{name}=\""))
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_default()
        .to_string()
}

/// The `diorch_kube_api_requests_total` series of a scrape, as (call, status code).
pub fn api_responses(metrics: &str) -> Vec<(ApiCall, String)> {
    metrics
        .lines()
        .filter(|l| l.starts_with("diorch_kube_api_requests_total{"))
        .map(|l| {
            let call = (label(l, "group"), label(l, "resource"), label(l, "verb"));
            (call, label(l, "code"))
        })
        .collect()
}

/// The operator's API calls that name a resource, whatever they answered.
pub fn api_calls(metrics: &str) -> BTreeSet<ApiCall> {
    api_responses(metrics)
        .into_iter()
        .map(|(call, _)| call)
        .filter(|(_, resource, _)| !resource.is_empty())
        .collect()
}

/// Drives the operator through the scenarios that exercise most of its API surface: a policy
/// plugin loads from `plugin_ns` (status labels, Event) and places a preemptible GPU job; the
/// replica API scales a preemptible job (authenticated with `token` when the operator checks
/// callers); a job is scaled up and down by editing it. Needs 4 nodes with 4 free
/// `nvidia.com/gpu` each; the jobs run in `ns`, each removed before the next.
pub fn exercise_the_api_surface(
    k: &Kubectl,
    ns: &str,
    plugin_ns: &str,
    api: &str,
    token: Option<&str>,
) {
    let clear = || {
        let k = k.in_namespace(ns);
        k.ok(&["delete", "dijobs", "--all", "--wait=true"]);
        wait_until("the pods to go", scenario::T, || {
            k.ok(&["get", "pods", "-o", "name"]).trim().is_empty()
        });
    };
    let (jobs, plugins) = (k.in_namespace(ns), k.in_namespace(plugin_ns));
    allocation::upload(
        &plugins,
        &allocation::plugin_file("spread"),
        "team",
        "policy",
        &[],
    );
    allocation::wait_event(&plugins, "ConfigMap", "plugin-team", "PluginLoaded", 1);
    scenario::apply(&jobs, &allocation::gpu_job("spread", "team", 4, 1));
    allocation::wait_allocated(&jobs, "spread", "True");
    scenario::wait_phase(&jobs, "spread", "Running");
    clear();
    allocation::replica_api_scales_a_preemptible_job_as(k, ns, api, token);
    clear();
    scenario::scales_up_and_down(k, ns);
}

/// The calls [`exercise_the_api_surface`] must make: seeing them shows the audit counted the
/// operator's calls, so comparing them with the RBAC table means something.
pub const EXERCISED: &[(&str, &str, &str)] = &[
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
];

/// Every call in `calls` is granted by `tests/common/rbac.rs` (which a unit test keeps equal to
/// `deploy/base/rbac.yaml`), and every call of [`EXERCISED`] and `also_expected` was made.
pub fn assert_calls_granted_and_seen(
    calls: &BTreeSet<ApiCall>,
    also_expected: &[(&str, &str, &str)],
) {
    let granted: BTreeSet<ApiCall> = super::rbac::PERMISSIONS
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
        "calls a cluster would refuse (add them to tests/common/rbac.rs and deploy/base/rbac.yaml): {refused:?}"
    );
    let unexercised: Vec<_> = granted.difference(calls).collect();
    println!("granted, not exercised by these scenarios: {unexercised:?}");
    for (group, resource, verb) in EXERCISED.iter().chain(also_expected) {
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
