//! Switching a cluster from DI-orchestrator v2 to diorch and back (docs/migration.md), on a real
//! API server (`tests/e2e.rs`, `e2e_migration_from_di_orchestrator`).
//!
//! DI-orchestrator's Go binary is not available, so the scenario plays what it leaves on a
//! cluster: its own CRD (`../shared/fixtures`), its install (`config/di-manager.yaml` without
//! the CRD), DIJobs created from its samples, and for three of them the pods, headless service
//! and status its operator writes (spec sections 2 to 8: two running, one of them restarted
//! once, and one succeeded), built here field by field from the spec, not from diorch's code. Then it switches to diorch the way docs/migration.md says
//! (running the doc's own removal commands), checks what the doc promises, and goes back.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use super::Kubectl;
use super::controller::{
    OperatorProcess, T, end_pod, http, job_events, pods, uid, wait_phase, wait_pods_until,
};

const CRD: &str = "customresourcedefinition.apiextensions.k8s.io/dijobs.diengine.opendilab.org";

/// `DI_SERVER_URL` in the pods DI-orchestrator creates: its `--di-server-url` default, which its
/// kustomize install does not override (spec sections 5 and 13).
pub const DI_ORCHESTRATOR_SERVER_URL: &str = "http://di-server.di-system.svc.cluster.local:8081";

/// `DI_SERVER_URL` as diorch's install sets it (`--di-server-url` in deploy/base/deployment.yaml).
pub const DIORCH_SERVER_URL: &str = "http://diorch-server.diorch-system.svc.cluster.local:8081";

/// The line of docs/migration.md that marks the removal commands this scenario runs.
pub const REMOVAL_MARKER: &str =
    "<!-- removal: the block below is run by tests/common/migration.rs -->";

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

/// `../shared/fixtures` (or `$DIORCH_SHARED/fixtures`): DI-orchestrator's own CRD and samples.
pub fn fixtures() -> PathBuf {
    let shared = std::env::var_os("DIORCH_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| super::repo_root().join("../shared"));
    let dir = shared.join("fixtures");
    assert!(
        dir.join("di-orchestrator-dijob-crd.yaml").is_file(),
        "the migration scenario needs DI-orchestrator's CRD and samples in {}: set DIORCH_SHARED to the folder holding fixtures/, or run with --skip e2e_migration_from_di_orchestrator",
        dir.display()
    );
    dir
}

/// Puts diorch's CRD back when dropped (the scenario ends on it, but an assertion may fail
/// while DI-orchestrator's is installed), so the next test finds what it expects.
pub struct RestoreDiorchCrd<'a>(pub &'a Kubectl);

