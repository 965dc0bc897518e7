//! Hostile sizes: rank annotations and `status.ranks` past the job's size, scale counts
//! and jobs past the documented maximums, `status.profilings` in total, unknown methods in
//! metrics labels.

use super::*;

/// Issue 17, item 3: `kubectl annotate pod … diengine/rank=2000000000` made the next GET
/// allocate 48 GB and abort. A rank outside the job's size is ignored and counted.
#[tokio::test]
async fn a_huge_rank_annotation_is_ignored_not_allocated() {
    let s = state(
        vec![job("j", false, &[])],
        vec![
            pod("j", "j-learner-0", 0).ip("10.0.0.1").json(),
            pod("j", "j-collector-0", 2_000_000_000)
                .ip("10.0.0.2")
                .json(),
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
            pod("j", "j-learner-0", 3).ip("10.0.0.1").json(),
            pod("j", "j-collector-0", 4).ip("10.0.0.2").json(),
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
            pod("j", "j-learner-0", 0).ip("10.0.0.1").json(),
            pod("j", "j-collector-0", 4).ip("10.0.0.2").json(),
            pod("j", "j-collector-1", 3).ip("10.0.0.3").json(),
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
        vec![pod("j", "j-learner-0", 0).ip("10.0.0.1").json()],
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

/// A checkpoint report is untrusted: a time in the future counts as now, one before the job
/// existed as its creation, and anything else than `{}` or an RFC 3339 `time` is refused
/// without reaching the API server.
#[tokio::test]
async fn a_forged_checkpoint_time_is_bounded_or_refused() {
    use crate::server::checkpoint_time;
    let now: jiff::Timestamp = "2026-11-27T06:00:00Z".parse().expect("now");
    let created: jiff::Timestamp = "2026-11-27T05:00:00Z".parse().expect("created");
    let at = |body: Value| checkpoint_time(&body, Some(created), now);
    assert_eq!(at(json!({})), Ok(now));
    assert_eq!(at(json!({"time": null})), Ok(now));
    let earlier: jiff::Timestamp = "2026-11-27T05:30:00Z".parse().expect("t");
    assert_eq!(at(json!({"time": "2026-11-27T05:30:00Z"})), Ok(earlier));
    // The future: now. Before the job, or the far past: its creation.
    assert_eq!(at(json!({"time": "2999-01-01T00:00:00Z"})), Ok(now));
    assert_eq!(at(json!({"time": "1970-01-01T00:00:00Z"})), Ok(created));
    assert_eq!(at(json!({"time": "-000099-01-01T00:00:00Z"})), Ok(created));
    // A job without a creation time (never from the API server): bounded above only.
    assert_eq!(
        checkpoint_time(&json!({"time": "2999-01-01T00:00:00Z"}), None, now),
        Ok(now)
    );
    for bad in [
        json!({"time": 12}),
        json!({"time": -1}),
        json!({"time": "yesterday"}),
        // Beyond the timestamps anything can hold.
        json!({"time": "-009999-01-01T00:00:00Z"}),
        json!({"time": "a".repeat(60_000)}),
        json!([1]),
        json!("now"),
    ] {
        let err = at(bad.clone()).expect_err("refused");
        assert_eq!(err.status, StatusCode::BAD_REQUEST, "{bad}");
        assert!(err.message.len() < 300, "the message quotes a bounded part");
    }
    // Over HTTP: a bad body is refused before any write.
    let s = standard();
    let (status, body, _) = call(
        &s,
        Method::POST,
        "/v2alpha1/job/ns.j/checkpoint",
        "{\"time\": \"yesterday\"}",
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _, _) = call(&s, Method::POST, "/v2alpha1/job/ns.nope/checkpoint", "{}").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
