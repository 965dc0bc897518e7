//! Built-in sample inputs: the smoke call made before a plugin is swapped in, the inputs of
//! `diorch plugin check`, and the benchmark's. Deterministic.
//!
//! Owns: sample clusters, jobs and pods. Must not touch: anything stateful.

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::{Job, Node, Resources, Taint, TaintEffect, Task, TaskContext};

/// `n` nodes of 8 GPUs, 64 cores and 512 GiB, some partly used; every 10th is not ready and
/// every 7th is tainted NoSchedule, so policies must skip them.
pub fn nodes(n: usize) -> Vec<Node> {
    (0..n)
        .map(|i| {
            let allocatable = Resources {
                cpu_millis: 64_000,
                memory_bytes: 512 << 30,
                gpus: 8,
                extended: vec![("rdma/hca".into(), 1)],
            };
            let used = (i % 4) as u32 * 2;
            let mut free = allocatable.clone();
            free.gpus -= used;
            free.cpu_millis -= u64::from(used) * 4_000;
            free.memory_bytes -= u64::from(used) * (16 << 30);
            Node {
                name: format!("node-{i:04}"),
                labels: vec![
                    ("kubernetes.io/hostname".into(), format!("node-{i:04}")),
                    (
                        "topology.kubernetes.io/zone".into(),
                        format!("zone-{}", i % 3),
                    ),
                    ("node.kubernetes.io/instance-type".into(), "gpu-8x".into()),
                ],
                taints: if i % 7 == 6 {
                    vec![Taint {
                        key: "maintenance".into(),
                        value: "true".into(),
                        effect: TaintEffect::NoSchedule,
                    }]
                } else {
                    vec![]
                },
                allocatable,
                free,
                ready: i % 10 != 9,
            }
        })
        .collect()
}

/// A DI-engine-like job: 1 learner per `learners` with 1 GPU each plus `learners * 2` CPU
/// collectors and one evaluator.
pub fn job(key: &str, learners: u32) -> Job {
    let task = |name: &str, replicas: u32, cpu: u64, gpus: u32| Task {
        name: name.into(),
        task_type: name.into(),
        replicas,
        min_replicas: 1,
        max_replicas: replicas.max(1) * 2,
        requests: Resources {
            cpu_millis: cpu,
            memory_bytes: 8 << 30,
            gpus,
            extended: vec![],
        },
    };
    Job {
        key: key.into(),
        priority: 0,
        preemptible: true,
        tasks: vec![
            task("learner", learners, 4_000, 1),
            task("evaluator", 1, 2_000, 0),
            task("collector", learners * 2, 1_000, 0),
        ],
        current: vec![],
        profilings: r#"{"learner":{"step_time_ms":120}}"#.into(),
        age_seconds: 60,
    }
}

/// One `allocate` input: a job with `learners` learners (8 replicas for 2) on `n` nodes.
pub fn allocate_input(n: usize, learners: u32) -> (Job, Vec<Node>) {
    (job("default/sample", learners), nodes(n))
}

/// One `optimize` input: `jobs` jobs of 2 learners on `n` nodes, varied priority and age.
pub fn optimize_input(jobs: usize, n: usize) -> (Vec<Job>, Vec<Node>) {
    let jobs = (0..jobs)
        .map(|i| {
            let mut j = job(&format!("default/job-{i:03}"), 2);
            j.priority = (i % 3) as i32;
            j.age_seconds = 1_000 - i as u64;
            j
        })
        .collect();
    (jobs, nodes(n))
}

/// A pod as the operator builds it (names, labels, annotations, DI_* env) and its context.
pub fn pod(task_type: &str) -> (TaskContext, Pod) {
    let name = format!("sample-{task_type}-0");
    let fqdn = format!("{name}.di-sample.default.svc.cluster.local");
    let env_name = format!("DI_{}_NODES", task_type.to_uppercase().replace('-', "_"));
    let value = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"diengine/job": "sample", "diengine/operator": "di-operator",
                       "diengine/pod": name, "diengine/task-type": task_type, "diengine/task-name": task_type},
            "annotations": {"diengine/replicas": "1", "diengine/rank": "0", "diengine/task-rank": "0", "diengine/node": ""},
            "ownerReferences": [{"apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob", "name": "sample",
                                 "uid": "00000000-0000-0000-0000-000000000000", "controller": true, "blockOwnerDeletion": true}]
        },
        "spec": {
            "restartPolicy": "Never",
            "hostname": name,
            "subdomain": "di-sample",
            "containers": [{
                "name": "di-container",
                "image": "opendilab/ding:latest",
                "env": [
                    {"name": "DI_JOB_ID", "value": "default/sample"},
                    {"name": "DI_SERVER_URL", "value": "http://di-server.di-system.svc.cluster.local:8081"},
                    {"name": "DI_RANK", "value": "0"},
                    {"name": "DI_NODES", "value": fqdn},
                    {"name": env_name, "value": fqdn}
                ]
            }]
        }
    });
    let ctx = TaskContext {
        job_key: "default/sample".into(),
        task_name: task_type.into(),
        task_type: task_type.into(),
        rank: 0,
        task_rank: 0,
        world_size: 1,
        node: None,
        job_labels: vec![],
        job_annotations: vec![],
        config: String::new(),
    };
    // ok: a fixed, valid v1 Pod literal (covered by the unit test below).
    #[allow(clippy::expect_used)]
    let pod = serde_json::from_value(value).expect("sample pod is a valid Pod");
    (ctx, pod)
}

#[cfg(test)]
mod tests {
    #[test]
    fn sample_pod_parses() {
        let (ctx, pod) = super::pod("learner");
        assert_eq!(ctx.task_type, "learner");
        assert_eq!(pod.metadata.name.as_deref(), Some("sample-learner-0"));
    }
}
