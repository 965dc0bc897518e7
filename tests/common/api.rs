//! The API server scenarios (CRUD, watch order and resumption, conflicts, dry run, the 410 of a
//! too old resourceVersion, custom resources, garbage collection, namespace termination,
//! kubectl end to end), written against a `kube::Client` or a `Kubectl` and names chosen by the
//! caller, so `tests/operator/sandbox_api.rs` runs them on the in-process sandbox and
//! `tests/e2e.rs` on a real kube-apiserver: the same assertions on both. Cluster-wide names (CRD
//! groups, namespaces) come from the caller, so runs against a shared cluster do not collide.
//!
//! Waits follow the mechanism with generous bounds: on a real cluster garbage collection,
//! namespace and CRD finalisation are done by controllers, asynchronously.

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy, WatchEvent,
    WatchParams,
};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;

use super::Kubectl;

/// Bound for anything a controller does asynchronously on a real cluster. kube-controller-manager's
/// garbage collector notices a new custom resource type only at its next discovery sync (every
/// 30 s), so an owner of a new type can take that long to be followed.
pub const T: Duration = Duration::from_secs(180);

/// Bound for one watch event the scenario caused.
const EVENT: Duration = Duration::from_secs(60);

/// A `kube::Client` for the cluster of a kubeconfig file (its current context), without
/// kube's default retries: the scenarios check the server's first answer, and a retried 504
/// would take minutes.
pub async fn client_from_kubeconfig(path: &Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).expect("read kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("kubeconfig");
    config.default_retry = false;
    kube::Client::try_from(config).expect("client")
}

/// A `kube::Client` for a plain-HTTP server URL (the sandbox), without kube's default retries
/// ([`client_from_kubeconfig`]).
pub fn client_for_url(url: &str) -> kube::Client {
    let mut config = kube::Config::new(url.parse().expect("server URL"));
    config.default_retry = false;
    kube::Client::try_from(config).expect("client")
}

pub fn cm(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}),
    )
    .expect("configmap")
}

/// The API error's Status (code, reason, message).
pub fn status(e: &kube::Error) -> &kube::core::Status {
    match e {
        kube::Error::Api(s) => s,
        other => panic!("not an API error: {other}"),
    }
}

/// Asserts an API error's code, reason and a part of its message.
fn assert_status(e: &kube::Error, code: u16, reason: &str, message: &str) {
    let s = status(e);
    assert_eq!((s.code, s.reason.as_str()), (code, reason), "{s:?}");
    assert!(s.message.contains(message), "expected {message:?} in {s:?}");
}

