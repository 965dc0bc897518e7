//! The reconcile queue depth (`diorch_reconcile_queue_depth`): DIJobs that something asked to
//! reconcile (a change of the job, of a pod or service it owns, an allocator retry, a new
//! leader) and that no worker has picked up yet. kube-runtime's scheduler keeps its queue to
//! itself, so the controller's trigger streams report here and each reconcile takes its job
//! out, with the same de-duplication (one entry per job) the scheduler applies.
//!
//! Also whether the controller is idle: no job waiting and no reconcile running, which is when
//! informational writes (Events) may go without delaying a job's pod, service or status writes
//! ([`Queue::idle`]).
//!
//! Owns only these counts; it must not delay, drop or reorder a trigger.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Instant;

use kube::runtime::reflector::{ObjectRef, Store};
use prometheus_client::metrics::gauge::Gauge;

use diorch_core::cached::CachedJob;
use diorch_core::key::ObjectKey;

/// Jobs waiting for a worker, and reconciles running.
pub struct Queue {
    waiting: Mutex<HashSet<ObjectKey>>,
    depth: Gauge,
    jobs: Store<CachedJob>,
    /// Jobs waiting plus reconciles running: 0 is idle.
    busy: tokio::sync::watch::Sender<Busy>,
}

#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
struct Busy {
    waiting: usize,
    running: usize,
}

impl Busy {
    fn idle(self) -> bool {
        self.waiting == 0 && self.running == 0
    }
}

/// A reconcile running ([`Queue::started`]); it ends when dropped.
pub struct Running<'a> {
    queue: &'a Queue,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.queue
            .busy
            .send_modify(|b| b.running = b.running.saturating_sub(1));
    }
}

impl Queue {
    pub fn new(depth: Gauge, jobs: Store<CachedJob>) -> Queue {
        Queue {
            waiting: Mutex::new(HashSet::new()),
            depth,
            jobs,
            busy: tokio::sync::watch::Sender::new(Busy::default()),
        }
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, HashSet<ObjectKey>> {
        // Poisoning only follows a panic elsewhere; the set stays meaningful.
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The depth gauge and the busy count follow the set (called with its lock held, so the
    /// two never disagree for long).
    fn publish(&self, waiting: &HashSet<ObjectKey>) {
        self.depth.set(waiting.len() as i64);
        let len = waiting.len();
        self.busy.send_if_modified(|b| {
            let changed = b.waiting != len;
            b.waiting = len;
            changed
        });
    }

    /// A worker took the job `key` and reconciles it until the guard drops.
    pub fn started(&self, key: &ObjectKey) -> Running<'_> {
        self.busy.send_modify(|b| b.running += 1);
        self.done(key);
        Running { queue: self }
    }

    /// Resolves once no job waits for a worker and no reconcile runs, or at `deadline`: work
    /// that must not delay a job's own writes waits for this.
    pub async fn idle(&self, deadline: Instant) {
        let mut busy = self.busy.subscribe();
        // `wait_for` only fails when the sender is gone, and `self` holds it.
        let _ = tokio::time::timeout_at(deadline.into(), busy.wait_for(|b| b.idle())).await;
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
        self.publish(&waiting);
    }

    /// Every cached job is triggered (a new leader reconciles them all).
    pub fn triggered_all(&self) {
        let mut waiting = self.waiting();
        for job in self.jobs.state() {
            waiting.insert(ObjectKey::of(&job.metadata));
        }
        self.publish(&waiting);
    }

    /// A worker took the job `key`, or the job is gone.
    pub fn done(&self, key: &ObjectKey) {
        let mut waiting = self.waiting();
        waiting.remove(key);
        self.publish(&waiting);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    use kube::runtime::watcher;

    fn job(name: &str) -> CachedJob {
        let metadata = ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            ..Default::default()
        };
        let spec = serde_json::value::RawValue::from_string("{}".into()).expect("JSON");
        CachedJob::new(metadata, spec, None).expect("job")
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
        // A trigger from an object a job controls, as the pod and service watches send it.
        let by_owner = |meta: ObjectMeta| {
            let meta = diorch_core::cached::CachedMeta::from(meta);
            if let Some(job) = crate::controller::cache::owner_key(&meta) {
                queue.triggered(job);
            }
        };
        queue.triggered(key("a"));
        by_owner(owned_by("a", true));
        assert_eq!(gauge.get(), 1, "two triggers of one job are one entry");
        by_owner(owned_by("b", false));
        assert_eq!(gauge.get(), 1, "not the controller's: no trigger");
        by_owner(owned_by("gone", true));
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

    #[tokio::test]
    async fn idle_waits_for_every_waiting_job_and_running_reconcile_or_the_deadline() {
        use futures::FutureExt;
        let (store, mut writer) = kube::runtime::reflector::store::<CachedJob>();
        writer.apply_watcher_event(&watcher::Event::Apply(job("a")));
        let queue = Queue::new(Gauge::default(), store);
        let later = Instant::now() + std::time::Duration::from_secs(3600);
        assert!(
            queue.idle(later).now_or_never().is_some(),
            "nothing to do: idle"
        );
        queue.triggered(ObjectKey::new("ns", "a"));
        assert!(queue.idle(later).now_or_never().is_none(), "a job waits");
        let running = queue.started(&ObjectKey::new("ns", "a"));
        assert!(
            queue.idle(later).now_or_never().is_none(),
            "its reconcile runs"
        );
        assert!(
            tokio::time::timeout(
                std::time::Duration::from_secs(5),
                queue.idle(Instant::now())
            )
            .await
            .is_ok(),
            "the deadline passed"
        );
        let idle = queue.idle(later);
        tokio::pin!(idle);
        assert!(futures::poll!(idle.as_mut()).is_pending());
        drop(running);
        assert!(
            tokio::time::timeout(std::time::Duration::from_secs(5), idle)
                .await
                .is_ok(),
            "the reconcile ended: idle"
        );
    }
}
