//! The 0.3.0, 0.4.0 and 0.5.0 contracts' policy input (`wit/plugins.wit`, the same in all three,
//! and 0.5's `preempt` candidate table): every table as columns of integers,
//! which wasmtime copies into the guest one block per column, where the 0.2 lists of records
//! were written one field at a time (about half of a 100-node `allocate`, see
//! docs/performance.md).
//!
//! Owns: building the `cluster` record from the plain model. Must not touch: what the plugin
//! answers (see `checks`).

use super::super::{Job, Node, PluginError, Resources, TaintEffect};
use super::bindings::v5::policy::diorch::plugins::types as wit;
use super::within_u32_indices;

/// The `placements` entry of a replica that is not placed.
pub(super) const NO_NODE: u32 = u32::MAX;

fn taint_effect(e: TaintEffect) -> u8 {
    match e {
        TaintEffect::NoSchedule => 0,
        TaintEffect::PreferNoSchedule => 1,
        TaintEffect::NoExecute => 2,
    }
}

fn resource_columns(rows: usize) -> wit::ResourceColumns {
    let mut starts = Vec::with_capacity(rows + 1);
    starts.push(0);
    wit::ResourceColumns {
        cpu_millis: Vec::with_capacity(rows),
        memory_bytes: Vec::with_capacity(rows),
        gpus: Vec::with_capacity(rows),
        extended_starts: starts,
        extended_name: Vec::new(),
        extended_amount: Vec::new(),
    }
}

fn starts(rows: usize) -> Vec<u32> {
    let mut starts = Vec::with_capacity(rows + 1);
    starts.push(0);
    starts
}

/// Appends strings to the table: duplicates are not merged (hashing every label would cost more
/// than copying it).
struct Strings {
    text: String,
    ends: Vec<u32>,
}

impl Strings {
    // The `as u32` casts here and below cannot wrap unnoticed: `cluster` refuses an input with a
    // table or string past u32.
    fn add(&mut self, s: &str) -> u32 {
        self.text.push_str(s);
        self.ends.push(self.text.len() as u32);
        self.ends.len() as u32 - 1
    }
}

fn push_resources(strings: &mut Strings, columns: &mut wit::ResourceColumns, r: &Resources) {
    columns.cpu_millis.push(r.cpu_millis);
    columns.memory_bytes.push(r.memory_bytes);
    columns.gpus.push(r.gpus);
    for (name, amount) in &r.extended {
        columns.extended_name.push(strings.add(name));
        columns.extended_amount.push(*amount);
    }
    columns
        .extended_starts
        .push(columns.extended_name.len() as u32);
}

/// The `candidate-table` of a `preempt` call (contract 0.5.0), one entry per candidate.
pub(super) fn candidates(candidates: &[diorch_policies::preempt::Running]) -> wit::CandidateTable {
    wit::CandidateTable {
        may_shrink: candidates.iter().map(|c| u8::from(c.may_shrink)).collect(),
        may_evict: candidates.iter().map(|c| u8::from(c.may_evict)).collect(),
        lost_seconds: candidates.iter().map(|c| c.lost_seconds).collect(),
        checkpoint_age_seconds: candidates
            .iter()
            .map(|c| c.checkpoint_age_seconds.unwrap_or(u64::MAX))
            .collect(),
    }
}

