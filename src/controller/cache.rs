//! What the controller keeps of watched objects, and how it finds a job's pods.
//!
//! Owns the trimming applied to watched pods, services and DIJobs before they enter the
//! reflector caches (managedFields and everything the planner and the replica API do not read
//! are dropped: this is what keeps 20 000 cached pods small), and the index from a job to its
//! pods' names, kept in step with the pod watch. Reads only; never writes to the API.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::{
    ContainerPort, ContainerStatus, Pod, PodStatus, ResourceRequirements, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher;
use serde::Deserialize;

use crate::api::{DEFAULT_CONTAINER_NAME, DIJob, DIJobStatus, labels};

/// A pod as the controller caches it: decoded straight from the watch into this slim shape
/// (the full `Pod` type is over 4 KB per object before any data), then trimmed by [`trim_pod`].
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CachedPod {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Option<CachedPodSpec>,
    #[serde(default)]
    pub status: Option<PodStatus>,
}

/// What readers use of a pod's spec.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedPodSpec {
    #[serde(default)]
    pub node_name: Option<String>,
    /// Only `di-container`, with its ports and resources.
    #[serde(default)]
    pub containers: Vec<CachedContainer>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CachedContainer {
    pub name: String,
    #[serde(default)]
    pub ports: Option<Vec<ContainerPort>>,
    #[serde(default)]
    pub resources: Option<ResourceRequirements>,
}

