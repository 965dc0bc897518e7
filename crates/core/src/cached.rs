//! The slim shapes the operator caches watched pods and DIJobs in, and their trimming.
//!
//! Owns [`CachedPod`] and [`CachedJob`] (decoded straight from a watch into these shapes, so
//! 20 000 cached pods stay small), the trimming applied before they enter a cache, and the
//! `kube_core::Resource` impls that make them watchable. Pure data: the watches and the reflector
//! stores that hold these belong to the operator crate.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ContainerPort, ContainerStatus, Pod, PodStatus, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};

use crate::api::{DEFAULT_CONTAINER_NAME, DEFAULT_PORT_NAME, DIJob, DIJobStatus, Phase, labels};

/// `ObjectMeta` as a watch sends it, minus `managedFields` and `selfLink`: those are skipped
/// while parsing, without building them. `managedFields` is most of the metadata of an object
/// several controllers write (on a real API server, every pod and DIJob), and decoding it into
/// `serde_json::Value` maps, only to drop it, was the largest share of the operator's CPU.
pub(crate) fn slim_meta<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<ObjectMeta, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Slim {
        #[serde(default)]
        annotations: Option<BTreeMap<String, String>>,
        #[serde(default)]
        creation_timestamp: Option<Time>,
        #[serde(default)]
        deletion_grace_period_seconds: Option<i64>,
        #[serde(default)]
        deletion_timestamp: Option<Time>,
        #[serde(default)]
        finalizers: Option<Vec<String>>,
        #[serde(default)]
        generate_name: Option<String>,
        #[serde(default)]
        generation: Option<i64>,
        #[serde(default)]
        labels: Option<BTreeMap<String, String>>,
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        namespace: Option<String>,
        #[serde(default)]
        owner_references: Option<Vec<OwnerReference>>,
        #[serde(default)]
        resource_version: Option<String>,
        #[serde(default)]
        uid: Option<String>,
    }
    let m = Slim::deserialize(deserializer)?;
    Ok(ObjectMeta {
        annotations: m.annotations,
        creation_timestamp: m.creation_timestamp,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        deletion_timestamp: m.deletion_timestamp,
        finalizers: m.finalizers,
        generate_name: m.generate_name,
        generation: m.generation,
        labels: m.labels,
        managed_fields: None,
        name: m.name,
        namespace: m.namespace,
        owner_references: m.owner_references,
        resource_version: m.resource_version,
        self_link: None,
        uid: m.uid,
    })
}

/// An owned object's metadata (a pod's or a service's) as the caches keep it: what their
/// readers use. `ObjectMeta` takes ~370 B per object before any data (every field an `Option`),
/// and a DIJob's owner reference ~230 B more; a cluster of 5 000 jobs caches 25 000 of these.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachedMeta {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub uid: Option<String>,
    pub deletion_timestamp: Option<Time>,
    /// The DIJob this object's controller reference names, if it has such a reference.
    pub owner: Option<JobOwner>,
}

/// A DIJob that controls an object: its controller owner reference of kind `DIJob` in the
/// `diengine.opendilab.org` group.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobOwner {
    pub name: String,
    pub uid: String,
}

impl CachedMeta {
    /// The kept parts of `meta`, and its labels and annotations (for [`Tags`]).
    fn split(meta: ObjectMeta) -> (CachedMeta, Labels, Labels) {
        let owner = meta
            .owner_references
            .into_iter()
            .flatten()
            .find(|o| {
                o.controller == Some(true)
                    && o.kind == crate::api::KIND
                    && o.api_version
                        .strip_prefix(crate::api::GROUP)
                        .is_some_and(|v| v.starts_with('/'))
            })
            .map(|o| JobOwner {
                name: o.name,
                uid: o.uid,
            });
        let cached = CachedMeta {
            name: meta.name,
            namespace: meta.namespace,
            uid: meta.uid,
            deletion_timestamp: meta.deletion_timestamp,
            owner,
        };
        (cached, meta.labels, meta.annotations)
    }

    /// Whether the DIJob of uid `uid` controls this object.
    pub fn owned_by(&self, uid: &str) -> bool {
        self.owner.as_ref().is_some_and(|o| o.uid == uid)
    }

    /// `namespace/name`: the key the caches keep the object under.
    pub fn key(&self) -> Option<String> {
        Some(format!(
            "{}/{}",
            self.namespace.as_deref()?,
            self.name.as_deref()?
        ))
    }
}

impl From<ObjectMeta> for CachedMeta {
    fn from(meta: ObjectMeta) -> CachedMeta {
        CachedMeta::split(meta).0
    }
}

type Labels = Option<BTreeMap<String, String>>;

/// A pod as the controller caches it: decoded from the watch (the full `Pod` type is over
/// 4 KB per object before any data) and trimmed to what its readers use.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(from = "WirePod")]
pub struct CachedPod {
    pub metadata: CachedMeta,
    pub spec: Option<CachedPodSpec>,
    pub status: Option<CachedPodStatus>,
    /// The labels and annotations readers use ([`PodLabel`], [`PodAnnotation`]).
    pub tags: Tags,
}