/// Waits until `name` is gone (at most [`T`]).
pub async fn wait_gone<K>(api: &Api<K>, name: &str)
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let deadline = Instant::now() + T;
    while api.get_opt(name).await.expect("get").is_some() {
        assert!(
            Instant::now() < deadline,
            "{name} was not deleted within {T:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

type Events<K> = BoxStream<'static, kube::Result<WatchEvent<K>>>;

/// The next watch event about one of `names`, as (type, name). Bookmarks and other objects are
/// skipped: kube-controller-manager adds a `kube-root-ca.crt` ConfigMap to every namespace.
async fn next_event<K>(stream: &mut Events<K>, names: &[&str]) -> (&'static str, String)
where
    K: kube::Resource + std::fmt::Debug,
{
    loop {
        let ev = tokio::time::timeout(EVENT, stream.try_next())
            .await
            .expect("a watch event in time")
            .expect("watch stream")
            .expect("the watch ended early");
        let (kind, obj) = match ev {
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Modified(o) => ("MODIFIED", o),
            WatchEvent::Deleted(o) => ("DELETED", o),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => panic!("{e:?}"),
        };
        let name = obj.meta().name.clone().unwrap_or_default();
        if names.contains(&name.as_str()) {
            return (kind, name);
        }
    }
}

fn crd_api(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    )
}

/// Creates a CRD and waits until it is Established. kube-apiserver answers the create without
/// `status.conditions` and establishes it a moment later; the sandbox in the same write.
async fn create_crd(client: &kube::Client, crd: serde_json::Value) {
    let crds = crd_api(client);
    let crd: DynamicObject = serde_json::from_value(crd).expect("crd");
    let name = crd.metadata.name.clone().expect("crd name");
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("create crd");
    let deadline = Instant::now() + T;
    loop {
        let got = crds.get(&name).await.expect("get crd");
        let established = got.data["status"]["conditions"]
            .as_array()
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Established" && c["status"] == "True")
            });
        if established {
            return;
        }
        assert!(Instant::now() < deadline, "{name} not Established: {got:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn widget_crd(group: &str) -> serde_json::Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "size": {"type": "integer", "minimum": 1, "default": 1}}},
                    "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}}}}]}})
}

fn dynamic(value: serde_json::Value) -> DynamicObject {
    serde_json::from_value(value).expect("object")
}

/// Create, conflicts (409 AlreadyExists and Conflict), dry run (answered, never stored or
/// watched), watch order, resuming a watch from a resourceVersion, label selectors on lists and
/// watches (an object leaving the selection is DELETED).
pub async fn crud_watch_order_resume_conflicts_and_dry_run(client: &kube::Client, ns: &str) {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let names = ["a", "other", "dry"];

    let list = cms.list(&ListParams::default()).await.expect("list");
    let start_rv = list
        .metadata
        .resource_version
        .expect("list resourceVersion");
    let mut stream = cms
        .watch(&WatchParams::default(), &start_rv)
        .await
        .expect("watch")
        .boxed();

    let a = cms
        .create(&PostParams::default(), &cm("a", json!({"app": "x"})))
        .await
        .expect("create a");
    let err = cms
        .create(&PostParams::default(), &cm("a", json!({})))
        .await
        .unwrap_err();
    assert_status(
        &err,
        409,
        "AlreadyExists",
        "configmaps \"a\" already exists",
    );

    let mut changed = a.clone();
    changed.data = Some([("k".to_string(), "w".to_string())].into());
    let b = cms
        .replace("a", &PostParams::default(), &changed)
        .await
        .expect("replace");
    assert_ne!(a.metadata.resource_version, b.metadata.resource_version);
    // `a` now carries a stale resourceVersion.
    let err = cms
        .replace("a", &PostParams::default(), &a)
        .await
        .unwrap_err();
    assert_status(
        &err,
        409,
        "Conflict",
        "Operation cannot be fulfilled on configmaps \"a\": the object has been modified; please apply your changes to the latest version and try again",
    );

    // Dry run: validated and answered like the write, never stored, no event. (The list
    // resourceVersion cannot show it on a real cluster: other writers move it.)
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let answered = cms
        .create(&dry, &cm("dry", json!({})))
        .await
        .expect("dry-run create");
    assert_eq!(answered.metadata.name.as_deref(), Some("dry"));
    assert_eq!(answered.metadata.namespace.as_deref(), Some(ns));
    assert!(answered.metadata.uid.is_some(), "{answered:?}");
    assert!(
        answered.metadata.creation_timestamp.is_some(),
        "{answered:?}"
    );
    assert_eq!(
        answered.metadata.resource_version, None,
        "a dry-run create is never stored, so it has no resourceVersion"
    );
    assert!(cms.get_opt("dry").await.expect("get").is_none());
    let err = cms.create(&dry, &cm("a", json!({}))).await.unwrap_err();
    assert_status(
        &err,
        409,
        "AlreadyExists",
        "configmaps \"a\" already exists",
    );
    let mut dry_change = b.clone();
    dry_change.data = Some([("k".to_string(), "dry".to_string())].into());
    let answered = cms
        .replace("a", &dry, &dry_change)
        .await
        .expect("dry-run replace");
    assert_eq!(answered.data, dry_change.data);
    let stored = cms.get("a").await.expect("get a");
    assert_eq!(stored.data, b.data, "a dry-run update changed the object");
    assert_eq!(
        stored.metadata.resource_version,
        b.metadata.resource_version
    );

    cms.create(&PostParams::default(), &cm("other", json!({"app": "y"})))
        .await
        .expect("create other");
    cms.delete("a", &DeleteParams::default())
        .await
        .expect("delete a");

    let mut seen = Vec::new();
    while seen.len() < 4 {
        seen.push(next_event(&mut stream, &names).await);
    }
    assert_eq!(
        seen,
        [
            ("ADDED", "a".to_string()),
            ("MODIFIED", "a".to_string()),
            ("ADDED", "other".to_string()),
            ("DELETED", "a".to_string())
        ]
    );

    // Resume from the RV of the replace: only later events.
    let resume = b.metadata.resource_version.expect("resourceVersion");
    let mut resumed = cms
        .watch(&WatchParams::default(), &resume)
        .await
        .expect("watch")
        .boxed();
    assert_eq!(
        next_event(&mut resumed, &names).await,
        ("ADDED", "other".to_string())
    );
    assert_eq!(
        next_event(&mut resumed, &names).await,
        ("DELETED", "a".to_string())
    );

    // Label selectors on lists and watches (an object leaving the set is DELETED).
    let sel = ListParams::default().labels("app=y");
    let listed = cms.list(&sel).await.expect("list");
    let listed_names: Vec<_> = listed
        .items
        .into_iter()
        .map(|c| c.metadata.name.unwrap_or_default())
        .collect();
    assert_eq!(listed_names, ["other"]);
    let rv = listed.metadata.resource_version.expect("resourceVersion");
    let mut sel_watch = cms
        .watch(&WatchParams::default().labels("app=y"), &rv)
        .await
        .expect("watch")
        .boxed();
    cms.patch(
        "other",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "z"}}})),
    )
    .await
    .expect("patch");
    assert_eq!(
        next_event(&mut sel_watch, &names).await,
        ("DELETED", "other".to_string())
    );
}

