//! What DI-orchestrator leaves on a cluster, played: its CRD and install, DIJobs from its
//! samples, and for three of them the pods, headless service and status its operator writes.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};

use super::install::di_orchestrator_install;
use super::reads::{job_json, path, service_uid, text, wait_established, wait_served};
use super::{CRD, DI_ORCHESTRATOR_SERVER_URL, Kubectl};
use crate::common::controller::{T, end_pod, pods};

/// The played cluster as the later phases check it: the statuses DI-orchestrator wrote, and
/// what the jobs had before the switch.
pub(super) struct Played {
    /// job-with-tasks' status: running, every pod ready.
    pub running: Value,
    /// serial-done's status: succeeded.
    pub done: Value,
    /// job-with-tasks' pods, by name.
    pub before: BTreeMap<String, Value>,
    /// job-restarted's pods, by name.
    pub restarted_before: BTreeMap<String, Value>,
    /// serial-done's pods, by name.
    pub done_before: BTreeMap<String, Value>,
    /// The uid of job-with-tasks' headless service.
    pub service_before: String,
    /// job-with-tasks as stored.
    pub job_before: Value,
}

/// A replica as DI-orchestrator created it: its task (index in `spec.tasks`), local rank and
/// global rank.
#[derive(Clone, Copy, Debug)]
pub(super) struct Replica {
    task: usize,
    local: i64,
    rank: i64,
}

pub(super) fn fqdn(pod: &str, job: &str, ns: &str) -> String {
    format!("{pod}.di-{job}.{ns}.svc.cluster.local")
}

/// The pods DI-orchestrator's operator creates for `replicas` of the stored DIJob `job`, and its
/// headless service (spec sections 2 to 5): names, labels, annotations, owner references, the
/// template's spec with restartPolicy, hostname, subdomain and volumes overridden, and the five
/// `DI_*` variables appended to every container's env.
pub(super) fn di_orchestrator_objects(job: &Value, replicas: &[Replica]) -> Vec<Value> {
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
pub(super) fn condition(type_: &str, status: &str, reason: &str, message: &str, at: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message,
           "lastUpdateTime": at, "lastTransitionTime": at})
}

pub(super) fn patch_status(k: &Kubectl, job: &str, status: &Value) {
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
pub(super) fn create_objects(k: &Kubectl, job: &str, replicas: &[Replica], service: bool) {
    let objects: Vec<Value> = di_orchestrator_objects(&job_json(k, job), replicas)
        .into_iter()
        .filter(|o| service || o["kind"] != "Service")
        .collect();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    k.ok_stdin(&["create", "-f", "-"], &list.to_string());
}

/// The status DI-orchestrator writes for a running job whose every pod is ready (spec 6.4,
/// 6.5, 7.1): the conditions of every phase visited, the current one last and True.
pub(super) fn running_status(conditions: Vec<Value>, restarts: i64) -> Value {
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

/// DI-orchestrator's cluster. Its CRD as its README installs it (`kubectl create`: too big for
/// a client-side apply), replacing the definition an earlier test left; its install in
/// `install_ns`; two running jobs and a finished one from its `samples`.
pub(super) fn cluster(
    k: &Kubectl,
    n: &Kubectl,
    old_crd: &Path,
    samples: &Path,
    install_ns: &str,
    suffix: &str,
) -> Played {
    let exists = k.run(&["get", CRD, "-o", "name"]).status.success();
    k.ok(&[
        if exists { "replace" } else { "create" },
        "-f",
        path(old_crd),
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
    wait_served(n, false);
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
    create_objects(n, "job-with-tasks", &[l0, e0, c0, c1], true);
    create_objects(
        n,
        "job-restarted",
        &[l0, e0, Replica { rank: 4, ..c0 }, c1],
        true,
    );
    create_objects(n, "serial-done", &[l0], false);
    n.ok(&[
        "wait",
        "--for=condition=Ready",
        "pod",
        "-l",
        "diengine/operator=di-operator",
        "--timeout=60s",
    ]);
    end_pod(n, "serial-done-serial-0", "Succeeded");
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
    patch_status(n, "job-with-tasks", &played_running);
    patch_status(n, "job-restarted", &played_restarted);
    patch_status(n, "serial-done", &played_done);
    let before = pods(n, "job-with-tasks");
    let restarted_before = pods(n, "job-restarted");
    let done_before = pods(n, "serial-done");
    assert_eq!(
        (before.len(), restarted_before.len(), done_before.len()),
        (4, 4, 1)
    );
    let service_before = service_uid(n, "job-with-tasks");
    let job_before = job_json(n, "job-with-tasks");
    Played {
        running: played_running,
        done: played_done,
        before,
        restarted_before,
        done_before,
        service_before,
        job_before,
    }
}
