//! HTTP responses: JSON bodies with `Warning` headers, `Status` bodies of errors (with
//! `Retry-After` when the apiserver sends one), and the responses of writes.
//!
//! Must not decide what to answer, only how it is written.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::api_core::Written;
use crate::api_status::ApiError;

pub(super) fn json_response(code: u16, body: &Value, warnings: &[String]) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    bytes_response(code, bytes, warnings)
}

pub(super) fn bytes_response(code: u16, bytes: Vec<u8>, warnings: &[String]) -> Response {
    let mut resp = Response::new(Body::from(bytes));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for w in warnings {
        let text = format!("299 - {}", crate::schema::go_quote(w));
        if let Ok(v) = HeaderValue::from_str(&text) {
            h.append(header::WARNING, v);
        }
    }
    resp
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = json_response(self.code, &self.to_status(), &[]);
        // As kube-apiserver does: clients that retry (kube's default retry policy) wait that long.
        let retry_after = self
            .details
            .as_ref()
            .and_then(|d| d.get("retryAfterSeconds"))
            .and_then(Value::as_u64)
            .filter(|s| *s > 0);
        if let Some(secs) = retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        resp
    }
}

pub(super) fn written(w: Written) -> Response {
    json_response(w.code, &w.body, &w.warnings)
}
