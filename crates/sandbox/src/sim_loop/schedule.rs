//! The scheduler: scheduling gates, batches from the FIFO queue, filtering and least-allocated
//! scoring of nodes (decisions from `crate::sim_sched`), assumed pods, bindings and their
//! outcome, and FailedScheduling reports.
//!
//! Must not run pods: that is `kubelet_pods.rs`.

use jiff::Timestamp;

use crate::sim_sched::{NodeUnfit, Usage, filter_node, fit_error_message, least_allocated_score};

use super::events::{EventSpec, build_event};
use super::pods::{gated, split_key, wants_scheduler, with_scheduled_condition};
use super::requests::api_code;
use super::sim::Sim;
use super::types::{PodKey, Req, SCHEDULE_BATCH, SCHEDULER_NAME};

impl Sim {
    pub(super) fn mark_gated(&mut self, key: &str) {
        let Some(entry) = self.pods.get(key) else {
            return;
        };
        let already = entry
            .pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("SchedulingGated"));
        if !already {
            let body = with_scheduled_condition(
                &entry.pod,
                "SchedulingGated",
                "Scheduling is blocked due to non-empty scheduling gates",
                Timestamp::now(),
            );
            self.backlog.push_back(Req::Status {
                key: key.to_string(),
                body,
                kubelet: false,
            });
        }
    }

    pub(super) fn schedule_batch(&mut self) {
        for _ in 0..SCHEDULE_BATCH {
            let Some((_, key)) = self.queue.pop_first() else {
                break;
            };
            self.schedule_one(&key);
        }
    }

    fn schedule_one(&mut self, key: &str) {
        let Some(entry) = self.pods.get(key) else {
            return;
        };
        if !wants_scheduler(&entry.pod) || entry.assumed.is_some() || gated(&entry.pod) {
            return;
        }
        let empty = Usage::default();
        let mut best: Option<(i128, &str)> = None;
        let mut unfit: Vec<NodeUnfit> = Vec::new();
        for (name, (node, alloc)) in &self.nodes {
            let usage = self.usage.get(name).unwrap_or(&empty);
            match filter_node(&entry.pod, &entry.requests, node, alloc, usage) {
                Ok(()) => {
                    let score = least_allocated_score(&entry.non_zero, alloc, usage);
                    if best.is_none_or(|(b, _)| score > b) {
                        best = Some((score, name));
                    }
                }
                Err(u) => unfit.push(u),
            }
        }
        if let Some((_, node)) = best {
            let node = node.to_string();
            let uid = entry.pod.metadata.uid.clone().unwrap_or_default();
            if let Some(e) = self.pods.get_mut(key) {
                e.assumed = Some(node.clone());
            }
            self.uncount(key);
            self.count(key);
            self.backlog.push_back(Req::Bind {
                key: key.to_string(),
                uid,
                node,
            });
            return;
        }
        let message = fit_error_message(self.nodes.len(), &unfit);
        self.unschedulable.insert((entry.seq, key.to_string()));
        if entry.last_unschedulable.as_deref() == Some(message.as_str()) {
            return;
        }
        tracing::debug!(pod = key, %message, "sandbox scheduler: pod unschedulable");
        let body =
            with_scheduled_condition(&entry.pod, "Unschedulable", &message, Timestamp::now());
        let event = build_event(EventSpec {
            pod: &entry.pod,
            field_path: None,
            kind: "Warning",
            reason: "FailedScheduling",
            message: message.clone(),
            component: SCHEDULER_NAME,
            host: None,
            action: Some("Scheduling"),
        });
        self.backlog.push_back(Req::Status {
            key: key.to_string(),
            body,
            kubelet: false,
        });
        self.backlog.push_back(Req::Event(Box::new(event)));
        if let Some(e) = self.pods.get_mut(key) {
            e.last_unschedulable = Some(message);
        }
    }

    pub(super) fn on_bind_done(
        &mut self,
        key: PodKey,
        uid: String,
        node: String,
        result: Result<(), kube::Error>,
    ) {
        let Some(entry) = self.pods.get(&key) else {
            return;
        };
        if entry.pod.metadata.uid.as_deref() != Some(uid.as_str()) {
            return;
        }
        match result {
            Ok(()) => {
                let (ns, name) = split_key(&key);
                let event = build_event(EventSpec {
                    pod: &entry.pod,
                    field_path: None,
                    kind: "Normal",
                    reason: "Scheduled",
                    message: format!("Successfully assigned {ns}/{name} to {node}"),
                    component: SCHEDULER_NAME,
                    host: None,
                    action: Some("Binding"),
                });
                self.backlog.push_back(Req::Event(Box::new(event)));
            }
            Err(error) => {
                tracing::warn!(pod = %key, %node, %error, "sandbox scheduler: binding failed");
                let seq = entry.seq;
                if let Some(e) = self.pods.get_mut(&key) {
                    e.assumed = None;
                }
                self.uncount(&key);
                self.count(&key);
                self.cluster_changed();
                // Not found / conflict: the watch tells what happened; otherwise try again.
                if !matches!(api_code(&error), Some(404 | 409)) {
                    self.queue.insert((seq, key));
                }
            }
        }
    }
}
