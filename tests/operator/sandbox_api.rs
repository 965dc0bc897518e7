//! Integration tests of the sandbox API server core, started in-process on 127.0.0.1:0 and
//! driven with the real `kube` client and the real `kubectl`.

use crate::common;

use std::time::Duration;

use common::{Kubectl, api};
use diorch_sandbox::server::{ApiServer, ServerOptions};
use futures::StreamExt;
use kube::api::{Api, ListParams, PostParams};
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

    /// A client without kube's default retries, as the e2e suite uses (`api::client_for_url`).
    fn client(&self) -> kube::Client {
        api::client_for_url(&self.url)
    }

    fn kubectl(&self) -> Kubectl {
        let kubeconfig = self.dir.path().join("kubeconfig");
        diorch_sandbox::write_kubeconfig(&kubeconfig, &self.url).unwrap();
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

// The scenarios are shared with the real-server suite (`tests/e2e.rs`,
// `e2e_sandbox_api_scenarios`): `tests/common/api.rs`. What only the sandbox shows is asserted
// here, each with why the real server cannot.

#[tokio::test]
async fn crud_watch_order_resume_conflicts_and_dry_run() {
    let server = Server::start(10_000);
    api::crud_watch_order_resume_conflicts_and_dry_run(&server.client(), "default").await;
}

#[tokio::test]
async fn status_errors_and_resource_version_rules() {
    let server = Server::start(10_000);
    api::status_errors_and_resource_version_rules(&server.client(), "default").await;
}

#[tokio::test]
async fn too_old_resource_version_is_410_in_the_stream() {
    // A 3-event history stands in for a real server's bounded watch cache.
    let server = Server::start(3);
    api::too_old_resource_version_is_410_in_the_stream(&server.client(), "default", "example.com")
        .await;
}

#[tokio::test]
async fn custom_resources_status_split_generation_and_gc() {
    let server = Server::start(10_000);
    api::custom_resources_status_split_generation_and_gc(
        &server.client(),
        "default",
        "example.com",
    )
    .await;
}

#[tokio::test]
async fn namespace_deletion_and_terminating_namespace() {
    let server = Server::start(10_000);
    api::namespace_deletion_and_terminating_namespace(&server.client(), "doomed", "nowhere").await;
}

#[test]
fn kubectl_end_to_end() {
    let server = Server::start(10_000);
    let k = server.kubectl();
    // The sandbox serves v1.33 (the real test server is a v1.24 build).
    assert!(k.ok(&["version", "-o", "json"]).contains("v1.33.0"));
    let seen = api::kubectl_end_to_end(&k, "default", "example.com", server.dir.path());
    // Server-side field validation names the full path (kube-apiserver 1.25+; before, kubectl
    // validates on the client and words it its own way).
    assert!(
        seen.unknown_field_error
            .contains("unknown field \"spec.foo\""),
        "{}",
        seen.unknown_field_error
    );
}

const PRIORITY_CLASS: &str = "apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: team-a.batch
value: 1000
description: team A's batch jobs
";

/// scheduling.k8s.io/v1 PriorityClasses (cluster-scoped), which the operator watches for
/// `spec.priorityClassName`: `kubectl apply`, get (with the apiserver's default and table),
/// the fixed value, delete.
#[test]
fn priority_classes_apply_list_fixed_value_and_delete() {
    let server = Server::start(10_000);
    let k = server.kubectl();
    assert!(
        k.ok(&["api-resources", "--api-group", "scheduling.k8s.io"])
            .contains("priorityclasses")
    );
    k.ok_stdin(&["apply", "-f", "-"], PRIORITY_CLASS);
    // Cluster-scoped: listed whatever the namespace.
    let listed: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "priorityclasses", "-n", "elsewhere", "-o", "json"]))
            .unwrap();
    let items = listed["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{listed:#}");
    let class = &items[0];
    assert_eq!(class["metadata"]["name"], "team-a.batch");
    assert!(class["metadata"]["namespace"].is_null(), "{class:#}");
    assert_eq!(class["value"], 1000);
    assert_eq!(class["preemptionPolicy"], "PreemptLowerPriority");
    let table = k.ok(&["get", "pc"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]
    );
    assert!(table.contains("team-a.batch"), "{table}");
    // Re-applying it unchanged is fine; a class's value may not change.
    k.ok_stdin(&["apply", "-f", "-"], PRIORITY_CLASS);
    let refused = k.fails_stdin(
        &["apply", "-f", "-"],
        &PRIORITY_CLASS.replace("value: 1000", "value: 5"),
    );
    assert!(
        refused.contains("value: Forbidden: may not be changed in an update"),
        "{refused}"
    );
    let bad = k.fails_stdin(
        &["apply", "-f", "-"],
        &PRIORITY_CLASS.replace("team-a.batch", "Team_A"),
    );
    assert!(bad.contains("RFC 1123 subdomain"), "{bad}");
    k.ok(&["delete", "priorityclass", "team-a.batch"]);
    assert_eq!(k.ok(&["get", "pc", "-o", "name"]).trim(), "");
}

