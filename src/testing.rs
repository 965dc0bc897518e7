//! Fixtures the operator's unit tests share: DIJobs, pods and nodes built from what a scenario
//! names (`job("j").task("learner", 1)`, `pod("j", "j-learner-0", 0).ip(…)`, `node("n0", …)`)
//! instead of long JSON literals. Compiled for tests only; the core's own fixtures
//! (`diorch_core::fixtures`) are not visible here.

use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};

use diorch_core::api::DIJob;

/// A DIJob under construction; [`job`] starts one.
pub struct JobFixture {
    metadata: Value,
    spec: Value,
    status: Option<Value>,
}

/// A DIJob named `name` in namespace `default`, with no task yet.
pub fn job(name: &str) -> JobFixture {
    JobFixture {
        metadata: json!({"name": name, "namespace": "default"}),
        spec: json!({"tasks": []}),
        status: None,
    }
}

impl JobFixture {
    pub fn namespace(mut self, namespace: &str) -> JobFixture {
        self.metadata["namespace"] = json!(namespace);
        self
    }

    pub fn uid(mut self, uid: &str) -> JobFixture {
        self.metadata["uid"] = json!(uid);
        self
    }

    pub fn resource_version(mut self, rv: &str) -> JobFixture {
        self.metadata["resourceVersion"] = json!(rv);
        self
    }

    pub fn generation(mut self, generation: i64) -> JobFixture {
        self.metadata["generation"] = json!(generation);
        self
    }

    pub fn preemptible(mut self, preemptible: bool) -> JobFixture {
        self.spec["preemptible"] = json!(preemptible);
        self
    }

    /// A task of type `name` named `name`, its pods one `di-container` of image `di-engine`.
    pub fn task(self, name: &str, replicas: i64) -> JobFixture {
        self.task_json(json!({"name": name, "type": name, "replicas": replicas,
            "template": {"spec": {"containers": [{"name": "di-container", "image": "di-engine"}]}}}))
    }

    /// A task of type `name` named `name` with an empty pod template.
    pub fn bare_task(self, name: &str, replicas: i64) -> JobFixture {
        self.task_json(json!({"name": name, "type": name, "replicas": replicas, "template": {}}))
    }

    /// A task as given, for what the other task builders do not say.
    pub fn task_json(mut self, task: Value) -> JobFixture {
        if let Some(tasks) = self.spec["tasks"].as_array_mut() {
            tasks.push(task);
        }
        self
    }

    /// The status as given.
    pub fn status(mut self, status: Value) -> JobFixture {
        self.status = Some(status);
        self
    }

    /// The DIJob as JSON (as a cache or the API server would hold it).
    pub fn json(self) -> Value {
        let mut job = json!({
            "apiVersion": "diengine.opendilab.org/v2alpha1",
            "kind": "DIJob",
            "metadata": self.metadata,
            "spec": self.spec,
        });
        if let Some(status) = self.status {
            job["status"] = status;
        }
        job
    }

    pub fn build(self) -> DIJob {
        serde_json::from_value(self.json()).expect("a valid DIJob")
    }
}

/// A pod under construction; [`pod`] starts one.
pub struct PodFixture {
    job: String,
    name: String,
    rank: usize,
    namespace: String,
    task_type: Option<String>,
    ip: Option<String>,
    phase: String,
    port: Option<i32>,
    node: String,
    owner_uid: Option<String>,
    terminating: bool,
}

/// Pod `name` of job `job` (its controller, uid `uid-<job>`) with rank annotation `rank`, in
/// namespace `ns`, Running on `node-1` with no IP. Its task is the name's second part
/// (`j-collector-0` is of task `collector`), of the same type unless [`PodFixture::task_type`]
/// says otherwise.
pub fn pod(job: &str, name: &str, rank: usize) -> PodFixture {
    PodFixture {
        job: job.into(),
        name: name.into(),
        rank,
        namespace: "ns".into(),
        task_type: None,
        ip: None,
        phase: "Running".into(),
        port: None,
        node: "node-1".into(),
        owner_uid: None,
        terminating: false,
    }
}

impl PodFixture {
    pub fn task_type(mut self, task_type: &str) -> PodFixture {
        self.task_type = Some(task_type.into());
        self
    }

    pub fn ip(mut self, ip: &str) -> PodFixture {
        self.ip = Some(ip.into());
        self
    }

    pub fn phase(mut self, phase: &str) -> PodFixture {
        self.phase = phase.into();
        self
    }

    /// The container's `di-port`.
    pub fn port(mut self, port: i32) -> PodFixture {
        self.port = Some(port);
        self
    }

    /// Owned by a DIJob of the same name but another uid (not this job's pod).
    pub fn owner_uid(mut self, uid: &str) -> PodFixture {
        self.owner_uid = Some(uid.into());
        self
    }

    /// Being deleted (a deletionTimestamp set).
    pub fn terminating(mut self) -> PodFixture {
        self.terminating = true;
        self
    }

    pub fn json(self) -> Value {
        let task = self.name.split('-').nth(1).map(str::to_string);
        let task_type = self.task_type.or_else(|| task.clone());
        let mut container = json!({"name": "di-container"});
        if let Some(port) = self.port {
            container["ports"] = json!([{"name": "di-port", "containerPort": port}]);
        }
        let owner_uid = self
            .owner_uid
            .unwrap_or_else(|| format!("uid-{}", self.job));
        let mut pod = json!({
            "metadata": {"name": self.name, "namespace": self.namespace, "uid": format!("pod-{}", self.name),
                "labels": {"diengine/job": self.job, "diengine/task-name": task, "diengine/task-type": task_type},
                "annotations": {"diengine/rank": self.rank.to_string()},
                "ownerReferences": [{"apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
                    "name": self.job, "uid": owner_uid, "controller": true}]},
            "spec": {"nodeName": self.node, "containers": [container]},
            "status": {"phase": self.phase, "podIP": self.ip}
        });
        if self.terminating {
            pod["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        pod
    }
}

/// A Ready node `name` with `cpu` cores and `memory` allocatable, room for 110 pods.
pub fn node(name: &str, cpu: &str, memory: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .expect("a valid Node")
}
