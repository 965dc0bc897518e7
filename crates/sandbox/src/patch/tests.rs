//! Tests of PATCH: content types, strategic merge patch of the built-in kinds with every
//! directive, merge patch and JSON patch with the apiserver's errors.

use serde_json::{Value, json};

use super::*;

fn smp(kind: &str, original: Value, patch: Value) -> Result<Value, PatchError> {
    let api_version = match kind {
        "Lease" => "coordination.k8s.io/v1",
        _ => "v1",
    };
    apply_patch(
        api_version,
        kind,
        &original,
        PatchType::StrategicMerge,
        patch.to_string().as_bytes(),
    )
}

fn pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "labels": {"app": "a", "tier": "web"},
                      "finalizers": ["a/x", "b/y"],
                      "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "o1", "uid": "u1"}]},
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox:1", "env": [{"name": "A", "value": "1"}],
                 "ports": [{"containerPort": 80, "protocol": "TCP"}]},
                {"name": "side", "image": "nginx:1"}
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "tolerations": [{"key": "k1", "operator": "Exists"}]
        }
    })
}

#[test]
fn content_types() {
    assert_eq!(
        PatchType::from_content_type("application/strategic-merge-patch+json; charset=utf-8"),
        Some(PatchType::StrategicMerge)
    );
    assert_eq!(
        PatchType::from_content_type("application/json-patch+json"),
        Some(PatchType::Json)
    );
    assert_eq!(
        PatchType::from_content_type("application/merge-patch+json"),
        Some(PatchType::Merge)
    );
    assert_eq!(
        PatchType::from_content_type("application/apply-patch+yaml"),
        Some(PatchType::Apply)
    );
    assert_eq!(PatchType::from_content_type("application/json"), None);
}

