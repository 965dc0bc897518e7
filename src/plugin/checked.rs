//! The one gate a scheduling policy's answer passes before anything uses it: [`Checked`] wraps
//! a policy (a plugin, the built-in one, or a component `diorch plugin run` calls raw) and
//! checks every answer against the capacity of the nodes it was shown, and a kept answer again
//! against what is free later.
//!
//! Owns: when capacity is checked. The rules themselves are in [`super::checks`]; turning a
//! component's node indices into names (and the shape checks that needs) is the host's and the
//! native policy's. Must not touch: the allocator's ledger or node models (callers pass the
//! nodes), Wasm.

use std::sync::Arc;

use diorch_core::placement::{SlotNodes, Why};

use diorch_policies::preempt::Running;

use super::{
    Job, JobPlan, NativePolicy, Node, PluginError, PreemptAnswer, SchedulingPolicy, checks,
};

/// A checked `allocate` answer: one node per slot, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckedAllocation {
    pub slots: SlotNodes,
    /// The deciding component and the policy's (sanitised) reason.
    pub why: Why,
}

/// A policy whose answers are checked before they are returned. `by` names it in errors
/// (its `describe()`).
#[derive(Clone)]
pub struct Checked<P> {
    policy: P,
    by: String,
    sha256: Option<String>,
}

impl<P> Checked<P> {
    /// `policy`, named `by` in errors and logs.
    pub fn new(policy: P, by: String) -> Checked<P> {
        Checked {
            policy,
            by,
            sha256: None,
        }
    }

    /// The policy's name and version, as errors name it.
    pub fn by(&self) -> &str {
        &self.by
    }

    /// What an answer of this policy with `reason` records: its component and the reason.
    pub fn why(&self, reason: Option<String>) -> Why {
        Why {
            sha256: self.sha256.clone(),
            reason,
        }
    }

    /// Whether `slots`, an answer for `job`, fit `nodes`: the nodes it was shown, or what is
    /// free now (an answer over-committing a node would leave pods pending forever).
    pub fn fits(&self, job: &Job, nodes: &[Node], slots: &[String]) -> Result<(), PluginError> {
        checks::capacity(&self.by, job, nodes, slots)
    }

    /// Whether a `preempt` answer's allocation of `job` fits the room it frees on `nodes`.
    pub fn preemption_fits(
        &self,
        job: &Job,
        candidates: &[Running],
        nodes: &[Node],
        answer: &PreemptAnswer,
    ) -> Result<(), PluginError> {
        checks::preemption_capacity(&self.by, job, candidates, nodes, answer)
    }

    /// Whether a whole plan fits `nodes`: all its jobs' replicas together, per node.
    pub fn plan_fits(
        &self,
        jobs: &[Job],
        nodes: &[Node],
        plan: &[JobPlan],
    ) -> Result<(), PluginError> {
        checks::plan_capacity(&self.by, jobs, nodes, plan)
    }
}

impl Checked<Arc<dyn SchedulingPolicy>> {
    /// A loaded policy plugin (or any [`SchedulingPolicy`]), named by its `describe()`.
    pub fn plugin(policy: Arc<dyn SchedulingPolicy>) -> Self {
        let by = policy.describe();
        let sha256 = policy.sha256();
        Checked { policy, by, sha256 }
    }

    /// The policy's allocation of `job`, one node per slot, checked against `nodes`.
    pub async fn allocate(
        &self,
        job: Arc<Job>,
        nodes: Arc<[Node]>,
    ) -> Result<CheckedAllocation, PluginError> {
        let answer = self.policy.allocate(job.clone(), nodes.clone()).await?;
        self.fits(&job, &nodes, &answer.nodes)?;
        Ok(CheckedAllocation {
            slots: SlotNodes::new(answer.nodes),
            why: self.why(answer.reason),
        })
    }

    /// The policy's plan for `jobs`, checked against `nodes`.
    pub async fn optimize(
        &self,
        jobs: Arc<[Job]>,
        nodes: Arc<[Node]>,
        previous: Vec<JobPlan>,
    ) -> Result<Vec<JobPlan>, PluginError> {
        let plan = self
            .policy
            .optimize(jobs.clone(), nodes.clone(), previous)
            .await?;
        self.plan_fits(&jobs, &nodes, &plan)?;
        Ok(plan)
    }

    /// The policy's room for `job` from `candidates` (contract 0.5.0; `None`: no preemption),
    /// checked: its shape by the policy's host, here that the job fits the room freed.
    pub async fn preempt(
        &self,
        job: Arc<Job>,
        candidates: Arc<[Running]>,
        nodes: Arc<[Node]>,
    ) -> Result<Option<PreemptAnswer>, PluginError> {
        let answer = self
            .policy
            .preempt(job.clone(), candidates.clone(), nodes.clone())
            .await?;
        if let Some(answer) = &answer {
            self.preemption_fits(&job, &candidates, &nodes, answer)?;
        }
        Ok(answer)
    }
}

impl Checked<NativePolicy> {
    /// The built-in policy (it is checked too: the fallback must not over-commit either).
    pub fn builtin(policy: NativePolicy) -> Self {
        Checked::new(policy, policy.describe())
    }

