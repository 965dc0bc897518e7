//! End-to-end suite against a real Kubernetes cluster: the same scenarios as the sandbox
//! integration tests. Every test is `#[ignore]`d, so a plain `cargo test` reports them as
//! ignored (never as passed); run them with
//!
//! ```sh
//! DIORCH_E2E_KUBECONFIG=path/to/kubeconfig cargo test --test e2e -- --include-ignored --test-threads=1
//! ```
//!
//! (`scripts/e2e.sh` does that against the control plane in `../shared/kube`, with
//! `diorch-sandbox serve --attach` playing 4 nodes of 8 GPUs.) A test run without what it needs fails
//! and says how to skip it. The suite installs `crds/` itself, works in its own namespaces, and
//! deletes them at the end. One test at a time (`--test-threads=1`): the admission test
//! registers cluster-wide webhooks while it runs.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a panic is its report

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::allocation;
use common::controller::{self as scenario, OperatorProcess};
use common::{Kubectl, api, foundation, ha, job_controls, kubelet, migration, webhook};

/// The kubeconfig and a scratch directory; fails when DIORCH_E2E_KUBECONFIG is not set, since
/// this only runs when asked for with `--include-ignored`.
fn target() -> (PathBuf, tempfile::TempDir) {
    let Some(path) = std::env::var_os("DIORCH_E2E_KUBECONFIG") else {
        panic!(
            "the real-cluster e2e suite needs DIORCH_E2E_KUBECONFIG set to a kubeconfig (or run scripts/e2e.sh, which starts ../shared/kube)"
        );
    };
    (PathBuf::from(path), tempfile::tempdir().expect("tempdir"))
}

/// Fails unless the environment variable `var` is set: the test needs what it promises.
fn require(var: &str, what: &str, test: &str) {
    assert!(
        std::env::var_os(var).is_some(),
        "{test} needs {what}: set {var}=1 once the cluster has it, or run with --skip {test}"
    );
}

/// One `diorch run` at a time: two would both reconcile every DIJob of the cluster.
static ONE_OPERATOR: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Deletes the scenario namespace even when an assertion fails, and waits until it is gone:
/// the nodes are shared, and the next scenario must find them free (its pods are stopped
/// gracefully by the kubelet first).
struct NamespaceGuard<'a>(&'a Kubectl, &'a str);

impl Drop for NamespaceGuard<'_> {
    fn drop(&mut self) {
        let _ = self.0.run(&[
            "delete",
            "namespace",
            self.1,
            "--wait=true",
            "--timeout=180s",
        ]);
    }
}

/// `foundation::install_crd`, once the API server reports the CRD's conditions: right after a
/// create, kube-apiserver serves it without `status.conditions`, and `kubectl wait` fails
/// instead of waiting on such an object.
/// True when scripts/build-lang-plugins.sh built the Python and JS components; else says the
/// part was skipped (the toolchains could not be installed here).
fn languages_built(what: &str) -> bool {
    let skipped = common::repo_root().join("target/lang/SKIPPED");
    match std::fs::read_to_string(skipped) {
        Ok(why) => {
            println!("SKIPPED {what}: {}", why.trim());
            false
        }
        Err(_) => true,
    }
}

fn install_crd(k: &Kubectl) {
    let crds = common::repo_root().join("crds");
    k.ok(&["apply", "-f", crds.to_str().expect("utf-8 path")]);
    k.wait_for(
        &[
            "get",
            "customresourcedefinition",
            "dijobs.diengine.opendilab.org",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Established\")].status}",
        ],
        Duration::from_secs(60),
        |out| out == "True",
    );
    foundation::install_crd(k);
}

#[test]
#[ignore = "needs a real cluster: set DIORCH_E2E_KUBECONFIG and run with --include-ignored (scripts/e2e.sh)"]
fn e2e_foundation() {
    let (kubeconfig, scratch) = target();
    let k = Kubectl::new(&kubeconfig, scratch.path());
    let ns = format!("diorch-e2e-{}", std::process::id());
    install_crd(&k);
    foundation::create_namespace(&k, &ns);
    let _guard = NamespaceGuard(&k, &ns);
    foundation::samples_apply_and_print_columns(&k, &ns);
    foundation::invalid_dijobs_are_refused(&k, &ns);
    foundation::status_subresource_split(&k, &ns);
    foundation::owner_deletion_cascades(&k, &ns);
}

/// Graceful deletion on a real API server, with the nodes played by `diorch-sandbox serve --attach`
/// (the scenario scripts its pods with `sandbox.diorch.io/*` annotations): the behaviour the
/// in-process sandbox must match (`tests/operator/sandbox_cli.rs`).
#[test]
#[ignore = "needs a real cluster: set DIORCH_E2E_KUBECONFIG and run with --include-ignored (scripts/e2e.sh)"]
fn e2e_sandbox_kubelet() {
    let (kubeconfig, scratch) = target();
    require(
        "DIORCH_E2E_SANDBOX_NODES",
        "nodes played by `diorch-sandbox serve --attach`",
        "e2e_sandbox_kubelet",
    );
    let k = Kubectl::new(&kubeconfig, scratch.path());
    let ns = format!("diorch-e2e-kubelet-{}", std::process::id());
    foundation::create_namespace(&k, &ns);
    let _guard = NamespaceGuard(&k, &ns);
    kubelet::graceful_deletion(&k, &ns);
}

