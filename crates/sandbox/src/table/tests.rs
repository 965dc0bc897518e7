//! Tests of Table rendering: HumanDuration, the built-in printers' cells, includeObject, the
//! default and CRD convertors, watch-event Tables and JSONPath.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::registry::{CustomResourceInfo, PrinterColumn, ResourceInfo, builtin_resources};

use super::duration::human_duration_nanos;
use super::node_service::format_endpoints;
use super::*;

fn now() -> Timestamp {
    "2025-01-01T12:00:00Z".parse().unwrap()
}

fn builtin(group: &str, kind: &str) -> ResourceInfo {
    builtin_resources()
        .into_iter()
        .find(|r| r.group == group && r.kind == kind)
        .unwrap()
}

fn pod_row(pod: &Value) -> Vec<Value> {
    let table = render_table(
        &builtin("", "Pod"),
        &[pod],
        IncludeObject::Metadata,
        now(),
        "7",
        None,
    );
    table["rows"][0]["cells"].as_array().unwrap().clone()
}

fn pod(status: Value) -> Value {
    json!({
        "metadata": {"name": "p", "namespace": "default", "creationTimestamp": "2025-01-01T11:55:00Z"},
        "spec": {"containers": [{"name": "a"}], "nodeName": "node-1"},
        "status": status,
    })
}

#[test]
fn human_duration_matches_apimachinery() {
    let cases = [
        (0, "0s"),
        (59, "59s"),
        (119, "119s"),
        (120, "2m"),
        (182, "3m2s"),
        (600, "10m"),
        (179 * 60, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 5 * 60, "3h5m"),
        (8 * 3600, "8h"),
        (47 * 3600, "47h"),
        (51 * 3600, "2d3h"),
        (48 * 3600, "2d"),
        (8 * 86400, "8d"),
        (729 * 86400, "729d"),
        (730 * 86400, "2y"),
        (731 * 86400, "2y1d"),
        (8 * 365 * 86400, "8y"),
    ];
    for (secs, want) in cases {
        assert_eq!(human_duration(Duration::from_secs(secs)), want, "{secs}s");
    }
    assert_eq!(human_duration_nanos(-1_500_000_000), "0s");
    assert_eq!(human_duration_nanos(-2_000_000_000), "<invalid>");
}

#[test]
fn running_pod_cells() {
    let p = pod(json!({
        "phase": "Running",
        "podIPs": [{"ip": "10.0.0.5"}],
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "a", "ready": true, "restartCount": 0, "state": {"running": {}}}]
    }));
    let cells = pod_row(&p);
    assert_eq!(
        cells,
        vec![
            json!("p"),
            json!("1/1"),
            json!("Running"),
            json!("0"),
            json!("5m"),
            json!("10.0.0.5"),
            json!("node-1"),
            json!("<none>"),
            json!("<none>")
        ]
    );
}

