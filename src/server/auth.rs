//! Who may call the replica API and the metrics endpoints (`--server-auth`), and the one guard
//! every job route passes through.
//!
//! The guard ([`guard_job`]) extracts the job id exactly as a handler would (axum's decoded
//! `Path`, after routing), parses it into a [`JobId`], authorises *that* id for the request's
//! verb, and only then inserts an [`AuthorizedJob`]: the one type the handlers take their id
//! from, which nothing else can build. An id the guard cannot parse is a 400 before any
//! handler; anything the authoriser cannot check is refused (fail closed).
//!
//! Authorisers ([`Authorizer`]): [`KubernetesAuth`] checks bearer tokens with TokenReview and
//! each call with a SubjectAccessReview (`dijobs/replicas` in the job's namespace, `get` to
//! read and `update` to write; a non-resource URL for `/metrics` and `/plugins`), as
//! kube-rbac-proxy does, with a byte-bounded cache of decisions (denials included) keyed by a
//! hash of the token, bounded review concurrency and a timeout on every review;
//! [`JobPodsAuth`] additionally lets a token-less call through when it comes from the pod IP of
//! a live pod of the job it names (DI-engine workers send no token).
//!
//! Owns these checks and their cache; it never reads a job's data beyond its pods' IPs and
//! never logs a token.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{ConnectInfo, FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::{Api, Client};
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;
// The TTL runs on tokio's clock (the machine's in production) so tests can pause it.
use tokio::time::Instant;

use super::{ApiError, JobId, fail, parse_job_id};
use crate::controller::executor::Caches;
use crate::metrics::Metrics;
use diorch_core::key::ObjectKey;

/// How long an allow or deny decision is reused.
pub const DECISION_TTL: Duration = Duration::from_secs(10);
/// Bytes the decision cache may hold (keys, messages and bookkeeping, estimated).
pub const CACHE_BYTES: usize = 4 << 20;
/// Longest bearer token reviewed; a longer one is refused without a review (service account
/// tokens are about 1 KiB).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// Longest wait for one TokenReview or SubjectAccessReview (and for a review slot).
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);
/// TokenReviews and SubjectAccessReviews in flight at once: a flood of new tokens costs the API
/// server at most this many concurrent reviews.
pub const MAX_CONCURRENT_REVIEWS: usize = 8;

/// Which check the replica API (and, unless `none`, `/metrics` and `/plugins`) applies
/// (`--server-auth`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ServerAuth {
    /// No check, as di-server (DI-orchestrator) does.
    #[default]
    None,
    /// Bearer tokens checked with TokenReview, calls authorized with SubjectAccessReview.
    Kubernetes,
    /// As `kubernetes`, and a call without a token is allowed when it comes from the pod IP of a
    /// live pod of the job it names (DI-engine workers send no token).
    JobPods,
}

/// What a request asks to do, as the authoriser checks it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// `verb` (`get` or `update`) on `dijobs/replicas` of `job`.
    Job { job: ObjectKey, verb: &'static str },
    /// `get` on a non-resource URL (`/metrics`, `/plugins`).
    Path { path: &'static str },
}

/// Who asks: the bearer token, if any, and the TCP peer (absent when the request did not come
/// through a listener, as in tests).
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    pub token: Option<String>,
    pub peer: Option<SocketAddr>,
}

/// The answer of an authoriser.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    /// 401: no usable credentials.
    Unauthenticated(String),
    /// 403: known caller, not allowed.
    Forbidden(String),
    /// 503: the check could not be made (timeout, API server error); refused.
    Unavailable(String),
}

impl Decision {
    /// The refusal to answer, or `None` when allowed.
    fn refusal(self) -> Option<ApiError> {
        match self {
            Decision::Allowed => None,
            Decision::Unauthenticated(m) => Some(fail(StatusCode::UNAUTHORIZED, m)),
            Decision::Forbidden(m) => Some(fail(StatusCode::FORBIDDEN, m)),
            Decision::Unavailable(m) => Some(fail(StatusCode::SERVICE_UNAVAILABLE, m)),
        }
    }

