//! The sandbox's in-process controllers, driven by the store's change feed as the real
//! controllers are driven by informers:
//! - garbage collector (ownerReferences by uid): dependents whose owners are all gone are
//!   deleted in the background (dangling references count as gone); owners with the
//!   `foregroundDeletion` finalizer wait for their blocking dependents, which are deleted
//!   first; owners with the `orphan` finalizer have their references removed from dependents;
//! - namespace controller: a Terminating namespace's content is deleted, then the namespace;
//! - CRD finalizer: a deleted CRD's custom resources are deleted, then the CRD.
//!
//! It acts only through `Api` (so every rule and event applies) and must not touch HTTP.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::watch;

use super::api_core::{Api, DeleteOpts, FOREGROUND, ORPHAN, WriteOptions};
use super::api_crd::CLEANUP_FINALIZER;
use super::store::{Change, EventType, ObjKey, ResKey, StoredEvent};

type ObjRef = (ResKey, ObjKey);

/// Runs the controllers until `stop` turns true.
pub async fn run(api: Arc<Api>, mut stop: watch::Receiver<bool>) {
    let mut changes = api.store.subscribe_changes();
    let mut gc = Controllers::new(api);
    loop {
        tokio::select! {
            change = changes.recv() => match change {
                Some(change) => gc.handle(&change),
                None => return,
            },
            _ = stop.changed() => return,
        }
        // Drain what is already queued before yielding, in order.
        while let Ok(change) = changes.try_recv() {
            gc.handle(&change);
        }
        tokio::task::yield_now().await;
    }
}

fn owner_uids(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r["uid"].as_str().map(str::to_string))
        .collect()
}

fn has_finalizer(obj: &Value, f: &str) -> bool {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|l| l.iter().any(|x| x == f))
}

fn deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp").is_some()
}

