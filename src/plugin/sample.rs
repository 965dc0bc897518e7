//! Built-in sample inputs: the smoke call made before a plugin is swapped in, the inputs of
//! `diorch plugin check`, the benchmark's, and `examples/snapshot.json`. Deterministic.
//!
//! Owns: sample clusters, jobs and pods. Must not touch: anything stateful.

use diorch_core::key::ObjectKey;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::snapshot::{self, Snapshot};
use super::{Job, JobPlan, Node, Resources, Taint, TaintEffect, Task, TaskContext};

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

/// One `preempt` input (contract 0.5.0): two full 8-GPU nodes, each running one preemptible
/// job of priority 0 (`ns/low-a` on the first, `ns/low-b` on the second: a learner and 7
/// collectors of one GPU each, collectors elastic down to one), and an urgent job of priority
/// 100 that does not fit: `ns/urgent`, 4 learners of one GPU (room by shrinking one job) when
/// `shrink`, else one learner of 8 GPUs (room only by evicting one: `ns/low-b` loses less work).
pub fn preempt_input(shrink: bool) -> (Job, Vec<diorch_policies::preempt::Running>, Vec<Node>) {
    let requests = |gpus: u32| Resources {
        cpu_millis: 2_000,
        memory_bytes: 4 << 30,
        gpus,
        extended: vec![],
    };
    let task = |name: &str, replicas: u32, gpus: u32| Task {
        name: name.into(),
        task_type: name.into(),
        replicas,
        min_replicas: 1,
        max_replicas: replicas,
        requests: requests(gpus),
    };
    let allocatable = Resources {
        cpu_millis: 32_000,
        memory_bytes: 128 << 30,
        gpus: 8,
        extended: vec![],
    };
    let mut nodes: Vec<Node> = (0..2)
        .map(|i| Node {
            name: format!("gpu-{i}"),
            labels: vec![],
            taints: vec![],
            allocatable: allocatable.clone(),
            free: allocatable.clone(),
            ready: true,
        })
        .collect();
    let running: Vec<diorch_policies::preempt::Running> = [("ns/low-a", 900), ("ns/low-b", 300)]
        .into_iter()
        .enumerate()
        .map(|(n, (key, lost))| {
            let tasks = vec![task("learner", 1, 1), task("collector", 7, 1)];
            for t in &tasks {
                for _ in 0..t.replicas {
                    nodes[n].free.take(&t.requests);
                }
            }
            diorch_policies::preempt::Running {
                job: Job {
                    key: key.into(),
                    priority: 0,
                    preemptible: true,
                    tasks,
                    current: vec![Some(n as u32); 8],
                    profilings: String::new(),
                    age_seconds: 3_600,
                },
                may_shrink: true,
                may_evict: true,
                lost_seconds: lost,
                checkpoint_age_seconds: (n == 1).then_some(lost),
            }
        })
        .collect();
    let urgent = Job {
        key: "ns/urgent".into(),
        priority: 100,
        preemptible: true,
        tasks: vec![if shrink {
            task("learner", 4, 1)
        } else {
            task("learner", 1, 8)
        }],
        current: vec![],
        profilings: String::new(),
        age_seconds: 0,
    };
    (urgent, running, nodes)
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

const GIB: u64 = 1 << 30;

fn res(cores: u64, gib: u64, gpus: u32) -> Resources {
    Resources::new(cores * 1_000, gib * GIB, gpus)
}

/// A small GPU cluster as `diorch plugin snapshot` would record it (`examples/snapshot.json`):
/// four 8×A100 nodes (one cordoned for maintenance), three 4×L4 nodes (one not ready), one CPU
/// node for collectors; three jobs running (one of them a non-preemptible production job), and
/// three waiting to be placed. Free capacity is derived from what runs, so it is consistent.
pub fn snapshot() -> Snapshot {
    let node = |name: &str, zone: &str, kind: &str, product: Option<&str>, alloc: Resources| {
        let mut labels = vec![
            ("kubernetes.io/hostname".to_string(), name.to_string()),
            ("topology.kubernetes.io/zone".to_string(), zone.to_string()),
            (
                "node.kubernetes.io/instance-type".to_string(),
                kind.to_string(),
            ),
        ];
        if let Some(p) = product {
            labels.push(("nvidia.com/gpu.product".to_string(), p.to_string()));
        }
        Node {
            name: name.into(),
            labels,
            taints: vec![],
            free: alloc.clone(),
            allocatable: alloc,
            ready: true,
        }
    };
    let a100 = |name: &str| {
        let mut alloc = res(96, 1024, 8);
        alloc.extended = vec![("rdma/hca".into(), 8)];
        node(
            name,
            "zone-a",
            "p4d.24xlarge",
            Some("NVIDIA-A100-SXM4-80GB"),
            alloc,
        )
    };
    let l4 = |name: &str| {
        node(
            name,
            "zone-b",
            "g6.12xlarge",
            Some("NVIDIA-L4"),
            res(48, 384, 4),
        )
    };
    let mut nodes = vec![
        a100("gpu-a-01"),
        a100("gpu-a-02"),
        a100("gpu-a-03"),
        a100("gpu-a-04"),
        l4("gpu-b-01"),
        l4("gpu-b-02"),
        l4("gpu-b-03"),
        node("cpu-c-01", "zone-c", "c7i.32xlarge", None, res(128, 512, 0)),
    ];
    nodes[3].taints = vec![Taint {
        key: "diorch.io/maintenance".into(),
        value: "driver-upgrade".into(),
        effect: TaintEffect::NoSchedule,
    }];
    nodes[6].ready = false;
    // DaemonSets (CNI, GPU device plugin, node exporter) on every node.
    for n in &mut nodes {
        n.free.take(&Resources::new(600, GIB, 0));
    }
    // Another team's notebook on gpu-b-01.
    nodes[4].free.take(&res(8, 32, 1));

    let task = |name: &str, replicas: u32, requests: Resources| Task {
        name: name.into(),
        task_type: name.into(),
        replicas,
        min_replicas: replicas.min(1),
        max_replicas: replicas * 2,
        requests,
    };
    let job = |key: &str, priority: i32, preemptible: bool, age: u64, tasks: Vec<Task>| Job {
        key: key.into(),
        priority,
        preemptible,
        tasks,
        current: vec![],
        profilings: String::new(),
        age_seconds: age,
    };
    let mut learner_rdma = res(16, 128, 4);
    learner_rdma.extended = vec![("rdma/hca".into(), 1)];
    let mut jobs = vec![
        job(
            "research/dqn-pong",
            0,
            true,
            5_400,
            vec![
                task("learner", 2, res(8, 64, 1)),
                task("collector", 6, res(4, 8, 0)),
                task("evaluator", 1, res(2, 8, 0)),
            ],
        ),
        job(
            "research/sac-halfcheetah",
            0,
            true,
            3_600,
            vec![
                task("learner", 1, res(8, 32, 1)),
                task("collector", 4, res(2, 4, 0)),
                task("evaluator", 1, res(2, 4, 0)),
            ],
        ),
        job(
            "prod/impala-atari",
            100,
            false,
            86_400,
            vec![
                task("learner", 4, res(12, 96, 2)),
                task("collector", 16, res(4, 8, 0)),
                task("evaluator", 1, res(2, 8, 0)),
            ],
        ),
        job(
            "research/ppo-football",
            0,
            true,
            120,
            vec![
                task("learner", 4, res(8, 64, 1)),
                task("collector", 8, res(4, 8, 0)),
                task("evaluator", 1, res(2, 8, 0)),
            ],
        ),
        job(
            "research/r2d2-dmlab",
            5,
            true,
            45,
            vec![
                task("learner", 2, learner_rdma),
                task("collector", 4, res(4, 16, 0)),
                task("evaluator", 1, res(2, 8, 0)),
            ],
        ),
        job(
            "prod/qmix-smac",
            50,
            false,
            10,
            vec![
                task("learner", 1, res(8, 48, 1)),
                task("collector", 4, res(4, 8, 0)),
                task("evaluator", 1, res(2, 8, 0)),
            ],
        ),
    ];
    jobs[0].profilings = r#"{"learner":{"step_time_ms":85,"samples_per_s":12000}}"#.into();
    jobs[2].profilings = r#"{"learner":{"step_time_ms":140,"samples_per_s":48000}}"#.into();
    // Where the running jobs are, by node index per task: (job, [(task, node)]).
    let (a01, a02, b01, c01) = (0u32, 1u32, 4u32, 7u32);
    let placements: [(usize, &[u32]); 3] = [
        (0, &[a01, c01, c01]),
        (1, &[b01, b01, b01]),
        (2, &[a02, c01, a02]),
    ];
    for (j, per_task) in placements {
        let job = &mut jobs[j];
        job.current = job
            .tasks
            .iter()
            .zip(per_task)
            .flat_map(|(t, &n)| std::iter::repeat_n(Some(n), t.replicas as usize))
            .collect();
        let names: Vec<String> = job
            .current
            .iter()
            .flatten()
            .map(|&i| nodes[i as usize].name.clone())
            .collect();
        snapshot::take(&mut nodes, job, &names);
    }
    // The last plan the operator applied covers the running preemptible jobs.
    let previous = jobs
        .iter()
        .filter(|j| j.preemptible && !j.current.is_empty())
        .map(|j| JobPlan {
            job: j.key.clone(),
            nodes: j
                .current
                .iter()
                .flatten()
                .map(|&i| nodes[i as usize].name.clone())
                .collect(),
            replicas: None,
            reason: None,
        })
        .collect();
    Snapshot {
        nodes,
        jobs,
        previous,
        ..Snapshot::new("2025-06-02T09:30:00Z")
    }
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
        job_key: ObjectKey::new("default", "sample"),
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
