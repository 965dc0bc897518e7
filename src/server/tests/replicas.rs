//! The replica API's routes: answers kept and recomputed, GET and detail, ids, scaling and
//! profiling bodies, readiness, the OpenAPI document, and the scaling rules of preemptible
//! jobs.

use super::*;

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
            pod("j", "j-learner-0", 0).ip("10.0.0.1").json(),
            pod("j", "j-collector-0", 99).ip("10.0.0.2").json(),
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
    let moved: CachedPod =
        serde_json::from_value(pod("j", "j-learner-0", 0).ip("10.0.0.7").json()).expect("pod");
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
        "/v2alpha1/job/{id}/checkpoint",
        "/v2alpha1/{id}/checkpoint",
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
    ] {
        assert!(paths.contains_key(route), "{route} undocumented");
    }
    assert_eq!(paths.len(), 10);
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
