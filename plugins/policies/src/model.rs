//! The plain model, field for field the WIT `types` interface (see wit/plugins.wit).
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
    /// Ready and without a NoSchedule/NoExecute taint (tasks carry no tolerations in the model,
    /// so such taints exclude the node).
    pub fn schedulable(&self) -> bool {
        self.ready
            && !self
                .taints
                .iter()
                .any(|t| matches!(t.effect, TaintEffect::NoSchedule | TaintEffect::NoExecute))
    }

    pub fn prefers_no_schedule(&self) -> bool {
        self.taints
            .iter()
            .any(|t| t.effect == TaintEffect::PreferNoSchedule)
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
