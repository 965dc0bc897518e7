//! The controller's caches of the operator's pods (by name, and by job with a version per
//! job) and services, kept from their watches; and the split of the one pod watch between the
//! allocator (every pod) and the controller (the operator's pods).
//!
//! Owns [`PodCache`], [`ServiceCache`] and [`split_pod_event`]. The cached shapes and their
//! trimming are `diorch_core::cached`. Reads only; never writes to the API.
//!
//! Hand-written instead of kube's reflector `Store`: that store keys each object by an
//! `ObjectRef` of four strings (~100 B inline and four allocations) and needs kube's
//! `Resource` trait, which ties the cached shape to the full `ObjectMeta` (~370 B before any
//! data). These key each object by one `namespace/name` string, and the pod cache is its own
//! index by job, so a reconcile reads its job's pods with one lookup.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use diorch_core::cached::{CachedMeta, CachedPod, CachedService, PodLabel};
use diorch_core::key::ObjectKey;
use diorch_core::model::UsagePod;
use diorch_core::watched::WatchedPod;
use kube::runtime::watcher;

/// (namespace, `diengine/job` label value).
pub type JobKey = (String, String);

/// Set once a cache has taken its watch's first full list.
#[derive(Clone)]
struct Ready(Arc<tokio::sync::watch::Sender<bool>>);

impl Default for Ready {
    fn default() -> Ready {
        Ready(Arc::new(tokio::sync::watch::Sender::new(false)))
    }
}

impl Ready {
    fn set(&self) {
        self.0.send_replace(true);
    }

    async fn wait(&self) {
        // Never an error: the sender lives as long as `self`.
        let _ = self.0.subscribe().wait_for(|ready| *ready).await;
    }
}

/// The job that controls an object, by its owner reference: whom a change to it concerns.
pub fn owner_key(meta: &CachedMeta) -> Option<ObjectKey> {
    let owner = meta.owner.as_ref()?;
    Some(ObjectKey::new(meta.namespace.clone()?, owner.name.clone()))
}

/// The operator's pods, kept from the pod watch: by `namespace/name`, and by job (its
/// `diengine/job` label) with a version per job, so that a reconcile looks up its job's pods
/// instead of scanning the whole cache.
#[derive(Clone, Default)]
pub struct PodCache {
    inner: Arc<RwLock<PodState>>,
    ready: Ready,
}

#[derive(Default)]
struct PodState {
    pods: Pods,
    /// Built during a watch re-list, swapped in at its end (as kube's reflector does).
    rebuilding: Option<Pods>,
    /// Last sequence number given out; only grows, so a number is never reused for a job.
    seq: u64,
}

/// What one pod's insertion changed.
#[derive(Default)]
struct Inserted {
    /// The jobs whose cached pods changed.
    touched: Vec<JobKey>,
    /// Whether anything a DIJob's pass reads changed (`CachedPod::same_for_a_pass`).
    for_a_pass: bool,
}

#[derive(Default)]
struct Pods {
    by_name: HashMap<Box<str>, Arc<CachedPod>>,
    by_job: HashMap<JobKey, JobPods>,
}

/// One job's pods, sorted by name, and their version.
#[derive(Default)]
struct JobPods {
    pods: Vec<Arc<CachedPod>>,
    /// The sequence number of the last pod event the cache has applied for this job: equal
    /// numbers mean the job's cached pods have not changed in between. `None` until the cache
    /// has applied one since the entry was made.
    version: Option<u64>,
}

fn name_of(pod: &CachedPod) -> &str {
    pod.metadata.name.as_deref().unwrap_or_default()
}

fn job_key(pod: &CachedPod) -> Option<JobKey> {
    let job = pod.label(PodLabel::Job)?;
    Some((pod.metadata.namespace.clone()?, job.to_string()))
}

