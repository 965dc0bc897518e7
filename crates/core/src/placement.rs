//! The contract between the controller and whatever places preemptible jobs.
//!
//! Owns [`Admission`] (the answer the planner plans from), [`needs_allocation`] (whether to ask
//! at all), [`ObjectKey`] (a job's namespace and name as one value) and the [`Placement`] trait
//! the operator's allocator implements. The controller only sees this trait, so neither module
//! imports the other. Performs no I/O: implementations do.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;

use crate::api::{DIJob, Phase};
use crate::{build, model};

/// A boxed future that is `Send`, as the trait's methods return (the core has no `futures`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A namespaced object's identity: what `"namespace/name"` strings used to carry.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> ObjectKey {
        ObjectKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of an object's metadata (empty strings where a field is unset).
    pub fn of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> ObjectKey {
        ObjectKey::new(
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
        )
    }
}

/// `namespace/name`, as kubectl and the logs write it.
impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Parses what [`Display`](fmt::Display) prints: the namespace is everything before the first
/// `/` (namespaces are DNS labels, so a key always splits back into what made it).
impl FromStr for ObjectKey {
    type Err = NotAKey;

    fn from_str(key: &str) -> Result<ObjectKey, NotAKey> {
        let (namespace, name) = key
            .split_once('/')
            .ok_or_else(|| NotAKey(key.to_string()))?;
        Ok(ObjectKey::new(namespace, name))
    }
}

/// A string that is not `namespace/name`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not namespace/name")]
pub struct NotAKey(pub String);

/// The allocator's answer for a preemptible job that needs an allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// One node per replica in slot order (tasks in spec order, then local rank).
    Placed {
        nodes: Vec<String>,
        /// The policy that decided, e.g. `binpack@3f2a…` or `builtin-binpack`.
        by: String,
        /// Why the built-in policy answered instead of the requested one.
        fallback: Option<String>,
        /// A periodic re-plan moving a placed job (not its first placement).
        replan: bool,
        /// New replica count per task (spec order) when an elastic policy resized the job;
        /// `nodes` is in slot order at these counts.
        replicas: Option<Vec<u32>>,
    },
    /// Not every replica fits now; the job waits in Pending.
    Waiting { message: String, by: String },
}

/// What places preemptible jobs, as the controller sees it. The operator's allocator
/// implements it over its caches and the active scheduling policy.
pub trait Placement: Send + Sync {
    /// The answer for `job`, when it [`needs_allocation`]; `None` when it needs none or the
    /// placer has nothing to say yet.
    fn consult<'a>(&'a self, job: &'a DIJob) -> BoxFuture<'a, Option<Admission>>;

    /// `job` is gone: release what it held.
    fn forget(&self, job: ObjectKey) -> BoxFuture<'_, ()>;

    /// Resolves once the placer's own caches have synced (reconciles wait for it).
    fn ready(&self) -> BoxFuture<'_, ()>;
}

/// Whether `job` needs an allocation: preemptible, still active, and its status does not hold
/// one node per replica. A pure function of the job, so the executor can ask before planning.
pub fn needs_allocation(job: &DIJob) -> bool {
    if !job.spec.preemptible {
        return false;
    }
    let status = job.status.as_ref();
    if status.and_then(|s| s.phase).is_some_and(Phase::is_terminal) {
        return false;
    }
    if status.is_some_and(|s| s.ranks.is_some()) {
        // Every slot the job runs has a node (slots removed by a scale-in need none).
        let placed = model::placed_pods(job);
        return !model::slot_pods(job)
            .iter()
            .all(|(pod, _)| placed.contains_key(pod));
    }
    let placed = status
        .and_then(|s| s.allocation.as_ref())
        .map_or(0, |a| a.iter().filter(|n| !n.is_empty()).count());
    let want: i64 = (0..job.spec.tasks.len())
        .map(|i| i64::from(build::task_replicas(job, i)))
        .sum();
    i64::try_from(placed).unwrap_or(i64::MAX) != want
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_keys_print_as_namespace_slash_name() {
        let key = ObjectKey::new("ns", "job");
        assert_eq!(key.to_string(), "ns/job");
        let meta = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            namespace: Some("ns".into()),
            name: Some("job".into()),
            ..Default::default()
        };
        assert_eq!(ObjectKey::of(&meta), key);
        assert_eq!(ObjectKey::of(&Default::default()).to_string(), "/");
    }

    #[test]
    fn object_keys_parse_back_from_what_they_print() {
        for key in [
            ObjectKey::new("ns", "job"),
            ObjectKey::new("", "job"),
            ObjectKey::new("ns", ""),
            ObjectKey::default(),
        ] {
            assert_eq!(key.to_string().parse::<ObjectKey>(), Ok(key));
        }
        // Split at the first slash: the namespace never holds one.
        assert_eq!(
            "ns/a/b".parse::<ObjectKey>(),
            Ok(ObjectKey::new("ns", "a/b"))
        );
        assert_eq!("job".parse::<ObjectKey>(), Err(NotAKey("job".to_string())));
        assert_eq!(
            NotAKey("job".into()).to_string(),
            r#""job" is not namespace/name"#
        );
    }
}
