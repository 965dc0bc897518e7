//! The plain model of what a policy call sees: the WIT `types` interface carries the same fields,
//! laid out as columns (see wit/plugins.wit).
//!
//! With the `serde` feature the types (de)serialize in camelCase, as Kubernetes objects do, with
//! labels and extended resources as JSON objects (`{"rdma/hca": 1}`) rather than pair lists, and
//! unknown fields refused so a typo in a hand-written snapshot is an error, not a silent default.

/// An amount of each resource; extended resources as name/quantity pairs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "serde",
    serde(rename_all = "camelCase", deny_unknown_fields)
)]
pub struct Resources {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub gpus: u32,
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Vec::is_empty", with = "pairs")
    )]
    pub extended: Vec<(String, u64)>,
}

impl Resources {
    pub fn new(cpu_millis: u64, memory_bytes: u64, gpus: u32) -> Self {
        Resources {
            cpu_millis,
            memory_bytes,
            gpus,
            extended: Vec::new(),
        }
    }

    fn extended_amount(&self, name: &str) -> u64 {
        self.extended
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, q)| *q)
    }

    /// True when `request` fits in `self`.
    pub fn fits(&self, request: &Resources) -> bool {
        self.cpu_millis >= request.cpu_millis
            && self.memory_bytes >= request.memory_bytes
            && self.gpus >= request.gpus
            && request
                .extended
                .iter()
                .all(|(name, q)| self.extended_amount(name) >= *q)
    }

    /// Subtracts `request` (saturating; callers check `fits` first).
    pub fn take(&mut self, request: &Resources) {
        self.cpu_millis = self.cpu_millis.saturating_sub(request.cpu_millis);
        self.memory_bytes = self.memory_bytes.saturating_sub(request.memory_bytes);
        self.gpus = self.gpus.saturating_sub(request.gpus);
        for (name, q) in &request.extended {
            if let Some(slot) = self.extended.iter_mut().find(|(n, _)| n == name) {
                slot.1 = slot.1.saturating_sub(*q);
            }
        }
    }
}

/// Read access to an amount of resources, whatever holds it: an owned [`Resources`], or a
/// plugin's view of the WIT records, which reads them where they were lowered instead of copying
/// them into owned strings and lists first (that copy used to cost more than the policy itself).
pub trait Amounts {
    fn cpu_millis(&self) -> u64;
    fn memory_bytes(&self) -> u64;
    fn gpus(&self) -> u32;
    /// The quantity of extended resource `name`; 0 when absent.
    fn extended(&self, name: &str) -> u64;
    /// An owned copy, extended resources in their order.
    fn to_resources(&self) -> Resources;

    /// True when `request` fits in `self`.
    fn fits(&self, request: &Resources) -> bool {
        self.cpu_millis() >= request.cpu_millis
            && self.memory_bytes() >= request.memory_bytes
            && self.gpus() >= request.gpus
            && request
                .extended
                .iter()
                .all(|(name, q)| self.extended(name) >= *q)
    }
}

impl Amounts for Resources {
    fn cpu_millis(&self) -> u64 {
        self.cpu_millis
    }
    fn memory_bytes(&self) -> u64 {
        self.memory_bytes
    }
    fn gpus(&self) -> u32 {
        self.gpus
    }
    fn extended(&self, name: &str) -> u64 {
        self.extended_amount(name)
    }
    fn to_resources(&self) -> Resources {
        self.clone()
    }
}

impl<T: Amounts + ?Sized> Amounts for &T {
    fn cpu_millis(&self) -> u64 {
        (**self).cpu_millis()
    }
    fn memory_bytes(&self) -> u64 {
        (**self).memory_bytes()
    }
    fn gpus(&self) -> u32 {
        (**self).gpus()
    }
    fn extended(&self, name: &str) -> u64 {
        (**self).extended(name)
    }
    fn to_resources(&self) -> Resources {
        (**self).to_resources()
    }
}

/// Read access to a node, whatever holds it: the owned [`Node`] (the operator's built-in
/// policies) or a plugin's borrowed view of the WIT records (`diorch_plugin_sdk::NodeView`).
/// The policies are written against this trait, so both run the very same code.
pub trait NodeInfo {
    /// How this node's resource amounts are read.
    type Amounts<'a>: Amounts
    where
        Self: 'a;

    fn name(&self) -> &str;
    fn ready(&self) -> bool;
    /// True when the node has a taint with this effect.
    fn has_taint(&self, effect: TaintEffect) -> bool;
    fn label(&self, key: &str) -> Option<&str>;
    fn allocatable(&self) -> Self::Amounts<'_>;
    /// Allocatable minus what pods outside the job(s) being placed request.
    fn free(&self) -> Self::Amounts<'_>;

    /// Ready and without a NoSchedule/NoExecute taint (tasks carry no tolerations in the model,
    /// so such taints exclude the node).
    fn schedulable(&self) -> bool {
        self.ready()
            && !self.has_taint(TaintEffect::NoSchedule)
            && !self.has_taint(TaintEffect::NoExecute)
    }

    fn prefers_no_schedule(&self) -> bool {
        self.has_taint(TaintEffect::PreferNoSchedule)
    }
}

impl NodeInfo for Node {
    type Amounts<'a> = &'a Resources;

