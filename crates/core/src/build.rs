//! Builds the pods and the headless service of a DIJob exactly as DI-orchestrator v2 does
//! (spec sections 3 to 5), minus its bugs: template labels and annotations are kept, and the
//! injected env vars replace same-named user entries in a fixed order.
//!
//! Pure functions from the job and a replica's place in it to Kubernetes objects; no I/O.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    EnvVar, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodSpec, Service, ServicePort,
    ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::Serialize;

use super::naming;
use super::ranks::RankTable;
use crate::api::limits::{MAX_JOB_REPLICAS, MAX_TASK_REPLICAS, MAX_TASKS};
use crate::api::{self, DIJob, labels};

/// Operator settings that go into every pod (spec section 12 flags).
#[derive(Clone, Debug)]
pub struct BuildContext {
    /// Cluster DNS domain of services (`--service-domain-name`).
    pub service_domain: String,
    /// URL of the replica API workers call (`--di-server-url`).
    pub server_url: String,
    /// Gang scheduler whose PodGroups the job's pods join (`--gang-scheduler`).
    pub gang: Option<Gang>,
}

impl Default for BuildContext {
    fn default() -> Self {
        BuildContext {
            service_domain: naming::DEFAULT_SERVICE_DOMAIN.to_string(),
            server_url: "http://di-server.di-system.svc.cluster.local:8081".to_string(),
            gang: None,
        }
    }
}

/// Which gang scheduler, and the schedulerName its pods carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gang {
    pub kind: GangKind,
    pub scheduler_name: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GangKind {
    /// Volcano: `scheduling.volcano.sh/v1beta1` PodGroup, pods annotated
    /// `scheduling.k8s.io/group-name`.
    Volcano,
    /// kubernetes-sigs/scheduler-plugins coscheduling: `scheduling.x-k8s.io/v1alpha1` PodGroup,
    /// pods labelled `scheduling.x-k8s.io/pod-group`.
    SchedulerPlugins,
}

impl GangKind {
    /// Every kind, in the order `--help` lists them.
    pub const ALL: [GangKind; 2] = [GangKind::Volcano, GangKind::SchedulerPlugins];

    /// The flag value naming it.
    pub fn as_str(self) -> &'static str {
        match self {
            GangKind::Volcano => "volcano",
            GangKind::SchedulerPlugins => "scheduler-plugins",
        }
    }

    /// The schedulerName of that scheduler's standard installation.
    pub fn default_scheduler_name(self) -> &'static str {
        match self {
            GangKind::Volcano => "volcano",
            GangKind::SchedulerPlugins => "scheduler-plugins-scheduler",
        }
    }

    /// API version of its PodGroup.
    pub fn api_version(self) -> &'static str {
        match self {
            GangKind::Volcano => "scheduling.volcano.sh/v1beta1",
            GangKind::SchedulerPlugins => "scheduling.x-k8s.io/v1alpha1",
        }
    }
}

impl std::str::FromStr for GangKind {
    type Err = String;

    fn from_str(value: &str) -> Result<GangKind, String> {
        GangKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == value)
            .ok_or_else(|| {
                let names: Vec<&str> = GangKind::ALL.iter().map(|k| k.as_str()).collect();
                format!(
                    "unknown gang scheduler {value:?}: one of {}",
                    names.join(", ")
                )
            })
    }
}

/// A gang scheduler's PodGroup, as this operator writes it: the fields Volcano's
/// (`scheduling.volcano.sh/v1beta1`) and scheduler-plugins' (`scheduling.x-k8s.io/v1alpha1`)
/// PodGroups share. Only written, never read back, so it serializes only.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroup {
    /// The scheduler's PodGroup API (`GangKind::api_version`).
    pub api_version: &'static str,
    /// Always [`POD_GROUP_KIND`].
    pub kind: &'static str,
    pub metadata: ObjectMeta,
    pub spec: PodGroupSpec,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    /// Replicas the scheduler must be able to place together before it starts any.
    pub min_member: i32,
}

/// The kind of both schedulers' PodGroups.
pub const POD_GROUP_KIND: &str = "PodGroup";

