//! Handler tests: every route and error of the replica API through `Router::oneshot`, with
//! caches filled by hand.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use kube::runtime::{reflector, watcher};
use serde_json::{Value, json};
use tower::ServiceExt;

use super::*;
use crate::controller::cache::PodIndex;
use diorch_core::cached::CachedJob;

fn job(name: &str, preemptible: bool, ranks: &[&str]) -> Value {
    json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "generation": 3},
        "spec": {"preemptible": preemptible, "tasks": [
            {"name": "learner", "type": "learner", "replicas": 1, "template": {}},
            {"name": "collector", "type": "collector", "replicas": 3, "template": {}}
        ]},
        "status": {"phase": "Running", "ranks": ranks}
    })
}

fn pod(
    job: &str,
    name: &str,
    rank: usize,
    ip: Option<&str>,
    phase: &str,
    port: Option<i32>,
) -> Value {
    let mut container = json!({"name": "di-container"});
    if let Some(port) = port {
        container["ports"] = json!([{"name": "di-port", "containerPort": port}]);
    }
    json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("pod-{name}"),
            "labels": {"diengine/job": job, "diengine/task-name": name.split('-').nth(1), "diengine/task-type": "collector"},
            "annotations": {"diengine/rank": rank.to_string()},
            "ownerReferences": [{"apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob", "name": job, "uid": format!("uid-{job}"), "controller": true}]},
        "spec": {"nodeName": "node-1", "containers": [container]},
        "status": {"phase": phase, "podIP": ip}
    })
}

fn state(jobs: Vec<Value>, pods: Vec<Value>, ready: bool) -> ServerState {
    state_and_writers(jobs, pods, ready).0
}

/// The caches' writers, to change what the caches hold after the state is built.
struct Writers {
    jobs: reflector::store::Writer<CachedJob>,
    pods: reflector::store::Writer<CachedPod>,
}

impl Writers {
    /// A pod event as the controller's watch applies it: index, cache, then settled.
    fn pod_event(&mut self, s: &ServerState, event: watcher::Event<CachedPod>) {
        s.caches.index.apply(&event);
        self.pods.apply_watcher_event(&event);
        s.caches.index.settled(&event);
    }
}

