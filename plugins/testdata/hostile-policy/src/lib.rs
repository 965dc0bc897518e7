//! Test-only policy that misbehaves when the job key's name says so (`ns/loop`, `ns/oom`,
//! `ns/trap`, `ns/recurse`, `ns/unknown-node`, `ns/wrong-count`, `ns/not-ready`); any other key
//! is bin-packed normally, so the same component also serves good calls.

use std::hint::black_box;

use diorch_plugin_sdk::{Job, JobAllocation, NodeInfo, NodeView, PluginError, Policy, PolicyLogic};
use diorch_policies::binpack::BinPack;

pub struct Hostile;

fn recurse(n: u64) -> u64 {
    if black_box(n) == u64::MAX {
        return 0;
    }
    black_box(recurse(n + 1)) + 1
}

impl Policy for Hostile {
    fn allocate(job: &Job, nodes: &[NodeView<'_>]) -> Result<Vec<u32>, PluginError> {
        let name = job.key.rsplit('/').next().unwrap_or_default();
        match name {
            "loop" => {
                let mut i = 0u64;
                loop {
                    i = black_box(i.wrapping_add(1));
                }
            }
            "oom" => {
                let v = vec![1u8; 1 << 30];
                Ok(vec![u32::from(black_box(v)[12345]); job.total_replicas()])
            }
            "trap" => panic!("hostile policy traps on purpose"),
            "recurse" => Ok(vec![recurse(0) as u32]),
            "unknown-node" => Ok(vec![nodes.len() as u32 + 7; job.total_replicas()]),
            "wrong-count" => Ok(vec![0; job.total_replicas() + 1]),
            "not-ready" => {
                let i = nodes.iter().position(|n| !n.ready()).unwrap_or(0);
                Ok(vec![i as u32; job.total_replicas()])
            }
            _ => BinPack.allocate(job, nodes),
        }
    }

    fn optimize(
        jobs: &[Job],
        nodes: &[NodeView<'_>],
        previous: &[JobAllocation],
    ) -> Result<Vec<JobAllocation>, PluginError> {
        BinPack.optimize(jobs, nodes, previous)
    }
}

diorch_plugin_sdk::export_policy!(Hostile);