/// A raw request through the client (for what the typed API cannot send); the body as JSON.
async fn raw(
    client: &kube::Client,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> kube::Result<serde_json::Value> {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("Content-Type", content_type)
        .body(body.as_bytes().to_vec())
        .expect("request");
    client.request(req).await
}

/// Status errors and resourceVersion rules: delete preconditions, a list at a resourceVersion the
/// server has not reached, bad option and patch values, finalizers on a deleting object, and
/// the shape of lists (built-in kinds' items carry no apiVersion/kind).
pub async fn status_errors_and_resource_version_rules(client: &kube::Client, ns: &str) {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    let p = cms
        .create(&PostParams::default(), &cm("p", json!({})))
        .await
        .expect("create p");
    let uid = p.metadata.uid.clone().expect("uid");
    let rv = p
        .metadata
        .resource_version
        .clone()
        .expect("resourceVersion");

    // Delete preconditions are checked before anything else, naming the resource by kind.
    let err = cms
        .delete(
            "p",
            &DeleteParams::default().preconditions(kube::api::Preconditions {
                uid: Some("wrong".into()),
                resource_version: None,
            }),
        )
        .await
        .unwrap_err();
    assert_status(
        &err,
        409,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on ConfigMap \"p\": the UID in the precondition (wrong) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
        ),
    );
    let err = cms
        .delete(
            "p",
            &DeleteParams::default().preconditions(kube::api::Preconditions {
                uid: None,
                resource_version: Some("1".into()),
            }),
        )
        .await
        .unwrap_err();
    assert_status(
        &err,
        409,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on ConfigMap \"p\": the ResourceVersion in the precondition (1) does not match the ResourceVersion in record ({rv}). The object might have been modified"
        ),
    );

    // A list at a resourceVersion the server has not reached: 504 (after up to 3 s of waiting on
    // a real server), for the client to retry.
    let future = rv.parse::<u64>().expect("numeric resourceVersion") + 1_000_000;
    let err = raw(
        client,
        "GET",
        &format!("{path}?resourceVersion={future}"),
        "application/json",
        "",
    )
    .await
    .unwrap_err();
    assert_status(
        &err,
        504,
        "Timeout",
        &format!("Timeout: Too large resource version: {future}, current: "),
    );
    let details = status(&err).details.clone().expect("details");
    assert_eq!(details.retry_after_seconds, 1, "{details:?}");
    assert_eq!(
        details.causes[0].reason, "ResourceVersionTooLarge",
        "{details:?}"
    );

    // Bad values of options and patches.
    let err = raw(
        client,
        "POST",
        &format!("{path}?dryRun=Yes"),
        "application/json",
        r#"{"metadata":{"name":"d"}}"#,
    )
    .await
    .unwrap_err();
    assert_status(
        &err,
        422,
        "Invalid",
        r#"CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: []string{"Yes"}: supported values: "All""#,
    );
    let err = cms
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::<()>::Json(
                serde_json::from_value(json!([{"op": "test", "path": "/data/k", "value": "no"}]))
                    .expect("json patch"),
            ),
        )
        .await
        .unwrap_err();
    // The patch's own error is not in the Status (NewGenericServerResponse drops it).
    assert_status(
        &err,
        422,
        "Invalid",
        "the server rejected our request due to an error in our request",
    );
    assert!(
        status(&err)
            .details
            .as_ref()
            .is_none_or(|d| d.causes.is_empty()),
        "{err:?}"
    );
    let err = raw(client, "PATCH", &format!("{path}/p"), "text/plain", "{}")
        .await
        .unwrap_err();
    assert_status(
        &err,
        415,
        "UnsupportedMediaType",
        "415: Unsupported Media Type",
    );
    let err = raw(
        client,
        "GET",
        &format!("{path}?limit=1&continue=garbage"),
        "application/json",
        "",
    )
    .await
    .unwrap_err();
    assert_status(
        &err,
        400,
        "BadRequest",
        "invalid continue token: continue key is not valid: ",
    );

    // Lists: built-in kinds' items carry no apiVersion/kind.
    let list = raw(client, "GET", &path, "application/json", "")
        .await
        .expect("list");
    assert_eq!(list["kind"], "ConfigMapList");
    let item = list["items"]
        .as_array()
        .and_then(|items| items.iter().find(|i| i["metadata"]["name"] == "p"))
        .expect("p listed");
    assert!(
        item.get("kind").is_none() && item.get("apiVersion").is_none(),
        "{item}"
    );

    // Finalizers on a deleting object: none can be added; removing the last one deletes it, and
    // the update answers the object as written.
    let mut held = cm("held", json!({}));
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &held)
        .await
        .expect("create held");
    let deleting = cms
        .delete("held", &DeleteParams::default())
        .await
        .expect("delete held")
        .left()
        .expect("a held object is answered, still there");
    assert!(deleting.metadata.deletion_timestamp.is_some());
    assert_eq!(deleting.metadata.deletion_grace_period_seconds, Some(0));
    let err = cms
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}}),
            ),
        )
        .await
        .unwrap_err();
    assert_status(
        &err,
        422,
        "Invalid",
        r#"ConfigMap "held" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{"example.com/more"}"#,
    );
    let released = cms
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("drop the finalizer");
    assert_eq!(released.metadata.finalizers, None, "{released:?}");
    assert!(released.metadata.deletion_timestamp.is_some());
    assert!(cms.get_opt("held").await.expect("get").is_none());
}