    fn label(&self) -> &'static str {
        match self {
            Decision::Allowed => "allowed",
            Decision::Unauthenticated(_) => "unauthenticated",
            Decision::Forbidden(_) => "forbidden",
            Decision::Unavailable(_) => "unavailable",
        }
    }
}

/// Decides whether `who` may do `what`. Implementations must fail closed: anything they cannot
/// check is not [`Decision::Allowed`].
pub trait Authorizer: Send + Sync {
    fn authorize<'a>(&'a self, who: &'a Credentials, what: &'a Target) -> BoxFuture<'a, Decision>;
}

const TOKEN_REQUIRED: &str = "a bearer token is required (Authorization: Bearer <token>)";

/// TokenReview + SubjectAccessReview, with a bounded decision cache.
pub struct KubernetesAuth {
    client: Client,
    cache: BoundedCache<CacheKey, Decision>,
    reviews: Semaphore,
    timeout: Duration,
}

/// Cache keys hold a SHA-256 of the token, never the token.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum CacheKey {
    /// A token TokenReview refused: refused again for any target without a review.
    Token([u8; 32]),
    /// The decision for one token and target.
    Access([u8; 32], Target),
}

impl CacheKey {
    fn bytes(&self) -> usize {
        32 + match self {
            CacheKey::Token(_) => 0,
            CacheKey::Access(_, Target::Job { job, .. }) => job.namespace.len() + job.name.len(),
            CacheKey::Access(_, Target::Path { path }) => path.len(),
        }
    }
}

impl KubernetesAuth {
    pub fn new(client: Client) -> KubernetesAuth {
        KubernetesAuth::with_limits(client, CACHE_BYTES, REVIEW_TIMEOUT)
    }

    /// With a cache of `cache_bytes` and reviews cut off after `timeout`.
    pub fn with_limits(client: Client, cache_bytes: usize, timeout: Duration) -> KubernetesAuth {
        KubernetesAuth {
            client,
            cache: BoundedCache::new(cache_bytes, DECISION_TTL),
            reviews: Semaphore::new(MAX_CONCURRENT_REVIEWS),
            timeout,
        }
    }

    /// Bytes the decision cache holds now.
    pub fn cached_bytes(&self) -> usize {
        self.cache.bytes()
    }

