//! Admission end to end: the sandbox (in-process) calls the real `diorch run`'s webhooks over
//! TLS, with the certificate made and the caBundle patched by the real `diorch webhook-cert`,
//! driven with kubectl. The refusal scenarios also run against a real cluster in `tests/e2e.rs`.

use crate::common;

use std::time::{Duration, Instant};

use common::controller::{self as scenario, OperatorProcess};
use common::webhook::{self as admission, VALIDATING};
use common::{Kubectl, SandboxProcess, foundation};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

struct Cluster {
    sandbox: SandboxProcess,
    certs: tempfile::TempDir,
    port: u16,
}

impl Cluster {
    /// A sandbox with the CRD, webhook configurations pointing at a local port with
    /// `failure_policy`, and a certificate for them; no operator yet.
    fn new(failure_policy: &str) -> Cluster {
        let sandbox = SandboxProcess::start(&["--nodes", "2", "--pod-start-delay", "100ms"]);
        let k = sandbox.kubectl();
        foundation::install_crd(&k);
        let port = free_port();
        k.ok_stdin(
            &["apply", "-f", "-"],
            &admission::local_configurations(
                "diorch",
                &format!("https://127.0.0.1:{port}"),
                failure_policy,
            ),
        );
        let certs = tempfile::tempdir().expect("tempdir");
        let first = admission::webhook_cert(&sandbox.kubeconfig, certs.path(), &[]);
        assert!(first.contains("new certificate"), "{first}");
        assert!(
            first.contains(
                "mutatingwebhookconfiguration diorch: caBundle patched (1 of 1 webhooks)"
            ),
            "{first}"
        );
        assert!(
            first.contains(
                "validatingwebhookconfiguration diorch: caBundle patched (1 of 1 webhooks)"
            ),
            "{first}"
        );
        Cluster {
            sandbox,
            certs,
            port,
        }
    }

    fn kubectl(&self) -> Kubectl {
        self.sandbox.kubectl()
    }

    fn operator(&self) -> OperatorProcess {
        let addr = format!("127.0.0.1:{}", self.port);
        let dir = self.certs.path().display().to_string();
        let operator = OperatorProcess::start_with(
            &self.sandbox.kubeconfig,
            &["--webhook-addr", &addr, "--webhook-cert-dir", &dir],
        );
        wait_log(&operator, "webhook serving certificate loaded");
        operator
    }
}