/// A watch from a resourceVersion the server holds no events for any more is answered with an
/// ERROR event in the stream: 410, reason Expired, `too old resource version: X (Y)`.
///
/// Provoked the same way on both servers: the watch is on a custom resource type created after
/// that resourceVersion, and 6 objects are written. kube-apiserver's watch cache of a new type
/// starts at its first list, so anything older is too old; the sandbox keeps a per-type event
/// history that its test starts with only 3 events (`history_size`), so the 6 writes push the
/// resourceVersion out of it. (With the sandbox's default history, 10 000 events, the watch
/// would replay them instead: see the README's fidelity table.)
pub async fn too_old_resource_version_is_410_in_the_stream(
    client: &kube::Client,
    ns: &str,
    group: &str,
) {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let rv = cms
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("list resourceVersion");
    create_crd(client, widget_crd(group)).await;
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", "Widget"), "widgets");
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    for i in 0..6 {
        let w = dynamic(
            json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
            "metadata": {"name": format!("w{i}")}, "spec": {}}),
        );
        widgets
            .create(&PostParams::default(), &w)
            .await
            .expect("create widget");
    }
    let mut stream: Events<DynamicObject> = widgets
        .watch(&WatchParams::default(), &rv)
        .await
        .expect("a too old resourceVersion is refused in the stream, not at the request")
        .boxed();
    let first = loop {
        let ev = tokio::time::timeout(EVENT, stream.try_next())
            .await
            .expect("an event in time")
            .expect("watch stream")
            .expect("the watch ended early");
        if !matches!(ev, WatchEvent::Bookmark(_)) {
            break ev;
        }
    };
    match first {
        WatchEvent::Error(e) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"), "{e:?}");
            assert!(
                e.message
                    .starts_with(&format!("too old resource version: {rv} (")),
                "{}",
                e.message
            );
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    let crds = crd_api(client);
    crds.delete(&format!("widgets.{group}"), &DeleteParams::default())
        .await
        .expect("delete crd");
    wait_gone(&crds, &format!("widgets.{group}")).await;
}