    async fn decide(&self, token: &str, what: &Target) -> Decision {
        if token.len() > MAX_TOKEN_BYTES {
            return Decision::Unauthenticated(format!(
                "the bearer token is longer than {MAX_TOKEN_BYTES} bytes"
            ));
        }
        let hash: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let access = CacheKey::Access(hash, what.clone());
        if let Some(decision) = self.cache.get(&access) {
            return decision;
        }
        if let Some(decision) = self.cache.get(&CacheKey::Token(hash)) {
            return decision;
        }
        // One slot and both reviews within the timeout; past it the caller gets a 503 and
        // nothing is cached (the next call checks again).
        let reviewed = tokio::time::timeout(self.timeout, async {
            let Ok(_slot) = self.reviews.acquire().await else {
                return Err("the review slots are closed".to_string());
            };
            self.review(token, what).await.map_err(|e| e.to_string())
        })
        .await;
        let outcome = match reviewed {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(error)) => {
                tracing::debug!(%error, "TokenReview or SubjectAccessReview failed");
                return Decision::Unavailable(format!(
                    "cannot check the request's permissions: {error}"
                ));
            }
            Err(_) => {
                tracing::debug!(timeout = ?self.timeout, "TokenReview or SubjectAccessReview timed out");
                return Decision::Unavailable(format!(
                    "cannot check the request's permissions: the Kubernetes API server did not answer within {:?}",
                    self.timeout
                ));
            }
        };
        let (key, decision) = match outcome {
            Reviewed::BadToken(message) => {
                (CacheKey::Token(hash), Decision::Unauthenticated(message))
            }
            Reviewed::Decided(decision) => (access, decision),
        };
        let size = key.bytes() + message_bytes(&decision);
        self.cache.insert(key, decision.clone(), size);
        decision
    }

    async fn review(&self, token: &str, what: &Target) -> Result<Reviewed, kube::Error> {
        let tokens: Api<TokenReview> = Api::all(self.client.clone());
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let status = tokens
            .create(&crate::writes::post_params(), &review)
            .await?
            .status
            .unwrap_or_default();
        let user: UserInfo = match (status.authenticated, status.user) {
            (Some(true), Some(user)) => user,
            _ => {
                let reason = status
                    .error
                    .map(|e| format!(": {}", truncate(&e, 200)))
                    .unwrap_or_default();
                return Ok(Reviewed::BadToken(format!(
                    "the bearer token was not accepted{reason}"
                )));
            }
        };
        let username = user.username.clone().unwrap_or_default();
        let (resource_attributes, non_resource_attributes) = match what {
            Target::Job { job, verb } => (
                Some(ResourceAttributes {
                    namespace: Some(job.namespace.clone()),
                    verb: Some(verb.to_string()),
                    group: Some(diorch_core::api::GROUP.to_string()),
                    resource: Some("dijobs".to_string()),
                    subresource: Some("replicas".to_string()),
                    name: Some(job.name.clone()),
                    ..ResourceAttributes::default()
                }),
                None,
            ),
            Target::Path { path } => (
                None,
                Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some("get".to_string()),
                }),
            ),
        };
        let sar = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                resource_attributes,
                non_resource_attributes,
            },
            ..SubjectAccessReview::default()
        };
        let reviews: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let status = reviews
            .create(&crate::writes::post_params(), &sar)
            .await?
            .status
            .unwrap_or_default();
        if status.allowed {
            return Ok(Reviewed::Decided(Decision::Allowed));
        }
        let reason = status
            .reason
            .map(|r| format!(": {}", truncate(&r, 200)))
            .unwrap_or_default();
        let what = match what {
            Target::Job { job, verb } => format!(
                "{verb} dijobs/replicas of {} in namespace {}",
                job.name, job.namespace
            ),
            Target::Path { path } => format!("get {path}"),
        };
        Ok(Reviewed::Decided(Decision::Forbidden(format!(
            "user {} cannot {what}{reason}",
            truncate(&username, 200)
        ))))
    }
}

enum Reviewed {
    BadToken(String),
    Decided(Decision),
}

fn message_bytes(decision: &Decision) -> usize {
    match decision {
        Decision::Allowed => 0,
        Decision::Unauthenticated(m) | Decision::Forbidden(m) | Decision::Unavailable(m) => m.len(),
    }
}

/// At most `max` bytes of `text`, cut at a character boundary.
fn truncate(text: &str, max: usize) -> &str {
    &text[..text.floor_char_boundary(max)]
}

impl Authorizer for KubernetesAuth {
    fn authorize<'a>(&'a self, who: &'a Credentials, what: &'a Target) -> BoxFuture<'a, Decision> {
        Box::pin(async move {
            match who.token.as_deref() {
                Some(token) => self.decide(token, what).await,
                None => Decision::Unauthenticated(TOKEN_REQUIRED.to_string()),
            }
        })
    }
}

/// `--server-auth job-pods`: tokens as `tokens` decides; a call without a token only for a job
/// route, and only from the pod IP of a live pod of that job (from the pod cache). Assumes the
/// CNI prevents pod-IP spoofing and that whoever may create pods in a job's namespace may act
/// for its workers.
pub struct JobPodsAuth {
    tokens: Arc<dyn Authorizer>,
    caches: Caches,
}

