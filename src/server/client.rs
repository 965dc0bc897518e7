//! A small client of the replica API for the `diorch replicas` command, so users can try the
//! endpoints without curl.
//!
//! Owns request building and the envelope decoding on the client side; no cluster access.

use axum::http::{Method, Request, StatusCode};
use diorch_core::key::ObjectKey;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("invalid server URL {0}: {1}")]
    Url(String, String),
    #[error("cannot reach the replica API at {server}: {source}")]
    Unreachable {
        server: String,
        #[source]
        source: hyper_util::client::legacy::Error,
    },
    #[error("reading the answer of {server}: {source}")]
    Read {
        server: String,
        #[source]
        source: hyper::Error,
    },
    #[error("{server} answered {status} without di-server's envelope: {body}")]
    NotAnEnvelope {
        server: String,
        status: StatusCode,
        body: String,
    },
    /// The server refused the request; `message` is its envelope's message.
    #[error("{message} (HTTP {status})")]
    Refused { status: StatusCode, message: String },
}

/// A job id for the API (`namespace.name`) from `namespace.name`, `namespace/name`, or a bare
/// name in `namespace`.
pub fn api_job_id(job: &str, namespace: &str) -> String {
    if let Ok(key) = job.parse::<ObjectKey>() {
        format!("{}.{}", key.namespace, key.name)
    } else if job.contains('.') {
        job.to_string()
    } else {
        format!("{namespace}.{job}")
    }
}

/// Calls `method path` on `server` with an optional JSON body; returns the envelope's data.
pub async fn call(
    server: &str,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> Result<Value, ClientError> {
    let server = server.trim_end_matches('/');
    let uri = format!("{server}{path}");
    let payload = body.map(Value::to_string).unwrap_or_default();
    let request = Request::builder()
        .method(method)
        .uri(&uri)
        .header("content-type", "application/json")
        .body(Full::new(axum::body::Bytes::from(payload)))
        .map_err(|e| ClientError::Url(uri.clone(), e.to_string()))?;
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<axum::body::Bytes>>();
    let response = client
        .request(request)
        .await
        .map_err(|source| ClientError::Unreachable {
            server: server.to_string(),
            source,
        })?;
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|source| ClientError::Read {
            server: server.to_string(),
            source,
        })?
        .to_bytes();
    let envelope: Value = serde_json::from_slice(&bytes)
        .ok()
        .filter(|v: &Value| v.get("success").is_some())
        .ok_or_else(|| ClientError::NotAnEnvelope {
            server: server.to_string(),
            status,
            body: String::from_utf8_lossy(&bytes).trim().to_string(),
        })?;
    if envelope["success"] == Value::Bool(true) {
        Ok(envelope["data"].clone())
    } else {
        Err(ClientError::Refused {
            status,
            message: envelope["message"].as_str().unwrap_or_default().to_string(),
        })
    }
}

#[cfg(test)]
mod client_tests {
    use super::*;

    #[test]
    fn job_ids_accept_the_forms_users_type() {
        assert_eq!(api_job_id("ns/job", "default"), "ns.job");
        assert_eq!(api_job_id("ns.job", "default"), "ns.job");
        assert_eq!(api_job_id("job", "team"), "team.job");
    }

    #[tokio::test]
    async fn answers_are_decoded_from_a_real_server() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let app = axum::Router::new()
            .route(
                "/ok",
                axum::routing::get(|| async {
                    super::super::envelope(StatusCode::OK, "fine", serde_json::json!([1]))
                }),
            )
            .route(
                "/no",
                axum::routing::post(|| async {
                    super::super::envelope(StatusCode::BAD_REQUEST, "bad thing", Value::Null)
                }),
            );
        tokio::spawn(async move { axum::serve(listener, app).await });
        let server = format!("http://{addr}");
        let data = call(&server, Method::GET, "/ok", None).await.expect("ok");
        assert_eq!(data, serde_json::json!([1]));
        let err = call(&server, Method::POST, "/no", Some(&serde_json::json!({})))
            .await
            .expect_err("refused");
        assert_eq!(err.to_string(), "bad thing (HTTP 400 Bad Request)");
        let err = call(&server, Method::GET, "/missing", None)
            .await
            .expect_err("404");
        assert!(matches!(err, ClientError::NotAnEnvelope { .. }), "{err}");
        let err = call("http://127.0.0.1:9", Method::GET, "/", None)
            .await
            .expect_err("down");
        assert!(
            err.to_string()
                .starts_with("cannot reach the replica API at http://127.0.0.1:9"),
            "{err}"
        );
    }
}