/// A CRD and its custom resources: pruning and defaulting, 422 with the apiserver's message, the
/// status subresource split and generation, 409 on a stale write, background and foreground
/// garbage collection of a dependent, and deleting the CRD deletes its resources.
pub async fn custom_resources_status_split_generation_and_gc(
    client: &kube::Client,
    ns: &str,
    group: &str,
) {
    let crd_name = format!("widgets.{group}");
    create_crd(client, widget_crd(group)).await;
    let api_version = format!("{group}/v1");
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", "Widget"), "widgets");
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let w = dynamic(json!({"apiVersion": api_version, "kind": "Widget",
        "metadata": {"name": "w1"}, "spec": {"unknown": true}, "status": {"phase": "ignored"}}));
    let w = widgets
        .create(&PostParams::default(), &w)
        .await
        .expect("create w1");
    assert_eq!(w.data["spec"], json!({"size": 1}), "pruned and defaulted");
    assert!(w.data.get("status").is_none(), "status dropped on create");
    assert_eq!(w.metadata.generation, Some(1));

    // Invalid value → 422 with the apiserver's aggregation.
    let bad = dynamic(json!({"apiVersion": api_version, "kind": "Widget",
        "metadata": {"name": "bad"}, "spec": {"size": 0}}));
    let err = widgets
        .create(&PostParams::default(), &bad)
        .await
        .unwrap_err();
    assert_status(
        &err,
        422,
        "Invalid",
        &format!(
            "Widget.{group} \"bad\" is invalid: spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"
        ),
    );

    // Status write: no generation bump; spec write: bump.
    let s = widgets
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running"}, "spec": {"size": 9}})),
        )
        .await
        .expect("patch status");
    assert_eq!(s.data["status"]["phase"], "Running");
    assert_eq!(s.data["spec"]["size"], 1, "status writes ignore spec");
    assert_eq!(s.metadata.generation, Some(1));
    let m = widgets
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 3}, "status": {"phase": "x"}})),
        )
        .await
        .expect("patch");
    assert_eq!(m.metadata.generation, Some(2));
    assert_eq!(
        m.data["status"]["phase"], "Running",
        "main writes ignore status"
    );

    // Stale spec write → 409.
    let err = widgets
        .replace("w1", &PostParams::default(), &s)
        .await
        .unwrap_err();
    assert_status(
        &err,
        409,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on widgets.{group} \"w1\": the object has been modified"
        ),
    );

    // Owner deletion cascades (background) to a dependent ConfigMap.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let owned = |name: &str, owner: &DynamicObject| {
        let mut dep = cm(name, json!({}));
        dep.metadata.owner_references = Some(vec![
            serde_json::from_value(json!({
            "apiVersion": api_version, "kind": "Widget",
            "name": owner.metadata.name, "uid": owner.metadata.uid, "blockOwnerDeletion": true}))
            .expect("ownerReference"),
        ]);
        dep
    };
    cms.create(&PostParams::default(), &owned("dep", &m))
        .await
        .expect("create dep");
    widgets
        .delete("w1", &DeleteParams::default())
        .await
        .expect("delete w1");
    wait_gone(&cms, "dep").await;

    // Foreground: the owner waits for its dependent (deletionTimestamp and the
    // foregroundDeletion finalizer until then), then both go.
    let w2 = dynamic(json!({"apiVersion": api_version, "kind": "Widget",
        "metadata": {"name": "w2"}, "spec": {}}));
    let w2 = widgets
        .create(&PostParams::default(), &w2)
        .await
        .expect("create w2");
    cms.create(&PostParams::default(), &owned("dep2", &w2))
        .await
        .expect("create dep2");
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        ..Default::default()
    };
    let deleting = widgets
        .delete("w2", &dp)
        .await
        .expect("delete w2")
        .left()
        .expect("a foreground delete answers the object, still there");
    assert!(
        deleting.metadata.deletion_timestamp.is_some(),
        "{deleting:?}"
    );
    assert_eq!(
        deleting.metadata.finalizers.as_deref(),
        Some(&["foregroundDeletion".to_string()][..])
    );
    wait_gone(&cms, "dep2").await;
    wait_gone(&widgets, "w2").await;

    // Deleting the CRD deletes its custom resources and unregisters the resource.
    let w3 = dynamic(json!({"apiVersion": api_version, "kind": "Widget",
        "metadata": {"name": "w3"}, "spec": {}}));
    widgets
        .create(&PostParams::default(), &w3)
        .await
        .expect("create w3");
    let crds = crd_api(client);
    crds.delete(&crd_name, &DeleteParams::default())
        .await
        .expect("delete crd");
    wait_gone(&crds, &crd_name).await;
    let err = widgets.get("w3").await.unwrap_err();
    assert_eq!(status(&err).code, 404, "{err}");
}

