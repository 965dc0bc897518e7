//! End-to-end suite against a real Kubernetes cluster: the same scenarios as the sandbox
//! integration tests. Every test is `#[ignore]`d, so a plain `cargo test` reports them as
//! ignored (never as passed); run them with
//!
//! ```sh
//! DIORCH_E2E_KUBECONFIG=path/to/kubeconfig cargo test --test e2e -- --include-ignored --test-threads=1
//! ```
//!
//! (`scripts/e2e.sh` does that against the control plane in `../shared/kube`, with
//! `diorch sandbox --attach` playing 4 nodes of 8 GPUs.) A test run without what it needs fails
//! and says how to skip it. The suite installs `crds/` itself, works in its own namespaces, and
//! deletes them at the end. One test at a time (`--test-threads=1`): the admission test
//! registers cluster-wide webhooks while it runs.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::allocation;
use common::controller::{self as scenario, OperatorProcess};
use common::{Kubectl, api, foundation, kubelet, webhook};

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

/// Graceful deletion on a real API server, with the nodes played by `diorch sandbox --attach`
/// (the scenario scripts its pods with `sandbox.diorch.io/*` annotations): the behaviour the
/// in-process sandbox must match (`tests/sandbox_cli.rs`).
#[test]
#[ignore = "needs a real cluster: set DIORCH_E2E_KUBECONFIG and run with --include-ignored (scripts/e2e.sh)"]
fn e2e_sandbox_kubelet() {
    let (kubeconfig, scratch) = target();
    require(
        "DIORCH_E2E_SANDBOX_NODES",
        "nodes played by `diorch sandbox --attach`",
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
    let scenarios: [(&str, Scenario); 8] = [
        ("lifecycle", scenario::runs_to_success),
        ("backoff", scenario::failing_worker_restarts_then_fails),
        ("cleanup", scenario::clean_pod_policies),
        ("selfheal", scenario::hand_deleted_pod_comes_back_once),
        ("scaling", scenario::scales_up_and_down),
        ("rolling", scenario::template_edit_rolls_pods),
        ("cascade", scenario::deleting_the_job_cascades),
        ("validation", scenario::validation_cases),
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

/// The sandbox API scenarios (`tests/sandbox_api.rs`, from `tests/common/api.rs`) against the
/// real API server: the sandbox must answer as it does. Each scenario gets its own namespace
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
    // field validation (the sandbox's exact message is checked in tests/sandbox_api.rs).
    api::kubectl_end_to_end(&k, &ns, &group, scratch.path());
    drop((proto, crd, guard));
    passed("kubectl");
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

/// `diorch webhook-cert --host 127.0.0.1 --out-dir dir` against the cluster.
fn webhook_cert(kubeconfig: &Path, dir: &Path) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_diorch"))
        .args(["webhook-cert", "--kubeconfig"])
        .arg(kubeconfig)
        .arg("--out-dir")
        .arg(dir)
        .args([
            "--host",
            "127.0.0.1",
            "--webhook-configuration",
            "diorch-e2e",
        ])
        .output()
        .expect("run diorch webhook-cert");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The admission scenarios with the webhooks registered by URL to a `diorch run` started here on
/// 127.0.0.1 (`examples/webhook-local.yaml`, caBundle from `diorch webhook-cert`): the API
/// server must reach 127.0.0.1, so the cluster's API server must run on this machine. For a
/// cluster that cannot, install `deploy/` and run `tests/webhook.rs`'s scenarios by hand.
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
    let report = webhook_cert(&kubeconfig, &certs);
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
/// they need 4 ready nodes with 8 free `nvidia.com/gpu` each (`diorch sandbox --attach
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
