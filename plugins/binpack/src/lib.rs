//! GPU bin-packing policy plugin: a thin wrapper over `diorch_policies::binpack`.

use diorch_plugin_sdk::{Job, JobAllocation, NodeView, PluginError, Policy, PolicyLogic};
use diorch_policies::binpack::BinPack;

pub struct GpuBinPack;

impl Policy for GpuBinPack {
    fn allocate(job: &Job, nodes: &[NodeView<'_>]) -> Result<Vec<u32>, PluginError> {
        BinPack.allocate(job, nodes)
    }

    fn explain_allocate(job: &Job, nodes: &[NodeView<'_>], answer: &[u32]) -> Option<String> {
        BinPack.explain_allocate(job, nodes, answer)
    }

    fn optimize(
        jobs: &[Job],
        nodes: &[NodeView<'_>],
        previous: &[JobAllocation],
    ) -> Result<Vec<JobAllocation>, PluginError> {
        BinPack.optimize(jobs, nodes, previous)
    }
}

diorch_plugin_sdk::export_policy!(GpuBinPack);

#[cfg(test)]
mod tests {
    use diorch_plugin_sdk::__private::allocate;
    use diorch_plugin_sdk::view::encode;
    use diorch_plugin_sdk::{Job, Node, Resources, Task, wit};

    fn node(name: &str, free_gpus: u32) -> Node {
        Node {
            name: name.into(),
            labels: vec![("zone".into(), "a".into())],
            taints: vec![],
            allocatable: Resources::new(32_000, 1 << 34, 8),
            free: Resources::new(32_000, 1 << 34, free_gpus),
            ready: true,
        }
    }

    #[test]
    fn packs_through_the_wit_types() {
        let job = Job {
            key: "ns/j".into(),
            priority: 0,
            preemptible: true,
            tasks: vec![Task {
                name: "learner".into(),
                task_type: "learner".into(),
                replicas: 3,
                min_replicas: 1,
                max_replicas: 3,
                requests: Resources::new(1_000, 1 << 30, 1),
            }],
            current: vec![],
            profilings: String::new(),
            age_seconds: 0,
        };
        let nodes = vec![node("a", 8), node("b", 3), node("c", 2)];
        // Fullest first: two on c, the third on b; the reason says so through the WIT.
        let decision =
            allocate::<super::GpuBinPack>(encode(std::slice::from_ref(&job), &nodes)).unwrap();
        assert_eq!(decision.nodes, vec![2, 2, 1]);
        assert_eq!(
            decision.reason.as_deref(),
            Some("bin-pack, fullest fitting node first: c×2 (2 free GPUs), b×1 (3 free GPUs)")
        );
        let full = vec![node("a", 1)];
        assert!(matches!(
            allocate::<super::GpuBinPack>(encode(std::slice::from_ref(&job), &full)),
            Err(wit::Error::NoFit(_))
        ));
        // allocate is for exactly one job.
        assert!(matches!(
            allocate::<super::GpuBinPack>(encode(&[job.clone(), job], &nodes)),
            Err(wit::Error::InvalidInput(_))
        ));
    }
}