fn state_and_writers(jobs: Vec<Value>, pods: Vec<Value>, ready: bool) -> (ServerState, Writers) {
    let (job_store, mut job_writer) = reflector::store::<CachedJob>();
    for j in jobs {
        let j: CachedJob = serde_json::from_value(j).expect("job");
        job_writer.apply_watcher_event(&watcher::Event::Apply(j));
    }
    let (pod_store, mut pod_writer) = reflector::store::<CachedPod>();
    let index = PodIndex::default();
    for p in pods {
        let p: CachedPod = serde_json::from_value(p).expect("pod");
        let event = watcher::Event::Apply(p);
        index.apply(&event);
        pod_writer.apply_watcher_event(&event);
        index.settled(&event);
    }
    let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
    let state = ServerState {
        caches: Caches {
            jobs: job_store,
            pods: pod_store,
            index,
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
        pods: pod_writer,
    };
    (state, writers)
}

fn standard() -> ServerState {
    let mut terminating = pod("j", "j-collector-2", 4, Some("10.0.0.9"), "Running", None);
    terminating["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
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
            pod(
                "j",
                "j-learner-0",
                0,
                Some("10.0.0.1"),
                "Running",
                Some(1234),
            ),
            pod("j", "j-collector-0", 1, Some("10.0.0.2"), "Running", None),
            pod("j", "j-collector-1", 3, Some("10.0.0.3"), "Pending", None),
            pod("j", "j-collector-5", 5, Some("10.0.0.5"), "Failed", None),
            pod("j", "j-collector-6", 6, None, "Pending", None),
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

/// A polled answer is kept while the job and its pods are unchanged, and recomputed as soon
/// as either changes (the counter of ignored ranks counts computations).
#[tokio::test]
async fn a_kept_answer_follows_every_change_of_the_job_or_its_pods() {
    let with_version = |rv: &str| {
        let mut j = job("j", false, &[]);
        j["metadata"]["resourceVersion"] = json!(rv);
        j
    };
    let (s, mut writers) = state_and_writers(
        vec![with_version("1")],
        vec![
            pod("j", "j-learner-0", 0, Some("10.0.0.1"), "Running", None),
            pod("j", "j-collector-0", 99, Some("10.0.0.2"), "Running", None),
        ],
        true,
    );
    let get = || call(&s, Method::GET, "/v2alpha1/job/ns.j/replicas", "");
    for _ in 0..3 {
        let (status, body, headers) = get().await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["data"], json!(["10.0.0.1:22270"]));
        assert_eq!(
            headers.get("content-type").and_then(|v| v.to_str().ok()),
            Some("application/json; charset=utf-8")
        );
    }
    assert_eq!(s.metrics.server.ignored_ranks.get(), 1, "computed once");
    assert_eq!(s.answers.len(), 1);

    // A pod moves: the next answer has its new address.
    let moved: CachedPod = serde_json::from_value(pod(
        "j",
        "j-learner-0",
        0,
        Some("10.0.0.7"),
        "Running",
        None,
    ))
    .expect("pod");
    writers.pod_event(&s, watcher::Event::Apply(moved.clone()));
    let (_, body, _) = get().await;
    assert_eq!(body["data"], json!(["10.0.0.7:22270"]));
    assert_eq!(s.metrics.server.ignored_ranks.get(), 2);

    // A job change (its status ranks) is seen too.
    let mut changed = with_version("2");
    changed["status"]["ranks"] = json!(["a", "b", "c"]);
    let changed: CachedJob = serde_json::from_value(changed).expect("job");
    writers
        .jobs
        .apply_watcher_event(&watcher::Event::Apply(changed));
    let (_, body, _) = get().await;
    assert_eq!(body["data"], json!(["10.0.0.7:22270", "", ""]));

    // The learner gone: the one pod left has an ignored rank, so no replica at all.
    writers.pod_event(&s, watcher::Event::Delete(moved));
    let (_, body, _) = get().await;
    assert_eq!(body["data"], Value::Null);
    // `?detail=true` is never served from what was kept.
    let (_, body, _) = call(
        &s,
        Method::GET,
        "/v2alpha1/job/ns.j/replicas?detail=true",
        "",
    )
    .await;
    assert_eq!(body["data"], json!([]));
}

#[tokio::test]
async fn get_replicas_lists_live_addresses_by_rank_with_gaps_on_both_routes() {
    let s = standard();
    for uri in [
        "/v2alpha1/job/ns.j/replicas",
        "/v2alpha1/ns.j/replicas",
        "/v2alpha1/job/ns.j.3/replicas",
    ] {
        let (status, body, headers) = call(&s, Method::GET, uri, "").await;
        assert_eq!(status, StatusCode::OK, "{uri}");
        assert_eq!(headers["content-type"], "application/json; charset=utf-8");
        assert_eq!(
            body,
            json!({"success": true, "code": 0, "message": "successfully get replicas",
                   "data": ["10.0.0.1:1234", "10.0.0.2:22270", "", "10.0.0.3:22270"]}),
            "{uri}: failed, terminating and IP-less pods are left out; the free rank 2 is empty"
        );
    }
    let (_, body, _) = call(&s, Method::GET, "/v2alpha1/job/ns.empty/replicas", "").await;
    assert_eq!(
        body["data"],
        Value::Null,
        "no replica at all is null, as di-server answers"
    );
}

#[tokio::test]
async fn get_replicas_detail_describes_each_replica() {
    let (status, body, _) = call(
        &standard(),
        Method::GET,
        "/v2alpha1/job/ns.j/replicas?detail=true",
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let data = body["data"].as_array().expect("array");
    assert_eq!(data.len(), 3);
    assert_eq!(
        data[0],
        json!({"rank": 0, "address": "10.0.0.1:1234", "pod": "j-learner-0", "task": "learner", "type": "collector", "phase": "Running", "node": "node-1"})
    );
    assert_eq!(data[2]["rank"], 3);
}

#[tokio::test]
async fn bad_ids_unknown_jobs_and_stale_generations_are_refused_clearly() {
    let s = standard();
    let cases = [
        (
            "/v2alpha1/job/j/replicas",
            StatusCode::BAD_REQUEST,
            "job id j must be in namespace.name format (or namespace.name.generation)",
        ),
        (
            "/v2alpha1/job/ns.j.x/replicas",
            StatusCode::BAD_REQUEST,
            "job id ns.j.x must be in namespace.name format (or namespace.name.generation)",
        ),
        (
            "/v2alpha1/job/a.b.c.d/replicas",
            StatusCode::BAD_REQUEST,
            "job id a.b.c.d must be in namespace.name format (or namespace.name.generation)",
        ),
        (
            "/v2alpha1/job/ns.nope/replicas",
            StatusCode::NOT_FOUND,
            "dijobs.diengine.opendilab.org \"nope\" not found",
        ),
        (
            "/v2alpha1/job/ns.j.2/replicas",
            StatusCode::CONFLICT,
            "job ns/j is at generation 3, not 2: use ns.j.3 or ns.j",
        ),
    ];
    for (uri, want, message) in cases {
        let (status, body, _) = call(&s, Method::GET, uri, "").await;
        assert_eq!(status, want, "{uri}");
        assert_eq!(
            body,
            json!({"success": false, "code": 1, "message": message, "data": null}),
            "{uri}"
        );
    }
}

#[tokio::test]
async fn scaling_bodies_are_checked_and_non_preemptible_jobs_are_told_how_to_scale() {
    let s = standard();
    let bad = [
        ("", "request body is empty: EOF"),
        (
            "{",
            "request body is not valid JSON: EOF while parsing an object at line 1 column 1",
        ),
        (
            "[1]",
            "request body must be a JSON object like {\"replicas\": 1}",
        ),
        ("{}", "replicas is required, e.g. {\"replicas\": 1}"),
        (
            "{\"replicas\": 0}",
            "replicas must be between 1 and 1000, got 0",
        ),
        (
            "{\"replicas\": -2}",
            "replicas must be between 1 and 1000, got -2",
        ),
        (
            "{\"replicas\": 100000}",
            "replicas must be between 1 and 1000, got 100000",
        ),
        (
            "{\"replicas\": \"2\"}",
            "replicas must be an integer, got \"2\"",
        ),
    ];
    for (body, message) in bad {
        let (status, got, _) = call(&s, Method::POST, "/v2alpha1/job/ns.j/replicas", body).await;
        assert_eq!(
            (status, got["message"].as_str()),
            (StatusCode::BAD_REQUEST, Some(message)),
            "{body}"
        );
    }
    let (_, got, _) = call(
        &s,
        Method::DELETE,
        "/v2alpha1/job/ns.j/replicas",
        "{\"pods\": []}",
    )
    .await;
    assert_eq!(got["message"], "pods must be a non-empty list of pod names");
    for method in [Method::POST, Method::DELETE] {
        let (status, got, _) = call(
            &s,
            method,
            "/v2alpha1/job/ns.j/replicas",
            "{\"replicas\": 1}",
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(
            got["message"],
            "job ns/j is not preemptible: scale it by editing spec.tasks[].replicas (kubectl edit dijob j -n ns)"
        );
    }
    let (status, got, _) = call(
        &s,
        Method::POST,
        "/v2alpha1/ns.p/replicas",
        "{\"replicas\": 2}",
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        got["message"],
        "no task of this job can be scaled: set minReplicas and maxReplicas on the task to scale"
    );
    let (status, _, _) = call(
        &s,
        Method::POST,
        "/v2alpha1/ns.nope/replicas",
        "{\"replicas\": 2}",
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn oversized_bodies_wrong_methods_and_unknown_paths() {
    let s = standard();
    let big = format!("{{\"data\": {{\"x\": \"{}\"}}}}", "a".repeat(MAX_BODY));
    let (status, got, _) = call(&s, Method::POST, "/v2alpha1/job/ns.j/profilings", &big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        got["message"],
        format!("request body is larger than {MAX_BODY} bytes")
    );
    let (status, _, headers) = call(&s, Method::PUT, "/v2alpha1/job/ns.j/replicas", "").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let allow = headers
        .get("allow")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    for m in ["GET", "POST", "DELETE"] {
        assert!(allow.contains(m), "Allow: {allow}");
    }
    let (status, _, _) = call(&s, Method::GET, "/v2alpha1/job/ns.j/nothing", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn profilings_must_be_an_object_of_a_known_job() {
    let s = standard();
    let (status, got, _) = call(
        &s,
        Method::POST,
        "/v2alpha1/job/ns.j/profilings",
        "{\"data\": [1]}",
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        got["message"],
        "profilings must be a JSON object, e.g. {\"data\": {\"throughput\": 1.5}}"
    );
    let (status, _, _) = call(&s, Method::POST, "/v2alpha1/job/ns.nope/profilings", "{}").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn readiness_follows_the_caches_and_requests_are_counted() {
    let s = state(vec![], vec![], false);
    let (status, _, _) = call(&s, Method::GET, "/readyz", "").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    s.caches.ready.store(true, Ordering::Release);
    let (status, _, _) = call(&s, Method::GET, "/readyz", "").await;
    assert_eq!(status, StatusCode::OK);
    call(&s, Method::GET, "/v2alpha1/job/ns.x/replicas", "").await;
    let (_, metrics, _) = call(&s, Method::GET, "/metrics", "").await;
    let text = metrics.as_str().unwrap_or_default().to_string();
    assert!(
        text.contains("diorch_http_requests_total{route=\"/v2alpha1/job/{id}/replicas\",method=\"GET\",code=\"404\"} 1"),
        "{text}"
    );
}

#[test]
fn job_ids_parse_with_and_without_generation() {
    assert_eq!(
        parse_job_id("ns.job"),
        Ok(JobId {
            job: ObjectKey::new("ns", "job"),
            generation: None
        })
    );
    assert_eq!(parse_job_id("ns.job.7").map(|i| i.generation), Ok(Some(7)));
    assert!(parse_job_id(".job").is_err());
    assert!(parse_job_id("ns.").is_err());
    assert!(parse_job_id("ns/job").is_err());
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    fn method() -> impl Strategy<Value = Method> {
        prop_oneof![
            Just(Method::GET),
            Just(Method::POST),
            Just(Method::DELETE),
            Just(Method::PUT),
        ]
    }

    fn body() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..256),
            "\\{\"(replicas|pods|data|task)\": (-?[0-9]{1,20}|\"[a-z-]{0,10}\"|\\[\\]|\\{\\}|null|true|1e400)\\}"
                .prop_map(String::into_bytes),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Whatever the path, method and body: no panic, and every answer on an API route is
        /// di-server's envelope with a status that says what went wrong.
        #[test]
        fn any_request_gets_an_envelope_or_a_routing_error(
            id in "[a-z0-9.%/-]{0,24}",
            route in prop_oneof![Just("/v2alpha1/job/"), Just("/v2alpha1/")],
            tail in prop_oneof![Just("/replicas"), Just("/profilings"), Just("/replicas?detail=true")],
            method in method(),
            body in body(),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            let (status, value) = runtime.block_on(async {
                let s = standard();
                let request = Request::builder()
                    .method(method)
                    .uri(format!("{route}{id}{tail}"))
                    .body(Body::from(body))
                    .expect("request");
                let response = router(s).oneshot(request).await.expect("response");
                let status = response.status();
                let bytes = response.into_body().collect().await.expect("body").to_bytes();
                (status, serde_json::from_slice::<Value>(&bytes).ok())
            });
            prop_assert!(status != StatusCode::INTERNAL_SERVER_ERROR);
            if let Some(v) = value {
                prop_assert_eq!(v["success"].as_bool(), Some(status.is_success()));
                prop_assert!(v["message"].is_string());
            } else {
                // Only the router's own answers are not envelopes.
                prop_assert!(
                    matches!(status, StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED | StatusCode::BAD_REQUEST),
                    "status {}", status
                );
            }
        }
    }
}

#[tokio::test]
async fn the_openapi_document_matches_the_routes() {
    let s = standard();
    let doc: Value = serde_json::from_str(OPENAPI).expect("valid JSON");
    let (status, served, _) = call(&s, Method::GET, "/openapi.json", "").await;
    assert_eq!((status, &served), (StatusCode::OK, &doc));
    let paths = doc["paths"].as_object().expect("paths");
    // Every documented operation is routed (never 404 or 405)...
    for (path, item) in paths {
        let uri = path.replace("{id}", "ns.j");
        for method in ["get", "post", "delete", "put"] {
            let documented = item.get(method).is_some();
            let m = Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
            let (status, _, _) = call(&s, m, &uri, "{\"replicas\": 1}").await;
            let routed =
                status != StatusCode::METHOD_NOT_ALLOWED && status != StatusCode::NOT_FOUND;
            assert_eq!(documented, routed, "{method} {path}: {status}");
        }
    }
    // ...and every route is documented.
    for route in [
        "/v2alpha1/job/{id}/replicas",
        "/v2alpha1/{id}/replicas",
        "/v2alpha1/job/{id}/profilings",
        "/v2alpha1/{id}/profilings",
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
    ] {
        assert!(paths.contains_key(route), "{route} undocumented");
    }
    assert_eq!(paths.len(), 8);
}

#[test]
fn scaling_a_preemptible_job_picks_the_elastic_task_within_its_bounds() {
    let mut value = job("p", true, &[]);
    value["spec"]["tasks"][1]["minReplicas"] = json!(1);
    value["spec"]["tasks"][1]["maxReplicas"] = json!(5);
    let mut j: DIJob = serde_json::from_value(value).expect("job");
    let target = |j: &DIJob, body: Value, delete: bool| super::scale_target(j, &body, delete);
    assert_eq!(
        target(&j, json!({"replicas": 2}), false),
        Ok(("collector".to_string(), 5))
    );
    assert_eq!(
        target(&j, json!({"replicas": 2}), true),
        Ok(("collector".to_string(), 1))
    );
    let err = target(&j, json!({"replicas": 3}), false).expect_err("past max");
    assert_eq!(
        err,
        "task collector has 3 replicas and may run 1 to 5 (minReplicas..maxReplicas); adding 3 would make 6"
    );
    assert!(
        target(&j, json!({"replicas": 3}), true).is_err(),
        "below min"
    );
    // The allocator's resize is the starting point.
    j.status.get_or_insert_with(Default::default).task_replicas =
        Some([("collector".to_string(), 4)].into());
    assert_eq!(
        target(&j, json!({"replicas": 1}), false),
        Ok(("collector".to_string(), 5))
    );
    // Naming a task; naming one that does not exist.
    let err = target(&j, json!({"replicas": 1, "task": "learner"}), false).expect_err("fixed");
    assert!(
        err.starts_with("task learner has 1 replicas and may run 1 to 1"),
        "{err}"
    );
    let err = target(&j, json!({"replicas": 1, "task": "nope"}), false).expect_err("unknown");
    assert_eq!(err, "job has no task nope; its tasks: learner, collector");
    // Two elastic tasks: the caller must say which.
    let mut two = j.clone();
    two.spec.tasks[0].max_replicas = Some(2);
    let err = target(&two, json!({"replicas": 1}), false).expect_err("ambiguous");
    assert_eq!(
        err,
        "several tasks can be scaled (learner, collector): name one with \"task\""
    );
    assert_eq!(
        target(&two, json!({"replicas": 1, "task": "learner"}), false),
        Ok(("learner".to_string(), 2))
    );
}

#[test]
fn removing_named_pods_of_a_preemptible_job_is_exact_and_all_or_nothing() {
    let mut value = job("p", true, &[]);
    value["spec"]["tasks"][1]["minReplicas"] = json!(1);
    value["spec"]["tasks"][1]["maxReplicas"] = json!(5);
    value["spec"]["tasks"][1]["replicas"] = json!(4);
    let mut j: DIJob = serde_json::from_value(value).expect("job");
    let remove = |j: &DIJob, pods: &[&str]| super::remove_pods(j, &json!({"pods": pods}));
    // A middle rank: the task keeps 0, 2, 3.
    let change = remove(&j, &["p-collector-1"]).expect("remove");
    assert_eq!(
        change,
        json!({"taskReplicas": {"collector": 3}, "removedRanks": {"collector": [1]}})
    );
    let status = j.status.get_or_insert_with(Default::default);
    status.task_replicas = Some([("collector".to_string(), 3)].into());
    status.removed_ranks = Some([("collector".to_string(), vec![1])].into());
    assert_eq!(diorch_core::build::task_local_ranks(&j, 1), vec![0, 2, 3]);
    // Growing appends after the highest rank; the removed one is not reused.
    let mut grown = j.clone();
    grown
        .status
        .get_or_insert_with(Default::default)
        .task_replicas = Some([("collector".to_string(), 4)].into());
    assert_eq!(
        diorch_core::build::task_local_ranks(&grown, 1),
        vec![0, 2, 3, 4]
    );
    // The highest rank needs no record.
    assert_eq!(
        remove(&j, &["p-collector-3"]).expect("remove"),
        json!({"taskReplicas": {"collector": 2}, "removedRanks": {"collector": [1]}})
    );
    // Unknown, already removed, or below minReplicas: refused, nothing written.
    let err = remove(&j, &["p-collector-1"]).expect_err("gone");
    assert!(err.starts_with("pod p-collector-1 is not a replica of job ns/p; its replicas: p-learner-0, p-collector-0, p-collector-2, p-collector-3"), "{err}");
    let err = remove(&j, &["p-collector-0", "p-collector-2", "p-collector-3"]).expect_err("min");
    assert!(err.contains("may not go below minReplicas 1"), "{err}");
    let err = remove(&j, &["p-learner-0"]).expect_err("fixed task");
    assert!(err.contains("task learner has 1 replicas"), "{err}");
}

/// Authorisers for tests, and the requests they see.
mod guard {
    use super::*;
    use crate::server::auth::{Authorizer, Credentials, Decision, Target};
    use futures::future::BoxFuture;
    use std::sync::Mutex;

    /// Allows only `token` to `verb` job `ns/name`; refuses everything else.
    pub struct AllowOnly {
        pub token: &'static str,
        pub namespace: &'static str,
        pub name: &'static str,
        pub verb: &'static str,
    }

    impl Authorizer for AllowOnly {
        fn authorize<'a>(
            &'a self,
            who: &'a Credentials,
            what: &'a Target,
        ) -> BoxFuture<'a, Decision> {
            Box::pin(async move {
                let allowed = who.token.as_deref() == Some(self.token)
                    && *what
                        == Target::Job {
                            job: ObjectKey::new(self.namespace, self.name),
                            verb: self.verb,
                        };
                match (allowed, &who.token) {
                    (true, _) => Decision::Allowed,
                    (false, None) => Decision::Unauthenticated("no token".into()),
                    (false, Some(_)) => Decision::Forbidden("not this".into()),
                }
            })
        }
    }

    /// Always answers the same.
    pub struct Fixed(pub Decision);

    impl Authorizer for Fixed {
        fn authorize<'a>(&'a self, _: &'a Credentials, _: &'a Target) -> BoxFuture<'a, Decision> {
            Box::pin(async move { self.0.clone() })
        }
    }

    pub type Handled = Arc<Mutex<Vec<(JobId, Method)>>>;

    /// `state` with `auth`, recording every (id, method) a handler acts on.
    pub fn with_auth(mut state: ServerState, auth: Arc<dyn Authorizer>) -> (ServerState, Handled) {
        let handled: Handled = Arc::default();
        let log = handled.clone();
        state.auth = Some(auth);
        state.on_handled = Some(Arc::new(move |id: &JobId, method: &Method| {
            log.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((id.clone(), method.clone()))
        }));
        (state, handled)
    }

    /// One request through the router: status and body text.
    pub async fn send(
        state: &ServerState,
        method: Method,
        uri: &str,
        authorization: Option<&str>,
        peer: Option<std::net::SocketAddr>,
    ) -> Option<(StatusCode, String)> {
        let mut builder = Request::builder().method(method).uri(uri);
        if let Some(value) = authorization {
            builder = builder.header("authorization", value);
        }
        // A path the HTTP stack itself cannot carry never reaches the router.
        let mut request = builder.body(Body::from("{\"replicas\": 1}")).ok()?;
        if let Some(peer) = peer {
            request
                .extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
        }
        let response = router(state.clone())
            .oneshot(request)
            .await
            .expect("response");
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        Some((status, String::from_utf8_lossy(&bytes).into_owned()))
    }
}

fn allow_only_get_of_ns_j() -> Arc<guard::AllowOnly> {
    Arc::new(guard::AllowOnly {
        token: "good",
        namespace: "ns",
        name: "j",
        verb: "get",
    })
}

/// Issue 17, item 1: an id with a percent-encoded dot and any token was served, because the
/// check parsed the raw path and let through what it could not parse, while the handler
/// decoded the id and acted on it.
#[tokio::test]
async fn an_encoded_job_id_is_authorised_as_decoded_never_passed_through() {
    let (s, handled) = guard::with_auth(standard(), allow_only_get_of_ns_j());
    for method in [Method::GET, Method::POST, Method::DELETE] {
        for uri in [
            "/v2alpha1/job/ns%2Ej/replicas",
            "/v2alpha1/job/ns%2ep/replicas",
            "/v2alpha1/ns%2Ep/profilings",
            "/v2alpha1/job/ns%2Ej%2E3/replicas",
        ] {
            let (status, body) = guard::send(&s, method.clone(), uri, Some("Bearer x"), None)
                .await
                .expect("valid uri");
            assert_eq!(status, StatusCode::FORBIDDEN, "{method} {uri}: {body}");
        }
    }
    assert!(handled.lock().expect("log").is_empty());
    // The decoded id is what is authorised, so the allowed caller may use either spelling.
    let (status, _) = guard::send(
        &s,
        Method::GET,
        "/v2alpha1/job/ns%2Ej/replicas",
        Some("Bearer good"),
        None,
    )
    .await
    .expect("valid uri");
    assert_eq!(status, StatusCode::OK);
    let handled = handled.lock().expect("log").clone();
    assert_eq!(handled.len(), 1);
    assert_eq!(
        (handled[0].0.job.name.as_str(), &handled[0].1),
        ("j", &Method::GET)
    );
}

/// Whatever the authoriser cannot allow is refused before any handler: no token (401), a
/// denial (403), an authoriser that cannot decide (503), an id it cannot check (400).
#[tokio::test]
async fn every_refusal_of_the_authoriser_stops_the_request_before_a_handler() {
    use crate::server::auth::Decision;
    let cases = [
        (
            Decision::Unauthenticated("who?".into()),
            StatusCode::UNAUTHORIZED,
        ),
        (Decision::Forbidden("no".into()), StatusCode::FORBIDDEN),
        (
            Decision::Unavailable("cannot check the request's permissions: down".into()),
            StatusCode::SERVICE_UNAVAILABLE,
        ),
    ];
    for (decision, want) in cases {
        let (s, handled) = guard::with_auth(standard(), Arc::new(guard::Fixed(decision.clone())));
        for method in [Method::GET, Method::POST, Method::DELETE] {
            let (status, body) = guard::send(
                &s,
                method.clone(),
                "/v2alpha1/job/ns.j/replicas",
                Some("Bearer t"),
                None,
            )
            .await
            .expect("uri");
            assert_eq!(status, want, "{decision:?} {method}: {body}");
            let body: Value = serde_json::from_str(&body).expect("envelope");
            assert_eq!(body["success"], false);
        }
        let (status, _) = guard::send(&s, Method::GET, "/metrics", Some("Bearer t"), None)
            .await
            .expect("uri");
        assert_eq!(status, want, "/metrics is guarded too");
        assert!(handled.lock().expect("log").is_empty());
    }
    let (s, handled) = guard::with_auth(standard(), Arc::new(guard::Fixed(Decision::Allowed)));
    for uri in [
        "/v2alpha1/job/ns%2Fx.j/replicas",
        "/v2alpha1/job/ns.j%2F..%2Fk/replicas",
        "/v2alpha1/job/NS.j/replicas",
        "/v2alpha1/job/ns.j.%2B3/replicas",
        "/v2alpha1/job/ns.j%C3%A9/replicas",
        "/v2alpha1/job/ns.j%FF/replicas",
    ] {
        let (status, body) = guard::send(&s, Method::GET, uri, Some("Bearer t"), None)
            .await
            .expect("uri");
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {body}");
    }
    let (status, _) = guard::send(
        &s,
        Method::GET,
        "/v2alpha1/job/ns.j/replicas",
        Some("Basic dTpw"),
        None,
    )
    .await
    .expect("uri");
    assert_eq!(status, StatusCode::UNAUTHORIZED, "not a bearer token");
    assert!(handled.lock().expect("log").is_empty());
}

/// `--server-auth job-pods`: a token-less call is allowed only from the pod IP of a live pod
/// of the job it names; tokens go to the token authoriser.
#[tokio::test]
async fn job_pods_mode_admits_token_less_calls_only_from_the_jobs_own_live_pods() {
    use crate::server::auth::{Decision, JobPodsAuth};
    let mut terminating = pod("j", "j-collector-2", 4, Some("10.0.0.9"), "Running", None);
    terminating["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    // A pod that claims job j by label but is owned by another object.
    let mut forged = pod("j", "j-collector-9", 2, Some("10.0.0.66"), "Running", None);
    forged["metadata"]["ownerReferences"][0]["uid"] = json!("someone-else");
    let base = state(
        vec![
            job(
                "j",
                false,
                &["j-learner-0", "j-collector-0", "", "j-collector-1"],
            ),
            job("p", true, &[]),
        ],
        vec![
            pod("j", "j-learner-0", 0, Some("10.0.0.1"), "Running", None),
            pod("j", "j-collector-0", 1, Some("10.0.0.2"), "Running", None),
            pod("j", "j-collector-5", 5, Some("10.0.0.5"), "Failed", None),
            terminating,
            forged,
        ],
        true,
    );
    let caches = base.caches.clone();
    let tokens = Arc::new(guard::Fixed(Decision::Forbidden("token says no".into())));
    let (s, handled) = guard::with_auth(base, Arc::new(JobPodsAuth::new(tokens, caches)));
    let peer = |ip: &str| Some(std::net::SocketAddr::new(ip.parse().expect("ip"), 40000));
    let cases = [
        (
            "10.0.0.1",
            "/v2alpha1/job/ns.j/replicas",
            None,
            StatusCode::OK,
        ),
        (
            "::ffff:10.0.0.2",
            "/v2alpha1/ns.j/replicas",
            None,
            StatusCode::OK,
        ),
        (
            "10.0.0.1",
            "/v2alpha1/job/ns.p/replicas",
            None,
            StatusCode::UNAUTHORIZED,
        ),
        (
            "10.0.0.5",
            "/v2alpha1/job/ns.j/replicas",
            None,
            StatusCode::UNAUTHORIZED,
        ),
        (
            "10.0.0.9",
            "/v2alpha1/job/ns.j/replicas",
            None,
            StatusCode::UNAUTHORIZED,
        ),
        (
            "10.0.0.66",
            "/v2alpha1/job/ns.j/replicas",
            None,
            StatusCode::UNAUTHORIZED,
        ),
        (
            "10.0.0.200",
            "/v2alpha1/job/ns.j/replicas",
            None,
            StatusCode::UNAUTHORIZED,
        ),
        (
            "10.0.0.1",
            "/v2alpha1/job/ns.j/replicas",
            Some("Bearer t"),
            StatusCode::FORBIDDEN,
        ),
        ("10.0.0.1", "/metrics", None, StatusCode::UNAUTHORIZED),
    ];
    for (ip, uri, token, want) in cases {
        let (status, body) = guard::send(&s, Method::GET, uri, token, peer(ip))
            .await
            .expect("uri");
        assert_eq!(status, want, "{ip} {uri} {token:?}: {body}");
    }
    let (status, _) = guard::send(&s, Method::GET, "/v2alpha1/job/ns.j/replicas", None, None)
        .await
        .expect("uri");
    assert_eq!(status, StatusCode::UNAUTHORIZED, "no peer, no token");
    // Writes from the job's own pod are allowed too (profilings, scaling).
    let (status, body) = guard::send(
        &s,
        Method::POST,
        "/v2alpha1/job/ns.j/replicas",
        None,
        peer("10.0.0.1"),
    )
    .await
    .expect("uri");
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("not preemptible"), "{body}");
    let handled = handled.lock().expect("log").clone();
    assert_eq!(handled.len(), 3);
    assert!(handled.iter().all(|(id, _)| id.job.name == "j"));
}

/// `/metrics` and `/plugins` on the metrics address: each path is authorised on its own, as a
/// non-resource URL, and nothing is served without a decision.
#[tokio::test]
async fn guarded_paths_need_their_own_permission() {
    use crate::server::auth::{Authorizer, Credentials, Decision, Guard, Target, guard_routes};
    use futures::future::BoxFuture;
    struct MetricsOnly;
    impl Authorizer for MetricsOnly {
        fn authorize<'a>(
            &'a self,
            who: &'a Credentials,
            what: &'a Target,
        ) -> BoxFuture<'a, Decision> {
            Box::pin(async move {
                match (who.token.as_deref(), what) {
                    (None, _) => Decision::Unauthenticated("token".into()),
                    (Some("prom"), Target::Path { path: "/metrics" }) => Decision::Allowed,
                    _ => Decision::Forbidden("no".into()),
                }
            })
        }
    }
    let guard = Guard {
        auth: Some(Arc::new(MetricsOnly)),
        metrics: Arc::new(Metrics::new()),
    };
    let app = guard_routes(
        Router::new().route("/metrics", get(|| async { "metrics" })),
        &guard,
        "/metrics",
    )
    .merge(guard_routes(
        Router::new().route("/plugins", get(|| async { "plugins" })),
        &guard,
        "/plugins",
    ));
    for (path, token, want) in [
        ("/metrics", Some("Bearer prom"), StatusCode::OK),
        ("/metrics", None, StatusCode::UNAUTHORIZED),
        ("/metrics", Some("Bearer other"), StatusCode::FORBIDDEN),
        ("/plugins", Some("Bearer prom"), StatusCode::FORBIDDEN),
        ("/plugins", None, StatusCode::UNAUTHORIZED),
    ] {
        let mut request = Request::get(path);
        if let Some(token) = token {
            request = request.header("authorization", token);
        }
        let response = app
            .clone()
            .oneshot(request.body(Body::empty()).expect("request"))
            .await
            .expect("answer");
        assert_eq!(response.status(), want, "{path} {token:?}");
    }
    let text = guard.metrics.encode();
    assert!(
        text.contains("diorch_http_auth_decisions_total{result=\"forbidden\"} 2"),
        "{text}"
    );
}

mod guard_fuzz {
    use super::*;
    use proptest::prelude::*;

    const FRAGMENTS: &[&str] = &[
        "ns",
        "j",
        "p",
        "k",
        "empty",
        "job",
        "v2alpha1",
        "replicas",
        "profilings",
        "3",
        "-",
        ".",
        "..",
        "%2E",
        "%2e",
        "%252E",
        "%252e",
        "%25252E",
        "%2F",
        "%2f",
        "%252F",
        "/",
        "//",
        "%2E%2E",
        "%",
        "%25",
        "%C3%A9",
        "%E2%80%AE",
        "%00",
        "%FF",
        ";",
        "%3B",
        "+",
        "%20",
        "ns.j",
        "ns.p",
        "ns.k",
        "ns%2Ej",
        "ns%2Ep",
        "NS",
        "?",
        "?detail=true",
        "#",
        "\\",
        "%5C",
        "ǹ",
    ];

    fn path() -> impl Strategy<Value = String> {
        (
            prop::sample::select(vec![
                "/v2alpha1/job/",
                "/v2alpha1/",
                "/v2alpha1//job/",
                "/v2alpha1/job//",
                "//v2alpha1/job/",
                "/v2alpha1/./job/",
                "/v2alpha1/job/../",
                "/v2alpha1/job%2F",
                "/v2alpha1%2Fjob/",
            ]),
            proptest::collection::vec(prop::sample::select(FRAGMENTS), 0..6),
            prop::sample::select(vec![
                "/replicas",
                "/profilings",
                "/replicas?detail=true",
                "/replicas/",
                "/replicas/x",
                "",
                "/replicas%2F",
                "%2Freplicas",
                "/./replicas",
                "/../replicas",
                "/replicas#x",
            ]),
        )
            .prop_map(|(prefix, middle, tail)| format!("{prefix}{}{tail}", middle.concat()))
    }

    fn method() -> impl Strategy<Value = Method> {
        prop::sample::select(vec![
            Method::GET,
            Method::HEAD,
            Method::POST,
            Method::DELETE,
            Method::PUT,
            Method::PATCH,
            Method::OPTIONS,
            Method::from_bytes(b"FOO").expect("method"),
        ])
    }

    fn authorization() -> impl Strategy<Value = Option<&'static str>> {
        prop::sample::select(vec![
            None,
            Some("Bearer good"),
            Some("bearer good"),
            Some("Bearer x"),
            Some("Bearer "),
            Some("Bearer good extra"),
            Some("Basic Z29vZA=="),
            Some("good"),
        ])
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// The only requests any handler acts on are reads of ns/j with the allowed token:
        /// whatever the encoding, dots, slashes, unicode, extra segments or method.
        #[test]
        fn no_request_without_an_allowed_token_reaches_a_handler(
            paths in proptest::collection::vec(path(), 1..4),
            method in method(),
            authorization in authorization(),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            // The kube client in the state spawns onto the runtime.
            let _entered = runtime.enter();
            let (s, handled) = guard::with_auth(standard(), allow_only_get_of_ns_j());
            let mut answers = vec![];
            for path in &paths {
                let answer = runtime.block_on(guard::send(&s, method.clone(), path, authorization, None));
                answers.push((path.clone(), answer));
            }
            let handled = handled.lock().expect("log").clone();
            for (id, m) in &handled {
                prop_assert!(
                    matches!(authorization, Some("Bearer good" | "bearer good"))
                        && id.job == ObjectKey::new("ns", "j")
                        && (*m == Method::GET || *m == Method::HEAD),
                    "a handler acted on {id:?} for {m} with {authorization:?}: {answers:?}"
                );
            }
            for (path, answer) in &answers {
                if let Some((status, _)) = answer {
                    prop_assert!(*status != StatusCode::INTERNAL_SERVER_ERROR, "{path}");
                }
            }
        }
    }
}

