//! Leader election on a coordination.k8s.io Lease, with kube-lease-manager. Every replica keeps
//! its caches warm and serves the replica API and the webhooks; only the leader reconciles,
//! re-plans placements and writes plugin status. A replica that loses the lease stops at once
//! (the process exits, so no write of an in-flight reconcile can follow); a standby takes over
//! once the lease expires. On shutdown the leader releases the lease, so the standby takes over
//! without waiting for it to expire.
//!
//! kube-lease-manager only reports a change of holder it has read back; a leader cut off from
//! the API server would go on believing it leads after its lease expired and a standby took
//! over. So the leader also watches its Lease and keeps its own renew deadline (client-go's
//! `RenewDeadline`): it stops leading when another holder shows up, or when its last renewal
//! it saw is so old that the lease has only half the grace period left.
//!
//! Owns the Lease and the leadership signal; it must not touch jobs, pods or plugins.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::watch;
use tracing::{info, warn};

/// Flags of leader election (controller-runtime's names).
#[derive(Clone, Debug, clap::Args)]
pub struct LeaderArgs {
    /// Elect one leader among the replicas through a Lease; without it this process always
    /// leads (run one replica only).
    #[arg(long)]
    pub leader_elect: bool,
    /// Name of the Lease.
    #[arg(long, default_value = "diorch-leader")]
    pub leader_election_id: String,
    /// Namespace of the Lease (the operator's own namespace when it runs in a pod).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub leader_election_namespace: String,
    /// How long a lease lasts without renewal: a standby takes over at most this long after
    /// the leader dies without releasing it.
    #[arg(long, default_value = "15s", value_parser = crate::flags::parse_duration)]
    pub leader_elect_lease_duration: Duration,
    /// The leader renews this long before the lease would expire (also the clock skew
    /// tolerated between nodes).
    #[arg(long, default_value = "5s", value_parser = crate::flags::parse_duration)]
    pub leader_elect_renew_grace: Duration,
}

/// Why leader election could not start.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("cannot use Lease {namespace}/{name} for leader election: {source}")]
    Lease {
        namespace: String,
        name: String,
        #[source]
        source: kube_lease_manager::LeaseManagerError,
    },
    #[error(
        "--leader-elect-renew-grace ({grace:?}) must be shorter than --leader-elect-lease-duration ({duration:?})"
    )]
    Timing { grace: Duration, duration: Duration },
}

/// Whether this process leads, readable anywhere without waiting.
#[derive(Clone, Debug)]
pub struct Leadership {
    leading: Arc<AtomicBool>,
    changes: watch::Receiver<bool>,
}

impl Leadership {
    /// Leads from the start and never stops (no election).
    pub fn always() -> Leadership {
        let (_, changes) = watch::channel(true);
        Leadership {
            leading: Arc::new(AtomicBool::new(true)),
            changes,
        }
    }

    pub fn is_leader(&self) -> bool {
        self.leading.load(Ordering::Acquire)
    }

    /// Stops leading while still holding the lease (shutdown): nothing new is started, what
    /// runs finishes, then the lease is released.
    pub fn step_down(&self) {
        self.leading.store(false, Ordering::Release);
    }

    /// Resolves once this process leads (at once if it does).
    pub async fn acquired(&self) {
        let mut changes = self.changes.clone();
        // An error means the election ended; the flag says the last word.
        let _ = changes.wait_for(|leading| *leading).await;
    }
}

/// The lease manager's side of a running election.
struct Running {
    changes: watch::Receiver<bool>,
    manager: tokio::task::JoinHandle<kube_lease_manager::Result<LeaseManager>>,
    monitor: tokio::task::JoinHandle<()>,
}

/// A running election: the leadership signal, and what ends it.
pub struct Election {
    pub leadership: Leadership,
    lost: Option<tokio::sync::oneshot::Receiver<()>>,
    running: Option<Running>,
}

