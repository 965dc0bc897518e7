//! `KubernetesAuth` against a fake API server that answers TokenReview and
//! SubjectAccessReview: the reviews it sends, what it caches, and its bounds under floods,
//! oversized tokens and a hanging API server.
//!
//! The fake is the client's transport, in process (no socket), so the review timeout is
//! tested on virtual time. The cache's TTL is pinned on virtual time in `auth.rs`'s own tests.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use axum::Json;
use axum::routing::post;
use serde_json::{Value, json};

use super::*;

/// The fake API server's view: reviews received, concurrency seen, the last SAR's spec.
#[derive(Default)]
struct Fake {
    token_reviews: AtomicUsize,
    access_reviews: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    hang: AtomicBool,
    last_sar: Mutex<Value>,
}

async fn token_review(State(fake): State<Arc<Fake>>, Json(review): Json<Value>) -> Json<Value> {
    fake.token_reviews.fetch_add(1, Ordering::SeqCst);
    let now = fake.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    fake.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let token = review["spec"]["token"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if fake.hang.load(Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
    if token.starts_with("slow-") {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    fake.in_flight.fetch_sub(1, Ordering::SeqCst);
    let status = if token == "alice-token" {
        json!({"authenticated": true, "user": {"username": "alice", "groups": ["ml"]}})
    } else {
        json!({"authenticated": false, "error": "invalid bearer token"})
    };
    Json(
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "metadata": {}, "spec": review["spec"], "status": status}),
    )
}

async fn access_review(State(fake): State<Arc<Fake>>, Json(review): Json<Value>) -> Json<Value> {
    fake.access_reviews.fetch_add(1, Ordering::SeqCst);
    let spec = review["spec"].clone();
    *fake.last_sar.lock().unwrap_or_else(|e| e.into_inner()) = spec.clone();
    let allowed = spec["user"] == "alice"
        && (spec["resourceAttributes"]["verb"] == "get"
            || spec["nonResourceAttributes"]["path"] == "/metrics");
    Json(
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "metadata": {}, "spec": spec, "status": {"allowed": allowed, "reason": "fake"}}),
    )
}

fn fake_api() -> (Arc<Fake>, Client) {
    let fake = Arc::new(Fake::default());
    let app = axum::Router::new()
        .route(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            post(token_review),
        )
        .route(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            post(access_review),
        )
        .with_state(fake.clone());
    // In process, no socket: the client's transport is the router itself.
    (fake, Client::new(app, "default"))
}

fn job(verb: &'static str) -> Target {
    Target::Job {
        job: ObjectKey::new("ns", "j"),
        verb,
    }
}

fn token(t: &str) -> Credentials {
    Credentials {
        token: Some(t.to_string()),
        peer: None,
    }
}

#[tokio::test]
async fn reviews_decide_and_both_allow_and_deny_are_cached() {
    let (fake, client) = fake_api();
    let auth = KubernetesAuth::new(client);
    assert_eq!(
        auth.authorize(&token("alice-token"), &job("get")).await,
        Decision::Allowed
    );
    assert_eq!(
        auth.authorize(&token("alice-token"), &job("update")).await,
        Decision::Forbidden(
            "user alice cannot update dijobs/replicas of j in namespace ns: fake".into()
        )
    );
    let sar = fake.last_sar.lock().expect("sar").clone();
    assert_eq!(
        sar["resourceAttributes"],
        json!({"namespace": "ns", "verb": "update", "group": "diengine.opendilab.org",
            "resource": "dijobs", "subresource": "replicas", "name": "j"})
    );
    for _ in 0..10 {
        auth.authorize(&token("alice-token"), &job("get")).await;
        auth.authorize(&token("alice-token"), &job("update")).await;
    }
    assert_eq!(fake.token_reviews.load(Ordering::SeqCst), 2);
    assert_eq!(fake.access_reviews.load(Ordering::SeqCst), 2);
    assert_eq!(
        auth.authorize(&Credentials::default(), &job("get")).await,
        Decision::Unauthenticated(TOKEN_REQUIRED.into())
    );
    // The cache holds hashes, never the token.
    let keys = format!("{:?}", auth.cache.lock().map.keys().collect::<Vec<_>>());
    assert!(!keys.contains("alice-token"), "{keys}");
}