/// The PodGroup of `job`: named like the job, owned by it, with `min_member` replicas that must
/// be placed together.
pub fn build_pod_group(job: &DIJob, gang: GangKind, min_member: i32) -> PodGroup {
    let name = job.metadata.name.clone().unwrap_or_default();
    PodGroup {
        api_version: gang.api_version(),
        kind: POD_GROUP_KIND,
        metadata: ObjectMeta {
            labels: Some(job_labels(&name)),
            name: Some(name),
            namespace: Some(job.metadata.namespace.clone().unwrap_or_default()),
            owner_references: Some(vec![owner_reference(job)]),
            ..ObjectMeta::default()
        },
        spec: PodGroupSpec { min_member },
    }
}

/// One replica's place in its job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaSlot {
    /// Index of the task in `spec.tasks`.
    pub task_index: usize,
    /// Rank within the task.
    pub local_rank: i32,
    /// Rank within the job: index of this replica's FQDN in `DI_NODES`.
    pub global_rank: i32,
}

/// What every pod of the job shares: the job's world as DI-engine sees it.
#[derive(Clone, Debug)]
pub struct World {
    /// FQDN per global rank (`DI_NODES`); an empty string marks a rank with no replica.
    pub nodes: Vec<String>,
    /// FQDNs per task name (`DI_<TASK>_NODES`), in rank order.
    pub task_nodes: BTreeMap<String, Vec<String>>,
    /// Total replicas (`diengine/replicas` annotation).
    pub replicas: i32,
}

/// The controller owner reference DI-orchestrator puts on pods and services.
pub fn owner_reference(job: &DIJob) -> OwnerReference {
    OwnerReference {
        api_version: api::API_VERSION.to_string(),
        kind: api::KIND.to_string(),
        name: job.metadata.name.clone().unwrap_or_default(),
        uid: job.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Labels shared by the job's pods and service (the "owned objects" selector).
pub fn job_labels(job_name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::JOB.to_string(), naming::job_label_value(job_name)),
        (
            labels::OPERATOR.to_string(),
            labels::OPERATOR_NAME.to_string(),
        ),
    ])
}

/// The task's name as the operator uses it: its `name`, else its type.
pub fn task_name(task: &api::Task) -> String {
    match (&task.name, task.type_) {
        (Some(name), _) if !name.is_empty() => name.clone(),
        (_, Some(t)) => t.as_str().to_string(),
        _ => String::new(),
    }
}

/// Replicas task `index` runs: the spec's, or for a preemptible job the allocator's resize
/// from `status.taskReplicas`, kept within the task's minReplicas..maxReplicas. Never more than
/// `limits::MAX_TASK_REPLICAS`, whatever the job says: callers size memory from it, and may
/// run before the job is validated (the replica API, the allocator's cache scans).
pub fn task_replicas(job: &DIJob, index: usize) -> i32 {
    let Some(task) = job.spec.tasks.get(index) else {
        return 0;
    };
    let resized = job
        .spec
        .preemptible
        .then(|| {
            job.status
                .as_ref()?
                .task_replicas
                .as_ref()?
                .get(&task_name(task))
                .copied()
        })
        .flatten();
    let n = match resized {
        // Not `clamp`: it panics when min > max, which an unvalidated job can say.
        Some(n) => n.min(task.max_replicas()).max(task.min_replicas()).max(1),
        None => task.replicas,
    };
    n.clamp(0, MAX_TASK_REPLICAS)
}

/// `job` as it runs with `counts` replicas per task (spec order) recorded as the allocator's
/// resize in its status.
pub fn with_task_replicas(job: &DIJob, counts: &[u32]) -> DIJob {
    let mut resized = job.clone();
    let map = job
        .spec
        .tasks
        .iter()
        .zip(counts)
        .map(|(t, n)| (task_name(t), i32::try_from(*n).unwrap_or(i32::MAX)))
        .collect();
    resized
        .status
        .get_or_insert_with(Default::default)
        .task_replicas = Some(map);
    resized
}

