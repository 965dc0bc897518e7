//! The sandbox API server's object store: every object of every resource as an `Arc<Value>`,
//! keyed by resource (group + plural) and (namespace, name), one monotonic resourceVersion
//! counter shared by all resources (as etcd's revision is), a bounded per-resource event
//! history for watches, and historical snapshots for `continue` / `resourceVersionMatch=Exact`.
//!
//! It knows nothing about kinds, validation or HTTP: callers (the `api_*` modules) compute new
//! objects and commit them here with compare-and-swap on resourceVersion. It must not hold
//! locks across awaits, and it never serialises under its lock except to stamp the RV.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use axum::body::Bytes;
use serde_json::Value;
use tokio::sync::{mpsc, watch};

/// Which resource a bucket holds: group ("" for core) and plural.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResKey {
    pub group: String,
    pub plural: String,
}

impl ResKey {
    pub fn new(group: &str, plural: &str) -> Self {
        ResKey {
            group: group.to_string(),
            plural: plural.to_string(),
        }
    }
}

/// (namespace, name); the namespace is empty for cluster-scoped objects.
pub type ObjKey = (String, String);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One committed change. The object's JSON is serialised at most once and shared by every
/// watcher that sends it unchanged.
#[derive(Debug)]
pub struct StoredEvent {
    pub type_: EventType,
    pub rv: u64,
    pub key: ObjKey,
    /// The object after the change (for Deleted: its last state, with the deletion's RV).
    pub object: Arc<Value>,
    /// The object before the change (Modified and Deleted).
    pub prev: Option<Arc<Value>>,
    json: OnceLock<Bytes>,
}

