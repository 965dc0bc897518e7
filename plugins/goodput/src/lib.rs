//! Goodput policy plugin: a thin wrapper over `diorch_policies::goodput` (bin-packing placement,
//! collectors sized from the job's profilings; the format is in docs/profilings.md).

use diorch_plugin_sdk::{Job, JobAllocation, Node, PluginError, Policy, PolicyLogic};
use diorch_policies::goodput::Goodput;

pub struct GoodputPolicy;

impl Policy for GoodputPolicy {
    fn allocate(job: &Job, nodes: &[Node]) -> Result<Vec<u32>, PluginError> {
        Goodput.allocate(job, nodes)
    }

    fn optimize(
        jobs: &[Job],
        nodes: &[Node],
        previous: &[JobAllocation],
    ) -> Result<Vec<JobAllocation>, PluginError> {
        Goodput.optimize(jobs, nodes, previous)
    }
}

diorch_plugin_sdk::export_policy!(GoodputPolicy);

#[cfg(test)]
mod tests {
    use diorch_plugin_sdk::__private::{allocate, optimize};
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

    fn task(name: &str, replicas: u32, max: u32, gpus: u32) -> wit::Task {
        wit::Task {
            name: name.into(),
            task_type: name.into(),
            replicas,
            min_replicas: 1,
            max_replicas: max,
            requests: wit::Resources {
                cpu_millis: 1_000,
                memory_bytes: 1 << 30,
                gpus,
                extended: vec![],
            },
        }
    }

    fn job(profilings: &str) -> wit::Job {
        wit::Job {
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
        assert_eq!(
            allocate::<super::GoodputPolicy>(job(""), nodes).unwrap(),
            vec![1, 1, 1]
        );
    }

    #[test]
    fn grows_collectors_through_the_wit_types() {
        let nodes = vec![node("a", 8), node("b", 3)];
        let rising = r#"{"data_is_ignored": 1, "collectors": {
            "1": {"throughput": 600.0}, "2": {"throughput": 1200.0}, "3": {"throughput": 1750.0}
        }}"#;
        let plan = optimize::<super::GoodputPolicy>(vec![job(rising)], nodes.clone(), vec![]);
        // Still rising at 3: one probe past it, 4 collectors, appended after the current ones.
        assert_eq!(plan.unwrap()[0].nodes, vec![1, 1, 1, 1, 1]);
        let plan = optimize::<super::GoodputPolicy>(vec![job("{")], nodes, vec![]);
        assert_eq!(plan.unwrap()[0].nodes, vec![1, 1, 1]);
    }
}
