//! The simulated cluster under the controller: the API server's pod store and its validation,
//! kube-scheduler's binding, the kubelets starting and ending pods, and nodes going down and
//! coming back.
//!
//! kube-scheduler here is a model of what the operator predicts, not a copy of the real one.
//! Its filter shares `diorch_core::fit` with the sandbox's scheduler (`diorch-sandbox`,
//! `sim_sched`): requests fit what a node has left (NodeResourcesFit), and a NoSchedule or
//! NoExecute taint keeps a pod off (TaintToleration). What differs, and why:
//! - tolerations: none are honoured, the pod model ([`UsagePod`]) holds requests only, so a
//!   tainted node takes only pods pinned to it (the allocator's own placement);
//! - readiness: a node is skipped while this simulation has it down (`down`), not by its Ready
//!   condition, and cordon, node affinity (other than the pin) and the pod count are not
//!   modelled (the simulator's nodes have none of them);
//! - pinned pods (the allocator's node in a `metadata.name` affinity) are checked for room
//!   only, not for taints or readiness: the allocator chose the node, and a pod on a down node
//!   waits for the node (`start_pods`);
//! - scoring: the mean share of CPU and memory left before the pod, where the sandbox scores
//!   kube-scheduler's LeastAllocated in whole percents, counting the pod with its non-zero
//!   defaults; the two can pick different nodes on mixed node sizes. Moving this one to the
//!   sandbox's rule is possible but changes the simulator's placements (its results), so it is
//!   left to a change of its own.
//!
//! Owns: what happens to a pod once the decision step asked for it. Must not touch: any
//! decision of the controller or the allocator (the parent module calls them).

use super::*;

