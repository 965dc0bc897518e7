//! The reconcile queue depth (`diorch_reconcile_queue_depth`): DIJobs that something asked to
//! reconcile (a change of the job, of a pod or service it owns, an allocator retry, a new
//! leader) and that no worker has picked up yet. kube-runtime's scheduler keeps its queue to
//! itself, so the controller's trigger streams report here and each reconcile takes its job
//! out, with the same de-duplication (one entry per job) the scheduler applies.
//!
//! Owns only this count; it must not delay, drop or reorder a trigger.

use std::collections::HashSet;
use std::sync::Mutex;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use prometheus_client::metrics::gauge::Gauge;

use diorch_core::cached::CachedJob;
use diorch_core::key::ObjectKey;

/// Jobs waiting for a worker.
pub struct Queue {
    waiting: Mutex<HashSet<ObjectKey>>,
    depth: Gauge,
    jobs: Store<CachedJob>,
}

impl Queue {
    pub fn new(depth: Gauge, jobs: Store<CachedJob>) -> Queue {
        Queue {
            waiting: Mutex::new(HashSet::new()),
            depth,
            jobs,
        }
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, HashSet<ObjectKey>> {
        // Poisoning only follows a panic elsewhere; the set stays meaningful.
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A trigger for the job `job`. A job not in the cache is never reconciled (its pods'
    /// deletions after the job's own, for one), so it is not counted.
    pub fn triggered(&self, job: ObjectKey) {
        if self
            .jobs
            .get(&ObjectRef::new(&job.name).within(&job.namespace))
            .is_none()
        {
            return;
        }
        let mut waiting = self.waiting();
        waiting.insert(job);
        self.depth.set(waiting.len() as i64);
    }

    /// A trigger from an object the job owns (the controller's owner reference).
    pub fn triggered_by_owned(&self, meta: &ObjectMeta) {
        let owner = meta.owner_references.iter().flatten().find(|o| {
            o.kind == "DIJob"
                && o.api_version.starts_with("diengine.opendilab.org/")
                && o.controller == Some(true)
        });
        if let Some(owner) = owner {
            self.triggered(ObjectKey::new(
                meta.namespace.clone().unwrap_or_default(),
                owner.name.clone(),
            ));
        }
    }

    /// Every cached job is triggered (a new leader reconciles them all).
    pub fn triggered_all(&self) {
        let mut waiting = self.waiting();
        for job in self.jobs.state() {
            waiting.insert(ObjectKey::of(&job.metadata));
        }
        self.depth.set(waiting.len() as i64);
    }

    /// A worker took the job `key`, or the job is gone.
    pub fn done(&self, key: &ObjectKey) {
        let mut waiting = self.waiting();
        waiting.remove(key);
        self.depth.set(waiting.len() as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::runtime::watcher;

    fn job(name: &str) -> CachedJob {
        CachedJob {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: serde_json::value::RawValue::from_string("{}".into()).expect("JSON"),
            status: None,
        }
    }

    fn owned_by(job: &str, controller: bool) -> ObjectMeta {
        ObjectMeta {
            namespace: Some("ns".into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "diengine.opendilab.org/v2alpha1".into(),
                kind: "DIJob".into(),
                name: job.into(),
                controller: Some(controller),
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn each_waiting_job_counts_once_until_a_worker_takes_it() {
        let (store, mut writer) = kube::runtime::reflector::store::<CachedJob>();
        for name in ["a", "b"] {
            writer.apply_watcher_event(&watcher::Event::Apply(job(name)));
        }
        let gauge = Gauge::default();
        let queue = Queue::new(gauge.clone(), store);
        let key = |name: &str| ObjectKey::new("ns", name);
        queue.triggered(key("a"));
        queue.triggered_by_owned(&owned_by("a", true));
        assert_eq!(gauge.get(), 1, "two triggers of one job are one entry");
        queue.triggered_by_owned(&owned_by("b", false));
        assert_eq!(gauge.get(), 1, "not the controller's: no trigger");
        queue.triggered_by_owned(&owned_by("gone", true));
        queue.triggered(key("gone"));
        assert_eq!(gauge.get(), 1, "a job not in the cache is never reconciled");
        queue.triggered_all();
        assert_eq!(gauge.get(), 2);
        queue.done(&key("a"));
        assert_eq!(gauge.get(), 1);
        queue.done(&key("b"));
        queue.done(&key("b"));
        assert_eq!(gauge.get(), 0);
    }
}
