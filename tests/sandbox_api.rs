//! Integration tests of the sandbox API server core, started in-process on 127.0.0.1:0 and
//! driven with the real `kube` client and the real `kubectl`.

mod common;

use std::time::Duration;

use common::Kubectl;
use diorch::sandbox::server::{ApiServer, ServerOptions};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy, WatchEvent,
    WatchParams,
};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;

/// A server on its own thread and runtime; stopped on drop.
struct Server {
    url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    dir: tempfile::TempDir,
}

impl Server {
    fn start(history_size: usize) -> Server {
        let (url_tx, url_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let addr = listener.local_addr().unwrap();
                url_tx.send(format!("http://{addr}")).unwrap();
                let server = ApiServer::new(ServerOptions {
                    history_size,
                    bookmark_interval: Duration::from_millis(300),
                    ..ServerOptions::default()
                });
                server
                    .serve(listener, async move {
                        let _ = stop_rx.await;
                    })
                    .await
                    .unwrap();
            });
        });
        let url = url_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        Server {
            url,
            stop: Some(stop_tx),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn client(&self) -> kube::Client {
        diorch::sandbox::client_for(&self.url).unwrap()
    }

    fn kubectl(&self) -> Kubectl {
        let kubeconfig = self.dir.path().join("kubeconfig");
        diorch::sandbox::write_kubeconfig(&kubeconfig, &self.url).unwrap();
        Kubectl::new(&kubeconfig, self.dir.path())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

fn cm(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}),
    )
    .unwrap()
}

fn status_code(e: &kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("not an API error: {other}"),
    }
}

#[tokio::test]
async fn crud_watch_order_resume_conflicts_and_dry_run() {
    let server = Server::start(10_000);
    let client = server.client();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    let list = cms.list(&ListParams::default()).await.unwrap();
    let start_rv = list.metadata.resource_version.unwrap();
    let mut stream = cms
        .watch(&WatchParams::default(), &start_rv)
        .await
        .unwrap()
        .boxed();

    let a = cms
        .create(&PostParams::default(), &cm("a", json!({"app": "x"})))
        .await
        .unwrap();
    let err = cms
        .create(&PostParams::default(), &cm("a", json!({})))
        .await
        .unwrap_err();
    assert_eq!(status_code(&err), 409);
    assert!(
        err.to_string().contains("configmaps \"a\" already exists"),
        "{err}"
    );

    let mut changed = a.clone();
    changed.data = Some([("k".to_string(), "w".to_string())].into());
    let b = cms
        .replace("a", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert_ne!(a.metadata.resource_version, b.metadata.resource_version);
    // `a` now carries a stale resourceVersion.
    let err = cms
        .replace("a", &PostParams::default(), &a)
        .await
        .unwrap_err();
    assert_eq!(status_code(&err), 409);
    assert!(
        err.to_string().contains("the object has been modified"),
        "{err}"
    );

    // Dry run: validated, not stored, no RV bump.
    let before = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version;
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    cms.create(&dry, &cm("dry", json!({}))).await.unwrap();
    assert!(cms.get_opt("dry").await.unwrap().is_none());
    let after = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version;
    assert_eq!(before, after);

    cms.create(&PostParams::default(), &cm("other", json!({"app": "y"})))
        .await
        .unwrap();
    cms.delete("a", &DeleteParams::default()).await.unwrap();

    let mut seen = Vec::new();
    while seen.len() < 4 {
        let ev = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        match ev {
            WatchEvent::Added(o) => seen.push(("ADDED", o.metadata.name.unwrap())),
            WatchEvent::Modified(o) => seen.push(("MODIFIED", o.metadata.name.unwrap())),
            WatchEvent::Deleted(o) => seen.push(("DELETED", o.metadata.name.unwrap())),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("{e:?}"),
        }
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
    let resume = b.metadata.resource_version.unwrap();
    let mut resumed = cms
        .watch(&WatchParams::default(), &resume)
        .await
        .unwrap()
        .boxed();
    let first = resumed.try_next().await.unwrap().unwrap();
    assert!(matches!(first, WatchEvent::Added(o) if o.metadata.name.as_deref() == Some("other")));

    // Label selectors on lists and watches (an object leaving the set is DELETED).
    let sel = ListParams::default().labels("app=y");
    let names: Vec<_> = cms
        .list(&sel)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| c.metadata.name.unwrap())
        .collect();
    assert_eq!(names, ["other"]);
    let rv = cms
        .list(&sel)
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut sel_watch = cms
        .watch(&WatchParams::default().labels("app=y"), &rv)
        .await
        .unwrap()
        .boxed();
    cms.patch(
        "other",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "z"}}})),
    )
    .await
    .unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(5), sel_watch.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(matches!(ev, WatchEvent::Deleted(o) if o.metadata.name.as_deref() == Some("other")));
}

