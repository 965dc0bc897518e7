//! GPU bin-packing policy plugin: a thin wrapper over `diorch_policies::binpack`.

use diorch_plugin_sdk::{
    Job, JobAllocation, Node, NodeView, PluginError, Policy, PolicyLogic, Preemption, Running,
};
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

    /// Contract 0.5.0: the built-in policy's victim choice (`diorch_policies::preempt`).
    fn preempt(
        job: &Job,
        candidates: &[Running],
        nodes: &[Node],
    ) -> Result<Option<Preemption>, PluginError> {
        Ok(BinPack.preempt(job, candidates, nodes))
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

    #[test]
    fn preempts_through_the_wit_types_as_the_builtin_choice() {
        use diorch_plugin_sdk::__private::preempt;
        use diorch_plugin_sdk::view::encode_candidates;
        use diorch_plugin_sdk::{PolicyLogic, Running};
        use diorch_policies::binpack::BinPack;

        let task = |name: &str, replicas: u32| Task {
            name: name.into(),
            task_type: name.into(),
            replicas,
            min_replicas: 1,
            max_replicas: replicas,
            requests: Resources::new(1_000, 1 << 30, 1),
        };
        let job = |key: &str, priority: i32, tasks: Vec<Task>, on: Option<u32>| Job {
            key: key.into(),
            priority,
            preemptible: true,
            current: on.map_or(vec![], |n| {
                vec![Some(n); tasks.iter().map(|t| t.replicas as usize).sum()]
            }),
            tasks,
            profilings: String::new(),
            age_seconds: 0,
        };
        // One full 8-GPU node, running a low-priority job of a learner and 7 collectors.
        let low = Running {
            job: job(
                "ns/low",
                0,
                vec![task("learner", 1), task("collector", 7)],
                Some(0),
            ),
            may_shrink: true,
            may_evict: true,
            lost_seconds: 60,
            checkpoint_age_seconds: None,
        };
        let urgent = job("ns/urgent", 10, vec![task("learner", 3)], None);
        let nodes = vec![node("a", 0)];
        let candidates = vec![low];
        let want = BinPack.preempt(&urgent, &candidates, &nodes).unwrap();
        let cluster = encode(&[urgent.clone(), candidates[0].job.clone()], &nodes);
        let got = preempt::<super::GpuBinPack>(cluster, encode_candidates(&candidates))
            .unwrap()
            .unwrap();
        // Candidate 0 is the cluster's job 1: 3 collectors go.
        assert_eq!(got.nodes, want.nodes);
        assert_eq!(got.evictions, Vec::<u32>::new());
        assert_eq!(got.shrinks.len(), 1);
        assert_eq!(
            (got.shrinks[0].job, got.shrinks[0].replicas.clone()),
            (1, vec![1, 4])
        );
        // May neither shrink nor be evicted: no room.
        let mut table = encode_candidates(&candidates);
        table.may_shrink = vec![0];
        table.may_evict = vec![0];
        let cluster = encode(&[urgent, candidates[0].job.clone()], &nodes);
        assert!(
            preempt::<super::GpuBinPack>(cluster, table)
                .unwrap()
                .is_none()
        );
    }
}
