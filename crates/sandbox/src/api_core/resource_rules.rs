//! Per-resource rules of the REST layer: where a resource is stored (both Event APIs share core/v1
//! events), the view it serves, and which resources create on PUT, return the deleted object,
//! track generation or have a status subresource.
//!
//! Decisions from `ResourceInfo` only: must not touch the store.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::api_kinds;
use crate::registry::ResourceInfo;
use crate::store::ResKey;

/// (group, version, plural): the key of a custom resource version's schema and rules.
pub(super) fn version_key(info: &ResourceInfo) -> (String, String, String) {
    (
        info.group.clone(),
        info.version.clone(),
        info.plural.clone(),
    )
}

/// The storage bucket of a resource: both Event APIs share core/v1 events.
pub fn storage_key(info: &ResourceInfo) -> ResKey {
    if info.group == "events.k8s.io" && info.plural == "events" {
        ResKey::new("", "events")
    } else {
        ResKey::new(&info.group, &info.plural)
    }
}

fn is_event_v1(info: &ResourceInfo) -> bool {
    info.group == "events.k8s.io" && info.plural == "events"
}

pub(super) fn is_crd(info: &ResourceInfo) -> bool {
    info.group == "apiextensions.k8s.io" && info.plural == "customresourcedefinitions"
}

pub(super) fn is_core(info: &ResourceInfo, plural: &str) -> bool {
    info.group.is_empty() && info.plural == plural
}

/// Converts a stored object to the view `info` serves.
pub fn to_view(info: &ResourceInfo, stored: &Arc<Value>) -> Arc<Value> {
    if is_event_v1(info) {
        return Arc::new(api_kinds::event_core_to_v1(stored));
    }
    let api_version = info.api_version();
    if info.is_custom() && stored.get("apiVersion").and_then(Value::as_str) != Some(&api_version) {
        let mut v = (**stored).clone();
        v["apiVersion"] = json!(api_version);
        return Arc::new(v);
    }
    stored.clone()
}

pub(super) fn from_view(info: &ResourceInfo, obj: Value) -> Value {
    if is_event_v1(info) {
        api_kinds::event_v1_to_core(&obj)
    } else {
        obj
    }
}

/// Whether PUT on a missing object creates it.
pub(super) fn allow_create_on_update(info: &ResourceInfo) -> bool {
    info.group.is_empty() && matches!(info.plural.as_str(), "events" | "endpoints")
        || is_event_v1(info)
        || info.group == "coordination.k8s.io"
}

/// Whether the delete response is the object (else a Status).
pub(super) fn returns_deleted_object(info: &ResourceInfo) -> bool {
    info.is_custom()
        || is_crd(info)
        || (info.group.is_empty()
            && matches!(info.plural.as_str(), "pods" | "services" | "namespaces"))
}

/// Whether writes bump metadata.generation.
pub(super) fn tracks_generation(info: &ResourceInfo) -> bool {
    info.is_custom() || is_crd(info)
}

pub(super) fn has_status(info: &ResourceInfo) -> bool {
    info.subresources.iter().any(|s| s == "status")
}
