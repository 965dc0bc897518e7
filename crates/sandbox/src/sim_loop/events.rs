//! core/v1 Events as client-go's event recorder writes them (names, sources, counts and
//! timestamps) for the scheduler's and kubelets' reports.
//!
//! Builds Events only: sending them is `requests.rs`.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

static EVENT_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub(super) struct EventSpec<'a> {
    pub(super) pod: &'a Pod,
    pub(super) field_path: Option<String>,
    pub(super) kind: &'a str,
    pub(super) reason: &'a str,
    pub(super) message: String,
    pub(super) component: &'a str,
    pub(super) host: Option<&'a str>,
    pub(super) action: Option<&'a str>,
}

/// A core/v1 Event as client-go's event recorder writes it.
pub(super) fn build_event(e: EventSpec<'_>) -> Event {
    let now = Timestamp::now();
    let name = e.pod.metadata.name.clone().unwrap_or_default();
    let unique = now.as_nanosecond() as u128
        + u128::from(EVENT_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let instance = match e.host {
        Some(h) => h.to_string(),
        None => format!("{}-sandbox", e.component),
    };
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{name}.{unique:x}")),
            namespace: e.pod.metadata.namespace.clone(),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(name),
            namespace: e.pod.metadata.namespace.clone(),
            uid: e.pod.metadata.uid.clone(),
            resource_version: e.pod.metadata.resource_version.clone(),
            field_path: e.field_path,
        },
        reason: Some(e.reason.into()),
        message: Some(e.message),
        type_: Some(e.kind.into()),
        source: Some(EventSource {
            component: Some(e.component.into()),
            host: e.host.map(str::to_string),
        }),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        action: e.action.map(str::to_string),
        reporting_component: Some(e.component.into()),
        reporting_instance: Some(instance),
        ..Event::default()
    }
}
