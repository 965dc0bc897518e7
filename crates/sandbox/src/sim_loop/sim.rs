//! `Sim`, the simulated cluster's single task: its state, its construction from the cluster
//! configuration, and the loop that multiplexes the pod and node watches, the timers, finished
//! requests and shutdown.
//!
//! The loop only: handling each input is in `watches.rs`, `schedule.rs`, `kubelet_pods.rs` and
//! `requests.rs`.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::net::Ipv4Addr;
use std::pin::Pin;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::time::Instant;

use crate::sim_config::{ClusterArgs, node_name};
use crate::sim_pod::IpPool;
use crate::sim_sched::{Resources, Usage};

use super::types::{Done, KubeletPod, OwnNode, PodEntry, PodKey, Req, Timer};

pub(crate) struct Sim {
    pub(super) client: kube::Client,
    pub(super) cfg: ClusterArgs,
    /// Whether this simulation also schedules pods (false when attached beside a real
    /// kube-scheduler).
    pub(super) schedule: bool,
    pub(super) own: HashMap<String, OwnNode>,
    pub(super) nodes: BTreeMap<String, (Node, Resources)>,
    pub(super) usage: HashMap<String, Usage>,
    pub(super) pods: HashMap<PodKey, PodEntry>,
    pub(super) seq: u64,
    pub(super) queue: BTreeSet<(u64, PodKey)>,
    pub(super) unschedulable: BTreeSet<(u64, PodKey)>,
    pub(super) retry_at: Option<Instant>,
    pub(super) last_retry: Instant,
    pub(super) kubelet: HashMap<PodKey, KubeletPod>,
    pub(super) timers: BinaryHeap<Timer>,
    pub(super) backlog: VecDeque<Req>,
    pub(super) inflight: FuturesUnordered<Pin<Box<dyn Future<Output = Done> + Send>>>,
    pub(super) pods_synced: bool,
    pub(super) nodes_synced: bool,
    pub(super) pod_relist: Option<HashSet<PodKey>>,
    pub(super) node_relist: Option<HashSet<String>>,
}

impl Sim {
    pub(crate) fn new(client: kube::Client, cfg: ClusterArgs, schedule: bool) -> Sim {
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

    pub(crate) async fn run(mut self, shutdown: impl Future<Output = ()> + Send + 'static) {
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
}