/// The local ranks task `index` runs, ascending: the first `task_replicas` ranks not removed by
/// name (`status.removedRanks`, preemptible jobs). Growing appends ranks after the highest and
/// shrinking drops the highest, so survivors keep their names.
pub fn task_local_ranks(job: &DIJob, index: usize) -> Vec<i32> {
    let count = usize::try_from(task_replicas(job, index).max(0)).unwrap_or(0);
    // A set: `status.removedRanks` is as long as its writer made it, and a list lookup per
    // rank would make this quadratic in it.
    let removed: BTreeSet<i32> = job
        .spec
        .tasks
        .get(index)
        .filter(|_| job.spec.preemptible)
        .and_then(|task| {
            job.status
                .as_ref()?
                .removed_ranks
                .as_ref()?
                .get(&task_name(task))
                .map(|ranks| ranks.iter().copied().filter(|r| *r >= 0).collect())
        })
        .unwrap_or_default();
    // Ends: `removed` is finite and `count` at most MAX_TASK_REPLICAS.
    (0..=i32::MAX)
        .filter(|r| !removed.contains(r))
        .take(count)
        .collect()
}

/// Every replica slot the job runs, in spec order: (pod name, task index, local rank). At most
/// `limits::MAX_JOB_REPLICAS` slots of at most `limits::MAX_TASKS` tasks, even for a job that
/// validation would refuse.
pub fn desired_slots(job: &DIJob) -> Vec<(String, usize, i32)> {
    let job_name = job.metadata.name.clone().unwrap_or_default();
    job.spec
        .tasks
        .iter()
        .take(MAX_TASKS)
        .enumerate()
        .flat_map(|(index, task)| {
            let name = task_name(task);
            let job_name = job_name.clone();
            task_local_ranks(job, index)
                .into_iter()
                .map(move |local| (naming::pod_name(&job_name, &name, local), index, local))
        })
        .take(MAX_JOB_REPLICAS as usize)
        .collect()
}

/// The job's world as its pods see it, from the rank table: `DI_NODES` has one FQDN per rank
/// (`""` for a free rank, so `DI_NODES[DI_RANK]` is always the pod's own), and each task's
/// FQDNs in rank order.
pub fn world(job: &DIJob, ranks: &RankTable, ctx: &BuildContext) -> World {
    let job_name = job.metadata.name.clone().unwrap_or_default();
    let namespace = job.metadata.namespace.clone().unwrap_or_default();
    let task_of: BTreeMap<String, String> = desired_slots(job)
        .into_iter()
        .filter_map(|(pod, index, _)| job.spec.tasks.get(index).map(|t| (pod, task_name(t))))
        .collect();
    let mut nodes = Vec::with_capacity(ranks.len());
    let mut task_nodes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut replicas = 0;
    for pod in ranks.entries() {
        if pod.is_empty() {
            nodes.push(String::new());
            continue;
        }
        let fqdn = naming::pod_fqdn(pod, &job_name, &namespace, &ctx.service_domain);
        if let Some(task) = task_of.get(pod) {
            task_nodes
                .entry(task.clone())
                .or_default()
                .push(fqdn.clone());
        }
        replicas += 1;
        nodes.push(fqdn);
    }
    World {
        nodes,
        task_nodes,
        replicas,
    }
}

/// Builds the pod of `slot`, or `None` if the slot names no task of the job.
/// Annotation naming a pod's Volcano PodGroup.
pub const VOLCANO_GROUP_ANNOTATION: &str = "scheduling.k8s.io/group-name";
/// Label naming a pod's coscheduling PodGroup.
pub const COSCHEDULING_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";

