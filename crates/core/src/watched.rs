//! The one pod watch's shape: every pod as the API server sends it, decoded once and split
//! into the allocator's [`UsagePod`] and, for the operator's pods, the controller's
//! [`CachedPod`].
//!
//! Owns [`WatchedPod`]. Pure data: the watch itself and the caches it feeds belong to the
//! operator crate; the two shapes and their trimming are `cached` and `model`'s.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ContainerPort, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use crate::api::labels;
use crate::cached::{CachedPod, CachedPodSpec, CachedPodStatus, pod_resource, slim_meta};
use crate::model::UsagePod;
use crate::resources::{ContainerShape, Resources};

/// A pod as the one watch of every pod sends it, decoded once into what both of its readers
/// keep: the allocator's [`UsagePod`] (every pod holds room on its node) and, for the pods this
/// operator created (its `diengine/operator` label), the controller's [`CachedPod`]. One watch
/// instead of two: the API server sends, and the operator decrypts and parses, each change of a
/// DIJob's pod once.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct WatchedPod {
    #[serde(default, deserialize_with = "slim_meta")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<WatchedSpec>,
    #[serde(default)]
    status: Option<CachedPodStatus>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WatchedSpec {
    #[serde(default)]
    node_name: Option<String>,
    #[serde(default)]
    containers: Vec<WatchedContainer>,
    #[serde(default)]
    init_containers: Vec<WatchedContainer>,
    #[serde(default)]
    overhead: Option<BTreeMap<String, Quantity>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WatchedContainer {
    #[serde(default)]
    name: String,
    #[serde(default)]
    ports: Option<Vec<ContainerPort>>,
    #[serde(default)]
    resources: Option<ResourceRequirements>,
    #[serde(default)]
    restart_policy: Option<String>,
}

impl WatchedContainer {
    fn shape(&self) -> ContainerShape<'_> {
        ContainerShape {
            resources: self.resources.as_ref(),
            restart_policy: self.restart_policy.as_deref(),
        }
    }
}

pod_resource!(WatchedPod);

impl WatchedPod {
    /// Whether the controller caches this pod: one this operator created.
    pub fn is_operators(&self) -> bool {
        self.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::OPERATOR))
            .is_some_and(|v| v == labels::OPERATOR_NAME)
    }

    /// `status.phase`.
    pub fn phase(&self) -> Option<&str> {
        self.status.as_ref().and_then(|s| s.phase.as_deref())
    }

    /// The allocator's view of the pod, and the controller's (trimmed) when it is the
    /// operator's.
    pub fn split(self) -> (UsagePod, Option<CachedPod>) {
        let m = &self.metadata;
        let usage_meta = ObjectMeta {
            name: m.name.clone(),
            namespace: m.namespace.clone(),
            uid: m.uid.clone(),
            resource_version: m.resource_version.clone(),
            ..ObjectMeta::default()
        };
        let job = m.labels.as_ref().and_then(|l| l.get(labels::JOB)).cloned();
        let spec = self.spec.as_ref();
        let usage = UsagePod::new(
            usage_meta,
            job,
            spec.and_then(|s| s.node_name.clone()),
            spec.map_or_else(Resources::default, |s| {
                crate::resources::requests(
                    s.containers.iter().map(WatchedContainer::shape),
                    s.init_containers.iter().map(WatchedContainer::shape),
                    s.overhead.as_ref(),
                    false,
                )
            }),
            self.status.as_ref().and_then(|s| s.phase.as_deref()),
        );
        if !self.is_operators() {
            return (usage, None);
        }
        let cached = CachedPod::trimmed(
            self.metadata,
            self.spec.map(|spec| {
                let containers = spec.containers.into_iter().map(|c| (c.name, c.ports));
                CachedPodSpec::of(spec.node_name, containers)
            }),
            self.status,
        );
        (usage, Some(cached))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_watched_pod_splits_into_the_allocators_and_the_controllers_pods() {
        let json = |operator: bool| {
            let mut labels = json!({"diengine/job": "j", "team": "rl"});
            if operator {
                labels["diengine/operator"] = json!("di-operator");
            }
            json!({
                "metadata": {"name": "a", "namespace": "ns", "uid": "u", "resourceVersion": "5",
                    "labels": labels, "annotations": {"diengine/rank": "0", "big": "x"},
                    "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]},
                "spec": {"nodeName": "n1",
                    "containers": [
                        {"name": "di-container", "image": "i", "resources": {"requests": {"cpu": "2"}},
                         "ports": [{"name": "di-port", "containerPort": 1234}, {"name": "m", "containerPort": 9}]},
                        {"name": "sidecar", "image": "s", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
                    "initContainers": [{"name": "init", "image": "i", "resources": {"requests": {"cpu": "8"}}}]},
                "status": {"phase": "Running", "podIP": "10.0.0.1",
                    "conditions": [{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}]}
            })
        };
        for operator in [true, false] {
            let watched: WatchedPod = serde_json::from_value(json(operator)).expect("watched");
            assert_eq!(watched.is_operators(), operator);
            let (usage, cached) = watched.split();
            let direct: UsagePod = serde_json::from_value(json(operator)).expect("usage");
            assert_eq!(
                usage, direct,
                "the allocator's pod, as its own watch decoded it"
            );
            if operator {
                let alone: CachedPod = serde_json::from_value(json(operator)).expect("cached");
                assert_eq!(cached, Some(alone), "the controller's pod, trimmed");
            } else {
                assert_eq!(
                    cached, None,
                    "not the operator's: the controller never sees it"
                );
            }
        }
    }
}
