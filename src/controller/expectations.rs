//! Expectations: the pod creations and deletions this operator has issued for a job and not yet
//! seen in its cache (the pattern of kube-controller-manager's ReplicaSet controller).
//!
//! While a job has unmet expectations its reconcile waits, so a cache that lags behind the
//! operator's own writes never makes it create a pod twice, delete a replacement, or count a
//! transition from a stale view. Expectations expire, so a lost watch event delays a job by at
//! most the timeout and never blocks it. In-memory only: after a restart the fresh cache is
//! the truth.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use diorch_core::cached::CachedPod;
use diorch_core::key::ObjectKey;

/// How long an expectation waits for its watch event.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Default)]
struct Pending {
    creates: BTreeSet<String>,
    /// Uids of pods being deleted.
    deletes: BTreeSet<String>,
    since: Option<Instant>,
}

/// Expectations per job.
pub struct Expectations {
    timeout: Duration,
    jobs: Mutex<HashMap<ObjectKey, Pending>>,
}

impl Default for Expectations {
    fn default() -> Self {
        Expectations::new(DEFAULT_TIMEOUT)
    }
}

impl Expectations {
    pub fn new(timeout: Duration) -> Self {
        Expectations {
            timeout,
            jobs: Mutex::new(HashMap::new()),
        }
    }

    fn jobs(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, Pending>> {
        // A poisoned lock only means a panic elsewhere mid-insert; the map stays usable.
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the creations and deletions about to be issued for `job`.
    pub fn expect(&self, job: &ObjectKey, creates: &[String], deletes: &[String], now: Instant) {
        if creates.is_empty() && deletes.is_empty() {
            return;
        }
        let mut jobs = self.jobs();
        let pending = jobs.entry(job.clone()).or_default();
        pending.creates.extend(creates.iter().cloned());
        pending.deletes.extend(deletes.iter().cloned());
        pending.since.get_or_insert(now);
    }

    /// Forgets a creation that failed (nothing will appear) or a deletion that found nothing.
    pub fn forget(&self, job: &ObjectKey, create: Option<&str>, delete_uid: Option<&str>) {
        let mut jobs = self.jobs();
        if let Some(pending) = jobs.get_mut(job) {
            if let Some(name) = create {
                pending.creates.remove(name);
            }
            if let Some(uid) = delete_uid {
                pending.deletes.remove(uid);
            }
            if pending.creates.is_empty() && pending.deletes.is_empty() {
                jobs.remove(job);
            }
        }
    }

    /// Whether the cache (`pods` of the job) shows everything expected for `job`; met
    /// expectations are dropped, and all of them expire after the timeout.
    pub fn satisfied(&self, job: &ObjectKey, pods: &[&CachedPod], now: Instant) -> bool {
        let mut jobs = self.jobs();
        let Some(pending) = jobs.get_mut(job) else {
            return true;
        };
        pending.creates.retain(|name| {
            !pods
                .iter()
                .any(|p| p.metadata.name.as_deref() == Some(name))
        });
        pending.deletes.retain(|uid| {
            pods.iter().any(|p| {
                p.metadata.uid.as_deref() == Some(uid) && p.metadata.deletion_timestamp.is_none()
            })
        });
        let expired = pending
            .since
            .is_some_and(|since| now.duration_since(since) >= self.timeout);
        if expired || (pending.creates.is_empty() && pending.deletes.is_empty()) {
            if expired {
                tracing::warn!(%job, "expected pod events did not arrive in time; going on");
            }
            jobs.remove(job);
            return true;
        }
        false
    }

    /// Drops everything about a deleted job.
    pub fn remove(&self, job: &ObjectKey) {
        self.jobs().remove(job);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn pod(name: &str, uid: &str) -> CachedPod {
        let mut p = CachedPod::default();
        p.metadata.name = Some(name.into());
        p.metadata.uid = Some(uid.into());
        p
    }

    #[test]
    fn a_job_waits_until_its_creates_and_deletes_are_seen() {
        let e = Expectations::default();
        let j = ObjectKey::new("ns", "j");
        let t0 = Instant::now();
        assert!(e.satisfied(&j, &[], t0), "nothing expected");
        e.expect(&j, &["j-a-0".into(), "j-a-1".into()], &["u-old".into()], t0);
        let old = pod("j-a-9", "u-old");
        let a0 = pod("j-a-0", "u0");
        assert!(
            !e.satisfied(&j, &[&old, &a0], t0),
            "a-1 not seen, old not gone"
        );
        let a1 = pod("j-a-1", "u1");
        assert!(!e.satisfied(&j, &[&old, &a0, &a1], t0), "old still there");
        let mut terminating = old.clone();
        terminating.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        assert!(
            e.satisfied(&j, &[&terminating, &a0, &a1], t0),
            "terminating counts as deleted"
        );
        assert!(e.satisfied(&j, &[], t0), "met expectations are dropped");
    }

    #[test]
    fn failed_calls_are_forgotten_and_everything_expires() {
        let e = Expectations::new(Duration::from_secs(10));
        let j = ObjectKey::new("ns", "j");
        let t0 = Instant::now();
        e.expect(&j, &["p".into()], &[], t0);
        e.forget(&j, Some("p"), None);
        assert!(e.satisfied(&j, &[], t0));
        e.expect(&j, &["q".into()], &[], t0);
        assert!(!e.satisfied(&j, &[], t0 + Duration::from_secs(9)));
        assert!(e.satisfied(&j, &[], t0 + Duration::from_secs(10)));
        assert!(
            e.satisfied(&ObjectKey::new("ns", "k"), &[], t0),
            "other jobs unaffected"
        );
    }
}
