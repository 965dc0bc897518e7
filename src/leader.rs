//! Leader election on a coordination.k8s.io Lease, with kube-lease-manager. Every replica keeps
//! its caches warm and serves the replica API and the webhooks; only the leader reconciles,
//! re-plans placements and writes plugin status. A replica that loses the lease stops at once
//! (the process exits, so no write of an in-flight reconcile can follow); a standby takes over
//! once the lease expires. On shutdown the leader releases the lease, so the standby takes over
//! without waiting for it to expire.
//!
//! Owns the Lease and the leadership signal; it must not touch jobs, pods or plugins.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kube::Client;
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
    #[arg(long, default_value = "15s", value_parser = crate::operator::parse_duration)]
    pub leader_elect_lease_duration: Duration,
    /// The leader renews this long before the lease would expire (also the clock skew
    /// tolerated between nodes).
    #[arg(long, default_value = "5s", value_parser = crate::operator::parse_duration)]
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
        let manager = LeaseManagerBuilder::new(client, &args.leader_election_id)
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
        let monitor = {
            let (mut changes, leading) = (changes.clone(), leading.clone());
            let (lease, namespace) = (
                args.leader_election_id.clone(),
                args.leader_election_namespace.clone(),
            );
            tokio::spawn(async move {
                let mut lost_tx = Some(lost_tx);
                while changes.changed().await.is_ok() {
                    let now = *changes.borrow_and_update();
                    let before = leading.swap(now, Ordering::AcqRel);
                    if now && !before {
                        info!(%identity, lease = %lease, %namespace, "became the leader");
                    } else if before && !now {
                        warn!(%identity, lease = %lease, %namespace, "lost the lease; stopping");
                        if let Some(tx) = lost_tx.take() {
                            let _ = tx.send(());
                        }
                    }
                    let _ = published_tx.send(now);
                }
            })
        };
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
