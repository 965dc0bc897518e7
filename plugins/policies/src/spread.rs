//! Spreading (anti-affinity): a job's replicas go to different zones, then different nodes,
//! then the least-allocated node, so one node or zone failure takes out as few as possible.

use crate::engine::{Chooser, Placing, Score};
use crate::model::{Amounts, Job, NodeInfo, Task};

/// The node label whose values count as failure domains.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

#[derive(Debug, Default, Clone, Copy)]
pub struct Spread;

impl Chooser for Spread {
    const LABEL: &'static str = "spread";

    fn explain<N: NodeInfo>(&self, job: &Job, nodes: &[N], answer: &[u32]) -> Option<String> {
        crate::explain::spread(job, nodes, answer)
    }

    fn score<N: NodeInfo>(
        &self,
        ctx: &Placing<'_, N>,
        node: usize,
        left: &impl Amounts,
        task: &Task,
    ) -> Option<Score> {
        let n = &ctx.nodes[node];
        let same_node = ctx.placed.iter().filter(|&&p| p as usize == node).count() as u64;
        let same_zone = match n.label(ZONE_LABEL) {
            Some(zone) => ctx
                .placed
                .iter()
                .filter(|&&p| ctx.nodes[p as usize].label(ZONE_LABEL) == Some(zone))
                .count() as u64,
            None => same_node,
        };
        // Least allocated: most CPU left after placement, as a fraction of allocatable (‰).
        let cpu_left = left.cpu_millis() - task.requests.cpu_millis;
        let used_permille =
            1000 - (cpu_left.saturating_mul(1000) / n.allocatable().cpu_millis().max(1)).min(1000);
        Some([
            u64::from(n.prefers_no_schedule()),
            same_zone,
            same_node,
            used_permille,
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Policy;
    use crate::model::PolicyError;
    use crate::testutil::*;

    #[test]
    fn one_replica_per_node_while_nodes_last() {
        let nodes: Vec<_> = (0..4).map(|i| gpu_node(&format!("n{i}"), 8)).collect();
        let job = job("ns/a", &[("learner", 4, 1)]);
        let mut alloc = Spread.allocate(&job, &nodes).unwrap();
        alloc.sort();
        assert_eq!(alloc, vec![0, 1, 2, 3]);
        // More replicas than nodes: evenly two each.
        let job = super::super::testutil::job("ns/b", &[("learner", 8, 1)]);
        let alloc = Spread.allocate(&job, &nodes).unwrap();
        for n in 0..4 {
            assert_eq!(alloc.iter().filter(|&&a| a == n).count(), 2);
        }
        assert_capacity(&job, &nodes, &alloc);
    }

    #[test]
    fn spreads_across_zones_first() {
        let mut nodes: Vec<_> = (0..4).map(|i| gpu_node(&format!("n{i}"), 8)).collect();
        for (i, n) in nodes.iter_mut().enumerate() {
            n.labels.push((
                ZONE_LABEL.into(),
                if i < 3 { "a".into() } else { "b".into() },
            ));
        }
        let job = job("ns/a", &[("learner", 2, 1)]);
        let alloc = Spread.allocate(&job, &nodes).unwrap();
        assert!(alloc.contains(&3), "{alloc:?}");
    }

    #[test]
    fn skips_not_ready_and_tainted_nodes() {
        let mut down = gpu_node("down", 8);
        down.ready = false;
        let mut tainted = gpu_node("tainted", 8);
        tainted.taints.push(taint(crate::TaintEffect::NoExecute));
        let nodes = vec![down, tainted, gpu_node("ok", 8)];
        let job = job("ns/a", &[("learner", 3, 1)]);
        assert_eq!(Spread.allocate(&job, &nodes), Ok(vec![2, 2, 2]));
    }

    #[test]
    fn no_fit_is_an_error() {
        let nodes = vec![gpu_node("n", 1)];
        let job = job("ns/a", &[("learner", 2, 1)]);
        assert!(matches!(
            Spread.allocate(&job, &nodes),
            Err(PolicyError::NoFit(_))
        ));
    }

    #[test]
    fn deterministic() {
        let nodes: Vec<_> = (0..50)
            .map(|i| gpu_node_used(&format!("n{i}"), 8, (i % 5) as u32))
            .collect();
        let job = job("ns/a", &[("learner", 30, 1), ("collector", 10, 0)]);
        let first = Spread.allocate(&job, &nodes).unwrap();
        assert_eq!(Spread.allocate(&job, &nodes).unwrap(), first);
        assert_capacity(&job, &nodes, &first);
    }
}