impl Drop for RestoreDiorchCrd<'_> {
    fn drop(&mut self) {
        let crds = super::repo_root().join("crds");
        let _ = self
            .0
            .run(&["apply", "-f", crds.to_str().unwrap_or("crds")]);
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn wait_established(k: &Kubectl) {
    // Right after a create, kube-apiserver answers without status.conditions, and `kubectl
    // wait` fails instead of waiting on such an object.
    k.wait_for(
        &[
            "get",
            CRD,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Established\")].status}",
        ],
        T,
        |out| out == "True",
    );
}

/// Waits until the API server serves the CRD just written: `kubectl get dijobs -o wide` shows
/// diorch's wide-only `Allocation` column exactly when `diorch` (the server switches to a
/// replaced definition a moment after the write). Needs a DIJob in `k`'s namespace.
fn wait_served(k: &Kubectl, diorch: bool) {
    k.wait_for(&["get", "dijobs", "-o", "wide"], T, |table| {
        table
            .lines()
            .next()
            .is_some_and(|header| header.contains("ALLOCATION") == diorch)
    });
}

/// DI-orchestrator's install as `config/di-manager.yaml` (v1.1) has it, without the CRD, in
/// namespace `ns`; cluster-scoped names suffixed with `-suffix` and labelled
/// `diorch.io/e2e=suffix`. Plus the leader-election lock its operator leaves (controller-runtime
/// v0.9's `configmapsleases`: a ConfigMap and a Lease named by its election ID).
fn di_orchestrator_install(ns: &str, suffix: &str) -> String {
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
fn shell_words(line: &str) -> Vec<String> {
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
    let doc = std::fs::read_to_string(super::repo_root().join("docs/migration.md"))
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

/// A replica as DI-orchestrator created it: its task (index in `spec.tasks`), local rank and
/// global rank.
#[derive(Clone, Copy, Debug)]
struct Replica {
    task: usize,
    local: i64,
    rank: i64,
}

fn fqdn(pod: &str, job: &str, ns: &str) -> String {
    format!("{pod}.di-{job}.{ns}.svc.cluster.local")
}

fn text<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {v}"))
}

/// The pods DI-orchestrator's operator creates for `replicas` of the stored DIJob `job`, and its
/// headless service (spec sections 2 to 5): names, labels, annotations, owner references, the
/// template's spec with restartPolicy, hostname, subdomain and volumes overridden, and the five
/// `DI_*` variables appended to every container's env.
fn di_orchestrator_objects(job: &Value, replicas: &[Replica]) -> Vec<Value> {
    let name = text(&job["metadata"]["name"], "job name");
    let ns = text(&job["metadata"]["namespace"], "job namespace");
    let tasks = job["spec"]["tasks"].as_array().expect("spec.tasks");
    // DI_NODES: every replica of the spec, by task then local rank (not by global rank), and
    // DI_<TASK>_NODES: those of every task of the same type (spec 5, 15.7).
    let mut nodes = Vec::new();
    let mut by_type: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for task in tasks {
        let task_name = text(&task["name"], "task name");
        for i in 0..task["replicas"].as_i64().expect("replicas") {
            let f = fqdn(&format!("{name}-{task_name}-{i}"), name, ns);
            nodes.push(f.clone());
            by_type
                .entry(text(&task["type"], "task type"))
                .or_default()
                .push(f);
        }
    }
    let owner = json!([{
        "apiVersion": "diengine.opendilab.org/v2alpha1",
        "kind": "DIJob",
        "name": name,
        "uid": text(&job["metadata"]["uid"], "job uid"),
        "controller": true,
        "blockOwnerDeletion": true,
    }]);
    let owned = json!({"diengine/job": name, "diengine/operator": "di-operator"});
    let mut objects = Vec::new();
    for r in replicas {
        let task = &tasks[r.task];
        let (task_name, task_type) = (text(&task["name"], "name"), text(&task["type"], "type"));
        let pod = format!("{name}-{task_name}-{}", r.local);
        let mut spec = task["template"]["spec"].clone();
        spec["restartPolicy"] = json!("Never");
        spec["hostname"] = json!(pod);
        spec["subdomain"] = json!(format!("di-{name}"));
        let mut volumes = spec["volumes"].as_array().cloned().unwrap_or_default();
        volumes.extend(
            job["spec"]["volumes"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
        );
        if !volumes.is_empty() {
            spec["volumes"] = json!(volumes);
        }
        // After the user's env. DI-orchestrator builds these from a Go map, so in no fixed
        // order; this is one of its orders, not diorch's.
        let injected = [
            ("DI_NODES".to_string(), nodes.join(",")),
            (
                format!("DI_{}_NODES", task_name.to_uppercase().replace('-', "_")),
                by_type[task_type].join(","),
            ),
            ("DI_RANK".to_string(), r.rank.to_string()),
            (
                "DI_SERVER_URL".to_string(),
                DI_ORCHESTRATOR_SERVER_URL.to_string(),
            ),
            ("DI_JOB_ID".to_string(), format!("{ns}/{name}")),
        ];
        for container in spec["containers"].as_array_mut().expect("containers") {
            let mut env = container["env"].as_array().cloned().unwrap_or_default();
            env.extend(injected.iter().map(|(k, v)| json!({"name": k, "value": v})));
            container["env"] = json!(env);
        }
        objects.push(json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod,
                "namespace": ns,
                "labels": {
                    "diengine/job": name,
                    "diengine/operator": "di-operator",
                    "diengine/pod": pod,
                    "diengine/task-type": task_type,
                    "diengine/task-name": task_name,
                },
                "annotations": {
                    "diengine/replicas": nodes.len().to_string(),
                    "diengine/rank": r.rank.to_string(),
                    "diengine/task-rank": r.local.to_string(),
                    "diengine/node": "",
                },
                "ownerReferences": owner,
            },
            "spec": spec,
        }));
    }
    objects.push(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": format!("di-{name}"), "namespace": ns, "labels": owned, "ownerReferences": owner},
        "spec": {"clusterIP": "None", "selector": owned, "ports": [{"name": "di-port", "port": 22270}]},
    }));
    objects
}

/// A condition as DI-orchestrator writes it (spec 6.4): no observedGeneration.
fn condition(type_: &str, status: &str, reason: &str, message: &str, at: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message,
           "lastUpdateTime": at, "lastTransitionTime": at})
}

fn job_json(k: &Kubectl, job: &str) -> Value {
    serde_json::from_str(&k.ok(&["get", &format!("dijob/{job}"), "-o", "json"])).expect("job")
}

fn env<'a>(pod: &'a Value, name: &str) -> Option<&'a str> {
    pod["spec"]["containers"][0]["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)?["value"]
        .as_str()
}

fn env_names(pod: &Value) -> Vec<String> {
    pod["spec"]["containers"][0]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["name"].as_str().map(String::from))
        .collect()
}

