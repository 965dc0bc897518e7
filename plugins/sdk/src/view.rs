//! Borrowed views of a policy call's `cluster` record, and the model-to-WIT encoding.
//!
//! The WIT input is columns of integers (one string table, one list per field of each table,
//! `starts` columns for a row's run of another table), so the host copies it into the guest in a
//! few dozen memcpys. These views let the `diorch-policies` code read it where it was copied: a
//! node costs no allocation at all, where converting it into an owned `diorch_policies::Node`
//! cost about a dozen (name, labels, taints, extended resources), more than the placement
//! itself. Jobs are few and small, so they are converted to the owned model.
//!
//! Every read is bounds-checked: an entry out of range reads as 0 or empty, so a view never
//! panics whatever the columns hold.

use std::ops::Range;

use diorch_policies::preempt::Running;
use diorch_policies::{Amounts, Job, Node, NodeInfo, Resources, Taint, TaintEffect, Task};

use crate::wit;

/// The `placements` entry of a replica that is not placed.
pub const NO_NODE: u32 = u32::MAX;

/// Entry `i` of a column; 0 when out of range.
fn at<T: Copy + Default>(column: &[T], i: usize) -> T {
    column.get(i).copied().unwrap_or_default()
}

/// The entries of a table of `len` rows that row `i` owns by a `starts` column: empty when out
/// of range or decreasing.
fn run(starts: &[u32], i: usize, len: usize) -> Range<usize> {
    let (Some(&start), Some(&end)) = (starts.get(i), starts.get(i + 1)) else {
        return 0..0;
    };
    let end = (end as usize).min(len);
    (start as usize).min(end)..end
}

/// String `id` of the cluster's string table; `""` for an id or offsets out of range.
pub fn text(cluster: &wit::Cluster, id: u32) -> &str {
    let i = id as usize;
    let Some(&end) = cluster.string_ends.get(i) else {
        return "";
    };
    let start = match i.checked_sub(1) {
        Some(prev) => at(&cluster.string_ends, prev),
        None => 0,
    };
    cluster
        .strings
        .get(start as usize..end as usize)
        .unwrap_or("")
}

/// The string that entry `i` of a column of string ids names; `""` when out of range.
fn str_at<'a>(cluster: &'a wit::Cluster, column: &[u32], i: usize) -> &'a str {
    column.get(i).map_or("", |&id| text(cluster, id))
}

/// A taint's effect by its code; an unknown code reads as NoSchedule, the strictest.
fn effect(code: u8) -> TaintEffect {
    match code {
        1 => TaintEffect::PreferNoSchedule,
        2 => TaintEffect::NoExecute,
        _ => TaintEffect::NoSchedule,
    }
}

fn effect_code(e: TaintEffect) -> u8 {
    match e {
        TaintEffect::NoSchedule => 0,
        TaintEffect::PreferNoSchedule => 1,
        TaintEffect::NoExecute => 2,
    }
}

/// One node of the call, read in place.
#[derive(Clone, Copy)]
pub struct NodeView<'a> {
    cluster: &'a wit::Cluster,
    node: usize,
    /// The effects of the node's taints as bits (`1 << code`): policies ask for them for every
    /// candidate node of every replica, and scanning the taint list each time was most of a
    /// Wasm re-plan.
    effects: u8,
    ready: bool,
    /// Read once here: policies read them for every candidate node of every replica, and a
    /// field of the view costs less in Wasm than a bounds-checked column read.
    allocatable: ResourcesView<'a>,
    free: ResourcesView<'a>,
}

impl<'a> NodeView<'a> {
    /// Views of every node of `cluster`, in index order.
    pub fn all(cluster: &'a wit::Cluster) -> Vec<NodeView<'a>> {
        let taints = &cluster.taints;
        (0..cluster.nodes.name.len())
            .map(|node| NodeView {
                cluster,
                node,
                effects: run(&cluster.nodes.taint_starts, node, taints.effect.len())
                    .map(|t| effect(at(&taints.effect, t)))
                    .fold(0, |bits, e| bits | 1 << effect_code(e)),
                ready: at(&cluster.nodes.ready, node) != 0,
                allocatable: ResourcesView::new(cluster, &cluster.nodes.allocatable, node),
                free: ResourcesView::new(cluster, &cluster.nodes.free, node),
            })
            .collect()
    }

    /// The node's labels, in order.
    pub fn labels(&self) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        let cluster = self.cluster;
        let labels = &cluster.labels;
        run(&cluster.nodes.label_starts, self.node, labels.key.len()).map(move |l| {
            (
                str_at(cluster, &labels.key, l),
                str_at(cluster, &labels.value, l),
            )
        })
    }