#[test]
fn smp_adds_env_var_by_name() {
    let out = smp(
        "Pod",
        pod(),
        json!({"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "2"}]}]}}),
    )
    .unwrap();
    // Without $setElementOrder, items new to the list come before the server's items.
    assert_eq!(
        out["spec"]["containers"][0]["env"],
        json!([{"name": "B", "value": "2"}, {"name": "A", "value": "1"}])
    );
    // kubectl apply sends the order, which wins.
    let out = smp(
        "Pod",
        pod(),
        json!({"spec": {"containers": [{"name": "main",
                "$setElementOrder/env": [{"name": "A"}, {"name": "B"}],
                "env": [{"name": "B", "value": "2"}]}]}}),
    )
    .unwrap();
    assert_eq!(
        out["spec"]["containers"][0]["env"],
        json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
    );
    assert_eq!(out["spec"]["containers"][0]["image"], "busybox:1");
    assert_eq!(out["spec"]["containers"][1]["name"], "side");
}

#[test]
fn smp_changes_image_by_container_name() {
    let out = smp(
        "Pod",
        pod(),
        json!({"spec": {"containers": [{"name": "side", "image": "nginx:2"}]}}),
    )
    .unwrap();
    let cs = out["spec"]["containers"].as_array().unwrap();
    assert_eq!(cs.len(), 2);
    assert_eq!(cs[0]["name"], "main");
    assert_eq!(cs[1]["image"], "nginx:2");
}

#[test]
fn smp_deletes_container_with_patch_delete() {
    let out = smp(
        "Pod",
        pod(),
        json!({"spec": {"containers": [{"name": "side", "$patch": "delete"}]}}),
    )
    .unwrap();
    let cs = out["spec"]["containers"].as_array().unwrap();
    assert_eq!(cs.len(), 1);
    assert_eq!(cs[0]["name"], "main");
}

#[test]
fn smp_replace_directive_on_list() {
    let out = smp(
        "Pod",
        pod(),
        json!({"spec": {"containers": [{"name": "only", "image": "x"}, {"$patch": "replace"}]}}),
    )
    .unwrap();
    assert_eq!(
        out["spec"]["containers"],
        json!([{"name": "only", "image": "x"}])
    );
}

#[test]
fn smp_replace_directive_on_map() {
    let out = smp(
        "Pod",
        pod(),
        json!({"metadata": {"labels": {"$patch": "replace", "new": "1"}}}),
    )
    .unwrap();
    assert_eq!(out["metadata"]["labels"], json!({"new": "1"}));
}

#[test]
fn smp_set_element_order_reorders_as_kubectl_apply_sends() {
    // kubectl apply: side first, then main, and a new container "third" between them.
    let out = smp(
        "Pod",
        pod(),
        json!({"spec": {
            "$setElementOrder/containers": [{"name": "side"}, {"name": "third"}, {"name": "main"}],
            "containers": [{"name": "third", "image": "t"}]
        }}),
    )
    .unwrap();
    let names: Vec<&str> = out["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["side", "third", "main"]);
}

#[test]
fn smp_set_element_order_must_match_patch_list() {
    let err = smp(
        "Pod",
        pod(),
        json!({"spec": {
            "$setElementOrder/containers": [{"name": "main"}],
            "containers": [{"name": "other", "image": "t"}]
        }}),
    )
    .unwrap_err();
    assert_eq!(err.status_code(), 500);
    assert!(err.to_string().starts_with("The order in patch list:\n[map[image:t name:other]]\n doesn't match $setElementOrder list:\n[map[name:main]]"), "{err}");
}

#[test]
fn smp_retain_keys_clears_other_volume_sources() {
    let out = smp(
        "Pod",
        pod(),
        json!({"spec": {"volumes": [{"name": "data", "$retainKeys": ["configMap", "name"],
                                          "configMap": {"name": "cm"}}]}}),
    )
    .unwrap();
    assert_eq!(
        out["spec"]["volumes"],
        json!([{"name": "data", "configMap": {"name": "cm"}}])
    );
}

#[test]
fn smp_retain_keys_must_list_patched_keys() {
    let err = smp(
            "Pod",
            pod(),
            json!({"spec": {"volumes": [{"name": "data", "$retainKeys": ["name"], "hostPath": {"path": "/x"}}]}}),
        )
        .unwrap_err();
    assert_eq!(
        err,
        PatchError::BadRequest("invalid patch format of retainKeys".into())
    );
}

#[test]
fn smp_delete_from_primitive_list_finalizers() {
    let out = smp(
        "Pod",
        pod(),
        json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a/x"]}}),
    )
    .unwrap();
    assert_eq!(out["metadata"]["finalizers"], json!(["b/y"]));
    let err = smp(
        "Pod",
        pod(),
        json!({"metadata": {"$deleteFromPrimitiveList": ["a/x"]}}),
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "invalid patch format of primitive list");
    assert_eq!(err.status_code(), 400);
}

#[test]
fn smp_finalizers_merge_as_a_set() {
    let out = smp(
        "Pod",
        pod(),
        json!({"metadata": {"finalizers": ["c/z", "a/x"]}}),
    )
    .unwrap();
    assert_eq!(out["metadata"]["finalizers"], json!(["c/z", "a/x", "b/y"]));
}

#[test]
fn smp_null_deletes_label_and_unmatched_null_is_ignored() {
    let out = smp(
        "Pod",
        pod(),
        json!({"metadata": {"labels": {"tier": null, "nope": null, "new": "v"}}}),
    )
    .unwrap();
    assert_eq!(out["metadata"]["labels"], json!({"app": "a", "new": "v"}));
}

#[test]
fn smp_list_without_merge_key_is_replaced() {
    let out = smp(
        "Pod",
        pod(),
        json!({"spec": {"tolerations": [{"key": "k2", "operator": "Exists"}]}}),
    )
    .unwrap();
    assert_eq!(
        out["spec"]["tolerations"],
        json!([{"key": "k2", "operator": "Exists"}])
    );
}

#[test]
fn smp_owner_references_merge_by_uid() {
    let out = smp(
        "Pod",
        pod(),
        json!({"metadata": {"ownerReferences": [
            {"apiVersion": "v1", "kind": "Y", "name": "o2", "uid": "u2"},
            {"uid": "u1", "controller": true}
        ]}}),
    )
    .unwrap();
    let refs = out["metadata"]["ownerReferences"].as_array().unwrap();
    assert_eq!(refs.len(), 2);
    assert_eq!(refs[0]["uid"], "u2");
    assert_eq!(refs[1]["uid"], "u1");
    assert_eq!(refs[1]["controller"], true);
    assert_eq!(refs[1]["name"], "o1");
}

#[test]
fn smp_service_ports_by_port_and_node_addresses_by_type() {
    let svc = json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443}]}});
    let out = smp(
        "Service",
        svc,
        json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}),
    )
    .unwrap();
    assert_eq!(
        out["spec"]["ports"],
        json!([{"port": 80, "targetPort": 9090}, {"port": 443}])
    );

    let node = json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                                     "conditions": [{"type": "Ready", "status": "False"}]}});
    let out = smp(
        "Node",
        node,
        json!({"status": {"conditions": [{"type": "Ready", "status": "True"}],
                              "addresses": [{"type": "Hostname", "address": "n1"}]}}),
    )
    .unwrap();
    assert_eq!(
        out["status"]["conditions"],
        json!([{"type": "Ready", "status": "True"}])
    );
    assert_eq!(
        out["status"]["addresses"],
        json!([{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.1"}])
    );
}

#[test]
fn smp_pod_status_conditions_by_type() {
    let p = json!({"status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}});
    let out = smp(
            "Pod",
            p,
            json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
        )
        .unwrap();
    assert_eq!(out["status"]["phase"], "Running");
    assert_eq!(
        out["status"]["conditions"],
        json!([{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}])
    );
}

#[test]
fn smp_missing_merge_key_and_bad_directive() {
    let err = smp(
        "Pod",
        pod(),
        json!({"spec": {"containers": [{"image": "x"}]}}),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "map: map[image:x] does not contain declared merge key: name"
    );
    let err = smp(
        "Pod",
        pod(),
        json!({"spec": {"containers": [{"name": "main", "$patch": "bogus"}]}}),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown patch type: bogus in map: map[$patch:bogus name:main]"
    );
}

#[test]
fn smp_directives_do_not_leak_into_new_fields() {
    let out = smp(
            "Pod",
            pod(),
            json!({"spec": {"initContainers": [{"name": "gone", "$patch": "delete"}, {"name": "i", "image": "x"}]}}),
        )
        .unwrap();
    assert_eq!(
        out["spec"]["initContainers"],
        json!([{"name": "i", "image": "x"}])
    );
}

#[test]
fn smp_refused_for_custom_resources() {
    let err = apply_patch(
        "diengine.opendilab.org/v2alpha1",
        "DIJob",
        &json!({}),
        PatchType::StrategicMerge,
        b"{}",
    )
    .unwrap_err();
    assert_eq!(err.status_code(), 415);
    assert_eq!(
        err.to_string(),
        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    );
    assert!(is_strategic_kind("coordination.k8s.io/v1", "Lease"));
    assert!(!is_strategic_kind("apps/v1", "Deployment"));
    let err = apply_patch("v1", "Pod", &pod(), PatchType::Apply, b"{}").unwrap_err();
    assert_eq!(err.status_code(), 415);
}

#[test]
fn smp_body_errors() {
    let err = smp("Pod", pod(), json!([1])).unwrap_err();
    assert_eq!(
        err,
        PatchError::BadRequest(
            "json: cannot unmarshal array into Go value of type map[string]interface {}".into()
        )
    );
    let err = apply_patch("v1", "Pod", &pod(), PatchType::StrategicMerge, b"{\"a\":").unwrap_err();
    assert_eq!(err.to_string(), "unexpected end of JSON input");
    let err = apply_patch("v1", "Pod", &pod(), PatchType::StrategicMerge, b"xyz").unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid character 'x' looking for beginning of value"
    );
}

#[test]
fn merge_patch_null_deletes_and_objects_merge() {
    let out = apply_patch(
        "diengine.opendilab.org/v2alpha1",
        "DIJob",
        &json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"list": [1, 2]}}),
        PatchType::Merge,
        br#"{"metadata":{"labels":{"a":null,"c":"3"}},"spec":{"list":[3],"new":{"x":null,"y":1}}}"#,
    )
    .unwrap();
    assert_eq!(
        out,
        json!({"metadata": {"labels": {"b": "2", "c": "3"}}, "spec": {"list": [3], "new": {"y": 1}}})
    );
    let err = apply_patch("v1", "Pod", &pod(), PatchType::Merge, b"null").unwrap_err();
    assert_eq!(err, PatchError::BadRequest("Invalid JSON Patch".into()));
    let err = apply_patch("v1", "Pod", &pod(), PatchType::Merge, b"{").unwrap_err();
    assert_eq!(err, PatchError::BadRequest("Invalid JSON Patch".into()));
}

