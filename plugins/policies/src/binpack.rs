//! GPU bin-packing: fill the fullest node that still fits, keep GPU nodes for GPU work, so that
//! whole GPU nodes stay free for large jobs.

use crate::engine::{Chooser, Placing, Score};
use crate::model::{Amounts, Job, NodeInfo, Task};

/// Best fit on GPUs, then CPU, then memory; CPU-only replicas avoid GPU nodes when they can;
/// PreferNoSchedule nodes only when nothing else fits.
#[derive(Debug, Default, Clone, Copy)]
pub struct BinPack;

impl Chooser for BinPack {
    const LABEL: &'static str = "bin-pack";

    fn explain<N: NodeInfo>(&self, job: &Job, nodes: &[N], answer: &[u32]) -> Option<String> {
        crate::explain::binpack(job, nodes, answer)
    }

    fn score<N: NodeInfo>(
        &self,
        ctx: &Placing<'_, N>,
        node: usize,
        left: &impl Amounts,
        task: &Task,
    ) -> Option<Score> {
        let n = &ctx.nodes[node];
        let wastes_gpu_node = task.requests.gpus == 0 && n.allocatable().gpus() > 0;
        Some([
            u64::from(n.prefers_no_schedule()),
            u64::from(wastes_gpu_node),
            u64::from(left.gpus() - task.requests.gpus),
            (left.cpu_millis() - task.requests.cpu_millis)
                .saturating_mul(1 << 20)
                .saturating_add((left.memory_bytes() - task.requests.memory_bytes) >> 20),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Policy;
    use crate::model::{JobAllocation, PolicyError};
    use crate::testutil::*;

    #[test]
    fn packs_gpu_replicas_onto_the_fullest_node() {
        // node-1 has 2 GPUs left, node-0 and node-2 have 8: two 1-GPU replicas go to node-1.
        let nodes = vec![
            gpu_node("node-0", 8),
            gpu_node_used("node-1", 8, 6),
            gpu_node("node-2", 8),
        ];
        let job = job("ns/a", &[("learner", 2, 1)]);
        assert_eq!(BinPack.allocate(&job, &nodes), Ok(vec![1, 1]));
    }

    #[test]
    fn replicas_already_placed_stay_and_only_new_ones_are_packed() {
        // A scaled job: replica 0 runs on node-0 (bin-pack would prefer the fuller node-1);
        // replica 1 is new.
        let nodes = vec![
            gpu_node("node-0", 8),
            gpu_node_used("node-1", 8, 6),
            gpu_node("node-2", 8),
        ];
        let mut scaled = job("ns/a", &[("learner", 2, 1)]);
        scaled.current = vec![Some(0), None];
        assert_eq!(BinPack.allocate(&scaled, &nodes), Ok(vec![0, 1]));
        // A current node that is gone or full no longer holds the replica.
        scaled.current = vec![Some(9), None];
        assert_eq!(BinPack.allocate(&scaled, &nodes), Ok(vec![1, 1]));
    }

    #[test]
    fn respects_capacity_and_spills_over() {
        let nodes = vec![gpu_node("node-0", 2), gpu_node("node-1", 2)];
        let job = job("ns/a", &[("learner", 3, 1)]);
        let alloc = BinPack.allocate(&job, &nodes).unwrap();
        assert_eq!(alloc.len(), 3);
        assert_capacity(&job, &nodes, &alloc);
        assert_eq!(alloc, vec![0, 0, 1]);
    }

    #[test]
    fn cpu_replicas_avoid_gpu_nodes() {
        let nodes = vec![gpu_node("gpu", 8), cpu_node("cpu")];
        let job = job("ns/a", &[("collector", 2, 0), ("learner", 1, 1)]);
        assert_eq!(BinPack.allocate(&job, &nodes), Ok(vec![1, 1, 0]));
    }

    #[test]
    fn skips_not_ready_and_tainted_nodes() {
        let mut down = gpu_node_used("down", 8, 7);
        down.ready = false;
        let mut tainted = gpu_node_used("tainted", 8, 7);
        tainted.taints.push(taint(crate::TaintEffect::NoSchedule));
        let nodes = vec![down, tainted, gpu_node("ok", 8)];
        let job = job("ns/a", &[("learner", 1, 1)]);
        assert_eq!(BinPack.allocate(&job, &nodes), Ok(vec![2]));
    }

    #[test]
    fn prefer_no_schedule_is_a_last_resort() {
        let mut soft = gpu_node_used("soft", 8, 7);
        soft.taints
            .push(taint(crate::TaintEffect::PreferNoSchedule));
        let nodes = vec![soft, gpu_node("ok", 8)];
        let job = job("ns/a", &[("learner", 1, 1)]);
        assert_eq!(BinPack.allocate(&job, &nodes), Ok(vec![1]));
        let big = super::super::testutil::job("ns/b", &[("learner", 9, 1)]);
        assert_eq!(
            BinPack
                .allocate(&big, &nodes)
                .unwrap()
                .iter()
                .filter(|&&n| n == 0)
                .count(),
            1
        );
    }

    #[test]
    fn no_fit_is_an_error_naming_the_task() {
        let nodes = vec![gpu_node("node-0", 2)];
        let job = job("ns/a", &[("learner", 3, 1)]);
        let err = BinPack.allocate(&job, &nodes).unwrap_err();
        assert!(
            matches!(&err, PolicyError::NoFit(m) if m.contains("learner") && m.contains("ns/a")),
            "{err}"
        );
        let empty = super::super::testutil::job("ns/b", &[]);
        assert!(matches!(
            BinPack.allocate(&empty, &nodes),
            Err(PolicyError::InvalidInput(_))
        ));
    }

    #[test]
    fn deterministic_on_identical_nodes() {
        let nodes: Vec<_> = (0..20).map(|i| gpu_node(&format!("n{i}"), 8)).collect();
        let job = job("ns/a", &[("learner", 5, 3), ("collector", 7, 0)]);
        let first = BinPack.allocate(&job, &nodes).unwrap();
        for _ in 0..5 {
            assert_eq!(BinPack.allocate(&job, &nodes).unwrap(), first);
        }
        assert_capacity(&job, &nodes, &first);
    }

    #[test]
    fn optimize_places_high_priority_first_and_keeps_valid_placements() {
        let nodes = vec![gpu_node("node-0", 4), gpu_node("node-1", 4)];
        let mut low = job("ns/low", &[("learner", 4, 1)]);
        low.current = vec![Some(1); 4];
        let mut high = job("ns/high", &[("learner", 8, 1)]);
        high.priority = 10;
        // high takes everything; low no longer fits and is left out of the plan.
        let plan = BinPack
            .optimize(&[low.clone(), high.clone()], &nodes, &[])
            .unwrap();
        assert_eq!(plan.len(), 1);
        assert_eq!(plan[0].job, 1);
        // With room for both, low keeps its current node.
        let small = job("ns/high", &[("learner", 2, 1)]);
        let plan = BinPack.optimize(&[low, small], &nodes, &[]).unwrap();
        assert_eq!(
            plan[0],
            JobAllocation {
                job: 0,
                nodes: vec![1; 4],
                reason: None,
            }
        );
        assert_eq!(plan[1].nodes, vec![0, 0]);
    }
}