/// Pins a pod to `node` with a required node affinity on the node's name, ANDed into every
/// term the template already has (terms are ORed, so each must carry it).
///
/// Not `nodeName` as DI-orchestrator did: a bound pod bypasses the scheduler, so a node
/// without room rejects it (OutOfcpu...) instead of it waiting, and a gang scheduler could never
/// gate it. With the affinity kube-scheduler (or the gang scheduler named in schedulerName)
/// still checks fit, and can only place the pod on the allocated node or leave it pending.
pub fn pin_to_node(spec: &mut PodSpec, node: &str) {
    let pin = NodeSelectorRequirement {
        key: "metadata.name".to_string(),
        operator: "In".to_string(),
        values: Some(vec![node.to_string()]),
    };
    let required = spec
        .affinity
        .get_or_insert_with(Default::default)
        .node_affinity
        .get_or_insert_with(Default::default)
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(Default::default);
    if required.node_selector_terms.is_empty() {
        required
            .node_selector_terms
            .push(NodeSelectorTerm::default());
    }
    for term in &mut required.node_selector_terms {
        term.match_fields
            .get_or_insert_with(Vec::new)
            .push(pin.clone());
    }
}

pub fn build_pod(
    job: &DIJob,
    slot: &ReplicaSlot,
    world: &World,
    ctx: &BuildContext,
    node: Option<&str>,
) -> Option<Pod> {
    let task = job.spec.tasks.get(slot.task_index)?;
    let job_name = job.metadata.name.clone().unwrap_or_default();
    let namespace = job.metadata.namespace.clone().unwrap_or_default();
    let task_name = task_name(task);
    let task_type = task.type_.map(|t| t.as_str()).unwrap_or_default();
    let name = naming::pod_name(&job_name, &task_name, slot.local_rank);

    let template_meta = task.template.metadata.clone().unwrap_or_default();
    let mut pod_labels = template_meta.labels.unwrap_or_default();
    pod_labels.extend(job_labels(&job_name));
    pod_labels.insert(labels::POD.to_string(), name.clone());
    pod_labels.insert(labels::TASK_TYPE.to_string(), task_type.to_string());
    pod_labels.insert(labels::TASK_NAME.to_string(), task_name.clone());

    let mut annotations = template_meta.annotations.unwrap_or_default();
    annotations.insert(
        labels::ANNOTATION_REPLICAS.to_string(),
        world.replicas.to_string(),
    );
    annotations.insert(
        labels::ANNOTATION_RANK.to_string(),
        slot.global_rank.to_string(),
    );
    annotations.insert(
        labels::ANNOTATION_TASK_RANK.to_string(),
        slot.local_rank.to_string(),
    );
    annotations.insert(
        labels::ANNOTATION_NODE.to_string(),
        node.unwrap_or_default().to_string(),
    );

    let mut spec: PodSpec = task.template.spec.clone().unwrap_or_default();
    spec.restart_policy = Some("Never".to_string());
    spec.hostname = Some(name.clone());
    spec.subdomain = Some(naming::service_name(&job_name));
    if let Some(node) = node.filter(|n| !n.is_empty()) {
        pin_to_node(&mut spec, node);
    }
    if let Some(gang) = &ctx.gang {
        spec.scheduler_name = Some(gang.scheduler_name.clone());
        match gang.kind {
            GangKind::Volcano => {
                annotations.insert(VOLCANO_GROUP_ANNOTATION.to_string(), job_name.clone());
            }
            GangKind::SchedulerPlugins => {
                pod_labels.insert(COSCHEDULING_GROUP_LABEL.to_string(), job_name.clone());
            }
        }
    }
    if let Some(job_volumes) = &job.spec.volumes {
        spec.volumes
            .get_or_insert_with(Vec::new)
            .extend(job_volumes.iter().cloned());
    }

    let env = [
        (
            "DI_JOB_ID".to_string(),
            naming::job_id(&namespace, &job_name),
        ),
        ("DI_SERVER_URL".to_string(), ctx.server_url.clone()),
        ("DI_RANK".to_string(), slot.global_rank.to_string()),
        ("DI_NODES".to_string(), world.nodes.join(",")),
        (
            naming::task_nodes_env(&task_name),
            world
                .task_nodes
                .get(&task_name)
                .map(|n| n.join(","))
                .unwrap_or_default(),
        ),
    ];
    for container in &mut spec.containers {
        let vars = container.env.get_or_insert_with(Vec::new);
        vars.retain(|v| !env.iter().any(|(n, _)| *n == v.name));
        vars.extend(env.iter().map(|(n, v)| EnvVar {
            name: n.clone(),
            value: Some(v.clone()),
            value_from: None,
        }));
    }

    Some(Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace),
            labels: Some(pod_labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner_reference(job)]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    })
}

