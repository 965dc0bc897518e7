//! The allocator's book: the allocations it holds, and per-node usage kept up to date one
//! change at a time, so an admission costs O(nodes) instead of a pass over every pod and every
//! held allocation.
//!
//! What a node counts as used is, for every node `n`:
//! `Σ requests of bound, non-terminal pods on n whose job is not held`
//! `+ Σ usage on n of every held allocation`:
//! a held job is counted from its allocation (so a reservation counts before its pods exist),
//! every other pod from its requests. [`Book::used_without`] leaves some jobs out (the jobs being
//! placed). [`view::node_usage`] computes the same from scratch; a property test keeps the two
//! equal.
//!
//! Owns: the held allocations and the pod index. Must not touch: the caches it is fed from.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::time::Instant;

use crate::key::ObjectKey;
use crate::model::UsagePod;
use crate::placement::SlotNodes;
use crate::resources::Resources;

/// An allocation the allocator counts as taken.
#[derive(Clone, Debug)]
pub struct Held {
    pub uid: String,
    /// For returning the same answer again.
    pub slots: SlotNodes,
    /// What the job takes on each node it uses (its replicas there, summed).
    pub usage: Vec<(String, Resources)>,
    /// Seen in the job's status (else it is a reservation this process made).
    pub confirmed: bool,
    pub since: Instant,
}

/// A counted pod: bound to `node`, not terminal. Boxed strings and the job's name alone (its
/// namespace is the pod's): the book holds one per pod, and a cluster 20 000 of them.
#[derive(Clone, Debug)]
struct PodEntry {
    node: Box<str>,
    /// Its `diengine/job` label: the DIJob, in the pod's namespace.
    job: Option<Box<str>>,
    requests: Resources,
}

/// A pod's key in the book: `namespace/name`, one allocation (neither part holds a `/`).
fn pod_key(pod: &UsagePod) -> String {
    let m = &pod.metadata;
    let (namespace, name) = (m.namespace.as_deref(), m.name.as_deref());
    format!(
        "{}/{}",
        namespace.unwrap_or_default(),
        name.unwrap_or_default()
    )
}

/// The key of the job `job` of the pod keyed `pod_key`.
fn job_of(pod_key: &str, job: &str) -> ObjectKey {
    let namespace = pod_key.split_once('/').map_or("", |(ns, _)| ns);
    ObjectKey::new(namespace, job)
}

/// Per-node sums, without zero entries (a node whose usage went back to nothing has none).
type NodeSums = HashMap<String, Resources>;

fn add(sums: &mut NodeSums, node: &str, r: &Resources) {
    match sums.get_mut(node) {
        Some(sum) => sum.add(r),
        None => {
            sums.insert(node.to_string(), r.clone());
        }
    }
    prune(sums, node);
}

fn sub(sums: &mut NodeSums, node: &str, r: &Resources) {
    let sum = sums.entry(node.to_string()).or_default();
    sum.sub(r);
    prune(sums, node);
}

/// One job's per-node sums: a job's pods sit on a few nodes, and a `HashMap` takes ~220 B
/// before its first entry (one per job in the book).
type JobSums = Vec<(Box<str>, Resources)>;

/// Adds `r` on `node` to a job's sums (`add` for [`JobSums`]).
fn job_add(sums: &mut JobSums, node: &str, r: &Resources) {
    job_change(sums, node, |sum| sum.add(r));
}

/// Takes `r` on `node` off a job's sums (`sub` for [`JobSums`]).
fn job_sub(sums: &mut JobSums, node: &str, r: &Resources) {
    job_change(sums, node, |sum| sum.sub(r));
}

/// Changes `node`'s sum, dropping zero amounts, and the node once nothing is left.
fn job_change(sums: &mut JobSums, node: &str, change: impl FnOnce(&mut Resources)) {
    let at = match sums.iter().position(|(n, _)| **n == *node) {
        Some(at) => at,
        None => {
            // Grown one entry at a time: one per node the job's pods are on.
            sums.reserve_exact(1);
            sums.push((node.into(), Resources::default()));
            sums.len() - 1
        }
    };
    if let Some((_, sum)) = sums.get_mut(at) {
        change(sum);
        sum.retain_nonzero();
        if sum.is_empty() {
            sums.swap_remove(at);
        }
    }
}

/// Drops zero amounts, and the node once nothing is left.
fn prune(sums: &mut NodeSums, node: &str) {
    if let Some(sum) = sums.get_mut(node) {
        sum.retain_nonzero();
        if sum.is_empty() {
            sums.remove(node);
        }
    }
}

