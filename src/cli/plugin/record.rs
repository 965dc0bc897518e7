//! `diorch plugin snapshot`: records the allocator's view of a cluster (or the sandbox) as a
//! snapshot file for `diorch plugin run`, so a platform team can replay real placements
//! against a new policy offline.
//!
//! Owns: the conversion from listed nodes, pods and DIJobs to a [`Snapshot`]. Must not touch:
//! anything but reads (one list of each kind; it never writes).

use k8s_openapi::api::core::v1::Node;
use kube::api::ListParams;
use kube::{Api, Client};

use crate::plugin::JobPlan;
use crate::plugin::snapshot::Snapshot;
use diorch_core::api::DIJob;
use diorch_core::model::{self as view, UsagePod};

/// Lists nodes, pods and DIJobs once and records them.
pub async fn record(client: Client) -> Result<Snapshot, kube::Error> {
    let params = ListParams::default();
    let nodes = Api::<Node>::all(client.clone()).list(&params).await?.items;
    let pods = Api::<UsagePod>::all(client.clone())
        .list(&params)
        .await?
        .items;
    let jobs = Api::<DIJob>::all(client).list(&params).await?.items;
    Ok(build(&nodes, &pods, &jobs, &jiff::Timestamp::now()))
}

/// The snapshot of `nodes` (free = allocatable minus every live pod bound to the node, the
/// jobs' own included, as the snapshot format says) and the active preemptible `jobs`, with
/// the placed ones' allocations as `previous`.
pub fn build(nodes: &[Node], pods: &[UsagePod], jobs: &[DIJob], now: &jiff::Timestamp) -> Snapshot {
    let usage = view::node_usage(pods, |_| false);
    let mut model_nodes: Vec<_> = nodes
        .iter()
        .map(|n| view::model_node(n, usage.get(n.metadata.name.as_deref().unwrap_or_default())))
        .collect();
    model_nodes.sort_by(|a, b| a.name.cmp(&b.name));
    let node_index = view::node_index(&model_nodes);
    let mut snapshot = Snapshot::new(now.to_string());
    let mut active: Vec<&DIJob> = jobs
        .iter()
        .filter(|j| diorch_core::placement::holds_placement(j))
        .collect();
    active.sort_by_key(|j| (j.metadata.namespace.clone(), j.metadata.name.clone()));
    for job in active {
        let age = job.metadata.creation_timestamp.as_ref().map_or(0, |t| {
            u64::try_from(now.duration_since(t.0).as_secs()).unwrap_or(0)
        });
        let model = view::model_job(job, &node_index, age);
        if !model.current.is_empty() && model.current.iter().all(Option::is_some) {
            snapshot.previous.push(JobPlan {
                job: model.key.clone(),
                nodes: model
                    .current
                    .iter()
                    .flatten()
                    .filter_map(|i| model_nodes.get(*i as usize).map(|n| n.name.clone()))
                    .collect(),
                replicas: None,
                reason: None,
            });
        }
        snapshot.jobs.push(model);
    }
    snapshot.nodes = model_nodes;
    snapshot
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_recorded_snapshot_is_valid_and_replayable() {
        let node = |name: &str| -> Node {
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": "8"},
                    "conditions": [{"type": "Ready", "status": "True"}]}
            }))
            .expect("node")
        };
        let pod: UsagePod = serde_json::from_value(json!({
            "metadata": {"name": "placed-learner-0", "namespace": "ns", "labels": {"diengine/job": "placed"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "2"}}}]},
            "status": {"phase": "Running"}
        }))
        .expect("pod");
        let job = |name: &str, status: serde_json::Value| -> DIJob {
            serde_json::from_value(json!({
                "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
                "metadata": {"name": name, "namespace": "ns", "creationTimestamp": "2026-11-23T00:00:00Z"},
                "spec": {"preemptible": true, "tasks": [{"type": "learner", "name": "learner", "replicas": 1,
                    "template": {"spec": {"containers": [{"name": "di-container", "image": "i",
                        "resources": {"requests": {"nvidia.com/gpu": "2"}}}]}}}]},
                "status": status
            }))
            .expect("job")
        };
        let jobs = [
            job(
                "placed",
                json!({"phase": "Running", "allocation": ["n1"], "ranks": ["placed-learner-0"]}),
            ),
            job("waiting", json!({"phase": "Pending"})),
            job("done", json!({"phase": "Succeeded"})),
        ];
        let now: jiff::Timestamp = "2026-11-23T00:01:00Z".parse().expect("time");
        let s = build(&[node("n2"), node("n1")], &[pod], &jobs, &now);
        assert_eq!(
            s.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
            ["n1", "n2"]
        );
        assert_eq!(s.nodes[0].free.gpus, 6);
        assert_eq!(s.jobs.len(), 2, "finished jobs are left out");
        assert_eq!(s.jobs[0].current, vec![Some(0)]);
        assert_eq!(s.jobs[0].age_seconds, 60);
        assert_eq!(s.jobs[1].current, vec![None]);
        assert_eq!(s.previous.len(), 1);
        assert_eq!(s.previous[0].nodes, ["n1"]);
        let text = s.to_json().expect("json");
        assert_eq!(Snapshot::from_json(&text).expect("valid"), s);
        assert_eq!(
            s.unplaced_jobs()
                .map(|j| j.key.as_str())
                .collect::<Vec<_>>(),
            ["ns/waiting"]
        );
    }
}
