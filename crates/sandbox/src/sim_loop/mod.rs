//! The simulated cluster's event loop: one task that follows pods and nodes with watches, keeps
//! the scheduler's per-node usage (bound plus assumed pods), schedules pending pods, runs the
//! kubelets' timers from a single delay queue, and sends API requests with bounded concurrency.
//! Behaviour is documented in `kubelet.rs`; decisions come from `sim_sched.rs`/`sim_pod.rs`.
//!
//! Must not touch the sandbox's store or server: everything goes through the `kube` client.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::net::Ipv4Addr;
use std::pin::Pin;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Binding, Event, EventSource, Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, DeleteParams, Patch, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::sim_config::{ClusterArgs, node_name};
use super::sim_pod::{IpPool, PodRun, Script, rfc3339};
use super::sim_sched::{
    NodeUnfit, Resources, Usage, filter_node, fit_error_message, least_allocated_score,
    node_allocatable, pod_requests,
};

const SCHEDULER_NAME: &str = "default-scheduler";
/// Unschedulable pods are retried at most this often after the cluster changes (the real
/// scheduler also backs off before retrying).
const RETRY_INTERVAL: Duration = Duration::from_millis(250);
/// Pods scheduled per loop turn, so watch events and timers keep flowing under load.
const SCHEDULE_BATCH: usize = 256;
/// Delay before a status write that failed for a transient reason is retried.
const RESYNC_DELAY: Duration = Duration::from_secs(1);

/// `namespace/name`.
type PodKey = String;

struct PodEntry {
    pod: Pod,
    /// Arrival order: the scheduling queue is FIFO.
    seq: u64,
    requests: Resources,
    non_zero: Resources,
    /// Node whose usage counts this pod.
    counted: Option<String>,
    /// Node the scheduler chose while the binding is in flight.
    assumed: Option<String>,
    /// Last FailedScheduling message written, so an unchanged verdict is not rewritten.
    last_unschedulable: Option<String>,
}

