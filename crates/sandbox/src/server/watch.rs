//! Watch streaming: shared event bytes, selectors (with the ADDED/DELETED a changed match gives),
//! bookmarks, timeouts, Table events, and a too old resourceVersion as an ERROR event.
//!
//! Must not write to the store.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use crate::api_core::{Api, ListOpts, storage_key, to_view};
use crate::api_status::ApiError;
use crate::registry::ResourceInfo;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{EventType, StoreError, StoredEvent};
use crate::table::{self, IncludeObject};

use super::request::{Query, wants_table};
use super::state::AppState;

struct WatchSpec {
    info: Arc<ResourceInfo>,
    namespace: Option<String>,
    label: Option<LabelSelector>,
    field: Option<FieldSelector>,
    start: Option<u64>,
    bookmarks: bool,
    timeout: Duration,
    table: Option<IncludeObject>,
}

pub(super) fn watch(
    state: &Arc<AppState>,
    info: Arc<ResourceInfo>,
    ns: Option<&str>,
    list: ListOpts,
    query: &Query,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    if let Some(f) = &list.field {
        state.api.check_field_selector(&info, f)?;
    }
    let start = match list.resource_version.as_deref() {
        None | Some("") | Some("0") => None,
        Some(s) => Some(
            s.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s}")))?,
        ),
    };
    let table = if wants_table(headers) {
        Some(
            table::parse_include_object(query.get("includeObject"))
                .map_err(|e| ApiError::bad_request(e.to_string()))?,
        )
    } else {
        None
    };
    let timeout = match query.int("timeoutSeconds")? {
        Some(s) if s > 0 => Duration::from_secs(s as u64),
        _ => Duration::from_secs(1800),
    };
    let spec = WatchSpec {
        info,
        namespace: ns.map(str::to_string),
        label: list.label,
        field: list.field,
        start,
        bookmarks: query.flag("allowWatchBookmarks"),
        timeout,
        table,
    };
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(64);
    tokio::spawn(run_watch(
        state.api.clone(),
        spec,
        state.options.bookmark_interval,
        state.stop.clone(),
        tx,
    ));
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    let mut resp = Response::new(Body::from_stream(stream));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}

fn frame(type_: &str, object_json: &[u8]) -> Bytes {
    let mut buf = Vec::with_capacity(object_json.len() + 32);
    buf.extend_from_slice(b"{\"type\":\"");
    buf.extend_from_slice(type_.as_bytes());
    buf.extend_from_slice(b"\",\"object\":");
    buf.extend_from_slice(object_json);
    buf.extend_from_slice(b"}\n");
    Bytes::from(buf)
}

fn too_old_event(e: &StoreError) -> Bytes {
    let msg = match e {
        StoreError::TooOld { requested, oldest } => {
            format!("too old resource version: {requested} ({oldest})")
        }
        other => other.to_string(),
    };
    let status = ApiError::gone(msg).to_status();
    frame("ERROR", &serde_json::to_vec(&status).unwrap_or_default())
}

struct WatchState {
    spec: WatchSpec,
    headers_sent: bool,
}

impl WatchState {
    fn in_scope(&self, ev: &StoredEvent) -> bool {
        self.spec
            .namespace
            .as_ref()
            .is_none_or(|ns| &ev.key.0 == ns)
    }

    fn matches(&self, obj: &Value) -> bool {
        Api::matches(
            &self.spec.info,
            obj,
            self.spec.label.as_ref(),
            self.spec.field.as_ref(),
        )
    }

    fn filtered(&self) -> bool {
        self.spec.label.is_some() || self.spec.field.is_some()
    }

