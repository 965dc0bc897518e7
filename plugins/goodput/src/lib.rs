//! Goodput policy plugin: a thin wrapper over `diorch_policies::goodput` (bin-packing placement,
//! collectors sized from the job's profilings; the format is in docs/profilings.md).

use diorch_plugin_sdk::{
    Job, JobAllocation, Node, NodeView, PluginError, Policy, PolicyLogic, Preemption, Running,
};
use diorch_policies::goodput::Goodput;

pub struct GoodputPolicy;

impl Policy for GoodputPolicy {
    fn allocate(job: &Job, nodes: &[NodeView<'_>]) -> Result<Vec<u32>, PluginError> {
        Goodput.allocate(job, nodes)
    }

    fn explain_allocate(job: &Job, nodes: &[NodeView<'_>], answer: &[u32]) -> Option<String> {
        Goodput.explain_allocate(job, nodes, answer)
    }

    fn optimize(
        jobs: &[Job],
        nodes: &[NodeView<'_>],
        previous: &[JobAllocation],
    ) -> Result<Vec<JobAllocation>, PluginError> {
        Goodput.optimize(jobs, nodes, previous)
    }

    /// Contract 0.5.0: the built-in policy's victim choice (`diorch_policies::preempt`).
    fn preempt(
        job: &Job,
        candidates: &[Running],
        nodes: &[Node],
    ) -> Result<Option<Preemption>, PluginError> {
        Ok(Goodput.preempt(job, candidates, nodes))
    }
}

diorch_plugin_sdk::export_policy!(GoodputPolicy);

#[cfg(test)]
mod tests {
    use diorch_plugin_sdk::__private::{allocate, optimize};
    use diorch_plugin_sdk::view::encode;
    use diorch_plugin_sdk::{Job, Node, Resources, Task};

    fn node(name: &str, free_gpus: u32) -> Node {
        Node {
            name: name.into(),
            labels: vec![],
            taints: vec![],
            allocatable: Resources::new(32_000, 1 << 34, 8),
            free: Resources::new(32_000, 1 << 34, free_gpus),
            ready: true,
        }
    }

    fn task(name: &str, replicas: u32, max: u32, gpus: u32) -> Task {
        Task {
            name: name.into(),
            task_type: name.into(),
            replicas,
            min_replicas: 1,
            max_replicas: max,
            requests: Resources::new(1_000, 1 << 30, gpus),
        }
    }

    fn job(profilings: &str) -> Job {
        Job {
            key: "ns/j".into(),
            priority: 0,
            preemptible: true,
            tasks: vec![task("learner", 1, 1, 1), task("collector", 2, 8, 0)],
            current: vec![Some(1), Some(1), Some(1)],
            profilings: profilings.into(),
            age_seconds: 0,
        }
    }

    #[test]
    fn allocates_by_bin_packing_through_the_wit_types() {
        let nodes = vec![node("a", 8), node("b", 3)];
        let decision = allocate::<super::GoodputPolicy>(encode(&[job("")], &nodes)).unwrap();
        assert_eq!(decision.nodes, vec![1, 1, 1]);
        assert!(decision.reason.unwrap().starts_with("bin-pack, fullest"));
    }

    #[test]
    fn grows_collectors_through_the_wit_types() {
        let nodes = vec![node("a", 8), node("b", 3)];
        let rising = r#"{"data_is_ignored": 1, "collectors": {
            "1": {"throughput": 600.0}, "2": {"throughput": 1200.0}, "3": {"throughput": 1750.0}
        }}"#;
        let plan = optimize::<super::GoodputPolicy>(encode(&[job(rising)], &nodes), vec![]);
        // Still rising at 3: one probe past it, 4 collectors, appended after the current ones.
        assert_eq!(plan.unwrap()[0].nodes, vec![1, 1, 1, 1, 1]);
        let plan = optimize::<super::GoodputPolicy>(encode(&[job("{")], &nodes), vec![]);
        assert_eq!(plan.unwrap()[0].nodes, vec![1, 1, 1]);
    }
}