#[derive(Default)]
pub struct Book {
    held: HashMap<ObjectKey, Held>,
    /// Counted pods, by [`pod_key`].
    pods: HashMap<Box<str>, PodEntry>,
    /// Per-node sums of each DIJob's counted pods, by job key.
    pods_by_job: HashMap<ObjectKey, JobSums>,
    /// What each node counts as used (see the module doc).
    counted: NodeSums,
    /// Bumped by every change that may change what a node counts as used, so a caller that
    /// computed something from the book without holding it can tell whether it went stale.
    version: u64,
}

impl Book {
    pub fn get(&self, key: &ObjectKey) -> Option<&Held> {
        self.held.get(key)
    }

    /// Changes with every change of what the book counts (equal versions: equal usage).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Holds `held` for `key`, replacing what it held before.
    pub fn hold(&mut self, key: ObjectKey, held: Held) {
        for (node, r) in &held.usage {
            add(&mut self.counted, node, r);
        }
        let usage_changed = match self.held.insert(key.clone(), held) {
            Some(old) => {
                for (node, r) in &old.usage {
                    sub(&mut self.counted, node, r);
                }
                self.held.get(&key).is_none_or(|new| new.usage != old.usage)
            }
            // Its pods were counted from their requests until now.
            None => {
                self.uncount_pods_of(&key);
                true
            }
        };
        // Every reconcile of a placed job holds the same allocation again: no change.
        if usage_changed {
            self.version += 1;
        }
    }

    /// Stops holding `key`'s allocation; its pods (if any) count from their requests again.
    pub fn release(&mut self, key: &ObjectKey) -> Option<Held> {
        let old = self.held.remove(key)?;
        self.version += 1;
        for (node, r) in &old.usage {
            sub(&mut self.counted, node, r);
        }
        if let Some(sums) = self.pods_by_job.get(key) {
            for (node, r) in sums {
                add(&mut self.counted, node, r);
            }
        }
        Some(old)
    }

    /// Releases every held allocation `keep` says no to.
    pub fn retain(&mut self, mut keep: impl FnMut(&Held) -> bool) {
        let gone: Vec<ObjectKey> = self
            .held
            .iter()
            .filter(|(_, h)| !keep(h))
            .map(|(k, _)| k.clone())
            .collect();
        for key in gone {
            self.release(&key);
        }
    }

    fn uncount_pods_of(&mut self, key: &ObjectKey) {
        if let Some(sums) = self.pods_by_job.get(key) {
            for (node, r) in sums {
                sub(&mut self.counted, node, r);
            }
        }
    }

    /// A pod was added or changed (watch `Apply`).
    pub fn apply_pod(&mut self, pod: &UsagePod) {
        let key = pod_key(pod);
        let node = pod.node.as_deref().filter(|_| !pod.terminal);
        // Most pod events (status, conditions) change nothing the book counts.
        if let (Some(old), Some(node)) = (self.pods.get(key.as_str()), node)
            && *old.node == *node
            && old.requests == pod.requests
            && old.job.as_deref() == pod.job.as_deref()
        {
            return;
        }
        self.remove_pod(&key);
        let Some(node) = node else {
            return;
        };
        self.version += 1;
        let entry = PodEntry {
            node: node.into(),
            job: pod.job.as_deref().map(Box::from),
            requests: pod.requests.clone(),
        };
        let job = entry.job.as_deref().map(|job| job_of(&key, job));
        if let Some(job) = &job {
            job_add(
                self.pods_by_job.entry(job.clone()).or_default(),
                node,
                &entry.requests,
            );
        }
        if !job.as_ref().is_some_and(|j| self.held.contains_key(j)) {
            add(&mut self.counted, node, &entry.requests);
        }
        self.pods.insert(key.into_boxed_str(), entry);
    }

    /// A pod is gone (watch `Delete`).
    pub fn delete_pod(&mut self, pod: &UsagePod) {
        self.remove_pod(&pod_key(pod));
    }

    fn remove_pod(&mut self, key: &str) {
        let Some(old) = self.pods.remove(key) else {
            return;
        };
        self.version += 1;
        let job = old.job.as_deref().map(|job| job_of(key, job));
        if let Some(job) = &job
            && let Some(sums) = self.pods_by_job.get_mut(job)
        {
            job_sub(sums, &old.node, &old.requests);
            if sums.is_empty() {
                self.pods_by_job.remove(job);
            }
        }
        if !job.as_ref().is_some_and(|j| self.held.contains_key(j)) {
            sub(&mut self.counted, &old.node, &old.requests);
        }
    }

