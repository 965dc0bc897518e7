//! Following pods and nodes from their watches: the node list with allocatable resources, the pod
//! table with each pod's requests, per-node usage (bound plus assumed pods), and the queues a
//! change of the cluster wakes up.
//!
//! Bookkeeping only: must not decide placements or write to the API.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::watcher;
use tokio::time::Instant;

use crate::sim_sched::{node_allocatable, pod_requests};

use super::pods::{bound_node, gated, is_terminal, key_of, wants_scheduler};
use super::sim::Sim;
use super::types::{PodEntry, PodKey, RETRY_INTERVAL};

impl Sim {
    pub(super) fn on_node_event(&mut self, ev: watcher::Event<Node>) {
        match ev {
            watcher::Event::Init => self.node_relist = Some(HashSet::new()),
            watcher::Event::InitApply(node) | watcher::Event::Apply(node) => {
                let name = node.metadata.name.clone().unwrap_or_default();
                if let Some(seen) = self.node_relist.as_mut() {
                    seen.insert(name.clone());
                }
                let alloc = node_allocatable(&node);
                self.nodes.insert(name, (node, alloc));
                self.cluster_changed();
            }
            watcher::Event::Delete(node) => {
                if let Some(name) = node.metadata.name.as_ref() {
                    self.nodes.remove(name);
                }
                self.cluster_changed();
            }
            watcher::Event::InitDone => {
                if let Some(seen) = self.node_relist.take() {
                    self.nodes.retain(|n, _| seen.contains(n));
                }
                self.nodes_synced = true;
                self.cluster_changed();
            }
        }
    }

    pub(super) fn on_pod_event(&mut self, ev: watcher::Event<Pod>) {
        match ev {
            watcher::Event::Init => self.pod_relist = Some(HashSet::new()),
            watcher::Event::InitApply(pod) | watcher::Event::Apply(pod) => {
                if let Some(seen) = self.pod_relist.as_mut() {
                    seen.insert(key_of(&pod));
                }
                self.upsert_pod(pod);
            }
            watcher::Event::Delete(pod) => self.remove_pod(&key_of(&pod)),
            watcher::Event::InitDone => {
                if let Some(seen) = self.pod_relist.take() {
                    let gone: Vec<PodKey> = self
                        .pods
                        .keys()
                        .filter(|k| !seen.contains(*k))
                        .cloned()
                        .collect();
                    for key in gone {
                        self.remove_pod(&key);
                    }
                }
                self.pods_synced = true;
            }
        }
    }

    /// A pod stopped or started holding resources, or a node changed: unschedulable pods may
    /// fit now.
    pub(super) fn cluster_changed(&mut self) {
        if self.retry_at.is_none() && !self.unschedulable.is_empty() {
            self.retry_at = Some((self.last_retry + RETRY_INTERVAL).max(Instant::now()));
        }
    }

    pub(super) fn retry_unschedulable(&mut self) {
        self.retry_at = None;
        self.last_retry = Instant::now();
        self.queue.append(&mut self.unschedulable);
    }

    pub(super) fn uncount(&mut self, key: &str) {
        let Some(entry) = self.pods.get_mut(key) else {
            return;
        };
        if let Some(node) = entry.counted.take()
            && let Some(u) = self.usage.get_mut(&node)
        {
            u.remove_pod(&entry.requests, &entry.non_zero);
        }
    }

    pub(super) fn count(&mut self, key: &str) {
        let Some(entry) = self.pods.get_mut(key) else {
            return;
        };
        let node = if is_terminal(&entry.pod) {
            None
        } else {
            bound_node(&entry.pod)
                .map(str::to_string)
                .or_else(|| entry.assumed.clone())
        };
        if let Some(node) = node {
            self.usage
                .entry(node.clone())
                .or_default()
                .add_pod(&entry.requests, &entry.non_zero);
            entry.counted = Some(node);
        }
    }

    fn upsert_pod(&mut self, pod: Pod) {
        let key = key_of(&pod);
        let uid = pod.metadata.uid.clone();
        if self
            .pods
            .get(&key)
            .is_some_and(|e| e.pod.metadata.uid != uid)
        {
            self.remove_pod(&key);
        }
        let was_counted = self.pods.get(&key).and_then(|e| e.counted.clone());
        self.uncount(&key);
        let seq = self.seq;
        let entry = self.pods.entry(key.clone()).or_insert_with(|| PodEntry {
            requests: pod_requests(&pod, false),
            non_zero: pod_requests(&pod, true),
            pod: Pod::default(),
            seq,
            counted: None,
            assumed: None,
            last_unschedulable: None,
        });
        if entry.seq == seq {
            self.seq += 1;
        }
        if bound_node(&pod).is_some() {
            entry.assumed = None;
        }
        entry.pod = pod;
        let entry_seq = entry.seq;
        self.count(&key);
        let now_counted = self.pods.get(&key).and_then(|e| e.counted.clone());
        if was_counted.is_some() && now_counted.is_none() {
            self.cluster_changed();
        }
        let Some(entry) = self.pods.get(&key) else {
            return;
        };
        let pending = self.schedule && wants_scheduler(&entry.pod) && entry.assumed.is_none();
        let is_gated = gated(&entry.pod);
        let on_own_node = bound_node(&entry.pod).is_some_and(|n| self.own.contains_key(n));
        let slot = (entry_seq, key.clone());
        if pending && is_gated {
            self.queue.remove(&slot);
            self.mark_gated(&key);
        } else if pending {
            if !self.unschedulable.contains(&slot) {
                self.queue.insert(slot);
            }
        } else {
            self.queue.remove(&slot);
            self.unschedulable.remove(&slot);
        }
        if on_own_node {
            self.kubelet_sync(&key);
        }
    }

    fn remove_pod(&mut self, key: &str) {
        self.uncount(key);
        if let Some(entry) = self.pods.remove(key) {
            self.queue.remove(&(entry.seq, key.to_string()));
            self.unschedulable.remove(&(entry.seq, key.to_string()));
            if bound_node(&entry.pod).is_some() || entry.assumed.is_some() {
                self.cluster_changed();
            }
        }
        if let Some(kp) = self.kubelet.remove(key)
            && let (Some(run), Some(node)) = (kp.run, self.own.get_mut(&kp.node))
        {
            node.pool.release(run.ip);
        }
    }
}
