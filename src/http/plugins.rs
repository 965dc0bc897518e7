//! The plugin status endpoints: `GET /plugins` answers the registry's [`PluginStatus`] list as
//! JSON (camelCase), one entry per plugin the registry knows, sorted by name; `GET
//! /v1/policies/NAME/shadow` answers what NAME's shadow policies did ([`shadow::Report`]: counts
//! per shadow, the latest divergent decisions). Meant to be merged into the operator's metrics
//! server (`Router::merge`), behind the same guard as `/metrics`.
//!
//! Owns: the routes and their JSON shapes. Must not touch: the registry's state or the shadow
//! reports (it only reads) and the server that hosts the routes.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};

use crate::allocator::shadow;
use crate::plugin::registry::{PluginRegistry, PluginStatus};

/// `GET /plugins`: a JSON array of plugin statuses.
pub fn router(registry: Arc<PluginRegistry>) -> Router {
    Router::new()
        .route("/plugins", get(list))
        .with_state(registry)
}

async fn list(State(registry): State<Arc<PluginRegistry>>) -> Json<Vec<PluginStatus>> {
    Json(registry.status())
}

/// `GET /v1/policies/NAME/shadow`: what NAME's shadows did, as JSON; every loaded shadow is
/// listed, with zero counts until it is first called. A NAME that is not a plugin name is a 400.
pub fn shadow_router(registry: Arc<PluginRegistry>, reports: shadow::Reports) -> Router {
    Router::new()
        .route("/v1/policies/{name}/shadow", get(shadow_report))
        .with_state((registry, reports))
}

async fn shadow_report(
    State((registry, reports)): State<(Arc<PluginRegistry>, shadow::Reports)>,
    Path(name): Path<String>,
) -> Result<Json<shadow::Report>, (StatusCode, String)> {
    if !crate::plugin::spec::valid_plugin_name(&name) {
        return Err((
            StatusCode::BAD_REQUEST,
            "a policy name is a DNS label: at most 63 of a-z, 0-9 and -".to_string(),
        ));
    }
    let mut report = reports.get(&name).unwrap_or_else(|| shadow::Report {
        policy: name.clone(),
        ..shadow::Report::default()
    });
    for loaded in registry.shadows(&name) {
        let describe = loaded.describe();
        let plugin = describe.split('@').next().unwrap_or(&describe).to_string();
        report.shadows.entry(plugin).or_default();
    }
    Ok(Json(report))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::spec::{FailurePolicy, PluginKind, PluginSpec};
    use crate::plugin::{HostConfig, NativePolicy, PluginHost};
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use http_body_util::BodyExt as _;
    use serde_json::{Value, json};
    use tower::ServiceExt as _;

    async fn get_plugins(registry: Arc<PluginRegistry>) -> (StatusCode, Value) {
        let response = router(registry)
            .oneshot(Request::get("/plugins").body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        assert_eq!(
            response.headers()["content-type"],
            "application/json",
            "{response:?}"
        );
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn lists_refused_uploads_with_their_spec() {
        let registry = Arc::new(PluginRegistry::new(
            PluginHost::new(HostConfig::default()).unwrap(),
            NativePolicy::BinPack,
        ));
        let (status, body) = get_plugins(registry.clone()).await;
        assert_eq!((status, body), (StatusCode::OK, json!([])));

        // Two refused uploads (not components): they are listed with what they asked for.
        let mut mutator = PluginSpec::new("zz-env", PluginKind::Mutator);
        mutator.task_types = vec!["learner".into()];
        mutator.order = -2;
        mutator.failure_policy = FailurePolicy::Ignore;
        mutator.deadline = Some(std::time::Duration::from_millis(20));
        mutator.source = "diorch/plugin-zz-env".into();
        let policy = PluginSpec::new("packer", PluginKind::Policy);
        for spec in [mutator, policy] {
            registry
                .apply(spec, Arc::from(&b"garbage"[..]))
                .await
                .unwrap_err();
        }
        let (status, body) = get_plugins(registry).await;
        assert_eq!(status, StatusCode::OK);
        let list = body.as_array().unwrap();
        assert_eq!(list.len(), 2);
        // Sorted by name.
        assert_eq!(list[0]["name"], "packer");
        assert_eq!(list[0]["kind"], "policy");
        assert_eq!(list[0]["deadlineMs"], 50);
        assert_eq!(list[0]["memoryMiB"], 64);
        let m = &list[1];
        assert_eq!(m["name"], "zz-env");
        assert_eq!(m["kind"], "mutator");
        assert_eq!(m["sha256"], Value::Null);
        assert_eq!(m["healthy"], false);
        assert!(
            m["lastError"]
                .as_str()
                .unwrap()
                .contains("not a valid component"),
            "{m}"
        );
        assert_eq!((&m["loads"], &m["failedLoads"]), (&json!(0), &json!(1)));
        assert_eq!(m["source"], "diorch/plugin-zz-env");
        assert_eq!(m["taskTypes"], json!(["learner"]));
        assert_eq!(m["order"], -2);
        assert_eq!(m["failurePolicy"], "Ignore");
        assert_eq!(m["deadlineMs"], 20);
        assert_eq!(m["memoryMiB"], 64);
        // Nothing serves: no call counts.
        assert_eq!(list[0].get("allocateCalls"), None);
    }

    #[tokio::test]
    async fn the_shadow_report_route_answers_a_report_and_refuses_names_that_are_not_plugins() {
        let registry = Arc::new(PluginRegistry::new(
            PluginHost::new(HostConfig::default()).unwrap(),
            NativePolicy::BinPack,
        ));
        let get = |path: String| {
            let router = shadow_router(registry.clone(), shadow::Reports::default());
            async move {
                let response = router
                    .oneshot(Request::get(path).body(Body::empty()).unwrap())
                    .await
                    .unwrap();
                let status = response.status();
                let body = response.into_body().collect().await.unwrap().to_bytes();
                (status, String::from_utf8_lossy(&body).to_string())
            }
        };
        let (status, body) = get("/v1/policies/team/shadow".into()).await;
        assert_eq!(status, StatusCode::OK);
        let report: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(report["policy"], "team");
        assert_eq!(report["shadows"], json!({}));
        for bad in [
            "Team".to_string(),
            "a%2F..%2Fb".to_string(),
            "x".repeat(64),
            "%00".to_string(),
        ] {
            let (status, body) = get(format!("/v1/policies/{bad}/shadow")).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
            assert!(body.contains("DNS label"), "{body}");
        }
    }
}