/// The `cluster` record for `jobs` on `nodes`.
pub(super) fn cluster(
    plugin: &str,
    jobs: &[&Job],
    nodes: &[Node],
) -> Result<wit::Cluster, PluginError> {
    let tasks_total: usize = jobs.iter().map(|j| j.tasks.len()).sum();
    let mut strings = Strings {
        // ~10 strings of ~20 bytes per node: one growth at most for typical nodes.
        text: String::with_capacity(nodes.len() * 256),
        ends: Vec::with_capacity(nodes.len() * 12),
    };
    let mut n = wit::NodeTable {
        name: Vec::with_capacity(nodes.len()),
        label_starts: starts(nodes.len()),
        taint_starts: starts(nodes.len()),
        allocatable: resource_columns(nodes.len()),
        free: resource_columns(nodes.len()),
        ready: Vec::with_capacity(nodes.len()),
    };
    let mut labels = wit::LabelTable {
        key: Vec::with_capacity(nodes.len() * 4),
        value: Vec::with_capacity(nodes.len() * 4),
    };
    let mut taints = wit::TaintTable {
        key: Vec::new(),
        value: Vec::new(),
        effect: Vec::new(),
    };
    for node in nodes {
        n.name.push(strings.add(&node.name));
        for (k, v) in &node.labels {
            labels.key.push(strings.add(k));
            labels.value.push(strings.add(v));
        }
        n.label_starts.push(labels.key.len() as u32);
        for t in &node.taints {
            taints.key.push(strings.add(&t.key));
            taints.value.push(strings.add(&t.value));
            taints.effect.push(taint_effect(t.effect));
        }
        n.taint_starts.push(taints.key.len() as u32);
        push_resources(&mut strings, &mut n.allocatable, &node.allocatable);
        push_resources(&mut strings, &mut n.free, &node.free);
        n.ready.push(u8::from(node.ready));
    }
    let mut j = wit::JobTable {
        key: Vec::with_capacity(jobs.len()),
        priority: Vec::with_capacity(jobs.len()),
        preemptible: Vec::with_capacity(jobs.len()),
        task_starts: starts(jobs.len()),
        current_starts: starts(jobs.len()),
        profilings: Vec::with_capacity(jobs.len()),
        age_seconds: Vec::with_capacity(jobs.len()),
    };
    let mut t = wit::TaskTable {
        name: Vec::with_capacity(tasks_total),
        task_type: Vec::with_capacity(tasks_total),
        replicas: Vec::with_capacity(tasks_total),
        min_replicas: Vec::with_capacity(tasks_total),
        max_replicas: Vec::with_capacity(tasks_total),
        requests: resource_columns(tasks_total),
    };
    let mut placements = Vec::new();
    for job in jobs {
        j.key.push(strings.add(&job.key));
        j.priority.push(job.priority);
        j.preemptible.push(u8::from(job.preemptible));
        for task in &job.tasks {
            t.name.push(strings.add(&task.name));
            t.task_type.push(strings.add(&task.task_type));
            t.replicas.push(task.replicas);
            t.min_replicas.push(task.min_replicas);
            t.max_replicas.push(task.max_replicas);
            push_resources(&mut strings, &mut t.requests, &task.requests);
        }
        j.task_starts.push(t.name.len() as u32);
        placements.extend(job.current.iter().map(|p| p.unwrap_or(NO_NODE)));
        j.current_starts.push(placements.len() as u32);
        j.profilings.push(strings.add(&job.profilings));
        j.age_seconds.push(job.age_seconds);
    }
    within_u32_indices(
        plugin,
        &[
            strings.text.len(),
            strings.ends.len(),
            labels.key.len(),
            taints.key.len(),
            t.name.len(),
            placements.len(),
            n.allocatable.extended_name.len(),
            n.free.extended_name.len(),
            t.requests.extended_name.len(),
        ],
    )?;
    Ok(wit::Cluster {
        strings: strings.text,
        string_ends: strings.ends,
        nodes: n,
        jobs: j,
        tasks: t,
        placements,
        labels,
        taints,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::sample;

    /// A column read back: the run of `starts` that row `i` owns.
    fn run(starts: &[u32], i: usize) -> std::ops::Range<usize> {
        starts[i] as usize..starts[i + 1] as usize
    }

    fn text(c: &wit::Cluster, id: u32) -> &str {
        let i = id as usize;
        let start = if i == 0 { 0 } else { c.string_ends[i - 1] };
        &c.strings[start as usize..c.string_ends[i] as usize]
    }

    fn resources(c: &wit::Cluster, r: &wit::ResourceColumns, i: usize) -> Resources {
        Resources {
            cpu_millis: r.cpu_millis[i],
            memory_bytes: r.memory_bytes[i],
            gpus: r.gpus[i],
            extended: run(&r.extended_starts, i)
                .map(|e| {
                    (
                        text(c, r.extended_name[e]).to_string(),
                        r.extended_amount[e],
                    )
                })
                .collect(),
        }
    }

    /// Every node and job of the sample decodes from the columns as it was (the guest SDK's
    /// views read them the same way; `plugins/sdk` tests that side).
    #[test]
    fn the_columns_hold_every_node_and_job_field() {
        let (mut job, mut nodes) = sample::allocate_input(5, 2);
        nodes[1].ready = false;
        nodes[2].taints.push(crate::plugin::Taint {
            key: "k".into(),
            value: "v".into(),
            effect: TaintEffect::PreferNoSchedule,
        });
        nodes[3].free.extended = vec![("rdma/hca".into(), 3)];
        job.tasks[0].requests.extended = vec![("rdma/hca".into(), 1)];
        job.current = vec![Some(4), None];
        job.profilings = "{\"x\":1}".into();
        let other = Job {
            key: "ns/other".into(),
            tasks: vec![],
            current: vec![],
            ..job.clone()
        };
        let c = cluster("t", &[&job, &other], &nodes).unwrap();
        assert_eq!(c.nodes.name.len(), nodes.len());
        for (i, node) in nodes.iter().enumerate() {
            let back = Node {
                name: text(&c, c.nodes.name[i]).into(),
                labels: run(&c.nodes.label_starts, i)
                    .map(|l| {
                        let (k, v) = (c.labels.key[l], c.labels.value[l]);
                        (text(&c, k).into(), text(&c, v).into())
                    })
                    .collect(),
                taints: run(&c.nodes.taint_starts, i)
                    .map(|t| crate::plugin::Taint {
                        key: text(&c, c.taints.key[t]).into(),
                        value: text(&c, c.taints.value[t]).into(),
                        effect: match c.taints.effect[t] {
                            0 => TaintEffect::NoSchedule,
                            1 => TaintEffect::PreferNoSchedule,
                            _ => TaintEffect::NoExecute,
                        },
                    })
                    .collect(),
                allocatable: resources(&c, &c.nodes.allocatable, i),
                free: resources(&c, &c.nodes.free, i),
                ready: c.nodes.ready[i] == 1,
            };
            assert_eq!(&back, node, "node {i}");
        }
        for (i, want) in [&job, &other].into_iter().enumerate() {
            let back = Job {
                key: text(&c, c.jobs.key[i]).into(),
                priority: c.jobs.priority[i],
                preemptible: c.jobs.preemptible[i] == 1,
                tasks: run(&c.jobs.task_starts, i)
                    .map(|t| crate::plugin::Task {
                        name: text(&c, c.tasks.name[t]).into(),
                        task_type: text(&c, c.tasks.task_type[t]).into(),
                        replicas: c.tasks.replicas[t],
                        min_replicas: c.tasks.min_replicas[t],
                        max_replicas: c.tasks.max_replicas[t],
                        requests: resources(&c, &c.tasks.requests, t),
                    })
                    .collect(),
                current: run(&c.jobs.current_starts, i)
                    .map(|p| Some(c.placements[p]).filter(|&n| n != NO_NODE))
                    .collect(),
                profilings: text(&c, c.jobs.profilings[i]).into(),
                age_seconds: c.jobs.age_seconds[i],
            };
            assert_eq!(&back, want, "job {i}");
        }
    }
}