impl JobPodsAuth {
    pub fn new(tokens: Arc<dyn Authorizer>, caches: Caches) -> JobPodsAuth {
        JobPodsAuth { tokens, caches }
    }

    fn is_pod_of(&self, peer: IpAddr, key: &ObjectKey) -> bool {
        let Some(job) = self.caches.job(key) else {
            return false;
        };
        let peer = peer.to_canonical();
        self.caches.pods_of(key).iter().any(|pod| {
            super::is_live_pod_of(&job, pod)
                && pod
                    .status
                    .as_ref()
                    .and_then(|s| s.pod_ip.as_deref())
                    .and_then(|ip| ip.parse::<IpAddr>().ok())
                    .is_some_and(|ip| ip.to_canonical() == peer)
        })
    }
}

impl Authorizer for JobPodsAuth {
    fn authorize<'a>(&'a self, who: &'a Credentials, what: &'a Target) -> BoxFuture<'a, Decision> {
        Box::pin(async move {
            if who.token.is_some() {
                return self.tokens.authorize(who, what).await;
            }
            match (what, who.peer) {
                (Target::Job { job, .. }, Some(peer)) if self.is_pod_of(peer.ip(), job) => {
                    Decision::Allowed
                }
                (Target::Job { .. }, _) => Decision::Unauthenticated(format!(
                    "{TOKEN_REQUIRED}, or a call from a pod of this job"
                )),
                (Target::Path { .. }, _) => Decision::Unauthenticated(TOKEN_REQUIRED.to_string()),
            }
        })
    }
}

/// The token authoriser `mode` needs (`None` for `none`): what guards `/metrics` and
/// `/plugins`, and what checks tokens on the replica API.
pub fn token_authorizer(mode: ServerAuth, client: Client) -> Option<Arc<dyn Authorizer>> {
    (mode != ServerAuth::None).then(|| Arc::new(KubernetesAuth::new(client)) as Arc<dyn Authorizer>)
}

/// The replica API's authoriser for `mode`: `tokens` (from [`token_authorizer`]), plus the pod
/// cache for `job-pods`.
pub fn replica_api_authorizer(
    mode: ServerAuth,
    tokens: Option<Arc<dyn Authorizer>>,
    caches: Caches,
) -> Option<Arc<dyn Authorizer>> {
    match mode {
        ServerAuth::None => None,
        ServerAuth::Kubernetes => tokens,
        ServerAuth::JobPods => {
            tokens.map(|t| Arc::new(JobPodsAuth::new(t, caches)) as Arc<dyn Authorizer>)
        }
    }
}

/// `router`'s routes behind [`guard_path`] for `path`.
pub fn guard_routes(router: axum::Router, guard: &Guard, path: &'static str) -> axum::Router {
    router.route_layer(axum::middleware::from_fn_with_state(
        (guard.clone(), path),
        guard_path,
    ))
}

/// A job id the guard parsed from the decoded path and authorised for this request's method.
/// Only [`guard_job`] makes one (the field is private to this module), so a handler that takes
/// it cannot act on an id nobody checked; without the guard the extraction fails closed.
#[derive(Clone, Debug)]
pub struct AuthorizedJob(JobId);

impl AuthorizedJob {
    pub fn id(&self) -> &JobId {
        &self.0
    }
}

impl<S: Send + Sync> FromRequestParts<S> for AuthorizedJob {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        parts
            .extensions
            .get::<AuthorizedJob>()
            .cloned()
            .ok_or_else(|| {
                fail(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the request did not pass the authorisation guard",
                )
            })
    }
}

/// What the guards share.
#[derive(Clone)]
pub struct Guard {
    pub auth: Option<Arc<dyn Authorizer>>,
    pub metrics: Arc<Metrics>,
}

