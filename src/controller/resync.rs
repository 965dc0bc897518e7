//! The rolling resync: a cached DIJob that had no pass for a sync period gets one, the safety
//! net for a change a watch never delivered. The period is cut into [`SLICES`] slices and a
//! job's slice is a fixed hash of its key, so the passes spread evenly over the period: jobs
//! created in one burst do not come back as one burst, and no job holds a timer of its own
//! between events. (A requeue per job kept an entry of ~0.5 KB per job in kube-runtime's
//! scheduler, moved on every pass.) A job is looked at once a period, so a quiet job gets a pass
//! a period after its last one at the earliest and two periods after at the latest.
//!
//! Each slice's jobs are kept apart ([`Slices`], fed by the DIJob watch), so a tick reads its own
//! slice, not every cached job: a pass over every job touches a thousand objects spread over
//! the heap, 4-8 ms a tick at 1 000 jobs on this project's machines (cold caches and TLB, not
//! the hashing), where the slice's ~17 jobs cost microseconds.
//!
//! Owns only when a job's resync is due. It must not decide anything about a job: a resync
//! pass is an ordinary pass. It reads only the DIJob cache and its watch's events.

use std::collections::HashSet;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::{Stream, StreamExt, stream};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use super::queue::Queue;
use crate::leader::Leadership;
use diorch_core::cached::CachedJob;
use diorch_core::key::ObjectKey;

/// Slices of a sync period: a tick each period / `SLICES` (a second at the default `1m`).
pub const SLICES: u64 = 60;

/// The shortest tick, for very short sync periods.
const MIN_TICK: Duration = Duration::from_millis(10);

/// The slice of the period `key` is resynced in: the same in every process and run, so an
/// operator restart or a new leader keeps each job's place in the period.
pub fn slice_of(key: &ObjectKey) -> u64 {
    BuildHasherDefault::<DefaultHasher>::default().hash_one(key) % SLICES
}

/// How often the resync takes the next slice; `None` for a zero period (no resync).
pub fn tick(period: Duration) -> Option<Duration> {
    if period.is_zero() {
        return None;
    }
    // SLICES is a small constant: the division cannot truncate to a useless zero tick.
    Some((period / SLICES as u32).max(MIN_TICK))
}

/// The jobs among `keys` whose resync falls in `slice`.
pub fn due(keys: impl IntoIterator<Item = ObjectKey>, slice: u64) -> Vec<ObjectKey> {
    keys.into_iter()
        .filter(|key| slice_of(key) == slice)
        .collect()
}

/// The cached jobs' keys by their slice, from the DIJob watch's events ([`Slices::apply`]).
/// A key whose job the cache no longer holds (its deletion fell in a watch gap, and the
/// re-list dropped it) leaves at its slice's next tick.
pub struct Slices {
    slices: Mutex<Vec<HashSet<ObjectKey>>>,
}

impl Default for Slices {
    fn default() -> Self {
        Slices {
            slices: Mutex::new((0..SLICES).map(|_| HashSet::new()).collect()),
        }
    }
}