/// Issue 17, item 3: `kubectl annotate pod … diengine/rank=2000000000` made the next GET
/// allocate 48 GB and abort. A rank outside the job's size is ignored and counted.
#[tokio::test]
async fn a_huge_rank_annotation_is_ignored_not_allocated() {
    let s = state(
        vec![job("j", false, &[])],
        vec![
            pod("j", "j-learner-0", 0, Some("10.0.0.1"), "Running", None),
            pod(
                "j",
                "j-collector-0",
                2_000_000_000,
                Some("10.0.0.2"),
                "Running",
                None,
            ),
        ],
        true,
    );
    let (status, body, _) = call(&s, Method::GET, "/v2alpha1/job/ns.j/replicas", "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"], json!(["10.0.0.1:22270"]));
    let (_, body, _) = call(
        &s,
        Method::GET,
        "/v2alpha1/job/ns.j/replicas?detail=true",
        "",
    )
    .await;
    assert_eq!(body["data"].as_array().map(Vec::len), Some(1));
    assert_eq!(s.metrics.server.ignored_ranks.get(), 2);
}

/// The bound is the job's size (1 learner + 3 collectors here): rank 4 is past it.
#[tokio::test]
async fn a_rank_just_past_the_job_size_is_ignored() {
    let s = state(
        vec![job("j", false, &[])],
        vec![
            pod("j", "j-learner-0", 3, Some("10.0.0.1"), "Running", None),
            pod("j", "j-collector-0", 4, Some("10.0.0.2"), "Running", None),
        ],
        true,
    );
    let (_, body, _) = call(&s, Method::GET, "/v2alpha1/job/ns.j/replicas", "").await;
    assert_eq!(body["data"], json!(["", "", "", "10.0.0.1:22270"]));
    assert_eq!(s.metrics.server.ignored_ranks.get(), 1);
}

