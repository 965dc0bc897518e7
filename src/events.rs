//! Kubernetes Events (events.k8s.io/v1) for the controller and the plugin watcher.
//!
//! Owns: how an Event's `action` is chosen, and recording Events: a repeat of an Event recorded
//! in the last minutes becomes a series (`series.count` patched) instead of a new object, as
//! client-go's and kube-runtime's recorders do. Must not touch: which Events are recorded (the
//! planner and the plugin watcher decide).
//!
//! Hand-written instead of kube-runtime's `Recorder` because that one keeps every Event object
//! it sent, whole, for six minutes, and scans all of them on every publish: 73 MiB and ~3 % of
//! the CPU of a 5 000-job burst (docs/performance.md). This one keeps a name and a count per
//! series, at most [`SERIES_CAPACITY`] of them, and does no scan.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{self as events_v1, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Reporter};
use kube::{Api, Client};

/// The `action` of an Event with `note`.
///
/// Events with the same type, reason, action and objects fold into one series that keeps the
/// first note. Repeats of one note should fold (a job waiting for capacity must not flood the
/// events API), but a new note is news: "loaded version B" must not show as a second count of
/// "loaded version A". A digest of the note in `action` does both.
pub fn action(base: &str, note: &str) -> String {
    // FNV-1a: stable across processes and releases, unlike std's hasher.
    let mut hash: u32 = 0x811c_9dc5;
    for byte in note.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    format!("{base}-{hash:08x}")
}

/// How long a recorded Event can still grow a series (kube-runtime's and client-go's: 6 min).
const SERIES_TTL: Duration = Duration::from_secs(6 * 60);
/// Most series remembered at once (client-go's LRU holds 4 096); beyond it the oldest are
/// forgotten and their next repeat is a new Event.
pub const SERIES_CAPACITY: usize = 4096;

/// Records Events on objects; cheap to clone (one shared series cache).
#[derive(Clone)]
pub struct Recorder {
    client: Client,
    reporter: Reporter,
    series: Arc<Mutex<SeriesCache>>,
}

impl Recorder {
    pub fn new(client: Client, reporter: Reporter) -> Recorder {
        Recorder {
            client,
            reporter,
            series: Arc::new(Mutex::new(SeriesCache::new(Instant::now()))),
        }
    }

    /// Records `ev` on `regarding`: creates an Event, or counts a repeat of one recorded in
    /// the last minutes on its series. A series whose Event is gone (expired on the server)
    /// starts again as a new Event.
    pub async fn publish(
        &self,
        ev: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let key = series_key(ev, regarding);
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let api: Api<events_v1::Event> = Api::namespaced(self.client.clone(), namespace);
        let repeat = self.cache().repeat(key, Instant::now());
        if let Some(Series { name, count }) = repeat {
            let patch = serde_json::json!({
                "series": EventSeries { count, last_observed_time: MicroTime(Timestamp::now()) }
            });
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    self.cache().record(key, name, count, Instant::now());
                    return Ok(());
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(err) => return Err(err),
            }
        }
        let event = self.event(ev, regarding);
        let name = event.metadata.name.clone().unwrap_or_default();
        // The stored Event, as the server answers it, is not read.
        crate::writes::create_unread(&self.client, api.resource_url(), &event).await?;
        self.cache().record(key, name, 1, Instant::now());
        Ok(())
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, SeriesCache> {
        // A panic while holding the lock leaves a consistent map (every method is one
        // HashMap operation at a time); go on with it.
        self.series.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The new Event, as kube-runtime's `Recorder` builds it.
    fn event(&self, ev: &Event, regarding: &ObjectReference) -> events_v1::Event {
        let now = Timestamp::now();
        let controller = &self.reporter.controller;
        events_v1::Event {
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            note: ev.note.clone(),
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_ref().unwrap_or(controller),
                    now.as_nanosecond()
                )),
                ..ObjectMeta::default()
            },
            reporting_controller: Some(controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| controller.clone()),
            ),
            type_: Some(
                match ev.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_string(),
            ),
            related: ev.secondary.clone(),
            ..events_v1::Event::default()
        }
    }
}