impl Pods {
    /// Caches `pod`; answers the jobs whose pods changed.
    fn insert(&mut self, pod: CachedPod) -> Inserted {
        let Some(key) = pod.metadata.key() else {
            return Inserted::default();
        };
        // A copy, not the decoded pod: the decode made what the cache keeps amid what it drops,
        // and those kept parts would pin part-used pages; a copy packs them together (RSS per
        // job on the real server at 2 000 jobs: 21.0 KiB kept as decoded, 19.9 KiB copied).
        let pod = Arc::new(pod.clone());
        let old = self.by_name.insert(key.into_boxed_str(), pod.clone());
        let for_a_pass = old.as_ref().is_none_or(|old| !old.same_for_a_pass(&pod));
        let mut touched = Vec::new();
        let job = job_key(&pod);
        // A pod whose job label changed leaves its old job.
        if let Some(old) = old
            && let Some(was) = job_key(&old)
            && Some(&was) != job.as_ref()
        {
            self.remove_from_job(&was, name_of(&old));
            touched.push(was);
        }
        if let Some(job) = job {
            let pods = &mut self.by_job.entry(job.clone()).or_default().pods;
            match pods.binary_search_by(|p| name_of(p).cmp(name_of(&pod))) {
                Ok(at) => pods[at] = pod,
                Err(at) => pods.insert(at, pod),
            }
            touched.push(job);
        }
        Inserted {
            touched,
            for_a_pass,
        }
    }

    /// Drops the pod keyed as `pod` is; answers the job whose pods changed.
    fn remove(&mut self, pod: &CachedPod) -> Option<JobKey> {
        let old = self.by_name.remove(pod.metadata.key()?.as_str())?;
        let job = job_key(&old)?;
        self.remove_from_job(&job, name_of(&old));
        Some(job)
    }

    fn remove_from_job(&mut self, job: &JobKey, name: &str) {
        if let Some(entry) = self.by_job.get_mut(job) {
            if let Ok(at) = entry.pods.binary_search_by(|p| name_of(p).cmp(name)) {
                entry.pods.remove(at);
            }
            // Its version goes too: no version only means no cached answer.
            if entry.pods.is_empty() {
                self.by_job.remove(job);
            }
        }
    }
}

impl PodCache {
    /// Applies one pod watch event. Answers whether it changed anything a pass of the pod's
    /// job reads: a pod's binding to a node changes only what the replica API reports.
    pub fn apply(&self, event: watcher::Event<CachedPod>) -> bool {
        // A poisoned lock only means another thread panicked mid-update; the maps are still
        // valid maps, and the next re-list rebuilds them.
        let mut state = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let state = &mut *state;
        let (touched, for_a_pass) = match event {
            watcher::Event::Apply(pod) => {
                let inserted = state.pods.insert(pod);
                (inserted.touched, inserted.for_a_pass)
            }
            watcher::Event::Delete(pod) => (state.pods.remove(&pod).into_iter().collect(), true),
            watcher::Event::Init => {
                state.rebuilding = Some(Pods::default());
                (Vec::new(), true)
            }
            watcher::Event::InitApply(pod) => {
                if let Some(pods) = state.rebuilding.as_mut() {
                    pods.insert(pod);
                }
                // A re-list may follow missed events: each listed pod's job gets a pass.
                (Vec::new(), true)
            }
            watcher::Event::InitDone => {
                if let Some(pods) = state.rebuilding.take() {
                    state.pods = pods;
                }
                // Every job's pods may differ from what was cached before the re-list.
                state.seq += 1;
                for pods in state.pods.by_job.values_mut() {
                    pods.version = Some(state.seq);
                }
                self.ready.set();
                return true;
            }
        };
        state.seq += 1;
        for job in touched {
            if let Some(pods) = state.pods.by_job.get_mut(&job) {
                pods.version = Some(state.seq);
            }
        }
        for_a_pass
    }

    /// Resolves once the cache has taken the watch's first full list.
    pub async fn wait_until_ready(&self) {
        self.ready.wait().await;
    }