/// The controller scenarios against the real cluster, with `diorch run` started here against it.
/// The scenarios end pods through the pod status subresource, so they need no kubelet that
/// follows sandbox annotations.
type Scenario = fn(&Kubectl, &str);

#[test]
#[ignore = "needs a real cluster: set DIORCH_E2E_KUBECONFIG and run with --include-ignored (scripts/e2e.sh)"]
fn e2e_controller() {
    let (kubeconfig, scratch) = target();
    let k = Kubectl::new(&kubeconfig, scratch.path());
    install_crd(&k);
    let _one = ONE_OPERATOR.lock().unwrap_or_else(|e| e.into_inner());
    let _operator = OperatorProcess::start(&kubeconfig);
    let scenarios: [(&str, Scenario); 13] = [
        ("lifecycle", scenario::runs_to_success),
        ("backoff", scenario::failing_worker_restarts_then_fails),
        ("cleanup", scenario::clean_pod_policies),
        ("selfheal", scenario::hand_deleted_pod_comes_back_once),
        ("scaling", scenario::scales_up_and_down),
        ("rolling", scenario::template_edit_rolls_pods),
        ("cascade", scenario::deleting_the_job_cascades),
        ("validation", scenario::validation_cases),
        ("fieldmanager", writes_name_their_field_manager),
        ("suspend", job_controls::suspend_and_resume),
        ("deadline", job_controls::deadline_and_ttl),
        ("restartpolicy", job_controls::restart_policies),
        (
            "serversideapply",
            job_controls::server_side_apply_of_unnamed_tasks,
        ),
    ];
    for (name, run) in scenarios {
        let ns = format!("diorch-e2e-{name}-{}", std::process::id());
        foundation::create_namespace(&k, &ns);
        let _guard = NamespaceGuard(&k, &ns);
        println!("e2e_controller: scenario {name}");
        run(&k, &ns);
        println!("e2e_controller: scenario {name} passed");
    }
}

/// Deletes a cluster-scoped object a scenario made (a CRD, a namespace) even when an assertion
/// fails, so the next run finds the cluster clean.
struct ClusterObjectGuard<'a>(&'a Kubectl, &'a str, String);

impl Drop for ClusterObjectGuard<'_> {
    fn drop(&mut self) {
        let _ = self.0.run(&[
            "delete",
            self.1,
            &self.2,
            "--ignore-not-found",
            "--wait=true",
            "--timeout=180s",
        ]);
    }
}

/// The sandbox API scenarios (`tests/operator/sandbox_api.rs`, from `tests/common/api.rs`) against
/// the real API server: the sandbox must answer as it does. Each scenario gets its own namespace
/// and CRD group.
#[test]
#[ignore = "needs a real cluster: set DIORCH_E2E_KUBECONFIG and run with --include-ignored (scripts/e2e.sh)"]
fn e2e_sandbox_api_scenarios() {
    let (kubeconfig, scratch) = target();
    let k = Kubectl::new(&kubeconfig, scratch.path());
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let client = rt.block_on(api::client_from_kubeconfig(&kubeconfig));
    let pid = std::process::id();
    let passed = |name: &str| println!("e2e_sandbox_api: scenario {name} passed");

    let ns = format!("diorch-e2e-api-crud-{pid}");
    foundation::create_namespace(&k, &ns);
    let guard = NamespaceGuard(&k, &ns);
    rt.block_on(api::crud_watch_order_resume_conflicts_and_dry_run(
        &client, &ns,
    ));
    drop(guard);
    passed("crud");

    let ns = format!("diorch-e2e-api-errors-{pid}");
    foundation::create_namespace(&k, &ns);
    let guard = NamespaceGuard(&k, &ns);
    rt.block_on(api::status_errors_and_resource_version_rules(&client, &ns));
    drop(guard);
    passed("errors");

    let ns = format!("diorch-e2e-api-old-{pid}");
    let group = format!("old-{pid}.e2e.diorch.io");
    foundation::create_namespace(&k, &ns);
    let guard = NamespaceGuard(&k, &ns);
    let crd = ClusterObjectGuard(&k, "crd", format!("widgets.{group}"));
    rt.block_on(api::too_old_resource_version_is_410_in_the_stream(
        &client, &ns, &group,
    ));
    drop((crd, guard));
    passed("too-old");

    let ns = format!("diorch-e2e-api-cr-{pid}");
    let group = format!("cr-{pid}.e2e.diorch.io");
    foundation::create_namespace(&k, &ns);
    let guard = NamespaceGuard(&k, &ns);
    let crd = ClusterObjectGuard(&k, "crd", format!("widgets.{group}"));
    rt.block_on(api::custom_resources_status_split_generation_and_gc(
        &client, &ns, &group,
    ));
    drop((crd, guard));
    passed("custom-resources");

    let doomed = format!("diorch-e2e-api-doomed-{pid}");
    let guard = ClusterObjectGuard(&k, "namespace", doomed.clone());
    rt.block_on(api::namespace_deletion_and_terminating_namespace(
        &client,
        &doomed,
        &format!("diorch-e2e-api-nowhere-{pid}"),
    ));
    drop(guard);
    passed("namespaces");

    let ns = format!("diorch-e2e-api-kubectl-{pid}");
    let group = format!("kubectl-{pid}.e2e.diorch.io");
    foundation::create_namespace(&k, &ns);
    let guard = NamespaceGuard(&k, &ns);
    let crd = ClusterObjectGuard(&k, "crd", format!("widgets.{group}"));
    let proto = ClusterObjectGuard(&k, "namespace", format!("{ns}-proto"));
    // The unknown field's message is kubectl's own here: kube-apiserver 1.24 has no server-side
    // field validation (the sandbox's exact message is checked in tests/operator/sandbox_api.rs).
    api::kubectl_end_to_end(&k, &ns, &group, scratch.path());
    drop((proto, crd, guard));
    passed("kubectl");
}