/// `/metrics` and `/plugins` are checked as non-resource URLs, as the API server's own
/// authorizer would see a `GET /metrics`.
#[tokio::test]
async fn metrics_are_checked_as_a_non_resource_url() {
    let (fake, client) = fake_api();
    let auth = KubernetesAuth::new(client);
    let metrics = Target::Path { path: "/metrics" };
    assert_eq!(
        auth.authorize(&token("alice-token"), &metrics).await,
        Decision::Allowed
    );
    let sar = fake.last_sar.lock().expect("sar").clone();
    assert_eq!(
        sar["nonResourceAttributes"],
        json!({"path": "/metrics", "verb": "get"})
    );
    assert!(sar.get("resourceAttributes").is_none(), "{sar}");
    let plugins = Target::Path { path: "/plugins" };
    assert_eq!(
        auth.authorize(&token("alice-token"), &plugins).await,
        Decision::Forbidden("user alice cannot get /plugins: fake".into())
    );
}

/// A flood of bad tokens: each costs at most one TokenReview (denials are cached per token,
/// whatever it is used for), and the cache stays within its bytes however long the tokens.
#[tokio::test]
async fn a_flood_of_bad_tokens_costs_one_review_each_and_a_bounded_cache() {
    let (fake, client) = fake_api();
    let bound = 64 * 1024;
    let auth = KubernetesAuth::with_limits(client, bound, REVIEW_TIMEOUT);
    for verb in ["get", "update"] {
        for _ in 0..50 {
            let d = auth.authorize(&token("mallory"), &job(verb)).await;
            assert_eq!(
                d,
                Decision::Unauthenticated(
                    "the bearer token was not accepted: invalid bearer token".into()
                )
            );
        }
    }
    assert_eq!(fake.token_reviews.load(Ordering::SeqCst), 1);
    assert_eq!(fake.access_reviews.load(Ordering::SeqCst), 0);
    // 2000 distinct tokens of the largest accepted length: 32 MB of token text.
    let mut most = 0;
    for i in 0..2000 {
        let t = format!("{i:05}{}", "x".repeat(MAX_TOKEN_BYTES - 5));
        auth.authorize(&token(&t), &job("get")).await;
        most = most.max(auth.cached_bytes());
    }
    assert!(most <= bound, "{most} bytes cached");
    assert_eq!(fake.token_reviews.load(Ordering::SeqCst), 2001);
}

#[tokio::test]
async fn an_oversized_token_is_refused_without_a_review() {
    let (fake, client) = fake_api();
    let auth = KubernetesAuth::new(client);
    let huge = "x".repeat(MAX_TOKEN_BYTES + 1);
    assert_eq!(
        auth.authorize(&token(&huge), &job("get")).await,
        Decision::Unauthenticated(format!(
            "the bearer token is longer than {MAX_TOKEN_BYTES} bytes"
        ))
    );
    assert_eq!(fake.token_reviews.load(Ordering::SeqCst), 0);
}

/// At most `MAX_CONCURRENT_REVIEWS` reviews reach the API server at once, however many
/// requests with new tokens arrive together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reviews_are_capped() {
    let (fake, client) = fake_api();
    let auth = Arc::new(KubernetesAuth::new(client));
    let calls: Vec<_> = (0..40)
        .map(|i| {
            let auth = auth.clone();
            tokio::spawn(async move {
                auth.authorize(&token(&format!("slow-{i}")), &job("get"))
                    .await
            })
        })
        .collect();
    for call in calls {
        let decision = call.await.expect("task");
        assert!(
            matches!(
                decision,
                Decision::Unauthenticated(_) | Decision::Unavailable(_)
            ),
            "{decision:?}"
        );
    }
    let most = fake.max_in_flight.load(Ordering::SeqCst);
    assert!(
        (1..=MAX_CONCURRENT_REVIEWS).contains(&most),
        "{most} reviews at once"
    );
}

/// An API server that never answers costs the caller the review timeout and a 503-class
/// decision, nothing cached. Virtual time: the timeout passes without waiting for it.
#[tokio::test(start_paused = true)]
async fn a_hanging_api_server_is_cut_off_and_not_cached() {
    let (fake, client) = fake_api();
    fake.hang.store(true, Ordering::SeqCst);
    let timeout = Duration::from_millis(300);
    let auth = KubernetesAuth::with_limits(client, CACHE_BYTES, timeout);
    for _ in 0..2 {
        let started = Instant::now();
        let decision = auth.authorize(&token("alice-token"), &job("get")).await;
        assert!(
            matches!(&decision, Decision::Unavailable(m) if m.starts_with("cannot check the request's permissions")),
            "{decision:?}"
        );
        assert!(started.elapsed() < timeout + Duration::from_secs(3));
    }
    assert_eq!(fake.token_reviews.load(Ordering::SeqCst), 2);
}