/// Builds the job's headless service `di-<job>` with port `di-port` 22270.
pub fn build_service(job: &DIJob) -> Service {
    let job_name = job.metadata.name.clone().unwrap_or_default();
    let selector = job_labels(&job_name);
    Service {
        metadata: ObjectMeta {
            name: Some(naming::service_name(&job_name)),
            namespace: job.metadata.namespace.clone(),
            labels: Some(selector.clone()),
            owner_references: Some(vec![owner_reference(job)]),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_string()),
            selector: Some(selector),
            ports: Some(vec![ServicePort {
                name: Some(api::DEFAULT_PORT_NAME.to_string()),
                port: api::DEFAULT_PORT,
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The PodGroup exactly as it goes on the wire, for each scheduler: only `apiVersion` differs.
    #[test]
    fn the_pod_group_serializes_as_both_schedulers_read_it() {
        let wire = r#"{"apiVersion":"API","kind":"PodGroup","metadata":{"labels":{"diengine/job":"job-with-tasks","diengine/operator":"di-operator"},"name":"job-with-tasks","namespace":"default","ownerReferences":[{"apiVersion":"diengine.opendilab.org/v2alpha1","blockOwnerDeletion":true,"controller":true,"kind":"DIJob","name":"job-with-tasks","uid":"u-1"}]},"spec":{"minMember":3}}"#;
        for (gang, api_version) in [
            (GangKind::Volcano, "scheduling.volcano.sh/v1beta1"),
            (GangKind::SchedulerPlugins, "scheduling.x-k8s.io/v1alpha1"),
        ] {
            let group = build_pod_group(&job(), gang, 3);
            assert_eq!(
                serde_json::to_string(&group).expect("json"),
                wire.replace("API", api_version),
                "{gang:?}"
            );
        }
    }

    #[test]
    fn pinning_ands_the_node_into_every_existing_term() {
        let mut spec: PodSpec = serde_json::from_value(json!({
            "containers": [],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]},
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["b"]}]}
                ]
            }}}
        }))
        .expect("spec");
        pin_to_node(&mut spec, "n1");
        let terms = serde_json::to_value(&spec.affinity).expect("json")["nodeAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            .clone();
        assert_eq!(terms.as_array().map(Vec::len), Some(2));
        for term in terms.as_array().into_iter().flatten() {
            assert_eq!(term["matchExpressions"].as_array().map(Vec::len), Some(1));
            assert_eq!(term["matchFields"][0]["values"], json!(["n1"]));
        }
    }

    fn job() -> DIJob {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "diengine.opendilab.org/v2alpha1",
            "kind": "DIJob",
            "metadata": {"name": "job-with-tasks", "namespace": "default", "uid": "u-1"},
            "spec": {
                "volumes": [{"name": "cache-volume", "emptyDir": {"medium": "Memory"}}],
                "tasks": [
                    {"type": "learner", "replicas": 1, "template": {
                        "metadata": {"labels": {"team": "rl", "diengine/job": "spoofed"}, "annotations": {"a": "b"}},
                        "spec": {"restartPolicy": "Always", "containers": [
                            {"name": "di-container", "image": "i", "env": [{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "DI_RANK", "value": "99"}]},
                            {"name": "sidecar", "image": "s"}
                        ]}}},
                    {"name": "collector", "type": "collector", "replicas": 2, "template": {"spec": {"containers": [{"name": "di-container", "image": "i"}]}}}
                ]
            }
        }))
        .expect("job")
    }

    fn world() -> World {
        let fqdn = |p: &str| {
            naming::pod_fqdn(
                p,
                "job-with-tasks",
                "default",
                naming::DEFAULT_SERVICE_DOMAIN,
            )
        };
        let nodes = vec![
            fqdn("job-with-tasks-learner-0"),
            fqdn("job-with-tasks-collector-0"),
            fqdn("job-with-tasks-collector-1"),
        ];
        World {
            task_nodes: BTreeMap::from([
                ("learner".to_string(), vec![nodes[0].clone()]),
                (
                    "collector".to_string(),
                    vec![nodes[1].clone(), nodes[2].clone()],
                ),
            ]),
            nodes,
            replicas: 3,
        }
    }

    fn env_of(pod: &Pod, container: usize) -> Vec<(String, String)> {
        pod.spec.as_ref().expect("spec").containers[container]
            .env
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.name, e.value.unwrap_or_default()))
            .collect()
    }

    #[test]
    fn pod_carries_di_orchestrator_names_labels_annotations_and_env() {
        let job = job();
        let slot = ReplicaSlot {
            task_index: 1,
            local_rank: 1,
            global_rank: 2,
        };
        let pod = build_pod(&job, &slot, &world(), &BuildContext::default(), None).expect("pod");
        let meta = &pod.metadata;
        assert_eq!(meta.name.as_deref(), Some("job-with-tasks-collector-1"));
        assert_eq!(meta.namespace.as_deref(), Some("default"));
        let l = meta.labels.as_ref().expect("labels");
        assert_eq!(l["diengine/job"], "job-with-tasks");
        assert_eq!(l["diengine/operator"], "di-operator");
        assert_eq!(l["diengine/pod"], "job-with-tasks-collector-1");
        assert_eq!(l["diengine/task-type"], "collector");
        assert_eq!(l["diengine/task-name"], "collector");
        let a = meta.annotations.as_ref().expect("annotations");
        assert_eq!(a["diengine/replicas"], "3");
        assert_eq!(a["diengine/rank"], "2");
        assert_eq!(a["diengine/task-rank"], "1");
        assert_eq!(a["diengine/node"], "");
        let owner = &meta.owner_references.as_ref().expect("owner")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("DIJob", "job-with-tasks", "u-1")
        );
        assert_eq!(
            (owner.controller, owner.block_owner_deletion),
            (Some(true), Some(true))
        );

        let spec = pod.spec.as_ref().expect("spec");
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.hostname.as_deref(), Some("job-with-tasks-collector-1"));
        assert_eq!(spec.subdomain.as_deref(), Some("di-job-with-tasks"));
        assert_eq!(spec.node_name, None);
        let volumes: Vec<&str> = spec
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(volumes, ["cache-volume"]);

        let env = env_of(&pod, 0);
        let names: Vec<&str> = env.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "DI_JOB_ID",
                "DI_SERVER_URL",
                "DI_RANK",
                "DI_NODES",
                "DI_COLLECTOR_NODES"
            ]
        );
        assert_eq!(env[0].1, "default/job-with-tasks");
        assert_eq!(
            env[1].1,
            "http://di-server.di-system.svc.cluster.local:8081"
        );
        assert_eq!(env[2].1, "2");
        // DI-engine finds its own address at DI_NODES[DI_RANK].
        let nodes: Vec<&str> = env[3].1.split(',').collect();
        assert_eq!(
            nodes[2],
            "job-with-tasks-collector-1.di-job-with-tasks.default.svc.cluster.local"
        );
        assert_eq!(env[4].1.split(',').count(), 2);
    }

    #[test]
    fn template_metadata_is_kept_but_operator_labels_win_and_user_env_is_replaced() {
        let job = job();
        let slot = ReplicaSlot {
            task_index: 0,
            local_rank: 0,
            global_rank: 0,
        };
        let pod = build_pod(
            &job,
            &slot,
            &world(),
            &BuildContext::default(),
            Some("node-a"),
        )
        .expect("pod");
        let l = pod.metadata.labels.as_ref().expect("labels");
        assert_eq!(l["team"], "rl");
        assert_eq!(l["diengine/job"], "job-with-tasks");
        assert_eq!(
            pod.metadata.annotations.as_ref().expect("annotations")["a"],
            "b"
        );
        assert_eq!(
            pod.metadata.annotations.as_ref().expect("annotations")["diengine/node"],
            "node-a"
        );
        let spec = pod.spec.as_ref().expect("spec");
        assert_eq!(spec.node_name, None, "placed through the scheduler");
        assert_eq!(
            serde_json::to_value(&spec.affinity).expect("json"),
            json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": ["node-a"]}
                ]}]
            }}})
        );
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        for container in 0..2 {
            let env = env_of(&pod, container);
            let ranks: Vec<&str> = env
                .iter()
                .filter(|(n, _)| n == "DI_RANK")
                .map(|(_, v)| v.as_str())
                .collect();
            assert_eq!(ranks, ["0"], "container {container}");
            assert!(env.iter().any(|(n, _)| n == "DI_LEARNER_NODES"));
        }
        assert_eq!(
            env_of(&pod, 0)[0],
            ("NCCL_DEBUG".to_string(), "INFO".to_string())
        );
        assert!(
            build_pod(
                &job,
                &ReplicaSlot {
                    task_index: 5,
                    local_rank: 0,
                    global_rank: 0
                },
                &world(),
                &BuildContext::default(),
                None
            )
            .is_none()
        );
    }

    #[test]
    fn world_from_ranks_puts_each_pod_at_its_rank_and_keeps_gaps() {
        let job = job();
        let slots: Vec<String> = desired_slots(&job).into_iter().map(|(p, _, _)| p).collect();
        assert_eq!(
            slots,
            [
                "job-with-tasks-learner-0",
                "job-with-tasks-collector-0",
                "job-with-tasks-collector-1"
            ]
        );
        // Rank 1 was freed by an earlier scale-in.
        let ranks = RankTable::from_status(Some(&[
            "job-with-tasks-learner-0".to_string(),
            String::new(),
            "job-with-tasks-collector-0".to_string(),
            "job-with-tasks-collector-1".to_string(),
        ]));
        let world = super::world(&job, &ranks, &BuildContext::default());
        assert_eq!(world.replicas, 3);
        assert_eq!(world.nodes.len(), 4);
        assert_eq!(world.nodes[1], "");
        assert_eq!(world.task_nodes["collector"].len(), 2);
        for (pod, index, local) in desired_slots(&job) {
            let rank = ranks.rank_of(&pod).expect("ranked") as i32;
            let slot = ReplicaSlot {
                task_index: index,
                local_rank: local,
                global_rank: rank,
            };
            let built =
                build_pod(&job, &slot, &world, &BuildContext::default(), None).expect("pod");
            let env = env_of(&built, 0);
            let di_rank: usize = env
                .iter()
                .find(|(n, _)| n == "DI_RANK")
                .expect("DI_RANK")
                .1
                .parse()
                .expect("rank");
            let nodes = &env
                .iter()
                .find(|(n, _)| n == "DI_NODES")
                .expect("DI_NODES")
                .1;
            let own = nodes.split(',').nth(di_rank).expect("own entry");
            assert!(own.starts_with(&format!("{pod}.")), "{pod}: {own}");
        }
    }

    #[test]
    fn service_is_headless_with_di_port() {
        let svc = build_service(&job());
        assert_eq!(svc.metadata.name.as_deref(), Some("di-job-with-tasks"));
        let spec = svc.spec.expect("spec");
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(spec.selector, Some(job_labels("job-with-tasks")));
        let port = &spec.ports.expect("ports")[0];
        assert_eq!((port.name.as_deref(), port.port), (Some("di-port"), 22270));
    }

    fn typed(spec: serde_json::Value, status: serde_json::Value) -> DIJob {
        serde_json::from_value(json!({
            "apiVersion": "diengine.opendilab.org/v2alpha1",
            "kind": "DIJob",
            "metadata": {"name": "j", "namespace": "default", "uid": "u"},
            "spec": spec,
            "status": status
        }))
        .expect("job")
    }

    #[test]
    fn slots_stay_within_the_documented_maximums_for_an_unvalidated_job() {
        // What the replica API or the allocator may see in the cache before the controller has
        // failed the job: two billion replicas, and more tasks than a job may have.
        let huge = typed(
            json!({"tasks": [
                {"name": "a", "replicas": 2_000_000_000},
                {"name": "b", "replicas": 7, "maxReplicas": 2_000_000_000}
            ]}),
            json!({}),
        );
        assert_eq!(task_replicas(&huge, 0), MAX_TASK_REPLICAS);
        assert_eq!(task_local_ranks(&huge, 0).len(), MAX_TASK_REPLICAS as usize);
        assert_eq!(desired_slots(&huge).len(), MAX_TASK_REPLICAS as usize + 7);
        let tasks: Vec<serde_json::Value> = (0..200)
            .map(|i| json!({"name": format!("t{i}"), "replicas": 1000}))
            .collect();
        let wide = typed(json!({ "tasks": tasks }), json!({}));
        let slots = desired_slots(&wide);
        assert_eq!(slots.len(), MAX_JOB_REPLICAS as usize);
        assert!(slots.iter().all(|(_, task, _)| *task < MAX_TASKS));
    }

    #[test]
    fn status_numbers_cannot_panic_or_grow_a_task() {
        // minReplicas > maxReplicas (refused by validation, but the cache holds it until then)
        // with an allocator resize in status: `clamp` would panic here.
        let job = typed(
            json!({"preemptible": true, "tasks": [
                {"name": "a", "replicas": 3, "minReplicas": 5, "maxReplicas": 2}
            ]}),
            json!({"taskReplicas": {"a": 2_000_000_000}, "removedRanks": {"a": [-5, 1, 1, 0]}}),
        );
        assert_eq!(task_replicas(&job, 0), 5);
        assert_eq!(task_local_ranks(&job, 0), [2, 3, 4, 5, 6]);
        // A resize in status stays within the task's bounds and the maximum.
        let job = typed(
            json!({"preemptible": true, "tasks": [
                {"name": "a", "replicas": 3, "minReplicas": 1, "maxReplicas": 8}
            ]}),
            json!({"taskReplicas": {"a": i32::MAX}, "removedRanks": {"a": (0..20_000).collect::<Vec<i32>>()}}),
        );
        assert_eq!(task_replicas(&job, 0), 8);
        assert_eq!(
            task_local_ranks(&job, 0),
            (20_000..20_008).collect::<Vec<i32>>()
        );
    }

    #[test]
    fn a_pod_of_a_job_at_the_maximums_with_the_longest_names_fits_in_etcd() {
        // The longest names validation lets through: a 53-character job name (pod names
        // `<job>-tN-999` of 61, service `di-<job>`), a 63-character namespace; 4 tasks of 1000.
        let tasks: Vec<serde_json::Value> = (0..4)
            .map(|i| {
                json!({"name": format!("t{i}"), "type": "none", "replicas": 1000,
                "template": {"spec": {"containers": [{"name": "di-container", "image": "i"}]}}})
            })
            .collect();
        let job: DIJob = serde_json::from_value(json!({
            "apiVersion": "diengine.opendilab.org/v2alpha1",
            "kind": "DIJob",
            "metadata": {"name": "j".repeat(53), "namespace": "n".repeat(63), "uid": "u"},
            "spec": {"tasks": tasks}
        }))
        .expect("job");
        assert_eq!(crate::validate::validate(&job), Ok(()));
        let slots = desired_slots(&job);
        assert_eq!(slots.len(), MAX_JOB_REPLICAS as usize);
        let names: Vec<String> = slots.iter().map(|(p, _, _)| p.clone()).collect();
        let ranks = RankTable::default().plan(&names);
        let world = super::world(&job, &ranks, &BuildContext::default());
        let last = ReplicaSlot {
            task_index: 3,
            local_rank: 999,
            global_rank: MAX_JOB_REPLICAS - 1,
        };
        let pod = build_pod(&job, &last, &world, &BuildContext::default(), None).expect("pod");
        let bytes = serde_json::to_vec(&pod).expect("json").len();
        // etcd's default request limit is 1.5 MiB; leave room for what mutators add.
        assert!(bytes < 1_200_000, "{bytes} bytes");
        println!("a pod of a 4000-replica job with the longest names: {bytes} bytes");
    }
}