/// One of this simulation's nodes.
struct OwnNode {
    host_ip: String,
    pool: IpPool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum TimerKind {
    Start,
    Ready,
    Exit,
    Stop,
    Resync,
}

/// What the kubelet of a pod's node knows about it.
struct KubeletPod {
    uid: String,
    node: String,
    script: Script,
    restart_policy: String,
    admitted: Timestamp,
    /// Bumped at each exit so timers of a previous run are ignored.
    epoch: u64,
    run: Option<PodRun>,
    writing: bool,
    dirty: bool,
    deleting: bool,
    /// When the containers of a deleted pod stop, and whether they are killed then.
    stop_at: Option<(Instant, bool)>,
    /// The containers stopped: once their terminated states are written, the pod is deleted.
    stopped: bool,
}

enum Req {
    Bind {
        key: PodKey,
        uid: String,
        node: String,
    },
    Status {
        key: PodKey,
        body: Value,
        /// Kubelet writes are serialised per pod.
        kubelet: bool,
    },
    Event(Box<Event>),
    Delete {
        key: PodKey,
        uid: String,
    },
}

enum Done {
    Bind {
        key: PodKey,
        uid: String,
        node: String,
        result: Result<(), kube::Error>,
    },
    KubeletStatus {
        key: PodKey,
        result: Result<(), kube::Error>,
    },
    Other,
}

type Timer = Reverse<(Instant, u64, TimerKind, PodKey, String, u64)>;

pub(super) struct Sim {
    client: kube::Client,
    cfg: ClusterArgs,
    /// Whether this simulation also schedules pods (false when attached beside a real
    /// kube-scheduler).
    schedule: bool,
    own: HashMap<String, OwnNode>,
    nodes: BTreeMap<String, (Node, Resources)>,
    usage: HashMap<String, Usage>,
    pods: HashMap<PodKey, PodEntry>,
    seq: u64,
    queue: BTreeSet<(u64, PodKey)>,
    unschedulable: BTreeSet<(u64, PodKey)>,
    retry_at: Option<Instant>,
    last_retry: Instant,
    kubelet: HashMap<PodKey, KubeletPod>,
    timers: BinaryHeap<Timer>,
    backlog: VecDeque<Req>,
    inflight: FuturesUnordered<Pin<Box<dyn Future<Output = Done> + Send>>>,
    pods_synced: bool,
    nodes_synced: bool,
    pod_relist: Option<HashSet<PodKey>>,
    node_relist: Option<HashSet<String>>,
}

fn key_of(pod: &Pod) -> PodKey {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

fn split_key(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

fn bound_node(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// Whether this scheduler should place the pod (ignoring scheduling gates).
fn wants_scheduler(pod: &Pod) -> bool {
    let scheduler = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .unwrap_or("");
    bound_node(pod).is_none()
        && (scheduler.is_empty() || scheduler == SCHEDULER_NAME)
        && pod.metadata.deletion_timestamp.is_none()
        && !is_terminal(pod)
}

fn gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty())
}

/// The pod's conditions with PodScheduled replaced (transition time kept when unchanged), for
/// a merge patch of `status.conditions`.
fn with_scheduled_condition(pod: &Pod, reason: &str, message: &str, now: Timestamp) -> Value {
    let existing = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    let mut out = Vec::new();
    let mut since = rfc3339(now);
    for c in existing.into_iter().flatten() {
        if c.type_ == "PodScheduled" {
            if c.status == "False"
                && c.reason.as_deref() == Some(reason)
                && let Some(t) = &c.last_transition_time
            {
                since = rfc3339(t.0);
            }
        } else if let Ok(v) = serde_json::to_value(c) {
            out.push(v);
        }
    }
    out.push(
        json!({"type": "PodScheduled", "status": "False", "reason": reason,
                    "message": message, "lastProbeTime": null, "lastTransitionTime": since}),
    );
    json!({"status": {"conditions": out}})
}

static EVENT_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

struct EventSpec<'a> {
    pod: &'a Pod,
    field_path: Option<String>,
    kind: &'a str,
    reason: &'a str,
    message: String,
    component: &'a str,
    host: Option<&'a str>,
    action: Option<&'a str>,
}

/// A core/v1 Event as client-go's event recorder writes it.
fn build_event(e: EventSpec<'_>) -> Event {
    let now = Timestamp::now();
    let name = e.pod.metadata.name.clone().unwrap_or_default();
    let unique = now.as_nanosecond() as u128
        + u128::from(EVENT_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let instance = match e.host {
        Some(h) => h.to_string(),
        None => format!("{}-sandbox", e.component),
    };
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{name}.{unique:x}")),
            namespace: e.pod.metadata.namespace.clone(),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(name),
            namespace: e.pod.metadata.namespace.clone(),
            uid: e.pod.metadata.uid.clone(),
            resource_version: e.pod.metadata.resource_version.clone(),
            field_path: e.field_path,
        },
        reason: Some(e.reason.into()),
        message: Some(e.message),
        type_: Some(e.kind.into()),
        source: Some(EventSource {
            component: Some(e.component.into()),
            host: e.host.map(str::to_string),
        }),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        action: e.action.map(str::to_string),
        reporting_component: Some(e.component.into()),
        reporting_instance: Some(instance),
        ..Event::default()
    }
}

fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