/// Every write of the operator names its field manager (`diorch`): on a real server the pods
/// and the service it created, the job status it wrote, and the Events it recorded about the
/// job (kube-runtime's Recorder names none: the client's `FieldManagerLayer` adds it) list
/// `diorch` in `managedFields` (the sandbox records them for apply only, so this scenario is the
/// real server's).
fn writes_name_their_field_manager(k: &Kubectl, ns: &str) {
    let k = k.in_namespace(ns);
    scenario::apply(&k, &scenario::standard_job("managed", ""));
    k.wait_for(
        &["get", "dijob", "managed", "-o", "jsonpath={.status.phase}"],
        scenario::T,
        |phase| !phase.is_empty(),
    );
    let managers = |what: &str, path: &str| {
        k.wait_for(
            &[
                "get",
                what,
                "-l",
                "diengine/job=managed",
                "-o",
                &format!("jsonpath={path}"),
            ],
            scenario::T,
            |out| out.split_whitespace().count() >= 1,
        )
    };
    let created = "{.items[*].metadata.managedFields[?(@.operation==\"Update\")].manager}";
    let pods = k.wait_for(
        &["get", "pods", "-l", "diengine/job=managed", "-o", "name"],
        scenario::T,
        |out| out.lines().count() == 4,
    );
    assert_eq!(pods.lines().count(), 4, "{pods}");
    for what in ["pods", "services"] {
        let out = managers(what, created);
        assert!(
            out.split_whitespace().any(|m| m == "diorch"),
            "{what} not managed by diorch: {out:?}"
        );
    }
    let status = k.ok(&[
        "get",
        "dijob",
        "managed",
        "-o",
        "jsonpath={.metadata.managedFields[*].manager}",
    ]);
    assert!(
        status.split_whitespace().any(|m| m == "diorch"),
        "the job's status writes name no manager: {status:?}"
    );
    let events = k.wait_for(
        &[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=managed",
            "-o",
            "jsonpath={.items[*].metadata.managedFields[*].manager}",
        ],
        scenario::T,
        |out| !out.trim().is_empty(),
    );
    assert!(
        events.split_whitespace().all(|m| m == "diorch"),
        "the job's Events were written under another manager: {events:?}"
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Removes the webhook configurations a test registered: with failurePolicy Fail they would
/// refuse every later DIJob once their operator stops.
struct WebhookGuard<'a>(&'a Kubectl, &'a str);

impl Drop for WebhookGuard<'_> {
    fn drop(&mut self) {
        for kind in [
            "mutatingwebhookconfiguration",
            "validatingwebhookconfiguration",
        ] {
            let _ = self.0.run(&["delete", kind, self.1, "--ignore-not-found"]);
        }
    }
}

/// The admission scenarios with the webhooks registered by URL to a `diorch run` started here on
/// 127.0.0.1 (`examples/webhook-local.yaml`, caBundle from `diorch webhook-cert`): the API
/// server must reach 127.0.0.1, so the cluster's API server must run on this machine. For a
/// cluster that cannot, install `deploy/` and run `tests/operator/webhook.rs`'s scenarios by hand.
#[test]
#[ignore = "needs a real cluster: set DIORCH_E2E_KUBECONFIG and run with --include-ignored (scripts/e2e.sh)"]
fn e2e_admission() {
    let (kubeconfig, scratch) = target();
    require(
        "DIORCH_E2E_LOCAL_WEBHOOKS",
        "an API server that reaches webhooks on 127.0.0.1 (a control plane on this machine)",
        "e2e_admission",
    );
    let k = Kubectl::new(&kubeconfig, scratch.path());
    install_crd(&k);
    let _one = ONE_OPERATOR.lock().unwrap_or_else(|e| e.into_inner());
    let port = free_port();
    let name = "diorch-e2e";
    let certs = scratch.path().join("certs");
    let _webhooks = WebhookGuard(&k, name);
    k.ok_stdin(
        &["apply", "-f", "-"],
        &webhook::local_configurations(name, &format!("https://127.0.0.1:{port}"), "Fail"),
    );
    let report = webhook::webhook_cert(
        &kubeconfig,
        &certs,
        &["--webhook-configuration", "diorch-e2e"],
    );
    assert!(
        report.contains("validatingwebhookconfiguration diorch-e2e: caBundle patched"),
        "{report}"
    );
    let addr = format!("127.0.0.1:{port}");
    let dir = certs.display().to_string();
    let operator = OperatorProcess::start_with(
        &kubeconfig,
        &["--webhook-addr", &addr, "--webhook-cert-dir", &dir],
    );
    let deadline = Instant::now() + scenario::T;
    while !operator
        .lines()
        .iter()
        .any(|l| l.contains("webhook serving certificate loaded"))
    {
        assert!(
            Instant::now() < deadline,
            "the operator's webhook server did not start: {:#?}",
            operator.lines()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let ns = format!("diorch-e2e-admission-{}", std::process::id());
    foundation::create_namespace(&k, &ns);
    let _guard = NamespaceGuard(&k, &ns);
    webhook::invalid_jobs_are_refused(&k, &ns);
    webhook::valid_jobs_are_defaulted(&k, &ns);
    webhook::updates_are_checked(&k, &ns);
}

/// The plugin and placement scenarios against the real cluster, with `diorch run` started here
/// and plugins read from the scenario namespace.
#[test]
#[ignore = "needs a real cluster: set DIORCH_E2E_KUBECONFIG and run with --include-ignored (scripts/e2e.sh)"]
fn e2e_plugins_and_placement() {
    let (kubeconfig, scratch) = target();
    let k = Kubectl::new(&kubeconfig, scratch.path());
    install_crd(&k);
    let ns = format!("diorch-e2e-plugins-{}", std::process::id());
    foundation::create_namespace(&k, &ns);
    let _guard = NamespaceGuard(&k, &ns);
    let _one = ONE_OPERATOR.lock().unwrap_or_else(|e| e.into_inner());
    let operator = OperatorProcess::start_with(&kubeconfig, &["--plugin-namespace", &ns]);
    allocation::mutator_changes_pods(&k, &ns, &ns);
    allocation::replica_api_scales_a_preemptible_job(&k, &ns, &operator.api_url());
}

/// The capacity-sized placement scenarios (a job holding whole 8-GPU nodes) and re-planning:
/// they need 4 ready nodes with 8 free `nvidia.com/gpu` each (`diorch-sandbox serve --attach
/// --nodes 4 --node-gpus 8` on a cluster without GPUs); set DIORCH_E2E_GPU_NODES=1 then.
#[test]
#[ignore = "needs a real cluster: set DIORCH_E2E_KUBECONFIG and run with --include-ignored (scripts/e2e.sh)"]
fn e2e_gpu_placement() {
    let (kubeconfig, scratch) = target();
    require(
        "DIORCH_E2E_GPU_NODES",
        "4 ready nodes with 8 free nvidia.com/gpu each",
        "e2e_gpu_placement",
    );
    let k = Kubectl::new(&kubeconfig, scratch.path());
    install_crd(&k);
    // The scenarios were written for a fresh sandbox each: each gets its own namespace, gone
    // (and its GPUs free) before the next starts. Plugins live in one namespace throughout.
    let base = format!("diorch-e2e-gpu-{}", std::process::id());
    let plugins = format!("{base}-plugins");
    foundation::create_namespace(&k, &plugins);
    let _plugins = NamespaceGuard(&k, &plugins);
    let _one = ONE_OPERATOR.lock().unwrap_or_else(|e| e.into_inner());
    {
        let operator = OperatorProcess::start_with(&kubeconfig, &["--plugin-namespace", &plugins]);
        let ns = format!("{base}-policies");
        foundation::create_namespace(&k, &ns);
        let guard = NamespaceGuard(&k, &ns);
        allocation::policy_plugins_place_jobs_and_hot_swap(&k, &ns, &plugins);
        drop(guard);
        let ns = format!("{base}-capacity");
        foundation::create_namespace(&k, &ns);
        let guard = NamespaceGuard(&k, &ns);
        allocation::oversized_job_waits_for_capacity(&k, &ns);
        drop(guard);
        drop(operator);
    }
    // Preemption (issue 38): urgent jobs shrink collectors before evicting anyone.
    {
        let mut flags = vec!["--plugin-namespace", &plugins];
        flags.extend(common::preemption::FLAGS);
        let operator = OperatorProcess::start_with(&kubeconfig, &flags);
        let ns = format!("{base}-preemption");
        foundation::create_namespace(&k, &ns);
        let guard = NamespaceGuard(&k, &ns);
        common::preemption::urgent_jobs_shrink_collectors_before_evicting(
            &k,
            &ns,
            &operator.api_url(),
        );
        drop(guard);
        drop(operator);
    }
    // A policy rollout: a shadow compared on live decisions, promoted, rolled back.
    {
        let metrics = common::ha::free_local_addr();
        let operator = OperatorProcess::start_with(
            &kubeconfig,
            &["--plugin-namespace", &plugins, "--metric-addr", &metrics],
        );
        let ns = format!("{base}-rollout");
        foundation::create_namespace(&k, &ns);
        let guard = NamespaceGuard(&k, &ns);
        allocation::shadow_policy_compared_promoted_and_rolled_back(&k, &ns, &plugins, &metrics);
        drop(guard);
        drop(operator);
    }
    // The replay fidelity test, on a recording made against the real API server.
    {
        let dir = tempfile::tempdir().expect("recording dir");
        let recording = dir.path().to_str().expect("utf-8 path");
        let operator = OperatorProcess::start_with(
            &kubeconfig,
            &[
                "--plugin-namespace",
                &plugins,
                "--record-decisions",
                recording,
                "--optimize-period",
                "1s",
            ],
        );
        let ns = format!("{base}-recorded");
        foundation::create_namespace(&k, &ns);
        let guard = NamespaceGuard(&k, &ns);
        allocation::recorded_decisions_replay_in_full_agreement(&k, &ns, &plugins, dir.path());
        drop(guard);
        drop(operator);
    }
    // Policies from an OCI registry (a real one, on this machine's loopback), signed.
    if common::registry::registry_available("e2e_gpu_placement (registry)") {
        let registry = common::registry::Registry::start();
        let mut flags = common::oci::operator_flags(&registry);
        flags.extend(["--plugin-namespace".to_string(), plugins.clone()]);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let operator = OperatorProcess::start_with(&kubeconfig, &flags);
        let ns = format!("{base}-registry");
        foundation::create_namespace(&k, &ns);
        let guard = NamespaceGuard(&k, &ns);
        common::oci::signed_policy_from_a_registry(&k, &ns, &plugins, &registry);
        drop(guard);
        // Python and JavaScript plugins, from the registry and inline (issue 35).
        if languages_built("e2e_gpu_placement (Python and JS plugins)") {
            let ns = format!("{base}-languages");
            foundation::create_namespace(&k, &ns);
            let guard = NamespaceGuard(&k, &ns);
            common::oci::python_policy_and_js_mutator_place_and_shape_a_job(
                &k, &ns, &plugins, &registry,
            );
            drop(guard);
        }
        drop(operator);
    }
    // Re-planning: goodput by default, every second, each job moved at most once.
    let replanner = OperatorProcess::start_with(
        &kubeconfig,
        &[
            "--plugin-namespace",
            &plugins,
            "--default-policy",
            "goodput",
            "--optimize-period",
            "1s",
            "--min-reschedule-interval",
            "1h",
        ],
    );
    let ns = format!("{base}-goodput");
    foundation::create_namespace(&k, &ns);
    let guard = NamespaceGuard(&k, &ns);
    allocation::goodput_grows_and_shrinks_collectors(&k, &ns, &plugins, &replanner.api_url());
    drop(guard);
    let ns = format!("{base}-flapping");
    foundation::create_namespace(&k, &ns);
    let _guard = NamespaceGuard(&k, &ns);
    allocation::flapping_policy_is_rate_limited(&k, &ns, &plugins);
}

/// Leader election on a real API server (`tests/operator/ha.rs` runs the same on the sandbox): two
/// `diorch run --leader-elect` with their Lease in the scenario's namespace (so it goes with
/// it); exactly one leads and reconciles, a SIGKILLed leader's work goes to the standby once
/// the lease expires with no pod re-created or lost, SIGTERM releases the lease and exits 0;
/// then a leader whose Lease another holder takes stops.
#[test]
#[ignore = "needs a real cluster: set DIORCH_E2E_KUBECONFIG and run with --include-ignored (scripts/e2e.sh)"]
fn e2e_leader_election() {
    let (kubeconfig, scratch) = target();
    let k = Kubectl::new(&kubeconfig, scratch.path());
    install_crd(&k);
    let ns = format!("diorch-e2e-leader-{}", std::process::id());
    foundation::create_namespace(&k, &ns);
    let _guard = NamespaceGuard(&k, &ns);
    let _one = ONE_OPERATOR.lock().unwrap_or_else(|e| e.into_inner());
    ha::one_leader_reconciles_a_standby_takes_over_and_sigterm_releases_the_lease(
        &k,
        &ns,
        &kubeconfig,
    );
    // The same Lease, released above, is taken by a new leader and then by an intruder. Which
    // of the leader's two checks notices first (its watch of the Lease, or its renewal at most
    // 2 s later) depends on when the intruder writes, so only the stop is asserted here.
    ha::a_leader_that_loses_its_lease_stops(&k, &ns, &kubeconfig, ha::LEASE_DURATION);
}

/// Switching from DI-orchestrator v2 to diorch and back (docs/migration.md,
/// `tests/common/migration/`): DI-orchestrator's own CRD and samples, its install and three
/// jobs as its operator leaves them (two running, one succeeded; played: its Go binary is not
/// run), the install removed with the doc's commands; diorch's CRD applied over it and `diorch
/// run` started: the jobs' pods and services are adopted, not re-created, their status
/// continues, a new sample runs;
/// then DI-orchestrator's CRD again: every job readable, diorch's fields pruned. Replaces the
/// DIJob CRD for its duration (diorch's is back at the end), and plays the install in its own
/// namespace with suffixed cluster-scoped names, so a real install is never touched.
#[test]
#[ignore = "needs a real cluster: set DIORCH_E2E_KUBECONFIG and run with --include-ignored (scripts/e2e.sh)"]
fn e2e_migration_from_di_orchestrator() {
    let (kubeconfig, scratch) = target();
    let k = Kubectl::new(&kubeconfig, scratch.path());
    let pid = std::process::id();
    let (ns, install_ns) = (
        format!("diorch-e2e-migration-{pid}"),
        format!("di-system-e2e-{pid}"),
    );
    let suffix = format!("e2e-{pid}");
    // Dropped last: the namespaces go first, then diorch's CRD is put back.
    let _crd = migration::RestoreDiorchCrd(&k);
    foundation::create_namespace(&k, &ns);
    let _guard = NamespaceGuard(&k, &ns);
    foundation::create_namespace(&k, &install_ns);
    let _install = NamespaceGuard(&k, &install_ns);
    let _cluster = ClusterObjectsGuard(&k, format!("diorch.io/e2e={suffix}"));
    let _one = ONE_OPERATOR.lock().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    migration::from_di_orchestrator_and_back(&k, &kubeconfig, &ns, &install_ns, &suffix);
    println!("e2e_migration: scenario passed in {:?}", started.elapsed());
}

/// Cluster-scoped objects a test created, by label: deleting its namespace leaves them.
struct ClusterObjectsGuard<'a>(&'a Kubectl, String);

impl Drop for ClusterObjectsGuard<'_> {
    fn drop(&mut self) {
        let _ = self.0.run(&[
            "delete",
            "clusterrole,clusterrolebinding",
            "-l",
            &self.1,
            "--ignore-not-found",
        ]);
    }
}

/// The kinds of `deploy/base` that grant rights: its RBAC objects and ServiceAccounts.
const RBAC_KINDS: &[&str] = &[
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ClusterRole",
    "ClusterRoleBinding",
];

/// `deploy/base` rendered by kustomize into namespace `ns`, every name suffixed with `-suffix`
/// (so a cluster's own install of diorch is left alone) and labelled `diorch.io/e2e=suffix`,
/// keeping only [`RBAC_KINDS`]: the install's rights as its manifests state them, with the
/// subjects and role references rewritten along (kustomize does both).
fn deploy_rbac(k: &Kubectl, scratch: &Path, ns: &str, suffix: &str) -> String {
    let overlay = scratch.join("rbac-overlay");
    std::fs::create_dir_all(&overlay).expect("overlay dir");
    let overlay = std::fs::canonicalize(&overlay).expect("overlay path");
    let base = std::fs::canonicalize(common::repo_root().join("deploy/base")).expect("deploy/base");
    // kustomize takes no absolute path for a base: reach it from the overlay through the root.
    let up = overlay
        .components()
        .filter(|c| matches!(c, std::path::Component::Normal(_)))
        .map(|_| "..")
        .collect::<Vec<_>>()
        .join("/");
    let base = format!("{up}{}", base.display());
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: {ns}\nnameSuffix: -{suffix}\nlabels:\n- pairs: {{diorch.io/e2e: {suffix}}}\nresources:\n- {base}\n"
        ),
    )
    .expect("write kustomization");
    let rendered = k.ok(&["kustomize", overlay.to_str().expect("utf-8 path")]);
    let kept: Vec<&str> = rendered
        .split("\n---\n")
        .filter(|doc| {
            doc.lines()
                .any(|l| RBAC_KINDS.iter().any(|kind| l == format!("kind: {kind}")))
        })
        .collect();
    assert!(
        kept.iter().any(|d| d.contains("kind: ClusterRoleBinding"))
            && kept.iter().any(|d| d.contains("kind: RoleBinding")),
        "no bindings rendered from deploy/base: {rendered}"
    );
    kept.join("\n---\n")
}

