//! Borrowed views of a policy call's `cluster` record, and the model-to-WIT encoding.
//!
//! The WIT input is flat (one string table, lists of plain records, `span`s into them) so the
//! host lowers it in a dozen copies. These views let the `diorch-policies` code read it where it
//! was lowered: a node costs no allocation at all, where converting it into an owned
//! `diorch_policies::Node` cost about a dozen (name, labels, taints, extended resources), more
//! than the placement itself. Jobs are few and small, so they are converted to the owned model.

use diorch_policies::{Amounts, Job, Node, NodeInfo, Resources, Taint, TaintEffect, Task};

use crate::wit;

/// String `id` of the cluster's string table; `""` for an id or offsets out of range (the host
/// never sends those, and a view must not panic).
pub fn text(cluster: &wit::Cluster, id: u32) -> &str {
    let i = id as usize;
    let Some(&end) = cluster.string_ends.get(i) else {
        return "";
    };
    let start = match i.checked_sub(1) {
        Some(prev) => cluster.string_ends.get(prev).copied().unwrap_or(0),
        None => 0,
    };
    cluster
        .strings
        .get(start as usize..end as usize)
        .unwrap_or("")
}

/// The entries of `list` a span selects; empty when out of range.
fn run<T>(list: &[T], span: wit::Span) -> &[T] {
    let start = span.start as usize;
    list.get(start..start.saturating_add(span.len as usize))
        .unwrap_or(&[])
}

fn effect(e: wit::TaintEffect) -> TaintEffect {
    match e {
        wit::TaintEffect::NoSchedule => TaintEffect::NoSchedule,
        wit::TaintEffect::PreferNoSchedule => TaintEffect::PreferNoSchedule,
        wit::TaintEffect::NoExecute => TaintEffect::NoExecute,
    }
}

fn effect_bit(e: TaintEffect) -> u8 {
    match e {
        TaintEffect::NoSchedule => 1,
        TaintEffect::PreferNoSchedule => 2,
        TaintEffect::NoExecute => 4,
    }
}

/// One node of the call, read in place.
#[derive(Clone, Copy)]
pub struct NodeView<'a> {
    cluster: &'a wit::Cluster,
    node: &'a wit::Node,
    /// The effects of the node's taints as bits: policies ask for them for every candidate node
    /// of every replica, and scanning the taint list each time was most of a Wasm re-plan.
    effects: u8,
}

impl<'a> NodeView<'a> {
    /// Views of every node of `cluster`, in index order.
    pub fn all(cluster: &'a wit::Cluster) -> Vec<NodeView<'a>> {
        cluster
            .nodes
            .iter()
            .map(|node| NodeView {
                cluster,
                node,
                effects: run(&cluster.taints, node.taints)
                    .iter()
                    .fold(0, |bits, t| bits | effect_bit(effect(t.effect))),
            })
            .collect()
    }

    /// The node's labels, in order.
    pub fn labels(&self) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        let cluster = self.cluster;
        run(&cluster.labels, self.node.labels)
            .iter()
            .map(move |l| (text(cluster, l.key), text(cluster, l.value)))
    }

    /// The node's taints, in order.
    pub fn taints(&self) -> impl Iterator<Item = (&'a str, &'a str, TaintEffect)> + 'a {
        let cluster = self.cluster;
        run(&cluster.taints, self.node.taints).iter().map(move |t| {
            (
                text(cluster, t.key),
                text(cluster, t.value),
                effect(t.effect),
            )
        })
    }

    /// An owned copy, for code written against `diorch_policies::Node`.
    pub fn to_node(&self) -> Node {
        Node {
            name: self.name().to_string(),
            labels: self
                .labels()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            taints: self
                .taints()
                .map(|(key, value, effect)| Taint {
                    key: key.to_string(),
                    value: value.to_string(),
                    effect,
                })
                .collect(),
            allocatable: self.allocatable().to_resources(),
            free: NodeInfo::free(self).to_resources(),
            ready: self.node.ready,
        }
    }
}

