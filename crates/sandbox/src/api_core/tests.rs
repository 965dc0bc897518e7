//! Tests of the REST layer: continue tokens, bootstrap, conflicts, concurrent patches, namespaces,
//! bindings and graceful deletion, finalizers, consistent list pages and the two Event APIs.

use std::sync::Arc;

use serde_json::json;

use crate::patch::PatchType;
use crate::registry::ResourceInfo;

use super::object_meta::meta_str;
use super::read::{decode_continue, encode_continue};
use super::*;

fn info(api: &Api, g: &str, v: &str, p: &str) -> Arc<ResourceInfo> {
    api.resource(g, v, p).unwrap()
}

#[test]
fn continue_token_round_trips() {
    let t = encode_continue(42, &("ns".into(), "a".into()));
    let (rv, key) = decode_continue(&t).unwrap();
    assert_eq!(rv, 42);
    assert!(key > ("ns".to_string(), "a".to_string()));
    assert!(key < ("ns".to_string(), "a0".to_string()));
}

#[test]
fn bootstrap_namespaces_and_kubernetes_service() {
    let api = Api::new(100);
    let ns = info(&api, "", "v1", "namespaces");
    for n in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let o = api.get(&ns, None, n).unwrap();
        assert_eq!(o["status"]["phase"], "Active");
    }
    let svc = info(&api, "", "v1", "services");
    let k = api.get(&svc, Some("default"), "kubernetes").unwrap();
    assert_eq!(k["spec"]["clusterIP"], "10.96.0.1");
}

#[test]
fn create_conflict_and_stale_update() {
    let api = Api::new(100);
    let cm = info(&api, "", "v1", "configmaps");
    let body = json!({"metadata": {"name": "c"}, "data": {"a": "1"}});
    let w = api
        .create(&cm, Some("default"), body.clone(), &WriteOptions::default())
        .unwrap();
    assert_eq!(w.code, 201);
    let e = api
        .create(&cm, Some("default"), body, &WriteOptions::default())
        .unwrap_err();
    assert_eq!(e.message, "configmaps \"c\" already exists");
    let mut stale = w.body.clone();
    stale["data"]["a"] = json!("2");
    api.update(
        &cm,
        Some("default"),
        "c",
        None,
        stale.clone(),
        &WriteOptions::default(),
    )
    .unwrap();
    let e = api
        .update(
            &cm,
            Some("default"),
            "c",
            None,
            stale,
            &WriteOptions::default(),
        )
        .unwrap_err();
    assert_eq!(e.code, 409);
    assert!(e.message.contains("the object has been modified"));
}