/// A kubeconfig for the cluster of `k`'s (its server and TLS settings) that authenticates with
/// `token` only.
fn token_kubeconfig(k: &Kubectl, path: &Path, token: &str) {
    let admin: serde_json::Value =
        serde_json::from_str(&k.ok(&["config", "view", "--minify", "--flatten", "-o", "json"]))
            .expect("kubeconfig JSON");
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": admin["clusters"][0]["cluster"]}],
        "users": [{"name": "token", "user": {"token": token}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "token"}}],
        "current-context": "e2e",
    });
    std::fs::write(path, config.to_string()).expect("write kubeconfig");
}

/// Whether a log line reports a refused API call (kube's error carries the reason `Forbidden`,
/// the message "... is forbidden: User ... cannot ...", and the code 403).
fn reports_forbidden(line: &str) -> bool {
    line.to_ascii_lowercase().contains("forbidden")
        || ["code: 403", "403 Forbidden", "status: 403"]
            .iter()
            .any(|s| line.contains(s))
}

/// Least privilege on a real API server: `diorch run` with a ServiceAccount token bound only
/// by `deploy/base`'s RBAC (rendered into the test's namespace), run with the flags of
/// `deploy/base/deployment.yaml` that involve the API (leader election and plugins in its own
/// namespace, `--server-auth job-pods`), is driven through the scenarios that exercise most of
/// its API surface; no call it makes answers 401 or 403, none is logged as forbidden, and the
/// calls those scenarios must make were made. `/metrics` and the replica API are called with a
/// second ServiceAccount bound to the install's caller ClusterRoles, so the operator's
/// TokenReviews and SubjectAccessReviews are among the checked calls.
#[test]
#[ignore = "needs a real cluster: set DIORCH_E2E_KUBECONFIG and run with --include-ignored (scripts/e2e.sh)"]
fn e2e_rbac_least_privilege() {
    let (kubeconfig, scratch) = target();
    require(
        "DIORCH_E2E_GPU_NODES",
        "4 ready nodes with 8 free nvidia.com/gpu each",
        "e2e_rbac_least_privilege",
    );
    let k = Kubectl::new(&kubeconfig, scratch.path());
    install_crd(&k);
    let pid = std::process::id();
    let (ns, suffix) = (format!("diorch-e2e-rbac-{pid}"), format!("e2e-{pid}"));
    foundation::create_namespace(&k, &ns);
    let _guard = NamespaceGuard(&k, &ns);
    let _cluster = ClusterObjectsGuard(&k, format!("diorch.io/e2e={suffix}"));
    let n = k.in_namespace(&ns);
    n.ok_stdin(
        &["apply", "-f", "-"],
        &deploy_rbac(&k, scratch.path(), &ns, &suffix),
    );
    let operator_sa = format!("diorch-{suffix}");
    // The binding holds: the operator may create pods, and may not read secrets.
    let can = |verb: &str, what: &str| {
        let user = format!("system:serviceaccount:{ns}:{operator_sa}");
        let out = k.run(&[
            "auth",
            "can-i",
            verb,
            what,
            "--all-namespaces",
            "--as",
            &user,
        ]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(can("create", "pods"), "yes");
    assert_eq!(can("list", "secrets"), "no");
    // A caller of the replica API and of /metrics, with the install's caller roles.
    let client = "replica-client";
    n.ok_stdin(
        &["apply", "-f", "-"],
        &format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {client}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: {client}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: diorch-replica-client-{suffix}}}\nsubjects:\n- {{kind: ServiceAccount, name: {client}, namespace: {ns}}}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: diorch-metrics-reader-{suffix}\n  labels: {{diorch.io/e2e: {suffix}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: diorch-metrics-reader-{suffix}}}\nsubjects:\n- {{kind: ServiceAccount, name: {client}, namespace: {ns}}}\n"
        ),
    );
    let token = |sa: &str| {
        n.ok(&["create", "token", sa, "--duration", "1h"])
            .trim()
            .to_string()
    };
    let (operator_token, client_token) = (token(&operator_sa), token(client));
    let operator_kubeconfig = scratch.path().join("operator.kubeconfig");
    token_kubeconfig(&k, &operator_kubeconfig, &operator_token);

    let addr = ha::free_local_addr();
    let _one = ONE_OPERATOR.lock().unwrap_or_else(|e| e.into_inner());
    let operator = OperatorProcess::start_with(
        &operator_kubeconfig,
        &[
            "--metric-addr",
            &addr,
            "--leader-elect",
            "--leader-election-namespace",
            &ns,
            "--plugin-namespace",
            &ns,
            "--server-auth",
            "job-pods",
            "--plugin-max-calls",
            "2",
        ],
    );
    ha::wait_until("the operator to lead", scenario::T, || ha::leads(&operator));
    ha::exercise_the_api_surface(&k, &ns, &ns, &operator.api_url(), Some(&client_token));

    let metrics = ha::scrape_as(&addr, Some(&client_token));
    let responses = ha::api_responses(&metrics);
    let refused: Vec<_> = responses
        .iter()
        .filter(|(_, code)| code == "401" || code == "403")
        .collect();
    assert!(
        refused.is_empty(),
        "API calls refused with deploy/base's RBAC (fix deploy/base/rbac.yaml and tests/common/rbac.rs): {refused:?}"
    );
    let forbidden: Vec<String> = operator
        .lines()
        .into_iter()
        .filter(|l| reports_forbidden(l))
        .collect();
    assert!(forbidden.is_empty(), "{forbidden:#?}");
    ha::assert_calls_granted_and_seen(
        &ha::api_calls(&metrics),
        &[
            ("coordination.k8s.io", "leases", "create"),
            ("authentication.k8s.io", "tokenreviews", "create"),
            ("authorization.k8s.io", "subjectaccessreviews", "create"),
        ],
    );
}