impl Slices {
    fn lock(&self) -> MutexGuard<'_, Vec<HashSet<ObjectKey>>> {
        // Poisoning only follows a panic elsewhere; the sets stay meaningful.
        self.slices.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes one event of the DIJob watch: a job seen joins its slice, a job deleted leaves it.
    pub fn apply(&self, event: &watcher::Event<CachedJob>) {
        match event {
            watcher::Event::Apply(job) | watcher::Event::InitApply(job) => {
                let key = ObjectKey::of(&job.metadata);
                let slice = slice_of(&key) as usize;
                if let Some(set) = self.lock().get_mut(slice) {
                    set.insert(key);
                }
            }
            watcher::Event::Delete(job) => {
                let key = ObjectKey::of(&job.metadata);
                if let Some(set) = self.lock().get_mut(slice_of(&key) as usize) {
                    set.remove(&key);
                }
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }

    /// The jobs of `slice` that `cached` still holds; the others leave the index.
    pub fn due(&self, slice: u64, cached: impl Fn(&ObjectKey) -> bool) -> Vec<ObjectKey> {
        let mut slices = self.lock();
        let Some(set) = slices.get_mut(slice as usize) else {
            return Vec::new();
        };
        set.retain(|key| cached(key));
        set.iter().cloned().collect()
    }
}

/// The resync's triggers: each tick, the cached jobs of the next slice but those `recent` says
/// had a pass within the period, counted in `queue` as any trigger is. Nothing while this
/// process stands by (a new leader reconciles every job anyway), and nothing at all for a zero
/// `period`.
pub fn rolling(
    jobs: Store<CachedJob>,
    slices: Arc<Slices>,
    period: Duration,
    queue: Arc<Queue>,
    leader: Leadership,
    recent: impl Fn(&ObjectKey) -> bool + Clone + Send + Sync + 'static,
) -> impl Stream<Item = ObjectRef<CachedJob>> + Send + 'static {
    let Some(tick) = tick(period) else {
        return stream::pending().left_stream();
    };
    let start = tokio::time::Instant::now() + tick;
    let mut interval = tokio::time::interval_at(start, tick);
    // A late tick (a busy runtime) takes its slice late rather than two slices at once.
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    stream::unfold((interval, 0u64), move |(mut interval, n)| {
        let (jobs, slices, queue, leader, recent) = (
            jobs.clone(),
            slices.clone(),
            queue.clone(),
            leader.clone(),
            recent.clone(),
        );
        async move {
            interval.tick().await;
            let slice = n % SLICES;
            let due = if leader.is_leader() {
                slices.due(slice, |key| {
                    jobs.get(&ObjectRef::new(&key.name).within(&key.namespace))
                        .is_some()
                })
            } else {
                Vec::new()
            };
            let refs: Vec<ObjectRef<CachedJob>> = due
                .into_iter()
                .filter(|key| !recent(key))
                .map(|key| {
                    let job = ObjectRef::new(&key.name).within(&key.namespace);
                    queue.triggered(key);
                    job
                })
                .collect();
            Some((stream::iter(refs), (interval, n.wrapping_add(1))))
        }
    })
    .flatten()
    .right_stream()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use prometheus_client::metrics::gauge::Gauge;
    use std::collections::BTreeSet;

    fn key(i: usize) -> ObjectKey {
        ObjectKey::new(format!("ns-{}", i % 7), format!("job-{i}"))
    }

    #[test]
    fn every_job_falls_in_exactly_one_slice_and_the_slices_share_the_jobs_evenly() {
        let keys: Vec<ObjectKey> = (0..6_000).map(key).collect();
        let mut seen = BTreeSet::new();
        let mut sizes = Vec::new();
        for slice in 0..SLICES {
            let due = due(keys.iter().cloned(), slice);
            sizes.push(due.len());
            for k in due {
                assert!(seen.insert(k.clone()), "{k:?} is due in two slices");
            }
        }
        assert_eq!(seen.len(), keys.len(), "every job is due once a period");
        // 100 jobs per slice on average; a fair hash keeps every slice within half of it.
        let (min, max) = (sizes.iter().min(), sizes.iter().max());
        assert!(
            min >= Some(&50) && max <= Some(&150),
            "slices of {min:?}..{max:?} jobs"
        );
        // Fixed across processes: the same key, the same slice.
        assert_eq!(slice_of(&key(1)), slice_of(&key(1)));
        assert_eq!(due([key(1)], slice_of(&key(1))), vec![key(1)]);
    }

    #[test]
    fn the_tick_is_a_slice_of_the_period_and_a_zero_period_has_none() {
        assert_eq!(tick(Duration::from_secs(60)), Some(Duration::from_secs(1)));
        assert_eq!(
            tick(Duration::from_secs(30)),
            Some(Duration::from_millis(500))
        );
        assert_eq!(tick(Duration::from_millis(60)), Some(MIN_TICK));
        assert_eq!(tick(Duration::ZERO), None);
    }

    fn cached(k: ObjectKey) -> CachedJob {
        let metadata = ObjectMeta {
            name: Some(k.name),
            namespace: Some(k.namespace),
            ..Default::default()
        };
        let spec = serde_json::value::RawValue::from_string("{}".into()).expect("JSON");
        CachedJob::new(metadata, spec, None).expect("job")
    }

    /// A cache of `n` jobs, and their slices as the watch's events fill them.
    fn store_of(n: usize) -> (Store<CachedJob>, Arc<Slices>, Arc<Queue>, Gauge) {
        let (store, mut writer) = kube::runtime::reflector::store::<CachedJob>();
        let slices = Arc::new(Slices::default());
        let mut apply = |event: watcher::Event<CachedJob>| {
            writer.apply_watcher_event(&event);
            slices.apply(&event);
        };
        apply(watcher::Event::Init);
        for i in 0..n {
            apply(watcher::Event::InitApply(cached(key(i))));
        }
        apply(watcher::Event::InitDone);
        let depth = Gauge::default();
        let queue = Arc::new(Queue::new(depth.clone(), store.clone()));
        (store, slices, queue, depth)
    }

    #[test]
    fn the_slices_follow_the_watch_and_drop_jobs_the_cache_no_longer_holds() {
        let slices = Slices::default();
        let (a, b) = (key(1), key(2));
        slices.apply(&watcher::Event::InitApply(cached(a.clone())));
        // An update of a job already there keeps it once.
        slices.apply(&watcher::Event::Apply(cached(a.clone())));
        slices.apply(&watcher::Event::Apply(cached(b.clone())));
        let all = |cached: &dyn Fn(&ObjectKey) -> bool| -> Vec<ObjectKey> {
            (0..SLICES).flat_map(|s| slices.due(s, cached)).collect()
        };
        let mut every = all(&|_| true);
        every.sort();
        assert_eq!(every, vec![a.clone(), b.clone()]);
        assert_eq!(slices.due(slice_of(&a), |_| true), vec![a.clone()]);
        slices.apply(&watcher::Event::Delete(cached(a.clone())));
        assert_eq!(all(&|_| true), vec![b.clone()]);
        // A job gone from the cache without its Delete (a watch gap) leaves at its tick.
        assert!(slices.due(slice_of(&b), |_| false).is_empty());
        assert!(all(&|_| true).is_empty(), "dropped for good");
    }

    #[tokio::test(start_paused = true)]
    async fn one_period_triggers_every_cached_job_without_a_recent_pass_once_and_counts_it() {
        let (store, slices, queue, depth) = store_of(300);
        let period = Duration::from_secs(60);
        // Every tenth job had a pass within the period: it is left out.
        let recent = |key: &ObjectKey| key.name.ends_with('0');
        let resync = rolling(store, slices, period, queue, Leadership::always(), recent);
        // One period of ticks (the first a tick after the start), then the stream is cut.
        let refs: Vec<ObjectRef<CachedJob>> = resync
            .take_until(tokio::time::sleep(period + Duration::from_millis(100)))
            .collect()
            .await;
        let names: BTreeSet<String> = refs.iter().map(|r| r.name.clone()).collect();
        assert_eq!(refs.len(), 270, "each job once, but the recent ones");
        assert_eq!(names.len(), 270);
        assert!(names.iter().all(|n| !n.ends_with('0')), "{names:?}");
        // Triggered jobs wait for a worker until a reconcile takes them.
        assert_eq!(depth.get(), 270);
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_and_a_zero_period_trigger_nothing() {
        let (store, slices, queue, depth) = store_of(50);
        let period = Duration::from_secs(6);
        let standby = Leadership::always();
        standby.step_down();
        let quiet = |resync: futures::stream::BoxStream<'static, ObjectRef<CachedJob>>| async move {
            resync
                .take_until(tokio::time::sleep(period * 2))
                .collect::<Vec<_>>()
                .await
        };
        let never = |_: &ObjectKey| false;
        let refs = quiet(
            rolling(
                store.clone(),
                slices.clone(),
                period,
                queue.clone(),
                standby,
                never,
            )
            .boxed(),
        )
        .await;
        assert!(refs.is_empty(), "a standby resynced {refs:?}");
        let refs = quiet(
            rolling(
                store,
                slices,
                Duration::ZERO,
                queue,
                Leadership::always(),
                never,
            )
            .boxed(),
        )
        .await;
        assert!(refs.is_empty(), "a zero period resynced {refs:?}");
        assert_eq!(depth.get(), 0);
    }
}