/// What makes two Events one series: type, reason, action and both objects (the reporter is
/// the recorder's own). A 64-bit digest instead of the strings keeps an entry small; two
/// different Events share one only by a hash collision (about 4 096² / 2⁶⁵ ≈ 5·10⁻¹³ per
/// cache), which would count one as a repeat of the other.
fn series_key(ev: &Event, regarding: &ObjectReference) -> u64 {
    fn object(h: &mut impl Hasher, o: &ObjectReference) {
        (&o.api_version, &o.kind, &o.namespace, &o.name, &o.uid).hash(h);
    }
    // Fixed keys: a digest only compared within this process.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (ev.type_ == EventType::Warning, &ev.reason, &ev.action).hash(&mut h);
    object(&mut h, regarding);
    ev.secondary.is_some().hash(&mut h);
    if let Some(related) = &ev.secondary {
        object(&mut h, related);
    }
    h.finish()
}

/// A recorded Event's name and how many times it was seen.
#[derive(Clone, Debug, PartialEq)]
struct Series {
    name: String,
    count: i32,
}

/// The recent series, in two generations: entries move from `current` to `previous` every
/// half TTL (or when `current` holds half the capacity) and are forgotten at the next move,
/// so an entry lives between half a TTL and a TTL after its last sighting, the cache never
/// holds more than [`SERIES_CAPACITY`], and nothing is ever scanned.
struct SeriesCache {
    current: HashMap<u64, Series>,
    previous: HashMap<u64, Series>,
    since: Instant,
}

impl SeriesCache {
    fn new(now: Instant) -> SeriesCache {
        SeriesCache {
            current: HashMap::new(),
            previous: HashMap::new(),
            since: now,
        }
    }

    fn age(&mut self, now: Instant) {
        let age = now.saturating_duration_since(self.since);
        if age >= SERIES_TTL {
            self.current.clear();
            self.previous.clear();
            self.since = now;
        } else if age >= SERIES_TTL / 2 || self.current.len() >= SERIES_CAPACITY / 2 {
            self.previous = std::mem::take(&mut self.current);
            self.since = now;
        }
    }

    /// The series `key` continues, with its next count, if it is still remembered.
    fn repeat(&mut self, key: u64, now: Instant) -> Option<Series> {
        self.age(now);
        let seen = self.current.get(&key).or_else(|| self.previous.get(&key))?;
        Some(Series {
            name: seen.name.clone(),
            count: seen.count.saturating_add(1),
        })
    }

