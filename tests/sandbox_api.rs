//! Integration tests of the sandbox API server core, started in-process on 127.0.0.1:0 and
//! driven with the real `kube` client and the real `kubectl`.

mod common;

use std::time::Duration;

use common::{Kubectl, api};
use diorch::sandbox::server::{ApiServer, ServerOptions};
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
