//! diorch scheduling policies as plain Rust, shared by the Wasm plugins (through the guest SDK),
//! the operator's built-in native fallback and the benchmark.
//!
//! Owns: the model types mirroring the WIT `types` interface, the GPU bin-packing and spreading
//! policies, and the goodput policy (bin-packing plus collector sizing from profilings). Must not
//! touch: anything Wasm or Kubernetes specific (no such deps).

pub mod binpack;
mod engine;
pub mod explain;
pub mod goodput;
pub mod model;
pub mod preempt;
pub mod spread;

pub use model::{
    Amounts, Job, JobAllocation, Node, NodeInfo, PolicyError, Resources, Taint, TaintEffect, Task,
};

/// A scheduling policy on the plain model: what the Wasm world `scheduling-policy` exports.
/// Nodes are anything [`NodeInfo`]: owned [`Node`]s natively, borrowed views of the WIT records
/// in a plugin.
pub trait Policy {
    /// One node index per replica, in rank order.
    fn allocate<N: NodeInfo>(&self, job: &Job, nodes: &[N]) -> Result<Vec<u32>, PolicyError>;

    /// A whole new plan for `jobs` (see the WIT doc of `optimize`); an entry may say why in
    /// its `reason`.
    fn optimize<N: NodeInfo>(
        &self,
        jobs: &[Job],
        nodes: &[N],
        previous: &[JobAllocation],
    ) -> Result<Vec<JobAllocation>, PolicyError>;

    /// Why `answer`, this policy's `allocate` answer for `job` on `nodes`, is what it is, for
    /// people (contract 0.4.0's `decision.reason`); `None` when there is nothing to say.
    fn explain_allocate<N: NodeInfo>(
        &self,
        job: &Job,
        nodes: &[N],
        answer: &[u32],
    ) -> Option<String> {
        let _ = (job, nodes, answer);
        None
    }

    /// The least preemption of `candidates` that lets `job` (which does not fit) start at once
    /// on `nodes`, as this policy places it (contract 0.5.0's `preempt`; indices into
    /// `candidates`); `None` for none. The default is [`preempt::preempt`] in
    /// [`preempt::Mode::Shrink`] (a candidate that may not shrink is only evicted): what the
    /// operator's built-in policies do. Nodes are owned here: the choice edits their free room.
    fn preempt(
        &self,
        job: &Job,
        candidates: &[preempt::Running],
        nodes: &[Node],
    ) -> Option<preempt::Preemption>
    where
        Self: Sized,
    {
        preempt::preempt(self, job, candidates, nodes, preempt::Mode::Shrink)
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    use crate::model::*;

    pub fn gpu_node(name: &str, gpus: u32) -> Node {
        gpu_node_used(name, gpus, 0)
    }

    pub fn gpu_node_used(name: &str, gpus: u32, used: u32) -> Node {
        let allocatable = Resources::new(32_000, 128 << 30, gpus);
        let mut free = allocatable.clone();
        free.gpus -= used;
        free.cpu_millis -= 2_000 * u64::from(used);
        Node {
            name: name.into(),
            labels: vec![],
            taints: vec![],
            allocatable,
            free,
            ready: true,
        }
    }

    pub fn cpu_node(name: &str) -> Node {
        gpu_node(name, 0)
    }

    pub fn taint(effect: TaintEffect) -> Taint {
        Taint {
            key: "k".into(),
            value: "v".into(),
            effect,
        }
    }

    /// Tasks as (name, replicas, GPUs per replica); each replica also asks 2 CPUs and 4 GiB.
    pub fn job(key: &str, tasks: &[(&str, u32, u32)]) -> Job {
        Job {
            key: key.into(),
            priority: 0,
            preemptible: true,
            tasks: tasks
                .iter()
                .map(|&(name, replicas, gpus)| Task {
                    name: name.into(),
                    task_type: name.into(),
                    replicas,
                    min_replicas: 1,
                    max_replicas: replicas,
                    requests: Resources::new(2_000, 4 << 30, gpus),
                })
                .collect(),
            current: vec![],
            profilings: String::new(),
            age_seconds: 0,
        }
    }

    /// The allocation is one node per replica and fits every node's free resources.
    pub fn assert_capacity(job: &Job, nodes: &[Node], alloc: &[u32]) {
        assert_eq!(alloc.len(), job.total_replicas());
        let mut free: Vec<_> = nodes.iter().map(|n| n.free.clone()).collect();
        for (&n, task) in alloc.iter().zip(job.replicas()) {
            assert!(
                free[n as usize].fits(&task.requests),
                "node {n} over capacity"
            );
            free[n as usize].take(&task.requests);
        }
    }
}