#[tokio::test]
async fn too_old_resource_version_is_410_in_the_stream() {
    let server = Server::start(3);
    let client = server.client();
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let rv = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    for i in 0..6 {
        cms.create(&PostParams::default(), &cm(&format!("c{i}"), json!({})))
            .await
            .unwrap();
    }
    let mut stream = cms
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Error(e) => {
            assert_eq!(e.code, 410);
            assert!(
                e.message
                    .starts_with(&format!("too old resource version: {rv} (")),
                "{}",
                e.message
            );
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
}

fn widget_crd() -> serde_json::Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "size": {"type": "integer", "minimum": 1, "default": 1}}},
                    "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}}}}]}})
}

#[tokio::test]
async fn custom_resources_status_split_generation_and_gc() {
    let server = Server::start(10_000);
    let client = server.client();
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let crd: DynamicObject = serde_json::from_value(widget_crd()).unwrap();
    let created = crds.create(&PostParams::default(), &crd).await.unwrap();
    let conds = &created.data["status"]["conditions"];
    assert!(
        conds
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True")
    );

    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let w: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w1"}, "spec": {"unknown": true}, "status": {"phase": "ignored"}}))
        .unwrap();
    let w = widgets.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(w.data["spec"], json!({"size": 1}), "pruned and defaulted");
    assert!(w.data.get("status").is_none(), "status dropped on create");
    assert_eq!(w.metadata.generation, Some(1));

    // Invalid value → 422 with the apiserver's aggregation.
    let bad: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "bad"}, "spec": {"size": 0}}))
        .unwrap();
    let err = widgets
        .create(&PostParams::default(), &bad)
        .await
        .unwrap_err();
    assert_eq!(status_code(&err), 422);
    assert!(
        err.to_string()
            .contains("Widget.example.com \"bad\" is invalid: spec.size"),
        "{err}"
    );

    // Status write: no generation bump; spec write: bump.
    let s = widgets
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running"}, "spec": {"size": 9}})),
        )
        .await
        .unwrap();
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
        .unwrap();
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
    assert_eq!(status_code(&err), 409);

    // Owner deletion cascades (background) to a dependent ConfigMap.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut dep = cm("dep", json!({}));
    dep.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget", "name": "w1",
        "uid": m.metadata.uid.clone().unwrap(), "blockOwnerDeletion": true}))
        .unwrap(),
    ]);
    cms.create(&PostParams::default(), &dep).await.unwrap();
    widgets
        .delete("w1", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&cms, "dep").await;

    // Foreground: the owner waits for its dependent, then both go.
    let w2: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w2"}, "spec": {}}))
        .unwrap();
    let w2 = widgets.create(&PostParams::default(), &w2).await.unwrap();
    let mut dep = cm("dep2", json!({}));
    dep.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget", "name": "w2",
        "uid": w2.metadata.uid.clone().unwrap(), "blockOwnerDeletion": true}))
        .unwrap(),
    ]);
    cms.create(&PostParams::default(), &dep).await.unwrap();
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        ..Default::default()
    };
    widgets.delete("w2", &dp).await.unwrap();
    wait_gone(&cms, "dep2").await;
    wait_gone(&widgets, "w2").await;

    // Deleting the CRD deletes its custom resources and unregisters the resource.
    let w3: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w3"}, "spec": {}}))
        .unwrap();
    widgets.create(&PostParams::default(), &w3).await.unwrap();
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&crds, "widgets.example.com").await;
    let err = widgets.get("w3").await.unwrap_err();
    assert_eq!(status_code(&err), 404);
}

async fn wait_gone<K>(api: &Api<K>, name: &str)
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    for _ in 0..100 {
        if api.get_opt(name).await.unwrap().is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{name} was not deleted");
}

#[tokio::test]
async fn namespace_deletion_and_terminating_namespace() {
    let server = Server::start(10_000);
    let client = server.client();
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "doomed"}})).unwrap();
    nss.create(&PostParams::default(), &ns).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
    let mut held = cm("held", json!({}));
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &held).await.unwrap();
    nss.delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    let err = cms
        .create(&PostParams::default(), &cm("late", json!({})))
        .await
        .unwrap_err();
    assert_eq!(status_code(&err), 403);
    assert!(
        err.to_string().contains("because it is being terminated"),
        "{err}"
    );
    let phase = nss
        .get("doomed")
        .await
        .unwrap()
        .status
        .unwrap()
        .phase
        .unwrap();
    assert_eq!(phase, "Terminating");
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    wait_gone(&nss, "doomed").await;
    let missing: Api<ConfigMap> = Api::namespaced(client, "nowhere");
    let err = missing
        .create(&PostParams::default(), &cm("x", json!({})))
        .await
        .unwrap_err();
    assert_eq!(status_code(&err), 404);
    assert!(
        err.to_string().contains("namespaces \"nowhere\" not found"),
        "{err}"
    );
}

const WIDGET_CRD_YAML: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
"#;

