//! Guest SDK for diorch plugins (wasm32-wasip2 components built against `wit/plugins.wit`,
//! contract version 0.4.0).
//!
//! Owns: the wit-bindgen bindings of both worlds, borrowed views of a policy call's input for
//! the plain model of `diorch-policies` (and the model-to-WIT encoding for native tests), the
//! `export_policy!` / `export_mutator!` macros, typed pod helpers and logging. Must not touch: policy logic (that lives in `diorch-policies` or the plugin).
//!
//! A policy:
//! ```ignore
//! struct MyPolicy;
//! impl diorch_plugin_sdk::Policy for MyPolicy { /* allocate, optimize */ }
//! diorch_plugin_sdk::export_policy!(MyPolicy);
//! ```
//! A mutator:
//! ```ignore
//! struct MyMutator;
//! impl diorch_plugin_sdk::Mutator for MyMutator {
//!     fn mutate(ctx: &TaskContext, pod: &mut Pod) -> Result<(), PluginError> { ... }
//! }
//! diorch_plugin_sdk::export_mutator!(MyMutator);
//! ```

pub mod log;
pub mod pod;
pub mod view;

pub use diorch_policies::{
    Amounts, Job, JobAllocation, Node, NodeInfo, Policy as PolicyLogic, PolicyError as PluginError,
    Resources, Taint, TaintEffect, Task,
};
pub use pod::Pod;
pub use view::{NodeView, ResourcesView};

/// Bindings of the `scheduling-policy` world (also the home of the shared types and log import).
#[allow(clippy::too_many_arguments)] // generated code
pub mod policy_bindings {
    wit_bindgen::generate!({
        path: "../../wit/plugins.wit",
        world: "scheduling-policy",
        pub_export_macro: true,
        export_macro_name: "export_world",
    });
}

/// Bindings of the `pod-mutator` world, sharing the types of `policy_bindings`.
#[allow(clippy::too_many_arguments)] // generated code
pub mod mutator_bindings {
    wit_bindgen::generate!({
        path: "../../wit/plugins.wit",
        world: "pod-mutator",
        pub_export_macro: true,
        export_macro_name: "export_world",
        with: {
            "diorch:plugins/types@0.4.0": crate::policy_bindings::diorch::plugins::types,
            "diorch:plugins/log@0.4.0": crate::policy_bindings::diorch::plugins::log,
        },
    });
}

/// The WIT types, for plugins that want them directly.
pub use policy_bindings::diorch::plugins::types as wit;
/// What a mutator is told about its pod.
pub use wit::TaskContext;

