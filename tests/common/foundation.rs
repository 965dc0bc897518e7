//! Foundation scenarios (CRD, samples, validation, subresources, garbage collection) written
//! against a `Kubectl`, so the sandbox integration tests and the real-cluster e2e suite run
//! the very same steps.

use std::time::Duration;

use super::{Kubectl, di_orchestrator_samples, repo_root};

const CRD_NAME: &str =
    "customresourcedefinition.apiextensions.k8s.io/dijobs.diengine.opendilab.org";

/// `kubectl apply -f crds/` (client side) and wait until the CRD is established.
pub fn install_crd(k: &Kubectl) {
    let crds = repo_root().join("crds");
    let out = k.ok(&["apply", "-f", crds.to_str().expect("utf-8 path")]);
    assert!(out.contains("dijobs.diengine.opendilab.org"), "{out}");
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        CRD_NAME,
    ]);
}

/// Creates a namespace for a scenario (idempotent).
pub fn create_namespace(k: &Kubectl, ns: &str) {
    let manifest = format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n");
    k.ok_stdin(&["apply", "-f", "-"], &manifest);
}

/// `kubectl get dijobs`' columns, DI-orchestrator's printer columns in order.
pub const DI_ORCHESTRATOR_COLUMNS: [&str; 7] = [
    "NAME",
    "PHASE",
    "READYREPLICAS",
    "REPLICAS",
    "RESTARTS",
    "RESCHEDULES",
    "AGE",
];

/// Every DI-orchestrator sample applies unchanged, and `kubectl get dijobs` shows the columns.
pub fn samples_apply_and_print_columns(k: &Kubectl, ns: &str) {
    let k = k.in_namespace(ns);
    for sample in di_orchestrator_samples() {
        let out = k.ok(&["apply", "-f", sample.to_str().expect("utf-8 path")]);
        assert!(out.contains("dijob.diengine.opendilab.org/"), "{out}");
    }
    let table = k.ok(&["get", "dijobs"]);
    let header = super::table_row(&table, 0);
    assert_eq!(header, DI_ORCHESTRATOR_COLUMNS, "{table}");
    assert!(table.contains("job-with-tasks"), "{table}");
    assert!(table.contains("serial-test"), "{table}");
    // The short name works as DI-orchestrator's does.
    let names = k.ok(&["get", "dijob", "-o", "name"]);
    assert!(
        names.contains("dijob.diengine.opendilab.org/serial-test"),
        "{names}"
    );
    // Schema defaults are applied by the API server.
    let replicas = k.ok(&[
        "get",
        "dijob",
        "serial-test",
        "-o",
        "jsonpath={.spec.tasks[0].replicas} {.spec.priority} {.spec.preemptible}",
    ]);
    assert_eq!(replicas, "1 normal false");
}

fn dijob_manifest(name: &str, spec_extra: &str, task: &str) -> String {
    format!(
        "apiVersion: diengine.opendilab.org/v2alpha1\nkind: DIJob\nmetadata:\n  name: {name}\nspec:\n{spec_extra}  tasks:\n  - {task}\n    template:\n      spec:\n        containers:\n        - name: di-container\n          image: busybox\n"
    )
}

/// `text` with list indices dropped from field paths: `spec.tasks[0].replicas` becomes
/// `spec.tasks.replicas`. kube-apiserver before 1.28 names list fields without the index
/// (`spec.tasks.replicas`), 1.28+ and the sandbox with it, and kubectl's client-side validation
/// (used where the server has no field validation) as `DIJob.spec.tasks[0].replicas`.
pub fn without_indices(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '[' {
            let mut index = String::new();
            while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
                index.push(d);
                chars.next();
            }
            if !index.is_empty() && chars.peek() == Some(&']') {
                chars.next();
                continue;
            }
            out.push('[');
            out.push_str(&index);
            continue;
        }
        out.push(c);
    }
    out
}

/// Whether `err` says `needle`, comparing field paths by their names: list indices are ignored
/// on both sides, so `spec.tasks[0].replicas` matches a server that says `spec.tasks.replicas`,
/// and case is ignored (`Required value` / `missing required field`).
pub fn says(err: &str, needle: &str) -> bool {
    without_indices(err)
        .to_lowercase()
        .contains(&without_indices(needle).to_lowercase())
}

/// Asserts that `err` (a refused `kubectl apply`) says every one of `needles` ([`says`]).
pub fn assert_says(err: &str, needles: &[&str]) {
    for needle in needles {
        assert!(says(err, needle), "expected {needle:?} in: {err}");
    }
}

