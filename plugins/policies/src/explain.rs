//! Reasons for people: why a policy answered what it did, as one line of text (contract 0.4.0's
//! `reason`), worked out from the call's input and the answer alone.
//!
//! Owns: the wording of the bin-pack, spread and re-plan reasons, which the Python and
//! JavaScript examples reproduce byte for byte (the language parity test compares them). Must
//! not touch: the decisions themselves; a reason never changes an answer.

use std::collections::BTreeSet;

use crate::model::{Amounts, Job, JobAllocation, NodeInfo};

/// Each node of `answer` with its replica count, in the order of its first appearance.
pub fn tally(answer: &[u32]) -> Vec<(u32, usize)> {
    let mut out: Vec<(u32, usize)> = Vec::new();
    for &node in answer {
        match out.iter_mut().find(|(n, _)| *n == node) {
            Some((_, count)) => *count += 1,
            None => out.push((node, 1)),
        }
    }
    out
}

fn name<N: NodeInfo>(nodes: &[N], i: u32) -> &str {
    nodes.get(i as usize).map_or("?", NodeInfo::name)
}

/// `a×2, b×1`.
fn spread_list<N: NodeInfo>(nodes: &[N], answer: &[u32]) -> String {
    tally(answer)
        .iter()
        .map(|&(n, count)| format!("{}×{count}", name(nodes, n)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Bin-pack's `allocate`: each node with what it had free, GPUs for a GPU job, else CPU.
pub fn binpack<N: NodeInfo>(job: &Job, nodes: &[N], answer: &[u32]) -> Option<String> {
    if answer.is_empty() {
        return None;
    }
    let gpu_job = job.tasks.iter().any(|t| t.requests.gpus > 0);
    let parts: Vec<String> = tally(answer)
        .iter()
        .map(|&(n, count)| {
            let free = nodes
                .get(n as usize)
                .map(|node| {
                    let free = node.free();
                    if gpu_job {
                        format!("{} free GPUs", free.gpus())
                    } else {
                        format!("{}m CPU free", free.cpu_millis())
                    }
                })
                .unwrap_or_default();
            format!("{}×{count} ({free})", name(nodes, n))
        })
        .collect();
    Some(format!(
        "bin-pack, fullest fitting node first: {}",
        parts.join(", ")
    ))
}

/// Spread's `allocate`: how many nodes and zones, and the most replicas on one node.
pub fn spread<N: NodeInfo>(_job: &Job, nodes: &[N], answer: &[u32]) -> Option<String> {
    if answer.is_empty() {
        return None;
    }
    let counts = tally(answer);
    let zones: BTreeSet<String> = counts
        .iter()
        .map(|&(n, _)| match nodes.get(n as usize) {
            Some(node) => match node.label(crate::spread::ZONE_LABEL) {
                Some(zone) => format!("zone:{zone}"),
                None => format!("node:{}", node.name()),
            },
            None => format!("node:?{n}"),
        })
        .collect();
    let most = counts.iter().map(|&(_, c)| c).max().unwrap_or(0);
    Some(format!(
        "spread: {} nodes in {} zones, at most {most} per node: {}",
        counts.len(),
        zones.len(),
        spread_list(nodes, answer)
    ))
}

/// An `optimize` entry of the policy called `policy`: how many replicas move, and where the job
/// runs now; `None` when the entry leaves the job exactly where it runs, or places nothing.
pub fn replan<N: NodeInfo>(
    policy: &str,
    job: &Job,
    nodes: &[N],
    entry: &JobAllocation,
) -> Option<String> {
    if entry.nodes.is_empty() {
        return None;
    }
    let moved = entry
        .nodes
        .iter()
        .zip(&job.current)
        .filter(|(new, old)| old.is_some_and(|old| old != **new))
        .count();
    let unchanged = moved == 0
        && entry.nodes.len() == job.current.len()
        && job.current.iter().all(Option::is_some);
    if unchanged {
        return None;
    }
    Some(format!(
        "re-planned by {policy}: {moved} of {} replicas move; now {}",
        entry.nodes.len(),
        spread_list(nodes, &entry.nodes)
    ))
}

/// Fills each entry's reason with [`replan`]'s, where the policy gave none.
pub fn replans<N: NodeInfo>(policy: &str, jobs: &[Job], nodes: &[N], plan: &mut [JobAllocation]) {
    for entry in plan.iter_mut().filter(|e| e.reason.is_none()) {
        if let Some(job) = jobs.get(entry.job as usize) {
            entry.reason = replan(policy, job, nodes, entry);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Resources;
    use crate::testutil::*;

    #[test]
    fn tally_keeps_first_appearance_order() {
        assert_eq!(tally(&[2, 0, 2, 1, 0]), vec![(2, 2), (0, 2), (1, 1)]);
        assert!(tally(&[]).is_empty());
    }

    #[test]
    fn binpack_names_free_gpus_for_gpu_jobs_and_cpu_otherwise() {
        let nodes = vec![gpu_node("a-1", 8), gpu_node_used("a-3", 8, 6)];
        let gpu = job("ns/j", &[("learner", 3, 1)]);
        assert_eq!(
            binpack(&gpu, &nodes, &[1, 1, 0]).as_deref(),
            Some("bin-pack, fullest fitting node first: a-3×2 (2 free GPUs), a-1×1 (8 free GPUs)")
        );
        let mut cpu_nodes = vec![cpu_node("c")];
        cpu_nodes[0].free = Resources::new(4_000, 1 << 30, 0);
        let cpu = job("ns/c", &[("collector", 2, 0)]);
        assert_eq!(
            binpack(&cpu, &cpu_nodes, &[0, 0]).as_deref(),
            Some("bin-pack, fullest fitting node first: c×2 (4000m CPU free)")
        );
        assert_eq!(binpack(&cpu, &cpu_nodes, &[]), None);
    }

    #[test]
    fn spread_counts_zones_with_unlabelled_nodes_as_their_own() {
        let mut nodes: Vec<_> = (0..4).map(|i| gpu_node(&format!("n{i}"), 8)).collect();
        nodes[0]
            .labels
            .push((crate::spread::ZONE_LABEL.into(), "z1".into()));
        nodes[1]
            .labels
            .push((crate::spread::ZONE_LABEL.into(), "z1".into()));
        let j = job("ns/j", &[("learner", 5, 1)]);
        assert_eq!(
            spread(&j, &nodes, &[0, 1, 2, 3, 3]).as_deref(),
            Some("spread: 4 nodes in 3 zones, at most 2 per node: n0×1, n1×1, n2×1, n3×2")
        );
    }

    #[test]
    fn replan_says_what_moves_and_nothing_when_nothing_does() {
        let nodes = vec![gpu_node("a", 8), gpu_node("b", 8)];
        let mut j = job("ns/j", &[("learner", 2, 1)]);
        j.current = vec![Some(0), Some(0)];
        let entry = |nodes: Vec<u32>| JobAllocation {
            job: 0,
            nodes,
            reason: None,
        };
        assert_eq!(replan("bin-pack", &j, &nodes, &entry(vec![0, 0])), None);
        assert_eq!(
            replan("bin-pack", &j, &nodes, &entry(vec![0, 1])).as_deref(),
            Some("re-planned by bin-pack: 1 of 2 replicas move; now a×1, b×1")
        );
        // A first placement in a re-plan: nothing moves, yet the job changes.
        j.current = vec![None, None];
        assert_eq!(
            replan("spread", &j, &nodes, &entry(vec![0, 1])).as_deref(),
            Some("re-planned by spread: 0 of 2 replicas move; now a×1, b×1")
        );
        // A node index out of range reads as `?`, never a panic.
        assert_eq!(
            replan("spread", &j, &nodes, &entry(vec![7])).as_deref(),
            Some("re-planned by spread: 0 of 1 replicas move; now ?×1")
        );
    }
}
