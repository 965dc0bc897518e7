//! The cluster's PriorityClasses (scheduling.k8s.io/v1), for the priority value of DIJobs that
//! name one in `spec.priorityClassName` (a diorch extension): the class's `value` when it
//! exists, `spec.priority`'s (`normal` 0, `high` 100) otherwise
//! ([`diorch_core::model::priority_value_of`]). Policies and preemption order jobs by it.
//!
//! A watch of every PriorityClass feeds a cache that keeps only each class's name and value.
//! A watch that fails (RBAC forbids it, the API server is away) is logged and retried with
//! backoff; meanwhile jobs that name a class get their `spec.priority` value, and jobs that name
//! none are not affected at all.
//!
//! Owns: the PriorityClass cache and the lookup of a job's priority value. Must not touch: the
//! jobs, their pods (a job's class is never copied to its pods) or the ledger.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt as _;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client};

use diorch_core::api::DIJobSpec;
use diorch_core::model::priority_value_of;

/// Most missing class names remembered as already warned about; past it the memory starts
/// again (a name is then warned about once more), so jobs naming ever new missing classes
/// cannot grow it without bound.
const MAX_WARNED: usize = 1024;

/// The cluster's PriorityClasses, by name, as a watch last saw them. Cheap to clone: clones
/// share the cache.
#[derive(Clone)]
pub struct PriorityClasses {
    store: Store<PriorityClass>,
    /// Whether the cache holds a whole list: until then a class missing from it may exist, and
    /// is not warned about.
    synced: Arc<AtomicBool>,
    /// Names of missing classes already warned about.
    warned: Arc<std::sync::Mutex<BTreeSet<String>>>,
}

impl std::fmt::Debug for PriorityClasses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PriorityClasses")
            .field("classes", &self.store.len())
            .field("synced", &self.synced.load(Ordering::Relaxed))
            .finish()
    }
}

/// What the cache keeps of a class: its name and value (the reflector keys on the name).
fn trim_class(class: &mut PriorityClass) {
    class.metadata = ObjectMeta {
        name: class.metadata.name.take(),
        ..ObjectMeta::default()
    };
    class.description = None;
    class.global_default = None;
    class.preemption_policy = None;
}

