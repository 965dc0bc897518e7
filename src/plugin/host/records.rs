//! The 0.2.0 contract's policy input (`wit/v0.2/plugins.wit`): lists of records, for components
//! built before 0.3. Must not change: those components are built against it.

use super::super::{Job, Node, PluginError};
use super::bindings::v2::policy::diorch::plugins::types as wit;
use super::within_u32_indices;

/// Builds the flat `cluster` record of a policy call (see the WIT `types` doc): strings are
/// appended to one table and records refer to them and to each other by position, so building it
/// needs no lookups and lowering it is a dozen copies whatever the cluster's size. Duplicate
/// strings are not merged: hashing every label would cost more than copying it.
struct Encoder {
    c: wit::Cluster,
}

impl Encoder {
    fn new(jobs: usize, nodes: usize) -> Encoder {
        Encoder {
            c: wit::Cluster {
                // ~10 strings of ~20 bytes per node: one growth at most for typical nodes.
                strings: String::with_capacity(nodes * 256),
                string_ends: Vec::with_capacity(nodes * 12),
                nodes: Vec::with_capacity(nodes),
                jobs: Vec::with_capacity(jobs),
                tasks: Vec::with_capacity(jobs * 3),
                placements: Vec::new(),
                labels: Vec::with_capacity(nodes * 4),
                taints: Vec::new(),
                quantities: Vec::with_capacity(nodes * 2),
            },
        }
    }

    // The `as u32` casts below cannot wrap unnoticed: `finish` refuses a table or list past u32.
    fn text(&mut self, s: &str) -> u32 {
        self.c.strings.push_str(s);
        self.c.string_ends.push(self.c.strings.len() as u32);
        self.c.string_ends.len() as u32 - 1
    }

    fn span(start: usize, len: usize) -> wit::Span {
        wit::Span {
            start: start as u32,
            len: len as u32,
        }
    }

    fn resources(&mut self, r: &crate::plugin::Resources) -> wit::Resources {
        let start = self.c.quantities.len();
        for (name, amount) in &r.extended {
            let name = self.text(name);
            self.c.quantities.push(wit::Quantity {
                name,
                amount: *amount,
            });
        }
        wit::Resources {
            cpu_millis: r.cpu_millis,
            memory_bytes: r.memory_bytes,
            gpus: r.gpus,
            extended: Self::span(start, r.extended.len()),
        }
    }

    fn node(&mut self, n: &Node) {
        let name = self.text(&n.name);
        let labels = Self::span(self.c.labels.len(), n.labels.len());
        for (k, v) in &n.labels {
            let (key, value) = (self.text(k), self.text(v));
            self.c.labels.push(wit::Label { key, value });
        }
        let taints = Self::span(self.c.taints.len(), n.taints.len());
        for t in &n.taints {
            let (key, value) = (self.text(&t.key), self.text(&t.value));
            self.c.taints.push(wit::Taint {
                key,
                value,
                effect: match t.effect {
                    crate::plugin::TaintEffect::NoSchedule => wit::TaintEffect::NoSchedule,
                    crate::plugin::TaintEffect::PreferNoSchedule => {
                        wit::TaintEffect::PreferNoSchedule
                    }
                    crate::plugin::TaintEffect::NoExecute => wit::TaintEffect::NoExecute,
                },
            });
        }
        let allocatable = self.resources(&n.allocatable);
        let free = self.resources(&n.free);
        self.c.nodes.push(wit::Node {
            name,
            labels,
            taints,
            allocatable,
            free,
            ready: n.ready,
        });
    }

    fn job(&mut self, j: &Job) {
        let key = self.text(&j.key);
        let tasks = Self::span(self.c.tasks.len(), j.tasks.len());
        for t in &j.tasks {
            let (name, task_type) = (self.text(&t.name), self.text(&t.task_type));
            let requests = self.resources(&t.requests);
            self.c.tasks.push(wit::Task {
                name,
                task_type,
                replicas: t.replicas,
                min_replicas: t.min_replicas,
                max_replicas: t.max_replicas,
                requests,
            });
        }
        let current = Self::span(self.c.placements.len(), j.current.len());
        self.c.placements.extend_from_slice(&j.current);
        let profilings = self.text(&j.profilings);
        self.c.jobs.push(wit::Job {
            key,
            priority: j.priority,
            preemptible: j.preemptible,
            tasks,
            current,
            profilings,
            age_seconds: j.age_seconds,
        });
    }

    fn finish(self, plugin: &str) -> Result<wit::Cluster, PluginError> {
        let c = &self.c;
        within_u32_indices(
            plugin,
            &[
                c.strings.len(),
                c.string_ends.len(),
                c.labels.len(),
                c.taints.len(),
                c.quantities.len(),
                c.tasks.len(),
                c.placements.len(),
            ],
        )?;
        Ok(self.c)
    }
}

/// The `cluster` record for `jobs` on `nodes`.
pub(super) fn cluster(
    plugin: &str,
    jobs: &[&Job],
    nodes: &[Node],
) -> Result<wit::Cluster, PluginError> {
    let mut e = Encoder::new(jobs.len(), nodes.len());
    for n in nodes {
        e.node(n);
    }
    for j in jobs {
        e.job(j);
    }
    e.finish(plugin)
}