fn uid(obj: &Value) -> &str {
    obj.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The controllers' state: which objects depend on which owner uid.
pub struct Controllers {
    api: Arc<Api>,
    dependents: HashMap<String, HashSet<ObjRef>>,
}

impl Controllers {
    pub fn new(api: Arc<Api>) -> Self {
        Controllers {
            api,
            dependents: HashMap::new(),
        }
    }

    /// Processes one committed change.
    pub fn handle(&mut self, (res, ev): &Change) {
        self.index(res, ev);
        let obj = &ev.object;
        let me: ObjRef = (res.clone(), ev.key.clone());
        match ev.type_ {
            EventType::Deleted => {
                // Dependents of a vanished owner may now be orphans of nobody.
                if let Some(deps) = self.dependents.remove(uid(obj)) {
                    for dep in deps {
                        self.collect_if_ownerless(&dep);
                    }
                }
                // Owners waiting for this dependent in foreground may now finish.
                for owner in owner_uids(obj) {
                    self.recheck_owner(&owner);
                }
                if res.group.is_empty() && res.plural == "namespaces" {
                    return;
                }
                if !ev.key.0.is_empty() {
                    self.recheck_namespace(&ev.key.0);
                }
                self.recheck_crd_of(res);
            }
            EventType::Added | EventType::Modified => {
                if ev.type_ == EventType::Added && !owner_uids(obj).is_empty() {
                    self.collect_if_ownerless(&me);
                }
                if deleting(obj) {
                    self.process_deleting(res, ev);
                }
            }
        }
    }

    fn index(&mut self, res: &ResKey, ev: &StoredEvent) {
        let me: ObjRef = (res.clone(), ev.key.clone());
        if let Some(prev) = &ev.prev {
            for o in owner_uids(prev) {
                if let Some(set) = self.dependents.get_mut(&o) {
                    set.remove(&me);
                    if set.is_empty() {
                        self.dependents.remove(&o);
                    }
                }
            }
        }
        if ev.type_ != EventType::Deleted {
            for o in owner_uids(&ev.object) {
                self.dependents.entry(o).or_default().insert(me.clone());
            }
        }
    }

    fn get(&self, r: &ObjRef) -> Option<Arc<Value>> {
        self.api.store.get(&r.0, &r.1)
    }

    fn delete(&self, r: &ObjRef, policy: &str) {
        let Some(info) = self.api.info_for_storage(&r.0) else {
            return;
        };
        let ns = (!r.1.0.is_empty()).then_some(r.1.0.as_str());
        let opts = DeleteOpts {
            propagation: Some(policy.to_string()),
            ..Default::default()
        };
        match self.api.delete(&info, ns, &r.1.1, &opts) {
            Ok(_) => tracing::debug!(resource = info.plural, name = r.1.1, policy, "deleted"),
            Err(e) if e.code == 404 => {}
            Err(e) => {
                tracing::warn!(resource = info.plural, name = r.1.1, error = %e, "delete failed")
            }
        }
    }

    /// Rewrites an object's metadata with `edit` (retrying on conflicts).
    fn edit_meta(&self, r: &ObjRef, edit: &dyn Fn(&mut Value)) {
        let Some(info) = self.api.info_for_storage(&r.0) else {
            return;
        };
        let ns = (!r.1.0.is_empty()).then_some(r.1.0.as_str());
        for _ in 0..8 {
            let Ok(current) = self.api.get(&info, ns, &r.1.1) else {
                return;
            };
            let mut new = (*current).clone();
            edit(&mut new);
            match self
                .api
                .update(&info, ns, &r.1.1, None, new, &WriteOptions::default())
            {
                Ok(_) => return,
                Err(e) if e.code == 409 => continue,
                Err(e) => {
                    tracing::warn!(resource = info.plural, name = r.1.1, error = %e, "update failed");
                    return;
                }
            }
        }
    }

    fn remove_finalizer(&self, r: &ObjRef, f: &'static str) {
        self.edit_meta(r, &|obj| {
            if let Some(list) = obj
                .pointer_mut("/metadata/finalizers")
                .and_then(Value::as_array_mut)
            {
                list.retain(|x| x != f);
            }
        });
    }

    /// Deletes a dependent whose owners are all absent (background).
    fn collect_if_ownerless(&self, dep: &ObjRef) {
        let Some(obj) = self.get(dep) else { return };
        let owners = owner_uids(&obj);
        if owners.is_empty() || deleting(&obj) {
            return;
        }
        let any_alive = owners.iter().any(|o| self.api.store.find_uid(o).is_some());
        if !any_alive {
            self.delete(dep, "Background");
        }
    }

    fn owner_ref(&self, owner_uid: &str) -> Option<ObjRef> {
        self.api.store.find_uid(owner_uid)
    }

    fn recheck_owner(&mut self, owner_uid: &str) {
        let Some(r) = self.owner_ref(owner_uid) else {
            return;
        };
        if let Some(obj) = self.get(&r)
            && deleting(&obj)
            && has_finalizer(&obj, FOREGROUND)
        {
            self.foreground(&r, &obj);
        }
    }

    fn process_deleting(&mut self, res: &ResKey, ev: &StoredEvent) {
        let me: ObjRef = (res.clone(), ev.key.clone());
        let obj = ev.object.clone();
        if has_finalizer(&obj, ORPHAN) {
            let owner = uid(&obj).to_string();
            let deps: Vec<ObjRef> = self
                .dependents
                .get(&owner)
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default();
            for dep in deps {
                let owner = owner.clone();
                self.edit_meta(&dep, &move |o| {
                    if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                        let refs: Vec<Value> = meta
                            .get("ownerReferences")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                            .filter(|r| r["uid"] != owner.as_str())
                            .cloned()
                            .collect();
                        if refs.is_empty() {
                            meta.remove("ownerReferences");
                        } else {
                            meta.insert("ownerReferences".into(), json!(refs));
                        }
                    }
                });
            }
            self.remove_finalizer(&me, ORPHAN);
            return;
        }
        if has_finalizer(&obj, FOREGROUND) {
            self.foreground(&me, &obj);
        }
        if res.group.is_empty() && res.plural == "namespaces" {
            self.recheck_namespace(&ev.key.1);
        }
        if res.group == "apiextensions.k8s.io" && has_finalizer(&obj, CLEANUP_FINALIZER) {
            self.cleanup_crd(&me, &obj);
        }
    }

    /// Foreground deletion: delete dependents; drop the finalizer once none blocks.
    fn foreground(&mut self, me: &ObjRef, obj: &Value) {
        let owner = uid(obj).to_string();
        let deps: Vec<ObjRef> = self
            .dependents
            .get(&owner)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        let mut blocking = false;
        for dep in deps {
            let Some(d) = self.get(&dep) else { continue };
            let blocks = d
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|r| r["uid"] == owner.as_str() && r["blockOwnerDeletion"] == true);
            if !deleting(&d) {
                self.delete(&dep, "Foreground");
            }
            if blocks && self.get(&dep).is_some() {
                blocking = true;
            }
        }
        if !blocking {
            self.remove_finalizer(me, FOREGROUND);
        }
    }

    fn recheck_namespace(&self, ns: &str) {
        let res = ResKey::new("", "namespaces");
        let Some(obj) = self.api.store.get(&res, &(String::new(), ns.to_string())) else {
            return;
        };
        if !deleting(&obj) {
            return;
        }
        let content = self.api.store.keys_in_namespace(ns);
        if content.is_empty() {
            if let Err(e) = self.api.finalize_namespace(ns) {
                tracing::warn!(namespace = ns, error = %e, "cannot finalize namespace");
            }
            return;
        }
        for r in content {
            if self.get(&r).is_some_and(|o| !deleting(&o)) {
                self.delete(&r, "Background");
            }
        }
    }

    fn recheck_crd_of(&self, res: &ResKey) {
        if res.group.is_empty() {
            return;
        }
        let crd_res = ResKey::new("apiextensions.k8s.io", "customresourcedefinitions");
        let key = (String::new(), format!("{}.{}", res.plural, res.group));
        if let Some(crd) = self.api.store.get(&crd_res, &key)
            && deleting(&crd)
            && has_finalizer(&crd, CLEANUP_FINALIZER)
        {
            self.cleanup_crd(&(crd_res, key), &crd);
        }
    }

    fn cleanup_crd(&self, me: &ObjRef, crd: &Value) {
        let group = crd["spec"]["group"].as_str().unwrap_or_default();
        let plural = crd["spec"]["names"]["plural"].as_str().unwrap_or_default();
        let res = ResKey::new(group, plural);
        let (_, items) = self.api.store.list(&res, None);
        if items.is_empty() {
            self.remove_finalizer(me, CLEANUP_FINALIZER);
            return;
        }
        for obj in items {
            if !deleting(&obj) {
                let key = super::store::key_of(&obj);
                self.delete(&(res.clone(), key), "Background");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api_core::WriteOptions;

    fn drain(gc: &mut Controllers, rx: &mut tokio::sync::mpsc::UnboundedReceiver<Change>) {
        while let Ok(c) = rx.try_recv() {
            gc.handle(&c);
        }
    }

    fn cm(api: &Api, name: &str, owner: Option<(&str, &str, bool)>) -> String {
        let info = api.resource("", "v1", "configmaps").unwrap();
        let mut body = json!({"metadata": {"name": name}});
        if let Some((oname, ouid, block)) = owner {
            body["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap",
                "name": oname, "uid": ouid, "blockOwnerDeletion": block}]);
        }
        let w = api
            .create(&info, Some("default"), body, &WriteOptions::default())
            .unwrap();
        w.body["metadata"]["uid"].as_str().unwrap().to_string()
    }

    fn exists(api: &Api, name: &str) -> bool {
        let info = api.resource("", "v1", "configmaps").unwrap();
        api.get(&info, Some("default"), name).is_ok()
    }

    #[test]
    fn background_foreground_orphan_and_dangling() {
        let api = Api::new(10_000);
        let mut rx = api.store.subscribe_changes();
        let mut gc = Controllers::new(api.clone());
        let info = api.resource("", "v1", "configmaps").unwrap();
        let del = |name: &str, policy: &str| {
            let o = DeleteOpts {
                propagation: Some(policy.into()),
                ..Default::default()
            };
            api.delete(&info, Some("default"), name, &o).unwrap();
        };

        // Background: dependent goes after the owner.
        let owner = cm(&api, "o1", None);
        cm(&api, "d1", Some(("o1", &owner, false)));
        drain(&mut gc, &mut rx);
        del("o1", "Background");
        assert!(!exists(&api, "o1"));
        drain(&mut gc, &mut rx);
        assert!(!exists(&api, "d1"));

        // Foreground: owner waits with the finalizer, then goes.
        let owner = cm(&api, "o2", None);
        cm(&api, "d2", Some(("o2", &owner, true)));
        cm(&api, "held", Some(("o2", &owner, true)));
        let held = api.get(&info, Some("default"), "held").unwrap();
        let mut h = (*held).clone();
        h["metadata"]["finalizers"] = json!(["x.io/hold"]);
        api.update(
            &info,
            Some("default"),
            "held",
            None,
            h,
            &WriteOptions::default(),
        )
        .unwrap();
        drain(&mut gc, &mut rx);
        del("o2", "Foreground");
        drain(&mut gc, &mut rx);
        assert!(!exists(&api, "d2"));
        let o2 = api.get(&info, Some("default"), "o2").unwrap();
        assert_eq!(o2["metadata"]["finalizers"], json!(["foregroundDeletion"]));
        let held = api.get(&info, Some("default"), "held").unwrap();
        let mut h = (*held).clone();
        h["metadata"]["finalizers"] = json!([]);
        api.update(
            &info,
            Some("default"),
            "held",
            None,
            h,
            &WriteOptions::default(),
        )
        .unwrap();
        drain(&mut gc, &mut rx);
        assert!(!exists(&api, "o2"));

        // Orphan: dependent stays, without the reference.
        let owner = cm(&api, "o3", None);
        cm(&api, "d3", Some(("o3", &owner, false)));
        drain(&mut gc, &mut rx);
        del("o3", "Orphan");
        drain(&mut gc, &mut rx);
        assert!(!exists(&api, "o3"));
        let d3 = api.get(&info, Some("default"), "d3").unwrap();
        assert!(d3["metadata"]["ownerReferences"].is_null());

        // Dangling reference: collected.
        cm(&api, "d4", Some(("ghost", "no-such-uid", false)));
        drain(&mut gc, &mut rx);
        assert!(!exists(&api, "d4"));
    }

    #[test]
    fn namespace_deletion_removes_content_then_namespace() {
        let api = Api::new(10_000);
        let mut rx = api.store.subscribe_changes();
        let mut gc = Controllers::new(api.clone());
        let ns = api.resource("", "v1", "namespaces").unwrap();
        let cms = api.resource("", "v1", "configmaps").unwrap();
        api.create(
            &ns,
            None,
            json!({"metadata": {"name": "gone"}}),
            &WriteOptions::default(),
        )
        .unwrap();
        api.create(
            &cms,
            Some("gone"),
            json!({"metadata": {"name": "c"}}),
            &WriteOptions::default(),
        )
        .unwrap();
        drain(&mut gc, &mut rx);
        api.delete(&ns, None, "gone", &DeleteOpts::default())
            .unwrap();
        drain(&mut gc, &mut rx);
        assert!(api.get(&cms, Some("gone"), "c").is_err());
        assert_eq!(api.get(&ns, None, "gone").unwrap_err().code, 404);
    }
}