/// Invalid DIJobs are refused at `kubectl apply`, naming the field. Field paths are compared
/// by name ([`says`]). The CRD's CEL rules are checked by the field they are declared on and
/// their message: kube-apiserver before 1.28 has no `fieldPath` or `reason` and reports a rule
/// on its object (`spec.tasks[0]: Invalid value: …: <message>`); the exact 1.28+ form
/// (`spec.tasks[0].name: Required value: <message>`) is asserted against the sandbox in
/// `tests/operator/crd_schema.rs`. Where the server has no field validation (before 1.25) kubectl
/// validates types itself and words it its own way (`expected "integer"`).
pub fn invalid_dijobs_are_refused(k: &Kubectl, ns: &str) {
    let k = k.in_namespace(ns);
    let cases = [
        (
            dijob_manifest("bad-replicas", "", "type: learner\n    replicas: 0"),
            vec![
                "spec.tasks[0].replicas",
                "should be greater than or equal to 1",
            ],
        ),
        (
            dijob_manifest("bad-policy", "  cleanPodPolicy: Sometimes\n", "type: learner"),
            vec![
                "spec.cleanPodPolicy",
                "Unsupported value: \"Sometimes\"",
                "\"Running\", \"All\", \"None\"",
            ],
        ),
        (
            dijob_manifest("bad-type", "", "type: trainer"),
            vec!["spec.tasks[0].type", "Unsupported value: \"trainer\""],
        ),
        (
            dijob_manifest("bad-kind", "", "type: learner\n    replicas: two"),
            vec!["spec.tasks[0].replicas", "integer"],
        ),
        (
            "apiVersion: diengine.opendilab.org/v2alpha1\nkind: DIJob\nmetadata:\n  name: no-tasks\nspec:\n  priority: high\n".to_string(),
            // The server says `spec.tasks: Required value`; kubectl's client-side validation
            // `ValidationError(DIJob.spec): missing required field "tasks"`.
            vec!["spec", "tasks", "required"],
        ),
        // The CRD's CEL rules.
        (
            dijob_manifest("none-unnamed", "", "type: none"),
            vec![
                "spec.tasks[0]",
                ": none type task has no name; give every task of type none a name",
            ],
        ),
        (
            dijob_manifest("bad-bounds", "", "type: collector\n    replicas: 2\n    minReplicas: 3"),
            vec![
                "spec.tasks[0]",
                ": minReplicas must not exceed replicas; lower minReplicas or raise replicas",
            ],
        ),
        (
            dijob_manifest("bad-max", "", "type: collector\n    replicas: 2\n    maxReplicas: 1"),
            vec!["spec.tasks[0]", ": maxReplicas must be at least replicas"],
        ),
    ];
    for (manifest, expected) in cases {
        let err = k.fails_stdin(&["apply", "-f", "-"], &manifest);
        assert_says(&err, &expected);
    }
    let listed = k.ok(&["get", "dijobs", "-o", "name"]);
    for name in [
        "bad-replicas",
        "bad-policy",
        "bad-type",
        "bad-kind",
        "no-tasks",
        "none-unnamed",
        "bad-bounds",
        "bad-max",
    ] {
        assert!(!listed.contains(name), "{name} was stored: {listed}");
    }
}

/// A status write does not bump metadata.generation; a spec write does. A status write
/// cannot change the spec and a spec write cannot change the status.
pub fn status_subresource_split(k: &Kubectl, ns: &str) {
    let k = k.in_namespace(ns);
    k.ok_stdin(
        &["apply", "-f", "-"],
        &dijob_manifest("split", "", "type: learner"),
    );
    let generation = |k: &Kubectl| {
        k.ok(&[
            "get",
            "dijob",
            "split",
            "-o",
            "jsonpath={.metadata.generation}",
        ])
    };
    let before = generation(&k);
    k.ok(&[
        "patch",
        "dijob",
        "split",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Running","restarts":2},"spec":{"priority":"high"}}"#,
    ]);
    assert_eq!(generation(&k), before, "a status write bumped generation");
    let seen = k.ok(&[
        "get",
        "dijob",
        "split",
        "-o",
        "jsonpath={.status.phase} {.status.restarts} {.spec.priority}",
    ]);
    assert_eq!(seen, "Running 2 normal");

    k.ok(&[
        "patch",
        "dijob",
        "split",
        "--type=merge",
        "-p",
        r#"{"spec":{"priority":"high"},"status":{"phase":"Failed"}}"#,
    ]);
    let after: u64 = generation(&k).parse().expect("generation");
    assert_eq!(after, before.parse::<u64>().expect("generation") + 1);
    let seen = k.ok(&[
        "get",
        "dijob",
        "split",
        "-o",
        "jsonpath={.status.phase} {.spec.priority}",
    ]);
    assert_eq!(seen, "Running high");
}

/// Deleting an owner deletes its dependents (background propagation, kubectl's default).
pub fn owner_deletion_cascades(k: &Kubectl, ns: &str) {
    let k = k.in_namespace(ns);
    k.ok(&["create", "configmap", "owner", "--from-literal=a=b"]);
    let uid = k.ok(&[
        "get",
        "configmap",
        "owner",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    let dependent = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dependent\n  ownerReferences:\n  - apiVersion: v1\n    kind: ConfigMap\n    name: owner\n    uid: {uid}\n    blockOwnerDeletion: true\n    controller: true\ndata:\n  x: \"z\"\n"
    );
    k.ok_stdin(&["apply", "-f", "-"], &dependent);
    k.ok(&["delete", "configmap", "owner"]);
    k.wait_for(
        &["get", "configmaps", "-o", "name"],
        Duration::from_secs(60),
        |out| !out.contains("configmap/dependent"),
    );
}
