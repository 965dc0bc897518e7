//! Handler tests: every route and error of the replica API through `Router::oneshot`, with
//! caches filled by hand.
//!
//! Here: the cache fixtures and the `call` helper; the tests, by concern, in `tests/`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use kube::runtime::{reflector, watcher};
use serde_json::{Value, json};
use tower::ServiceExt;

use super::*;
use crate::controller::cache::PodCache;
use crate::testing::{self, PodFixture};
use diorch_core::cached::CachedJob;

mod bounds;
mod guards;
mod replicas;

/// A Running job in `ns` with a learner and three collectors (pod templates left empty), its
/// rank table `ranks`.
fn job(name: &str, preemptible: bool, ranks: &[&str]) -> Value {
    testing::job(name)
        .namespace("ns")
        .uid(&format!("uid-{name}"))
        .generation(3)
        .preemptible(preemptible)
        .bare_task("learner", 1)
        .bare_task("collector", 3)
        .status(json!({"phase": "Running", "ranks": ranks}))
        .json()
}

/// Pod `name` of job `job` with rank annotation `rank`, Running on `node-1`. Every pod here
/// is labelled of type collector, whatever its task (the detail answer pins it).
fn pod(job: &str, name: &str, rank: usize) -> PodFixture {
    testing::pod(job, name, rank).task_type("collector")
}

fn state(jobs: Vec<Value>, pods: Vec<Value>, ready: bool) -> ServerState {
    state_and_writers(jobs, pods, ready).0
}

/// The caches' writers, to change what the caches hold after the state is built.
struct Writers {
    jobs: reflector::store::Writer<CachedJob>,
    pods: PodCache,
}

impl Writers {
    /// A pod event as the controller's watch applies it.
    fn pod_event(&mut self, _: &ServerState, event: watcher::Event<CachedPod>) {
        self.pods.apply(event);
    }
}

fn state_and_writers(jobs: Vec<Value>, pods: Vec<Value>, ready: bool) -> (ServerState, Writers) {
    let (job_store, mut job_writer) = reflector::store::<CachedJob>();
    for j in jobs {
        let j: CachedJob = serde_json::from_value(j).expect("job");
        job_writer.apply_watcher_event(&watcher::Event::Apply(j));
    }
    let pod_cache = PodCache::default();
    for p in pods {
        let p: CachedPod = serde_json::from_value(p).expect("pod");
        pod_cache.apply(watcher::Event::Apply(p));
    }
    let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
    let state = ServerState {
        caches: Caches {
            jobs: job_store,
            pods: pod_cache.clone(),
            ready: Arc::new(AtomicBool::new(ready)),
        },
        client: Client::try_from(config).expect("client"),
        metrics: Arc::new(Metrics::new()),
        auth: None,
        on_handled: None,
        answers: Default::default(),
    };
    let writers = Writers {
        jobs: job_writer,
        pods: pod_cache,
    };
    (state, writers)
}

fn standard() -> ServerState {
    let terminating = pod("j", "j-collector-2", 4)
        .ip("10.0.0.9")
        .terminating()
        .json();
    state(
        vec![
            job(
                "j",
                false,
                &["j-learner-0", "j-collector-0", "", "j-collector-1"],
            ),
            job("p", true, &[]),
            job("empty", false, &[]),
        ],
        vec![
            pod("j", "j-learner-0", 0).ip("10.0.0.1").port(1234).json(),
            pod("j", "j-collector-0", 1).ip("10.0.0.2").json(),
            pod("j", "j-collector-1", 3)
                .ip("10.0.0.3")
                .phase("Pending")
                .json(),
            pod("j", "j-collector-5", 5)
                .ip("10.0.0.5")
                .phase("Failed")
                .json(),
            pod("j", "j-collector-6", 6).phase("Pending").json(),
            terminating,
        ],
        true,
    )
}

async fn call(
    state: &ServerState,
    method: Method,
    uri: &str,
    body: &str,
) -> (StatusCode, Value, axum::http::HeaderMap) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("request");
    let response = router(state.clone())
        .oneshot(request)
        .await
        .expect("response");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, value, headers)
}