/// Makes a slim pod type (with a `metadata: ObjectMeta` field) watchable as core/v1 pods.
macro_rules! pod_resource {
    ($t:ty) => {
        impl kube::Resource for $t {
            type DynamicType = ();
            type Scope = k8s_openapi::NamespaceResourceScope;

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                std::borrow::Cow::Borrowed("Pod")
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                std::borrow::Cow::Borrowed("")
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                std::borrow::Cow::Borrowed("v1")
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                std::borrow::Cow::Borrowed("pods")
            }
            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(
                &mut self,
            ) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
pub(crate) use pod_resource;

pod_resource!(CachedPod);

impl From<Pod> for CachedPod {
    /// The cached form of a full pod (what the watch would have given), trimmed.
    fn from(pod: Pod) -> CachedPod {
        let mut cached = CachedPod {
            metadata: pod.metadata,
            spec: pod.spec.map(|spec| CachedPodSpec {
                node_name: spec.node_name,
                containers: spec
                    .containers
                    .into_iter()
                    .map(|c| CachedContainer {
                        name: c.name,
                        ports: c.ports,
                        resources: c.resources,
                    })
                    .collect(),
            }),
            status: pod.status,
        };
        trim_pod(&mut cached);
        cached
    }
}

/// Whether readers need a label or annotation key: DI-orchestrator's and diorch's own.
fn kept_key(key: &str) -> bool {
    key.starts_with("diengine/") || key.starts_with("diorch.io/")
}

/// A DIJob as the controller caches it: the spec kept as the compact JSON the API server sent
/// (a typed spec holds several KB of empty pod-template fields per task) and decoded only when
/// the job is reconciled.
#[derive(Clone, Debug, Deserialize)]
pub struct CachedJob {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: Box<serde_json::value::RawValue>,
    #[serde(default)]
    pub status: Option<DIJobStatus>,
}

impl CachedJob {
    /// The typed job for the planner.
    pub fn decode(&self) -> Result<DIJob, serde_json::Error> {
        Ok(DIJob {
            metadata: self.metadata.clone(),
            spec: serde_json::from_str(self.spec.get())?,
            status: self.status.clone(),
        })
    }
}

impl kube::Resource for CachedJob {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(crate::api::KIND)
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(crate::api::GROUP)
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(crate::api::VERSION)
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("dijobs")
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Drops what no reader of the DIJob cache uses.
pub fn trim_job(job: &mut CachedJob) {
    job.metadata.managed_fields = None;
    if let Some(a) = job.metadata.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// Keeps of a pod what the planner, the allocator and the replica API read: metadata (minus
/// managedFields and labels or annotations that are not `diengine/` or `diorch.io/` ones), the
/// node, the worker container's ports and resources, and the phase, reason, Ready and
/// PodScheduled conditions, IP and container states of its status.
pub fn trim_pod(pod: &mut CachedPod) {
    pod.metadata.managed_fields = None;
    if let Some(a) = pod.metadata.annotations.as_mut() {
        a.retain(|k, _| kept_key(k));
    }
    if let Some(l) = pod.metadata.labels.as_mut() {
        l.retain(|k, _| kept_key(k));
    }
    if let Some(spec) = pod.spec.as_mut() {
        spec.containers.retain(|c| c.name == DEFAULT_CONTAINER_NAME);
    }
    if let Some(status) = pod.status.take() {
        pod.status = Some(PodStatus {
            phase: status.phase,
            reason: status.reason,
            conditions: status.conditions.map(|cs| {
                cs.into_iter()
                    .filter(|c| c.type_ == "Ready" || c.type_ == "PodScheduled")
                    .map(|mut c| {
                        c.message = None;
                        c
                    })
                    .collect()
            }),
            pod_ip: status.pod_ip,
            container_statuses: status.container_statuses.map(|cs| {
                cs.into_iter()
                    .map(|c| ContainerStatus {
                        name: c.name,
                        ready: c.ready,
                        state: c.state,
                        restart_count: c.restart_count,
                        ..ContainerStatus::default()
                    })
                    .collect()
            }),
            ..PodStatus::default()
        });
    }
}

/// Drops what no reader of the service cache uses.
pub fn trim_service(svc: &mut Service) {
    svc.metadata.managed_fields = None;
    svc.status = None;
}

/// (namespace, `diengine/job` label value).
pub type JobKey = (String, String);

/// Index of pod names per job, maintained from the pod watch events so that a reconcile looks
/// up its job's pods instead of scanning the whole cache.
#[derive(Clone, Default)]
pub struct PodIndex {
    inner: Arc<RwLock<IndexState>>,
}

#[derive(Default)]
struct IndexState {
    by_job: HashMap<JobKey, BTreeSet<String>>,
    /// Built during a watch re-list, swapped in at its end (as the reflector does).
    rebuilding: Option<HashMap<JobKey, BTreeSet<String>>>,
}

fn job_key(pod: &CachedPod) -> Option<(JobKey, String)> {
    let job = pod.metadata.labels.as_ref()?.get(labels::JOB)?;
    Some((
        (pod.metadata.namespace.clone()?, job.clone()),
        pod.metadata.name.clone()?,
    ))
}

impl PodIndex {
    /// Applies one pod watch event; call it on every event before the reflector sees it.
    pub fn apply(&self, event: &watcher::Event<CachedPod>) {
        // A poisoned lock only means another thread panicked mid-update; the map is still a
        // valid map, and the next re-list rebuilds it.
        let mut state = self.inner.write().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Apply(pod) => {
                if let Some((key, name)) = job_key(pod) {
                    state.by_job.entry(key).or_default().insert(name);
                }
            }
            watcher::Event::Delete(pod) => {
                if let Some((key, name)) = job_key(pod)
                    && let Some(names) = state.by_job.get_mut(&key)
                {
                    names.remove(&name);
                    if names.is_empty() {
                        state.by_job.remove(&key);
                    }
                }
            }
            watcher::Event::Init => state.rebuilding = Some(HashMap::new()),
            watcher::Event::InitApply(pod) => {
                if let (Some((key, name)), Some(map)) = (job_key(pod), state.rebuilding.as_mut()) {
                    map.entry(key).or_default().insert(name);
                }
            }
            watcher::Event::InitDone => {
                if let Some(map) = state.rebuilding.take() {
                    state.by_job = map;
                }
            }
        }
    }

    /// Names of the pods labelled with `job` in `namespace`.
    pub fn pods_of(&self, namespace: &str, job: &str) -> Vec<String> {
        let state = self.inner.read().unwrap_or_else(|e| e.into_inner());
        state
            .by_job
            .get(&(namespace.to_string(), job.to_string()))
            .map(|names| names.iter().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, job: &str) -> CachedPod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "labels": {"diengine/job": job, "team": "rl"},
                "annotations": {"diengine/rank": "0", "diorch.io/template-hash": "h", "big": "x"},
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"nodeName": "n1", "containers": [
                {"name": "di-container", "image": "big", "command": ["x"], "env": [{"name": "DI_NODES", "value": "a,b"}],
                 "ports": [{"name": "di-port", "containerPort": 1234}]},
                {"name": "sidecar", "image": "s"}
            ]},
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": "True", "message": "m"}, {"type": "Initialized", "status": "True"}],
                "containerStatuses": [{"name": "di-container", "ready": true, "image": "big", "imageID": "sha", "restartCount": 0}]}
        }))
        .expect("pod")
    }

    #[test]
    fn trimming_keeps_what_readers_use_and_drops_the_rest() {
        let mut p = pod("a", "j");
        trim_pod(&mut p);
        assert!(p.metadata.managed_fields.is_none());
        let keys = |m: &Option<std::collections::BTreeMap<String, String>>| {
            m.as_ref()
                .map(|m| m.keys().cloned().collect::<Vec<_>>())
                .unwrap_or_default()
        };
        assert_eq!(keys(&p.metadata.labels), ["diengine/job"]);
        assert_eq!(
            keys(&p.metadata.annotations),
            ["diengine/rank", "diorch.io/template-hash"]
        );
        let spec = p.spec.as_ref().expect("spec");
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert_eq!(spec.containers.len(), 1);
        assert_eq!(
            spec.containers[0]
                .ports
                .as_ref()
                .map(|p| p[0].container_port),
            Some(1234)
        );
        assert_eq!(spec.containers[0].name, "di-container");
        let status = p.status.as_ref().expect("status");
        assert_eq!(status.pod_ip.as_deref(), Some("10.0.0.1"));
        let conditions = status.conditions.as_ref().expect("conditions");
        assert_eq!(conditions.len(), 1);
        assert_eq!(
            (
                conditions[0].type_.as_str(),
                conditions[0].message.as_deref()
            ),
            ("Ready", None)
        );
        let cs = &status.container_statuses.as_ref().expect("cs")[0];
        assert!(cs.ready && cs.image.is_empty());
    }

    #[test]
    fn cached_jobs_decode_to_the_typed_job() {
        let raw = json!({
            "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
            "metadata": {"name": "j", "namespace": "ns", "managedFields": [{"manager": "kubectl"}]},
            "spec": {"backoffLimit": 2, "tasks": [{"type": "learner", "replicas": 3, "template": {"spec": {"containers": [{"name": "di-container", "image": "i"}]}}}]},
            "status": {"phase": "Running"}
        });
        let mut cached: CachedJob = serde_json::from_value(raw.clone()).expect("cached");
        trim_job(&mut cached);
        let job = cached.decode().expect("decode");
        let typed: DIJob = serde_json::from_value(raw).expect("typed");
        assert_eq!(job.spec, typed.spec);
        assert_eq!(job.status, typed.status);
        assert!(job.metadata.managed_fields.is_none());
        assert_eq!(
            <CachedJob as kube::Resource>::api_version(&()),
            "diengine.opendilab.org/v2alpha1"
        );
    }

    #[test]
    fn index_follows_watch_events_and_relists() {
        let index = PodIndex::default();
        index.apply(&watcher::Event::Apply(pod("a", "j")));
        index.apply(&watcher::Event::Apply(pod("b", "j")));
        index.apply(&watcher::Event::Apply(pod("c", "k")));
        assert_eq!(index.pods_of("ns", "j"), ["a", "b"]);
        index.apply(&watcher::Event::Delete(pod("a", "j")));
        assert_eq!(index.pods_of("ns", "j"), ["b"]);
        assert!(index.pods_of("other", "j").is_empty());
        // A re-list replaces the index atomically at its end.
        index.apply(&watcher::Event::Init);
        index.apply(&watcher::Event::InitApply(pod("d", "j")));
        assert_eq!(index.pods_of("ns", "j"), ["b"], "old view until InitDone");
        index.apply(&watcher::Event::InitDone);
        assert_eq!(index.pods_of("ns", "j"), ["d"]);
        assert!(index.pods_of("ns", "k").is_empty());
    }
}