/// Deleting a namespace: Terminating at once, creates in it refused (403), gone once the last
/// finalizer of its content is removed; a create in a missing namespace is 404.
pub async fn namespace_deletion_and_terminating_namespace(
    client: &kube::Client,
    doomed: &str,
    missing: &str,
) {
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": doomed}})).expect("namespace");
    nss.create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), doomed);
    let mut held = cm("held", json!({}));
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &held)
        .await
        .expect("create held");
    let deleting = nss
        .delete(doomed, &DeleteParams::default())
        .await
        .expect("delete namespace")
        .left()
        .expect("a deleted namespace is answered, Terminating");
    assert!(
        deleting.metadata.deletion_timestamp.is_some(),
        "{deleting:?}"
    );
    assert_eq!(deleting.metadata.deletion_grace_period_seconds, None);
    let phase = deleting.status.as_ref().and_then(|s| s.phase.as_deref());
    assert_eq!(phase, Some("Terminating"));
    let err = cms
        .create(&PostParams::default(), &cm("late", json!({})))
        .await
        .unwrap_err();
    assert_status(
        &err,
        403,
        "Forbidden",
        &format!(
            "configmaps \"late\" is forbidden: unable to create new content in namespace {doomed} because it is being terminated"
        ),
    );
    let got = nss.get(doomed).await.expect("get namespace");
    assert!(got.metadata.deletion_timestamp.is_some(), "{got:?}");
    let phase = got.status.and_then(|s| s.phase);
    assert_eq!(phase.as_deref(), Some("Terminating"));
    // The namespace controller deletes the content; the finalizer holds the ConfigMap, and with
    // it the namespace.
    let deadline = Instant::now() + T;
    loop {
        let held = cms.get("held").await.expect("held stays while finalized");
        if held.metadata.deletion_timestamp.is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "held was never deleted: {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(nss.get_opt(doomed).await.expect("get").is_some());
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("drop the finalizer");
    wait_gone(&nss, doomed).await;
    let nowhere: Api<ConfigMap> = Api::namespaced(client.clone(), missing);
    let err = nowhere
        .create(&PostParams::default(), &cm("x", json!({})))
        .await
        .unwrap_err();
    assert_status(
        &err,
        404,
        "NotFound",
        &format!("namespaces \"{missing}\" not found"),
    );
}

fn widget_crd_yaml(group: &str) -> String {
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.{group}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {{status: {{}}}}
    additionalPrinterColumns:
    - {{name: Size, type: integer, jsonPath: .spec.size}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {{type: integer}}
"#
    )
}

/// Lines of a child's stdout, as they come.
fn lines_of(child: &mut std::process::Child) -> mpsc::Receiver<String> {
    use std::io::BufRead;
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits for a line for which `pred` holds (at most `EVENT`); returns every line seen.
fn wait_line(rx: &mpsc::Receiver<String>, seen: &mut Vec<String>, pred: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + EVENT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let done = pred(&line);
                seen.push(line);
                if done {
                    return;
                }
            }
            Err(_) => panic!("kubectl did not print the expected line: {seen:#?}"),
        }
    }
}

/// What the kubectl scenario saw where the servers differ by version, for the caller to check.
pub struct KubectlSeen {
    /// `kubectl create` of a custom resource with an unknown field: refused by server-side
    /// field validation (1.25+, the sandbox) or kubectl's client-side validation (1.24).
    pub unknown_field_error: String,
}