fn jp(doc: Value, ops: Value) -> Result<Value, PatchError> {
    apply_patch(
        "v1",
        "ConfigMap",
        &doc,
        PatchType::Json,
        ops.to_string().as_bytes(),
    )
}

#[test]
fn json_patch_add_remove_replace() {
    let doc = json!({"metadata": {"name": "c"}, "data": {"a": "1"}, "list": [1, 2]});
    let out = jp(
        doc,
        json!([
            {"op": "add", "path": "/data/b", "value": "2"},
            {"op": "remove", "path": "/data/a"},
            {"op": "replace", "path": "/list/0", "value": 9},
            {"op": "add", "path": "/list/-", "value": 3},
            {"op": "add", "path": "/metadata/labels", "value": {"x~y/z": "1"}},
            {"op": "test", "path": "/metadata/labels/x~0y~1z", "value": "1"},
            {"op": "move", "from": "/data/b", "path": "/data/c"},
            {"op": "copy", "from": "/data/c", "path": "/data/d"}
        ]),
    )
    .unwrap();
    assert_eq!(
        out,
        json!({"metadata": {"name": "c", "labels": {"x~y/z": "1"}}, "data": {"c": "2", "d": "2"}, "list": [9, 2, 3]})
    );
}

#[test]
fn json_patch_errors_match_apiserver() {
    let doc = json!({"metadata": {"name": "c"}, "list": [1]});
    let err = jp(
        doc.clone(),
        json!([{"op": "test", "path": "/metadata/name", "value": "x"}]),
    )
    .unwrap_err();
    assert_eq!(err.status_code(), 422);
    assert_eq!(
        err.to_string(),
        "testing value /metadata/name failed: test failed"
    );
    let status = err.to_status();
    assert_eq!(
        status["message"],
        "the server rejected our request due to an error in our request"
    );
    assert_eq!(status["reason"], "Invalid");
    // kube-apiserver drops the patch's own error: empty details, no causes.
    assert_eq!(status["details"], json!({}));

    let err = jp(
        doc.clone(),
        json!([{"op": "remove", "path": "/metadata/labels"}]),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "error in remove for path: '/metadata/labels': Unable to remove nonexistent key: labels: missing value"
    );
    let err = jp(
        doc.clone(),
        json!([{"op": "add", "path": "/spec/x", "value": 1}]),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "add operation does not apply: doc is missing path: \"/spec/x\": missing value"
    );
    let err = jp(
        doc.clone(),
        json!([{"op": "replace", "path": "/list/3", "value": 1}]),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "replace operation does not apply: doc is missing key: /list/3: missing value"
    );
    let err = jp(
        doc.clone(),
        json!([{"op": "add", "path": "/list/x", "value": 1}]),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "error in add for path: '/list/x': value was not a proper array index: 'x': strconv.Atoi: parsing \"x\": invalid syntax"
    );
    let err = jp(doc.clone(), json!([{"op": "frob", "path": "/a"}])).unwrap_err();
    assert_eq!(err.to_string(), "Unexpected kind: frob");
    let err = jp(doc.clone(), json!({"op": "add"})).unwrap_err();
    assert_eq!(
        err,
        PatchError::BadRequest(
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch".into()
        )
    );
    // evanphx v4 lets replace create a missing object key.
    let out = jp(
        doc,
        json!([{"op": "replace", "path": "/metadata/uid", "value": "u"}]),
    )
    .unwrap();
    assert_eq!(out["metadata"]["uid"], "u");
}

#[test]
fn json_patch_test_of_missing_key_with_null_passes() {
    let doc = json!({"metadata": {"name": "c"}});
    assert!(
        jp(
            doc.clone(),
            json!([{"op": "test", "path": "/metadata/labels", "value": null}])
        )
        .is_ok()
    );
    assert!(
        jp(
            doc,
            json!([{"op": "test", "path": "/metadata", "value": {"name": "c"}}])
        )
        .is_ok()
    );
}