/// The bearer token of a request (`Authorization: Bearer …`, scheme case-insensitive) and its
/// TCP peer. A malformed Authorization header is a refusal, not "no token".
fn credentials(parts: &Parts) -> Result<Credentials, ApiError> {
    let peer = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    let Some(value) = parts.headers.get(header::AUTHORIZATION) else {
        return Ok(Credentials { token: None, peer });
    };
    let token = value
        .to_str()
        .ok()
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            fail(
                StatusCode::UNAUTHORIZED,
                "the Authorization header must be `Bearer <token>`",
            )
        })?;
    Ok(Credentials {
        token: Some(token.to_string()),
        peer,
    })
}

async fn check(guard: &Guard, parts: &Parts, target: &Target) -> Result<(), ApiError> {
    let Some(auth) = guard.auth.as_ref() else {
        return Ok(());
    };
    let decision = match credentials(parts) {
        Ok(who) => auth.authorize(&who, target).await,
        Err(refused) => Decision::Unauthenticated(refused.message),
    };
    guard.metrics.server.observe_auth(decision.label());
    match decision.refusal() {
        None => Ok(()),
        Some(refused) => Err(refused),
    }
}

/// The verb a method needs: reads `get`, writes `update`; any other method is refused.
fn verb(method: &Method) -> Option<&'static str> {
    match *method {
        Method::GET | Method::HEAD => Some("get"),
        Method::POST | Method::DELETE | Method::PUT | Method::PATCH => Some("update"),
        _ => None,
    }
}

/// The guard of every job route (a `route_layer`, so it runs after routing with the path
/// parameters the handler would see): decoded id → [`JobId`] (400) → authorised (401, 403,
/// 503) → [`AuthorizedJob`].
pub async fn guard_job(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let id = match Path::<String>::from_request_parts(&mut parts, &()).await {
        Ok(Path(id)) => id,
        Err(rejection) => {
            return fail(StatusCode::BAD_REQUEST, rejection.body_text()).into_response();
        }
    };
    let id = match parse_job_id(&id) {
        Ok(id) => id,
        Err(message) => return fail(StatusCode::BAD_REQUEST, message).into_response(),
    };
    let Some(verb) = verb(&parts.method) else {
        return fail(StatusCode::METHOD_NOT_ALLOWED, "method not allowed").into_response();
    };
    let target = Target::Job {
        job: id.job.clone(),
        verb,
    };
    if let Err(refused) = check(&guard, &parts, &target).await {
        return refused.into_response();
    }
    parts.extensions.insert(AuthorizedJob(id));
    next.run(Request::from_parts(parts, body)).await
}

/// The guard of a non-resource URL (`/metrics`, `/plugins`): `get` on `path`, checked with a
/// SubjectAccessReview's nonResourceAttributes, as controller-runtime's metrics filter does.
pub async fn guard_path(
    State((guard, path)): State<(Guard, &'static str)>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    if let Err(refused) = check(&guard, &parts, &Target::Path { path }).await {
        return (refused.status, refused.message).into_response();
    }
    next.run(Request::from_parts(parts, body)).await
}

/// A map bounded by the estimated bytes of its entries, whose entries expire after `ttl`. When
/// full, the oldest entries go first (FIFO), so a flood of new keys evicts only flood.
pub struct BoundedCache<K, V> {
    inner: Mutex<CacheInner<K, V>>,
    max_bytes: usize,
    ttl: Duration,
}

struct CacheInner<K, V> {
    map: HashMap<K, Entry<V>>,
    /// Keys in insertion order with the sequence number of that insertion (an entry replaced
    /// later leaves a stale item here, skipped when popped, compacted when they pile up).
    order: VecDeque<(K, u64)>,
    bytes: usize,
    seq: u64,
}

struct Entry<V> {
    value: V,
    at: Instant,
    seq: u64,
    size: usize,
}

/// Estimated bookkeeping per entry (map slot, order slot, timestamps).
const ENTRY_OVERHEAD: usize = 96;

