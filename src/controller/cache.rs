//! The controller's index from a job to its pods' names, kept in step with the pod watch.
//!
//! Owns [`PodIndex`]. The cached shapes and their trimming are `diorch_core::cached`. Reads
//! only; never writes to the API.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use diorch_core::api::labels;
use diorch_core::cached::CachedPod;
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
    by_job: HashMap<JobKey, BTreeSet<String>>,
    /// Built during a watch re-list, swapped in at its end (as the reflector does).
    rebuilding: Option<HashMap<JobKey, BTreeSet<String>>>,
}

fn job_key(pod: &CachedPod) -> Option<(JobKey, String)> {
    let job = pod.label(labels::JOB)?;
    Some((
        (pod.metadata.namespace.clone()?, job.to_string()),
        pod.metadata.name.clone()?,
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
                    && let Some(names) = state.by_job.get_mut(&key)
                {
                    names.remove(&name);
                    if names.is_empty() {
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

    /// Names of the pods labelled with `job` in `namespace`.
    pub fn pods_of(&self, namespace: &str, job: &str) -> Vec<String> {
        let state = self.inner.read().unwrap_or_else(|e| e.into_inner());
        state
            .by_job
            .get(&(namespace.to_string(), job.to_string()))
            .map(|names| names.iter().cloned().collect())
            .unwrap_or_default()
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
}