/// A pod as the API server sends it, in the parts a [`CachedPod`] is made of.
#[derive(Deserialize)]
struct WirePod {
    #[serde(default, deserialize_with = "slim_meta")]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<CachedPodSpec>,
    #[serde(default)]
    status: Option<CachedPodStatus>,
}

impl From<WirePod> for CachedPod {
    fn from(pod: WirePod) -> CachedPod {
        CachedPod::trimmed(pod.metadata, pod.spec, pod.status)
    }
}

/// A label a cached pod keeps: one its readers read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodLabel {
    /// `diengine/job`.
    Job,
    /// `diengine/task-name`.
    TaskName,
    /// `diengine/task-type`.
    TaskType,
}

/// An annotation a cached pod keeps: one its readers read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodAnnotation {
    /// `diengine/rank`.
    Rank,
    /// `diengine/node`.
    Node,
    /// `diorch.io/template-hash`.
    TemplateHash,
}

const KEPT_LABELS: [(PodLabel, &str); 3] = [
    (PodLabel::Job, labels::JOB),
    (PodLabel::TaskName, labels::TASK_NAME),
    (PodLabel::TaskType, labels::TASK_TYPE),
];

const KEPT_ANNOTATIONS: [(PodAnnotation, &str); 3] = [
    (PodAnnotation::Rank, labels::ANNOTATION_RANK),
    (PodAnnotation::Node, labels::ANNOTATION_NODE),
    (
        PodAnnotation::TemplateHash,
        labels::ANNOTATION_TEMPLATE_HASH,
    ),
];

/// How many values [`Tags`] keeps: the labels', then the annotations'.
const KEPT: usize = KEPT_LABELS.len() + KEPT_ANNOTATIONS.len();

/// The kept labels' and annotations' values ([`PodLabel`], [`PodAnnotation`]) in one
/// allocation, back to back in that order. Readers ask for a typed key, so a key the cache
/// does not keep cannot be asked for. A `BTreeMap` (what `ObjectMeta` holds) takes 0.5 KB
/// before its first entry, and a pod carries ten `diengine/` and `diorch.io/` keys, of which
/// its readers read six: only those six values are kept (~60 B), not their keys.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tags {
    text: Box<str>,
    /// Where each value ends in `text` (a value starts where the one before it ends).
    ends: [u32; KEPT],
    /// Bit `i` set: the pod has value `i` (an empty value is not a missing one).
    present: u8,
}

impl Tags {
    fn new(labels: Labels, annotations: Labels) -> Tags {
        let (labels, annotations) = (labels.unwrap_or_default(), annotations.unwrap_or_default());
        let values: [Option<&String>; KEPT] = [
            labels.get(KEPT_LABELS[0].1),
            labels.get(KEPT_LABELS[1].1),
            labels.get(KEPT_LABELS[2].1),
            annotations.get(KEPT_ANNOTATIONS[0].1),
            annotations.get(KEPT_ANNOTATIONS[1].1),
            annotations.get(KEPT_ANNOTATIONS[2].1),
        ];
        if values.iter().all(Option::is_none) {
            return Tags::default();
        }
        let total = values.iter().flatten().map(|v| v.len()).sum();
        let mut tags = Tags {
            text: Box::default(),
            ends: [0; KEPT],
            present: 0,
        };
        let mut text = String::with_capacity(total);
        for (i, value) in values.iter().enumerate() {
            // An object's labels and annotations are bounded by the API server (256 KiB); a
            // text past 4 GiB cannot come from one, so a value past it is not kept.
            if let Some(v) = value
                && u32::try_from(text.len() + v.len()).is_ok()
            {
                text.push_str(v);
                tags.present |= 1 << i;
            }
            // Within u32: only what fit was pushed.
            tags.ends[i] = u32::try_from(text.len()).unwrap_or(u32::MAX);
        }
        tags.text = text.into_boxed_str();
        tags
    }

    fn get(&self, i: usize) -> Option<&str> {
        if self.present & (1 << i) == 0 {
            return None;
        }
        let start = i.checked_sub(1).map_or(0, |j| self.ends[j] as usize);
        // The ends were taken from `text` at char boundaries, in order.
        self.text.get(start..self.ends[i] as usize)
    }
}

impl CachedPod {
    /// The value of a kept label.
    pub fn label(&self, label: PodLabel) -> Option<&str> {
        self.tags.get(label as usize)
    }

    /// The value of a kept annotation.
    pub fn annotation(&self, annotation: PodAnnotation) -> Option<&str> {
        self.tags.get(KEPT_LABELS.len() + annotation as usize)
    }

    /// Whether `self` and `other` (two cached versions of one pod) differ in nothing a DIJob's
    /// pass reads: everything but the node (`spec.nodeName`, which only the replica API
    /// reports). The scheduler's binding changes just that, and on a real API server it came
    /// as an event of its own, a pass per job that decided nothing new. Every field is named,
    /// so a field added to the cached shape is compared too.
    pub fn same_for_a_pass(&self, other: &CachedPod) -> bool {
        let CachedPod {
            metadata,
            spec,
            status,
            tags,
        } = self;
        fn containers(spec: &Option<CachedPodSpec>) -> Option<&Vec<CachedContainer>> {
            spec.as_ref().map(|s| {
                let CachedPodSpec {
                    node_name: _,
                    containers,
                } = s;
                containers
            })
        }
        *metadata == other.metadata
            && *status == other.status
            && *tags == other.tags
            && containers(spec) == containers(&other.spec)
    }
}