    /// The node's taints, in order.
    pub fn taints(&self) -> impl Iterator<Item = (&'a str, &'a str, TaintEffect)> + 'a {
        let cluster = self.cluster;
        let taints = &cluster.taints;
        run(&cluster.nodes.taint_starts, self.node, taints.key.len()).map(move |t| {
            (
                str_at(cluster, &taints.key, t),
                str_at(cluster, &taints.value, t),
                effect(at(&taints.effect, t)),
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
            ready: self.ready(),
        }
    }
}

impl NodeInfo for NodeView<'_> {
    type Amounts<'b>
        = ResourcesView<'b>
    where
        Self: 'b;

    fn name(&self) -> &str {
        str_at(self.cluster, &self.cluster.nodes.name, self.node)
    }

    fn ready(&self) -> bool {
        self.ready
    }

    fn has_taint(&self, e: TaintEffect) -> bool {
        self.effects & (1 << effect_code(e)) != 0
    }

    fn label(&self, key: &str) -> Option<&str> {
        self.labels().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    fn allocatable(&self) -> ResourcesView<'_> {
        self.allocatable
    }

    fn free(&self) -> ResourcesView<'_> {
        self.free
    }
}

/// One row of a `resource-columns`: the three common amounts read once, extended resources in
/// place.
#[derive(Clone, Copy)]
pub struct ResourcesView<'a> {
    cpu_millis: u64,
    memory_bytes: u64,
    gpus: u32,
    cluster: &'a wit::Cluster,
    columns: &'a wit::ResourceColumns,
    row: usize,
}

impl<'a> ResourcesView<'a> {
    fn new(
        cluster: &'a wit::Cluster,
        columns: &'a wit::ResourceColumns,
        row: usize,
    ) -> ResourcesView<'a> {
        ResourcesView {
            cpu_millis: at(&columns.cpu_millis, row),
            memory_bytes: at(&columns.memory_bytes, row),
            gpus: at(&columns.gpus, row),
            cluster,
            columns,
            row,
        }
    }

    fn quantities(&self) -> impl Iterator<Item = (&str, u64)> {
        let (cluster, c) = (self.cluster, self.columns);
        run(&c.extended_starts, self.row, c.extended_name.len()).map(move |i| {
            (
                str_at(cluster, &c.extended_name, i),
                at(&c.extended_amount, i),
            )
        })
    }
}

impl Amounts for ResourcesView<'_> {
    fn cpu_millis(&self) -> u64 {
        self.cpu_millis
    }

    fn memory_bytes(&self) -> u64 {
        self.memory_bytes
    }

    fn gpus(&self) -> u32 {
        self.gpus
    }

    fn extended(&self, name: &str) -> u64 {
        self.quantities()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, q)| q)
    }

    fn to_resources(&self) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis(),
            memory_bytes: self.memory_bytes(),
            gpus: self.gpus(),
            extended: self.quantities().map(|(n, q)| (n.to_string(), q)).collect(),
        }
    }
}

/// The number of jobs in the call.
pub fn job_count(cluster: &wit::Cluster) -> usize {
    cluster.jobs.key.len()
}

/// Job `j` of `cluster` as the owned model.
pub fn job(cluster: &wit::Cluster, j: usize) -> Job {
    let (jobs, tasks) = (&cluster.jobs, &cluster.tasks);
    Job {
        key: str_at(cluster, &jobs.key, j).to_string(),
        priority: at(&jobs.priority, j),
        preemptible: at(&jobs.preemptible, j) != 0,
        tasks: run(&jobs.task_starts, j, tasks.name.len())
            .map(|t| Task {
                name: str_at(cluster, &tasks.name, t).to_string(),
                task_type: str_at(cluster, &tasks.task_type, t).to_string(),
                replicas: at(&tasks.replicas, t),
                min_replicas: at(&tasks.min_replicas, t),
                max_replicas: at(&tasks.max_replicas, t),
                requests: ResourcesView::new(cluster, &tasks.requests, t).to_resources(),
            })
            .collect(),
        current: run(&jobs.current_starts, j, cluster.placements.len())
            .map(|p| Some(at(&cluster.placements, p)).filter(|&n| n != NO_NODE))
            .collect(),
        profilings: str_at(cluster, &jobs.profilings, j).to_string(),
        age_seconds: at(&jobs.age_seconds, j),
    }
}

fn resource_columns() -> wit::ResourceColumns {
    wit::ResourceColumns {
        cpu_millis: Vec::new(),
        memory_bytes: Vec::new(),
        gpus: Vec::new(),
        extended_starts: vec![0],
        extended_name: Vec::new(),
        extended_amount: Vec::new(),
    }
}

