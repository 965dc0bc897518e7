//! The nodes a policy is shown: the node cache's nodes as plain models, with what each has
//! free for a job or a group of jobs given what the ledger holds.
//!
//! Owns: the parsed node models (kept by resourceVersion, in name order) and the free-capacity
//! views built from them. Must not touch: what is held (the ledger's `Book`) or any decision.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::ObjectRef;

use super::{Allocator, Ledger};
use crate::plugin;
use diorch_core::key::ObjectKey;
use diorch_core::model as view;

/// The node cache's nodes as models, by name and in name order.
#[derive(Default)]
pub(super) struct NodeModels {
    /// Each node's model and the resourceVersion it was parsed from (`None`: parsed again on
    /// every use, as nodes that never went through an API server have none).
    by_name: HashMap<String, (Option<String>, Arc<view::NodeModel>)>,
    sorted: Vec<Arc<view::NodeModel>>,
    /// Changes whenever `sorted` does.
    generation: u64,
    /// The nodes as modelled for a placement that leaves no job out, for the book version
    /// and generation they were made at: every waiting job's admission sees the same nodes
    /// until something changes, and a burst of them reuses one copy.
    plain: Option<(u64, u64, Arc<[plugin::Node]>)>,
}

impl NodeModels {
    /// Brings the models up to `nodes`; returns them in name order.
    pub(super) fn refresh(&mut self, nodes: &[Arc<Node>]) -> Vec<Arc<view::NodeModel>> {
        let mut changed = nodes.len() != self.by_name.len();
        for node in nodes {
            let name = node.metadata.name.as_deref().unwrap_or_default();
            let rv = node.metadata.resource_version.as_ref();
            let current = self
                .by_name
                .get(name)
                .is_some_and(|(seen, _)| seen.is_some() && seen.as_ref() == rv);
            if !current {
                changed = true;
                self.by_name.insert(
                    name.to_string(),
                    (rv.cloned(), Arc::new(view::NodeModel::of(node))),
                );
            }
        }
        if changed {
            if self.by_name.len() != nodes.len() {
                let names: HashSet<&str> = nodes
                    .iter()
                    .map(|n| n.metadata.name.as_deref().unwrap_or_default())
                    .collect();
                self.by_name.retain(|name, _| names.contains(name.as_str()));
            }
            // A stable order: the same cluster gives a policy the same input.
            self.sorted = self.by_name.values().map(|(_, m)| m.clone()).collect();
            self.sorted.sort_by(|a, b| a.name().cmp(b.name()));
            self.generation += 1;
        }
        self.sorted.clone()
    }
}

impl Allocator {
    /// The cluster's nodes with free capacity as seen by `key`'s placement: allocatable minus
    /// every bound pod, except pods of jobs whose allocation the ledger holds (counted from the
    /// allocation instead, so a reservation counts before its pods exist) and of `key` itself.
    pub(super) fn model_nodes(&self, ledger: &Ledger, key: &ObjectKey) -> Arc<[plugin::Node]> {
        self.model_nodes_without(ledger, &HashSet::from([key.clone()]))
    }

    /// [`Allocator::model_nodes`] as seen by placing all of `keys` at once.
    pub(super) fn model_nodes_without(
        &self,
        ledger: &Ledger,
        keys: &HashSet<ObjectKey>,
    ) -> Arc<[plugin::Node]> {
        let used = ledger.book.used_without(keys);
        let mut cache = self
            .node_models
            .lock()
            // Refreshing replaces entries whole: a panic cannot leave one half-written.
            .unwrap_or_else(|e| e.into_inner());
        let models = cache.refresh(&self.nodes.state());
        let at = (ledger.book.version(), cache.generation);
        if used.leaves_nothing_out()
            && let Some((version, generation, nodes)) = &cache.plain
            && (*version, *generation) == at
        {
            return nodes.clone();
        }
        let nodes: Arc<[plugin::Node]> = models
            .iter()
            .map(|m| m.with_used(used.on(m.name()).as_deref()))
            .collect();
        if used.leaves_nothing_out() {
            cache.plain = Some((at.0, at.1, nodes.clone()));
        }
        nodes
    }

    /// [`Allocator::model_nodes_without`] for the nodes `names` only (each once; unknown ones
    /// left out, so an answer naming a node that went away does not fit).
    pub(super) fn model_nodes_named<'a>(
        &self,
        ledger: &Ledger,
        keys: &HashSet<ObjectKey>,
        names: impl IntoIterator<Item = &'a str>,
    ) -> Vec<plugin::Node> {
        let used = ledger.book.used_without(keys);
        let names: std::collections::BTreeSet<&str> = names.into_iter().collect();
        names
            .into_iter()
            .filter_map(|name| {
                let node = self.nodes.get(&ObjectRef::new(name))?;
                Some(view::model_node(&node, used.on(name).as_deref()))
            })
            .collect()
    }
}