/// What readers use of a pod's spec.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedPodSpec {
    #[serde(default)]
    pub node_name: Option<String>,
    /// Only `di-container`, with its `di-port`.
    #[serde(default)]
    pub containers: Vec<CachedContainer>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CachedContainer {
    pub name: String,
    #[serde(default)]
    pub ports: Option<Vec<ContainerPort>>,
}

/// What readers use of a pod's status, with the field names of `PodStatus` (so the readers
/// read it the same way). `PodStatus` and its `ContainerStatus` take over 1 KB per pod before
/// any data; this takes a tenth of it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedPodStatus {
    #[serde(default)]
    pub phase: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default, rename = "podIP")]
    pub pod_ip: Option<String>,
    /// Only `Ready`, once trimmed.
    #[serde(default)]
    pub conditions: Option<Vec<CachedCondition>>,
    #[serde(default)]
    pub container_statuses: Option<Vec<CachedContainerStatus>>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CachedCondition {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub status: String,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedContainerStatus {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub ready: bool,
    #[serde(default)]
    pub restart_count: i32,
    #[serde(default)]
    pub state: Option<CachedContainerState>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CachedContainerState {
    #[serde(default)]
    pub terminated: Option<CachedTerminated>,
    #[serde(default)]
    pub waiting: Option<CachedWaiting>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedTerminated {
    #[serde(default)]
    pub exit_code: i32,
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CachedWaiting {
    #[serde(default)]
    pub reason: Option<String>,
}

impl From<PodStatus> for CachedPodStatus {
    fn from(status: PodStatus) -> CachedPodStatus {
        CachedPodStatus {
            phase: status.phase,
            reason: status.reason,
            pod_ip: status.pod_ip,
            conditions: status.conditions.map(|cs| {
                cs.into_iter()
                    .map(|c| CachedCondition {
                        type_: c.type_,
                        status: c.status,
                    })
                    .collect()
            }),
            container_statuses: status
                .container_statuses
                .map(|cs| cs.into_iter().map(CachedContainerStatus::from).collect()),
        }
    }
}

impl From<ContainerStatus> for CachedContainerStatus {
    fn from(c: ContainerStatus) -> CachedContainerStatus {
        CachedContainerStatus {
            name: c.name,
            ready: c.ready,
            restart_count: c.restart_count,
            state: c.state.map(|s| CachedContainerState {
                terminated: s.terminated.map(|t| CachedTerminated {
                    exit_code: t.exit_code,
                    reason: t.reason,
                }),
                waiting: s.waiting.map(|w| CachedWaiting { reason: w.reason }),
            }),
        }
    }
}

/// Makes a slim pod type (with a `metadata: ObjectMeta` field) watchable as core/v1 pods.
macro_rules! pod_resource {
    ($t:ty) => {
        impl kube_core::Resource for $t {
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

impl CachedPodSpec {
    /// What readers use of a pod's spec: its node, and each container's name and ports.
    pub(crate) fn of(
        node_name: Option<String>,
        containers: impl IntoIterator<Item = (String, Option<Vec<ContainerPort>>)>,
    ) -> CachedPodSpec {
        CachedPodSpec {
            node_name,
            containers: containers
                .into_iter()
                .map(|(name, ports)| CachedContainer { name, ports })
                .collect(),
        }
    }
}

impl CachedPod {
    /// The cached pod of these parts, trimmed to what readers use: of the labels and
    /// annotations only the values of [`PodLabel`] and [`PodAnnotation`] keys, of the
    /// containers `di-container` with its `di-port`, of the conditions `Ready` (no reader reads
    /// another; `PodScheduled` took ~130 B per pod). Shared by the wire decode, `From<Pod>` and
    /// the pod watch's split
    /// (`watched`).
    pub(crate) fn trimmed(
        metadata: ObjectMeta,
        mut spec: Option<CachedPodSpec>,
        mut status: Option<CachedPodStatus>,
    ) -> CachedPod {
        let (metadata, labels, annotations) = CachedMeta::split(metadata);
        let tags = if labels.is_some() || annotations.is_some() {
            Tags::new(labels, annotations)
        } else {
            Tags::default()
        };
        // Each kept vector is shrunk to what it holds: a decoded vector keeps the capacity it
        // grew to (4 and more entries), ~1.2 KB per pod over what a pod's few entries take, and
        // the cache keeps the decoded pod itself.
        if let Some(spec) = spec.as_mut() {
            spec.containers.retain(|c| c.name == DEFAULT_CONTAINER_NAME);
            spec.containers.shrink_to_fit();
            for c in &mut spec.containers {
                if let Some(ports) = c.ports.as_mut() {
                    ports.retain(|p| p.name.as_deref() == Some(DEFAULT_PORT_NAME));
                    ports.shrink_to_fit();
                }
            }
        }
        if let Some(status) = status.as_mut() {
            if let Some(conditions) = status.conditions.as_mut() {
                conditions.retain(|c| c.type_ == "Ready");
                conditions.shrink_to_fit();
            }
            // None kept is no list: a pod bound but not yet ready caches as it did unbound.
            if status.conditions.as_ref().is_some_and(Vec::is_empty) {
                status.conditions = None;
            }
            if let Some(statuses) = status.container_statuses.as_mut() {
                statuses.shrink_to_fit();
            }
        }
        CachedPod {
            metadata,
            spec,
            status,
            tags,
        }
    }
}

impl From<Pod> for CachedPod {
    /// The cached form of a full pod (what the watch would have given), trimmed.
    fn from(pod: Pod) -> CachedPod {
        CachedPod::trimmed(
            pod.metadata,
            pod.spec.map(|spec| {
                let containers = spec.containers.into_iter().map(|c| (c.name, c.ports));
                CachedPodSpec::of(spec.node_name, containers)
            }),
            pod.status.map(CachedPodStatus::from),
        )
    }
}

/// A service as the controller caches it: its metadata only (the planner reads its owner and
/// whether it is being deleted). A cached `Service` took ~1.9 KB per job.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(from = "WatchedService")]
pub struct CachedService {
    pub metadata: CachedMeta,
}

/// A service as the operator's service watch decodes it: its metadata, without
/// `managedFields`; made a [`CachedService`] before it is cached.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct WatchedService {
    #[serde(default, deserialize_with = "slim_meta")]
    pub metadata: ObjectMeta,
}

impl kube_core::Resource for WatchedService {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Service")
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("services")
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl From<WatchedService> for CachedService {
    fn from(svc: WatchedService) -> CachedService {
        CachedService {
            metadata: CachedMeta::from(svc.metadata),
        }
    }
}

impl From<Service> for CachedService {
    /// The cached form of a full service (what the watch would have given).
    fn from(svc: Service) -> CachedService {
        CachedService {
            metadata: CachedMeta::from(svc.metadata),
        }
    }
}

/// A DIJob as the controller caches it: the spec kept as the compact JSON the API server sent
/// (a typed spec holds several KB of empty pod-template fields per task) and decoded only when
/// the job is reconciled.
#[derive(Clone, Debug, Deserialize)]
pub struct CachedJob {
    #[serde(default, deserialize_with = "slim_meta")]
    pub metadata: ObjectMeta,
    pub spec: Box<serde_json::value::RawValue>,
    /// The status as the compact JSON the API server sent, decoded by [`CachedJob::status`]:
    /// typed, a running job's status (its conditions and their messages, the placement
    /// decision, ranks and allocation) took ~3 KB per job in the cache, its JSON ~1.9 KB.
    #[serde(default)]
    status: Option<Box<serde_json::value::RawValue>>,
    /// [`CachedJob::phase_since`], worked out on first read: the metrics pass reads it for every
    /// job every few seconds, and a cached object never changes (a watch event brings a new one).
    #[serde(skip)]
    phase: std::sync::OnceLock<(Phase, Option<jiff::Timestamp>)>,
}

impl CachedJob {
    /// A cached job of these parts, its status kept as the API server would send it.
    pub fn new(
        metadata: ObjectMeta,
        spec: Box<serde_json::value::RawValue>,
        status: Option<&DIJobStatus>,
    ) -> Result<CachedJob, serde_json::Error> {
        Ok(CachedJob {
            metadata,
            spec,
            status: status.map(serde_json::value::to_raw_value).transpose()?,
            phase: std::sync::OnceLock::new(),
        })
    }

    /// The typed job for the planner.
    pub fn decode(&self) -> Result<DIJob, serde_json::Error> {
        Ok(DIJob {
            metadata: self.metadata.clone(),
            spec: serde_json::from_str(self.spec.get())?,
            status: self.status()?,
        })
    }

    /// Whether the status holds a string `"name"` anywhere (a field of that name, or such a
    /// value): a test of a few hundred nanoseconds before decoding the status, for a pass over
    /// every job that looks for one rare field. Never false when the field is there (the API
    /// server writes names unescaped; a `"` inside a string value is escaped).
    pub fn status_mentions(&self, name: &str) -> bool {
        let Some(raw) = self.status.as_ref() else {
            return false;
        };
        raw.get().contains(&format!("\"{name}\""))
    }

    /// The typed status; an error if it does not decode (the job then fails to decode too).
    pub fn status(&self) -> Result<Option<DIJobStatus>, serde_json::Error> {
        self.status
            .as_ref()
            .map(|raw| serde_json::from_str(raw.get()))
            .transpose()
    }

    /// The job's phase and since when it has been in it ([`crate::api::phase_since`]),
    /// decoded once per cached object. A status that does not decode reads as no status:
    /// Pending since creation.
    pub fn phase_since(&self) -> (Phase, Option<jiff::Timestamp>) {
        *self.phase.get_or_init(|| {
            let status = self.status().ok().flatten();
            crate::api::phase_since(&self.metadata, status.as_ref())
        })
    }

    /// `spec.preemptible`, read without decoding the spec (its pod templates are most of the
    /// cost of [`CachedJob::decode`]): a pass over every job asks this first. A spec that does
    /// not parse answers false, as it would fail to decode.
    pub fn preemptible(&self) -> bool {
        #[derive(Deserialize)]
        struct Probe {
            #[serde(default)]
            preemptible: bool,
        }
        serde_json::from_str::<Probe>(self.spec.get()).is_ok_and(|p| p.preemptible)
    }
}

impl kube_core::Resource for CachedJob {
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

/// The API server's answer to a DIJob status write, in the parts the writer reads: the job's
/// metadata (its new resourceVersion) and its status. The spec, which a status write cannot
/// change, is skipped unread: decoded as a [`CachedJob`], each answer copied it out (most of a
/// DIJob's bytes) only to drop it, and parsed the status twice.
#[derive(Clone, Debug, Deserialize)]
pub struct WrittenStatus {
    #[serde(default, deserialize_with = "slim_meta")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub status: Option<DIJobStatus>,
}

impl kube_core::Resource for WrittenStatus {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        CachedJob::kind(&())
    }
    fn group(_: &()) -> Cow<'_, str> {
        CachedJob::group(&())
    }
    fn version(_: &()) -> Cow<'_, str> {
        CachedJob::version(&())
    }
    fn plural(_: &()) -> Cow<'_, str> {
        CachedJob::plural(&())
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
                 "ports": [{"name": "metrics", "containerPort": 9000}, {"name": "di-port", "containerPort": 1234}]},
                {"name": "sidecar", "image": "s"}
            ]},
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": "True", "message": "m"}, {"type": "Initialized", "status": "True"},
                    {"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": "di-container", "ready": true, "image": "big", "imageID": "sha", "restartCount": 0}]}
        }))
        .expect("pod")
    }

    #[test]
    fn a_version_that_moved_only_the_node_is_the_same_for_a_pass_and_any_other_change_is_not() {
        let base = json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "1",
                "labels": {"diengine/job": "j"}, "annotations": {"diengine/rank": "0"}},
            "spec": {"containers": [{"name": "di-container"}]},
            "status": {"phase": "Pending"}
        });
        let cached = |edit: &dyn Fn(&mut serde_json::Value)| {
            let mut v = base.clone();
            edit(&mut v);
            serde_json::from_value::<CachedPod>(v).expect("pod")
        };
        let old = cached(&|_| {});
        // The scheduler's binding: a node, a PodScheduled condition, a new version.
        let bound = cached(&|v| {
            v["metadata"]["resourceVersion"] = json!("2");
            v["spec"]["nodeName"] = json!("n1");
            v["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "True"}]);
        });
        assert!(bound.same_for_a_pass(&old) && old.same_for_a_pass(&bound));
        assert_ne!(
            bound, old,
            "the cache still takes the node (the replica API reports it)"
        );
        // Anything a pass reads is a change.
        let edits: [&dyn Fn(&mut serde_json::Value); 9] = [
            &|v| v["status"]["phase"] = json!("Running"),
            &|v| v["status"]["podIP"] = json!("10.0.0.1"),
            &|v| v["status"]["reason"] = json!("OutOfcpu"),
            &|v| v["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]),
            &|v| {
                v["status"]["containerStatuses"] =
                    json!([{"name": "di-container", "ready": false, "restartCount": 1}])
            },
            &|v| v["metadata"]["annotations"]["diengine/rank"] = json!("1"),
            &|v| v["metadata"]["deletionTimestamp"] = json!("2026-11-28T00:00:00Z"),
            &|v| v["metadata"]["uid"] = json!("u2"),
            &|v| {
                v["spec"]["containers"][0]["ports"] =
                    json!([{"name": "di-port", "containerPort": 22270}])
            },
        ];
        for (i, edit) in edits.iter().enumerate() {
            let new = cached(*edit);
            assert!(!new.same_for_a_pass(&old), "change {i} is read by a pass");
        }
    }

    #[test]
    fn a_cached_job_reads_its_phase_and_since_when_as_the_planner_does() {
        let ts = |t: &str| t.parse::<jiff::Timestamp>().expect("timestamp");
        let job = |status: serde_json::Value| -> CachedJob {
            serde_json::from_value(json!({
                "metadata": {"name": "j", "namespace": "ns",
                    "creationTimestamp": "2026-11-28T04:00:00Z"},
                "spec": {"tasks": []},
                "status": status,
            }))
            .expect("cached")
        };
        let running = job(json!({"phase": "Running", "conditions": [
            {"type": "Starting", "status": "True", "lastTransitionTime": "2026-11-28T04:10:00Z"},
            {"type": "Running", "status": "True", "lastTransitionTime": "2026-11-28T04:22:58Z"}]}));
        assert_eq!(
            running.phase_since(),
            (Phase::Running, Some(ts("2026-11-28T04:22:58Z")))
        );
        // Read twice, the same (the second from the memo).
        assert_eq!(running.phase_since(), running.phase_since());
        let typed = running.decode().expect("decodes");
        assert_eq!(
            running.phase_since(),
            crate::api::phase_since(&typed.metadata, typed.status.as_ref())
        );
        // A phase whose condition is not True, no status, and a status that does not decode:
        // each since creation, the last two as Pending.
        let created = Some(ts("2026-11-28T04:00:00Z"));
        let restarting = job(json!({"phase": "Restarting", "conditions": [
            {"type": "Restarting", "status": "False", "lastTransitionTime": "2026-11-28T04:30:00Z"}]}));
        assert_eq!(restarting.phase_since(), (Phase::Restarting, created));
        assert_eq!(job(json!(null)).phase_since(), (Phase::Pending, created));
        let bad = job(json!({"phase": "Running", "replicas": "x"}));
        assert!(bad.status().is_err());
        assert_eq!(bad.phase_since(), (Phase::Pending, created));
        // Cloned after its first read, a job keeps what it read.
        let copy = running.clone();
        assert_eq!(copy.phase_since(), running.phase_since());
    }

    #[test]
    fn the_status_is_kept_as_json_and_decodes_to_what_the_typed_job_holds() {
        let text = json!({
            "metadata": {"name": "j", "namespace": "ns"},
            "spec": {"tasks": []},
            "status": {"phase": "Running", "ranks": ["j-learner-0"], "replicas": 1,
                "conditions": [{"type": "Running", "status": "True", "reason": "JobRunning",
                    "message": "job is running since all pods are ready.",
                    "lastTransitionTime": "2026-11-28T04:22:58Z"}]}
        });
        let cached: CachedJob = serde_json::from_value(text.clone()).expect("cached");
        let typed: DIJob = serde_json::from_value(text).expect("typed");
        assert!(typed.status.is_some());
        assert_eq!(cached.status().expect("decodes"), typed.status);
        assert_eq!(cached.decode().expect("decodes").status, typed.status);
        // Made from a typed status, as the simulator and the write answers do: the same again.
        let again = CachedJob::new(
            cached.metadata.clone(),
            cached.spec.clone(),
            typed.status.as_ref(),
        )
        .expect("encodes");
        assert_eq!(again.status().expect("decodes"), typed.status);

        let none: CachedJob =
            serde_json::from_value(json!({"spec": {}, "status": null})).expect("cached");
        assert_eq!(none.status().expect("decodes"), None);
        // A status that does not decode fails the job's decode, as it failed the watch before.
        let bad: CachedJob =
            serde_json::from_value(json!({"spec": {"tasks": []}, "status": {"replicas": "x"}}))
                .expect("kept as JSON");
        assert!(bad.status().is_err());
        assert!(bad.decode().is_err());

        // A field named in the status is found; a name only inside a string value is not.
        assert!(cached.status_mentions("ranks"));
        assert!(!cached.status_mentions("preemption"));
        let quoted: CachedJob = serde_json::from_value(json!({"spec": {},
            "status": {"conditions": [{"type": "Running", "message": "no \"preemption\" here"}]}}))
        .expect("cached");
        assert!(!quoted.status_mentions("preemption"));
        assert!(!none.status_mentions("phase"));
    }

    #[test]
    fn preemptible_is_read_without_decoding_the_spec() {
        let job = |spec: &str| {
            let spec = serde_json::value::RawValue::from_string(spec.to_string()).expect("raw");
            CachedJob::new(ObjectMeta::default(), spec, None).expect("job")
        };
        assert!(
            job(r#"{"preemptible": true, "tasks": [{"template": {"x": [1, {"y": "}"}]}}]}"#)
                .preemptible()
        );
        assert!(!job(r#"{"tasks": [], "preemptible": false}"#).preemptible());
        assert!(!job(r#"{"tasks": []}"#).preemptible(), "the default");
        assert!(
            !job(r#"{"preemptible": "yes"}"#).preemptible(),
            "does not parse"
        );
    }

    #[test]
    fn tags_keep_the_read_labels_and_annotations_apart_in_one_text() {
        // The typed keys index the kept values in order.
        for (i, (label, _)) in KEPT_LABELS.iter().enumerate() {
            assert_eq!(*label as usize, i);
        }
        for (i, (annotation, _)) in KEPT_ANNOTATIONS.iter().enumerate() {
            assert_eq!(*annotation as usize, i);
        }
        let map = |pairs: &[(&str, &str)]| {
            Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<std::collections::BTreeMap<_, _>>(),
            )
        };
        let tagged = |labels, annotations| {
            let meta = ObjectMeta {
                labels,
                annotations,
                ..ObjectMeta::default()
            };
            CachedPod::trimmed(meta, None, None)
        };
        let p = tagged(
            map(&[
                ("diengine/job", "j"),
                ("diengine/task-name", ""),
                ("diengine/node", "as a label"),
                ("diengine/pod", "not read"),
                ("other", "dropped"),
            ]),
            map(&[
                ("diengine/job", "as an annotation"),
                ("diengine/rank", "7"),
                ("diorch.io/template-hash", "héllo, 世界"),
                ("diengine/replicas", "not read"),
            ]),
        );
        assert_eq!(p.label(PodLabel::Job), Some("j"));
        // Empty is not missing.
        assert_eq!(p.label(PodLabel::TaskName), Some(""));
        assert_eq!(p.label(PodLabel::TaskType), None);
        assert_eq!(p.annotation(PodAnnotation::Rank), Some("7"));
        // A key is looked up among its own kind only.
        assert_eq!(p.annotation(PodAnnotation::Node), None);
        assert_eq!(
            p.annotation(PodAnnotation::TemplateHash),
            Some("héllo, 世界")
        );
        // Only the values read are kept.
        assert_eq!(&*p.tags.text, "j7héllo, 世界");
        // No labels, annotations only, and nothing at all.
        let q = tagged(None, map(&[("diengine/node", "n1")]));
        assert_eq!(
            (q.label(PodLabel::Job), q.annotation(PodAnnotation::Node)),
            (None, Some("n1"))
        );
        let empty = tagged(None, None);
        assert_eq!(empty.label(PodLabel::Job), None);
        assert_eq!(empty.tags, Tags::default());
        let unread = tagged(map(&[("diengine/pod", "p")]), None);
        assert_eq!(unread.tags, Tags::default());
    }

    #[test]
    fn trimming_keeps_what_readers_use_and_drops_the_rest() {
        let p = pod("a", "j");
        assert_eq!(p.metadata.name.as_deref(), Some("a"));
        assert_eq!(p.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(p.label(PodLabel::Job), Some("j"));
        assert_eq!(p.annotation(PodAnnotation::Rank), Some("0"));
        assert_eq!(p.annotation(PodAnnotation::TemplateHash), Some("h"));
        assert_eq!(&*p.tags.text, "j0h", "team and big are not kept");
        // The same pod made from the typed `Pod` is the same cached pod.
        let typed: Pod = serde_json::from_value(json!({
            "metadata": {"name": "a", "namespace": "ns", "labels": {"diengine/job": "j", "team": "rl"},
                "annotations": {"diengine/rank": "0", "diorch.io/template-hash": "h", "big": "x"}},
            "spec": {"nodeName": "n1", "containers": [
                {"name": "di-container", "image": "big",
                 "ports": [{"name": "metrics", "containerPort": 9000}, {"name": "di-port", "containerPort": 1234}]},
                {"name": "sidecar", "image": "s"}
            ]},
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}],
                "containerStatuses": [{"name": "di-container", "ready": true, "image": "big", "imageID": "sha", "restartCount": 0}]}
        }))
        .expect("pod");
        assert_eq!(CachedPod::from(typed), p);
        let spec = p.spec.as_ref().expect("spec");
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert_eq!(spec.containers.len(), 1);
        assert_eq!(
            spec.containers[0]
                .ports
                .as_ref()
                .map(|p| p.iter().map(|p| p.container_port).collect::<Vec<_>>()),
            Some(vec![1234])
        );
        assert_eq!(spec.containers[0].name, "di-container");
        let status = p.status.as_ref().expect("status");
        assert_eq!(status.pod_ip.as_deref(), Some("10.0.0.1"));
        let conditions = status.conditions.as_ref().expect("conditions");
        assert_eq!(conditions.len(), 1);
        // Shrunk to what they hold: the cache keeps the decoded pod itself.
        assert_eq!(conditions.capacity(), 1);
        assert_eq!(spec.containers.capacity(), 1);
        let ports = spec.containers[0].ports.as_ref().expect("ports");
        assert_eq!(ports.capacity(), 1);
        assert_eq!(
            (conditions[0].type_.as_str(), conditions[0].status.as_str()),
            ("Ready", "True")
        );
        let cs = &status.container_statuses.as_ref().expect("cs")[0];
        assert!(cs.ready && cs.name == "di-container");
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
            <CachedJob as kube_core::Resource>::api_version(&()),
            "diengine.opendilab.org/v2alpha1"
        );
    }

    #[test]
    fn a_status_write_answer_decodes_its_metadata_and_status_and_skips_the_spec() {
        let raw = json!({
            "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
            "metadata": {"name": "j", "namespace": "ns", "resourceVersion": "42",
                "managedFields": [{"manager": "diorch"}]},
            "spec": {"tasks": [{"type": "learner", "replicas": 3, "template": {"spec": {"containers": [{"name": "di-container", "image": "i"}]}}}]},
            "status": {"phase": "Running", "readyReplicas": 3, "conditions": [{"type": "Running", "status": "True"}]}
        });
        let written: WrittenStatus = serde_json::from_value(raw.clone()).expect("answer");
        let typed: DIJob = serde_json::from_value(raw).expect("typed");
        assert_eq!(written.status, typed.status);
        assert_eq!(written.metadata.resource_version.as_deref(), Some("42"));
        assert!(written.metadata.managed_fields.is_none());
        assert_eq!(
            <WrittenStatus as kube_core::Resource>::url_path(&(), Some("ns")),
            <CachedJob as kube_core::Resource>::url_path(&(), Some("ns")),
        );
        // A status that does not decode fails the answer, as it failed the cached job's.
        let bad = json!({"metadata": {"name": "j"}, "spec": {}, "status": {"phase": 7}});
        assert!(serde_json::from_value::<WrittenStatus>(bad).is_err());
    }

    #[test]
    fn a_cached_service_keeps_its_owner_and_deletion_only() {
        let full = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "di-j", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                "deletionTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"diengine/job": "j"}, "annotations": {"a": "b"},
                "managedFields": [{"manager": "diorch"}],
                "ownerReferences": [{"apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
                    "name": "j", "uid": "job-uid", "controller": true}]},
            "spec": {"clusterIP": "None", "selector": {"diengine/job": "j"},
                "ports": [{"name": "di-port", "port": 22270}]},
            "status": {"loadBalancer": {}}
        });
        let decoded: CachedService = serde_json::from_value(full.clone()).expect("service");
        let converted =
            CachedService::from(serde_json::from_value::<Service>(full).expect("service"));
        assert_eq!(decoded, converted);
        let m = &decoded.metadata;
        assert_eq!(m.name.as_deref(), Some("di-j"));
        assert_eq!(m.uid.as_deref(), Some("u"));
        assert!(m.deletion_timestamp.is_some());
        assert_eq!(
            m.owner,
            Some(JobOwner {
                name: "j".into(),
                uid: "job-uid".into()
            })
        );
        assert!(m.owned_by("job-uid") && !m.owned_by("other"));
        assert_eq!(m.key().as_deref(), Some("ns/di-j"));
        assert_eq!(
            <WatchedService as kube_core::Resource>::plural(&()),
            "services"
        );
    }

    #[test]
    fn cached_metadata_keeps_every_field_but_managed_fields_and_self_link() {
        let meta = json!({
            "annotations": {"a": "1"}, "creationTimestamp": "2026-01-01T00:00:00Z",
            "deletionGracePeriodSeconds": 30, "deletionTimestamp": "2026-01-02T00:00:00Z",
            "finalizers": ["f"], "generateName": "g-", "generation": 4, "labels": {"l": "2"},
            "managedFields": [{"manager": "kube-scheduler", "operation": "Update",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:conditions": {".": {}}}}}],
            "name": "n", "namespace": "ns",
            "ownerReferences": [{"apiVersion": "v1", "kind": "K", "name": "o", "uid": "ou"}],
            "resourceVersion": "9", "selfLink": "/api/v1/x", "uid": "u"
        });
        let mut full: ObjectMeta = serde_json::from_value(meta.clone()).expect("meta");
        assert!(full.managed_fields.is_some() && full.self_link.is_some());
        full.managed_fields = None;
        full.self_link = None;
        // Pods and services keep what their readers use of it.
        let kept = CachedMeta {
            name: Some("n".into()),
            namespace: Some("ns".into()),
            uid: Some("u".into()),
            deletion_timestamp: full.deletion_timestamp.clone(),
            owner: None,
        };
        assert_eq!(CachedMeta::from(full.clone()), kept);
        let pod: CachedPod =
            serde_json::from_value(json!({"metadata": meta.clone()})).expect("pod");
        assert_eq!(pod.metadata, kept);
        let svc: CachedService =
            serde_json::from_value(json!({"metadata": meta.clone()})).expect("service");
        assert_eq!(svc.metadata, kept);
        let job: CachedJob =
            serde_json::from_value(json!({"metadata": meta, "spec": {}})).expect("job");
        assert_eq!(job.metadata, full);
        // No metadata at all is the default, as before.
        let bare: CachedPod = serde_json::from_value(json!({})).expect("bare pod");
        assert_eq!(bare, CachedPod::default());
    }

    #[test]
    fn the_owner_kept_is_the_controlling_dijob_only() {
        let owner = |refs: serde_json::Value| {
            let meta: ObjectMeta =
                serde_json::from_value(json!({"name": "p", "ownerReferences": refs}))
                    .expect("meta");
            CachedMeta::from(meta).owner.map(|o| (o.name, o.uid))
        };
        let dijob = |api: &str, kind: &str, controller: serde_json::Value| json!({"apiVersion": api, "kind": kind, "name": "j", "uid": "ju", "controller": controller});
        let group = "diengine.opendilab.org/v2alpha1";
        assert_eq!(
            owner(json!([dijob(group, "DIJob", json!(true))])),
            Some(("j".into(), "ju".into()))
        );
        // Not the controller, not a DIJob, or a look-alike group: no owner.
        assert_eq!(owner(json!([dijob(group, "DIJob", json!(false))])), None);
        assert_eq!(owner(json!([dijob(group, "DIJob", json!(null))])), None);
        assert_eq!(
            owner(json!([dijob("apps/v1", "ReplicaSet", json!(true))])),
            None
        );
        assert_eq!(
            owner(json!([dijob(
                "diengine.opendilab.org.evil/v1",
                "DIJob",
                json!(true)
            )])),
            None
        );
        assert_eq!(owner(json!([dijob(group, "DIJobs", json!(true))])), None);
        // Among several references, the controlling DIJob's.
        assert_eq!(
            owner(json!([
                dijob("apps/v1", "ReplicaSet", json!(false)),
                dijob("diengine.opendilab.org/v1", "DIJob", json!(true))
            ])),
            Some(("j".into(), "ju".into()))
        );
        assert_eq!(owner(json!(null)), None);
    }
}