/// The operator's PriorityClass cache (`allocator::priorities`) follows the cluster: a job
/// naming a class gets its value once it exists, and its `spec.priority` value again once it
/// is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_priority_class_cache_follows_the_cluster() {
    use diorch::allocator::priorities::PriorityClasses;
    let server = Server::start(10_000);
    let k = server.kubectl();
    let (classes, watch) = PriorityClasses::start(server.client());
    let watching = tokio::spawn(watch);
    let job: diorch_core::api::DIJob = serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1",
        "kind": "DIJob",
        "metadata": {"name": "j", "namespace": "default"},
        "spec": {"priority": "high", "priorityClassName": "team-a.batch",
                 "tasks": [{"type": "learner", "replicas": 1}]}
    }))
    .unwrap();
    let value_becomes = |want: i32| {
        let classes = classes.clone();
        let spec = job.spec.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
            while classes.value(&spec) != want {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "value stayed {} (want {want})",
                    classes.value(&spec)
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    value_becomes(100).await;
    let applied = {
        let k = k.clone();
        tokio::task::spawn_blocking(move || k.ok_stdin(&["apply", "-f", "-"], PRIORITY_CLASS))
    };
    applied.await.unwrap();
    value_becomes(1000).await;
    assert_eq!(classes.class_value("team-a.batch"), Some(1000));
    tokio::task::spawn_blocking(move || k.ok(&["delete", "pc", "team-a.batch"]))
        .await
        .unwrap();
    value_becomes(100).await;
    watching.abort();
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

/// Percent-encodes everything but RFC 3986's unreserved characters (and `/` where a path may
/// keep it), so that any Unicode text makes a valid request line.
fn encode(s: &str, keep_slash: bool) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            b'/' if keep_slash => "/".to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Any request a client can send (a path under the real API prefixes with an arbitrary Unicode
/// tail, a query parameter the sandbox parses with an arbitrary Unicode value, any body and
/// content type) gets an HTTP answer, and the sandbox goes on serving: it never panics on input
/// (a panicking handler drops the connection, which the client sees as an error, not a status).
#[test]
fn any_request_is_answered_never_panicked_on() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    let server = Server::start(1000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // kube's client spawns its buffer task on the runtime it is made in.
    let client = {
        let _in_runtime = rt.enter();
        server.client()
    };
    let prefixes = [
        "/",
        "/api/v1/",
        "/api/v1/namespaces/default/",
        "/api/v1/namespaces/default/configmaps/",
        "/api/v1/namespaces/default/pods/",
        "/api/v1/nodes/",
        "/apis/",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/",
        "/apis/coordination.k8s.io/v1/namespaces/default/leases/",
        "/openapi/v3/",
    ];
    // Every query parameter the REST layer reads, except `watch` (a stream stays open).
    let keys = [
        "labelSelector",
        "fieldSelector",
        "resourceVersion",
        "resourceVersionMatch",
        "limit",
        "continue",
        "timeoutSeconds",
        "dryRun",
        "fieldManager",
        "fieldValidation",
        "force",
        "propagationPolicy",
        "gracePeriodSeconds",
        "orphanDependents",
        "pretty",
    ];
    let content_types = [
        "application/json",
        "application/yaml",
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
        "application/json-patch+json",
        "application/apply-patch+yaml",
        "application/vnd.kubernetes.protobuf",
        "text/plain; charset=é",
    ];
    let methods = ["GET", "POST", "PUT", "PATCH", "DELETE"];
    let body = prop_oneof![
        "\\PC{0,60}",
        Just(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}"#.to_string()),
        "\\PC{0,20}".prop_map(|s| format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":{s:?},"labels":{{{s:?}:{s:?}}}}}}}"#
        )),
        "\\PC{0,20}".prop_map(|s| format!(r#"[{{"op":"replace","path":{s:?},"value":{s:?}}}]"#)),
    ];
    let requests = (
        proptest::sample::select(methods.to_vec()),
        proptest::sample::select(prefixes.to_vec()),
        "\\PC{0,30}",
        proptest::sample::select(keys.to_vec()),
        "\\PC{0,30}",
        proptest::sample::select(content_types.to_vec()),
        body,
    );
    let mut runner = TestRunner::new(Config {
        cases: 1500,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&requests, |(method, prefix, tail, key, value, ct, body)| {
            let uri = format!(
                "{prefix}{}?{key}={}",
                encode(&tail, true),
                encode(&value, false)
            );
            let request = http::Request::builder()
                .method(method)
                .uri(&uri)
                .header("content-type", ct)
                .body(kube::client::Body::from(body.into_bytes()))
                .unwrap();
            let answered = rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(30), client.send(request)).await
            });
            match answered {
                Ok(Ok(response)) => prop_assert!(
                    response.status().as_u16() >= 200,
                    "{method} {uri}: {}",
                    response.status()
                ),
                Ok(Err(e)) => prop_assert!(false, "{method} {uri}: no answer: {e}"),
                Err(_) => prop_assert!(false, "{method} {uri}: no answer within 30 s"),
            }
            Ok(())
        })
        .unwrap();
    // Still serving.
    let version = rt.block_on(client.apiserver_version()).unwrap();
    assert!(version.git_version.starts_with("v1.33."), "{version:?}");
}