#[test]
fn concurrent_patches_without_a_version_all_land_and_a_stale_versioned_one_does_not() {
    let api = Arc::new(Api::new(100));
    let cm = info(&api, "", "v1", "configmaps");
    let created = api
        .create(
            &cm,
            Some("default"),
            json!({"metadata": {"name": "c"}}),
            &WriteOptions::default(),
        )
        .unwrap();
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (api, cm) = (api.clone(), cm.clone());
            std::thread::spawn(move || {
                for i in 0..100 {
                    let patch = json!({"data": {format!("w{w}-{i}"): "x"}}).to_string();
                    api.patch(
                        &cm,
                        Some("default"),
                        "c",
                        None,
                        PatchType::Merge,
                        patch.as_bytes(),
                        &WriteOptions::default(),
                    )
                    .expect("a patch without resourceVersion is retried, never refused");
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let rv = meta_str(&created.body, "resourceVersion").to_string();
    let stale = json!({"metadata": {"resourceVersion": rv}, "data": {"late": "x"}}).to_string();
    let e = api
        .patch(
            &cm,
            Some("default"),
            "c",
            None,
            PatchType::Merge,
            stale.as_bytes(),
            &WriteOptions::default(),
        )
        .unwrap_err();
    assert_eq!(e.code, 409);
    let res = storage_key(&cm);
    let stored = api
        .store
        .get(&res, &("default".to_string(), "c".to_string()))
        .unwrap();
    assert_eq!(stored["data"].as_object().map(|d| d.len()), Some(400));
}

#[test]
fn missing_and_terminating_namespace() {
    let api = Api::new(100);
    let cm = info(&api, "", "v1", "configmaps");
    let ns = info(&api, "", "v1", "namespaces");
    let e = api
        .create(
            &cm,
            Some("nope"),
            json!({"metadata": {"name": "c"}}),
            &WriteOptions::default(),
        )
        .unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (404, "namespaces \"nope\" not found")
    );
    api.create(
        &ns,
        None,
        json!({"metadata": {"name": "t"}}),
        &WriteOptions::default(),
    )
    .unwrap();
    api.create(
        &cm,
        Some("t"),
        json!({"metadata": {"name": "keep"}}),
        &WriteOptions::default(),
    )
    .unwrap();
    let w = api.delete(&ns, None, "t", &DeleteOpts::default()).unwrap();
    assert_eq!(w.body["status"]["phase"], "Terminating");
    let e = api
        .create(
            &cm,
            Some("t"),
            json!({"metadata": {"name": "c"}}),
            &WriteOptions::default(),
        )
        .unwrap_err();
    assert_eq!(e.code, 403);
    assert_eq!(
        e.message,
        "configmaps \"c\" is forbidden: unable to create new content in namespace t because it is being terminated"
    );
    let e = api
        .delete(&ns, None, "default", &DeleteOpts::default())
        .unwrap_err();
    assert_eq!(e.code, 403);
}

#[test]
fn pod_binding_and_graceful_delete() {
    let api = Api::new(100);
    let pods = info(&api, "", "v1", "pods");
    let body = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    let w = api
        .create(&pods, Some("default"), body, &WriteOptions::default())
        .unwrap();
    assert_eq!(w.body["status"]["phase"], "Pending");
    assert_eq!(w.body["spec"]["schedulerName"], "default-scheduler");
    let bind = json!({"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}});
    api.bind("default", "p", bind.clone()).unwrap();
    let e = api.bind("default", "p", bind).unwrap_err();
    assert_eq!(e.code, 409);
    assert_eq!(
        e.message,
        "Operation cannot be fulfilled on pods/binding \"p\": pod p is already assigned to node \"n1\""
    );
    let w = api
        .delete(&pods, Some("default"), "p", &DeleteOpts::default())
        .unwrap();
    assert_eq!(w.body["metadata"]["deletionGracePeriodSeconds"], 30);
    assert!(api.get(&pods, Some("default"), "p").is_ok());
    let zero = DeleteOpts {
        grace_period: Some(0),
        ..Default::default()
    };
    api.delete(&pods, Some("default"), "p", &zero).unwrap();
    assert_eq!(api.get(&pods, Some("default"), "p").unwrap_err().code, 404);
}

#[test]
fn finalizers_hold_deletion_until_removed() {
    let api = Api::new(100);
    let cm = info(&api, "", "v1", "configmaps");
    let body = json!({"metadata": {"name": "c", "finalizers": ["x.io/hold"]}});
    api.create(&cm, Some("default"), body, &WriteOptions::default())
        .unwrap();
    api.delete(&cm, Some("default"), "c", &DeleteOpts::default())
        .unwrap();
    let held = api.get(&cm, Some("default"), "c").unwrap();
    assert!(held["metadata"]["deletionTimestamp"].is_string());
    let mut released = (*held).clone();
    released["metadata"]["finalizers"] = json!([]);
    api.update(
        &cm,
        Some("default"),
        "c",
        None,
        released,
        &WriteOptions::default(),
    )
    .unwrap();
    assert!(api.get(&cm, Some("default"), "c").is_err());
}

#[test]
fn list_limit_continue_is_a_consistent_snapshot() {
    let api = Api::new(1000);
    let cm = info(&api, "", "v1", "configmaps");
    for i in 0..5 {
        let body = json!({"metadata": {"name": format!("c{i}")}});
        api.create(&cm, Some("default"), body, &WriteOptions::default())
            .unwrap();
    }
    let opts = ListOpts {
        limit: Some(2),
        ..Default::default()
    };
    let first = api.list(&cm, Some("default"), &opts).unwrap();
    assert_eq!(first.items.len(), 2);
    assert_eq!(first.remaining, Some(3));
    api.create(
        &cm,
        Some("default"),
        json!({"metadata": {"name": "c9"}}),
        &WriteOptions::default(),
    )
    .unwrap();
    let next = ListOpts {
        limit: Some(10),
        continue_token: first.continue_token.clone(),
        ..Default::default()
    };
    let rest = api.list(&cm, Some("default"), &next).unwrap();
    let names: Vec<_> = rest
        .items
        .iter()
        .map(|o| o["metadata"]["name"].clone())
        .collect();
    assert_eq!(names, [json!("c2"), json!("c3"), json!("c4")]);
    assert_eq!(rest.resource_version, first.resource_version);
}

#[test]
fn events_are_two_views_of_one_storage() {
    let api = Api::new(100);
    let v1 = info(&api, "events.k8s.io", "v1", "events");
    let core = info(&api, "", "v1", "events");
    let body = json!({"metadata": {"name": "e"}, "regarding": {"kind": "Pod", "name": "p", "namespace": "default"},
            "note": "hi", "reason": "Test", "type": "Normal", "action": "Testing",
            "reportingController": "diorch", "reportingInstance": "diorch-0",
            "eventTime": "2024-01-01T00:00:00.000000Z"});
    api.create(&v1, Some("default"), body, &WriteOptions::default())
        .unwrap();
    let c = api.get(&core, Some("default"), "e").unwrap();
    assert_eq!(c["message"], "hi");
    assert_eq!(c["involvedObject"]["name"], "p");
    assert_eq!(c["apiVersion"], "v1");
}
