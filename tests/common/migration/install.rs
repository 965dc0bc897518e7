//! DI-orchestrator's install as the scenario plays it, the removal commands of docs/migration.md
//! that take it away, and the switch to diorch's CRD.

use std::path::PathBuf;

use super::played::Played;
use super::reads::{path, uids, wait_established, wait_served};
use super::{Kubectl, REMOVAL_MARKER};
use crate::common::controller::{end_pod, pods};

/// Cluster-scoped objects the removal commands name: the scenario suffixes them, so a real
/// install of DI-orchestrator on the cluster is never touched.
const CLUSTER_SCOPED: &[&str] = &[
    "di-operator-cluster-role",
    "di-operator-cluster-rolebinding",
    "di-proxy-role",
    "di-proxy-rolebinding",
    "di-metrics-reader",
    "di-mutating-webhook-configuration",
    "di-validating-webhook-configuration",
];

/// DI-orchestrator's install as `config/di-manager.yaml` (v1.1) has it, without the CRD, in
/// namespace `ns`; cluster-scoped names suffixed with `-suffix` and labelled
/// `diorch.io/e2e=suffix`. Plus the leader-election lock its operator leaves (controller-runtime
/// v0.9's `configmapsleases`: a ConfigMap and a Lease named by its election ID).
pub(super) fn di_orchestrator_install(ns: &str, suffix: &str) -> String {
    let label = format!("labels: {{diorch.io/e2e: {suffix}}}");
    let rules_operator = r#"
- {apiGroups: [""], resources: [events, pods, services], verbs: [create, delete, get, list, patch, update, watch]}
- {apiGroups: [""], resources: [namespaces, nodes], verbs: [get, list, watch]}
- {apiGroups: [diengine.opendilab.org], resources: [dijobs], verbs: [create, delete, get, list, patch, update, watch]}
- {apiGroups: [diengine.opendilab.org], resources: [dijobs/finalizers], verbs: [update]}
- {apiGroups: [diengine.opendilab.org], resources: [dijobs/status], verbs: [get, patch, update]}"#;
    let deployment = |name: &str, container: &str, subcommand: &str, args: &[&str]| {
        let args: String = args
            .iter()
            .map(|a| format!("        - \"{a}\"\n"))
            .collect();
        format!(
            r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {ns}, labels: {{control-plane: {name}}}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{control-plane: {name}}}}}
  template:
    metadata: {{labels: {{control-plane: {name}}}}}
    spec:
      serviceAccount: di-orchestrator
      terminationGracePeriodSeconds: 10
      containers:
      - name: {container}
        image: opendilab/di-orchestrator:v1.1.3
        imagePullPolicy: Always
        command: [/di-orchestrator, {subcommand}]
        args:
{args}
        envFrom: [{{configMapRef: {{name: di-config}}}}]
        resources: {{limits: {{cpu: 100m, memory: 500Mi}}, requests: {{cpu: 100m, memory: 500Mi}}}}
        securityContext: {{allowPrivilegeEscalation: false}}
"#
        )
    };
    let subject =
        format!("subjects: [{{kind: ServiceAccount, name: di-orchestrator, namespace: {ns}}}]");
    [
        format!("apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: di-orchestrator, namespace: {ns}, labels: {{name: di-orchestrator}}}}\n"),
        format!("apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: di-leader-election-role, namespace: {ns}}}\nrules:\n- {{apiGroups: [\"\", coordination.k8s.io], resources: [configmaps, leases], verbs: [get, list, watch, create, update, patch, delete]}}\n- {{apiGroups: [\"\"], resources: [events], verbs: [create, patch]}}\n"),
        format!("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: di-metrics-reader-{suffix}, {label}}}\nrules:\n- {{nonResourceURLs: [/metrics], verbs: [get]}}\n"),
        format!("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: di-operator-cluster-role-{suffix}, {label}}}\nrules:{rules_operator}\n"),
        format!("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: di-proxy-role-{suffix}, {label}}}\nrules:\n- {{apiGroups: [authentication.k8s.io], resources: [tokenreviews], verbs: [create]}}\n- {{apiGroups: [authorization.k8s.io], resources: [subjectaccessreviews], verbs: [create]}}\n"),
        format!("apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: di-leader-election-rolebinding, namespace: {ns}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: di-leader-election-role}}\n{subject}\n"),
        format!("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: di-operator-cluster-rolebinding-{suffix}, {label}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: di-operator-cluster-role-{suffix}}}\n{subject}\n"),
        format!("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: di-proxy-rolebinding-{suffix}, {label}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: di-proxy-role-{suffix}}}\n{subject}\n"),
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: di-config, namespace: {ns}}}\ndata:\n  DI_JOB_DEFAULT_RESOURCES: '{{\"resources\": {{\"requests\": {{\"cpu\": 1, \"memory\": \"2Gi\"}}}}}}'\n"),
        format!("apiVersion: v1\nkind: Service\nmetadata: {{name: di-operator-metrics-service, namespace: {ns}, labels: {{control-plane: di-operator}}}}\nspec: {{ports: [{{name: https, port: 8443, targetPort: 8443}}], selector: {{control-plane: di-operator}}}}\n"),
        format!("apiVersion: v1\nkind: Service\nmetadata: {{name: di-server, namespace: {ns}, labels: {{control-plane: di-server}}}}\nspec: {{ports: [{{port: 8081, protocol: TCP, targetPort: 8081}}], selector: {{control-plane: di-server}}}}\n"),
        deployment(
            "di-operator",
            "manager",
            "operator",
            &[
                "--zap-devel=true",
                "--probe-addr=:8080",
                "--metric-addr=:8443",
                "--leader-elect",
                "--qps=100",
                "--burst=200",
            ],
        ),
        deployment(
            "di-server",
            "server",
            "server",
            &[
                "--zap-devel=true",
                "--server-bind-address=:8081",
                "--qps=100",
                "--burst=200",
            ],
        ),
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: 12841a5d.opendilab.org, namespace: {ns}}}\n"),
        format!("apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {{name: 12841a5d.opendilab.org, namespace: {ns}}}\nspec: {{holderIdentity: di-operator-57cc65d5c9-5vnvn_0b0e, leaseDurationSeconds: 15}}\n"),
    ]
    .join("---\n")
}