impl StoredEvent {
    /// The object's JSON encoding, computed on first use.
    pub fn object_json(&self) -> &Bytes {
        self.json.get_or_init(|| {
            // ok: a serde_json::Value always serialises.
            Bytes::from(serde_json::to_vec(&*self.object).unwrap_or_default())
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("already exists")]
    AlreadyExists,
    #[error("not found")]
    NotFound,
    /// The stored object's resourceVersion is not the expected one.
    #[error("conflict: stored resourceVersion {current}")]
    Conflict { current: u64 },
    /// The requested resourceVersion predates the event history; `oldest` is the oldest RV
    /// still answerable (the apiserver's "(Y)" in `too old resource version: X (Y)`).
    #[error("too old resource version: {requested} ({oldest})")]
    TooOld { requested: u64, oldest: u64 },
}

struct Bucket {
    objects: BTreeMap<ObjKey, Arc<Value>>,
    history: VecDeque<Arc<StoredEvent>>,
    /// RV of the newest event evicted from `history` (0 when nothing was evicted).
    evicted_rv: u64,
    notify: watch::Sender<u64>,
}

impl Bucket {
    fn new() -> Self {
        Bucket {
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            evicted_rv: 0,
            notify: watch::channel(0).0,
        }
    }

    fn check_history(&self, since: u64) -> Result<(), StoreError> {
        if self.evicted_rv > 0 && since < self.evicted_rv {
            return Err(StoreError::TooOld {
                requested: since,
                oldest: self.evicted_rv,
            });
        }
        Ok(())
    }

    fn events_after(&self, since: u64) -> Vec<Arc<StoredEvent>> {
        let start = self.history.partition_point(|e| e.rv <= since);
        self.history.range(start..).cloned().collect()
    }
}

struct Inner {
    rv: u64,
    buckets: HashMap<ResKey, Bucket>,
    /// uid → where the object lives, for owner lookups.
    uids: HashMap<String, (ResKey, ObjKey)>,
}

impl Inner {
    /// The precondition of a replace or a remove: the stored object, if its resourceVersion is
    /// `expected_rv`, and the resourceVersion the write takes (counted from here on).
    fn next_write(
        &mut self,
        res: &ResKey,
        key: &ObjKey,
        expected_rv: u64,
    ) -> Result<(Arc<Value>, u64), StoreError> {
        let prev = self
            .buckets
            .get(res)
            .and_then(|b| b.objects.get(key))
            .cloned()
            .ok_or(StoreError::NotFound)?;
        let current = rv_of(&prev);
        if current != expected_rv {
            return Err(StoreError::Conflict { current });
        }
        self.rv += 1;
        Ok((prev, self.rv))
    }
}

/// A change as seen by in-process controllers (garbage collector, namespace controller).
pub type Change = (ResKey, Arc<StoredEvent>);

/// The in-memory object store.
pub struct Store {
    inner: RwLock<Inner>,
    history_size: usize,
    subscribers: Mutex<Vec<mpsc::UnboundedSender<Change>>>,
}

fn rv_of(obj: &Value) -> u64 {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn uid_of(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/uid").and_then(Value::as_str)
}

fn stamp_rv(obj: &mut Value, rv: u64) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

/// The resourceVersion stored in an object's metadata (0 when absent or malformed).
pub fn object_rv(obj: &Value) -> u64 {
    rv_of(obj)
}

impl Store {
    /// A store keeping at most `history_size` events per resource for watch resumption.
    pub fn new(history_size: usize) -> Self {
        Store {
            inner: RwLock::new(Inner {
                rv: 1,
                buckets: HashMap::new(),
                uids: HashMap::new(),
            }),
            history_size: history_size.max(1),
            subscribers: Mutex::new(Vec::new()),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Receives every committed change, in RV order.
    pub fn subscribe_changes(&self) -> mpsc::UnboundedReceiver<Change> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.subscribers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(tx);
        rx
    }

    /// The newest resourceVersion handed out.
    pub fn current_rv(&self) -> u64 {
        self.read().rv
    }

    pub fn get(&self, res: &ResKey, key: &ObjKey) -> Option<Arc<Value>> {
        self.read().buckets.get(res)?.objects.get(key).cloned()
    }

    /// Where the object with this uid lives, if it exists.
    pub fn find_uid(&self, uid: &str) -> Option<(ResKey, ObjKey)> {
        self.read().uids.get(uid).cloned()
    }

    /// A consistent snapshot of the current objects (in key order) and its RV.
    pub fn list(&self, res: &ResKey, namespace: Option<&str>) -> (u64, Vec<Arc<Value>>) {
        let inner = self.read();
        let items = inner
            .buckets
            .get(res)
            .map(|b| collect(&b.objects, namespace))
            .unwrap_or_default();
        (inner.rv, items)
    }

    /// The objects as they were at `rv` (which must still be covered by the event history).
    pub fn list_at(
        &self,
        res: &ResKey,
        namespace: Option<&str>,
        rv: u64,
    ) -> Result<Vec<Arc<Value>>, StoreError> {
        let inner = self.read();
        let Some(bucket) = inner.buckets.get(res) else {
            return Ok(Vec::new());
        };
        bucket.check_history(rv)?;
        let later = bucket.events_after(rv);
        if later.is_empty() {
            return Ok(collect(&bucket.objects, namespace));
        }
        let in_ns = |k: &ObjKey| namespace.is_none_or(|ns| k.0 == ns);
        let mut map: BTreeMap<ObjKey, Arc<Value>> = bucket
            .objects
            .iter()
            .filter(|(k, _)| in_ns(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        drop(inner);
        for ev in later.iter().rev().filter(|e| in_ns(&e.key)) {
            match (&ev.type_, &ev.prev) {
                (EventType::Added, _) => {
                    map.remove(&ev.key);
                }
                (_, Some(prev)) => {
                    map.insert(ev.key.clone(), prev.clone());
                }
                (_, None) => {}
            }
        }
        Ok(map.into_values().collect())
    }

    /// All objects (any resource) in a namespace, for namespace deletion.
    pub fn keys_in_namespace(&self, namespace: &str) -> Vec<(ResKey, ObjKey)> {
        let inner = self.read();
        let mut out = Vec::new();
        for (res, bucket) in &inner.buckets {
            let lo = (namespace.to_string(), String::new());
            for (k, _) in bucket.objects.range(lo..) {
                if k.0 != namespace {
                    break;
                }
                out.push((res.clone(), k.clone()));
            }
        }
        out
    }

    /// Events after `since` and the RV up to which the caller is then current, or TooOld.
    pub fn events_since(
        &self,
        res: &ResKey,
        since: u64,
    ) -> Result<(Vec<Arc<StoredEvent>>, u64), StoreError> {
        let inner = self.read();
        let Some(bucket) = inner.buckets.get(res) else {
            return Ok((Vec::new(), inner.rv));
        };
        bucket.check_history(since)?;
        Ok((bucket.events_after(since), inner.rv))
    }

    /// Checks that a watch may start at `since` without having missed events.
    pub fn check_watch_start(&self, res: &ResKey, since: u64) -> Result<(), StoreError> {
        match self.read().buckets.get(res) {
            Some(b) => b.check_history(since),
            None => Ok(()),
        }
    }

    /// A receiver that changes whenever the resource changes.
    pub fn notifier(&self, res: &ResKey) -> watch::Receiver<u64> {
        {
            if let Some(b) = self.read().buckets.get(res) {
                return b.notify.subscribe();
            }
        }
        self.write()
            .buckets
            .entry(res.clone())
            .or_insert_with(Bucket::new)
            .notify
            .subscribe()
    }

    /// Creates an object (metadata.namespace/name already final). Stamps its resourceVersion.
    pub fn create(&self, res: &ResKey, mut obj: Value) -> Result<Arc<Value>, StoreError> {
        let key = key_of(&obj);
        let mut inner = self.write();
        let exists = inner
            .buckets
            .get(res)
            .is_some_and(|b| b.objects.contains_key(&key));
        if exists {
            return Err(StoreError::AlreadyExists);
        }
        inner.rv += 1;
        let rv = inner.rv;
        stamp_rv(&mut obj, rv);
        let obj = Arc::new(obj);
        if let Some(uid) = uid_of(&obj) {
            inner
                .uids
                .insert(uid.to_string(), (res.clone(), key.clone()));
        }
        self.commit(&mut inner, res, EventType::Added, key, obj.clone(), None);
        Ok(obj)
    }

    /// Replaces an object if its stored resourceVersion is `expected_rv`.
    pub fn replace(
        &self,
        res: &ResKey,
        expected_rv: u64,
        mut obj: Value,
    ) -> Result<Arc<Value>, StoreError> {
        let key = key_of(&obj);
        let mut inner = self.write();
        let (prev, rv) = inner.next_write(res, &key, expected_rv)?;
        stamp_rv(&mut obj, rv);
        let obj = Arc::new(obj);
        self.commit(
            &mut inner,
            res,
            EventType::Modified,
            key,
            obj.clone(),
            Some(prev),
        );
        Ok(obj)
    }

    /// Removes an object if its stored resourceVersion is `expected_rv`; returns its last state
    /// stamped with the deletion's RV (what watchers receive).
    pub fn remove(
        &self,
        res: &ResKey,
        key: &ObjKey,
        expected_rv: u64,
    ) -> Result<Arc<Value>, StoreError> {
        let mut inner = self.write();
        let (prev, rv) = inner.next_write(res, key, expected_rv)?;
        let mut last = (*prev).clone();
        stamp_rv(&mut last, rv);
        let last = Arc::new(last);
        if let Some(uid) = uid_of(&prev) {
            inner.uids.remove(uid);
        }
        self.commit(
            &mut inner,
            res,
            EventType::Deleted,
            key.clone(),
            last.clone(),
            Some(prev),
        );
        Ok(last)
    }

    fn commit(
        &self,
        inner: &mut Inner,
        res: &ResKey,
        type_: EventType,
        key: ObjKey,
        obj: Arc<Value>,
        prev: Option<Arc<Value>>,
    ) {
        let rv = inner.rv;
        let bucket = inner.buckets.entry(res.clone()).or_insert_with(Bucket::new);
        match type_ {
            EventType::Deleted => {
                bucket.objects.remove(&key);
            }
            _ => {
                bucket.objects.insert(key.clone(), obj.clone());
            }
        }
        let event = Arc::new(StoredEvent {
            type_,
            rv,
            key,
            object: obj,
            prev,
            json: OnceLock::new(),
        });
        bucket.history.push_back(event.clone());
        while bucket.history.len() > self.history_size {
            if let Some(old) = bucket.history.pop_front() {
                bucket.evicted_rv = old.rv;
            }
        }
        bucket.notify.send_replace(rv);
        let mut subs = self.subscribers.lock().unwrap_or_else(|p| p.into_inner());
        subs.retain(|tx| tx.send((res.clone(), event.clone())).is_ok());
    }
}

fn collect(objects: &BTreeMap<ObjKey, Arc<Value>>, namespace: Option<&str>) -> Vec<Arc<Value>> {
    match namespace {
        None => objects.values().cloned().collect(),
        Some(ns) => objects
            .range((ns.to_string(), String::new())..)
            .take_while(|(k, _)| k.0 == ns)
            .map(|(_, v)| v.clone())
            .collect(),
    }
}

/// The (namespace, name) key of an object from its metadata.
pub fn key_of(obj: &Value) -> ObjKey {
    let s = |p: &str| {
        obj.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    (s("/metadata/namespace"), s("/metadata/name"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(ns: &str, name: &str) -> Value {
        json!({"metadata": {"namespace": ns, "name": name, "uid": format!("u-{name}")}})
    }

    #[test]
    fn rv_is_global_and_monotonic() {
        let s = Store::new(10);
        let pods = ResKey::new("", "pods");
        let cms = ResKey::new("", "configmaps");
        let a = s.create(&pods, pod("a", "x")).unwrap();
        let b = s.create(&cms, pod("a", "y")).unwrap();
        assert!(rv_of(&b) > rv_of(&a));
        assert_eq!(s.current_rv(), rv_of(&b));
        assert_eq!(
            s.create(&pods, pod("a", "x")),
            Err(StoreError::AlreadyExists)
        );
    }

    #[test]
    fn replace_requires_expected_rv() {
        let s = Store::new(10);
        let pods = ResKey::new("", "pods");
        let a = s.create(&pods, pod("a", "x")).unwrap();
        let rv = rv_of(&a);
        let err = s.replace(&pods, rv - 1, pod("a", "x")).unwrap_err();
        assert_eq!(err, StoreError::Conflict { current: rv });
        let b = s.replace(&pods, rv, pod("a", "x")).unwrap();
        assert_eq!(rv_of(&b), rv + 1);
    }

    #[test]
    fn history_eviction_gives_too_old() {
        let s = Store::new(2);
        let pods = ResKey::new("", "pods");
        let first = rv_of(&s.create(&pods, pod("a", "1")).unwrap());
        for i in 2..5 {
            s.create(&pods, pod("a", &i.to_string())).unwrap();
        }
        let err = s.events_since(&pods, first).unwrap_err();
        assert!(matches!(err, StoreError::TooOld { requested, .. } if requested == first));
        let (evs, _) = s.events_since(&pods, s.current_rv() - 1).unwrap();
        assert_eq!(evs.len(), 1);
    }

    #[test]
    fn list_at_reconstructs_past_snapshot() {
        let s = Store::new(100);
        let pods = ResKey::new("", "pods");
        s.create(&pods, pod("a", "1")).unwrap();
        let two = s.create(&pods, pod("a", "2")).unwrap();
        let at = s.current_rv();
        s.create(&pods, pod("a", "3")).unwrap();
        s.remove(&pods, &key_of(&two), rv_of(&two)).unwrap();
        let past = s.list_at(&pods, Some("a"), at).unwrap();
        let names: Vec<_> = past.iter().map(|o| key_of(o).1).collect();
        assert_eq!(names, ["1", "2"]);
        assert_eq!(s.list(&pods, None).1.len(), 2);
    }

    #[test]
    fn namespace_scan_and_uid_index() {
        let s = Store::new(10);
        let pods = ResKey::new("", "pods");
        s.create(&pods, pod("a", "1")).unwrap();
        s.create(&pods, pod("ab", "2")).unwrap();
        assert_eq!(s.keys_in_namespace("a").len(), 1);
        assert_eq!(s.find_uid("u-2").map(|(_, k)| k.0), Some("ab".to_string()));
    }
}
