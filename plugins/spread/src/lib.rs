//! Spreading (anti-affinity) policy plugin: a thin wrapper over `diorch_policies::spread`.

use diorch_plugin_sdk::{
    Job, JobAllocation, Node, NodeView, PluginError, Policy, PolicyLogic, Preemption, Running,
};
use diorch_policies::spread::Spread;

pub struct SpreadPolicy;

impl Policy for SpreadPolicy {
    fn allocate(job: &Job, nodes: &[NodeView<'_>]) -> Result<Vec<u32>, PluginError> {
        Spread.allocate(job, nodes)
    }

    fn explain_allocate(job: &Job, nodes: &[NodeView<'_>], answer: &[u32]) -> Option<String> {
        Spread.explain_allocate(job, nodes, answer)
    }

    fn optimize(
        jobs: &[Job],
        nodes: &[NodeView<'_>],
        previous: &[JobAllocation],
    ) -> Result<Vec<JobAllocation>, PluginError> {
        Spread.optimize(jobs, nodes, previous)
    }

    /// Contract 0.5.0: the built-in policy's victim choice (`diorch_policies::preempt`).
    fn preempt(
        job: &Job,
        candidates: &[Running],
        nodes: &[Node],
    ) -> Result<Option<Preemption>, PluginError> {
        Ok(Spread.preempt(job, candidates, nodes))
    }
}

diorch_plugin_sdk::export_policy!(SpreadPolicy);

#[cfg(test)]
mod tests {
    use diorch_plugin_sdk::__private::{allocate, optimize};
    use diorch_plugin_sdk::view::encode;
    use diorch_plugin_sdk::{Job, Node, Resources, Task};

    fn job(key: &str, replicas: u32) -> Job {
        Job {
            key: key.into(),
            priority: 0,
            preemptible: true,
            tasks: vec![Task {
                name: "collector".into(),
                task_type: "collector".into(),
                replicas,
                min_replicas: 1,
                max_replicas: replicas,
                requests: Resources::new(1_000, 1 << 30, 0),
            }],
            current: vec![],
            profilings: String::new(),
            age_seconds: 0,
        }
    }

    /// `n` nodes, two per zone.
    fn nodes(n: usize) -> Vec<Node> {
        (0..n)
            .map(|i| Node {
                name: format!("n{i}"),
                labels: vec![("topology.kubernetes.io/zone".into(), format!("z{}", i / 2))],
                taints: vec![],
                allocatable: Resources::new(16_000, 1 << 36, 0),
                free: Resources::new(16_000, 1 << 36, 0),
                ready: true,
            })
            .collect()
    }

    #[test]
    fn spreads_through_the_wit_types() {
        let decision =
            allocate::<super::SpreadPolicy>(encode(&[job("ns/a", 3)], &nodes(3))).unwrap();
        assert!(
            decision
                .reason
                .as_deref()
                .is_some_and(|r| r.starts_with("spread: 3 nodes in ")),
            "{decision:?}"
        );
        let mut alloc = decision.nodes;
        alloc.sort();
        assert_eq!(alloc, vec![0, 1, 2]);
        // Zones read through the views: two replicas on four nodes in two zones.
        let alloc = allocate::<super::SpreadPolicy>(encode(&[job("ns/a", 2)], &nodes(4)))
            .unwrap()
            .nodes;
        assert_ne!(alloc[0] / 2, alloc[1] / 2, "{alloc:?}");
    }

    #[test]
    fn optimize_covers_every_job_that_fits() {
        let plan = optimize::<super::SpreadPolicy>(
            encode(&[job("ns/a", 2), job("ns/b", 2)], &nodes(2)),
            vec![],
        )
        .unwrap();
        assert_eq!(plan.len(), 2);
        assert!(
            plan.iter()
                .all(|p| p.nodes.len() == 2 && p.nodes[0] != p.nodes[1])
        );
    }
}
