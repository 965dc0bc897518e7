//! Resource requests: GET/LIST (as JSON or Table), POST, PUT, PATCH and server-side apply, DELETE
//! of objects and collections, and the status, binding and log subresources, each mapped onto one
//! REST call; list bodies are encoded straight from the shared objects.
//!
//! Must not implement kind rules (those are `crate::api_core`); watches are `watch.rs`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, header};
use axum::response::Response;
use serde_json::{Map, Value, json};

use crate::api_core::Api;
use crate::api_status::ApiError;
use crate::patch::PatchType;
use crate::registry::ResourceInfo;
use crate::selector::FieldSelector;
use crate::table;

use super::request::{Query, decode_body, delete_options, wants_table};
use super::response::{bytes_response, json_response, written};
use super::routing::ResourcePath;
use super::state::AppState;
use super::watch::watch;

pub(super) fn resource(
    state: &Arc<AppState>,
    method: &Method,
    rp: ResourcePath,
    query: &Query,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let api = &state.api;
    let info = rp.info.clone();
    let ns = rp.namespace.as_deref();
    let is_watch = rp.watch_path || query.flag("watch");
    match (rp.name.as_deref(), rp.sub.as_deref()) {
        (None, _) => match *method {
            Method::GET | Method::HEAD if is_watch => {
                let list = query.list_options()?;
                watch(state, info, ns, list, query, headers)
            }
            Method::GET | Method::HEAD => {
                let list = query.list_options()?;
                let out = api.list(&info, ns, &list)?;
                if wants_table(headers) {
                    let include = table::parse_include_object(query.get("includeObject"))
                        .map_err(|e| ApiError::bad_request(e.to_string()))?;
                    let refs: Vec<&Value> = out.items.iter().map(|a| &**a).collect();
                    let t = table::render_table(
                        &info,
                        &refs,
                        include,
                        jiff::Timestamp::now(),
                        &out.resource_version.to_string(),
                        out.continue_token.as_deref(),
                    );
                    return Ok(json_response(200, &t, &[]));
                }
                Ok(bytes_response(200, encode_list(&info, &out), &[]))
            }
            Method::POST => {
                let obj = decode_body(headers, body)?;
                Ok(written(api.create(
                    &info,
                    ns,
                    obj,
                    &query.write_options()?,
                )?))
            }
            Method::DELETE => {
                let o = delete_options(query, headers, body)?;
                let list = query.list_options()?;
                Ok(json_response(
                    200,
                    &api.delete_collection(&info, ns, &list, &o)?,
                    &[],
                ))
            }
            _ => Err(ApiError::method_not_allowed()),
        },
        (Some(name), None) => match *method {
            Method::GET | Method::HEAD if is_watch => {
                let mut list = query.list_options()?;
                let by_name = FieldSelector::parse(&format!("metadata.name={name}"))
                    .map_err(|e| ApiError::bad_request(e.to_string()))?;
                list.field = Some(by_name);
                watch(state, info, ns, list, query, headers)
            }
            Method::GET | Method::HEAD => {
                let obj = api.get(&info, ns, name)?;
                if wants_table(headers) {
                    let include = table::parse_include_object(query.get("includeObject"))
                        .map_err(|e| ApiError::bad_request(e.to_string()))?;
                    let rv = obj["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap_or("")
                        .to_string();
                    let t = table::render_table(
                        &info,
                        &[&obj],
                        include,
                        jiff::Timestamp::now(),
                        &rv,
                        None,
                    );
                    return Ok(json_response(200, &t, &[]));
                }
                Ok(json_response(200, &obj, &[]))
            }
            Method::PUT => {
                let obj = decode_body(headers, body)?;
                Ok(written(api.update(
                    &info,
                    ns,
                    name,
                    None,
                    obj,
                    &query.write_options()?,
                )?))
            }
            Method::PATCH => patch(api, &info, ns, name, None, query, headers, body),
            Method::DELETE => {
                let o = delete_options(query, headers, body)?;
                Ok(written(api.delete(&info, ns, name, &o)?))
            }
            _ => Err(ApiError::method_not_allowed()),
        },
        (Some(name), Some(sub)) => {
            if !info.subresources.iter().any(|s| s == sub) {
                return Err(ApiError::path_not_found());
            }
            match (sub, method.clone()) {
                ("status", Method::GET) => Ok(json_response(200, &*api.get(&info, ns, name)?, &[])),
                ("status", Method::PUT) => {
                    let obj = decode_body(headers, body)?;
                    Ok(written(api.update(
                        &info,
                        ns,
                        name,
                        Some("status"),
                        obj,
                        &query.write_options()?,
                    )?))
                }
                ("status", Method::PATCH) => {
                    patch(api, &info, ns, name, Some("status"), query, headers, body)
                }
                ("binding", Method::POST) => {
                    let obj = decode_body(headers, body)?;
                    Ok(written(api.bind(ns.unwrap_or_default(), name, obj)?))
                }
                ("log", Method::GET) => {
                    api.get(&info, ns, name)?;
                    Err(ApiError::bad_request(format!(
                        "the diorch sandbox runs no containers, so pod \"{name}\" has no logs to show"
                    )))
                }
                _ => Err(ApiError::method_not_allowed()),
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn patch(
    api: &Api,
    info: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
    sub: Option<&str>,
    query: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    // A content type no patch route consumes is refused by kube-apiserver's router (go-restful)
    // before the handler, in its own words; a known type the resource does not take (strategic
    // merge on a custom resource) gets the handler's list (`patch::unsupported_media_type`).
    let Some(pt) = PatchType::from_content_type(ct) else {
        let mut e = ApiError::unsupported_media_type("415: Unsupported Media Type");
        e.details = Some(json!({}));
        return Err(e);
    };
    if pt == PatchType::Apply
        && let Some(manager) = query.get("fieldManager").filter(|m| !m.is_empty())
    {
        let force = query.get("force") == Some("true");
        return Ok(written(api.apply(
            info,
            ns,
            name,
            sub,
            body,
            manager,
            force,
            &query.write_options()?,
        )?));
    }
    Ok(written(api.patch(
        info,
        ns,
        name,
        sub,
        pt,
        body,
        &query.write_options()?,
    )?))
}

/// A list body, serialising items straight from the shared objects.
fn encode_list(info: &ResourceInfo, out: &crate::api_core::ListOut) -> Vec<u8> {
    let mut meta = Map::new();
    meta.insert(
        "resourceVersion".into(),
        json!(out.resource_version.to_string()),
    );
    if let Some(c) = &out.continue_token {
        meta.insert("continue".into(), json!(c));
    }
    if let Some(r) = out.remaining {
        meta.insert("remainingItemCount".into(), json!(r));
    }
    let head = json!({"kind": info.list_kind, "apiVersion": info.api_version(), "metadata": meta});
    let mut buf = serde_json::to_vec(&head).unwrap_or_default();
    buf.pop(); // the closing brace; items follow
    buf.extend_from_slice(b",\"items\":[");
    // kube-apiserver's lists of built-in kinds carry no apiVersion/kind on their items (they
    // are encoded from internal types); custom resources keep theirs.
    let bare = !info.is_custom();
    for (i, item) in out.items.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        let written = match &**item {
            Value::Object(map) if bare => write_without_type_meta(&mut buf, map),
            other => serde_json::to_writer(&mut buf, other),
        };
        if written.is_err() {
            buf.extend_from_slice(b"null");
        }
    }
    buf.extend_from_slice(b"]}");
    buf
}

/// Writes `map` as a JSON object, leaving out `apiVersion` and `kind`.
fn write_without_type_meta(buf: &mut Vec<u8>, map: &Map<String, Value>) -> serde_json::Result<()> {
    buf.push(b'{');
    let mut first = true;
    for (k, v) in map {
        if k == "apiVersion" || k == "kind" {
            continue;
        }
        if !first {
            buf.push(b',');
        }
        first = false;
        serde_json::to_writer(&mut *buf, k)?;
        buf.push(b':');
        serde_json::to_writer(&mut *buf, v)?;
    }
    buf.push(b'}');
    Ok(())
}