impl Election {
    /// Not electing: this process leads.
    pub fn none() -> Election {
        Election {
            leadership: Leadership::always(),
            lost: None,
            running: None,
        }
    }

    /// Resolves when the lease is lost after it was held: the process must stop writing.
    /// Never resolves without an election.
    pub async fn lost(&mut self) {
        if let Some(rx) = self.lost.as_mut()
            && (&mut *rx).await.is_ok()
        {
            return;
        }
        std::future::pending::<()>().await
    }

    /// Joins the election for the Lease and returns at once; leadership follows the lease.
    pub async fn start(
        client: Client,
        args: &LeaderArgs,
        identity: String,
    ) -> Result<Election, LeaderError> {
        let (duration, grace) = (
            args.leader_elect_lease_duration,
            args.leader_elect_renew_grace,
        );
        if grace >= duration {
            return Err(LeaderError::Timing { grace, duration });
        }
        let lease_error = |source| LeaderError::Lease {
            namespace: args.leader_election_namespace.clone(),
            name: args.leader_election_id.clone(),
            source,
        };
        let manager = LeaseManagerBuilder::new(client.clone(), &args.leader_election_id)
            .with_namespace(&args.leader_election_namespace)
            .with_identity(&identity)
            .with_duration(duration.as_secs().max(1))
            .with_grace(grace.as_secs().max(1))
            .build()
            .await
            .map_err(lease_error)?;
        let (changes, task) = manager.watch().await;
        let leading = Arc::new(AtomicBool::new(*changes.borrow()));
        let (lost_tx, lost) = tokio::sync::oneshot::channel();
        let (published_tx, published) = watch::channel(*changes.borrow());
        let monitor = tokio::spawn(
            Monitor {
                identity,
                lease: args.leader_election_id.clone(),
                namespace: args.leader_election_namespace.clone(),
                duration,
                grace,
                leading: leading.clone(),
                published: published_tx,
                lost: Some(lost_tx),
            }
            .run(client, changes.clone()),
        );
        info!(lease = %args.leader_election_id, namespace = %args.leader_election_namespace, "waiting to lead; caches, the replica API and the webhooks serve meanwhile");
        Ok(Election {
            leadership: Leadership {
                leading,
                changes: published,
            },
            lost: Some(lost),
            running: Some(Running {
                changes,
                manager: task,
                monitor,
            }),
        })
    }

    /// Stops leading and frees the lease, so a standby takes over at once.
    pub async fn release(mut self) {
        self.leadership.leading.store(false, Ordering::Release);
        let Some(running) = self.running.take() else {
            return;
        };
        // Dropping the last receiver of the manager's channel makes it release the lease.
        running.monitor.abort();
        let _ = running.monitor.await;
        drop(running.changes);
        match tokio::time::timeout(Duration::from_secs(5), running.manager).await {
            Ok(Ok(Ok(_))) => info!("released the lease"),
            Ok(Ok(Err(error))) => {
                warn!(%error, "could not release the lease; it expires by itself")
            }
            Ok(Err(error)) => warn!(%error, "the lease task ended abnormally"),
            Err(_) => warn!("releasing the lease took over 5 s; it expires by itself"),
        }
    }
}

