//! The loop's bookkeeping types (a pod as the scheduler tracks it, an own node, what a kubelet
//! knows of a pod, timers), the API requests it sends and their outcomes, and its tuning
//! constants.
//!
//! Data only: the behaviour is in the `impl Sim` files.

use std::cmp::Reverse;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, Pod};
use serde_json::Value;
use tokio::time::Instant;

use crate::sim_pod::{IpPool, PodRun, Script};
use crate::sim_sched::Resources;

pub(super) const SCHEDULER_NAME: &str = "default-scheduler";
/// Unschedulable pods are retried at most this often after the cluster changes (the real
/// scheduler also backs off before retrying).
pub(super) const RETRY_INTERVAL: Duration = Duration::from_millis(250);
/// Pods scheduled per loop turn, so watch events and timers keep flowing under load.
pub(super) const SCHEDULE_BATCH: usize = 256;
/// Delay before a status write that failed for a transient reason is retried.
pub(super) const RESYNC_DELAY: Duration = Duration::from_secs(1);

/// `namespace/name`.
pub(super) type PodKey = String;

pub(super) struct PodEntry {
    pub(super) pod: Pod,
    /// Arrival order: the scheduling queue is FIFO.
    pub(super) seq: u64,
    pub(super) requests: Resources,
    pub(super) non_zero: Resources,
    /// Node whose usage counts this pod.
    pub(super) counted: Option<String>,
    /// Node the scheduler chose while the binding is in flight.
    pub(super) assumed: Option<String>,
    /// Last FailedScheduling message written, so an unchanged verdict is not rewritten.
    pub(super) last_unschedulable: Option<String>,
}

/// One of this simulation's nodes.
pub(super) struct OwnNode {
    pub(super) host_ip: String,
    pub(super) pool: IpPool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum TimerKind {
    Start,
    Ready,
    Exit,
    Stop,
    Resync,
}

/// What the kubelet of a pod's node knows about it.
pub(super) struct KubeletPod {
    pub(super) uid: String,
    pub(super) node: String,
    pub(super) script: Script,
    pub(super) restart_policy: String,
    pub(super) admitted: Timestamp,
    /// Bumped at each exit so timers of a previous run are ignored.
    pub(super) epoch: u64,
    pub(super) run: Option<PodRun>,
    pub(super) writing: bool,
    pub(super) dirty: bool,
    pub(super) deleting: bool,
    /// When the containers of a deleted pod stop, and whether they are killed then.
    pub(super) stop_at: Option<(Instant, bool)>,
    /// The containers stopped: once their terminated states are written, the pod is deleted.
    pub(super) stopped: bool,
}

pub(super) enum Req {
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

pub(super) enum Done {
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

pub(super) type Timer = Reverse<(Instant, u64, TimerKind, PodKey, String, u64)>;
