//! The Event printer's cells, for core/v1 Events and for `events.k8s.io/v1` Events mapped onto
//! the core field names (the apiserver prints both from one internal type).
//!
//! Event cells only.

use jiff::Timestamp;
use serde_json::{Value, json};

use super::cell::{is_present, name, parse_time, since, str_of};

/// Maps an `events.k8s.io/v1` Event onto the core field names the printer reads (the
/// apiserver prints both from the same internal type).
pub(super) fn events_to_core(ev: &Value) -> Value {
    json!({
        "metadata": ev["metadata"],
        "involvedObject": ev["regarding"],
        "reason": ev["reason"],
        "message": ev["note"],
        "type": ev["type"],
        "source": ev["deprecatedSource"],
        "firstTimestamp": ev["deprecatedFirstTimestamp"],
        "lastTimestamp": ev["deprecatedLastTimestamp"],
        "count": ev["deprecatedCount"],
        "eventTime": ev["eventTime"],
        "series": ev["series"],
        "reportingComponent": ev["reportingController"],
        "reportingInstance": ev["reportingInstance"],
    })
}

pub(super) fn event_cells(ev: &Value, now: Timestamp) -> Vec<Value> {
    let first = if parse_time(&ev["firstTimestamp"]).is_some() {
        since(&ev["firstTimestamp"], now)
    } else {
        since(&ev["eventTime"], now)
    };
    let mut last = if parse_time(&ev["lastTimestamp"]).is_some() {
        since(&ev["lastTimestamp"], now)
    } else {
        first.clone()
    };
    let mut count = ev["count"].as_i64().unwrap_or(0);
    if is_present(&ev["series"]) {
        last = since(&ev["series"]["lastObservedTime"], now);
        count = ev["series"]["count"].as_i64().unwrap_or(0);
    } else if count == 0 {
        // Singleton events don't carry a count in the new API.
        count = 1;
    }
    let involved = &ev["involvedObject"];
    let kind = str_of(&involved["kind"]).to_lowercase();
    let target = match str_of(&involved["name"]) {
        "" => kind,
        n => format!("{kind}/{n}"),
    };
    let first_non_empty = |a: &str, b: &str| if a.is_empty() { b } else { a }.to_string();
    let component = first_non_empty(
        str_of(&ev["source"]["component"]),
        str_of(&ev["reportingComponent"]),
    );
    let host = first_non_empty(
        str_of(&ev["source"]["host"]),
        str_of(&ev["reportingInstance"]),
    );
    let source = if host.is_empty() {
        component
    } else {
        format!("{component}, {host}")
    };
    vec![
        last.into(),
        str_of(&ev["type"]).into(),
        str_of(&ev["reason"]).into(),
        target.into(),
        str_of(&involved["fieldPath"]).into(),
        source.into(),
        str_of(&ev["message"]).trim().into(),
        first.into(),
        count.into(),
        name(ev),
    ]
}
