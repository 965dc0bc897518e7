//! Helpers every printer's cells share: strings of absent fields, names, map sizes, ages
//! (`translateTimestampSince`), RFC 3339 times and `labels.FormatLabels`.
//!
//! Must not know any kind's columns.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde_json::{Map, Value};

use super::duration::human_duration_nanos;

pub(super) fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

pub(super) fn name(obj: &Value) -> Value {
    str_of(&obj["metadata"]["name"]).into()
}

pub(super) fn map_len(v: &Value) -> i64 {
    v.as_object().map_or(0, Map::len) as i64
}

pub(super) fn parse_time(v: &Value) -> Option<Timestamp> {
    v.as_str().and_then(|s| s.parse::<Timestamp>().ok())
}

/// `translateTimestampSince`: `<unknown>` for a missing (zero) time.
pub(super) fn since(v: &Value, now: Timestamp) -> String {
    match parse_time(v) {
        Some(t) => since_ts(t, now),
        None => "<unknown>".into(),
    }
}

pub(super) fn since_ts(t: Timestamp, now: Timestamp) -> String {
    human_duration_nanos(now.duration_since(t).as_nanos())
}

pub(super) fn age(obj: &Value, now: Timestamp) -> Value {
    since(&obj["metadata"]["creationTimestamp"], now).into()
}

/// `CreationTimestamp.Time.UTC().Format(time.RFC3339)`; the zero time when absent.
pub(super) fn rfc3339_or_zero(v: &Value) -> String {
    match parse_time(v) {
        Some(t) => t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        None => "0001-01-01T00:00:00Z".into(),
    }
}

pub(super) fn is_present(v: &Value) -> bool {
    v.is_object()
}

/// `labels.FormatLabels`: sorted `k=v` pairs, `<none>` when empty.
pub(super) fn format_labels(v: &Value) -> String {
    let pairs: BTreeMap<&str, &str> = v
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.as_str(), str_of(v))).collect())
        .unwrap_or_default();
    if pairs.is_empty() {
        return "<none>".into();
    }
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}
