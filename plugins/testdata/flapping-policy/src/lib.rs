//! Test-only policy that flaps: `allocate` bin-packs, and every `optimize` moves each placed
//! replica to the next node (by index) that fits, so each re-plan differs from the last. The
//! operator's per-job reschedule rate limit must keep such a policy from thrashing jobs.

use diorch_plugin_sdk::{
    Amounts, Job, JobAllocation, NodeInfo, NodeView, PluginError, Policy, PolicyLogic,
};
use diorch_policies::binpack::BinPack;

pub struct Flapping;

/// `job` moved one node along (wrapping), replica by replica, onto nodes with room in `free`.
fn shifted<N: NodeInfo>(
    job: &Job,
    nodes: &[N],
    free: &mut [diorch_policies::Resources],
) -> Option<Vec<u32>> {
    let mut out = Vec::with_capacity(job.current.len());
    for (task, at) in job.replicas().zip(&job.current) {
        let start = at.map_or(0, |i| i as usize + 1);
        let i = (0..nodes.len())
            .map(|k| (start + k) % nodes.len())
            .find(|&i| nodes[i].schedulable() && free[i].fits(&task.requests))?;
        free[i].take(&task.requests);
        out.push(u32::try_from(i).ok()?);
    }
    Some(out)
}

impl Policy for Flapping {
    fn allocate(job: &Job, nodes: &[NodeView<'_>]) -> Result<Vec<u32>, PluginError> {
        BinPack.allocate(job, nodes)
    }

    fn optimize(
        jobs: &[Job],
        nodes: &[NodeView<'_>],
        _previous: &[JobAllocation],
    ) -> Result<Vec<JobAllocation>, PluginError> {
        let mut free: Vec<_> = nodes.iter().map(|n| n.free().to_resources()).collect();
        Ok(jobs
            .iter()
            .enumerate()
            .filter_map(|(j, job)| {
                let nodes = shifted(job, nodes, &mut free)?;
                Some(JobAllocation {
                    job: u32::try_from(j).ok()?,
                    nodes,
                    reason: None,
                })
            })
            .collect())
    }
}

diorch_plugin_sdk::export_policy!(Flapping);

#[cfg(test)]
mod tests {
    use super::*;
    use diorch_plugin_sdk::view::encode;
    use diorch_policies::{Node, Resources, Task};

    fn node(name: &str) -> Node {
        let r = Resources::new(8_000, 8 << 30, 8);
        Node {
            name: name.into(),
            labels: vec![],
            taints: vec![],
            allocatable: r.clone(),
            free: r,
            ready: true,
        }
    }

    #[test]
    fn every_optimize_moves_each_replica_one_node_along() {
        let nodes = [node("a"), node("b"), node("c")];
        let job = Job {
            key: "ns/j".into(),
            priority: 0,
            preemptible: true,
            tasks: vec![Task {
                name: "learner".into(),
                task_type: "learner".into(),
                replicas: 2,
                min_replicas: 2,
                max_replicas: 2,
                requests: Resources::new(1_000, 1 << 30, 1),
            }],
            current: vec![Some(0), Some(2)],
            profilings: String::new(),
            age_seconds: 1,
        };
        let cluster = encode(&[job], &nodes);
        let jobs = [diorch_plugin_sdk::view::job(&cluster, 0)];
        let plan = Flapping::optimize(&jobs, &NodeView::all(&cluster), &[]).expect("plan");
        assert_eq!(plan[0].nodes, vec![1, 0]);
    }
}