impl PriorityClasses {
    /// The cache, and the future that feeds it from a watch of every PriorityClass (spawn it;
    /// it runs until the runtime stops). A failing watch is logged as a warning with its error
    /// and retried with backoff, for ever; the cache keeps what it last saw.
    pub fn start(client: Client) -> (PriorityClasses, impl Future<Output = ()> + Send + 'static) {
        let (store, writer) = reflector::store::<PriorityClass>();
        let classes = PriorityClasses::over(store, false);
        let synced = classes.synced.clone();
        let events = watcher(
            Api::<PriorityClass>::all(client),
            watcher::Config::default(),
        )
        .default_backoff()
        .modify(trim_class)
        .reflect(writer);
        let run = async move {
            let mut events = std::pin::pin!(events);
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => synced.store(true, Ordering::Relaxed),
                    Ok(_) => {}
                    Err(error) => tracing::warn!(
                        %error,
                        "PriorityClass watch failed; retrying (jobs naming a class get their spec.priority value meanwhile)"
                    ),
                }
            }
        };
        (classes, run)
    }

    /// No classes: every job gets its `spec.priority` value (tests, the simulator).
    pub fn empty() -> PriorityClasses {
        PriorityClasses::from_list(std::iter::empty())
    }

    /// Exactly these classes (tests, the simulator); trimmed as the watch trims them.
    pub fn from_list(classes: impl IntoIterator<Item = PriorityClass>) -> PriorityClasses {
        let (store, mut writer) = reflector::store::<PriorityClass>();
        writer.apply_watcher_event(&watcher::Event::Init);
        for mut class in classes {
            trim_class(&mut class);
            writer.apply_watcher_event(&watcher::Event::InitApply(class));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        PriorityClasses::over(store, true)
    }

    /// Classes given by name and value (tests, the simulator).
    pub fn from_values<'a>(classes: impl IntoIterator<Item = (&'a str, i32)>) -> PriorityClasses {
        PriorityClasses::from_list(classes.into_iter().map(|(name, value)| PriorityClass {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..ObjectMeta::default()
            },
            value,
            ..PriorityClass::default()
        }))
    }

    fn over(store: Store<PriorityClass>, synced: bool) -> PriorityClasses {
        PriorityClasses {
            store,
            synced: Arc::new(AtomicBool::new(synced)),
            warned: Arc::default(),
        }
    }

    /// The `value` of the class named `name`, if the cache has it.
    pub fn class_value(&self, name: &str) -> Option<i32> {
        self.store
            .get(&ObjectRef::new(name))
            .map(|class| class.value)
    }

    /// The priority value of a job with this spec: the value of the class its
    /// `priorityClassName` names when that class exists, else its `priority`'s
    /// ([`priority_value_of`]). A named class that does not exist is warned about once (not an
    /// error: it may be created later, and the job's value follows).
    pub fn value(&self, spec: &DIJobSpec) -> i32 {
        let class_value = spec.priority_class_name.as_deref().and_then(|name| {
            let value = self.class_value(name);
            if value.is_none() {
                self.warn_missing(name, spec);
            }
            value
        });
        priority_value_of(spec.priority, class_value)
    }

    fn warn_missing(&self, name: &str, spec: &DIJobSpec) {
        if !self.synced.load(Ordering::Relaxed) {
            return;
        }
        let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        if warned.contains(name) {
            return;
        }
        if warned.len() >= MAX_WARNED {
            warned.clear();
        }
        warned.insert(name.to_string());
        tracing::warn!(
            priority_class = name,
            priority = ?spec.priority,
            "no PriorityClass of this name; jobs naming it get their spec.priority value until it exists"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use diorch_core::api::DIJob;
    use serde_json::json;

    fn spec(priority: &str, class: Option<&str>) -> DIJobSpec {
        let job: DIJob = serde_json::from_value(json!({
            "apiVersion": "diengine.opendilab.org/v2alpha1",
            "kind": "DIJob",
            "metadata": {"name": "j", "namespace": "ns"},
            "spec": {
                "priority": priority,
                "priorityClassName": class,
                "tasks": [{"type": "learner", "replicas": 1}]
            }
        }))
        .expect("job");
        job.spec
    }

    fn class(name: &str, value: i32) -> PriorityClass {
        serde_json::from_value(json!({
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {
                "name": name,
                "labels": {"team": "a"},
                "annotations": {"note": "x"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
                "resourceVersion": "7"
            },
            "value": value,
            "globalDefault": false,
            "preemptionPolicy": "Never",
            "description": "a class"
        }))
        .expect("class")
    }

    #[test]
    fn a_job_naming_a_class_gets_its_value_else_its_spec_priority() {
        let classes = PriorityClasses::from_list([
            class("batch-low", -10),
            class("prod", 1_000_000),
            class("zero", 0),
        ]);
        let cases = [
            // No class named: spec.priority.
            ("normal", None, 0),
            ("high", None, 100),
            // A class that exists: its value, whatever spec.priority says.
            ("normal", Some("prod"), 1_000_000),
            ("high", Some("prod"), 1_000_000),
            ("high", Some("batch-low"), -10),
            ("normal", Some("batch-low"), -10),
            ("high", Some("zero"), 0),
            // A class that does not exist: spec.priority, not an error.
            ("normal", Some("missing"), 0),
            ("high", Some("missing"), 100),
        ];
        for (priority, name, want) in cases {
            assert_eq!(
                classes.value(&spec(priority, name)),
                want,
                "{priority} {name:?}"
            );
        }
        assert_eq!(classes.class_value("prod"), Some(1_000_000));
        assert_eq!(classes.class_value("missing"), None);
    }

    #[test]
    fn no_classes_leave_every_job_at_its_spec_priority() {
        let empty = PriorityClasses::empty();
        for (priority, want) in [("normal", 0), ("high", 100)] {
            assert_eq!(empty.value(&spec(priority, None)), want);
            assert_eq!(empty.value(&spec(priority, Some("prod"))), want);
        }
        let by_value = PriorityClasses::from_values([("prod", 7), ("low", -3)]);
        assert_eq!(by_value.value(&spec("normal", Some("prod"))), 7);
        assert_eq!(by_value.value(&spec("high", Some("low"))), -3);
        assert_eq!(by_value.value(&spec("high", Some("other"))), 100);
    }

    #[test]
    fn the_cache_keeps_only_name_and_value() {
        let classes = PriorityClasses::from_list([class("prod", 5)]);
        let kept = classes.store.get(&ObjectRef::new("prod")).expect("cached");
        assert_eq!(
            serde_json::to_value(&*kept).expect("json"),
            json!({
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": "prod"},
                "value": 5
            })
        );
    }

    /// A watch that cannot list (here: nothing listens) keeps retrying instead of ending, and
    /// meanwhile every job gets its spec.priority value.
    #[tokio::test]
    async fn a_failing_watch_keeps_retrying_and_jobs_keep_their_spec_priority() {
        let config = kube::Config::new("http://127.0.0.1:1".parse().expect("uri"));
        let client = Client::try_from(config).expect("client");
        let (classes, run) = PriorityClasses::start(client);
        let ended = tokio::time::timeout(std::time::Duration::from_secs(3), run).await;
        assert!(ended.is_err(), "the watch gave up");
        assert_eq!(classes.value(&spec("high", Some("prod"))), 100);
        assert_eq!(classes.value(&spec("normal", None)), 0);
        // Not synced: a class it could not list is not reported missing.
        assert!(classes.warned.lock().expect("lock").is_empty());
    }

    #[test]
    fn a_missing_class_is_warned_about_once_and_only_after_a_whole_list() {
        let classes = PriorityClasses::empty();
        let missing = spec("normal", Some("later"));
        for _ in 0..3 {
            assert_eq!(classes.value(&missing), 0);
        }
        assert_eq!(
            *classes.warned.lock().expect("lock"),
            BTreeSet::from(["later".to_string()])
        );
        // Before the first list, a class missing from the cache may well exist: no warning.
        let (store, _writer) = reflector::store::<PriorityClass>();
        let unsynced = PriorityClasses::over(store, false);
        assert_eq!(unsynced.value(&missing), 0);
        assert!(unsynced.warned.lock().expect("lock").is_empty());
        // The memory of warned names is bounded.
        for i in 0..MAX_WARNED + 5 {
            classes.value(&spec("normal", Some(&format!("c{i}"))));
        }
        assert!(classes.warned.lock().expect("lock").len() <= MAX_WARNED);
    }
}