    /// The bytes for one event of a view object, sharing the stored JSON when possible.
    fn encode(&mut self, type_: &str, ev_json: Option<&Bytes>, view: &Value) -> Bytes {
        if let Some(include) = self.spec.table {
            let t = table::render_table_row_event(
                &self.spec.info,
                view,
                include,
                jiff::Timestamp::now(),
                !self.headers_sent,
            );
            self.headers_sent = true;
            return frame(type_, &serde_json::to_vec(&t).unwrap_or_default());
        }
        match ev_json {
            Some(b) => frame(type_, b),
            None => frame(type_, &serde_json::to_vec(view).unwrap_or_default()),
        }
    }

    /// Translates one stored event into at most one frame for this watcher.
    fn event(&mut self, ev: &StoredEvent) -> Option<Bytes> {
        if !self.in_scope(ev) {
            return None;
        }
        let info = self.spec.info.clone();
        let view = to_view(&info, &ev.object);
        let shared = Arc::ptr_eq(&view, &ev.object);
        let type_ = if self.filtered() {
            let now = self.matches(&view);
            let before = match (&ev.type_, &ev.prev) {
                (EventType::Modified, Some(prev)) => self.matches(&to_view(&info, prev)),
                _ => now,
            };
            match (ev.type_, before, now) {
                (EventType::Added, _, true) => EventType::Added,
                (EventType::Deleted, _, true) => EventType::Deleted,
                (EventType::Modified, true, true) => EventType::Modified,
                (EventType::Modified, false, true) => EventType::Added,
                (EventType::Modified, true, false) => EventType::Deleted,
                _ => return None,
            }
        } else {
            ev.type_
        };
        let json = shared.then(|| ev.object_json());
        Some(self.encode(type_.as_str(), json, &view))
    }
}

async fn run_watch(
    api: Arc<Api>,
    spec: WatchSpec,
    bookmark_interval: Duration,
    mut stop: watch::Receiver<bool>,
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
) {
    let res = storage_key(&spec.info);
    let mut changed = api.store.notifier(&res);
    let deadline = tokio::time::Instant::now() + spec.timeout;
    let mut ws = WatchState {
        spec,
        headers_sent: false,
    };
    let mut last = match ws.spec.start {
        Some(rv) => {
            if let Err(e) = api.store.check_watch_start(&res, rv) {
                let _ = tx.send(Ok(too_old_event(&e))).await;
                return;
            }
            rv
        }
        None => {
            let (rv, items) = api.store.list(&res, ws.spec.namespace.as_deref());
            for obj in items {
                let view = to_view(&ws.spec.info, &obj);
                if !ws.matches(&view) {
                    continue;
                }
                let bytes = ws.encode("ADDED", None, &view);
                if tx.send(Ok(bytes)).await.is_err() {
                    return;
                }
            }
            rv
        }
    };
    let mut next_bookmark = tokio::time::Instant::now() + bookmark_interval;
    loop {
        match api.store.events_since(&res, last) {
            Ok((events, upto)) => {
                for ev in &events {
                    if let Some(bytes) = ws.event(ev)
                        && tx.send(Ok(bytes)).await.is_err()
                    {
                        return;
                    }
                }
                last = last.max(upto);
            }
            Err(e) => {
                let _ = tx.send(Ok(too_old_event(&e))).await;
                return;
            }
        }
        if ws.spec.bookmarks && tokio::time::Instant::now() >= next_bookmark {
            let obj = json!({"kind": ws.spec.info.kind, "apiVersion": ws.spec.info.api_version(),
                "metadata": {"resourceVersion": last.to_string()}});
            if tx
                .send(Ok(frame(
                    "BOOKMARK",
                    &serde_json::to_vec(&obj).unwrap_or_default(),
                )))
                .await
                .is_err()
            {
                return;
            }
            next_bookmark = tokio::time::Instant::now() + bookmark_interval;
        }
        tokio::select! {
            r = changed.changed() => {
                if r.is_err() {
                    return;
                }
            }
            _ = tokio::time::sleep_until(next_bookmark), if ws.spec.bookmarks => {}
            _ = tokio::time::sleep_until(deadline) => return,
            _ = stop.changed() => return,
            _ = tx.closed() => return,
        }
    }
}