/// `deploy/base/user-roles.yaml` on a real API server: its ClusterRoles aggregate into the
/// default `view` and `edit` roles (the controller-manager's aggregation controller), so a user
/// bound to `view` in a namespace may read DIJobs and their replicas there and change nothing,
/// and one bound to `edit` may also create, scale and delete them.
#[test]
#[ignore = "needs a real cluster: set DIORCH_E2E_KUBECONFIG and run with --include-ignored (scripts/e2e.sh)"]
fn e2e_user_roles_aggregate_into_view_and_edit() {
    let (kubeconfig, scratch) = target();
    let k = Kubectl::new(&kubeconfig, scratch.path());
    // kubectl resolves the resource through discovery: the CRD must be served.
    install_crd(&k);
    let suffix = format!("e2e-{}", std::process::id());
    let label = format!("diorch.io/e2e={suffix}");
    let _cluster = ClusterObjectsGuard(&k, label.clone());
    let roles = std::fs::read_to_string(common::repo_root().join("deploy/base/user-roles.yaml"))
        .expect("user-roles.yaml")
        .replace("name: dijob-view", &format!("name: dijob-view-{suffix}"))
        .replace("name: dijob-edit", &format!("name: dijob-edit-{suffix}"))
        .replace(
            "    app.kubernetes.io/name: diorch\n",
            &format!("    app.kubernetes.io/name: diorch\n    diorch.io/e2e: {suffix}\n"),
        );
    k.ok_stdin(&["apply", "-f", "-"], &roles);
    let ns = format!("diorch-e2e-roles-{}", std::process::id());
    foundation::create_namespace(&k, &ns);
    let _guard = NamespaceGuard(&k, &ns);
    let kn = k.in_namespace(&ns);
    kn.ok(&[
        "create",
        "rolebinding",
        "viewer",
        "--clusterrole=view",
        "--user=bob",
    ]);
    kn.ok(&[
        "create",
        "rolebinding",
        "editor",
        "--clusterrole=edit",
        "--user=alice",
    ]);
    // `what` is a resource or `resource/subresource`.
    let can = |user: &str, verb: &str, what: &str| -> bool {
        let (resource, sub) = what.split_once('/').unwrap_or((what, ""));
        let resource = format!("{resource}.diengine.opendilab.org");
        let mut args = vec!["auth", "can-i", verb, resource.as_str(), "--as", user];
        let sub = format!("--subresource={sub}");
        if what.contains('/') {
            args.push(&sub);
        }
        let out = kn.run(&args);
        String::from_utf8_lossy(&out.stdout).trim() == "yes"
    };
    // Aggregation is asynchronous: wait for a rule of each role to arrive.
    common::ha::wait_until(
        "edit to aggregate dijob-edit",
        Duration::from_secs(60),
        || can("alice", "update", "dijobs/replicas"),
    );
    common::ha::wait_until(
        "view to aggregate dijob-view",
        Duration::from_secs(60),
        || can("bob", "get", "dijobs/replicas"),
    );
    for (user, verb, what, allowed) in [
        ("bob", "list", "dijobs", true),
        ("bob", "watch", "dijobs", true),
        ("bob", "get", "dijobs/status", true),
        ("bob", "get", "dijobs/replicas", true),
        ("bob", "create", "dijobs", false),
        ("bob", "update", "dijobs/replicas", false),
        ("bob", "delete", "dijobs", false),
        ("alice", "create", "dijobs", true),
        ("alice", "patch", "dijobs", true),
        ("alice", "delete", "dijobs", true),
        ("alice", "update", "dijobs/replicas", true),
        ("alice", "list", "dijobs", true),
        // Status is the operator's.
        ("alice", "patch", "dijobs/status", false),
    ] {
        assert_eq!(can(user, verb, what), allowed, "{user} {verb} {what}");
    }
}