    /// `name` was written as the `count`-th sighting of `key`.
    fn record(&mut self, key: u64, name: String, count: i32, now: Instant) {
        self.age(now);
        self.previous.remove(&key);
        self.current.insert(key, Series { name, count });
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use serde_json::{Value, json};

    #[test]
    fn the_same_note_folds_and_a_new_note_does_not() {
        assert_eq!(action("Reconcile", "a"), action("Reconcile", "a"));
        assert_ne!(action("Reconcile", "a"), action("Reconcile", "b"));
        assert!(action("LoadPlugin", "x").starts_with("LoadPlugin-"));
        assert_eq!(action("A", "").len(), "A-".len() + 8);
    }

    fn series(name: &str, count: i32) -> Series {
        Series {
            name: name.into(),
            count,
        }
    }

    #[test]
    fn a_repeat_continues_the_series_until_it_expires() {
        let t0 = Instant::now();
        let mut cache = SeriesCache::new(t0);
        assert_eq!(cache.repeat(1, t0), None);
        cache.record(1, "e.1".into(), 1, t0);
        assert_eq!(cache.repeat(1, t0), Some(series("e.1", 2)));
        cache.record(1, "e.1".into(), 2, t0);
        // Past half the TTL it is in the older generation, still found.
        let t1 = t0 + SERIES_TTL / 2 + Duration::from_secs(1);
        assert_eq!(cache.repeat(1, t1), Some(series("e.1", 3)));
        // Seen again, it moves to the newer one and lives on.
        cache.record(1, "e.1".into(), 3, t1);
        let t2 = t1 + SERIES_TTL / 2 + Duration::from_secs(1);
        assert_eq!(cache.repeat(1, t2), Some(series("e.1", 4)));
        // Not seen for a whole TTL: forgotten.
        let t3 = t2 + SERIES_TTL;
        assert_eq!(cache.repeat(1, t3), None);
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn an_unrepeated_event_is_forgotten_after_two_generations() {
        let t0 = Instant::now();
        let mut cache = SeriesCache::new(t0);
        cache.record(7, "e.7".into(), 1, t0);
        let half = SERIES_TTL / 2 + Duration::from_secs(1);
        cache.record(8, "e.8".into(), 1, t0 + half);
        assert_eq!(cache.repeat(7, t0 + half), Some(series("e.7", 2)));
        assert_eq!(cache.repeat(7, t0 + half * 2), None);
        assert_eq!(cache.repeat(8, t0 + half * 2), Some(series("e.8", 2)));
    }

    #[test]
    fn the_cache_never_holds_more_than_its_capacity() {
        let t0 = Instant::now();
        let mut cache = SeriesCache::new(t0);
        for key in 0..(3 * SERIES_CAPACITY as u64) {
            cache.record(key, format!("e.{key}"), 1, t0);
            assert!(cache.len() <= SERIES_CAPACITY, "{} entries", cache.len());
        }
        // The newest are remembered, the oldest forgotten.
        let last = 3 * SERIES_CAPACITY as u64 - 1;
        assert!(cache.repeat(last, t0).is_some());
        assert_eq!(cache.repeat(0, t0), None);
    }

    fn reference(name: &str, uid: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("diengine.opendilab.org/v2alpha1".into()),
            kind: Some("DIJob".into()),
            namespace: Some("ns".into()),
            name: Some(name.into()),
            uid: Some(uid.into()),
            ..ObjectReference::default()
        }
    }

    fn event(reason: &str, action: &str, secondary: Option<ObjectReference>) -> Event {
        Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some("n".into()),
            action: action.into(),
            secondary,
        }
    }

    #[test]
    fn series_keys_differ_in_every_part_that_makes_a_series() {
        let base = series_key(&event("R", "A", None), &reference("j", "u"));
        assert_eq!(
            base,
            series_key(&event("R", "A", None), &reference("j", "u"))
        );
        let mut warning = event("R", "A", None);
        warning.type_ = EventType::Warning;
        for other in [
            series_key(&warning, &reference("j", "u")),
            series_key(&event("R2", "A", None), &reference("j", "u")),
            series_key(&event("R", "A2", None), &reference("j", "u")),
            series_key(&event("R", "A", None), &reference("j2", "u")),
            series_key(&event("R", "A", None), &reference("j", "u2")),
            series_key(
                &event("R", "A", Some(reference("p", "pu"))),
                &reference("j", "u"),
            ),
        ] {
            assert_ne!(base, other);
        }
        // Only the note differs: one series (the note's digest belongs in `action`).
        let mut noted = event("R", "A", None);
        noted.note = Some("other".into());
        assert_eq!(base, series_key(&noted, &reference("j", "u")));
    }

    type Calls = Arc<Mutex<Vec<(String, String, Value)>>>;