/// The pod's volumes but the service account token the API server adds to every pod (its
/// name is random).
fn volumes(pod: &Value) -> Vec<Value> {
    pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| !text(&v["name"], "volume name").starts_with("kube-api-access-"))
        .cloned()
        .collect()
}

fn uids(pods: &BTreeMap<String, Value>) -> BTreeMap<String, String> {
    pods.iter().map(|(n, p)| (n.clone(), uid(p))).collect()
}

/// The replica API's GET replicas of `job`: the `data` array.
fn replicas_answer(api: &str, ns: &str, job: &str) -> Value {
    let (code, body) = http(
        api,
        "GET",
        &format!("/v2alpha1/job/{ns}.{job}/replicas"),
        "",
    );
    assert_eq!(code, 200, "{body}");
    body["data"].clone()
}

fn address(pod: &Value) -> String {
    format!("{}:22270", text(&pod["status"]["podIP"], "podIP"))
}

/// The status fields diorch adds; DI-orchestrator's CRD prunes them.
const DIORCH_STATUS: &[&str] = &["ranks", "startTime", "observedGeneration"];

fn patch_status(k: &Kubectl, job: &str, status: &Value) {
    let patch = json!({ "status": status }).to_string();
    k.ok(&[
        "patch",
        &format!("dijob/{job}"),
        "--subresource=status",
        "--type=merge",
        "-p",
        &patch,
    ]);
}

/// Creates DI-orchestrator's `objects` for a job (its pods, and its service unless `service`
/// is false: DI-orchestrator deletes it when a job finishes).
fn create_objects(k: &Kubectl, job: &str, replicas: &[Replica], service: bool) {
    let objects: Vec<Value> = di_orchestrator_objects(&job_json(k, job), replicas)
        .into_iter()
        .filter(|o| service || o["kind"] != "Service")
        .collect();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    k.ok_stdin(&["create", "-f", "-"], &list.to_string());
}

/// The status DI-orchestrator writes for a running job whose every pod is ready (spec 6.4,
/// 6.5, 7.1): the conditions of every phase visited, the current one last and True.
fn running_status(conditions: Vec<Value>, restarts: i64) -> Value {
    json!({
        "phase": "Running",
        "conditions": conditions,
        "restarts": restarts,
        "reschedules": 0,
        "replicas": 4,
        "readyReplicas": 4,
        "taskStatus": {"learner": {"Running": 1}, "evaluator": {"Running": 1}, "collector": {"Running": 2}},
        "profilings": {},
    })
}

/// `status` (as diorch wrote it) is `played` (as DI-orchestrator wrote it) continued: the same
/// phase, counters, counts and conditions (times included), diorch's observedGeneration added.
fn assert_continues(status: &Value, played: &Value) {
    for field in [
        "phase",
        "restarts",
        "reschedules",
        "replicas",
        "readyReplicas",
        "taskStatus",
        "completionTimestamp",
    ] {
        assert_eq!(status[field], played[field], "status.{field}: {status:#}");
    }
    let conditions = status["conditions"].as_array().expect("conditions");
    let played_conditions = played["conditions"].as_array().expect("played");
    assert_eq!(conditions.len(), played_conditions.len(), "{status:#}");
    for (got, was) in conditions.iter().zip(played_conditions) {
        let mut got = got.clone();
        assert_eq!(got["observedGeneration"], 1, "{got}");
        got.as_object_mut()
            .expect("condition")
            .remove("observedGeneration");
        assert_eq!(&got, was);
    }
    assert_eq!(status["observedGeneration"], 1);
}

