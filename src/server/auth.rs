//! Optional delegated authentication and authorization of the replica API
//! (`--server-auth kubernetes`): the bearer token is checked with a TokenReview and each call
//! with a SubjectAccessReview on `dijobs/replicas` in the job's namespace (`get` for reads,
//! `update` for writes), as kube-rbac-proxy does. Decisions are cached briefly.
//!
//! Owns these checks and their cache; it never sees a job's data.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

use super::{fail, parse_job_id};

/// How long an allow or deny decision is reused.
pub const DECISION_TTL: Duration = Duration::from_secs(10);
const MAX_CACHED: usize = 10_000;

/// Which check the replica API applies (`--server-auth`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ServerAuth {
    /// No check, as di-server (DI-orchestrator) does.
    #[default]
    None,
    /// Bearer tokens checked with TokenReview, calls authorized with SubjectAccessReview.
    Kubernetes,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Decision {
    Allowed,
    Unauthenticated(String),
    Forbidden(String),
}

type Key = (String, &'static str, String, String);

/// The Kubernetes authorizer with its decision cache.
pub struct Authorizer {
    client: Client,
    cache: Mutex<HashMap<Key, (Decision, Instant)>>,
}

impl Authorizer {
    pub fn new(client: Client) -> Authorizer {
        Authorizer {
            client,
            cache: Mutex::new(HashMap::new()),
        }
    }

    async fn decide(
        &self,
        token: &str,
        verb: &'static str,
        ns: &str,
        name: &str,
    ) -> Result<Decision, kube::Error> {
        let key = (token.to_string(), verb, ns.to_string(), name.to_string());
        let now = Instant::now();
        if let Some((decision, at)) = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            && now.duration_since(*at) < DECISION_TTL
        {
            return Ok(decision.clone());
        }
        let decision = self.review(token, verb, ns, name).await?;
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= MAX_CACHED {
            cache.clear();
        }
        cache.insert(key, (decision.clone(), now));
        Ok(decision)
    }

    async fn review(
        &self,
        token: &str,
        verb: &str,
        ns: &str,
        name: &str,
    ) -> Result<Decision, kube::Error> {
        let tokens: Api<TokenReview> = Api::all(self.client.clone());
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let status = tokens
            .create(&PostParams::default(), &review)
            .await?
            .status
            .unwrap_or_default();
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(user)) => user,
            _ => {
                return Ok(Decision::Unauthenticated(format!(
                    "the bearer token was not accepted{}",
                    status.error.map(|e| format!(": {e}")).unwrap_or_default()
                )));
            }
        };
        let username = user.username.clone().unwrap_or_default();
        let sar = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(ns.to_string()),
                    verb: Some(verb.to_string()),
                    group: Some(crate::api::GROUP.to_string()),
                    resource: Some("dijobs".to_string()),
                    subresource: Some("replicas".to_string()),
                    name: Some(name.to_string()),
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let reviews: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let status = reviews
            .create(&PostParams::default(), &sar)
            .await?
            .status
            .unwrap_or_default();
        Ok(if status.allowed {
            Decision::Allowed
        } else {
            Decision::Forbidden(format!(
                "user {username} cannot {verb} dijobs/replicas of {name} in namespace {ns}{}",
                status.reason.map(|r| format!(": {r}")).unwrap_or_default()
            ))
        })
    }
}

/// The middleware: 401 without an accepted bearer token, 403 without permission.
pub async fn authorize(
    State(auth): State<Arc<Authorizer>>,
    request: Request,
    next: Next,
) -> Response {
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    let Some(token) = token else {
        return fail(
            StatusCode::UNAUTHORIZED,
            "a bearer token is required (Authorization: Bearer <token>)",
        )
        .into_response();
    };
    // `/v2alpha1/job/{id}/…` or `/v2alpha1/{id}/…`
    let segments: Vec<&str> = request
        .uri()
        .path()
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let id = match segments.as_slice() {
        ["v2alpha1", "job", id, ..] => *id,
        ["v2alpha1", id, ..] => *id,
        _ => "",
    };
    let Ok(id) = parse_job_id(id) else {
        // The handler answers the malformed id; nothing is read or written for it.
        return next.run(request).await;
    };
    let verb = if request.method() == Method::GET {
        "get"
    } else {
        "update"
    };
    match auth.decide(&token, verb, &id.namespace, &id.name).await {
        Ok(Decision::Allowed) => next.run(request).await,
        Ok(Decision::Unauthenticated(message)) => {
            fail(StatusCode::UNAUTHORIZED, message).into_response()
        }
        Ok(Decision::Forbidden(message)) => fail(StatusCode::FORBIDDEN, message).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "TokenReview or SubjectAccessReview failed");
            fail(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("cannot check the request's permissions: {e}"),
            )
            .into_response()
        }
    }
}
