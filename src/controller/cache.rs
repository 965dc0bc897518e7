//! The controller's index from a job to its pods' names, kept in step with the pod watch, and
//! the split of the one pod watch between the allocator (every pod) and the controller (the
//! operator's pods).
//!
//! Owns [`PodIndex`] and [`split_pod_event`]. The cached shapes and their trimming are
//! `diorch_core::cached`. Reads only; never writes to the API.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use diorch_core::api::labels;
use diorch_core::cached::CachedPod;
use diorch_core::model::UsagePod;
use diorch_core::watched::WatchedPod;
use kube::runtime::watcher;

/// (namespace, `diengine/job` label value).
pub type JobKey = (String, String);

/// Index of pod names per job, maintained from the pod watch events so that a reconcile looks
/// up its job's pods instead of scanning the whole cache.
#[derive(Clone, Default)]
pub struct PodIndex {
    inner: Arc<RwLock<IndexState>>,
}

#[derive(Default)]
struct IndexState {
    by_job: HashMap<JobKey, JobPods>,
    /// Built during a watch re-list, swapped in at its end (as the reflector does).
    rebuilding: Option<HashMap<JobKey, JobPods>>,
    /// Last sequence number given out; only grows, so a number is never reused for a job.
    seq: u64,
}

/// One job's entry: its pods' names and their version, in one map entry (two maps keyed by
/// the job, and a `BTreeSet` of `String`s, took ~0.7 KB per job).
#[derive(Default)]
struct JobPods {
    /// Sorted, without repeats.
    names: Vec<Box<str>>,
    /// The sequence number of the last pod event the pod cache has applied for this job:
    /// equal numbers mean the job's cached pods have not changed in between. `None` until
    /// the cache has applied one since the entry was made.
    version: Option<u64>,
}

impl JobPods {
    fn insert(&mut self, name: &str) {
        if let Err(at) = self.names.binary_search_by(|n| (**n).cmp(name)) {
            self.names.insert(at, name.into());
        }
    }

    fn remove(&mut self, name: &str) {
        if let Ok(at) = self.names.binary_search_by(|n| (**n).cmp(name)) {
            self.names.remove(at);
        }
    }
}

fn job_key(pod: &CachedPod) -> Option<(JobKey, &str)> {
    let job = pod.label(labels::JOB)?;
    Some((
        (pod.metadata.namespace.clone()?, job.to_string()),
        pod.metadata.name.as_deref()?,
    ))
}

impl PodIndex {
    /// Applies one pod watch event; call it on every event before the reflector sees it.
    pub fn apply(&self, event: &watcher::Event<CachedPod>) {
        // A poisoned lock only means another thread panicked mid-update; the map is still a
        // valid map, and the next re-list rebuilds it.
        let mut state = self.inner.write().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Apply(pod) => {
                if let Some((key, name)) = job_key(pod) {
                    state.by_job.entry(key).or_default().insert(name);
                }
            }
            watcher::Event::Delete(pod) => {
                if let Some((key, name)) = job_key(pod)
                    && let Some(pods) = state.by_job.get_mut(&key)
                {
                    pods.remove(name);
                    // Its version goes too: no version only means no cached answer.
                    if pods.names.is_empty() {
                        state.by_job.remove(&key);
                    }
                }
            }
            watcher::Event::Init => state.rebuilding = Some(HashMap::new()),
            watcher::Event::InitApply(pod) => {
                if let (Some((key, name)), Some(map)) = (job_key(pod), state.rebuilding.as_mut()) {
                    map.entry(key).or_default().insert(name);
                }
            }
            watcher::Event::InitDone => {
                if let Some(map) = state.rebuilding.take() {
                    state.by_job = map;
                }
            }
        }
    }

    /// Records that the pod cache has applied `event`: call it on every event after the
    /// reflector has, so a version read before the cache is never newer than what it saw.
    pub fn settled(&self, event: &watcher::Event<CachedPod>) {
        let mut state = self.inner.write().unwrap_or_else(|e| e.into_inner());
        state.seq += 1;
        let seq = state.seq;
        match event {
            watcher::Event::Apply(pod) | watcher::Event::Delete(pod) => {
                if let Some((key, _)) = job_key(pod)
                    && let Some(pods) = state.by_job.get_mut(&key)
                {
                    pods.version = Some(seq);
                }
            }
            // The cache swaps in the re-listed pods at its end: every job's pods may differ.
            watcher::Event::InitDone => {
                for pods in state.by_job.values_mut() {
                    pods.version = Some(seq);
                }
            }
            watcher::Event::Init | watcher::Event::InitApply(_) => {}
        }
    }

    /// The version of `job`'s cached pods in `namespace`, if it has any and the cache has
    /// applied an event for them since the start (see [`PodIndex::settled`]).
    pub fn version(&self, namespace: &str, job: &str) -> Option<u64> {
        let state = self.inner.read().unwrap_or_else(|e| e.into_inner());
        state
            .by_job
            .get(&(namespace.to_string(), job.to_string()))
            .and_then(|pods| pods.version)
    }

    /// Names of the pods labelled with `job` in `namespace`, sorted.
    pub fn pods_of(&self, namespace: &str, job: &str) -> Vec<String> {
        let state = self.inner.read().unwrap_or_else(|e| e.into_inner());
        state
            .by_job
            .get(&(namespace.to_string(), job.to_string()))
            .map(|pods| pods.names.iter().map(|n| n.to_string()).collect())
            .unwrap_or_default()
    }
}

