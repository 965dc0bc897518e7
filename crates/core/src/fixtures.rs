//! Fixtures the core's unit tests share: DIJobs as a scenario names them.
//!
//! Owns: test data only (compiled for tests). Must not touch: any decision.

use serde_json::json;

use crate::api::DIJob;

/// `ns/j`: a preemptible high-priority job with one learner (2 GPUs, 0.5 CPU, 1.5 GiB) and two
/// elastic collectors (1..=5), with `status` as given.
pub fn elastic_job(status: serde_json::Value) -> DIJob {
    serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1",
        "kind": "DIJob",
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {
            "priority": "high",
            "preemptible": true,
            "tasks": [
                {"type": "learner", "name": "learner", "replicas": 1,
                 "template": {"spec": {"containers": [{"name": "di-container", "image": "i",
                    "resources": {"requests": {"cpu": "500m", "memory": "1.5Gi", "nvidia.com/gpu": "2"}}}]}}},
                {"type": "collector", "name": "collector", "replicas": 2, "minReplicas": 1, "maxReplicas": 5,
                 "template": {"spec": {"containers": [{"name": "di-container", "image": "i"}]}}}
            ]
        },
        "status": status
    }))
    .expect("job")
}