/// A scheduling policy: implement this and call [`export_policy!`]. Nodes are borrowed views of
/// the call's input ([`NodeView`]: [`NodeInfo`] for the `diorch-policies` code, plus labels,
/// taints and an owned copy on demand).
pub trait Policy {
    /// One node index per replica, in rank order.
    fn allocate(job: &Job, nodes: &[NodeView<'_>]) -> Result<Vec<u32>, PluginError>;

    /// Why `answer` (this policy's `allocate` answer) is what it is, in words for the job's
    /// owner: sent as the answer's `reason` (the host keeps 256 bytes of it). `None` by default.
    fn explain_allocate(job: &Job, nodes: &[NodeView<'_>], answer: &[u32]) -> Option<String> {
        let _ = (job, nodes, answer);
        None
    }

    /// The whole new plan (an entry's `reason` says why, if set); the default keeps every job's
    /// current complete placement.
    fn optimize(
        jobs: &[Job],
        nodes: &[NodeView<'_>],
        previous: &[JobAllocation],
    ) -> Result<Vec<JobAllocation>, PluginError> {
        let _ = (nodes, previous);
        Ok(jobs
            .iter()
            .enumerate()
            .filter(|(_, j)| !j.current.is_empty() && j.current.iter().all(Option::is_some))
            .map(|(i, j)| JobAllocation {
                job: i as u32,
                nodes: j.current.iter().flatten().copied().collect(),
                reason: None,
            })
            .collect())
    }
}

/// A pod mutator: implement this and call [`export_mutator!`].
pub trait Mutator {
    fn mutate(ctx: &TaskContext, pod: &mut Pod) -> Result<(), PluginError>;
}

#[doc(hidden)]
pub mod __private {
    use super::*;

    pub fn error(e: PluginError) -> wit::Error {
        match e {
            PluginError::NoFit(m) => wit::Error::NoFit(m),
            PluginError::InvalidInput(m) => wit::Error::InvalidInput(m),
            PluginError::Internal(m) => wit::Error::Internal(m),
        }
    }

    pub fn allocate<P: Policy>(cluster: wit::Cluster) -> Result<wit::Decision, wit::Error> {
        let jobs = view::job_count(&cluster);
        if jobs != 1 {
            return Err(wit::Error::InvalidInput(format!(
                "allocate takes exactly one job, got {jobs}"
            )));
        }
        let job = view::job(&cluster, 0);
        let nodes = NodeView::all(&cluster);
        let answer = P::allocate(&job, &nodes).map_err(error)?;
        let reason = P::explain_allocate(&job, &nodes, &answer);
        Ok(wit::Decision {
            nodes: answer,
            reason,
        })
    }

    pub fn optimize<P: Policy>(
        cluster: wit::Cluster,
        previous: Vec<wit::JobAllocation>,
    ) -> Result<Vec<wit::JobDecision>, wit::Error> {
        let jobs: Vec<Job> = (0..view::job_count(&cluster))
            .map(|j| view::job(&cluster, j))
            .collect();
        let previous: Vec<JobAllocation> = previous
            .into_iter()
            .map(|p| JobAllocation {
                job: p.job,
                nodes: p.nodes,
                reason: None,
            })
            .collect();
        P::optimize(&jobs, &NodeView::all(&cluster), &previous)
            .map(|plan| {
                plan.into_iter()
                    .map(|p| wit::JobDecision {
                        job: p.job,
                        nodes: p.nodes,
                        reason: p.reason,
                    })
                    .collect()
            })
            .map_err(error)
    }

    pub fn mutate<M: Mutator>(ctx: TaskContext, pod_json: String) -> Result<String, wit::Error> {
        let mut pod = Pod::parse(&pod_json).map_err(error)?;
        M::mutate(&ctx, &mut pod).map_err(error)?;
        Ok(pod.to_json())
    }
}

/// Exports a [`Policy`] implementation as the component's `scheduling-policy` world.
#[macro_export]
macro_rules! export_policy {
    ($ty:ty) => {
        #[doc(hidden)]
        pub struct __DiorchPolicyExport;
        impl $crate::policy_bindings::Guest for __DiorchPolicyExport {
            fn allocate(
                cluster: $crate::wit::Cluster,
            ) -> ::std::result::Result<$crate::wit::Decision, $crate::wit::Error> {
                $crate::__private::allocate::<$ty>(cluster)
            }
            fn optimize(
                cluster: $crate::wit::Cluster,
                previous: ::std::vec::Vec<$crate::wit::JobAllocation>,
            ) -> ::std::result::Result<::std::vec::Vec<$crate::wit::JobDecision>, $crate::wit::Error>
            {
                $crate::__private::optimize::<$ty>(cluster, previous)
            }
        }
        $crate::policy_bindings::export_world!(__DiorchPolicyExport with_types_in $crate::policy_bindings);
    };
}

/// Exports a [`Mutator`] implementation as the component's `pod-mutator` world.
#[macro_export]
macro_rules! export_mutator {
    ($ty:ty) => {
        #[doc(hidden)]
        pub struct __DiorchMutatorExport;
        impl $crate::mutator_bindings::Guest for __DiorchMutatorExport {
            fn mutate(
                ctx: $crate::TaskContext,
                pod_json: ::std::string::String,
            ) -> ::std::result::Result<::std::string::String, $crate::wit::Error> {
                $crate::__private::mutate::<$ty>(ctx, pod_json)
            }
        }
        $crate::mutator_bindings::export_world!(__DiorchMutatorExport with_types_in $crate::mutator_bindings);
    };
}
