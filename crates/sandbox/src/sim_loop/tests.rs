//! Tests of the loop's pure helpers: the PodScheduled condition patch, which pods this scheduler
//! takes, and Events as the recorder writes them.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use super::events::{EventSpec, build_event};
use super::pods::{wants_scheduler, with_scheduled_condition};
use super::types::SCHEDULER_NAME;

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