    /// The cached pod `name` in `namespace`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<CachedPod>> {
        let state = self.inner.read().unwrap_or_else(|e| e.into_inner());
        state
            .pods
            .by_name
            .get(format!("{namespace}/{name}").as_str())
            .cloned()
    }

    /// The version of `job`'s cached pods in `namespace`, if it has any and the cache has
    /// applied an event for them since the start.
    pub fn version(&self, namespace: &str, job: &str) -> Option<u64> {
        let state = self.inner.read().unwrap_or_else(|e| e.into_inner());
        state
            .pods
            .by_job
            .get(&(namespace.to_string(), job.to_string()))
            .and_then(|pods| pods.version)
    }

    /// The pods labelled with `job` in `namespace`, sorted by name.
    pub fn pods_of(&self, namespace: &str, job: &str) -> Vec<Arc<CachedPod>> {
        let state = self.inner.read().unwrap_or_else(|e| e.into_inner());
        state
            .pods
            .by_job
            .get(&(namespace.to_string(), job.to_string()))
            .map(|pods| pods.pods.clone())
            .unwrap_or_default()
    }
}

/// The operator's services, kept from the service watch by `namespace/name`.
#[derive(Clone, Default)]
pub struct ServiceCache {
    inner: Arc<RwLock<ServiceState>>,
    ready: Ready,
}

#[derive(Default)]
struct ServiceState {
    by_name: HashMap<Box<str>, Arc<CachedService>>,
    rebuilding: Option<HashMap<Box<str>, Arc<CachedService>>>,
}

impl ServiceCache {
    /// Applies one service watch event.
    pub fn apply(&self, event: watcher::Event<CachedService>) {
        let mut state = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let insert = |map: &mut HashMap<Box<str>, Arc<CachedService>>, svc: CachedService| {
            if let Some(key) = svc.metadata.key() {
                // A copy, as for pods (`Pods::insert`).
                map.insert(key.into_boxed_str(), Arc::new(svc.clone()));
            }
        };
        match event {
            watcher::Event::Apply(svc) => insert(&mut state.by_name, svc),
            watcher::Event::Delete(svc) => {
                if let Some(key) = svc.metadata.key() {
                    state.by_name.remove(key.as_str());
                }
            }
            watcher::Event::Init => state.rebuilding = Some(HashMap::new()),
            watcher::Event::InitApply(svc) => {
                if let Some(map) = state.rebuilding.as_mut() {
                    insert(map, svc);
                }
            }
            watcher::Event::InitDone => {
                if let Some(map) = state.rebuilding.take() {
                    state.by_name = map;
                }
                self.ready.set();
            }
        }
    }

    /// Resolves once the cache has taken the watch's first full list.
    pub async fn wait_until_ready(&self) {
        self.ready.wait().await;
    }

    /// The cached service `name` in `namespace`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<CachedService>> {
        let state = self.inner.read().unwrap_or_else(|e| e.into_inner());
        state
            .by_name
            .get(format!("{namespace}/{name}").as_str())
            .cloned()
    }
}

