//! The periodic re-plan's rules besides applying a plan (`optimize`): which jobs are re-planned
//! ([`candidate`]), in which groups and order ([`group_first`], [`policy_order`]), what a plan
//! made without the lock leads to ([`moved_on`], [`after_call`]), and how a plan is made to fit
//! around the jobs it keeps where they are ([`around_kept`]).
//!
//! Owns: those rules. Must not touch: policy calls, the ledger's lock or the node models (the
//! allocator's: it passes them in as functions).

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};

use diorch_policies as plugin;

use super::JobPlan;
use super::book::{Book, Held};
use crate::api::DIJob;
use crate::key::ObjectKey;
use crate::placement::{SlotNodes, holds_placement, needs_allocation};

/// Whether a job is re-planned: placed, active and preemptible (it holds an allocation and needs
/// none), held as confirmed in the book, with no re-plan of it in flight.
pub fn candidate(job: &DIJob, held: Option<&Held>, in_flight: bool) -> bool {
    holds_placement(job)
        && !needs_allocation(job)
        && held.is_some_and(|h| h.confirmed)
        && !in_flight
}

/// The order groups (one per policy) are re-planned in: groups holding a high-priority job
/// first, then by policy name (`None`, the built-in policy, first).
pub fn group_first(a: (&Option<String>, bool), b: (&Option<String>, bool)) -> Ordering {
    b.1.cmp(&a.1).then(a.0.cmp(b.0))
}

/// The order a policy sees a group's jobs in: highest priority first, then oldest, then by key.
pub fn policy_order(a: &plugin::Job, b: &plugin::Job) -> Ordering {
    b.priority
        .cmp(&a.priority)
        .then(b.age_seconds.cmp(&a.age_seconds))
        .then(a.key.cmp(&b.key))
}

/// Whether a group's plan went stale during its call: a job of the group is no longer held as
/// confirmed on the slots the plan started from (it ended, was deleted, resized or moved), or
/// has a re-plan in flight. Then nothing of the group moves in this pass.
pub fn moved_on(
    current: &HashMap<ObjectKey, SlotNodes>,
    book: &Book,
    in_flight: impl Fn(&ObjectKey) -> bool,
) -> bool {
    current.iter().any(|(key, slots)| {
        in_flight(key)
            || !book
                .get(key)
                .is_some_and(|h| h.confirmed && &h.slots == slots)
    })
}

/// What a plugin's plan, made without the lock, leads to.
#[derive(Debug, PartialEq)]
pub enum AfterCall<E> {
    /// Nothing of the group moves in this pass; the next pass plans again at once.
    Stale(String),
    /// The plan stands.
    Plan(Vec<JobPlan>),
    /// The policy failed: the built-in policy plans the group, on what is free now.
    Fallback(E),
}

/// What the plugin's `plan` leads to. `moved_on`: a job of the group changed during the call
/// ([`moved_on`]). `book_changed`: other allocations changed during the call; then a plan must
/// still fit what is free now (`still_fits`: the capacity check against the nodes it names).
pub fn after_call<E: std::fmt::Display>(
    moved_on: bool,
    book_changed: bool,
    plan: Result<Vec<JobPlan>, E>,
    still_fits: impl FnOnce(&[JobPlan]) -> Result<(), E>,
) -> AfterCall<E> {
    if moved_on {
        return AfterCall::Stale("a job of the group changed during the call".to_string());
    }
    match plan {
        Ok(plan) => match book_changed.then(|| still_fits(&plan)) {
            Some(Err(e)) => AfterCall::Stale(e.to_string()),
            _ => AfterCall::Plan(plan),
        },
        Err(e) => AfterCall::Fallback(e),
    }
}

/// A plan that fits around the jobs it keeps, and whether the built-in policy re-made it.
#[derive(Debug, PartialEq)]
pub struct Fitted {
    pub plan: Vec<JobPlan>,
    pub by_builtin: bool,
}

/// Makes `plan`, for a group of `group` jobs, fit around the jobs it leaves out.
///
/// A job a plan leaves out keeps its allocation (`optimize::decide`), but the policy was shown
/// the whole group's room as free, that job's room included: the plan must fit around the jobs
/// it keeps. One that does not (a policy that could not place a job stranded on a failed node,
/// and grew others into its room) is made again by the built-in policy for the jobs it moves,
/// around the kept ones, until it fits.
///
/// `fits(moving, plan)`: whether `plan` fits the room left by the group's jobs not in `moving`
/// (plan keys). `builtin(moving)`: the built-in policy's plan for the `moving` jobs alone, on
/// that same room. An error of either ends it: nothing of the group moves.
pub fn around_kept<E>(
    plan: Vec<JobPlan>,
    group: usize,
    mut fits: impl FnMut(&BTreeSet<String>, &[JobPlan]) -> Result<(), E>,
    mut builtin: impl FnMut(&BTreeSet<String>) -> Result<Vec<JobPlan>, E>,
) -> Result<Fitted, E> {
    let mut fitted = Fitted {
        plan,
        by_builtin: false,
    };
    // Each round either fits, or re-plans the same or fewer jobs on the room it was checked
    // against (so the next round fits, or moves fewer jobs; an empty plan fits): `group + 1`
    // rounds suffice. A built-in plan not fitting the room it was given would loop: bounded.
    let mut last_error = None;
    for _ in 0..=group {
        let moving: BTreeSet<String> = fitted.plan.iter().map(|e| e.job.clone()).collect();
        if moving.len() >= group {
            return Ok(fitted);
        }
        match fits(&moving, &fitted.plan) {
            Ok(()) => return Ok(fitted),
            Err(e) => last_error = Some(e),
        }
        fitted = Fitted {
            plan: builtin(&moving)?,
            by_builtin: true,
        };
    }
    match last_error {
        Some(e) => Err(e),
        // Unreachable: a round that neither fits nor errs does not exist. Keep the plan.
        None => Ok(fitted),
    }
}

#[cfg(test)]
mod tests;
