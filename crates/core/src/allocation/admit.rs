//! The admission rules, as a small state machine the operator's allocator drives: a
//! reservation answered again ([`reservation`]), what a policy's answer leads to ([`after_call`]:
//! place, wait, ask again, or let the built-in policy decide), and the answers themselves
//! ([`placed`], [`waiting`]).
//!
//! Owns: those rules and their texts. Must not touch: the policy call, the ledger's lock or the
//! node models (the allocator's); what fits where (`book` and the output checks).

use std::time::{Duration, Instant};

use super::book::Held;
use crate::placement::{Admission, SlotNodes, Why};
use crate::planner::{MAX_MESSAGE_BYTES, clip};

/// Times a policy plugin is asked for one admission whose answers keep going stale (other
/// admissions took their room during the call) before the built-in policy decides.
pub const PLUGIN_TRIES: usize = 3;

/// The fallback reason (`diorch_allocator_fallbacks_total{result}`) when every try went stale.
pub const CONTENDED: &str = "Contended";

/// A reservation not confirmed by the job's status within this long is dropped (its status
/// write never landed, e.g. the job was edited meanwhile); the next reconcile asks again.
pub const UNCONFIRMED_TTL: Duration = Duration::from_secs(120);

/// A policy's answer to `allocate`, as the rules read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// One node per slot, checked against the capacity the policy was shown.
    Slots(SlotNodes),
    /// The policy's `no-fit`, in its own words.
    NoFit(String),
    /// A failed call (error, trap, deadline, invalid output): `reason` is its metric label.
    Failed {
        reason: &'static str,
        message: String,
    },
}

/// Why the built-in policy answers instead of the requested one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fallback {
    /// `diorch_allocator_fallbacks_total{result}`.
    pub reason: &'static str,
    /// What the job's `Allocated` condition says (bounded).
    pub message: String,
}

/// What an admission does after a policy call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterCall {
    /// The job ended or was deleted during the call: nothing to place, nothing to hold.
    Ended,
    Place(SlotNodes),
    /// Wait for capacity; the policy's words.
    Wait(String),
    /// Another admission took room this answer needs during the call: ask again.
    AskAgain {
        why: String,
    },
    /// The built-in policy decides.
    Fallback(Fallback),
}

/// Whether the book holds a reservation this process made for the job (same uid, not yet in
/// its status, one node per slot it wants): then it is answered again.
pub fn reservation(held: Option<&Held>, uid: &str, want: usize) -> Option<Admission> {
    let h = held?;
    (h.uid == uid && !h.confirmed && h.slots.len() == want).then(|| Admission::Placed {
        nodes: h.slots.clone(),
        by: "reservation".to_string(),
        fallback: None,
        replan: false,
        replicas: None,
        // The answer being repeated was not recorded; its words are not kept with the hold.
        why: Why::default(),
    })
}

/// Whether a held allocation stays in the book at `now`: a confirmed one always, a reservation
/// for [`UNCONFIRMED_TTL`].
pub fn keep(held: &Held, now: Instant) -> bool {
    held.confirmed || now.duration_since(held.since) < UNCONFIRMED_TTL
}

/// What the policy's `answer` leads to. `released`: the job ended or was deleted during the
/// call. `stale`: for an answer of slots, why they no longer fit what is free now, if the book
/// changed during the call (`None`: they fit). `tries`: calls made so far for this admission.
pub fn after_call(
    released: bool,
    answer: Answer,
    tries: usize,
    by: &str,
    stale: impl FnOnce(&SlotNodes) -> Option<String>,
) -> AfterCall {
    if released {
        return AfterCall::Ended;
    }
    match answer {
        Answer::Slots(slots) => match stale(&slots) {
            Some(_) if tries >= PLUGIN_TRIES => AfterCall::Fallback(contended(by)),
            Some(why) => AfterCall::AskAgain { why },
            None => AfterCall::Place(slots),
        },
        Answer::NoFit(why) => AfterCall::Wait(why),
        Answer::Failed { reason, message } => AfterCall::Fallback(Fallback {
            reason,
            message: clip(&message, MAX_MESSAGE_BYTES),
        }),
    }
}

/// The fallback after every try's answer went stale: not the plugin's fault, a burst of
/// admissions racing for the same room.
fn contended(by: &str) -> Fallback {
    Fallback {
        reason: CONTENDED,
        message: format!(
            "policy plugin {by}: other jobs took the room of each of its {PLUGIN_TRIES} answers"
        ),
    }
}

/// The answer that places a job on `slots`, and its result label
/// (`diorch_allocator_decisions_total{result}`).
pub fn placed(
    slots: SlotNodes,
    by: &str,
    fallback: Option<String>,
    why: Why,
) -> (Admission, &'static str) {
    let result = if fallback.is_none() {
        "placed"
    } else {
        "placed_by_fallback"
    };
    (
        Admission::Placed {
            nodes: slots,
            by: by.to_string(),
            fallback,
            replan: false,
            replicas: None,
            why,
        },
        result,
    )
}

/// The answer that tells a job to wait: what it needs (`need`), what is free (`free`), and why
/// (the policy's no-fit words, bounded).
pub fn waiting(need: &str, free: &str, no_fit: &str, by: &str, why: Why) -> Admission {
    Admission::Waiting {
        message: format!(
            "waiting for capacity: {need} do not all fit ({free}); {}",
            clip(no_fit, MAX_MESSAGE_BYTES)
        ),
        by: by.to_string(),
        why,
    }
}

/// The answer to a job that ended or was deleted during its policy call.
pub fn ended(by: &str) -> Admission {
    Admission::Waiting {
        message: "the job ended or was deleted during placement".to_string(),
        by: by.to_string(),
        why: Why::default(),
    }
}

#[cfg(test)]
mod tests;
