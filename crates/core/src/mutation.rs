//! The contract between the controller and whatever edits a pod before it is created (the
//! operator's pod-mutator plugins).
//!
//! Owns the [`PodMutation`] trait the controller calls and the plugin registry implements, so
//! the controller does not know the plugins, as it does not know the allocator
//! ([`Placement`](crate::placement::Placement)). Performs no I/O: implementations do.

use k8s_openapi::api::core::v1::Pod;

use crate::api::DIJob;
use crate::key::BoxFuture;

/// Why a pod must not be created: a mutator with failurePolicy Fail failed or answered what its
/// grants do not allow (the message names it). The pod is not sent, like a pod an admission
/// webhook rejects, and the job retries with backoff.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct MutationRefused(pub String);

/// Edits the pods of a job before they are created.
pub trait PodMutation: Send + Sync {
    /// `pod` of `job` as the mutators that apply to it leave it.
    fn mutate<'a>(
        &'a self,
        job: &'a DIJob,
        pod: Pod,
    ) -> BoxFuture<'a, Result<Pod, MutationRefused>>;
}

/// No mutators: every pod as it was built.
pub struct Unchanged;

impl PodMutation for Unchanged {
    fn mutate<'a>(
        &'a self,
        _job: &'a DIJob,
        pod: Pod,
    ) -> BoxFuture<'a, Result<Pod, MutationRefused>> {
        Box::pin(async move { Ok(pod) })
    }
}