    /// [`Checked::allocate`] in the caller's thread (microseconds).
    pub fn allocate_now(
        &self,
        job: &Job,
        nodes: &[Node],
    ) -> Result<CheckedAllocation, PluginError> {
        let answer = self.policy.allocate_now(job, nodes)?;
        self.fits(job, nodes, &answer.nodes)?;
        Ok(CheckedAllocation {
            slots: SlotNodes::new(answer.nodes),
            why: self.why(answer.reason),
        })
    }

    /// [`Checked::optimize`] in the caller's thread.
    pub fn optimize_now(
        &self,
        jobs: &[Job],
        nodes: &[Node],
        previous: &[JobPlan],
    ) -> Result<Vec<JobPlan>, PluginError> {
        let plan = self.policy.optimize_now(jobs, nodes, previous)?;
        self.plan_fits(jobs, nodes, &plan)?;
        Ok(plan)
    }

    /// [`Checked::preempt`] in the caller's thread.
    pub fn preempt_now(
        &self,
        job: &Job,
        candidates: &[Running],
        nodes: &[Node],
    ) -> Result<Option<PreemptAnswer>, PluginError> {
        let answer = self.policy.preempt_now(job, candidates, nodes)?;
        if let Some(answer) = &answer {
            self.preemption_fits(job, candidates, nodes, answer)?;
        }
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use futures::future::BoxFuture;

    /// A policy that puts every replica on the first node, whatever it has free.
    struct FirstNode;

    impl SchedulingPolicy for FirstNode {
        fn describe(&self) -> String {
            "first-node@1".to_string()
        }

        fn allocate(
            &self,
            job: Arc<Job>,
            nodes: Arc<[Node]>,
        ) -> BoxFuture<'static, Result<crate::plugin::PolicyAnswer, PluginError>> {
            let name = nodes.first().map(|n| n.name.clone()).unwrap_or_default();
            let answer = crate::plugin::PolicyAnswer::new(
                vec![name; job.total_replicas()],
                Some("all on\nthe first node"),
            );
            async move { Ok(answer) }.boxed()
        }

        fn optimize(
            &self,
            jobs: Arc<[Job]>,
            nodes: Arc<[Node]>,
            _previous: Vec<JobPlan>,
        ) -> BoxFuture<'static, Result<Vec<JobPlan>, PluginError>> {
            let name = nodes.first().map(|n| n.name.clone()).unwrap_or_default();
            let plan = jobs
                .iter()
                .map(|j| JobPlan {
                    job: j.key.clone(),
                    nodes: vec![name.clone(); j.total_replicas()],
                    replicas: None,
                    reason: None,
                })
                .collect();
            async move { Ok(plan) }.boxed()
        }
    }

    fn over_committed(e: &PluginError) -> bool {
        matches!(e, PluginError::MalformedOutput { plugin, message }
            if plugin == "first-node@1" && message.contains("over-committed"))
    }

    #[tokio::test]
    async fn a_plugin_answer_over_committing_a_node_is_refused() {
        // 12 learners of one GPU each; nodes of 8 GPUs: not all on the first.
        let (job, nodes) = crate::plugin::sample::allocate_input(4, 12);
        let policy = Checked::plugin(Arc::new(FirstNode));
        let err = policy
            .allocate(Arc::new(job.clone()), nodes.clone().into())
            .await
            .unwrap_err();
        assert!(over_committed(&err), "{err}");

        // 5 jobs of 2 one-GPU learners: 10 GPUs on the first node.
        let (jobs, nodes) = crate::plugin::sample::optimize_input(5, 10);
        let err = policy
            .optimize(jobs.into(), nodes.into(), vec![])
            .await
            .unwrap_err();
        assert!(over_committed(&err), "{err}");
    }

    #[tokio::test]
    async fn an_answer_that_fits_is_returned_and_checked_again_later() {
        let (job, nodes) = crate::plugin::sample::allocate_input(4, 2);
        let policy = Checked::plugin(Arc::new(FirstNode));
        let answer = policy
            .allocate(Arc::new(job.clone()), nodes.clone().into())
            .await
            .unwrap();
        // The reason comes through sanitised; a test policy has no component.
        assert_eq!(answer.why.reason.as_deref(), Some("all on the first node"));
        assert_eq!(answer.why.sha256, None);
        let slots = answer.slots;
        assert_eq!(slots.len(), job.total_replicas());
        assert!(policy.fits(&job, &nodes, slots.as_slice()).is_ok());
        // Later the first node is full: the same answer no longer fits.
        let mut full = nodes.clone();
        full[0].free.gpus = 0;
        full[0].free.cpu_millis = 0;
        assert!(policy.fits(&job, &full, slots.as_slice()).is_err());
    }

    #[test]
    fn the_builtin_policy_goes_through_the_same_checks() {
        let (job, nodes) = crate::plugin::sample::allocate_input(10, 4);
        let builtin = Checked::builtin(NativePolicy::BinPack);
        assert_eq!(builtin.by(), "builtin-binpack");
        let slots = builtin.allocate_now(&job, &nodes).unwrap().slots;
        assert!(builtin.fits(&job, &nodes, slots.as_slice()).is_ok());
        // No room at all: the built-in policy refuses rather than over-commit.
        let mut full = nodes.clone();
        for n in &mut full {
            n.free.gpus = 0;
        }
        assert!(builtin.allocate_now(&job, &full).is_err());
    }
}
