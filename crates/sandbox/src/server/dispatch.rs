//! The request handler: decodes the query, routes the path and hands the request to discovery,
//! OpenAPI, the token and access reviews, or the resource handlers; errors become `Status` bodies.
//!
//! Dispatch only: each kind of request is handled in its own file.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::api_status::ApiError;

use super::discovery::{group_doc, group_list, openapi_docs, resource_list, version_info};
use super::request::{Query, decode_body, parse_query};
use super::resource::resource;
use super::response::json_response;
use super::routing::{ResourcePath, Route, route};
use super::state::AppState;

/// TokenReview / SubjectAccessReview: create-only, answered from the auth file, not stored.
fn review(
    state: &Arc<AppState>,
    method: &Method,
    rp: &ResourcePath,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    if *method != Method::POST || rp.name.is_some() {
        return Err(ApiError::method_not_allowed());
    }
    let review = decode_body(headers, body)?;
    let auth = &state.options.auth;
    let answer = if rp.info.plural == "tokenreviews" {
        auth.token_review(&review)
    } else {
        auth.access_review(&review)
    };
    Ok(json_response(201, &answer, &[]))
}

pub(super) async fn handle(
    State(state): State<Arc<AppState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let options_kind = match method {
        Method::POST => "CreateOptions",
        Method::PUT => "UpdateOptions",
        Method::PATCH => "PatchOptions",
        Method::DELETE => "DeleteOptions",
        _ => "ListOptions",
    };
    let query = Query(parse_query(uri.query()), options_kind);
    let path = uri.path().to_string();
    match dispatch(&state, &method, &path, &query, &headers, &body) {
        Ok(resp) => resp,
        Err(e) => {
            tracing::debug!(%method, path, code = e.code, message = %e.message, "request failed");
            e.into_response()
        }
    }
}

fn dispatch(
    state: &Arc<AppState>,
    method: &Method,
    path: &str,
    query: &Query,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let api = &state.api;
    let r = route(api, path)?;
    let read_only = |m: &Method| m == Method::GET || m == Method::HEAD;
    match r {
        Route::Version if read_only(method) => Ok(json_response(200, &version_info(), &[])),
        Route::Health => {
            let mut resp = Response::new(Body::from("ok"));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            Ok(resp)
        }
        Route::ApiVersions if read_only(method) => Ok(json_response(
            200,
            &json!({"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}]}),
            &[],
        )),
        Route::GroupList if read_only(method) => Ok(json_response(200, &group_list(api), &[])),
        Route::Group(g) if read_only(method) => Ok(json_response(
            200,
            &group_doc(api, &g).ok_or_else(ApiError::path_not_found)?,
            &[],
        )),
        Route::ResourceList(g, v) if read_only(method) => {
            Ok(json_response(200, &resource_list(api, &g, &v), &[]))
        }
        Route::OpenApiRoot if read_only(method) => {
            let (root, _) = openapi_docs(state);
            Ok(json_response(200, &root, &[]))
        }
        Route::OpenApiDoc(p) if read_only(method) => {
            let (_, docs) = openapi_docs(state);
            let doc = docs.get(&p).ok_or_else(ApiError::path_not_found)?;
            Ok(json_response(200, doc, &[]))
        }
        Route::Resource(rp)
            if matches!(
                rp.info.plural.as_str(),
                "tokenreviews" | "subjectaccessreviews"
            ) =>
        {
            review(state, method, &rp, headers, body)
        }
        Route::Resource(rp) => resource(state, method, rp, query, headers, body),
        _ => Err(ApiError::method_not_allowed()),
    }
}