/// One event of the watch of every pod as the allocator's book takes it, and as the
/// controller's pod cache takes it, if at all: only the operator's pods are the controller's.
/// `cached` answers the controller's cached pod of the same name, if any: a pod that stopped
/// being the operator's (its label removed) leaves the controller's cache as if deleted, as a
/// label-selected watch would have said.
pub fn split_pod_event(
    event: watcher::Event<WatchedPod>,
    cached: impl Fn(&WatchedPod) -> Option<CachedPod>,
) -> (watcher::Event<UsagePod>, Option<watcher::Event<CachedPod>>) {
    match event {
        watcher::Event::Apply(pod) => {
            let before = (!pod.is_operators()).then(|| cached(&pod)).flatten();
            let (usage, mine) = pod.split();
            let controller = match (mine, before) {
                (Some(pod), _) => Some(watcher::Event::Apply(pod)),
                (None, Some(gone)) => Some(watcher::Event::Delete(gone)),
                (None, None) => None,
            };
            (watcher::Event::Apply(usage), controller)
        }
        watcher::Event::Delete(pod) => {
            let before = (!pod.is_operators()).then(|| cached(&pod)).flatten();
            let (usage, mine) = pod.split();
            let controller = mine.or(before).map(watcher::Event::Delete);
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

    #[test]
    fn a_job_version_moves_on_with_each_settled_event_of_its_pods_only() {
        let index = PodIndex::default();
        let settle = |event: watcher::Event<CachedPod>| {
            index.apply(&event);
            index.settled(&event);
        };
        assert_eq!(index.version("ns", "j"), None);
        settle(watcher::Event::Apply(pod("a", "j")));
        let first = index.version("ns", "j").expect("a version");
        // Applied but not yet settled: the version has not moved.
        index.apply(&watcher::Event::Apply(pod("b", "j")));
        assert_eq!(index.version("ns", "j"), Some(first));
        index.settled(&watcher::Event::Apply(pod("b", "j")));
        let second = index.version("ns", "j").expect("a version");
        assert_ne!(second, first);
        settle(watcher::Event::Apply(pod("c", "k")));
        assert_eq!(index.version("ns", "j"), Some(second));
        settle(watcher::Event::Delete(pod("a", "j")));
        let third = index.version("ns", "j").expect("a version");
        assert!(third != second && third != first);
        // The last pod gone: no version, and the next pod never gets an earlier number.
        settle(watcher::Event::Delete(pod("b", "j")));
        assert_eq!(index.version("ns", "j"), None);
        settle(watcher::Event::Apply(pod("d", "j")));
        assert!(index.version("ns", "j").is_some_and(|v| v > third));
        // A re-list ends with a new version for every job it found.
        let before = index.version("ns", "k");
        settle(watcher::Event::Init);
        settle(watcher::Event::InitApply(pod("c", "k")));
        assert_eq!(index.version("ns", "k"), before);
        settle(watcher::Event::InitDone);
        assert!(index.version("ns", "k").is_some_and(|v| Some(v) != before));
        assert_eq!(index.version("ns", "j"), None);
    }

    #[test]
    fn index_follows_watch_events_and_relists() {
        let index = PodIndex::default();
        index.apply(&watcher::Event::Apply(pod("a", "j")));
        index.apply(&watcher::Event::Apply(pod("b", "j")));
        index.apply(&watcher::Event::Apply(pod("c", "k")));
        assert_eq!(index.pods_of("ns", "j"), ["a", "b"]);
        index.apply(&watcher::Event::Delete(pod("a", "j")));
        assert_eq!(index.pods_of("ns", "j"), ["b"]);
        assert!(index.pods_of("other", "j").is_empty());
        // A re-list replaces the index atomically at its end.
        index.apply(&watcher::Event::Init);
        index.apply(&watcher::Event::InitApply(pod("d", "j")));
        assert_eq!(index.pods_of("ns", "j"), ["b"], "old view until InitDone");
        index.apply(&watcher::Event::InitDone);
        assert_eq!(index.pods_of("ns", "j"), ["d"]);
        assert!(index.pods_of("ns", "k").is_empty());
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
        let had = |_: &WatchedPod| Some(pod("c", "j"));
        let (_, mine) = split_pod_event(watcher::Event::Apply(watched("c", false)), had);
        assert_eq!(name(&mine), "delete c");
        assert!(
            matches!(&mine, Some(watcher::Event::Delete(p)) if p.label("diengine/job") == Some("j"))
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
