//! The kubelets of this simulation's nodes: the delay queue of timers, admitting a bound pod,
//! starting, readiness, exits and restarts, graceful deletion, the container events, and
//! `pods/status` writes coalesced one in flight per pod (pod logic from `crate::sim_pod`).
//!
//! Must not schedule: bindings are `schedule.rs`.

use std::cmp::Reverse;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::json;
use tokio::time::Instant;

use crate::sim_pod::{PodRun, Script};

use super::events::{EventSpec, build_event};
use super::pods::{bound_node, is_terminal};
use super::requests::api_code;
use super::sim::Sim;
use super::types::{KubeletPod, PodKey, RESYNC_DELAY, Req, TimerKind};

impl Sim {
    fn add_timer(&mut self, after: Duration, kind: TimerKind, key: &str, uid: &str, epoch: u64) {
        self.seq += 1;
        self.timers.push(Reverse((
            Instant::now() + after,
            self.seq,
            kind,
            key.to_string(),
            uid.to_string(),
            epoch,
        )));
    }

    /// Reacts to a pod bound to one of our nodes.
    pub(super) fn kubelet_sync(&mut self, key: &str) {
        let Some(entry) = self.pods.get(key) else {
            return;
        };
        let pod = &entry.pod;
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let deleting = pod.metadata.deletion_timestamp.is_some();
        let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0);
        let fresh = match self.kubelet.get(key) {
            Some(k) if k.uid == uid => None,
            _ => {
                let (script, errors) = Script::from_pod(pod);
                for error in errors {
                    tracing::warn!(pod = key, %error, "sandbox kubelet: annotation ignored");
                }
                Some((
                    KubeletPod {
                        uid: uid.clone(),
                        node: bound_node(pod).unwrap_or_default().to_string(),
                        script,
                        restart_policy: pod
                            .spec
                            .as_ref()
                            .and_then(|s| s.restart_policy.clone())
                            .unwrap_or_else(|| "Always".into()),
                        admitted: Timestamp::now(),
                        epoch: 0,
                        run: None,
                        writing: false,
                        dirty: false,
                        deleting: false,
                        stop_at: None,
                        stopped: false,
                    },
                    is_terminal(pod),
                ))
            }
        };
        if let Some((kp, terminal)) = fresh {
            if let Some(old) = self.kubelet.insert(key.to_string(), kp)
                && let (Some(run), Some(node)) = (old.run, self.own.get_mut(&old.node))
            {
                node.pool.release(run.ip);
            }
            if !terminal {
                self.add_timer(self.cfg.pod_start_delay, TimerKind::Start, key, &uid, 0);
            }
        }
        // Graceful deletion: the containers stop within the grace period (see `Script::stop_plan`),
        // their terminated states are written, then the pod is deleted with grace 0. A later
        // delete with a shorter grace period brings the stop forward, as for a real kubelet.
        if deleting
            && let Some(kp) = self.kubelet.get_mut(key)
            && !kp.stopped
        {
            kp.deleting = true;
            let (wait, killed) = if kp.run.is_some() {
                kp.script.stop_plan(grace)
            } else {
                // No container started yet: nothing to stop.
                (Duration::ZERO, false)
            };
            let at = Instant::now() + wait;
            if kp.stop_at.is_none_or(|(t, _)| at < t) {
                kp.stop_at = Some((at, killed));
                self.add_timer(wait, TimerKind::Stop, key, &uid, 0);
            }
        }
    }

    pub(super) fn fire_timers(&mut self) {
        let now = Instant::now();
        while self.timers.peek().is_some_and(|Reverse(t)| t.0 <= now) {
            let Some(Reverse((_, _, kind, key, uid, epoch))) = self.timers.pop() else {
                break;
            };
            self.on_timer(kind, &key, &uid, epoch);
        }
    }

    fn on_timer(&mut self, kind: TimerKind, key: &str, uid: &str, epoch: u64) {
        let Some(kp) = self.kubelet.get_mut(key).filter(|k| k.uid == uid) else {
            return;
        };
        let now = Timestamp::now();
        match kind {
            TimerKind::Start => {
                if kp.run.is_some() || kp.deleting || kp.stopped {
                    return;
                }
                let Some(entry) = self.pods.get(key) else {
                    return;
                };
                let Some(own) = self.own.get_mut(&kp.node) else {
                    return;
                };
                let Some(ip) = own.pool.allocate() else {
                    tracing::warn!(pod = key, node = %kp.node, "sandbox kubelet: pod network exhausted; pod not started");
                    return;
                };
                let ready_now = kp.script.ready_after.is_none_or(|d| d.is_zero());
                let run = PodRun::start(&entry.pod, ip, &own.host_ip, kp.admitted, now, ready_now);
                kp.run = Some(run);
                let (exit_after, ready_after) = (kp.script.exit_after, kp.script.ready_after);
                let node = kp.node.clone();
                self.container_events(key, &node);
                self.write_status(key);
                if let Some(d) = ready_after.filter(|_| !ready_now) {
                    self.add_timer(d, TimerKind::Ready, key, uid, 0);
                }
                if let Some(d) = exit_after {
                    self.add_timer(d, TimerKind::Exit, key, uid, 0);
                }
            }
            TimerKind::Ready => {
                if kp.epoch != epoch || kp.deleting {
                    return;
                }
                if let Some(run) = kp.run.as_mut() {
                    run.set_ready(now);
                    self.write_status(key);
                }
            }
            TimerKind::Exit => {
                if kp.epoch != epoch || kp.deleting {
                    return;
                }
                let Some(run) = kp.run.as_mut() else {
                    return;
                };
                let restarted = run.exit(&kp.script, &kp.restart_policy, now);
                kp.epoch += 1;
                let epoch = kp.epoch;
                let ready_gate = run.ready_gate;
                let (exit_after, ready_after) = (kp.script.exit_after, kp.script.ready_after);
                self.write_status(key);
                if restarted {
                    if let Some(d) = ready_after.filter(|_| !ready_gate) {
                        self.add_timer(d, TimerKind::Ready, key, uid, epoch);
                    }
                    if let Some(d) = exit_after {
                        self.add_timer(d, TimerKind::Exit, key, uid, epoch);
                    }
                }
            }
            TimerKind::Stop => {
                if kp.stopped {
                    return;
                }
                let Some((at, killed)) = kp.stop_at else {
                    return;
                };
                if at > Instant::now() {
                    // A timer of an earlier, longer plan: the current plan has its own.
                    return;
                }
                kp.stopped = true;
                match kp.run.as_mut() {
                    Some(run) if run.any_running() => {
                        run.stop(&kp.script, killed, now);
                        tracing::debug!(pod = key, killed, "sandbox kubelet: containers stopped");
                        // The delete follows once this status is written.
                        self.write_status(key);
                    }
                    _ => self.backlog.push_back(Req::Delete {
                        key: key.to_string(),
                        uid: uid.to_string(),
                    }),
                }
            }
            TimerKind::Resync => {
                if !kp.stopped {
                    self.write_status(key);
                }
            }
        }
    }

    /// Pulled/Created/Started for every container, as the kubelet reports them.
    fn container_events(&mut self, key: &str, node: &str) {
        if !self.cfg.kubelet_events {
            return;
        }
        let Some(entry) = self.pods.get(key) else {
            return;
        };
        let pod = &entry.pod;
        let Some(spec) = pod.spec.as_ref() else {
            return;
        };
        let init = spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| ("initContainers", c));
        let main = spec.containers.iter().map(|c| ("containers", c));
        for (field, c) in init.chain(main) {
            let image = c.image.clone().unwrap_or_default();
            for (reason, message) in [
                (
                    "Pulled",
                    format!("Container image \"{image}\" already present on machine"),
                ),
                ("Created", format!("Created container: {}", c.name)),
                ("Started", format!("Started container {}", c.name)),
            ] {
                let event = build_event(EventSpec {
                    pod,
                    field_path: Some(format!("spec.{field}{{{}}}", c.name)),
                    kind: "Normal",
                    reason,
                    message,
                    component: "kubelet",
                    host: Some(node),
                    action: None,
                });
                self.backlog.push_back(Req::Event(Box::new(event)));
            }
        }
    }

    /// Sends the pod's status, one write in flight per pod (later changes are coalesced).
    fn write_status(&mut self, key: &str) {
        let Some(kp) = self.kubelet.get_mut(key) else {
            return;
        };
        if kp.writing {
            kp.dirty = true;
            return;
        }
        let Some(run) = kp.run.as_ref() else {
            return;
        };
        kp.writing = true;
        kp.dirty = false;
        // The UID in the patch is a precondition, as the kubelet's status manager sends it.
        let body = json!({"metadata": {"uid": kp.uid}, "status": run.status()});
        self.backlog.push_back(Req::Status {
            key: key.to_string(),
            body,
            kubelet: true,
        });
    }

    pub(super) fn on_kubelet_status_done(&mut self, key: PodKey, result: Result<(), kube::Error>) {
        let Some(kp) = self.kubelet.get_mut(&key) else {
            return;
        };
        kp.writing = false;
        let (uid, epoch) = (kp.uid.clone(), kp.epoch);
        if kp.dirty {
            self.write_status(&key);
        } else if kp.stopped {
            // The terminated states are written (or the pod is gone): delete it, as the
            // kubelet's status manager does once the containers stopped.
            if let Err(error) = &result
                && api_code(error) != Some(404)
            {
                tracing::warn!(pod = %key, %error, "sandbox kubelet: final status write failed; deleting anyway");
            }
            self.backlog.push_back(Req::Delete { key, uid });
        } else if let Err(error) = result {
            tracing::warn!(pod = %key, %error, "sandbox kubelet: status write failed");
            if !api_code(&error).is_some_and(|c| (400..500).contains(&c)) {
                self.add_timer(RESYNC_DELAY, TimerKind::Resync, &key, &uid, epoch);
            }
        }
    }
}