/// The whole migration: DI-orchestrator's cluster with two running jobs and a finished one,
/// the switch, adoption, a new job, and the way back. `ns` is the jobs' namespace,
/// `install_ns` plays `di-system`, and `suffix` names the cluster-scoped objects of the played
/// install (labelled `diorch.io/e2e=suffix`); the caller creates both namespaces and cleans up.
pub fn from_di_orchestrator_and_back(
    k: &Kubectl,
    kubeconfig: &Path,
    ns: &str,
    install_ns: &str,
    suffix: &str,
) {
    let fixtures = fixtures();
    let old_crd = fixtures.join("di-orchestrator-dijob-crd.yaml");
    let samples = fixtures.join("di-orchestrator-samples");
    let n = k.in_namespace(ns);

    // --- DI-orchestrator's cluster. Its CRD as its README installs it (`kubectl create`: too
    // big for a client-side apply), replacing the definition an earlier test left.
    let exists = k.run(&["get", CRD, "-o", "name"]).status.success();
    k.ok(&[
        if exists { "replace" } else { "create" },
        "-f",
        path(&old_crd),
    ]);
    wait_established(k);
    k.ok_stdin(
        &["create", "-f", "-"],
        &di_orchestrator_install(install_ns, suffix),
    );
    // Its samples as submitted: atari-dqn-dist running; a copy of it that DI-orchestrator
    // restarted once (backoffLimit 3 instead of the sample's 0, so restarts fit); a copy of
    // dijob-serial that has succeeded.
    n.ok(&["create", "-f", path(&samples.join("atari-dqn-dist.yaml"))]);
    let sample =
        std::fs::read_to_string(samples.join("atari-dqn-dist.yaml")).expect("atari-dqn-dist.yaml");
    let restarted = sample
        .replacen("name: job-with-tasks", "name: job-restarted", 1)
        .replacen("backoffLimit: 0", "backoffLimit: 3", 1);
    let serial =
        std::fs::read_to_string(samples.join("dijob-serial.yaml")).expect("dijob-serial.yaml");
    let done = serial.replacen("name: serial-test", "name: serial-done", 1);
    assert!(
        restarted.contains("name: job-restarted")
            && restarted.contains("backoffLimit: 3")
            && done.contains("name: serial-done"),
        "the samples changed"
    );
    n.ok_stdin(&["create", "-f", "-"], &restarted);
    n.ok_stdin(&["create", "-f", "-"], &done);
    wait_served(&n, false);
    // A new namespace refuses pods until the controller-manager made its ServiceAccount.
    n.wait_for(
        &["get", "serviceaccount", "default", "-o", "name"],
        T,
        |s| !s.is_empty(),
    );

    // job-with-tasks ran cleanly: ranks 0..3 in spec order. job-restarted lost collector-0
    // once: DI-orchestrator re-created it with rank max+1 = 4, past DI_NODES (spec 7.4, 15.5).
    let (l0, e0, c0, c1) = (
        Replica {
            task: 0,
            local: 0,
            rank: 0,
        },
        Replica {
            task: 1,
            local: 0,
            rank: 1,
        },
        Replica {
            task: 2,
            local: 0,
            rank: 2,
        },
        Replica {
            task: 2,
            local: 1,
            rank: 3,
        },
    );
    create_objects(&n, "job-with-tasks", &[l0, e0, c0, c1], true);
    create_objects(
        &n,
        "job-restarted",
        &[l0, e0, Replica { rank: 4, ..c0 }, c1],
        true,
    );
    create_objects(&n, "serial-done", &[l0], false);
    n.ok(&[
        "wait",
        "--for=condition=Ready",
        "pod",
        "-l",
        "diengine/operator=di-operator",
        "--timeout=60s",
    ]);
    end_pod(&n, "serial-done-serial-0", "Succeeded");
    let pending = condition(
        "Pending",
        "False",
        "JobPending",
        "job created.",
        "2024-05-01T10:00:00Z",
    );
    let starting = |at: &str| {
        condition(
            "Starting",
            "False",
            "JobStarting",
            "job is starting since all pods are created.",
            at,
        )
    };
    let running = |status: &str, at: &str| {
        condition(
            "Running",
            status,
            "JobRunning",
            "job is running since all pods are ready.",
            at,
        )
    };
    let played_running = running_status(
        vec![
            pending.clone(),
            starting("2024-05-01T10:00:01Z"),
            running("True", "2024-05-01T10:00:30Z"),
        ],
        0,
    );
    let played_restarted = running_status(
        vec![
            pending.clone(),
            condition(
                "Restarting",
                "False",
                "JobRestarting",
                "job is restarting since 1 pods failed.",
                "2024-05-01T11:00:00Z",
            ),
            condition(
                "Starting",
                "False",
                "JobStarting",
                "job is starting since the created pods 4 are matched replicas 4.",
                "2024-05-01T11:00:01Z",
            ),
            running("True", "2024-05-01T11:00:20Z"),
        ],
        1,
    );
    // Finished: the terminal pass dropped taskStatus and readyReplicas, cleanup deleted the
    // service and kept the succeeded pod (cleanPodPolicy Running, spec 8).
    let played_done = json!({
        "phase": "Succeeded",
        "conditions": [
            pending,
            starting("2024-05-01T09:00:01Z"),
            running("False", "2024-05-01T09:00:05Z"),
            condition("Succeeded", "True", "JobSucceeded",
                      "job succeeded since all the replicas are succeeded.", "2024-05-01T09:30:00Z"),
        ],
        "completionTimestamp": "2024-05-01T09:30:00Z",
        "restarts": 0,
        "reschedules": 0,
        "replicas": 1,
        "readyReplicas": 0,
        "profilings": {},
    });
    patch_status(&n, "job-with-tasks", &played_running);
    patch_status(&n, "job-restarted", &played_restarted);
    patch_status(&n, "serial-done", &played_done);
    let before = pods(&n, "job-with-tasks");
    let restarted_before = pods(&n, "job-restarted");
    let done_before = pods(&n, "serial-done");
    assert_eq!(
        (before.len(), restarted_before.len(), done_before.len()),
        (4, 4, 1)
    );
    let service_uid = |job: &str| {
        n.ok(&[
            "get",
            "service",
            &format!("di-{job}"),
            "-o",
            "jsonpath={.metadata.uid}",
        ])
    };
    let service_before = service_uid("job-with-tasks");
    let job_before = job_json(&n, "job-with-tasks");

    // --- The switch, as docs/migration.md says: DI-orchestrator's install goes (the doc's own
    // commands, names moved to the played install), and nothing of the jobs with it.
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
    assert_eq!(uids(&pods(&n, "job-with-tasks")), uids(&before));
    // A worker fails while no operator runs: its pod just stays Failed until diorch looks.
    end_pod(&n, "job-restarted-learner-0", "Failed");
    // diorch's CRD over DI-orchestrator's: a plain client-side apply, as `kubectl apply -k
    // deploy/` does with the same file (kubectl warns that the annotation it uses is missing).
    let crds = super::repo_root().join("crds");
    let applied = k.run(&["apply", "-f", path(&crds)]);
    let warned = String::from_utf8_lossy(&applied.stderr);
    assert!(applied.status.success(), "{warned}");
    assert!(
        warned.contains("missing the kubectl.kubernetes.io/last-applied-configuration annotation"),
        "{warned}"
    );
    wait_established(k);
    wait_served(&n, true);
    let mut operator =
        OperatorProcess::start_with(kubeconfig, &["--di-server-url", DIORCH_SERVER_URL]);
    let api = operator.api_url();

    // --- Adoption of the cleanly running job: its rank table is diorch's first write for it.
    n.wait_for(
        &[
            "get",
            "dijob/job-with-tasks",
            "-o",
            "jsonpath={.status.ranks}",
        ],
        T,
        |r| !r.is_empty(),
    );
    let adopted = job_json(&n, "job-with-tasks");
    assert_eq!(
        adopted["status"]["ranks"],
        json!([
            "job-with-tasks-learner-0",
            "job-with-tasks-evaluator-0",
            "job-with-tasks-collector-0",
            "job-with-tasks-collector-1"
        ]),
        "ranks taken from the pods' diengine/rank"
    );
    assert_continues(&adopted["status"], &played_running);
    // The same object: replacing the CRD keeps the uid, and diorch's schema reads the spec as
    // DI-orchestrator's stored it (no new defaults).
    assert_eq!(adopted["metadata"]["uid"], job_before["metadata"]["uid"]);
    assert_eq!(adopted["spec"], job_before["spec"]);
    assert!(
        adopted["status"]["startTime"].is_string(),
        "{:#}",
        adopted["status"]
    );
    // The replica API answers for the adopted pods as di-server did (an address per rank).
    let want: Vec<String> = [
        "job-with-tasks-learner-0",
        "job-with-tasks-evaluator-0",
        "job-with-tasks-collector-0",
        "job-with-tasks-collector-1",
    ]
    .iter()
    .map(|p| address(&before[*p]))
    .collect();
    assert_eq!(
        replicas_answer(&api, ns, "job-with-tasks"),
        json!(want),
        "GET replicas"
    );

    // --- The finished job is left as it was: its succeeded pod kept, no service made, its
    // status (completionTimestamp included) continued.
    n.wait_for(
        &[
            "get",
            "dijob/serial-done",
            "-o",
            "jsonpath={.status.observedGeneration}",
        ],
        T,
        |g| g == "1",
    );
    assert_continues(&job_json(&n, "serial-done")["status"], &played_done);
    assert_eq!(uids(&pods(&n, "serial-done")), uids(&done_before));
    assert!(
        !n.ok(&["get", "services", "-o", "name"])
            .contains("service/di-serial-done")
    );

    // --- The restarted job: the failure of the switch window is a restart counted on top of
    // DI-orchestrator's; only the failed pod is re-created, with its rank. collector-0's rank 4
    // is past the job's size (4 replicas): the annotation is ignored and reported, and it
    // takes the free rank 2 in the table. Its pod is not touched: its env still says DI_RANK=4.
    n.wait_for(
        &[
            "get",
            "dijob/job-restarted",
            "-o",
            "jsonpath={.status.restarts}",
        ],
        T,
        |r| r == "2",
    );
    wait_phase(&n, "job-restarted", "Running");
    let after_window = pods(&n, "job-restarted");
    let learner = &after_window["job-restarted-learner-0"];
    assert_ne!(
        uid(learner),
        uid(&restarted_before["job-restarted-learner-0"]),
        "the failed pod is replaced"
    );
    assert_eq!(
        (env(learner, "DI_RANK"), env(learner, "DI_SERVER_URL")),
        (Some("0"), Some(DIORCH_SERVER_URL))
    );
    for name in ["evaluator-0", "collector-0", "collector-1"] {
        let name = format!("job-restarted-{name}");
        assert_eq!(
            uid(&after_window[&name]),
            uid(&restarted_before[&name]),
            "{name}"
        );
    }
    let adopted = job_json(&n, "job-restarted");
    assert_eq!(
        adopted["status"]["ranks"],
        json!([
            "job-restarted-learner-0",
            "job-restarted-evaluator-0",
            "job-restarted-collector-0",
            "job-restarted-collector-1"
        ])
    );
    let ignored = "RankIgnored: pod job-restarted-collector-0: annotation diengine/rank=\"4\" is not a rank of this job (0 to 3); ignored";
    super::ha::wait_until("the RankIgnored Event", T, || {
        job_events(&n, "job-restarted").contains(ignored)
    });
    // The replica API places pods by status.ranks before their annotations: the pod with the
    // stale rank 4 is answered at its table rank 2 (di-server panicked on it: 500, spec 15.6).
    assert_eq!(
        replicas_answer(&api, ns, "job-restarted"),
        json!([
            address(learner),
            address(&restarted_before["job-restarted-evaluator-0"]),
            address(&restarted_before["job-restarted-collector-0"]),
            address(&restarted_before["job-restarted-collector-1"]),
        ])
    );

    // Workers' profilings reach the adopted job's status through the replica API (di-server
    // dropped them, spec 15.3).
    let (code, body) = http(
        &api,
        "POST",
        &format!("/v2alpha1/job/{ns}.job-restarted/profilings"),
        r#"{"data": {"collector": {"throughput": 12.5}}}"#,
    );
    assert_eq!(code, 200, "{body}");
    n.wait_for(
        &[
            "get",
            "dijob/job-restarted",
            "-o",
            "jsonpath={.status.profilings.collector.throughput}",
        ],
        T,
        |t| t == "12.5",
    );

    // collector-0 fails under diorch: re-created with its table rank 2, inside DI_NODES.
    end_pod(&n, "job-restarted-collector-0", "Failed");
    n.wait_for(
        &[
            "get",
            "dijob/job-restarted",
            "-o",
            "jsonpath={.status.restarts}",
        ],
        T,
        |r| r == "3",
    );
    wait_phase(&n, "job-restarted", "Running");
    let after = pods(&n, "job-restarted");
    let old = &restarted_before["job-restarted-collector-0"];
    let new = &after["job-restarted-collector-0"];
    assert_ne!(uid(old), uid(new), "the failed pod is replaced");
    for name in ["learner-0", "evaluator-0", "collector-1"] {
        let name = format!("job-restarted-{name}");
        assert_eq!(uid(&after[&name]), uid(&after_window[&name]), "{name}");
    }
    // The same pod as DI-orchestrator's but for its rank, the server URL and diorch's template
    // hash.
    assert_eq!(new["metadata"]["labels"], old["metadata"]["labels"]);
    assert_eq!(
        new["metadata"]["ownerReferences"],
        old["metadata"]["ownerReferences"]
    );
    let annotations = |p: &Value| -> BTreeMap<String, String> {
        serde_json::from_value(p["metadata"]["annotations"].clone()).expect("annotations")
    };
    let (mut got, mut was) = (annotations(new), annotations(old));
    assert!(got.remove("diorch.io/template-hash").is_some(), "{got:?}");
    assert_eq!(got.remove("diengine/rank").as_deref(), Some("2"));
    assert_eq!(was.remove("diengine/rank").as_deref(), Some("4"));
    assert_eq!(got, was);
    for field in ["hostname", "subdomain", "restartPolicy"] {
        assert_eq!(new["spec"][field], old["spec"][field], "spec.{field}");
    }
    assert_eq!(
        volumes(new),
        volumes(old),
        "template volumes, then the job's"
    );
    assert_eq!(
        env_names(new).into_iter().collect::<BTreeSet<_>>(),
        env_names(old).into_iter().collect::<BTreeSet<_>>()
    );
    assert_eq!(env_names(new)[0], "NCCL_DEBUG", "the user's env first");
    for var in ["DI_NODES", "DI_COLLECTOR_NODES", "DI_JOB_ID"] {
        assert_eq!(env(new, var), env(old, var), "{var}");
    }
    assert_eq!(
        (env(old, "DI_RANK"), env(new, "DI_RANK")),
        (Some("4"), Some("2"))
    );
    let nodes: Vec<&str> = env(new, "DI_NODES")
        .unwrap_or_default()
        .split(',')
        .collect();
    assert_eq!(
        nodes.get(2).copied(),
        Some(fqdn("job-restarted-collector-0", "job-restarted", ns).as_str()),
        "DI_NODES[DI_RANK] is the pod's own FQDN again"
    );
    assert_eq!(
        (env(old, "DI_SERVER_URL"), env(new, "DI_SERVER_URL")),
        (Some(DI_ORCHESTRATOR_SERVER_URL), Some(DIORCH_SERVER_URL))
    );
    assert_eq!(
        env(&after["job-restarted-collector-1"], "DI_SERVER_URL"),
        Some(DI_ORCHESTRATOR_SERVER_URL),
        "adopted pods keep DI-orchestrator's URL"
    );
    super::ha::wait_until("collector-0 in GET replicas", T, || {
        replicas_answer(&api, ns, "job-restarted")[2] == json!(address(new))
    });

    // diorch recorded the template it adopted DI-orchestrator's pods with, so a template edit
    // rolls them as well as its own: both collectors get the new image (one reschedule), and
    // the collector task's record goes with its last adopted pod.
    let adopted = n.ok(&[
        "get",
        "dijob/job-restarted",
        "-o",
        "jsonpath={.status.adoptedTemplateHashes.collector}",
    ]);
    assert!(
        !adopted.is_empty(),
        "collector-1 is adopted: a recorded hash"
    );
    n.ok(&[
        "patch",
        "dijob",
        "job-restarted",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/tasks/2/template/spec/containers/0/image","value":"opendilab/ding:v0.3.2-dist-test"}]"#,
    ]);
    let new_image = json!("opendilab/ding:v0.3.2-dist-test");
    let rolled = wait_pods_until(&n, "job-restarted", "the collectors to roll", |now| {
        let image = |p: &str| now.get(p).map(|p| &p["spec"]["containers"][0]["image"]);
        image("job-restarted-collector-0") == Some(&new_image)
            && image("job-restarted-collector-1") == Some(&new_image)
            && now.len() == 4
    });
    wait_phase(&n, "job-restarted", "Running");
    let c1 = &rolled["job-restarted-collector-1"];
    assert_ne!(
        uid(c1),
        uid(&after["job-restarted-collector-1"]),
        "re-created"
    );
    assert!(
        c1["metadata"]["annotations"]["diorch.io/template-hash"].is_string(),
        "the re-created pod carries diorch's hash"
    );
    assert_eq!(
        n.ok(&[
            "get",
            "dijob/job-restarted",
            "-o",
            "jsonpath={.status.adoptedTemplateHashes.collector}",
        ]),
        "",
        "no adopted collector left"
    );
    assert_eq!(
        n.ok(&[
            "get",
            "dijob/job-restarted",
            "-o",
            "jsonpath={.status.restarts} {.status.reschedules} {.status.observedGeneration}"
        ]),
        "3 1 2"
    );

    // --- A new sample job runs under diorch, and a job with diorch-only fields (suspended).
    n.ok(&["create", "-f", path(&samples.join("dijob-serial.yaml"))]);
    wait_phase(&n, "serial-test", "Running");
    let serial = &pods(&n, "serial-test")["serial-test-serial-0"];
    assert_eq!(env(serial, "DI_SERVER_URL"), Some(DIORCH_SERVER_URL));
    assert_eq!(
        env(serial, "DI_SERIAL_NODES"),
        Some(fqdn("serial-test-serial-0", "serial-test", ns).as_str())
    );
    n.ok_stdin(
        &["create", "-f", "-"],
        r#"apiVersion: diengine.opendilab.org/v2alpha1
kind: DIJob
metadata: {name: extended}
spec:
  suspend: true
  activeDeadlineSeconds: 3600
  ttlSecondsAfterFinished: 600
  nonRetryableExitCodes: [3]
  tasks:
  - name: learner
    type: learner
    restartPolicy: RestartPod
    minReplicas: 1
    maxReplicas: 2
    template:
      metadata: {labels: {team: rl}}
      spec: {containers: [{name: di-container, image: busybox}]}
"#,
    );
    wait_phase(&n, "extended", "Suspended");

    // After all that, the cleanly running job still has DI-orchestrator's pods and service,
    // and diorch never moved it through a phase.
    assert_eq!(
        uids(&pods(&n, "job-with-tasks")),
        uids(&before),
        "pods kept"
    );
    assert_eq!(
        service_uid("job-with-tasks"),
        service_before,
        "service kept"
    );
    let transitions = job_events(&n, "job-with-tasks");
    assert!(
        ![
            "JobPending",
            "JobStarting",
            "JobRunning",
            "JobRestarting",
            "JobRescheduling"
        ]
        .iter()
        .any(|r| transitions.contains(r)),
        "{transitions}"
    );

    // --- The way back: diorch stops first; DI-orchestrator's CRD cannot be applied client
    // side (its last-applied annotation would exceed 256 KiB), `kubectl replace` works.
    let stopped = operator.terminate(Duration::from_secs(30));
    assert!(
        stopped.is_some_and(|s| s.success()),
        "diorch did not stop on SIGTERM: {stopped:?}"
    );
    let refused = k.fails(&["apply", "-f", path(&old_crd)]);
    assert!(
        refused.contains("metadata.annotations: Too long"),
        "{refused}"
    );
    let exists = k.fails(&["create", "-f", path(&old_crd)]);
    assert!(exists.contains("AlreadyExists"), "{exists}");
    k.ok(&["replace", "-f", path(&old_crd)]);
    wait_established(k);
    wait_served(&n, false);
    // Read through DI-orchestrator's schema: diorch's status fields are pruned; the phase,
    // counters and conditions (without observedGeneration) stay.
    for job in ["job-with-tasks", "job-restarted", "serial-done"] {
        let back = job_json(&n, job);
        let status = &back["status"];
        for field in DIORCH_STATUS {
            assert!(
                status[field].is_null(),
                "{job}: status.{field} kept: {status:#}"
            );
        }
        assert!(
            status["conditions"]
                .as_array()
                .is_some_and(|cs| cs.iter().all(|c| c["observedGeneration"].is_null())),
            "{status:#}"
        );
    }
    assert_eq!(
        n.ok(&[
            "get",
            "dijob/job-restarted",
            "-o",
            "jsonpath={.status.phase} {.status.restarts} {.status.reschedules}"
        ]),
        "Running 3 1"
    );
    // DI-orchestrator's schema declares profilings as an object without fields.
    assert_eq!(
        job_json(&n, "job-restarted")["status"]["profilings"],
        json!({}),
        "profilings pruned"
    );
    // The suspended job reads as Suspended (DI-orchestrator's schema has no phase enum), but
    // spec.suspend and every other diorch-only field are gone from what DI-orchestrator reads.
    let extended = job_json(&n, "extended");
    assert_eq!(extended["status"]["phase"], "Suspended");
    for field in [
        "suspend",
        "activeDeadlineSeconds",
        "ttlSecondsAfterFinished",
        "nonRetryableExitCodes",
    ] {
        assert!(
            extended["spec"][field].is_null(),
            "spec.{field}: {extended:#}"
        );
    }
    let task = &extended["spec"]["tasks"][0];
    for field in ["restartPolicy", "minReplicas", "maxReplicas"] {
        assert!(task[field].is_null(), "tasks[0].{field}: {task:#}");
    }
    assert_eq!(
        task["template"]["metadata"],
        json!({}),
        "template labels pruned"
    );
    // kubectl shows every job with DI-orchestrator's columns.
    let table = n.ok(&["get", "dijobs"]);
    assert_eq!(
        super::table_row(&table, 0),
        super::foundation::DI_ORCHESTRATOR_COLUMNS,
        "{table}"
    );
    for (job, phase) in [
        ("extended", "Suspended"),
        ("job-restarted", "Running"),
        ("job-with-tasks", "Running"),
        ("serial-done", "Succeeded"),
        ("serial-test", "Running"),
    ] {
        assert!(
            table
                .lines()
                .any(|l| super::table_row(l, 0).get(..2) == Some(&[job, phase][..])),
            "{job} {phase}: {table}"
        );
    }
    assert_eq!(
        uids(&pods(&n, "job-with-tasks")),
        uids(&before),
        "pods kept"
    );

    // Pruning on read only hides the fields until the object is written again: a status write
    // under DI-orchestrator's schema (as its operator makes when a count changes) stores the
    // pruned object, spec included; a job nobody wrote keeps them for a later switch forward.
    n.ok(&[
        "patch",
        "dijob/job-with-tasks",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"readyReplicas":3}}"#,
    ]);
    k.ok(&["apply", "-f", path(&crds)]);
    wait_established(k);
    wait_served(&n, true);
    let written = job_json(&n, "job-with-tasks");
    for field in DIORCH_STATUS {
        assert!(
            written["status"][field].is_null(),
            "status.{field} came back after a write: {:#}",
            written["status"]
        );
    }
    let unwritten = job_json(&n, "extended");
    assert_eq!(unwritten["spec"]["suspend"], true, "{unwritten:#}");
    assert_eq!(unwritten["spec"]["tasks"][0]["restartPolicy"], "RestartPod");
    assert_eq!(
        unwritten["spec"]["tasks"][0]["template"]["metadata"]["labels"]["team"],
        "rl"
    );
    assert_eq!(unwritten["status"]["observedGeneration"], 1);
    assert_eq!(
        n.ok(&[
            "get",
            "dijob/job-restarted",
            "-o",
            "jsonpath={.status.profilings.collector.throughput} {.status.ranks[2]}",
        ]),
        "12.5 job-restarted-collector-0",
        "job-restarted was not written under DI-orchestrator's schema"
    );
}