/// Splits a command line of the doc into words: whitespace separates, single quotes group, a
/// word starting with `#` ends the line.
pub(super) fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let (mut quoted, mut started) = (false, false);
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                started = true;
            }
            c if c.is_whitespace() && !quoted => {
                if started {
                    words.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            '#' if !quoted && !started => break,
            c => {
                word.push(c);
                started = true;
            }
        }
    }
    if started {
        words.push(word);
    }
    words
}

/// The commands of the block docs/migration.md marks with [`REMOVAL_MARKER`], as words
/// (without the leading `kubectl`).
pub fn doc_removal_commands() -> Vec<Vec<String>> {
    let doc = std::fs::read_to_string(crate::common::repo_root().join("docs/migration.md"))
        .expect("docs/migration.md");
    let at = doc
        .find(REMOVAL_MARKER)
        .expect("docs/migration.md has no removal block marker");
    let commands: Vec<Vec<String>> = doc[at..]
        .lines()
        .skip_while(|l| !l.starts_with("```sh"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .map(shell_words)
        .filter(|w| !w.is_empty())
        .map(|w| {
            assert_eq!(
                w[0], "kubectl",
                "not a kubectl command in the removal block: {w:?}"
            );
            w[1..].to_vec()
        })
        .collect();
    assert!(!commands.is_empty(), "empty removal block");
    commands
}

/// The switch, as docs/migration.md says: DI-orchestrator's install (in `install_ns`, cluster
/// names suffixed with `suffix`) goes with the doc's own commands, and nothing of the jobs with
/// it; then diorch's CRD goes over DI-orchestrator's. Returns diorch's `crds/` folder.
pub(super) fn switch(
    k: &Kubectl,
    n: &Kubectl,
    played: &Played,
    install_ns: &str,
    suffix: &str,
) -> PathBuf {
    let before = &played.before;
    let rename = |word: &str| {
        if word == "di-system" {
            install_ns.to_string()
        } else if CLUSTER_SCOPED.contains(&word) {
            format!("{word}-{suffix}")
        } else {
            word.to_string()
        }
    };
    for command in doc_removal_commands() {
        let words: Vec<String> = command.iter().map(|w| rename(w)).collect();
        let args: Vec<&str> = words.iter().map(String::as_str).collect();
        println!("migration: kubectl {}", args.join(" "));
        k.ok(&args);
    }
    let left = k.ok(&[
        "get",
        "deployments,replicasets,pods,services,configmaps,serviceaccounts,roles,rolebindings,leases",
        "-n",
        install_ns,
        "-o",
        "name",
    ]);
    // What kube-controller-manager puts in every namespace is not the install's.
    let left: Vec<&str> = left
        .lines()
        .filter(|l| !["configmap/kube-root-ca.crt", "serviceaccount/default"].contains(l))
        .collect();
    assert!(left.is_empty(), "the doc's commands left {left:?}");
    let cluster_left = k.ok(&[
        "get",
        "clusterroles,clusterrolebindings",
        "-l",
        &format!("diorch.io/e2e={suffix}"),
        "-o",
        "name",
    ]);
    assert_eq!(cluster_left, "", "the doc's commands left cluster RBAC");
    assert_eq!(uids(&pods(n, "job-with-tasks")), uids(before));
    // A worker fails while no operator runs: its pod just stays Failed until diorch looks.
    end_pod(n, "job-restarted-learner-0", "Failed");
    // diorch's CRD over DI-orchestrator's: a plain client-side apply, as `kubectl apply -k
    // deploy/` does with the same file (kubectl warns that the annotation it uses is missing).
    let crds = crate::common::repo_root().join("crds");
    let applied = k.run(&["apply", "-f", path(&crds)]);
    let warned = String::from_utf8_lossy(&applied.stderr);
    assert!(applied.status.success(), "{warned}");
    assert!(
        warned.contains("missing the kubectl.kubernetes.io/last-applied-configuration annotation"),
        "{warned}"
    );
    wait_established(k);
    wait_served(n, true);
    crds
}
