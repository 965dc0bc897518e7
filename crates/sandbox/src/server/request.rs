//! Request decoding: the query string and the options it carries (write, list, delete, dry run,
//! fieldValidation), `Accept` for Tables, and bodies in JSON, YAML or protobuf.
//!
//! Must not route or call the REST layer.

use std::collections::HashMap;

use axum::http::{HeaderMap, header};
use serde_json::Value;

use crate::api_core::{DeleteOpts, FieldValidation, ListOpts, WriteOptions};
use crate::api_status::ApiError;
use crate::selector::{FieldSelector, LabelSelector};

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(super) fn parse_query(q: Option<&str>) -> HashMap<String, String> {
    q.unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(p), String::new()),
        })
        .collect()
}

/// The query parameters, and the kind of options the request's method takes (`CreateOptions`
/// for POST...), named in errors about them.
pub(super) struct Query(pub(super) HashMap<String, String>, pub(super) &'static str);

impl Query {
    pub(super) fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }
    pub(super) fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true" | "1"))
    }
    pub(super) fn int(&self, k: &str) -> Result<Option<i64>, ApiError> {
        match self.get(k).filter(|s| !s.is_empty()) {
            None => Ok(None),
            Some(s) => s.parse().map(Some).map_err(|_| {
                ApiError::bad_request(format!("invalid value {s:?} for query parameter {k}"))
            }),
        }
    }
    fn dry_run(&self) -> Result<bool, ApiError> {
        match self.get("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(other) => Err(ApiError::invalid1(
                "meta.k8s.io",
                self.1,
                "",
                "dryRun",
                "FieldValueNotSupported",
                format!("Unsupported value: []string{{{other:?}}}: supported values: \"All\""),
            )),
        }
    }
    pub(super) fn write_options(&self) -> Result<WriteOptions, ApiError> {
        Ok(WriteOptions {
            dry_run: self.dry_run()?,
            field_validation: FieldValidation::parse(self.get("fieldValidation").unwrap_or(""))?,
        })
    }
    pub(super) fn list_options(&self) -> Result<ListOpts, ApiError> {
        let label = match self.get("labelSelector").filter(|s| !s.is_empty()) {
            Some(s) => {
                Some(LabelSelector::parse(s).map_err(|e| ApiError::bad_request(e.to_string()))?)
            }
            None => None,
        };
        let field = match self.get("fieldSelector").filter(|s| !s.is_empty()) {
            Some(s) => {
                Some(FieldSelector::parse(s).map_err(|e| ApiError::bad_request(e.to_string()))?)
            }
            None => None,
        };
        Ok(ListOpts {
            label,
            field,
            limit: self.int("limit")?.map(|l| l.max(0) as usize),
            continue_token: self.get("continue").map(str::to_string),
            resource_version: self.get("resourceVersion").map(str::to_string),
            resource_version_match: self
                .get("resourceVersionMatch")
                .filter(|s| !s.is_empty())
                .map(str::to_string),
        })
    }
}

pub(super) fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=Table"))
}

pub(super) fn decode_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    if ct.starts_with("application/vnd.kubernetes.protobuf") {
        return crate::api_proto::decode(body).map_err(|e| match e {
            crate::api_proto::ProtoError::Unsupported(_) => {
                ApiError::unsupported_media_type(e.to_string())
            }
            other => ApiError::bad_request(other.to_string()),
        });
    }
    if ct.starts_with("application/yaml") || ct.starts_with("application/x-yaml") {
        let text = std::str::from_utf8(body)
            .map_err(|e| ApiError::bad_request(format!("invalid YAML body: {e}")))?;
        return serde_saphyr::from_str::<Value>(text)
            .map_err(|e| ApiError::bad_request(format!("error converting YAML to JSON: {e}")));
    }
    if !(ct.starts_with("application/json") || ct.is_empty() || ct.starts_with("*/*")) {
        return Err(ApiError::unsupported_media_type(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml",
        ));
    }
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "Object 'Kind' is missing in '{}': {e}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        ))
    })
}

pub(super) fn delete_options(
    query: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<DeleteOpts, ApiError> {
    let mut o = DeleteOpts {
        grace_period: query.int("gracePeriodSeconds")?,
        propagation: query
            .get("propagationPolicy")
            .filter(|s| !s.is_empty())
            .map(str::to_string),
        orphan_dependents: query.get("orphanDependents").map(|s| s == "true"),
        dry_run: query.dry_run()?,
        ..Default::default()
    };
    if body.iter().any(|b| !b.is_ascii_whitespace()) {
        let v = decode_body(headers, body)?;
        if let Some(g) = v["gracePeriodSeconds"].as_i64() {
            o.grace_period = Some(g);
        }
        if let Some(p) = v["propagationPolicy"].as_str() {
            o.propagation = Some(p.to_string());
        }
        if let Some(b) = v["orphanDependents"].as_bool() {
            o.orphan_dependents = Some(b);
        }
        if let Some(u) = v.pointer("/preconditions/uid").and_then(Value::as_str) {
            o.uid = Some(u.to_string());
        }
        if let Some(r) = v
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
        {
            o.resource_version = Some(r.to_string());
        }
        if v["dryRun"]
            .as_array()
            .is_some_and(|a| a.iter().any(|d| d == "All"))
        {
            o.dry_run = true;
        }
    }
    Ok(o)
}