#[test]
fn kubectl_end_to_end() {
    let server = Server::start(10_000);
    let k = server.kubectl().in_namespace("default");

    assert!(k.ok(&["version", "-o", "json"]).contains("v1.33.0"));
    assert!(k.ok(&["get", "namespaces"]).contains("kube-system"));

    // CRD then a custom resource with kubectl apply.
    k.ok_stdin(&["apply", "-f", "-"], WIDGET_CRD_YAML);
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.example.com",
        "--timeout=10s",
    ]);
    let cr = "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  size: 2\n";
    assert!(
        k.ok_stdin(&["apply", "-f", "-"], cr)
            .contains("widget.example.com/w created")
    );
    assert!(k.ok_stdin(&["apply", "-f", "-"], cr).contains("unchanged"));
    let table = k.ok(&["get", "wd"]);
    assert!(table.contains("SIZE") && table.contains('2'), "{table}");
    let strict = k.fails_stdin(
        &["create", "-f", "-"],
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: x\nspec:\n  size: 1\n  foo: 1\n",
    );
    assert!(strict.contains("unknown field \"spec.foo\""), "{strict}");

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
        serde_json::from_str(&k.ok(&["get", "cm", "cfg", "-o", "json"])).unwrap();
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
    assert!(
        k.ok(&["get", "cm", "-l", "tier=web", "-o", "name"])
            .contains("configmap/cfg")
    );

    // kubectl edit with a sed "editor".
    let editor = server.dir.path().join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nsed -i 's/a: \"1\"/a: \"edited\"/' \"$1\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = std::process::Command::new("kubectl")
        .args(["--kubeconfig"])
        .arg(server.dir.path().join("kubeconfig"))
        .args(["--cache-dir"])
        .arg(server.dir.path().join("kubectl-cache"))
        .args(["-n", "default", "edit", "cm", "cfg"])
        .env("KUBE_EDITOR", &editor)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
            "jsonpath={.metadata.managedFields[0].manager}"
        ]),
        "kubectl"
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
        conflict.contains("conflict with \"kubectl\": .data.a"),
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

    // kubectl get -w streams Table rows.
    let mut watcher = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(server.dir.path().join("kubeconfig"))
        .arg("--cache-dir")
        .arg(server.dir.path().join("kubectl-cache"))
        .args(["-n", "default", "get", "cm", "-w", "--output-watch-events"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    k.ok(&["create", "cm", "watched", "--from-literal=x=y"]);
    std::thread::sleep(Duration::from_millis(700));
    watcher.kill().unwrap();
    let out = watcher.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("EVENT") && text.contains("ADDED") && text.contains("watched"),
        "{text}"
    );

    // Typed kubectl generators send protobuf bodies.
    k.ok(&["create", "namespace", "proto-ns"]);
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
    assert!(k.ok(&["delete", "widget", "w"]).contains("deleted"));
    let missing = k.fails(&["get", "cm", "cfg"]);
    assert!(
        missing.contains("configmaps \"cfg\" not found"),
        "{missing}"
    );

    // Pods: unbound pods go at once.
    k.ok_stdin(
        &["create", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: busybox\n",
    );
    assert_eq!(
        k.ok(&["get", "pod", "p", "-o", "jsonpath={.status.phase}"]),
        "Pending"
    );
    let uid = k.ok(&["get", "pod", "p", "-o", "jsonpath={.metadata.uid}"]);
    let event = format!(
        "apiVersion: events.k8s.io/v1\nkind: Event\nmetadata:\n  name: p.1\nregarding:\n  apiVersion: v1\n  kind: Pod\n  name: p\n  namespace: default\n  uid: {uid}\nnote: hello from the recorder\nreason: Testing\ntype: Normal\naction: Test\nreportingController: diorch\nreportingInstance: diorch-0\neventTime: \"2025-01-01T00:00:00.000000Z\"\n"
    );
    k.ok_stdin(&["create", "-f", "-"], &event);
    let described = k.ok(&["describe", "pod", "p"]);
    assert!(described.contains("hello from the recorder"), "{described}");
    let resources = k.ok(&["api-resources"]);
    assert!(
        resources.contains("widgets") || resources.contains("pods"),
        "{resources}"
    );
    k.ok(&["delete", "pod", "p", "--wait=true"]);
}

/// Rough scale smoke test (debug builds are slow; run with `--ignored --nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn scale_smoke_20000_pods() {
    use k8s_openapi::api::core::v1::Pod;
    let server = Server::start(20_000);
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let started = std::time::Instant::now();
    let n = 20_000;
    futures::stream::iter(0..n)
        .for_each_concurrent(16, |i| {
            let pods = pods.clone();
            async move {
                let p: Pod = serde_json::from_value(json!({"metadata": {"name": format!("p{i}"), "labels": {"app": "x"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}]}}))
                .unwrap();
                pods.create(&PostParams::default(), &p).await.unwrap();
            }
        })
        .await;
    let secs = started.elapsed().as_secs_f64();
    println!("created {n} pods in {secs:.1}s ({:.0}/s)", n as f64 / secs);
    let t = std::time::Instant::now();
    let list = pods.list(&ListParams::default()).await.unwrap();
    println!("listed {} pods in {:?}", list.items.len(), t.elapsed());
    assert_eq!(list.items.len(), n);
}
