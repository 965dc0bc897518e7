//! GPU bin-packing policy plugin: a thin wrapper over `diorch_policies::binpack`.

use diorch_plugin_sdk::{Job, JobAllocation, Node, PluginError, Policy, PolicyLogic};
use diorch_policies::binpack::BinPack;

pub struct GpuBinPack;

impl Policy for GpuBinPack {
    fn allocate(job: &Job, nodes: &[Node]) -> Result<Vec<u32>, PluginError> {
        BinPack.allocate(job, nodes)
    }

    fn optimize(
        jobs: &[Job],
        nodes: &[Node],
        previous: &[JobAllocation],
    ) -> Result<Vec<JobAllocation>, PluginError> {
        BinPack.optimize(jobs, nodes, previous)
    }
}

diorch_plugin_sdk::export_policy!(GpuBinPack);

#[cfg(test)]
mod tests {
    use diorch_plugin_sdk::__private::allocate;
    use diorch_plugin_sdk::wit;

    fn res(cpu: u64, gpus: u32) -> wit::Resources {
        wit::Resources {
            cpu_millis: cpu,
            memory_bytes: 1 << 34,
            gpus,
            extended: vec![],
        }
    }

    fn node(name: &str, free_gpus: u32) -> wit::Node {
        wit::Node {
            name: name.into(),
            labels: vec![],
            taints: vec![],
            allocatable: res(32_000, 8),
            free: res(32_000, free_gpus),
            ready: true,
        }
    }

    #[test]
    fn packs_through_the_wit_types() {
        let job = wit::Job {
            key: "ns/j".into(),
            priority: 0,
            preemptible: true,
            tasks: vec![wit::Task {
                name: "learner".into(),
                task_type: "learner".into(),
                replicas: 3,
                min_replicas: 1,
                max_replicas: 3,
                requests: wit::Resources {
                    cpu_millis: 1_000,
                    memory_bytes: 1 << 30,
                    gpus: 1,
                    extended: vec![],
                },
            }],
            current: vec![],
            profilings: String::new(),
            age_seconds: 0,
        };
        let nodes = vec![node("a", 8), node("b", 3), node("c", 2)];
        // Fullest first: two on c, the third on b.
        assert_eq!(
            allocate::<super::GpuBinPack>(job.clone(), nodes.clone()).unwrap(),
            vec![2, 2, 1]
        );
        let full = vec![node("a", 1)];
        assert!(matches!(
            allocate::<super::GpuBinPack>(job, full),
            Err(wit::Error::NoFit(_))
        ));
    }
}