fn wait_log(operator: &OperatorProcess, needle: &str) {
    let deadline = Instant::now() + scenario::T;
    while !operator.lines().iter().any(|l| l.contains(needle)) {
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in the log: {:#?}",
            operator.lines()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn invalid_jobs_are_refused_at_submission_with_the_field_and_the_fix() {
    let cluster = Cluster::new("Fail");
    let _operator = cluster.operator();
    let k = cluster.kubectl();
    foundation::create_namespace(&k, "refusals");
    admission::invalid_jobs_are_refused(&k, "refusals");
}

#[test]
fn valid_jobs_are_defaulted_at_submission_and_updates_are_checked() {
    let cluster = Cluster::new("Fail");
    let _operator = cluster.operator();
    let k = cluster.kubectl();
    admission::valid_jobs_are_defaulted(&k, "default");
    admission::updates_are_checked(&k, "default");
}

#[test]
fn a_rotated_certificate_is_served_without_a_restart() {
    let cluster = Cluster::new("Fail");
    let operator = cluster.operator();
    let k = cluster.kubectl();
    let (manifest, message) = admission::invalid_jobs().remove(0);
    assert!(
        k.fails_stdin(&["create", "-f", "-"], &manifest)
            .contains(&message)
    );
    // Run again: the certificate is valid, so nothing changes.
    let again = admission::webhook_cert(&cluster.sandbox.kubeconfig, cluster.certs.path(), &[]);
    assert!(again.contains("kept"), "{again}");
    assert!(again.contains("caBundle already current"), "{again}");
    // Force a new CA and certificate. The running operator serves the old certificate until it
    // re-reads the files (every 2 s; in a cluster, until the kubelet projects the Secret), so
    // the caBundle trusts both CAs until the next run: no admission call fails meanwhile.
    let renewed = admission::webhook_cert(
        &cluster.sandbox.kubeconfig,
        cluster.certs.path(),
        &["--renew-before-days", "400"],
    );
    assert!(renewed.contains("new certificate"), "{renewed}");
    assert!(
        renewed.contains("caBundle: the new CA and, until the next run, the replaced one"),
        "{renewed}"
    );
    let loads = || {
        operator
            .lines()
            .iter()
            .filter(|l| l.contains("webhook serving certificate loaded"))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut calls = 0;
    loop {
        let served_new = loads() == 2;
        let err = k.fails_stdin(&["create", "-f", "-"], &manifest);
        calls += 1;
        assert!(
            err.contains(&message),
            "call {calls} during the rotation failed: {err}"
        );
        if served_new {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never served the new certificate: {:#?}",
            operator.lines()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The next run keeps the new certificate and drops the old CA; calls still succeed.
    let next = admission::webhook_cert(&cluster.sandbox.kubeconfig, cluster.certs.path(), &[]);
    assert!(next.contains("kept"), "{next}");
    assert!(next.contains("caBundle patched"), "{next}");
    let err = k.fails_stdin(&["create", "-f", "-"], &manifest);
    assert!(err.contains(&message), "{err}");
    assert_eq!(loads(), 2, "{:#?}", operator.lines());
}

#[test]
fn with_the_webhook_down_fail_refuses_and_ignore_leaves_it_to_the_controller() {
    let cluster = Cluster::new("Fail");
    let k = cluster.kubectl();
    // No operator serves the webhook: failurePolicy Fail refuses every DIJob write.
    let valid = scenario::job_manifest("valid", "", &[("", "learner", 1)]);
    let err = k.fails_stdin(&["create", "-f", "-"], &valid);
    assert!(
        err.contains(
            "failed calling webhook \"mdijob.diengine.opendilab.org\": failed to call webhook: Post"
        ),
        "{err}"
    );
    assert!(!err.contains(VALIDATING), "{err}");
    // With failurePolicy Ignore the jobs are admitted and the controller's Failed fallback
    // applies, with the same messages.
    for kind in [
        "mutatingwebhookconfiguration",
        "validatingwebhookconfiguration",
    ] {
        k.ok(&[
            "patch",
            kind,
            "diorch",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Ignore"}]"#,
        ]);
    }
    let _operator =
        OperatorProcess::start_with(&cluster.sandbox.kubeconfig, &["--webhook-addr", "0"]);
    foundation::create_namespace(&k, "fallback");
    scenario::validation_cases(&k, "fallback");
}

#[test]
fn webhook_cert_keeps_its_secret_while_valid_and_replaces_it_when_asked() {
    let sandbox = SandboxProcess::start(&["--nodes", "1"]);
    let k = sandbox.kubectl();
    foundation::create_namespace(&k, "diorch-system");
    let run = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_diorch"))
            .args(["webhook-cert", "--kubeconfig"])
            .arg(&sandbox.kubeconfig)
            .args(extra)
            .output()
            .expect("run diorch webhook-cert");
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    // Without webhook configurations it stops with the fix, after storing the certificate.
    let (ok, out) = run(&[]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("no MutatingWebhookConfiguration or ValidatingWebhookConfiguration named \"diorch\": apply the webhook configurations (deploy/) first"),
        "{out}"
    );
    k.ok_stdin(
        &["apply", "-f", "-"],
        &admission::local_configurations("diorch", "https://127.0.0.1:1", "Fail"),
    );
    let (ok, out) = run(&[]);
    assert!(ok, "{out}");
    assert!(
        out.contains("secret diorch-system/diorch-webhook-cert: kept"),
        "{out}"
    );
    let secret = |path: &str| {
        k.ok(&[
            "get",
            "secret",
            "-n",
            "diorch-system",
            "diorch-webhook-cert",
            "-o",
            &format!("jsonpath={path}"),
        ])
    };
    assert_eq!(secret("{.type}"), "kubernetes.io/tls");
    let ca = secret("{.data.ca\\.crt}");
    assert!(!ca.is_empty() && !secret("{.data.tls\\.key}").is_empty());
    // caBundle carries the Secret's CA (both base64 of the same PEM).
    let bundle = k.ok(&[
        "get",
        "validatingwebhookconfiguration",
        "diorch",
        "-o",
        "jsonpath={.webhooks[0].clientConfig.caBundle}",
    ]);
    assert_eq!(bundle, ca);
    let (ok, out) = run(&["--renew-before-days", "400"]);
    assert!(ok && out.contains("new certificate"), "{out}");
    assert_ne!(secret("{.data.ca\\.crt}"), ca);
}