/// Builds a `cluster` record; ids and starts are positions, so it needs no lookups.
struct Encoder {
    c: wit::Cluster,
}

impl Encoder {
    fn new() -> Encoder {
        Encoder {
            c: wit::Cluster {
                strings: String::new(),
                string_ends: Vec::new(),
                nodes: wit::NodeTable {
                    name: Vec::new(),
                    label_starts: vec![0],
                    taint_starts: vec![0],
                    allocatable: resource_columns(),
                    free: resource_columns(),
                    ready: Vec::new(),
                },
                jobs: wit::JobTable {
                    key: Vec::new(),
                    priority: Vec::new(),
                    preemptible: Vec::new(),
                    task_starts: vec![0],
                    current_starts: vec![0],
                    profilings: Vec::new(),
                    age_seconds: Vec::new(),
                },
                tasks: wit::TaskTable {
                    name: Vec::new(),
                    task_type: Vec::new(),
                    replicas: Vec::new(),
                    min_replicas: Vec::new(),
                    max_replicas: Vec::new(),
                    requests: resource_columns(),
                },
                placements: Vec::new(),
                labels: wit::LabelTable {
                    key: Vec::new(),
                    value: Vec::new(),
                },
                taints: wit::TaintTable {
                    key: Vec::new(),
                    value: Vec::new(),
                    effect: Vec::new(),
                },
            },
        }
    }

    fn text(&mut self, s: &str) -> u32 {
        self.c.strings.push_str(s);
        self.c.string_ends.push(self.c.strings.len() as u32);
        self.c.string_ends.len() as u32 - 1
    }

    /// Appends `r` as the next row of `columns` (which `pick` selects in the cluster).
    fn resources(
        &mut self,
        r: &Resources,
        pick: fn(&mut wit::Cluster) -> &mut wit::ResourceColumns,
    ) {
        for (name, amount) in &r.extended {
            let name = self.text(name);
            let columns = pick(&mut self.c);
            columns.extended_name.push(name);
            columns.extended_amount.push(*amount);
        }
        let columns = pick(&mut self.c);
        let end = columns.extended_name.len() as u32;
        columns.cpu_millis.push(r.cpu_millis);
        columns.memory_bytes.push(r.memory_bytes);
        columns.gpus.push(r.gpus);
        columns.extended_starts.push(end);
    }
}

/// The `cluster` record the host sends for `jobs` on `nodes` (the host has its own copy of this
/// encoding for its bindings); for plugins' native tests.
pub fn encode(jobs: &[Job], nodes: &[Node]) -> wit::Cluster {
    let mut e = Encoder::new();
    for n in nodes {
        let name = e.text(&n.name);
        e.c.nodes.name.push(name);
        for (k, v) in &n.labels {
            let (key, value) = (e.text(k), e.text(v));
            e.c.labels.key.push(key);
            e.c.labels.value.push(value);
        }
        let labels_end = e.c.labels.key.len() as u32;
        e.c.nodes.label_starts.push(labels_end);
        for t in &n.taints {
            let (key, value) = (e.text(&t.key), e.text(&t.value));
            e.c.taints.key.push(key);
            e.c.taints.value.push(value);
            e.c.taints.effect.push(effect_code(t.effect));
        }
        let taints_end = e.c.taints.key.len() as u32;
        e.c.nodes.taint_starts.push(taints_end);
        e.resources(&n.allocatable, |c| &mut c.nodes.allocatable);
        e.resources(&n.free, |c| &mut c.nodes.free);
        e.c.nodes.ready.push(u8::from(n.ready));
    }
    for j in jobs {
        let key = e.text(&j.key);
        e.c.jobs.key.push(key);
        e.c.jobs.priority.push(j.priority);
        e.c.jobs.preemptible.push(u8::from(j.preemptible));
        for t in &j.tasks {
            let (name, task_type) = (e.text(&t.name), e.text(&t.task_type));
            let tasks = &mut e.c.tasks;
            tasks.name.push(name);
            tasks.task_type.push(task_type);
            tasks.replicas.push(t.replicas);
            tasks.min_replicas.push(t.min_replicas);
            tasks.max_replicas.push(t.max_replicas);
            e.resources(&t.requests, |c| &mut c.tasks.requests);
        }
        let tasks_end = e.c.tasks.name.len() as u32;
        e.c.jobs.task_starts.push(tasks_end);
        e.c.placements
            .extend(j.current.iter().map(|n| n.unwrap_or(NO_NODE)));
        let current_end = e.c.placements.len() as u32;
        e.c.jobs.current_starts.push(current_end);
        let profilings = e.text(&j.profilings);
        e.c.jobs.profilings.push(profilings);
        e.c.jobs.age_seconds.push(j.age_seconds);
    }
    e.c
}