impl NodeInfo for NodeView<'_> {
    type Amounts<'b>
        = ResourcesView<'b>
    where
        Self: 'b;

    fn name(&self) -> &str {
        text(self.cluster, self.node.name)
    }

    fn ready(&self) -> bool {
        self.node.ready
    }

    fn has_taint(&self, e: TaintEffect) -> bool {
        self.effects & effect_bit(e) != 0
    }

    fn label(&self, key: &str) -> Option<&str> {
        self.labels().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    fn allocatable(&self) -> ResourcesView<'_> {
        ResourcesView {
            cluster: self.cluster,
            resources: &self.node.allocatable,
        }
    }

    fn free(&self) -> ResourcesView<'_> {
        ResourcesView {
            cluster: self.cluster,
            resources: &self.node.free,
        }
    }
}

/// A `resources` record, read in place.
#[derive(Clone, Copy)]
pub struct ResourcesView<'a> {
    cluster: &'a wit::Cluster,
    resources: &'a wit::Resources,
}

impl ResourcesView<'_> {
    fn quantities(&self) -> impl Iterator<Item = (&str, u64)> {
        let cluster = self.cluster;
        run(&cluster.quantities, self.resources.extended)
            .iter()
            .map(move |q| (text(cluster, q.name), q.amount))
    }
}

impl Amounts for ResourcesView<'_> {
    fn cpu_millis(&self) -> u64 {
        self.resources.cpu_millis
    }

    fn memory_bytes(&self) -> u64 {
        self.resources.memory_bytes
    }

    fn gpus(&self) -> u32 {
        self.resources.gpus
    }

    fn extended(&self, name: &str) -> u64 {
        self.quantities()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, q)| q)
    }

    fn to_resources(&self) -> Resources {
        Resources {
            cpu_millis: self.resources.cpu_millis,
            memory_bytes: self.resources.memory_bytes,
            gpus: self.resources.gpus,
            extended: self.quantities().map(|(n, q)| (n.to_string(), q)).collect(),
        }
    }
}

/// Job `job` of `cluster` as the owned model.
pub fn job(cluster: &wit::Cluster, job: &wit::Job) -> Job {
    Job {
        key: text(cluster, job.key).to_string(),
        priority: job.priority,
        preemptible: job.preemptible,
        tasks: run(&cluster.tasks, job.tasks)
            .iter()
            .map(|t| Task {
                name: text(cluster, t.name).to_string(),
                task_type: text(cluster, t.task_type).to_string(),
                replicas: t.replicas,
                min_replicas: t.min_replicas,
                max_replicas: t.max_replicas,
                requests: ResourcesView {
                    cluster,
                    resources: &t.requests,
                }
                .to_resources(),
            })
            .collect(),
        current: run(&cluster.placements, job.current).to_vec(),
        profilings: text(cluster, job.profilings).to_string(),
        age_seconds: job.age_seconds,
    }
}

/// Builds a `cluster` record; ids and spans are positions, so it needs no lookups.
struct Encoder {
    c: wit::Cluster,
}

impl Encoder {
    fn new() -> Encoder {
        Encoder {
            c: wit::Cluster {
                strings: String::new(),
                string_ends: Vec::new(),
                nodes: Vec::new(),
                jobs: Vec::new(),
                tasks: Vec::new(),
                placements: Vec::new(),
                labels: Vec::new(),
                taints: Vec::new(),
                quantities: Vec::new(),
            },
        }
    }

    fn text(&mut self, s: &str) -> u32 {
        self.c.strings.push_str(s);
        self.c.string_ends.push(self.c.strings.len() as u32);
        self.c.string_ends.len() as u32 - 1
    }

    fn resources(&mut self, r: &Resources) -> wit::Resources {
        let start = self.c.quantities.len() as u32;
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
            extended: wit::Span {
                start,
                len: r.extended.len() as u32,
            },
        }
    }
}