/// A DI-orchestrator pod adopted with its `max + 1` rank (4 in a 4-replica job) holds the free
/// rank the controller gave it in `status.ranks`: GET replicas answers it there, as `DI_NODES`
/// has it, instead of leaving that rank empty.
#[tokio::test]
async fn the_rank_table_places_a_pod_whose_annotation_is_stale() {
    let s = state(
        vec![job("j", false, &["j-learner-0", "", "j-collector-0", ""])],
        vec![
            pod("j", "j-learner-0", 0, Some("10.0.0.1"), "Running", None),
            pod("j", "j-collector-0", 4, Some("10.0.0.2"), "Running", None),
            pod("j", "j-collector-1", 3, Some("10.0.0.3"), "Running", None),
        ],
        true,
    );
    let (_, body, _) = call(&s, Method::GET, "/v2alpha1/job/ns.j/replicas", "").await;
    assert_eq!(
        body["data"],
        json!(["10.0.0.1:22270", "", "10.0.0.2:22270", "10.0.0.3:22270"]),
        "collector-0 by the table, collector-1 (not in it yet) by its annotation"
    );
    assert_eq!(
        s.metrics.server.ignored_ranks.get(),
        0,
        "the stale annotation is not read"
    );
}

/// `status.ranks` sizes the answer too: never beyond the job's size.
#[tokio::test]
async fn a_huge_status_ranks_is_trusted_only_up_to_the_job_size() {
    let ranks = vec![""; 200_000];
    let s = state(
        vec![job("j", false, &ranks)],
        vec![pod(
            "j",
            "j-learner-0",
            0,
            Some("10.0.0.1"),
            "Running",
            None,
        )],
        true,
    );
    let (_, body, _) = call(&s, Method::GET, "/v2alpha1/job/ns.j/replicas", "").await;
    assert_eq!(body["data"], json!(["10.0.0.1:22270", "", "", ""]));
}

