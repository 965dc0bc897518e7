//! The sandbox's simulated cluster: nodes, a scheduler and a kubelet. It is a client of an API
//! server (the sandbox's own or a real one) and talks to it only through `kube` and
//! k8s-openapi types, as kube-scheduler and the kubelet do: it creates its nodes, follows pods
//! and nodes with watches, binds pods (`pods/binding`), writes `pods/status` and core/v1 Events,
//! and deletes gracefully deleted pods from its nodes. Pure logic lives in `sim_sched.rs`
//! (filter, score, messages) and `sim_pod.rs` (annotations, pod status); this file owns the
//! configuration, the node objects and the single event loop. It must not touch the sandbox's
//! store or server internals.
//!
//! Pods are scripted by annotations:
//! - `sandbox.diorch.io/exit-after: 5s`: containers exit that long after Running;
//! - `sandbox.diorch.io/exit-code: "3"` (default 0), `sandbox.diorch.io/exit-code-<container>`
//!   for one container: phase Succeeded when every code is 0, else Failed
//!   (restartPolicy Never);
//! - `sandbox.diorch.io/ready-after: 2s`: containers run but are not ready until then;
//! - `sandbox.diorch.io/stop-after: 10s` (default 1 s): how long the containers take to stop
//!   once the pod is deleted.
//!
//! With restartPolicy `Always` (or `OnFailure` and a non-zero code) an exiting container is
//! restarted at once (restartCount + 1, lastState.terminated, no CrashLoopBackOff delay) and its
//! exit-after / ready-after count again from the restart; the pod stays Running.
//!
//! Graceful deletion, as the kubelet does it: a deleted pod on one of these nodes stays
//! (Terminating, its name taken) while its containers stop. They stop after `stop-after`
//! (default 1 s) with their scripted exit codes, or, when the grace period ends first, are
//! killed then with exit code 137. The kubelet writes their terminated states (phase Failed when
//! a code is non-zero, else Succeeded, as kubelets since 1.27 do), then deletes the pod with
//! grace 0 and a UID precondition. A pod whose containers never started is deleted at once.
//! (The API server removes an unbound or finished pod itself: no kubelet is involved.)
//!
//! Attached to another API server (`diorch-sandbox serve --attach`, [`run_attached`]) the same
//! kubelets run beside the real kube-scheduler: this simulation then binds nothing, and renews
//! its nodes' Ready condition every [`HEARTBEAT`] so a node lifecycle controller keeps them.
//!
//! Simplifications, each documented where it happens: unschedulable pods are retried at most
//! every 250 ms after a cluster change and their status/event is rewritten only when the
//! message changes; the in-process nodes get no periodic heartbeat or Lease; a pod already
//! Running when the kubelet starts is restarted (new status).

use std::future::Future;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch};
use serde_json::json;

use crate::sim_loop::Sim;

/// The configuration and node objects live in `sim_config.rs`; these paths stay for callers.
pub use crate::sim_config::{ClusterArgs, NodeLabels, NodeTaints, SimError, node_name};

/// Registers the nodes (create, or update labels/taints when they exist) and writes their
/// status. Idempotent; returns the node names.
pub async fn ensure_nodes(
    client: &kube::Client,
    cfg: &ClusterArgs,
) -> Result<Vec<String>, SimError> {
    cfg.validate()?;
    let api: Api<Node> = Api::all(client.clone());
    let mut names = Vec::new();
    for index in 0..cfg.nodes {
        let name = node_name(index);
        let manifest = cfg.node_manifest(index);
        let node: Node =
            serde_json::from_value(manifest.clone()).map_err(|source| SimError::NodeObject {
                node: name.clone(),
                source,
            })?;
        let err = |action| {
            let node = name.clone();
            move |source| SimError::Node {
                action,
                node,
                source,
            }
        };
        let created = match api
            .create(&crate::field_manager::post_params(), &node)
            .await
        {
            Ok(created) => Some(created),
            Err(kube::Error::Api(s)) if s.is_already_exists() => None,
            Err(e) => return Err(err("create")(e)),
        };
        // An existing node gets our labels and taints; so does a new one to which the server
        // added taints (a real one may add `node.kubernetes.io/not-ready` until the node is
        // Ready, which a kubelet's node controller would then remove).
        let taints_differ = created
            .is_none_or(|n| n.spec.and_then(|s| s.taints).unwrap_or_default() != cfg.node_taints.0);
        if taints_differ {
            let patch = json!({"metadata": {"labels": manifest["metadata"]["labels"]},
                               "spec": {"taints": manifest["spec"]["taints"]}});
            api.patch(
                &name,
                &crate::field_manager::patch_params(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(err("update"))?;
        }
        let now = Timestamp::now();
        let status = json!({"status": cfg.node_status(index, now, now)});
        api.patch_status(
            &name,
            &crate::field_manager::patch_params(),
            &Patch::Merge(&status),
        )
        .await
        .map_err(err("write the status of"))?;
        names.push(name);
    }
    tracing::info!(nodes = cfg.nodes, "sandbox nodes registered");
    Ok(names)
}

/// Registers the nodes, then runs the scheduler and the kubelets until `shutdown` completes.
pub async fn run_cluster(
    client: kube::Client,
    cfg: ClusterArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), SimError> {
    ensure_nodes(&client, &cfg).await?;
    run_scheduler_and_kubelets(client, cfg, shutdown).await
}

/// Runs the scheduler and the kubelets of already registered nodes until `shutdown`.
pub async fn run_scheduler_and_kubelets(
    client: kube::Client,
    cfg: ClusterArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), SimError> {
    cfg.validate()?;
    Sim::new(client, cfg, true).run(shutdown).await;
    Ok(())
}

/// How often attached nodes renew their status (the kubelet's `nodeStatusUpdateFrequency`).
pub const HEARTBEAT: Duration = Duration::from_secs(10);

/// Registers the nodes on another API server and runs their kubelets beside its own
/// scheduler until `shutdown`. `ready` is called once the nodes are registered and Ready.
/// The nodes stay registered when it stops, as a stopped kubelet's node does.
pub async fn run_attached(
    client: kube::Client,
    cfg: ClusterArgs,
    ready: impl FnOnce(&[String]),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), SimError> {
    // The nodes' conditions hold from their registration on (at most this late).
    let registered = Timestamp::now();
    let names = ensure_nodes(&client, &cfg).await?;
    ready(&names);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let heartbeat = tokio::spawn(heartbeat(client.clone(), cfg.clone(), registered, stop_rx));
    Sim::new(client, cfg, false).run(shutdown).await;
    let _ = stop_tx.send(true);
    let _ = heartbeat.await;
    Ok(())
}

/// Renews the nodes' conditions (unchanged since `registered`) every [`HEARTBEAT`] until
/// `stop` turns true.
async fn heartbeat(
    client: kube::Client,
    cfg: ClusterArgs,
    registered: Timestamp,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let api: Api<Node> = Api::all(client);
    loop {
        tokio::select! {
            () = tokio::time::sleep(HEARTBEAT) => {}
            _ = stop.changed() => return,
        }
        for index in 0..cfg.nodes {
            let name = node_name(index);
            let status = json!({"status": {"conditions": cfg.node_status(index, registered, Timestamp::now())["conditions"]}});
            if let Err(error) = api
                .patch_status(
                    &name,
                    &crate::field_manager::patch_params(),
                    &Patch::Merge(&status),
                )
                .await
            {
                tracing::warn!(node = %name, %error, "sandbox kubelet: node heartbeat failed");
            }
        }
    }
}
