//! Spreading (anti-affinity) policy plugin: a thin wrapper over `diorch_policies::spread`.

use diorch_plugin_sdk::{Job, JobAllocation, Node, PluginError, Policy, PolicyLogic};
use diorch_policies::spread::Spread;

pub struct SpreadPolicy;

impl Policy for SpreadPolicy {
    fn allocate(job: &Job, nodes: &[Node]) -> Result<Vec<u32>, PluginError> {
        Spread.allocate(job, nodes)
    }

    fn optimize(
        jobs: &[Job],
        nodes: &[Node],
        previous: &[JobAllocation],
    ) -> Result<Vec<JobAllocation>, PluginError> {
        Spread.optimize(jobs, nodes, previous)
    }
}

diorch_plugin_sdk::export_policy!(SpreadPolicy);

#[cfg(test)]
mod tests {
    use diorch_plugin_sdk::__private::{allocate, optimize};
    use diorch_plugin_sdk::wit;

    fn res(gpus: u32) -> wit::Resources {
        wit::Resources {
            cpu_millis: 16_000,
            memory_bytes: 1 << 36,
            gpus,
            extended: vec![],
        }
    }

    fn job(key: &str, replicas: u32) -> wit::Job {
        wit::Job {
            key: key.into(),
            priority: 0,
            preemptible: true,
            tasks: vec![wit::Task {
                name: "collector".into(),
                task_type: "collector".into(),
                replicas,
                min_replicas: 1,
                max_replicas: replicas,
                requests: wit::Resources {
                    cpu_millis: 1_000,
                    memory_bytes: 1 << 30,
                    gpus: 0,
                    extended: vec![],
                },
            }],
            current: vec![],
            profilings: String::new(),
            age_seconds: 0,
        }
    }

    fn nodes(n: usize) -> Vec<wit::Node> {
        (0..n)
            .map(|i| wit::Node {
                name: format!("n{i}"),
                labels: vec![],
                taints: vec![],
                allocatable: res(0),
                free: res(0),
                ready: true,
            })
            .collect()
    }

    #[test]
    fn spreads_through_the_wit_types() {
        let mut alloc = allocate::<super::SpreadPolicy>(job("ns/a", 3), nodes(3)).unwrap();
        alloc.sort();
        assert_eq!(alloc, vec![0, 1, 2]);
    }

    #[test]
    fn optimize_covers_every_job_that_fits() {
        let plan =
            optimize::<super::SpreadPolicy>(vec![job("ns/a", 2), job("ns/b", 2)], nodes(2), vec![])
                .unwrap();
        assert_eq!(plan.len(), 2);
        assert!(
            plan.iter()
                .all(|p| p.nodes.len() == 2 && p.nodes[0] != p.nodes[1])
        );
    }
}