    /// Starts the pod index over from a full list (after a watch re-list).
    pub fn reset_pods<'a>(&mut self, pods: impl IntoIterator<Item = &'a UsagePod>) {
        self.version += 1;
        self.pods.clear();
        self.pods_by_job.clear();
        self.counted.clear();
        for held in self.held.values() {
            for (node, r) in &held.usage {
                add(&mut self.counted, node, r);
            }
        }
        for pod in pods {
            self.apply_pod(pod);
        }
    }

    /// Usage per node as seen by placing `keys`: what is counted, less what `keys` hold (or,
    /// for those not held, their pods).
    pub fn used_without(&self, keys: &HashSet<ObjectKey>) -> Used<'_> {
        let mut less = NodeSums::new();
        for key in keys {
            match self.held.get(key) {
                Some(held) => {
                    for (node, r) in &held.usage {
                        add(&mut less, node, r);
                    }
                }
                None => {
                    for (node, r) in self.pods_by_job.get(key).into_iter().flatten() {
                        add(&mut less, node, r);
                    }
                }
            }
        }
        Used {
            counted: &self.counted,
            less,
        }
    }
}

/// Usage per node with some jobs left out ([`Book::used_without`]).
pub struct Used<'a> {
    counted: &'a NodeSums,
    less: NodeSums,
}

