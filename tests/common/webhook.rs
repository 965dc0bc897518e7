//! Admission webhook scenarios, written against a `Kubectl` so the sandbox integration tests
//! (a local `diorch run` reached by URL) and the real-cluster e2e suite (the operator installed
//! from `deploy/`) share them. Each refusal must name the field and the fix.

use super::Kubectl;
use super::controller::{job_manifest, jsonpath, wait_phase};

/// The validating webhook's name, as kube-apiserver quotes it in refusals.
pub const VALIDATING: &str = "vdijob.diengine.opendilab.org";

/// Webhook configurations named `name` that send DIJob creates and updates to a `diorch run`
/// serving at `base_url` (`https://127.0.0.1:9443`), with `failure_policy`: the README's
/// `examples/webhook-local.yaml`, so the example cannot rot.
pub fn local_configurations(name: &str, base_url: &str, failure_policy: &str) -> String {
    let example = std::fs::read_to_string(super::repo_root().join("examples/webhook-local.yaml"))
        .expect("examples/webhook-local.yaml");
    example
        .replace("https://127.0.0.1:PORT", base_url)
        .replace(
            "failurePolicy: Fail",
            &format!("failurePolicy: {failure_policy}"),
        )
        .replace("  name: diorch\n", &format!("  name: {name}\n"))
}

/// Invalid jobs, each with the message its refusal must carry. The CRD's CEL rules refuse
/// some before any webhook is called (see `foundation::invalid_dijobs_are_refused`); these are
/// the ones only the validating webhook catches.
pub fn invalid_jobs() -> Vec<(String, String)> {
    let long = job_manifest(&"x".repeat(58), "", &[("learner", "learner", 1)]);
    let mut clash = job_manifest("clash", "", &[("learner", "learner", 1)]);
    clash = clash
        .replace(
            "  tasks:\n",
            "  volumes:\n  - name: cache\n    emptyDir: {}\n  tasks:\n",
        )
        .replace(
            "          command: [\"sh\", \"-c\", \"sleep 3600\"]\n",
            "          command: [\"sh\", \"-c\", \"sleep 3600\"]\n        volumes:\n        - name: cache\n          emptyDir: {}\n",
        );
    vec![
        (
            job_manifest("two-collectors", "", &[("a", "collector", 1), ("b", "collector", 1)]),
            "spec.tasks[1].type: the number of collector task is more than one; a job has at most one learner, collector and evaluator task".into(),
        ),
        (
            job_manifest("dup-names", "", &[("name-test", "evaluator", 1), ("name-test", "collector", 1)]),
            "spec.tasks[1].name: there is more than one task named name-test; give every task a different name".into(),
        ),
        (
            job_manifest("empty", "", &[]).replace("  tasks:\n", "  tasks: []\n"),
            "spec.tasks: job has no tasks; add at least one task".into(),
        ),
        (long, "must be no more than 63 characters; shorten the job or task name".into()),
        (
            clash,
            "spec.volumes[0].name: Duplicate value: \"cache\": task learner already has a volume of that name in its template; rename one of them".into(),
        ),
    ]
}

/// Every invalid job is refused at `kubectl create` with the webhook's message, dry run or not,
/// and nothing is stored.
pub fn invalid_jobs_are_refused(k: &Kubectl, ns: &str) {
    let k = k.in_namespace(ns);
    for (manifest, message) in invalid_jobs() {
        for dry_run in [&["--dry-run=server"][..], &[]] {
            let mut args = vec!["create", "-f", "-"];
            args.extend_from_slice(dry_run);
            let err = k.fails_stdin(&args, &manifest);
            assert!(
                err.contains(&format!(
                    "admission webhook \"{VALIDATING}\" denied the request: "
                )),
                "{err}"
            );
            assert!(err.contains(&message), "expected {message:?} in: {err}");
        }
    }
    let example = super::repo_root().join("examples/invalid-two-collectors.yaml");
    let err = k.fails(&["apply", "-f", &example.display().to_string()]);
    assert!(
        err.contains("the number of collector task is more than one"),
        "{err}"
    );
    assert_eq!(k.ok(&["get", "dijobs", "-o", "name"]), "");
}

/// A valid job is defaulted at admission (typed tasks named after their type, once) and runs;
/// a server-side dry run stores nothing.
pub fn valid_jobs_are_defaulted(k: &Kubectl, ns: &str) {
    let k = k.in_namespace(ns);
    let unnamed = job_manifest("unnamed", "", &[("", "learner", 1), ("", "collector", 2)]);
    let dry = k.ok_stdin(
        &[
            "create",
            "--dry-run=server",
            "-f",
            "-",
            "-o",
            "jsonpath={.spec.tasks[*].name}",
        ],
        &unnamed,
    );
    assert_eq!(dry, "learner collector");
    assert_eq!(k.ok(&["get", "dijobs", "-o", "name"]), "");
    k.ok_stdin(&["create", "-f", "-"], &unnamed);
    // Named by admission, before the controller ever saw the job.
    assert_eq!(
        jsonpath(&k, "dijob/unnamed", "{.spec.tasks[*].name}"),
        "learner collector"
    );
    assert_eq!(jsonpath(&k, "dijob/unnamed", "{.metadata.generation}"), "1");
    wait_phase(&k, "unnamed", "Running");
}

/// On an existing job, scaling and edits pass; turning a task into another type does not.
pub fn updates_are_checked(k: &Kubectl, ns: &str) {
    let k = k.in_namespace(ns);
    k.ok_stdin(
        &["create", "-f", "-"],
        &job_manifest("edit", "", &[("", "learner", 1), ("helper", "none", 1)]),
    );
    let patch = |ops: &str| k.run(&["patch", "dijob/edit", "--type=json", "-p", ops]);
    let refused = |ops: &str| {
        let out = patch(ops);
        assert!(!out.status.success(), "accepted: {ops}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let scaled = patch(r#"[{"op":"replace","path":"/spec/tasks/0/replicas","value":2}]"#);
    assert!(scaled.status.success(), "{scaled:?}");
    let cases = [
        (
            r#"[{"op":"replace","path":"/spec/tasks/1/type","value":"collector"}]"#,
            "spec.tasks[1].type: Forbidden: task helper is a none task and cannot become a collector task on an existing job",
        ),
        (
            r#"[{"op":"add","path":"/spec/tasks/-","value":{"type":"learner","name":"second","template":{"spec":{"containers":[{"name":"di-container","image":"busybox"}]}}}}]"#,
            "the number of learner task is more than one",
        ),
        (
            r#"[{"op":"replace","path":"/spec/tasks/1/name","value":"renamed"}]"#,
            "spec.tasks: Forbidden: the tasks of an existing job cannot be added, removed or renamed (it has helper, learner, the update has learner, renamed)",
        ),
    ];
    for (ops, message) in cases {
        let err = refused(ops);
        assert!(err.contains(message), "{err}");
    }
    assert_eq!(
        jsonpath(&k, "dijob/edit", "{.spec.tasks[*].type}"),
        "learner none"
    );
}

/// `diorch webhook-cert --host 127.0.0.1 --out-dir dir` against the cluster of `kubeconfig`,
/// with `extra` flags; its report (stdout). Fails the test when the command fails.
pub fn webhook_cert(kubeconfig: &std::path::Path, dir: &std::path::Path, extra: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_diorch"))
        .args(["webhook-cert", "--kubeconfig"])
        .arg(kubeconfig)
        .arg("--out-dir")
        .arg(dir)
        .args(["--host", "127.0.0.1"])
        .args(extra)
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
