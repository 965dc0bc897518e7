//! The periodic re-plan's rules besides applying a plan (`optimize`): which jobs are re-planned
//! ([`candidate`]), in which groups and order ([`group_first`], [`policy_order`]), and whether a
//! plan made without the lock went stale ([`moved_on`]).
//!
//! Owns: those rules. Must not touch: policy calls, the ledger's lock or the node models (the
//! allocator's).

use std::cmp::Ordering;
use std::collections::HashMap;

use diorch_policies as plugin;

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

#[cfg(test)]
mod tests;