/// kubectl end to end in namespace `ns`: a CRD (group `group`) and a custom resource with
/// apply, printer columns, an unknown field refused, built-ins with get/patch/label/annotate/
/// edit, server-side apply conflicts, `get -w`, typed generators (protobuf bodies), delete with
/// wait, a pod and its events in `describe`. `scratch` holds the editor script. Creates and
/// deletes the namespace `<ns>-proto`.
pub fn kubectl_end_to_end(k: &Kubectl, ns: &str, group: &str, scratch: &Path) -> KubectlSeen {
    let k = k.in_namespace(ns);
    assert!(k.ok(&["get", "namespaces"]).contains("kube-system"));

    // CRD then a custom resource with kubectl apply.
    let crd = format!("widgets.{group}");
    k.ok_stdin(&["apply", "-f", "-"], &widget_crd_yaml(group));
    // Not `kubectl wait`: it fails on a CRD kube-apiserver has not given conditions yet.
    k.wait_for(
        &[
            "get",
            "crd",
            &crd,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Established\")].status}",
        ],
        T,
        |out| out == "True",
    );
    let cr =
        format!("apiVersion: {group}/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  size: 2\n");
    let out = k.ok_stdin(&["apply", "-f", "-"], &cr);
    assert!(out.contains(&format!("widget.{group}/w created")), "{out}");
    assert!(k.ok_stdin(&["apply", "-f", "-"], &cr).contains("unchanged"));
    let table = k.ok(&["get", "wd"]);
    // With printer columns declared, only NAME is added (no AGE), as kube-apiserver does.
    assert_eq!(super::table_row(&table, 0), ["NAME", "SIZE"], "{table}");
    assert_eq!(super::table_row(&table, 1), ["w", "2"], "{table}");
    let unknown_field_error = k.fails_stdin(
        &["create", "-f", "-"],
        &format!(
            "apiVersion: {group}/v1\nkind: Widget\nmetadata:\n  name: x\nspec:\n  size: 1\n  foo: 1\n"
        ),
    );
    assert!(
        unknown_field_error.contains("unknown field") && unknown_field_error.contains("foo"),
        "{unknown_field_error}"
    );
    let missing = k.fails(&["get", "widget", "x"]);
    assert!(
        missing.contains(&format!("widgets.{group} \"x\" not found")),
        "{missing}"
    );

    // Built-ins: create, get -o yaml/json, patch (merge, strategic), label, annotate.
    k.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  a: \"1\"\n",
    );
    assert!(
        k.ok(&["get", "cm", "cfg", "-o", "yaml"])
            .contains("a: \"1\"")
    );
    let json: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "cm", "cfg", "-o", "json"])).expect("json");
    assert_eq!(json["data"]["a"], "1");
    k.ok(&[
        "patch",
        "cm",
        "cfg",
        "--type=merge",
        "-p",
        r#"{"data":{"b":"2"}}"#,
    ]);
    k.ok(&["patch", "cm", "cfg", "-p", r#"{"data":{"c":"3"}}"#]);
    k.ok(&["label", "cm", "cfg", "tier=web"]);
    k.ok(&["annotate", "cm", "cfg", "note=hi"]);
    let out = k.ok(&[
        "get",
        "cm",
        "cfg",
        "-o",
        "jsonpath={.data.b}{.data.c}{.metadata.labels.tier}{.metadata.annotations.note}",
    ]);
    assert_eq!(out, "23webhi");
    assert_eq!(
        k.ok(&["get", "cm", "-l", "tier=web", "-o", "name"]).trim(),
        "configmap/cfg"
    );

    // kubectl edit with a sed "editor".
    let editor = scratch.join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nsed -i 's/a: \"1\"/a: \"edited\"/' \"$1\"\n",
    )
    .expect("write editor");
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod editor");
    k.ok_env(&["edit", "cm", "cfg"], "KUBE_EDITOR", editor.as_os_str());
    assert_eq!(
        k.ok(&["get", "cm", "cfg", "-o", "jsonpath={.data.a}"]),
        "edited"
    );

    // Server-side apply: creates, records the manager, refuses another manager's change of an
    // applied field until --force-conflicts.
    k.ok_stdin(
        &["apply", "--server-side", "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  a: one\n",
    );
    assert_eq!(
        k.ok(&[
            "get",
            "cm",
            "ssa",
            "--show-managed-fields",
            "-o",
            "jsonpath={.metadata.managedFields[*].manager}/{.metadata.managedFields[*].operation}"
        ]),
        "kubectl/Apply"
    );
    let conflict = k.fails_stdin(
        &[
            "apply",
            "--server-side",
            "--field-manager",
            "other",
            "-f",
            "-",
        ],
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  a: two\n",
    );
    assert!(
        conflict.contains("Apply failed with 1 conflict: conflict with \"kubectl\": .data.a"),
        "{conflict}"
    );
    k.ok_stdin(
        &[
            "apply",
            "--server-side",
            "--field-manager",
            "other",
            "--force-conflicts",
            "-f",
            "-",
        ],
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  a: two\n",
    );
    assert_eq!(
        k.ok(&["get", "cm", "ssa", "-o", "jsonpath={.data.a}"]),
        "two"
    );

    // kubectl get -w streams Table rows: the initial list (cfg is in it), then what comes.
    let mut watcher = k.spawn(&["get", "cm", "-w", "--output-watch-events"]);
    let rx = lines_of(&mut watcher);
    let mut seen = Vec::new();
    wait_line(&rx, &mut seen, |l| l.contains("cfg"));
    k.ok(&["create", "cm", "watched", "--from-literal=x=y"]);
    wait_line(&rx, &mut seen, |l| {
        l.split_whitespace().take(2).eq(["ADDED", "watched"])
    });
    let _ = watcher.kill();
    let _ = watcher.wait();
    let header: Vec<&str> = seen[0].split_whitespace().collect();
    assert_eq!(header, ["EVENT", "NAME", "DATA", "AGE"], "{seen:#?}");

    // Typed kubectl generators send protobuf bodies.
    let proto_ns = format!("{ns}-proto");
    k.ok(&["create", "namespace", &proto_ns]);
    k.ok(&[
        "create",
        "secret",
        "generic",
        "s",
        "--from-literal=pw=hunter2",
    ]);
    assert_eq!(
        k.ok(&["get", "secret", "s", "-o", "jsonpath={.data.pw}"]),
        "aHVudGVyMg=="
    );
    k.ok(&["create", "service", "clusterip", "web", "--tcp=80:8080"]);
    let ip = k.ok(&["get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"]);
    assert!(ip.starts_with("10."), "{ip}");

    // kubectl delete waits for the object to go (watch with a name field selector).
    assert!(
        k.ok(&["delete", "cm", "cfg"])
            .contains("configmap \"cfg\" deleted")
    );
    assert!(
        k.ok(&["delete", "widget", "w"])
            .contains(&format!("widget.{group} \"w\" deleted"))
    );
    let missing = k.fails(&["get", "cm", "cfg"]);
    assert!(
        missing.contains("configmaps \"cfg\" not found"),
        "{missing}"
    );

    // Pods: an unbound pod (its node selector matches no node) is deleted at once.
    k.ok_stdin(
        &["create", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  nodeSelector:\n    diorch.io/no-such-node: \"true\"\n  containers:\n  - name: c\n    image: busybox\n",
    );
    assert_eq!(
        k.ok(&["get", "pod", "p", "-o", "jsonpath={.status.phase}"]),
        "Pending"
    );
    let uid = k.ok(&["get", "pod", "p", "-o", "jsonpath={.metadata.uid}"]);
    let event = format!(
        "apiVersion: events.k8s.io/v1\nkind: Event\nmetadata:\n  name: p.1\nregarding:\n  apiVersion: v1\n  kind: Pod\n  name: p\n  namespace: {ns}\n  uid: {uid}\nnote: hello from the recorder\nreason: Testing\ntype: Normal\naction: Test\nreportingController: diorch\nreportingInstance: diorch-0\neventTime: \"2025-01-01T00:00:00.000000Z\"\n"
    );
    k.ok_stdin(&["create", "-f", "-"], &event);
    let described = k.ok(&["describe", "pod", "p"]);
    assert!(described.contains("hello from the recorder"), "{described}");
    let resources = k.ok(&["api-resources"]);
    assert!(
        resources.contains("widgets") && resources.contains("pods"),
        "{resources}"
    );
    assert!(
        k.ok(&["delete", "pod", "p", "--wait=true"])
            .contains("pod \"p\" deleted")
    );
    k.fails(&["get", "pod", "p"]);

    k.ok(&["delete", "crd", &crd, "--wait=true"]);
    k.ok(&["delete", "namespace", &proto_ns, "--wait=true"]);
    KubectlSeen {
        unknown_field_error,
    }
}