    /// A client whose requests are recorded as `(method, path, body)` and answered with the
    /// status `answer` gives for each (201/200 with the body echoed back, or an error).
    fn mock(answer: impl Fn(&str) -> u16 + Send + Sync + 'static) -> (Client, Calls) {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let (seen, answer) = (calls.clone(), Arc::new(answer));
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let (seen, answer) = (seen.clone(), answer.clone());
            async move {
                let (parts, body) = req.into_parts();
                let bytes = body.collect().await?.to_bytes();
                let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                let method = parts.method.to_string();
                let code = answer(&method);
                seen.lock()
                    .unwrap()
                    .push((method, parts.uri.path().to_string(), body.clone()));
                let reply = if code < 300 {
                    body
                } else {
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": "gone", "reason": "NotFound", "code": code})
                };
                Ok::<_, kube::Error>(
                    http::Response::builder()
                        .status(code)
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(
                            serde_json::to_vec(&reply).expect("JSON"),
                        ))
                        .expect("response"),
                )
            }
        });
        (Client::new(service, "default"), calls)
    }

    fn reporter() -> Reporter {
        Reporter {
            controller: "diorch".into(),
            instance: Some("diorch-0".into()),
        }
    }

    #[tokio::test]
    async fn a_repeat_patches_only_the_series_of_the_first_event() {
        let (client, calls) = mock(|method| if method == "POST" { 201 } else { 200 });
        let recorder = Recorder::new(client, reporter());
        let job = reference("j", "u");
        let ev = event("Waiting", "Reconcile-1", None);
        for _ in 0..3 {
            recorder.publish(&ev, &job).await.expect("published");
        }
        recorder
            .publish(&event("Other", "Reconcile-2", None), &job)
            .await
            .expect("published");
        let calls = calls.lock().unwrap().clone();
        let methods: Vec<&str> = calls.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(methods, ["POST", "PATCH", "PATCH", "POST"]);
        let (_, path, created) = &calls[0];
        assert_eq!(path, "/apis/events.k8s.io/v1/namespaces/ns/events");
        let name = created["metadata"]["name"].as_str().expect("name");
        assert!(name.starts_with("j."), "{name}");
        assert_eq!(created["reason"], "Waiting");
        assert_eq!(created["reportingController"], "diorch");
        assert_eq!(created["reportingInstance"], "diorch-0");
        assert_eq!(created["regarding"]["uid"], "u");
        assert_eq!(created["type"], "Normal");
        for (i, count) in [(1, 2), (2, 3)] {
            let (_, path, patch) = &calls[i];
            assert_eq!(
                path,
                &format!("/apis/events.k8s.io/v1/namespaces/ns/events/{name}")
            );
            assert_eq!(patch["series"]["count"], count);
            assert!(patch["series"]["lastObservedTime"].is_string(), "{patch}");
            // Only the series: not the whole Event again.
            assert_eq!(patch.as_object().map(|o| o.len()), Some(1), "{patch}");
        }
        assert_ne!(calls[3].2["metadata"]["name"], name);
    }

    #[tokio::test]
    async fn a_series_whose_event_is_gone_starts_a_new_event() {
        let (client, calls) = mock(|method| if method == "POST" { 201 } else { 404 });
        let recorder = Recorder::new(client, reporter());
        let ev = event("Waiting", "Reconcile-1", None);
        recorder
            .publish(&ev, &reference("j", "u"))
            .await
            .expect("first");
        recorder
            .publish(&ev, &reference("j", "u"))
            .await
            .expect("second");
        let calls = calls.lock().unwrap().clone();
        let methods: Vec<&str> = calls.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(methods, ["POST", "PATCH", "POST"]);
    }

    #[tokio::test]
    async fn a_refused_create_is_an_error_and_starts_no_series() {
        let (client, calls) = mock(|_| 403);
        let recorder = Recorder::new(client, reporter());
        let ev = event("Waiting", "Reconcile-1", None);
        assert!(recorder.publish(&ev, &reference("j", "u")).await.is_err());
        assert!(recorder.publish(&ev, &reference("j", "u")).await.is_err());
        let calls = calls.lock().unwrap().clone();
        let methods: Vec<&str> = calls.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(methods, ["POST", "POST"]);
    }
}