#[test]
fn pod_status_reasons() {
    let creating = pod(json!({"phase": "Pending", "containerStatuses": [
            {"name": "a", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}]}));
    assert_eq!(pod_row(&creating)[2], "ContainerCreating");
    assert_eq!(pod_row(&creating)[1], "0/1");

    let completed = pod(json!({"phase": "Succeeded", "containerStatuses": [
            {"name": "a", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}));
    assert_eq!(pod_row(&completed)[2], "Completed");

    let error = pod(json!({"phase": "Failed", "containerStatuses": [
            {"name": "a", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}));
    assert_eq!(pod_row(&error)[2], "Error");

    let no_reason = pod(json!({"phase": "Failed", "containerStatuses": [
            {"name": "a", "state": {"terminated": {"exitCode": 137}}}]}));
    assert_eq!(pod_row(&no_reason)[2], "ExitCode:137");

    let mut terminating = pod(json!({"phase": "Running", "containerStatuses": [
            {"name": "a", "ready": true, "state": {"running": {}}}]}));
    terminating["metadata"]["deletionTimestamp"] = json!("2025-01-01T11:59:00Z");
    assert_eq!(pod_row(&terminating)[2], "Terminating");

    // A finished pod being deleted keeps its terminal status.
    let mut done = completed.clone();
    done["metadata"]["deletionTimestamp"] = json!("2025-01-01T11:59:00Z");
    assert_eq!(pod_row(&done)[2], "Completed");

    let pending = json!({"metadata": {"name": "q"}, "spec": {"containers": [{"name": "a"}, {"name": "b"}]}, "status": {"phase": "Pending"}});
    let cells = pod_row(&pending);
    assert_eq!(cells[1], "0/2");
    assert_eq!(cells[2], "Pending");
    assert_eq!(cells[4], "<unknown>");
    assert_eq!(cells[6], "<none>");
}

#[test]
fn pod_restarts_and_init_containers() {
    let p = pod(
        json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}], "containerStatuses": [
            {"name": "a", "ready": false, "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
             "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2025-01-01T11:58:00Z"}}}]}),
    );
    let cells = pod_row(&p);
    assert_eq!(cells[2], "CrashLoopBackOff");
    assert_eq!(cells[3], "3 (2m ago)");

    let mut init = pod(json!({"phase": "Pending", "initContainerStatuses": [
            {"name": "i1", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
            {"name": "i2", "state": {"running": {}}}]}));
    init["spec"]["initContainers"] = json!([{"name": "i1"}, {"name": "i2"}, {"name": "i3"}]);
    assert_eq!(pod_row(&init)[2], "Init:1/3");

    let mut failed_init = pod(json!({"phase": "Pending", "initContainerStatuses": [
            {"name": "i1", "restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}));
    failed_init["spec"]["initContainers"] = json!([{"name": "i1"}]);
    let cells = pod_row(&failed_init);
    assert_eq!(cells[2], "Init:CrashLoopBackOff");
    assert_eq!(cells[3], "2");

    // A started sidecar counts towards READY and the total.
    let mut sidecar = pod(json!({"phase": "Running",
            "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"}],
            "initContainerStatuses": [{"name": "s", "started": true, "ready": true, "restartCount": 1, "state": {"running": {}}}],
            "containerStatuses": [{"name": "a", "ready": true, "state": {"running": {}}}]}));
    sidecar["spec"]["initContainers"] = json!([{"name": "s", "restartPolicy": "Always"}]);
    let cells = pod_row(&sidecar);
    assert_eq!(cells[1], "2/2");
    assert_eq!(cells[2], "Running");
    assert_eq!(cells[3], "1");
}

#[test]
fn completed_pod_row_condition_and_metadata_object() {
    let p = pod(json!({"phase": "Succeeded"}));
    let table = render_table(
        &builtin("", "Pod"),
        &[&p],
        IncludeObject::Metadata,
        now(),
        "42",
        Some("tok"),
    );
    assert_eq!(table["kind"], "Table");
    assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(
        table["metadata"],
        json!({"resourceVersion": "42", "continue": "tok"})
    );
    assert_eq!(table["columnDefinitions"][3]["name"], "Restarts");
    assert_eq!(table["columnDefinitions"][5]["priority"], 1);
    assert_eq!(table["columnDefinitions"][0]["format"], "name");
    let row = &table["rows"][0];
    assert_eq!(row["conditions"][0]["reason"], "Succeeded");
    assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(row["object"]["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(row["object"]["metadata"]["namespace"], "default");
}

#[test]
fn include_object_parsing() {
    assert_eq!(parse_include_object(None), Ok(IncludeObject::Metadata));
    assert_eq!(
        parse_include_object(Some("Object")),
        Ok(IncludeObject::Object)
    );
    assert_eq!(parse_include_object(Some("None")), Ok(IncludeObject::None));
    assert_eq!(
        parse_include_object(Some("bogus")).unwrap_err().to_string(),
        "unrecognized includeObject value: \"bogus\""
    );
}

#[test]
fn node_service_configmap_secret_namespace_lease_priority_class() {
    let node = json!({"metadata": {"name": "n1", "creationTimestamp": "2024-12-30T12:00:00Z",
            "labels": {"node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "worker"}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "False"}],
                "addresses": [{"type": "InternalIP", "address": "192.168.0.2"}],
                "nodeInfo": {"kubeletVersion": "v1.33.0", "osImage": "Sim"}}});
    let t = render_table(
        &builtin("", "Node"),
        &[&node],
        IncludeObject::None,
        now(),
        "1",
        None,
    );
    assert_eq!(
        t["rows"][0]["cells"],
        json!([
            "n1",
            "NotReady,SchedulingDisabled",
            "control-plane,worker",
            "2d",
            "v1.33.0",
            "192.168.0.2",
            "<none>",
            "Sim",
            "<unknown>",
            "<unknown>"
        ])
    );
    assert_eq!(t["rows"][0]["object"], Value::Null);

    let svc = json!({"metadata": {"name": "s"}, "spec": {"type": "NodePort", "clusterIPs": ["10.96.0.10"],
            "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}, {"port": 53, "protocol": "UDP"}],
            "selector": {"b": "2", "a": "1"}}});
    let t = render_table(
        &builtin("", "Service"),
        &[&svc],
        IncludeObject::None,
        now(),
        "1",
        None,
    );
    assert_eq!(
        t["rows"][0]["cells"],
        json!([
            "s",
            "NodePort",
            "10.96.0.10",
            "<none>",
            "80:30080/TCP,53/UDP",
            "<unknown>",
            "a=1,b=2"
        ])
    );

    let lb = json!({"metadata": {"name": "lb"}, "spec": {"type": "LoadBalancer", "clusterIPs": ["10.96.0.11"]}});
    let t = render_table(
        &builtin("", "Service"),
        &[&lb],
        IncludeObject::None,
        now(),
        "1",
        None,
    );
    assert_eq!(t["rows"][0]["cells"][3], "<pending>");
    assert_eq!(t["rows"][0]["cells"][4], "<none>");

    let cm = json!({"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}});
    let t = render_table(
        &builtin("", "ConfigMap"),
        &[&cm],
        IncludeObject::None,
        now(),
        "1",
        None,
    );
    assert_eq!(t["rows"][0]["cells"], json!(["c", 3, "<unknown>"]));

    let secret = json!({"metadata": {"name": "sec"}, "type": "Opaque", "data": {"k": "dg=="}});
    let t = render_table(
        &builtin("", "Secret"),
        &[&secret],
        IncludeObject::None,
        now(),
        "1",
        None,
    );
    assert_eq!(
        t["rows"][0]["cells"],
        json!(["sec", "Opaque", 1, "<unknown>"])
    );

    let ns = json!({"metadata": {"name": "default", "creationTimestamp": "2025-01-01T11:00:00Z"}, "status": {"phase": "Active"}});
    let t = render_table(
        &builtin("", "Namespace"),
        &[&ns],
        IncludeObject::None,
        now(),
        "1",
        None,
    );
    assert_eq!(t["rows"][0]["cells"], json!(["default", "Active", "60m"]));

    let lease = json!({"metadata": {"name": "l"}, "spec": {"holderIdentity": "diorch-1"}});
    let t = render_table(
        &builtin("coordination.k8s.io", "Lease"),
        &[&lease],
        IncludeObject::None,
        now(),
        "1",
        None,
    );
    assert_eq!(t["rows"][0]["cells"], json!(["l", "diorch-1", "<unknown>"]));

    // `kubectl get priorityclasses`: NAME VALUE GLOBAL-DEFAULT AGE PREEMPTIONPOLICY.
    let class = json!({"metadata": {"name": "high", "creationTimestamp": "2025-01-01T11:00:00Z"},
        "value": 1000, "preemptionPolicy": "PreemptLowerPriority"});
    let t = render_table(
        &builtin("scheduling.k8s.io", "PriorityClass"),
        &[&class],
        IncludeObject::None,
        now(),
        "1",
        None,
    );
    let names: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["Name", "Value", "Global-Default", "Age", "PreemptionPolicy"]
    );
    assert_eq!(
        t["rows"][0]["cells"],
        json!(["high", 1000, false, "60m", "PreemptLowerPriority"])
    );
}

#[test]
fn endpoints_format() {
    let ep = json!({"metadata": {"name": "e"}, "subsets": [{
            "addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}, {"ip": "10.0.0.3"}, {"ip": "fd00::4"}],
            "ports": [{"port": 80}]}]});
    assert_eq!(
        format_endpoints(&ep),
        "10.0.0.1:80,10.0.0.2:80,10.0.0.3:80 + 1 more..."
    );
    let v6 = json!({"subsets": [{"addresses": [{"ip": "fd00::4"}], "ports": [{"port": 80}]}]});
    assert_eq!(format_endpoints(&v6), "[fd00::4]:80");
    assert_eq!(format_endpoints(&json!({"metadata": {}})), "<none>");
}

#[test]
fn core_and_events_api_events() {
    let ev = json!({"metadata": {"name": "p.1"}, "type": "Normal", "reason": "Scheduled",
            "message": " Successfully assigned default/p to node-1 ",
            "involvedObject": {"kind": "Pod", "name": "p"},
            "source": {"component": "default-scheduler"},
            "firstTimestamp": "2025-01-01T11:59:00Z", "lastTimestamp": "2025-01-01T11:59:30Z", "count": 2});
    let t = render_table(
        &builtin("", "Event"),
        &[&ev],
        IncludeObject::None,
        now(),
        "1",
        None,
    );
    assert_eq!(t["columnDefinitions"][0]["name"], "Last Seen");
    assert_eq!(
        t["rows"][0]["cells"],
        json!([
            "30s",
            "Normal",
            "Scheduled",
            "pod/p",
            "",
            "default-scheduler",
            "Successfully assigned default/p to node-1",
            "60s",
            2,
            "p.1"
        ])
    );
    let new_api = json!({"metadata": {"name": "x"}, "type": "Warning", "reason": "Failed",
            "note": "boom", "regarding": {"kind": "DIJob", "name": "j"},
            "eventTime": "2025-01-01T11:58:00.000000Z", "reportingController": "diorch", "reportingInstance": "diorch-0"});
    let t = render_table(
        &builtin("events.k8s.io", "Event"),
        &[&new_api],
        IncludeObject::None,
        now(),
        "1",
        None,
    );
    assert_eq!(
        t["rows"][0]["cells"],
        json!([
            "2m",
            "Warning",
            "Failed",
            "dijob/j",
            "",
            "diorch, diorch-0",
            "boom",
            "2m",
            1,
            "x"
        ])
    );
}

#[test]
fn default_convertor_for_crds_and_unknown_kinds() {
    let crd = json!({"metadata": {"name": "dijobs.diengine.opendilab.org", "creationTimestamp": "2025-01-01T10:00:00Z"}});
    let t = render_table(
        &builtin("apiextensions.k8s.io", "CustomResourceDefinition"),
        &[&crd],
        IncludeObject::None,
        now(),
        "1",
        None,
    );
    assert_eq!(t["columnDefinitions"][1]["name"], "Created At");
    assert_eq!(t["columnDefinitions"][1]["type"], "date");
    assert_eq!(
        t["rows"][0]["cells"],
        json!(["dijobs.diengine.opendilab.org", "2025-01-01T10:00:00Z"])
    );
}

fn dijob_info(columns: Vec<PrinterColumn>) -> ResourceInfo {
    ResourceInfo {
        group: "diengine.opendilab.org".into(),
        version: "v2alpha1".into(),
        kind: "DIJob".into(),
        list_kind: "DIJobList".into(),
        plural: "dijobs".into(),
        singular: "dijob".into(),
        short_names: vec![],
        namespaced: true,
        subresources: vec!["status".into()],
        categories: vec![],
        printer_columns: columns,
        custom: Some(Arc::new(CustomResourceInfo {
            schema: json!({"type": "object"}),
            crd_name: "dijobs.diengine.opendilab.org".into(),
        })),
    }
}

fn pc(name: &str, type_: &str, path: &str, priority: i32) -> PrinterColumn {
    PrinterColumn {
        name: name.into(),
        type_: type_.into(),
        format: String::new(),
        description: String::new(),
        priority,
        json_path: path.into(),
    }
}

#[test]
fn custom_resource_columns() {
    let info = dijob_info(vec![
        pc("Phase", "string", ".status.phase", 0),
        pc("Replicas", "integer", ".status.replicas", 0),
        pc("Ratio", "number", ".status.ratio", 0),
        pc("Ok", "boolean", ".status.ok", 0),
        pc("Age", "date", ".metadata.creationTimestamp", 0),
        pc("Missing", "string", ".status.nothing", 1),
        pc("First", "string", ".spec.tasks[*].name", 1),
        pc("Map", "string", ".spec.selector", 1),
        pc("Bad", "date", ".status.when", 1),
    ]);
    let job = json!({"metadata": {"name": "j", "creationTimestamp": "2025-01-01T11:00:00Z"},
            "spec": {"tasks": [{"name": "learner"}, {"name": "collector"}], "selector": {"b": "<x>", "a": 1}},
            "status": {"phase": "Running", "replicas": 3.7, "ratio": 2, "ok": true, "when": "yesterday"}});
    let t = render_table(&info, &[&job], IncludeObject::Object, now(), "9", None);
    assert_eq!(
        t["columnDefinitions"][1]["description"],
        "Custom resource definition column (in JSONPath format): .status.phase"
    );
    assert_eq!(t["columnDefinitions"][6]["priority"], 1);
    assert_eq!(
        t["rows"][0]["cells"],
        json!([
            "j",
            "Running",
            3,
            2.0,
            true,
            "60m",
            null,
            "learner",
            "{\"a\":1,\"b\":\"\\u003cx\\u003e\"}",
            "<invalid>"
        ])
    );
    assert_eq!(t["rows"][0]["object"]["kind"], "DIJob");
    assert_eq!(
        t["rows"][0]["object"]["apiVersion"],
        "diengine.opendilab.org/v2alpha1"
    );

    let default_cols = dijob_info(vec![]);
    let t = render_table(
        &default_cols,
        &[&job],
        IncludeObject::None,
        now(),
        "9",
        None,
    );
    assert_eq!(t["columnDefinitions"][1]["name"], "Age");
    assert_eq!(t["columnDefinitions"][1]["type"], "date");
    assert_eq!(t["rows"][0]["cells"], json!(["j", "60m"]));
}

#[test]
fn watch_event_tables_send_headers_once() {
    let info = builtin("", "ConfigMap");
    let cm = json!({"metadata": {"name": "c", "resourceVersion": "12"}});
    let first = render_table_row_event(&info, &cm, IncludeObject::Metadata, now(), true);
    assert_eq!(first["columnDefinitions"][1]["name"], "Data");
    assert_eq!(first["metadata"]["resourceVersion"], "12");
    assert_eq!(first["rows"].as_array().unwrap().len(), 1);
    let later = render_table_row_event(&info, &cm, IncludeObject::Metadata, now(), false);
    assert_eq!(later["columnDefinitions"], Value::Null);
    assert_eq!(later["rows"][0]["cells"], json!(["c", 0, "<unknown>"]));
}

#[test]
fn jsonpath_cases() {
    let obj = json!({"metadata": {"labels": {"app.kubernetes.io/name": "x", "plain": "y"}},
            "spec": {"containers": [{"name": "a", "image": "i1"}, {"name": "b", "image": "i2"}]},
            "status": {"phase": "Running", "n": null}});
    assert_eq!(eval_jsonpath(&obj, ".status.phase"), Some(json!("Running")));
    assert_eq!(
        eval_jsonpath(&obj, "{.status.phase}"),
        Some(json!("Running"))
    );
    assert_eq!(
        eval_jsonpath(&obj, ".spec.containers[1].image"),
        Some(json!("i2"))
    );
    assert_eq!(
        eval_jsonpath(&obj, ".spec.containers[-1].name"),
        Some(json!("b"))
    );
    assert_eq!(
        eval_jsonpath(&obj, ".spec.containers[*].name"),
        Some(json!(["a", "b"]))
    );
    assert_eq!(
        eval_jsonpath(&obj, ".metadata.labels.app\\.kubernetes\\.io/name"),
        Some(json!("x"))
    );
    assert_eq!(
        eval_jsonpath(&obj, ".metadata.labels['app.kubernetes.io/name']"),
        Some(json!("x"))
    );
    assert_eq!(eval_jsonpath(&obj, ".status.n"), Some(Value::Null));
    assert_eq!(eval_jsonpath(&obj, ".status.missing"), None);
    assert_eq!(eval_jsonpath(&obj, ".spec.containers[5].name"), None);
    assert_eq!(eval_jsonpath(&obj, ".spec.containers[*].missing"), None);
    assert_eq!(eval_jsonpath(&obj, "status.phase"), None);
    assert_eq!(eval_jsonpath(&obj, ".spec..name"), None);
}