/// Follows the lease manager's verdicts and the Lease itself, and turns either kind of loss into
/// the `lost` signal.
struct Monitor {
    identity: String,
    lease: String,
    namespace: String,
    duration: Duration,
    grace: Duration,
    leading: Arc<AtomicBool>,
    published: watch::Sender<bool>,
    lost: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Monitor {
    /// How long before the lease expires the leader gives up when it has not renewed: half
    /// the grace period, so a standby (which takes over at expiry) never overlaps with it while
    /// the clocks differ by less than that, and renewal (at `grace` before expiry) still has
    /// the other half to get through.
    fn margin(&self) -> Duration {
        self.grace / 2
    }

    async fn run(mut self, client: Client, mut changes: watch::Receiver<bool>) {
        let api: Api<Lease> = Api::namespaced(client, &self.namespace);
        let mut observed = std::pin::pin!(
            kube::runtime::watcher::watch_object(api, &self.lease).default_backoff()
        );
        // When this leader must have renewed by; `None` while standing by.
        let mut deadline = None;
        // When this replica last acquired the lease, by its clock: a holder the watch shows
        // that renewed before then is history (the watch lagged), not a loss. A previous
        // holder's renewal is older by at least the lease duration, less the clock skew.
        let mut acquired = jiff::Timestamp::now();
        if *changes.borrow() {
            deadline = Some(tokio::time::Instant::now() + self.duration - self.margin());
        }
        loop {
            tokio::select! {
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let now = *changes.borrow_and_update();
                    if now && !self.leading.swap(true, Ordering::AcqRel) {
                        info!(identity = %self.identity, lease = %self.lease, namespace = %self.namespace, "became the leader");
                        // The manager has just written the lease: it runs for a full duration.
                        deadline = Some(tokio::time::Instant::now() + self.duration - self.margin());
                        acquired = jiff::Timestamp::now();
                        let _ = self.published.send(true);
                    } else if !now {
                        self.stop("the lease manager saw another holder");
                        deadline = None;
                    }
                }
                Some(event) = observed.next() => {
                    // A failing watch is retried with backoff; the deadline covers the gap.
                    let Ok(lease) = event else { continue };
                    if !self.leading.load(Ordering::Acquire) {
                        continue;
                    }
                    let spec = lease.and_then(|l| l.spec).unwrap_or_default();
                    let renewed = spec.renew_time.as_ref().map(|t| t.0);
                    if spec.holder_identity.as_deref() == Some(self.identity.as_str()) {
                        if let Some(left) = self.time_left(&spec) {
                            deadline = Some(tokio::time::Instant::now() + left);
                        }
                    } else if renewed.is_some_and(|at| at >= acquired) {
                        let holder = spec.holder_identity.unwrap_or_default();
                        warn!(%holder, "the lease now names another holder");
                        self.stop("another replica holds the lease");
                        deadline = None;
                    }
                }
                () = sleep_until(deadline) => {
                    self.stop("the lease was not renewed in time (API server unreachable?)");
                    deadline = None;
                }
            }
        }
    }

    /// How long this leader may go on from now on the renewal in `spec`: until `margin` before
    /// it expires by this replica's clock (which wrote the renewal time).
    fn time_left(&self, spec: &k8s_openapi::api::coordination::v1::LeaseSpec) -> Option<Duration> {
        let renewed = spec.renew_time.as_ref()?.0;
        let seconds = spec
            .lease_duration_seconds
            .map_or(self.duration.as_secs(), |s| u64::try_from(s).unwrap_or(0));
        let expires = renewed.checked_add(jiff::SignedDuration::from_secs(
            i64::try_from(seconds).unwrap_or(i64::MAX),
        ));
        let left = expires.ok()?.duration_since(jiff::Timestamp::now());
        let left = Duration::try_from(left).unwrap_or(Duration::ZERO);
        Some(left.saturating_sub(self.margin()))
    }

    /// Stops leading at once and tells the operator, which exits.
    fn stop(&mut self, why: &str) {
        let was = self.leading.swap(false, Ordering::AcqRel);
        let _ = self.published.send(false);
        if was {
            warn!(identity = %self.identity, lease = %self.lease, namespace = %self.namespace, reason = why, "lost the lease; stopping");
        }
        if let Some(tx) = self.lost.take() {
            let _ = tx.send(());
        }
    }
}

/// Sleeps until `deadline`; never resolves without one.
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// This replica's identity in the Lease: the pod name, else the host name, plus a random
/// suffix so two processes on one host differ.
pub fn identity() -> String {
    let base = std::env::var("POD_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|n| !n.is_empty()))
        .unwrap_or_else(|| "diorch".to_string());
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{base}_{}", &suffix[..8])
}