    fn name(&self) -> &str {
        &self.name
    }
    fn ready(&self) -> bool {
        self.ready
    }
    fn has_taint(&self, effect: TaintEffect) -> bool {
        self.taints.iter().any(|t| t.effect == effect)
    }
    fn label(&self, key: &str) -> Option<&str> {
        Node::label(self, key)
    }
    fn allocatable(&self) -> &Resources {
        &self.allocatable
    }
    fn free(&self) -> &Resources {
        &self.free
    }
}

/// Serialized with the Kubernetes spelling (`NoSchedule`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "serde",
    serde(rename_all = "camelCase", deny_unknown_fields)
)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: TaintEffect,
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "serde",
    serde(rename_all = "camelCase", deny_unknown_fields)
)]
pub struct Node {
    pub name: String,
    #[cfg_attr(feature = "serde", serde(default, with = "pairs"))]
    pub labels: Vec<(String, String)>,
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Vec::is_empty")
    )]
    pub taints: Vec<Taint>,
    pub allocatable: Resources,
    /// Allocatable minus what pods outside the job(s) being placed request.
    pub free: Resources,
    pub ready: bool,
}

impl Node {
    /// See [`NodeInfo::schedulable`].
    pub fn schedulable(&self) -> bool {
        NodeInfo::schedulable(self)
    }

    pub fn prefers_no_schedule(&self) -> bool {
        NodeInfo::prefers_no_schedule(self)
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "serde",
    serde(rename_all = "camelCase", deny_unknown_fields)
)]
pub struct Task {
    pub name: String,
    pub task_type: String,
    pub replicas: u32,
    pub min_replicas: u32,
    pub max_replicas: u32,
    /// Per-replica requests.
    pub requests: Resources,
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "serde",
    serde(rename_all = "camelCase", deny_unknown_fields)
)]
pub struct Job {
    /// `namespace/name`.
    pub key: String,
    #[cfg_attr(feature = "serde", serde(default))]
    pub priority: i32,
    pub preemptible: bool,
    pub tasks: Vec<Task>,
    /// Node index per replica in rank order; `None` when unplaced or on a vanished node.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Vec::is_empty")
    )]
    pub current: Vec<Option<u32>>,
    /// DI-engine profilings as JSON text.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "String::is_empty")
    )]
    pub profilings: String,
    #[cfg_attr(feature = "serde", serde(default))]
    pub age_seconds: u64,
}

impl Job {
    /// Sum of the tasks' replicas: the length of a valid allocation.
    pub fn total_replicas(&self) -> usize {
        self.tasks.iter().map(|t| t.replicas as usize).sum()
    }

    /// The task replica counts an `optimize` entry of `len` nodes stands for. The WIT's
    /// allocations carry no counts, so a resize is expressible for one shape only: a job with
    /// exactly one `collector` task, whose count absorbs the difference while every other task
    /// keeps its own (the collector block stays in its spec-order place). `None` when `len`
    /// cannot describe this job that way.
    pub fn resized_counts(&self, len: usize) -> Option<Vec<u32>> {
        let mut collectors = self.tasks.iter().filter(|t| t.task_type == "collector");
        collectors.next()?;
        if collectors.next().is_some() {
            return None;
        }
        let others: usize = self
            .tasks
            .iter()
            .filter(|t| t.task_type != "collector")
            .map(|t| t.replicas as usize)
            .sum();
        let collector = u32::try_from(len.checked_sub(others)?).ok()?;
        Some(
            self.tasks
                .iter()
                .map(|t| {
                    if t.task_type == "collector" {
                        collector
                    } else {
                        t.replicas
                    }
                })
                .collect(),
        )
    }

    /// Each replica's task, in global-rank order (tasks in spec order, then local rank).
    pub fn replicas(&self) -> impl Iterator<Item = &Task> {
        self.tasks
            .iter()
            .flat_map(|t| std::iter::repeat_n(t, t.replicas as usize))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "serde",
    serde(rename_all = "camelCase", deny_unknown_fields)
)]
pub struct JobAllocation {
    /// Index into the `jobs` of the same call.
    pub job: u32,
    /// One node index per replica.
    pub nodes: Vec<u32>,
    /// Why, for people (contract 0.4.0's `job-decision.reason`): set on a policy's answers,
    /// never read from `previous`.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("does not fit: {0}")]
    NoFit(String),
    #[error("invalid input: {0}")]
    InvalidInput(String),
    #[error("{0}")]
    Internal(String),
}

/// `Vec<(String, T)>` as a JSON object, keeping the order of the document: labels and extended
/// resources then read as they do in Kubernetes objects. A repeated key is an error (the model
/// would otherwise keep both and `Node::label` would see only the first).
#[cfg(feature = "serde")]
mod pairs {
    use std::fmt;
    use std::marker::PhantomData;

    use serde::de::{Error as _, MapAccess, Visitor};
    use serde::ser::SerializeMap as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer, T: Serialize>(
        pairs: &[(String, T)],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(pairs.len()))?;
        for (k, v) in pairs {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        deserializer: D,
    ) -> Result<Vec<(String, T)>, D::Error> {
        struct Pairs<T>(PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for Pairs<T> {
            type Value = Vec<(String, T)>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out: Vec<(String, T)> = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some((k, v)) = map.next_entry::<String, T>()? {
                    if out.iter().any(|(n, _)| *n == k) {
                        return Err(A::Error::custom(format!("duplicate key {k:?}")));
                    }
                    out.push((k, v));
                }
                Ok(out)
            }
        }

        deserializer.deserialize_map(Pairs(PhantomData))
    }
}