impl Sim {
    pub(super) fn new(client: kube::Client, cfg: ClusterArgs, schedule: bool) -> Sim {
        let own = (0..cfg.nodes)
            .filter_map(|i| {
                let pool = IpPool::for_node(i, cfg.node_pods)?;
                let host_ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 0, 0, 0)).wrapping_add(i));
                Some((
                    node_name(i),
                    OwnNode {
                        host_ip: host_ip.to_string(),
                        pool,
                    },
                ))
            })
            .collect();
        Sim {
            client,
            cfg,
            schedule,
            own,
            nodes: BTreeMap::new(),
            usage: HashMap::new(),
            pods: HashMap::new(),
            seq: 0,
            queue: BTreeSet::new(),
            unschedulable: BTreeSet::new(),
            retry_at: None,
            last_retry: Instant::now(),
            kubelet: HashMap::new(),
            timers: BinaryHeap::new(),
            backlog: VecDeque::new(),
            inflight: FuturesUnordered::new(),
            pods_synced: false,
            nodes_synced: false,
            pod_relist: None,
            node_relist: None,
        }
    }

    pub(super) async fn run(mut self, shutdown: impl Future<Output = ()> + Send + 'static) {
        let pods = watcher(
            Api::<Pod>::all(self.client.clone()),
            watcher::Config::default(),
        )
        .default_backoff();
        let nodes = watcher(
            Api::<Node>::all(self.client.clone()),
            watcher::Config::default(),
        )
        .default_backoff();
        tokio::pin!(pods, nodes, shutdown);
        let far = Instant::now() + Duration::from_secs(86_400 * 365);
        loop {
            let next_timer = self.timers.peek().map(|Reverse(t)| t.0);
            let can_schedule = self.pods_synced && self.nodes_synced && !self.queue.is_empty();
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                Some(done) = self.inflight.next(), if !self.inflight.is_empty() => self.on_done(done),
                ev = nodes.next() => match ev {
                    Some(Ok(ev)) => self.on_node_event(ev),
                    Some(Err(error)) => tracing::warn!(%error, "sandbox scheduler: node watch failed; retrying"),
                    None => break,
                },
                ev = pods.next() => match ev {
                    Some(Ok(ev)) => self.on_pod_event(ev),
                    Some(Err(error)) => tracing::warn!(%error, "sandbox scheduler: pod watch failed; retrying"),
                    None => break,
                },
                () = tokio::time::sleep_until(next_timer.unwrap_or(far)), if next_timer.is_some() => self.fire_timers(),
                () = tokio::time::sleep_until(self.retry_at.unwrap_or(far)), if self.retry_at.is_some() => self.retry_unschedulable(),
                () = std::future::ready(()), if can_schedule => self.schedule_batch(),
            }
            self.pump();
        }
        tracing::info!("sandbox scheduler and kubelets stopped");
    }

    // ---- watches --------------------------------------------------------------------------

    fn on_node_event(&mut self, ev: watcher::Event<Node>) {
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

    fn on_pod_event(&mut self, ev: watcher::Event<Pod>) {
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
    fn cluster_changed(&mut self) {
        if self.retry_at.is_none() && !self.unschedulable.is_empty() {
            self.retry_at = Some((self.last_retry + RETRY_INTERVAL).max(Instant::now()));
        }
    }

    fn retry_unschedulable(&mut self) {
        self.retry_at = None;
        self.last_retry = Instant::now();
        self.queue.append(&mut self.unschedulable);
    }

    fn uncount(&mut self, key: &str) {
        let Some(entry) = self.pods.get_mut(key) else {
            return;
        };
        if let Some(node) = entry.counted.take()
            && let Some(u) = self.usage.get_mut(&node)
        {
            u.remove_pod(&entry.requests, &entry.non_zero);
        }
    }

    fn count(&mut self, key: &str) {
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

    // ---- scheduler ------------------------------------------------------------------------

    fn mark_gated(&mut self, key: &str) {
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

    fn schedule_batch(&mut self) {
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

    fn on_bind_done(
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

    // ---- kubelet --------------------------------------------------------------------------

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
    fn kubelet_sync(&mut self, key: &str) {
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

    fn fire_timers(&mut self) {
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

    fn on_kubelet_status_done(&mut self, key: PodKey, result: Result<(), kube::Error>) {
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

    // ---- requests -------------------------------------------------------------------------

    fn on_done(&mut self, done: Done) {
        match done {
            Done::Bind {
                key,
                uid,
                node,
                result,
            } => self.on_bind_done(key, uid, node, result),
            Done::KubeletStatus { key, result } => self.on_kubelet_status_done(key, result),
            Done::Other => {}
        }
    }

    fn pump(&mut self) {
        while self.inflight.len() < self.cfg.sim_concurrency.max(1) {
            let Some(req) = self.backlog.pop_front() else {
                break;
            };
            let fut = execute(self.client.clone(), req);
            self.inflight.push(fut);
        }
    }
}

fn execute(client: kube::Client, req: Req) -> Pin<Box<dyn Future<Output = Done> + Send>> {
    Box::pin(async move {
        match req {
            Req::Bind { key, uid, node } => {
                let (ns, name) = split_key(&key);
                let api: Api<Pod> = Api::namespaced(client, ns);
                let binding = Binding {
                    metadata: ObjectMeta {
                        name: Some(name.to_string()),
                        namespace: Some(ns.to_string()),
                        uid: Some(uid.clone()),
                        ..ObjectMeta::default()
                    },
                    target: ObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("Node".into()),
                        name: Some(node.clone()),
                        ..ObjectReference::default()
                    },
                };
                let result = api
                    .create_subresource::<Binding, Value>(
                        "binding",
                        name,
                        &crate::field_manager::post_params(),
                        &binding,
                    )
                    .await
                    .map(|_| ());
                Done::Bind {
                    key,
                    uid,
                    node,
                    result,
                }
            }
            Req::Status { key, body, kubelet } => {
                let (ns, name) = split_key(&key);
                let api: Api<Pod> = Api::namespaced(client, ns);
                let result = api
                    .patch_status(
                        name,
                        &crate::field_manager::patch_params(),
                        &Patch::Merge(&body),
                    )
                    .await
                    .map(|_| ());
                if kubelet {
                    Done::KubeletStatus { key, result }
                } else {
                    if let Err(error) = result
                        && api_code(&error) != Some(404)
                    {
                        tracing::warn!(pod = %key, %error, "sandbox scheduler: status write failed");
                    }
                    Done::Other
                }
            }
            Req::Event(event) => {
                let ns = event.metadata.namespace.clone().unwrap_or_default();
                let api: Api<Event> = Api::namespaced(client, &ns);
                if let Err(error) = api
                    .create(&crate::field_manager::post_params(), &event)
                    .await
                {
                    tracing::debug!(%error, "sandbox cluster: event not written");
                }
                Done::Other
            }
            Req::Delete { key, uid } => {
                let (ns, name) = split_key(&key);
                let api: Api<Pod> = Api::namespaced(client, ns);
                let dp = DeleteParams {
                    grace_period_seconds: Some(0),
                    preconditions: Some(Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                if let Err(error) = api.delete(name, &dp).await
                    && !matches!(api_code(&error), Some(404 | 409))
                {
                    tracing::warn!(pod = %key, %error, "sandbox kubelet: delete failed");
                }
                Done::Other
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": status
        }))
        .unwrap()
    }

    #[test]
    fn unschedulable_condition_replaces_pod_scheduled_and_keeps_others() {
        let p = pod(json!({"phase": "Pending", "conditions": [
            {"type": "DisruptionTarget", "status": "True"},
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": "2024-01-01T00:00:00Z"}
        ]}));
        let body = with_scheduled_condition(&p, "Unschedulable", "msg", Timestamp::UNIX_EPOCH);
        let conds = body["status"]["conditions"].as_array().unwrap();
        assert_eq!(conds.len(), 2);
        assert_eq!(conds[0]["type"], "DisruptionTarget");
        assert_eq!(conds[1]["message"], "msg");
        assert_eq!(
            conds[1]["lastTransitionTime"], "2024-01-01T00:00:00Z",
            "same verdict keeps its time"
        );
        let gated = with_scheduled_condition(&p, "SchedulingGated", "g", Timestamp::UNIX_EPOCH);
        assert_eq!(
            gated["status"]["conditions"][1]["lastTransitionTime"],
            "1970-01-01T00:00:00Z"
        );
    }

    #[test]
    fn pods_this_scheduler_takes() {
        assert!(wants_scheduler(&pod(json!({"phase": "Pending"}))));
        let mut bound = pod(json!({}));
        if let Some(s) = bound.spec.as_mut() {
            s.node_name = Some("n".into());
        }
        assert!(!wants_scheduler(&bound));
        let mut other = pod(json!({}));
        if let Some(s) = other.spec.as_mut() {
            s.scheduler_name = Some("volcano".into());
        }
        assert!(!wants_scheduler(&other));
        let mut deleting = pod(json!({}));
        deleting.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert!(!wants_scheduler(&deleting));
    }

    #[test]
    fn events_look_like_the_recorders() {
        let p = pod(json!({}));
        let e = build_event(EventSpec {
            pod: &p,
            field_path: Some("spec.containers{c}".into()),
            kind: "Normal",
            reason: "Started",
            message: "Started container c".into(),
            component: "kubelet",
            host: Some("sandbox-node-0"),
            action: None,
        });
        assert!(e.metadata.name.as_deref().unwrap().starts_with("p."));
        assert_eq!(e.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(e.involved_object.uid.as_deref(), Some("u"));
        assert_eq!(
            e.involved_object.field_path.as_deref(),
            Some("spec.containers{c}")
        );
        assert_eq!(
            e.source.as_ref().unwrap().host.as_deref(),
            Some("sandbox-node-0")
        );
        assert_eq!(e.reporting_instance.as_deref(), Some("sandbox-node-0"));
        assert_eq!(e.count, Some(1));
        let other = build_event(EventSpec {
            pod: &p,
            field_path: None,
            kind: "Normal",
            reason: "Scheduled",
            message: String::new(),
            component: SCHEDULER_NAME,
            host: None,
            action: Some("Binding"),
        });
        assert_ne!(e.metadata.name, other.metadata.name);
        assert_eq!(
            other.reporting_component.as_deref(),
            Some("default-scheduler")
        );
    }
}
