//! The authoriser in front of the handlers: test authorisers (`guard`), decoded ids, every
//! refusal, the `job-pods` mode, guarded paths, and a fuzz of requests against a fixed policy.

use super::*;

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
    let terminating = pod("j", "j-collector-2", 4)
        .ip("10.0.0.9")
        .terminating()
        .json();
    // A pod that claims job j by label but is owned by another object.
    let forged = pod("j", "j-collector-9", 2)
        .ip("10.0.0.66")
        .owner_uid("someone-else")
        .json();
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
            pod("j", "j-learner-0", 0).ip("10.0.0.1").json(),
            pod("j", "j-collector-0", 1).ip("10.0.0.2").json(),
            pod("j", "j-collector-5", 5)
                .ip("10.0.0.5")
                .phase("Failed")
                .json(),
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
