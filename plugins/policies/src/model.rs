//! The plain model, field for field the WIT `types` interface (see wit/plugins.wit).

/// An amount of each resource; extended resources as name/quantity pairs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub gpus: u32,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: TaintEffect,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub labels: Vec<(String, String)>,
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
pub struct Job {
    /// `namespace/name`.
    pub key: String,
    pub priority: i32,
    pub preemptible: bool,
    pub tasks: Vec<Task>,
    /// Node index per replica in rank order; `None` when unplaced or on a vanished node.
    pub current: Vec<Option<u32>>,
    /// DI-engine profilings as JSON text.
    pub profilings: String,
    pub age_seconds: u64,
}

impl Job {
    /// Sum of the tasks' replicas: the length of a valid allocation.
    pub fn total_replicas(&self) -> usize {
        self.tasks.iter().map(|t| t.replicas as usize).sum()
    }

    /// Each replica's task, in global-rank order (tasks in spec order, then local rank).
    pub fn replicas(&self) -> impl Iterator<Item = &Task> {
        self.tasks
            .iter()
            .flat_map(|t| std::iter::repeat_n(t, t.replicas as usize))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
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