/// One event of the watch of every pod as the allocator's book takes it, and as the
/// controller's pod cache takes it, if at all: only the operator's pods are the controller's.
/// `cached` answers the controller's cached pod of the same name, if any: a pod that stopped
/// being the operator's (its label removed) leaves the controller's cache as if deleted, as a
/// label-selected watch would have said.
pub fn split_pod_event(
    event: watcher::Event<WatchedPod>,
    cached: impl Fn(&WatchedPod) -> Option<Arc<CachedPod>>,
) -> (watcher::Event<UsagePod>, Option<watcher::Event<CachedPod>>) {
    match event {
        watcher::Event::Apply(pod) => {
            let before = (!pod.is_operators()).then(|| cached(&pod)).flatten();
            let (usage, mine) = pod.split();
            let controller = match (mine, before) {
                (Some(pod), _) => Some(watcher::Event::Apply(pod)),
                (None, Some(gone)) => Some(watcher::Event::Delete(CachedPod::clone(&gone))),
                (None, None) => None,
            };
            (watcher::Event::Apply(usage), controller)
        }
        watcher::Event::Delete(pod) => {
            let before = (!pod.is_operators()).then(|| cached(&pod)).flatten();
            let (usage, mine) = pod.split();
            let controller = mine
                .or_else(|| before.map(|gone| CachedPod::clone(&gone)))
                .map(watcher::Event::Delete);
            (watcher::Event::Delete(usage), controller)
        }
        watcher::Event::InitApply(pod) => {
            let (usage, mine) = pod.split();
            (
                watcher::Event::InitApply(usage),
                mine.map(watcher::Event::InitApply),
            )
        }
        watcher::Event::Init => (watcher::Event::Init, Some(watcher::Event::Init)),
        watcher::Event::InitDone => (watcher::Event::InitDone, Some(watcher::Event::InitDone)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A pod of `job` in namespace `ns`: all the index reads.
    fn pod(name: &str, job: &str) -> CachedPod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "labels": {"diengine/job": job}}
        }))
        .expect("pod")
    }

    fn names(pods: Vec<Arc<CachedPod>>) -> Vec<String> {
        pods.iter().map(|p| name_of(p).to_string()).collect()
    }

    #[test]
    fn a_job_version_moves_on_with_each_event_of_its_pods_only() {
        let cache = PodCache::default();
        assert_eq!(cache.version("ns", "j"), None);
        cache.apply(watcher::Event::Apply(pod("a", "j")));
        let first = cache.version("ns", "j").expect("a version");
        cache.apply(watcher::Event::Apply(pod("b", "j")));
        let second = cache.version("ns", "j").expect("a version");
        assert_ne!(second, first);
        cache.apply(watcher::Event::Apply(pod("c", "k")));
        assert_eq!(cache.version("ns", "j"), Some(second));
        cache.apply(watcher::Event::Delete(pod("a", "j")));
        let third = cache.version("ns", "j").expect("a version");
        assert!(third != second && third != first);
        // The last pod gone: no version, and the next pod never gets an earlier number.
        cache.apply(watcher::Event::Delete(pod("b", "j")));
        assert_eq!(cache.version("ns", "j"), None);
        cache.apply(watcher::Event::Apply(pod("d", "j")));
        assert!(cache.version("ns", "j").is_some_and(|v| v > third));
        // A re-list ends with a new version for every job it found.
        let before = cache.version("ns", "k");
        cache.apply(watcher::Event::Init);
        cache.apply(watcher::Event::InitApply(pod("c", "k")));
        assert_eq!(cache.version("ns", "k"), before);
        cache.apply(watcher::Event::InitDone);
        assert!(cache.version("ns", "k").is_some_and(|v| Some(v) != before));
        assert_eq!(cache.version("ns", "j"), None);
    }

    #[test]
    fn a_binding_is_cached_and_versioned_but_brings_no_pass_and_any_other_change_does() {
        let cache = PodCache::default();
        let spec = |node: Option<&str>| {
            serde_json::from_value(
                json!({"nodeName": node, "containers": [{"name": "di-container"}]}),
            )
            .expect("spec")
        };
        let mut created = pod("a", "j");
        created.spec = Some(spec(None));
        assert!(cache.apply(watcher::Event::Apply(created)), "a new pod");
        let before = cache.version("ns", "j");
        let mut bound = pod("a", "j");
        bound.spec = Some(spec(Some("n1")));
        assert!(!cache.apply(watcher::Event::Apply(bound.clone())));
        // The replica API reports the node, and its answers follow the version.
        assert_eq!(cache.get("ns", "a").as_deref(), Some(&bound));
        assert_ne!(cache.version("ns", "j"), before);
        let mut running = bound.clone();
        running.status = Some(serde_json::from_value(json!({"phase": "Running"})).expect("status"));
        assert!(cache.apply(watcher::Event::Apply(running.clone())));
        assert!(
            !cache.apply(watcher::Event::Apply(running.clone())),
            "the same again"
        );
        assert!(cache.apply(watcher::Event::Delete(running)));
        assert!(cache.apply(watcher::Event::Init));
        assert!(cache.apply(watcher::Event::InitApply(bound)));
        assert!(cache.apply(watcher::Event::InitDone));
    }

    #[test]
    fn the_pod_cache_follows_watch_events_and_relists() {
        let cache = PodCache::default();
        cache.apply(watcher::Event::Apply(pod("b", "j")));
        cache.apply(watcher::Event::Apply(pod("a", "j")));
        cache.apply(watcher::Event::Apply(pod("c", "k")));
        assert_eq!(names(cache.pods_of("ns", "j")), ["a", "b"]);
        assert!(cache.get("ns", "c").is_some() && cache.get("other", "c").is_none());
        // An update replaces the cached pod, in its job too.
        let mut ready = pod("a", "j");
        ready.status = Some(Default::default());
        cache.apply(watcher::Event::Apply(ready.clone()));
        assert_eq!(cache.pods_of("ns", "j")[0].as_ref(), &ready);
        assert_eq!(cache.get("ns", "a").as_deref(), Some(&ready));
        cache.apply(watcher::Event::Delete(pod("a", "j")));
        assert_eq!(names(cache.pods_of("ns", "j")), ["b"]);
        assert!(cache.get("ns", "a").is_none());
        assert!(cache.pods_of("other", "j").is_empty());
        // A re-list replaces the cache atomically at its end.
        cache.apply(watcher::Event::Init);
        cache.apply(watcher::Event::InitApply(pod("d", "j")));
        assert_eq!(
            names(cache.pods_of("ns", "j")),
            ["b"],
            "old view until InitDone"
        );
        cache.apply(watcher::Event::InitDone);
        assert_eq!(names(cache.pods_of("ns", "j")), ["d"]);
        assert!(cache.pods_of("ns", "k").is_empty());
        assert!(cache.get("ns", "b").is_none());
    }

    #[test]
    fn a_pod_whose_job_label_changes_leaves_its_old_job() {
        let cache = PodCache::default();
        cache.apply(watcher::Event::Apply(pod("a", "j")));
        cache.apply(watcher::Event::Apply(pod("b", "j")));
        let before = cache.version("ns", "j");
        cache.apply(watcher::Event::Apply(pod("a", "k")));
        assert_eq!(names(cache.pods_of("ns", "j")), ["b"]);
        assert_eq!(names(cache.pods_of("ns", "k")), ["a"]);
        assert_ne!(
            cache.version("ns", "j"),
            before,
            "the old job's pods changed"
        );
        // Deleted as the watch last showed it, wherever the cache holds it.
        cache.apply(watcher::Event::Delete(pod("a", "other")));
        assert!(cache.pods_of("ns", "k").is_empty());
        assert_eq!(cache.version("ns", "k"), None);
        // A pod without a job label is cached by name only.
        let mut bare = pod("c", "j");
        bare.tags = Default::default();
        cache.apply(watcher::Event::Apply(bare));
        assert!(cache.get("ns", "c").is_some());
        assert_eq!(names(cache.pods_of("ns", "j")), ["b"]);
    }

    #[tokio::test]
    async fn caches_are_ready_after_their_first_list_only() {
        use futures::FutureExt;
        let pods = PodCache::default();
        let services = ServiceCache::default();
        assert!(pods.wait_until_ready().now_or_never().is_none());
        assert!(services.wait_until_ready().now_or_never().is_none());
        pods.apply(watcher::Event::Init);
        pods.apply(watcher::Event::InitApply(pod("a", "j")));
        assert!(pods.wait_until_ready().now_or_never().is_none());
        pods.apply(watcher::Event::InitDone);
        services.apply(watcher::Event::Init);
        services.apply(watcher::Event::InitDone);
        assert!(pods.wait_until_ready().now_or_never().is_some());
        assert!(services.wait_until_ready().now_or_never().is_some());
    }

    #[test]
    fn the_service_cache_follows_watch_events_and_relists() {
        let svc = |name: &str| -> CachedService {
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns"}}))
                .expect("service")
        };
        let cache = ServiceCache::default();
        cache.apply(watcher::Event::Apply(svc("a")));
        cache.apply(watcher::Event::Apply(svc("b")));
        assert!(cache.get("ns", "a").is_some() && cache.get("other", "a").is_none());
        cache.apply(watcher::Event::Delete(svc("a")));
        assert!(cache.get("ns", "a").is_none());
        cache.apply(watcher::Event::Init);
        cache.apply(watcher::Event::InitApply(svc("c")));
        assert!(cache.get("ns", "b").is_some(), "old view until InitDone");
        cache.apply(watcher::Event::InitDone);
        assert!(cache.get("ns", "b").is_none() && cache.get("ns", "c").is_some());
    }

    fn watched(name: &str, operator: bool) -> WatchedPod {
        let mut labels = json!({"diengine/job": "j"});
        if operator {
            labels["diengine/operator"] = json!("di-operator");
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": {"nodeName": "n1", "containers": [{"name": "di-container",
                "resources": {"requests": {"cpu": "1"}}}]}
        }))
        .expect("pod")
    }

    #[test]
    fn the_pod_watch_splits_into_every_pod_for_the_allocator_and_the_operators_for_the_controller()
    {
        let none = |_: &WatchedPod| None;
        let name = |e: &Option<watcher::Event<CachedPod>>| match e {
            Some(watcher::Event::Apply(p)) => {
                format!("apply {}", p.metadata.name.clone().unwrap_or_default())
            }
            Some(watcher::Event::Delete(p)) => {
                format!("delete {}", p.metadata.name.clone().unwrap_or_default())
            }
            Some(watcher::Event::InitApply(p)) => {
                format!("init-apply {}", p.metadata.name.clone().unwrap_or_default())
            }
            Some(watcher::Event::Init) => "init".into(),
            Some(watcher::Event::InitDone) => "init-done".into(),
            None => "-".into(),
        };
        let (usage, mine) = split_pod_event(watcher::Event::Apply(watched("a", true)), none);
        assert!(
            matches!(usage, watcher::Event::Apply(p) if p.job.as_deref() == Some("j") && p.node.as_deref() == Some("n1"))
        );
        assert_eq!(name(&mine), "apply a");
        let (usage, mine) = split_pod_event(watcher::Event::Apply(watched("b", false)), none);
        assert!(matches!(usage, watcher::Event::Apply(_)));
        assert_eq!(
            name(&mine),
            "-",
            "not the operator's: the controller never sees it"
        );
        // A pod the controller caches loses the operator's label: it leaves the controller's
        // cache, labels and all (so the index drops it from its job).
        let had = |_: &WatchedPod| Some(Arc::new(pod("c", "j")));
        let (_, mine) = split_pod_event(watcher::Event::Apply(watched("c", false)), had);
        assert_eq!(name(&mine), "delete c");
        assert!(
            matches!(&mine, Some(watcher::Event::Delete(p)) if p.label(PodLabel::Job) == Some("j"))
        );
        let (usage, mine) = split_pod_event(watcher::Event::Delete(watched("a", true)), none);
        assert!(matches!(usage, watcher::Event::Delete(_)));
        assert_eq!(name(&mine), "delete a");
        let (_, mine) = split_pod_event(watcher::Event::Delete(watched("b", false)), none);
        assert_eq!(name(&mine), "-");
        let (_, mine) = split_pod_event(watcher::Event::Delete(watched("c", false)), had);
        assert_eq!(name(&mine), "delete c");
        // A re-list reaches both whole; its pods only where they belong.
        let (usage, mine) = split_pod_event(watcher::Event::Init, none);
        assert!(matches!(usage, watcher::Event::Init));
        assert_eq!(name(&mine), "init");
        let (usage, mine) = split_pod_event(watcher::Event::InitApply(watched("b", false)), none);
        assert!(matches!(usage, watcher::Event::InitApply(_)));
        assert_eq!(name(&mine), "-");
        let (_, mine) = split_pod_event(watcher::Event::InitApply(watched("a", true)), none);
        assert_eq!(name(&mine), "init-apply a");
        let (usage, mine) = split_pod_event(watcher::Event::InitDone, none);
        assert!(matches!(usage, watcher::Event::InitDone));
        assert_eq!(name(&mine), "init-done");
    }
}