/// The `cluster` record the host sends for `jobs` on `nodes` (the host has its own copy of this
/// encoding for its bindings); for plugins' native tests.
pub fn encode(jobs: &[Job], nodes: &[Node]) -> wit::Cluster {
    let mut e = Encoder::new();
    for n in nodes {
        let name = e.text(&n.name);
        let labels = wit::Span {
            start: e.c.labels.len() as u32,
            len: n.labels.len() as u32,
        };
        for (k, v) in &n.labels {
            let (key, value) = (e.text(k), e.text(v));
            e.c.labels.push(wit::Label { key, value });
        }
        let taints = wit::Span {
            start: e.c.taints.len() as u32,
            len: n.taints.len() as u32,
        };
        for t in &n.taints {
            let (key, value) = (e.text(&t.key), e.text(&t.value));
            e.c.taints.push(wit::Taint {
                key,
                value,
                effect: match t.effect {
                    TaintEffect::NoSchedule => wit::TaintEffect::NoSchedule,
                    TaintEffect::PreferNoSchedule => wit::TaintEffect::PreferNoSchedule,
                    TaintEffect::NoExecute => wit::TaintEffect::NoExecute,
                },
            });
        }
        let allocatable = e.resources(&n.allocatable);
        let free = e.resources(&n.free);
        e.c.nodes.push(wit::Node {
            name,
            labels,
            taints,
            allocatable,
            free,
            ready: n.ready,
        });
    }
    for j in jobs {
        let key = e.text(&j.key);
        let tasks = wit::Span {
            start: e.c.tasks.len() as u32,
            len: j.tasks.len() as u32,
        };
        for t in &j.tasks {
            let (name, task_type) = (e.text(&t.name), e.text(&t.task_type));
            let requests = e.resources(&t.requests);
            e.c.tasks.push(wit::Task {
                name,
                task_type,
                replicas: t.replicas,
                min_replicas: t.min_replicas,
                max_replicas: t.max_replicas,
                requests,
            });
        }
        let current = wit::Span {
            start: e.c.placements.len() as u32,
            len: j.current.len() as u32,
        };
        e.c.placements.extend_from_slice(&j.current);
        let profilings = e.text(&j.profilings);
        e.c.jobs.push(wit::Job {
            key,
            priority: j.priority,
            preemptible: j.preemptible,
            tasks,
            current,
            profilings,
            age_seconds: j.age_seconds,
        });
    }
    e.c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_read_back_what_was_encoded() {
        let mut free = Resources::new(1_000, 2_000, 3);
        free.extended = vec![("rdma/hca".into(), 2), ("x/y".into(), 5)];
        let node = Node {
            name: "n-0".into(),
            labels: vec![("zone".into(), "a".into()), ("kind".into(), "é".into())],
            taints: vec![Taint {
                key: "k".into(),
                value: "v".into(),
                effect: TaintEffect::PreferNoSchedule,
            }],
            allocatable: Resources::new(4_000, 8_000, 8),
            free,
            ready: true,
        };
        let job = Job {
            key: "ns/j".into(),
            priority: -3,
            preemptible: true,
            tasks: vec![Task {
                name: "learner".into(),
                task_type: "learner".into(),
                replicas: 2,
                min_replicas: 1,
                max_replicas: 4,
                requests: node.free.clone(),
            }],
            current: vec![Some(0), None],
            profilings: "{}".into(),
            age_seconds: 7,
        };
        let c = encode(std::slice::from_ref(&job), std::slice::from_ref(&node));
        let views = NodeView::all(&c);
        assert_eq!(views.len(), 1);
        assert_eq!(views[0].to_node(), node);
        assert_eq!(views[0].label("kind"), Some("é"));
        assert_eq!(views[0].label("none"), None);
        assert!(views[0].prefers_no_schedule() && views[0].schedulable());
        assert_eq!(NodeInfo::free(&views[0]).extended("x/y"), 5);
        assert_eq!(NodeInfo::free(&views[0]).extended("gone"), 0);
        assert_eq!(super::job(&c, &c.jobs[0]), job);
    }

    #[test]
    fn out_of_range_ids_and_spans_read_as_empty() {
        let mut c = encode(&[], &[]);
        assert_eq!(text(&c, 0), "");
        c.strings = "ab".into();
        c.string_ends = vec![1, 9];
        assert_eq!((text(&c, 0), text(&c, 1), text(&c, 2)), ("a", "", ""));
        let span = wit::Span {
            start: u32::MAX,
            len: u32::MAX,
        };
        assert!(run(&c.labels, span).is_empty());
    }
}