#[test]
fn the_rank_bound_follows_max_replicas_and_the_documented_maximum() {
    let cached = |spec: Value| -> CachedJob {
        serde_json::from_value(json!({"metadata": {"name": "x"}, "spec": spec})).expect("job")
    };
    let bound = |spec: Value| super::rank_bound(&cached(spec));
    assert_eq!(bound(json!({"tasks": [{"replicas": 2}, {}]})), 3);
    assert_eq!(
        bound(json!({"tasks": [{"replicas": 2, "maxReplicas": 5}]})),
        5
    );
    let most = usize::try_from(limits::MAX_JOB_REPLICAS).expect("fits");
    assert_eq!(bound(json!({"tasks": [{"replicas": 2_000_000_000}]})), most);
    assert_eq!(
        bound(json!({"tasks": [{"replicas": 1e30}]})),
        most,
        "undecodable"
    );
    assert_eq!(bound(json!({"tasks": [{"replicas": -5}]})), 0);
}

/// Scale requests past `MAX_TASK_REPLICAS`, and jobs past the documented maximums, are refused
/// with the field named, before anything is written.
#[tokio::test]
async fn scale_counts_and_oversized_jobs_are_refused_with_the_field_named() {
    let mut big = job("big", true, &[]);
    big["spec"]["tasks"][1]["minReplicas"] = json!(1);
    big["spec"]["tasks"][1]["maxReplicas"] = json!(2_000_000_000);
    let s = state(vec![big, job("p", true, &[])], vec![], true);
    let (status, body, _) = call(
        &s,
        Method::POST,
        "/v2alpha1/job/ns.p/replicas",
        "{\"replicas\": 1001}",
    )
    .await;
    assert_eq!(
        (status, body["message"].as_str()),
        (
            StatusCode::BAD_REQUEST,
            Some("replicas must be between 1 and 1000, got 1001")
        )
    );
    for method in [Method::POST, Method::DELETE] {
        let (status, body, _) = call(
            &s,
            method,
            "/v2alpha1/job/ns.big/replicas",
            "{\"replicas\": 1}",
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(
            body["message"],
            "spec.tasks[1].maxReplicas: 2000000000 is more than the maximum 1000; the replica API does not scale this job"
        );
    }
    let names: Vec<String> = (0..4001).map(|i| format!("x{i}")).collect();
    let (status, body, _) = call(
        &s,
        Method::DELETE,
        "/v2alpha1/job/ns.p/replicas",
        &json!({"pods": names}).to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["message"], "pods may name at most 4000 pods, got 4001");
}

/// `status.profilings` is capped in total, not only per request: the merge with what the job
/// holds is checked before anything is written.
#[tokio::test]
async fn profilings_are_capped_in_total_in_status() {
    let mut full = job("full", false, &[]);
    full["status"]["profilings"] = json!({"big": "a".repeat(MAX_PROFILINGS_BYTES - 100)});
    let mut many = job("many", false, &[]);
    let keys: serde_json::Map<String, Value> = (0..MAX_PROFILINGS_KEYS)
        .map(|i| (format!("k{i}"), json!(1)))
        .collect();
    many["status"]["profilings"] = Value::Object(keys);
    let s = state(vec![full, many], vec![], true);
    let (status, body, _) = call(
        &s,
        Method::POST,
        "/v2alpha1/job/ns.full/profilings",
        &json!({"data": {"more": "b".repeat(1000)}}).to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("status.profilings would be 263")
            && message.contains("more than the 262144 allowed"),
        "{message}"
    );
    let (status, body, _) = call(
        &s,
        Method::POST,
        "/v2alpha1/job/ns.many/profilings",
        "{\"data\": {\"one\": {\"more\": 1}}}",
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(
        body["message"],
        "status.profilings would hold 514 keys after this report, more than the 512 allowed: report fewer keys (a null value removes one)"
    );
    // Replacing or removing what is there stays possible.
    let current = json!({"big": "a".repeat(MAX_PROFILINGS_BYTES - 100)});
    assert!(check_profilings(Some(&current), &json!({"big": null, "x": 1})).is_ok());
    assert!(check_profilings(Some(&current), &json!({"big": "short"})).is_ok());
    assert!(check_profilings(None, &json!({"a": {"b": {"c": 1}}})).is_ok());
}

/// A client's method text never becomes a label value.
#[tokio::test]
async fn request_metrics_label_unknown_methods_as_other() {
    let s = standard();
    for i in 0..20 {
        let method = Method::from_bytes(format!("M{i}").as_bytes()).expect("method");
        call(&s, method, "/v2alpha1/job/ns.j/replicas", "").await;
    }
    let text = s.metrics.encode();
    assert!(!text.contains("method=\"M1"), "{text}");
    assert!(text.contains("method=\"other\""), "{text}");
}