impl<K: Clone + Eq + Hash, V: Clone> BoundedCache<K, V> {
    pub fn new(max_bytes: usize, ttl: Duration) -> BoundedCache<K, V> {
        BoundedCache {
            inner: Mutex::new(CacheInner {
                map: HashMap::new(),
                order: VecDeque::new(),
                bytes: 0,
                seq: 0,
            }),
            max_bytes,
            ttl,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheInner<K, V>> {
        // The cache holds no invariant a panic elsewhere could break halfway.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The fresh value of `key`.
    pub fn get(&self, key: &K) -> Option<V> {
        let mut inner = self.lock();
        let fresh = inner.map.get(key).map(|e| e.at.elapsed() < self.ttl)?;
        if fresh {
            return inner.map.get(key).map(|e| e.value.clone());
        }
        if let Some(old) = inner.map.remove(key) {
            inner.bytes -= old.size;
        }
        None
    }

    /// Stores `value` under `key`, counted as `size` bytes (plus bookkeeping); evicts the
    /// oldest entries to stay within the bound. An entry larger than the whole bound is not
    /// stored.
    pub fn insert(&self, key: K, value: V, size: usize) {
        let size = size + ENTRY_OVERHEAD;
        if size > self.max_bytes {
            return;
        }
        let mut inner = self.lock();
        if let Some(old) = inner.map.remove(&key) {
            inner.bytes -= old.size;
        }
        while inner.bytes + size > self.max_bytes {
            let Some((old, seq)) = inner.order.pop_front() else {
                break;
            };
            if inner.map.get(&old).is_some_and(|e| e.seq == seq)
                && let Some(e) = inner.map.remove(&old)
            {
                inner.bytes -= e.size;
            }
        }
        inner.seq += 1;
        let seq = inner.seq;
        inner.order.push_back((key.clone(), seq));
        inner.map.insert(
            key,
            Entry {
                value,
                at: Instant::now(),
                seq,
                size,
            },
        );
        inner.bytes += size;
        // Stale order items (replaced or expired entries) are dropped once they outnumber the
        // live ones, so the queue stays within twice the map.
        if inner.order.len() > 2 * inner.map.len() + 16 {
            let CacheInner { map, order, .. } = &mut *inner;
            order.retain(|(k, seq)| map.get(k).is_some_and(|e| e.seq == *seq));
        }
    }

    /// Estimated bytes held.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_stays_within_its_bytes_and_evicts_the_oldest() {
        let cache: BoundedCache<u32, String> =
            BoundedCache::new(10 * (ENTRY_OVERHEAD + 10), DECISION_TTL);
        for i in 0..1000 {
            cache.insert(i, "x".repeat(10), 10);
            assert!(cache.bytes() <= 10 * (ENTRY_OVERHEAD + 10));
        }
        assert_eq!(cache.len(), 10);
        assert_eq!(cache.get(&999), Some("x".repeat(10)));
        assert_eq!(cache.get(&0), None, "the oldest went first");
        // Replacing one key again and again keeps the bookkeeping bounded too.
        for _ in 0..10_000 {
            cache.insert(5, String::new(), 10);
        }
        let len = cache.len();
        assert!(cache.lock().order.len() <= 2 * len + 16);
        // Larger than the whole bound: not stored.
        cache.insert(7, String::new(), usize::MAX / 2);
        assert_eq!(cache.get(&7), None);
    }

    /// Virtual time: an entry is served until its TTL is over, then dropped.
    #[tokio::test(start_paused = true)]
    async fn expired_entries_are_not_served() {
        let cache: BoundedCache<u32, u32> = BoundedCache::new(1 << 20, DECISION_TTL);
        cache.insert(1, 1, 0);
        tokio::time::advance(DECISION_TTL - Duration::from_millis(1)).await;
        assert_eq!(cache.get(&1), Some(1), "fresh until the TTL is over");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(cache.get(&1), None);
        assert_eq!(cache.bytes(), 0);
    }
}

#[cfg(test)]
mod review_tests;