impl Used<'_> {
    /// Whether this is the book's usage as it is: no job left out takes anything.
    pub fn leaves_nothing_out(&self) -> bool {
        self.less.is_empty()
    }

    /// What `node` counts as used; `None` when nothing.
    pub fn on(&self, node: &str) -> Option<Cow<'_, Resources>> {
        let counted = self.counted.get(node);
        match self.less.get(node) {
            None => counted.map(Cow::Borrowed),
            Some(less) => {
                let mut used = counted.cloned().unwrap_or_default();
                used.sub(less);
                used.retain_nonzero();
                (!used.is_empty()).then_some(Cow::Owned(used))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model as view;
    use proptest::prelude::*;
    use serde_json::json;

    fn pod(
        name: &str,
        job: Option<&str>,
        node: Option<&str>,
        gpus: u8,
        terminal: bool,
    ) -> UsagePod {
        let labels = job.map(|j| json!({ crate::api::labels::JOB: j }));
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": gpus.to_string()}}}]},
            "status": {"phase": if terminal { "Succeeded" } else { "Running" }}
        }))
        .expect("pod")
    }

    fn held_on(nodes: &[&str], gpus: u8) -> Held {
        let mut r = Resources::default();
        r.set("nvidia.com/gpu", i128::from(gpus) * 1000);
        Held {
            uid: String::new(),
            slots: nodes.iter().map(|n| n.to_string()).collect(),
            usage: nodes.iter().map(|n| (n.to_string(), r.clone())).collect(),
            confirmed: true,
            since: Instant::now(),
        }
    }

    /// The from-scratch answer, as the allocator computed it before the book.
    fn scratch(
        pods: &HashMap<String, UsagePod>,
        held: &HashMap<ObjectKey, Held>,
        keys: &HashSet<ObjectKey>,
    ) -> NodeSums {
        let mut usage = view::node_usage(pods.values(), |job| {
            keys.contains(job) || held.contains_key(job)
        });
        for (job, h) in held {
            if keys.contains(job) {
                continue;
            }
            for (node, r) in &h.usage {
                usage.entry(node.clone()).or_default().add(r);
            }
        }
        for r in usage.values_mut() {
            r.retain_nonzero();
        }
        usage.retain(|_, r| !r.is_empty());
        usage
    }

    fn seen(book: &Book, nodes: &[&str], keys: &HashSet<ObjectKey>) -> NodeSums {
        let used = book.used_without(keys);
        nodes
            .iter()
            .filter_map(|n| used.on(n).map(|r| (n.to_string(), r.into_owned())))
            .collect()
    }

    #[test]
    fn a_held_job_counts_from_its_allocation_and_its_pods_again_once_released() {
        let mut book = Book::default();
        book.apply_pod(&pod("a-0", Some("a"), Some("n0"), 2, false));
        book.apply_pod(&pod("x", None, Some("n1"), 1, false));
        let none = HashSet::new();
        let gpus = |s: &NodeSums, n: &str| s.get(n).and_then(|r| r.amount("nvidia.com/gpu"));
        assert_eq!(gpus(&seen(&book, &["n0", "n1"], &none), "n0"), Some(2000));
        // Held on n1 with 4 GPUs: n0's pod no longer counts, the allocation does.
        let a = ObjectKey::new("ns", "a");
        book.hold(a.clone(), held_on(&["n1"], 4));
        let s = seen(&book, &["n0", "n1"], &none);
        assert_eq!(gpus(&s, "n0"), None);
        assert_eq!(gpus(&s, "n1"), Some(5000));
        // Left out (being placed): neither its allocation nor its pods count.
        let s = seen(&book, &["n0", "n1"], &HashSet::from([a.clone()]));
        assert_eq!(gpus(&s, "n1"), Some(1000));
        book.release(&a);
        assert_eq!(gpus(&seen(&book, &["n0"], &none), "n0"), Some(2000));
        // A finished pod frees its node.
        book.apply_pod(&pod("a-0", Some("a"), Some("n0"), 2, true));
        assert_eq!(seen(&book, &["n0"], &none).get("n0"), None);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Pod {
            name: u8,
            job: Option<u8>,
            node: Option<u8>,
            gpus: u8,
            terminal: bool,
        },
        DeletePod(u8),
        Hold {
            job: u8,
            nodes: Vec<u8>,
            gpus: u8,
        },
        Release(u8),
        Retain(u8),
        Reset,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..12u8, proptest::option::of(0..4u8), proptest::option::of(0..3u8), 0..4u8, any::<bool>())
                .prop_map(|(name, job, node, gpus, terminal)| Op::Pod { name, job, node, gpus, terminal }),
            2 => (0..12u8).prop_map(Op::DeletePod),
            2 => (0..4u8, proptest::collection::vec(0..3u8, 0..3), 0..4u8)
                .prop_map(|(job, nodes, gpus)| Op::Hold { job, nodes, gpus }),
            1 => (0..4u8).prop_map(Op::Release),
            1 => (0..4u8).prop_map(Op::Retain),
            1 => Just(Op::Reset),
        ]
    }

    proptest! {
        /// Any sequence of pod events and held changes leaves the book answering what a pass
        /// over every pod and every held allocation answers, for every set of left-out jobs.
        #[test]
        fn the_book_equals_the_from_scratch_usage(ops in proptest::collection::vec(op(), 0..60)) {
            let nodes = ["n0", "n1", "n2"];
            let mut book = Book::default();
            let mut pods: HashMap<String, UsagePod> = HashMap::new();
            let mut held: HashMap<ObjectKey, Held> = HashMap::new();
            let job_key = |j: u8| ObjectKey::new("ns", format!("j{j}"));
            let key_sets: Vec<HashSet<ObjectKey>> = [vec![], vec![0], vec![1, 2]]
                .into_iter()
                .map(|keys| keys.into_iter().map(job_key).collect())
                .collect();
            let mut before: Vec<NodeSums> = key_sets.iter().map(|k| seen(&book, &nodes, k)).collect();
            let mut version = book.version();
            for op in ops {
                match op {
                    Op::Pod { name, job, node, gpus, terminal } => {
                        let p = pod(
                            &format!("p{name}"),
                            job.map(|j| format!("j{j}")).as_deref(),
                            node.map(|n| nodes[usize::from(n)]),
                            gpus,
                            terminal,
                        );
                        book.apply_pod(&p);
                        pods.insert(format!("ns/p{name}"), p);
                    }
                    Op::DeletePod(name) => {
                        if let Some(p) = pods.remove(&format!("ns/p{name}")) {
                            book.delete_pod(&p);
                        }
                    }
                    Op::Hold { job: j, nodes: on, gpus } => {
                        let on: Vec<&str> = on.iter().map(|n| nodes[usize::from(*n)]).collect();
                        let h = held_on(&on, gpus);
                        book.hold(job_key(j), h.clone());
                        held.insert(job_key(j), h);
                    }
                    Op::Release(j) => {
                        let key = job_key(j);
                        prop_assert_eq!(book.release(&key).is_some(), held.remove(&key).is_some());
                    }
                    Op::Retain(gpus) => {
                        let keep = |h: &Held| h.usage.iter().all(|(_, r)| r.amount("nvidia.com/gpu") != Some(i128::from(gpus) * 1000));
                        book.retain(keep);
                        held.retain(|_, h| keep(h));
                    }
                    Op::Reset => book.reset_pods(pods.values()),
                }
                let after: Vec<NodeSums> = key_sets.iter().map(|k| seen(&book, &nodes, k)).collect();
                for (keys, usage) in key_sets.iter().zip(&after) {
                    prop_assert_eq!(usage, &scratch(&pods, &held, keys));
                }
                // An unchanged version promises unchanged usage (the allocator skips its
                // re-check of a policy's answer on it).
                if book.version() == version {
                    prop_assert_eq!(&after, &before);
                }
                (before, version) = (after, book.version());
            }
        }
    }
}