/// The candidates of a `preempt` call (contract 0.5.0): the cluster's jobs after the first, with
/// what `table` says each may lose (an entry out of range reads as 0: may neither shrink nor be
/// evicted).
pub fn candidates(cluster: &wit::Cluster, table: &wit::CandidateTable) -> Vec<Running> {
    (1..job_count(cluster))
        .map(|j| {
            let c = j - 1;
            Running {
                job: job(cluster, j),
                may_shrink: at(&table.may_shrink, c) != 0,
                may_evict: at(&table.may_evict, c) != 0,
                lost_seconds: at(&table.lost_seconds, c),
                checkpoint_age_seconds: table
                    .checkpoint_age_seconds
                    .get(c)
                    .copied()
                    .filter(|&s| s != u64::MAX),
            }
        })
        .collect()
}

/// The `candidate-table` the host sends for `candidates`; for plugins' native tests.
pub fn encode_candidates(candidates: &[Running]) -> wit::CandidateTable {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (Job, Node) {
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
        (job, node)
    }

    #[test]
    fn views_read_back_what_was_encoded() {
        let (job, node) = sample();
        let bare = Node {
            name: "bare".into(),
            labels: vec![],
            taints: vec![Taint {
                key: "gone".into(),
                value: String::new(),
                effect: TaintEffect::NoExecute,
            }],
            allocatable: Resources::new(1, 2, 0),
            free: Resources::new(0, 0, 0),
            ready: false,
        };
        let other = Job {
            key: "ns/other".into(),
            tasks: vec![],
            current: vec![],
            ..job.clone()
        };
        let nodes = [node.clone(), bare.clone()];
        let c = encode(&[job.clone(), other.clone()], &nodes);
        let views = NodeView::all(&c);
        assert_eq!(views.len(), 2);
        assert_eq!(views[0].to_node(), node);
        assert_eq!(views[1].to_node(), bare);
        assert_eq!(views[0].label("kind"), Some("é"));
        assert_eq!(views[0].label("none"), None);
        assert!(views[0].prefers_no_schedule() && views[0].schedulable());
        assert!(!views[1].schedulable() && !views[1].prefers_no_schedule());
        assert_eq!(NodeInfo::free(&views[0]).extended("x/y"), 5);
        assert_eq!(NodeInfo::free(&views[0]).extended("gone"), 0);
        assert_eq!(job_count(&c), 2);
        assert_eq!(super::job(&c, 0), job);
        assert_eq!(super::job(&c, 1), other);
    }

    #[test]
    fn out_of_range_ids_and_starts_read_as_empty() {
        let mut c = encode(&[], &[]);
        assert_eq!(text(&c, 0), "");
        c.strings = "ab".into();
        c.string_ends = vec![1, 9];
        assert_eq!((text(&c, 0), text(&c, 1), text(&c, 2)), ("a", "", ""));
        assert_eq!(run(&[0], 0, 5), 0..0);
        assert_eq!(run(&[3, 1], 0, 5), 1..1);
        assert_eq!(run(&[2, 9], 0, 5), 2..5);
        assert_eq!(run(&[7, 9], 0, 5), 5..5);
    }

    #[test]
    fn inconsistent_columns_read_as_zero_and_empty_without_panicking() {
        let (job, node) = sample();
        let mut c = encode(std::slice::from_ref(&job), std::slice::from_ref(&node));
        c.nodes.free.gpus.clear();
        c.nodes.label_starts = vec![0, u32::MAX];
        c.taints.effect = vec![9];
        c.jobs.task_starts = vec![5, 2];
        c.jobs.priority.clear();
        let views = NodeView::all(&c);
        assert_eq!(NodeInfo::free(&views[0]).gpus(), 0);
        assert_eq!(views[0].labels().count(), 2, "clamped to the table");
        // An unknown effect is taken as the strictest.
        assert!(!views[0].has_taint(TaintEffect::PreferNoSchedule));
        assert!(views[0].has_taint(TaintEffect::NoSchedule) && !views[0].schedulable());
        assert_eq!(
            views[0].taints().next().map(|t| t.2),
            Some(TaintEffect::NoSchedule)
        );
        let read = super::job(&c, 0);
        assert!(read.tasks.is_empty());
        assert_eq!(read.priority, 0);
        assert_eq!(super::job(&c, 7).key, "");
    }
}
