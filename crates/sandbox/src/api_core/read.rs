//! GET and LIST: one object, field-selector checks, label/field matching, and lists with
//! limit/continue (a consistent snapshot) and resourceVersion/resourceVersionMatch semantics.
//!
//! Reads only: must not write to the store.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::api_status::ApiError;
use crate::registry::ResourceInfo;
use crate::selector::{self, FieldSelector, LabelSelector, ResourceOrigin};
use crate::store::{ObjKey, StoreError};

use super::api::Api;
use super::object_meta::meta_str;
use super::options::{ListOpts, ListOut};
use super::resource_rules::{storage_key, to_view};

impl Api {
    /// GET one object.
    pub fn get(
        &self,
        info: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Arc<Value>, ApiError> {
        self.store
            .get(&storage_key(info), &Self::key(ns, name))
            .map(|o| to_view(info, &o))
            .ok_or_else(|| ApiError::not_found(&info.group, &info.plural, name))
    }

    /// The field-selector check every list/watch does first.
    pub fn check_field_selector(
        &self,
        info: &ResourceInfo,
        sel: &FieldSelector,
    ) -> Result<(), ApiError> {
        let origin = if info.is_custom() {
            ResourceOrigin::Custom {
                namespaced: info.namespaced,
            }
        } else {
            ResourceOrigin::BuiltIn
        };
        selector::validate_field_selector(&info.api_version(), &info.kind, origin, sel)
            .map_err(|e| ApiError::bad_request(e.to_string()))
    }

    /// Whether a view object matches label and field selectors.
    pub fn matches(
        info: &ResourceInfo,
        obj: &Value,
        label: Option<&LabelSelector>,
        field: Option<&FieldSelector>,
    ) -> bool {
        label.is_none_or(|l| l.matches_object(obj))
            && field.is_none_or(|f| f.matches_object(&info.api_version(), &info.kind, obj))
    }

    /// LIST with selectors, limit/continue and resourceVersion semantics.
    pub fn list(
        &self,
        info: &ResourceInfo,
        ns: Option<&str>,
        opts: &ListOpts,
    ) -> Result<ListOut, ApiError> {
        if let Some(f) = &opts.field {
            self.check_field_selector(info, f)?;
        }
        let res = storage_key(info);
        let rv_param = opts.resource_version.as_deref().unwrap_or("");
        let rv_match = opts.resource_version_match.as_deref().unwrap_or("");
        if !rv_match.is_empty() && rv_param.is_empty() {
            return Err(ApiError::invalid1(
                "meta.k8s.io",
                "ListOptions",
                "",
                "resourceVersionMatch",
                "FieldValueForbidden",
                "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if !matches!(rv_match, "" | "Exact" | "NotOlderThan") {
            return Err(ApiError::invalid1(
                "meta.k8s.io",
                "ListOptions",
                "",
                "resourceVersionMatch",
                "FieldValueNotSupported",
                format!(
                    "Unsupported value: \"{rv_match}\": supported values: \"Exact\", \"NotOlderThan\", \"\""
                ),
            ));
        }
        let parse_rv = |s: &str| {
            s.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s}")))
        };
        let (snapshot_rv, items, start) =
            if let Some(token) = opts.continue_token.as_deref().filter(|t| !t.is_empty()) {
                if !rv_param.is_empty() && rv_param != "0" {
                    return Err(ApiError::bad_request(
                        "specifying resource version is not allowed when using continue",
                    ));
                }
                let (rv, start) = decode_continue(token)?;
                // A real server answers continue tokens from etcd until compaction (5 minutes),
                // far longer than this history lasts under churn: past the history, the rest of
                // the list comes from the current state (what the apiserver's "inconsistent
                // continue" offers) rather than a 410 that would make informers relist forever.
                let (rv, items) = match self.store.list_at(&res, ns, rv) {
                    Ok(items) => (rv, items),
                    Err(_) => {
                        tracing::debug!(
                            rv,
                            "continue token past the event history: inconsistent list"
                        );
                        self.store.list(&res, ns)
                    }
                };
                (rv, items, Some(start))
            } else if rv_match == "Exact" {
                let rv = parse_rv(rv_param)?;
                let items = self.store.list_at(&res, ns, rv).map_err(|e| match e {
                    StoreError::TooOld { requested, oldest } => {
                        ApiError::gone(format!("too old resource version: {requested} ({oldest})"))
                    }
                    other => ApiError::internal(other.to_string()),
                })?;
                (rv, items, None)
            } else {
                let wanted = if rv_param.is_empty() {
                    0
                } else {
                    parse_rv(rv_param)?
                };
                let (rv, items) = self.store.list(&res, ns);
                if wanted > rv {
                    return Err(ApiError::too_large_resource_version(wanted, rv));
                }
                (rv, items, None)
            };
        let filtered = opts.label.is_some() || opts.field.is_some();
        let mut selected = Vec::new();
        let mut remaining = 0u64;
        let mut next_start: Option<ObjKey> = None;
        let mut last_key: Option<ObjKey> = None;
        for stored in items {
            let key = (
                meta_str(&stored, "namespace").to_string(),
                meta_str(&stored, "name").to_string(),
            );
            if start.as_ref().is_some_and(|s| &key < s) {
                continue;
            }
            let view = to_view(info, &stored);
            if !Self::matches(info, &view, opts.label.as_ref(), opts.field.as_ref()) {
                continue;
            }
            if opts.limit.is_some_and(|l| l > 0 && selected.len() >= l) {
                if next_start.is_none() {
                    next_start = last_key.take();
                }
                remaining += 1;
                continue;
            }
            last_key = Some(key);
            selected.push(view);
        }
        let continue_token = next_start.map(|k| encode_continue(snapshot_rv, &k));
        Ok(ListOut {
            items: selected,
            resource_version: snapshot_rv,
            remaining: (continue_token.is_some() && !filtered).then_some(remaining),
            continue_token,
        })
    }
}

pub(super) fn encode_continue(rv: u64, key: &ObjKey) -> String {
    let start = if key.0.is_empty() {
        format!("{}\u{0}", key.1)
    } else {
        format!("{}/{}\u{0}", key.0, key.1)
    };
    let raw = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start}).to_string();
    match serde_json::to_value(k8s_openapi::ByteString(raw.into_bytes())) {
        Ok(Value::String(s)) => s,
        _ => String::new(),
    }
}

pub(super) fn decode_continue(token: &str) -> Result<(u64, ObjKey), ApiError> {
    let bad = || {
        ApiError::bad_request(format!(
            "invalid continue token: continue key is not valid: {token}"
        ))
    };
    let bytes: k8s_openapi::ByteString =
        serde_json::from_value(Value::String(token.to_string())).map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&bytes.0).map_err(|_| bad())?;
    let rv = v["rv"].as_u64().ok_or_else(bad)?;
    let start = v["start"].as_str().ok_or_else(bad)?;
    let start = start.trim_end_matches('\u{0}');
    let key = match start.split_once('/') {
        Some((ns, name)) => (ns.to_string(), format!("{name}\u{0}")),
        None => (String::new(), format!("{start}\u{0}")),
    };
    Ok((rv, key))
}
