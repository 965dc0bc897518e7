//! The built-in native policy: the same `diorch-policies` code the Wasm examples wrap, run
//! in-process. It serves when no policy plugin is loaded or a plugin fails.
//!
//! Owns: `NativePolicy`. Must not touch: Wasm.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;

use diorch_policies::Policy;
use diorch_policies::binpack::BinPack;
use diorch_policies::goodput::Goodput;
use diorch_policies::spread::Spread;

use super::{
    Job, JobAllocation, JobPlan, Node, PluginError, PolicyAnswer, PolicyError, PreemptAnswer,
    RawPreemption, SchedulingPolicy, checks,
};

/// Which built-in algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NativePolicy {
    BinPack,
    Spread,
    Goodput,
}

impl NativePolicy {
    fn name(self) -> &'static str {
        match self {
            NativePolicy::BinPack => "builtin-binpack",
            NativePolicy::Spread => "builtin-spread",
            NativePolicy::Goodput => "builtin-goodput",
        }
    }

    fn allocate_logic(self, job: &Job, nodes: &[Node]) -> Result<Vec<u32>, PolicyError> {
        // `Policy` is generic over node views (not dyn-compatible), hence a match per call.
        match self {
            NativePolicy::BinPack => BinPack.allocate(job, nodes),
            NativePolicy::Spread => Spread.allocate(job, nodes),
            NativePolicy::Goodput => Goodput.allocate(job, nodes),
        }
    }

    fn optimize_logic(
        self,
        jobs: &[Job],
        nodes: &[Node],
        previous: &[JobAllocation],
    ) -> Result<Vec<JobAllocation>, PolicyError> {
        match self {
            NativePolicy::BinPack => BinPack.optimize(jobs, nodes, previous),
            NativePolicy::Spread => Spread.optimize(jobs, nodes, previous),
            NativePolicy::Goodput => Goodput.optimize(jobs, nodes, previous),
        }
    }

    /// The least preemption of `running` jobs that lets `job` start at once, as this policy
    /// places it (see [`diorch_policies::preempt`]).
    pub fn preempt(
        self,
        job: &Job,
        running: &[diorch_policies::preempt::Running],
        nodes: &[Node],
        mode: diorch_policies::preempt::Mode,
    ) -> Option<diorch_policies::preempt::Preemption> {
        use diorch_policies::preempt::preempt;
        match self {
            NativePolicy::BinPack => preempt(&BinPack, job, running, nodes, mode),
            NativePolicy::Spread => preempt(&Spread, job, running, nodes, mode),
            NativePolicy::Goodput => preempt(&Goodput, job, running, nodes, mode),
        }
    }

    fn refused(self, error: PolicyError) -> PluginError {
        PluginError::Refused {
            plugin: self.name().to_string(),
            error,
        }
    }

    fn explain_logic(self, job: &Job, nodes: &[Node], answer: &[u32]) -> Option<String> {
        match self {
            NativePolicy::BinPack => BinPack.explain_allocate(job, nodes, answer),
            NativePolicy::Spread => Spread.explain_allocate(job, nodes, answer),
            NativePolicy::Goodput => Goodput.explain_allocate(job, nodes, answer),
        }
    }

    /// Checked allocation with its reason, in the caller's thread (microseconds).
    pub fn allocate_now(self, job: &Job, nodes: &[Node]) -> Result<PolicyAnswer, PluginError> {
        let alloc = self
            .allocate_logic(job, nodes)
            .map_err(|e| self.refused(e))?;
        let names = checks::allocation(self.name(), job, nodes, &alloc)?;
        let reason = self.explain_logic(job, nodes, &alloc);
        Ok(PolicyAnswer::new(names, reason.as_deref()))
    }

    /// [`SchedulingPolicy::preempt`] in the caller's thread: this policy's preemption in
    /// [`Mode::Shrink`](diorch_policies::preempt::Mode::Shrink) (evictions only when no
    /// candidate may shrink), through the same shape checks as a plugin's answer.
    pub fn preempt_now(
        self,
        job: &Job,
        candidates: &[diorch_policies::preempt::Running],
        nodes: &[Node],
    ) -> Result<Option<PreemptAnswer>, PluginError> {
        let mode = diorch_policies::preempt::Mode::Shrink;
        let Some(plan) = NativePolicy::preempt(self, job, candidates, nodes, mode) else {
            return Ok(None);
        };
        let raw = RawPreemption::from_model(plan, None);
        checks::preemption(self.name(), job, candidates, nodes, &raw).map(Some)
    }

    pub fn optimize_now(
        self,
        jobs: &[Job],
        nodes: &[Node],
        previous: &[JobPlan],
    ) -> Result<Vec<JobPlan>, PluginError> {
        let previous = checks::plan_to_indices(jobs, nodes, previous);
        let plan = self
            .optimize_logic(jobs, nodes, &previous)
            .map_err(|e| self.refused(e))?;
        checks::plan(self.name(), jobs, nodes, &plan)
    }
}

impl SchedulingPolicy for NativePolicy {
    fn describe(&self) -> String {
        self.name().to_string()
    }

    fn allocate(
        &self,
        job: Arc<Job>,
        nodes: Arc<[Node]>,
    ) -> BoxFuture<'static, Result<PolicyAnswer, PluginError>> {
        let this = *self;
        async move { this.allocate_now(&job, &nodes) }.boxed()
    }

    fn optimize(
        &self,
        jobs: Arc<[Job]>,
        nodes: Arc<[Node]>,
        previous: Vec<JobPlan>,
    ) -> BoxFuture<'static, Result<Vec<JobPlan>, PluginError>> {
        let this = *self;
        async move { this.optimize_now(&jobs, &nodes, &previous) }.boxed()
    }

    fn preempt(
        &self,
        job: Arc<Job>,
        candidates: Arc<[diorch_policies::preempt::Running]>,
        nodes: Arc<[Node]>,
    ) -> BoxFuture<'static, Result<Option<PreemptAnswer>, PluginError>> {
        let this = *self;
        async move { this.preempt_now(&job, &candidates, &nodes) }.boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::sample;

    #[tokio::test]
    async fn native_policies_place_the_sample() {
        let (job, nodes) = sample::allocate_input(10, 4);
        let nodes: Arc<[Node]> = nodes.into();
        for p in [
            NativePolicy::BinPack,
            NativePolicy::Spread,
            NativePolicy::Goodput,
        ] {
            let answer = p
                .allocate(Arc::new(job.clone()), nodes.clone())
                .await
                .unwrap();
            let names = answer.nodes;
            // Every built-in policy says why, in the shared words of `diorch_policies::explain`.
            let reason = answer.reason.unwrap();
            assert!(
                reason.starts_with("bin-pack") || reason.starts_with("spread"),
                "{reason}"
            );
            assert_eq!(names.len(), job.total_replicas());
            assert!(
                names
                    .iter()
                    .all(|n| nodes.iter().any(|x| &x.name == n && x.ready))
            );
        }
        let (jobs, nodes) = sample::optimize_input(5, 10);
        let plan = NativePolicy::BinPack
            .optimize(jobs.into(), nodes.into(), vec![])
            .await
            .unwrap();
        assert_eq!(plan.len(), 5);
    }
}
