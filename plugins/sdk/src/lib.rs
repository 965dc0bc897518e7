//! Guest SDK for diorch plugins (wasm32-wasip2 components built against `wit/plugins.wit`,
//! contract version 0.5.0).
//!
//! Owns: the wit-bindgen bindings of both worlds, borrowed views of a policy call's input for
//! the plain model of `diorch-policies` (and the model-to-WIT encoding for native tests), the
//! `export_policy!` / `export_mutator!` macros, typed pod helpers and logging. Must not touch: policy logic (that lives in `diorch-policies` or the plugin).
//!
//! A policy:
//! ```ignore
//! struct MyPolicy;
//! impl diorch_plugin_sdk::Policy for MyPolicy { /* allocate, optimize, optionally preempt */ }
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

pub use diorch_policies::preempt::{Preemption, Running, Shrink};
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
            "diorch:plugins/types@0.5.0": crate::policy_bindings::diorch::plugins::types,
            "diorch:plugins/log@0.5.0": crate::policy_bindings::diorch::plugins::log,
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

    /// Room for `job`, which does not fit, from `candidates` (running preemptible jobs of lower
    /// priority, with what each may lose) on `nodes` (their usage counted as used): contract
    /// 0.5.0's `preempt`, called only after this policy's `allocate` answered no-fit. Indices
    /// are into `candidates`. The default makes no room (`Ok(None)`: the job waits); a policy
    /// built on `diorch-policies` answers as the operator's built-in policies do with
    /// `Ok(PolicyLogic::preempt(&MyLogic, job, candidates, nodes))`. Nodes are owned copies
    /// here (the choice edits their free room), made only for this call.
    fn preempt(
        job: &Job,
        candidates: &[Running],
        nodes: &[Node],
    ) -> Result<Option<Preemption>, PluginError> {
        let _ = (job, candidates, nodes);
        Ok(None)
    }

    /// Why `answer` (this policy's `preempt` answer), for the job and its victims: sent as the
    /// answer's `reason`. `None` by default.
    fn explain_preempt(job: &Job, candidates: &[Running], answer: &Preemption) -> Option<String> {
        let _ = (job, candidates, answer);
        None
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

    pub fn preempt<P: Policy>(
        cluster: wit::Cluster,
        table: wit::CandidateTable,
    ) -> Result<Option<wit::Preemption>, wit::Error> {
        if view::job_count(&cluster) == 0 {
            return Err(wit::Error::InvalidInput(
                "preempt takes the job to place first, got no job".to_string(),
            ));
        }
        let job = view::job(&cluster, 0);
        let candidates = view::candidates(&cluster, &table);
        // Owned nodes only here: the victim choice gives room back to them as it goes.
        let nodes: Vec<Node> = NodeView::all(&cluster)
            .iter()
            .map(NodeView::to_node)
            .collect();
        let Some(answer) = P::preempt(&job, &candidates, &nodes).map_err(error)? else {
            return Ok(None);
        };
        let reason = P::explain_preempt(&job, &candidates, &answer);
        // Candidate `c` is the cluster's job `c + 1`.
        let index = |c: usize| u32::try_from(c + 1).unwrap_or(u32::MAX);
        Ok(Some(wit::Preemption {
            nodes: answer.nodes,
            shrinks: answer
                .shrinks
                .into_iter()
                .map(|s| wit::Shrink {
                    job: index(s.job),
                    replicas: s.replicas,
                })
                .collect(),
            evictions: answer.evictions.into_iter().map(index).collect(),
            reason,
        }))
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
            fn preempt(
                cluster: $crate::wit::Cluster,
                candidates: $crate::wit::CandidateTable,
            ) -> ::std::result::Result<::std::option::Option<$crate::wit::Preemption>, $crate::wit::Error>
            {
                $crate::__private::preempt::<$ty>(cluster, candidates)
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