impl Sim<'_> {
    /// Creates `pod` as the API server and the scheduler would; a pod the API server would
    /// refuse as invalid (a container without an image) is refused here too.
    pub(super) async fn create_pod(&mut self, i: usize, mut pod: Pod) -> Ended {
        if let Some(refusal) = invalid_pod(&pod) {
            return refusal;
        }
        self.next_uid += 1;
        pod.metadata.uid = Some(format!("pod-{}", self.next_uid));
        pod.metadata.creation_timestamp = Some(Time(VirtualClock::wall_at(self.now)));
        let node = pinned_node(&pod);
        if let Some(spec) = pod.spec.as_mut() {
            spec.node_name.clone_from(&node);
        }
        let name = pod.metadata.name.clone().unwrap_or_default();
        let usage: Option<UsagePod> = serde_json::to_value(&pod)
            .ok()
            .and_then(|v| serde_json::from_value(v).ok());
        let mut cached = CachedPod::from(pod);
        cached.status = Some(CachedPodStatus {
            phase: Some("Pending".into()),
            ..CachedPodStatus::default()
        });
        if let Some(mut usage) = usage {
            match usage.node.clone() {
                Some(node) if self.fits(&node, &usage) => self.take(&node, &usage),
                Some(node) => {
                    // kube-scheduler leaves a pod whose node lacks room unbound until room
                    // frees (a job moving onto the room another is leaving, in one re-plan).
                    self.bind_waits += 1;
                    usage.node = None;
                    if let Some(spec) = cached.spec.as_mut() {
                        spec.node_name = None;
                    }
                    self.unbound
                        .entry(node)
                        .or_default()
                        .push((i, name.clone()));
                }
                // Not pinned (a job that is not preemptible): kube-scheduler picks the node.
                None => match self.schedule(&usage) {
                    Some(node) => {
                        usage.node = Some(node.clone());
                        if let Some(spec) = cached.spec.as_mut() {
                            spec.node_name = Some(node.clone());
                        }
                        self.take(&node, &usage);
                    }
                    None => {
                        self.bind_waits += 1;
                        self.unbound
                            .entry(String::new())
                            .or_default()
                            .push((i, name.clone()));
                    }
                },
            }
            self.allocator.pod_event(&Event::Apply(usage.clone())).await;
            self.jobs[i].usage.insert(name.clone(), usage);
        }
        self.jobs[i].pods.insert(name, cached);
        self.restart_clock(i);
        Ended::Done
    }

    /// The job's pods changed: its work pauses, and its pods are started `pod_start` from now
    /// (superseding what was scheduled; the rate is set again once they run).
    pub(super) fn restart_clock(&mut self, i: usize) {
        let sj = &mut self.jobs[i];
        sj.generation += 1;
        let generation = sj.generation;
        sj.work_left -= sj.rate * (self.now - sj.since_ms) as f64 / 1000.0;
        sj.since_ms = self.now;
        set_rate(&mut self.running, &mut sj.rate, 0.0);
        self.push(
            self.now + ms(self.options.pod_start),
            Ev::PodsUp(i, generation),
        );
    }

    /// Whether `pod`'s requests fit on `node` beside its bound, live pods (kube-scheduler's
    /// resource fit).
    pub(super) fn fits(&self, node: &str, pod: &UsagePod) -> bool {
        let Some(allocatable) = self.allocatable.get(node) else {
            return false;
        };
        // Used never passes allocatable here (`take` counts that as a bug), so the shared
        // rule's "a zero request always fits" changes nothing.
        let none = Resources::default();
        let used = self.node_used.get(node).unwrap_or(&none);
        diorch_core::fit::resources_fit(&pod.requests, allocatable, used)
    }

    /// kube-scheduler's choice for a pod no allocation pins: among the nodes that are up,
    /// untainted and have room, the least allocated (mean of the CPU and memory shares left),
    /// ties by name.
    pub(super) fn schedule(&self, pod: &UsagePod) -> Option<String> {
        let mut best: Option<(f64, &String)> = None;
        for (name, node) in &self.nodes {
            // No tolerations: see the module doc.
            let taints = node.spec.as_ref().and_then(|s| s.taints.as_deref());
            let tainted =
                diorch_core::fit::blocking_taint(&[], taints.unwrap_or_default()).is_some();
            if tainted || self.down.contains(name) {
                continue;
            }
            let mut bound = pod.clone();
            bound.node = Some(name.clone());
            if !self.fits(name, &bound) {
                continue;
            }
            let (Some(allocatable), used) = (self.allocatable.get(name), self.node_used.get(name))
            else {
                continue;
            };
            let left = |r: &str| {
                let total = allocatable.get(r);
                if total <= 0 {
                    return 0.0;
                }
                (total - used.map_or(0, |u| u.get(r))) as f64 / total as f64
            };
            let score = (left("cpu") + left("memory")) / 2.0;
            if best.is_none_or(|(s, _)| score > s) {
                best = Some((score, name));
            }
        }
        best.map(|(_, name)| name.clone())
    }

    /// Binds the pods waiting for room on `node` that fit now, then the unpinned pods waiting
    /// for any node, each in the order they came.
    pub(super) async fn bind_waiting(&mut self, node: &str) {
        for queue_node in [node.to_string(), String::new()] {
            let Some(queue) = self.unbound.remove(&queue_node) else {
                continue;
            };
            let mut still = Vec::new();
            for (i, name) in queue {
                let Some(usage) = self.jobs[i].usage.get(&name).cloned() else {
                    continue; // deleted meanwhile
                };
                let target = if queue_node.is_empty() {
                    self.schedule(&usage)
                } else {
                    let mut bound = usage.clone();
                    bound.node = Some(queue_node.clone());
                    self.fits(&queue_node, &bound).then(|| queue_node.clone())
                };
                let Some(target) = target else {
                    still.push((i, name));
                    continue;
                };
                let mut bound = usage;
                bound.node = Some(target.clone());
                self.take(&target, &bound);
                if let Some(spec) = self.jobs[i]
                    .pods
                    .get_mut(&name)
                    .and_then(|p| p.spec.as_mut())
                {
                    spec.node_name = Some(target);
                }
                self.allocator.pod_event(&Event::Apply(bound.clone())).await;
                self.jobs[i].usage.insert(name, bound);
                self.restart_clock(i);
            }
            if !still.is_empty() {
                self.unbound.insert(queue_node, still);
            }
        }
    }

    /// Removes a pod; whether it held room.
    pub(super) async fn delete_pod(&mut self, i: usize, name: &str) -> bool {
        self.jobs[i].pods.remove(name);
        let Some(usage) = self.jobs[i].usage.remove(name) else {
            return false;
        };
        let held = !usage.terminal && usage.node.is_some();
        if held && let Some(node) = &usage.node {
            self.release(node, &usage);
        }
        let node = usage.node.clone();
        self.allocator.pod_event(&Event::Delete(usage)).await;
        if let Some(node) = node.filter(|_| held) {
            self.bind_waiting(&node).await;
        }
        held
    }

    /// A live pod bound to `node` takes its requests there. Pods are bound only where they
    /// fit ([`Sim::fits`]), so an over-commit counted here is a bug of this module.
    pub(super) fn take(&mut self, node: &str, pod: &UsagePod) {
        *self.used_gpus.entry(node.to_string()).or_default() += gpus_of(pod);
        let used = self.node_used.entry(node.to_string()).or_default();
        used.add(&pod.requests);
        let allocatable = self.allocatable.get(node);
        if used
            .iter()
            .any(|(name, amount)| amount > allocatable.map_or(0, |a| a.get(name)))
        {
            self.overcommits += 1;
        }
    }

    pub(super) fn release(&mut self, node: &str, pod: &UsagePod) {
        if let Some(used) = self.node_used.get_mut(node) {
            used.sub(&pod.requests);
        }
        let gpus = gpus_of(pod);
        if let Some(used) = self.used_gpus.get_mut(node) {
            *used = used.saturating_sub(gpus);
            if *used == 0 {
                self.used_gpus.remove(node);
            }
        }
    }

    /// A node goes down or comes back. Down: NotReady, and its pods are evicted (deleted at
    /// once: the node lifecycle controller's eviction, without its toleration delay). Up: Ready
    /// again, and pods waiting for it start. Either way the allocator hears of the node
    /// change, as its node watch would: waiting jobs are woken and a re-plan follows a second
    /// later.
    pub(super) async fn node_changed(&mut self, name: &str, ready: bool) -> Result<(), SimError> {
        let was_down = self.down.contains(name);
        if ready != was_down {
            return Ok(());
        }
        if ready {
            self.down.remove(name);
        } else {
            self.down.insert(name.to_string());
        }
        if let Some(node) = self.nodes.get_mut(name) {
            let status = if ready { "True" } else { "False" };
            if let Some(conditions) = node.status.as_mut().and_then(|s| s.conditions.as_mut()) {
                for c in conditions.iter_mut().filter(|c| c.type_ == "Ready") {
                    c.status = status.to_string();
                }
            }
            let version = node
                .metadata
                .resource_version
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            node.metadata.resource_version = Some((version + 1).to_string());
            self.node_writer
                .apply_watcher_event(&Event::Apply(node.clone()));
        }
        let mut touched = BTreeSet::new();
        for i in 0..self.jobs.len() {
            let on_node: Vec<String> = self.jobs[i]
                .pods
                .iter()
                .filter(|(_, p)| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name))
                .map(|(n, _)| n.clone())
                .collect();
            if on_node.is_empty() {
                continue;
            }
            touched.insert(i);
            if ready {
                let sj = &mut self.jobs[i];
                sj.generation += 1;
                let generation = sj.generation;
                self.push(
                    self.now + ms(self.options.pod_start),
                    Ev::PodsUp(i, generation),
                );
            } else {
                for pod in on_node {
                    self.delete_pod(i, &pod).await;
                }
            }
        }
        if ready {
            self.bind_waiting(name).await;
        }
        self.allocator.capacity_freed().await;
        for i in touched {
            if !ready {
                self.settle(i);
            }
            self.reconcile(i).await?;
        }
        if self.replan_at.is_none() && !self.options.optimize_period.is_zero() {
            let at = self.now + REPLAN_SETTLE_MS;
            self.replan_at = Some(at);
            self.push(at, Ev::Optimize(false));
        }
        Ok(())
    }

    /// The kubelets: every pending pod of the job on a node that is up runs, ready.
    pub(super) fn start_pods(&mut self, i: usize) {
        let down = &self.down;
        for pod in self.jobs[i].pods.values_mut() {
            let on_down_node = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_none_or(|n| down.contains(n));
            let status = pod.status.get_or_insert_with(Default::default);
            if status.phase.as_deref() == Some("Pending") && !on_down_node {
                status.phase = Some("Running".into());
                status.conditions = Some(vec![CachedCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                }]);
            }
        }
    }

    /// The work is done: every pod of the job succeeds.
    pub(super) async fn end_pods(&mut self, i: usize) {
        let names: Vec<String> = self.jobs[i].pods.keys().cloned().collect();
        for name in names {
            if let Some(pod) = self.jobs[i].pods.get_mut(&name) {
                pod.status = Some(CachedPodStatus {
                    phase: Some("Succeeded".into()),
                    ..CachedPodStatus::default()
                });
            }
            let Some(usage) = self.jobs[i].usage.get_mut(&name) else {
                continue;
            };
            if usage.terminal {
                continue;
            }
            usage.terminal = true;
            let usage = usage.clone();
            if let Some(node) = &usage.node {
                self.release(node, &usage);
            }
            let node = usage.node.clone();
            self.allocator.pod_event(&Event::Apply(usage)).await;
            if let Some(node) = node {
                self.bind_waiting(&node).await;
            }
        }
        set_rate(&mut self.running, &mut self.jobs[i].rate, 0.0);
        self.allocator.capacity_freed().await;
    }
}

/// The API server's answer to a pod with a container without an image (its validation's
/// words): 422 Invalid.
fn invalid_pod(pod: &Pod) -> Option<Ended> {
    let containers = pod.spec.as_ref().map(|s| s.containers.as_slice())?;
    let index = containers
        .iter()
        .position(|c| c.image.as_deref().is_none_or(str::is_empty))?;
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    Some(Ended::Failed {
        code: Some(422),
        message: format!(
            "Pod \"{name}\" is invalid: spec.containers[{index}].image: Required value"
        ),
    })
}
