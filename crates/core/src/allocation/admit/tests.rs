//! The admission rules, one test each.

use std::time::{Duration, Instant};

use super::*;

fn slots(nodes: &[&str]) -> SlotNodes {
    SlotNodes::new(nodes.iter().map(|n| n.to_string()).collect())
}

fn held(uid: &str, confirmed: bool, since: Instant) -> Held {
    Held {
        uid: uid.into(),
        slots: slots(&["a", "b"]),
        usage: Vec::new(),
        confirmed,
        since,
    }
}

#[test]
fn a_reservation_of_this_job_is_answered_again_until_its_status_confirms_it() {
    let now = Instant::now();
    let answer = reservation(Some(&held("u", false, now)), "u", 2);
    assert_eq!(
        answer,
        Some(Admission::Placed {
            nodes: slots(&["a", "b"]),
            by: "reservation".into(),
            fallback: None,
            replan: false,
            replicas: None,
            why: Why::default(),
        })
    );
    // Confirmed, another job of the same name, or another size: asked again.
    assert_eq!(reservation(Some(&held("u", true, now)), "u", 2), None);
    assert_eq!(reservation(Some(&held("u", false, now)), "other", 2), None);
    assert_eq!(reservation(Some(&held("u", false, now)), "u", 3), None);
    assert_eq!(reservation(None, "u", 2), None);
}

#[test]
fn an_unconfirmed_reservation_is_dropped_after_its_ttl() {
    let now = Instant::now();
    assert!(keep(
        &held("u", false, now),
        now + UNCONFIRMED_TTL - Duration::from_millis(1)
    ));
    assert!(!keep(&held("u", false, now), now + UNCONFIRMED_TTL));
    assert!(keep(&held("u", true, now), now + UNCONFIRMED_TTL * 10));
}

#[test]
fn an_answer_that_still_fits_is_placed_and_a_stale_one_is_asked_for_again_then_falls_back() {
    let fits = |_: &SlotNodes| None;
    let stale = |_: &SlotNodes| Some("node a is full".to_string());
    let answer = || Answer::Slots(slots(&["a"]));
    assert_eq!(
        after_call(false, answer(), 1, "p@1", fits),
        AfterCall::Place(slots(&["a"]))
    );
    assert_eq!(
        after_call(false, answer(), 1, "p@1", stale),
        AfterCall::AskAgain {
            why: "node a is full".into()
        }
    );
    assert_eq!(
        after_call(false, answer(), PLUGIN_TRIES - 1, "p@1", stale),
        AfterCall::AskAgain {
            why: "node a is full".into()
        }
    );
    assert_eq!(
        after_call(false, answer(), PLUGIN_TRIES, "p@1", stale),
        AfterCall::Fallback(Fallback {
            reason: CONTENDED,
            message: "policy plugin p@1: other jobs took the room of each of its 3 answers".into()
        })
    );
}

#[test]
fn a_job_released_during_the_call_is_neither_placed_nor_held() {
    let never = |_: &SlotNodes| -> Option<String> { panic!("no fit check for a released job") };
    assert_eq!(
        after_call(true, Answer::Slots(slots(&["a"])), 1, "p", never),
        AfterCall::Ended
    );
    assert_eq!(
        ended("p"),
        Admission::Waiting {
            message: "the job ended or was deleted during placement".into(),
            by: "p".into(),
            why: Why::default(),
        }
    );
}

#[test]
fn no_fit_waits_and_a_failed_call_falls_back_with_its_reason_bounded() {
    let fits = |_: &SlotNodes| None;
    assert_eq!(
        after_call(false, Answer::NoFit("full".into()), 1, "p", fits),
        AfterCall::Wait("full".into())
    );
    let long = "x".repeat(5000);
    let AfterCall::Fallback(f) = after_call(
        false,
        Answer::Failed {
            reason: "Trap",
            message: long,
        },
        1,
        "p",
        fits,
    ) else {
        panic!("a failed call falls back")
    };
    assert_eq!(f.reason, "Trap");
    assert!(f.message.len() <= MAX_MESSAGE_BYTES);
}

#[test]
fn placed_and_waiting_answers_say_who_decided_and_why() {
    let why = Why {
        sha256: None,
        reason: Some("packed".into()),
    };
    let (answer, result) = placed(
        slots(&["a"]),
        "builtin-binpack",
        Some("p failed".into()),
        why.clone(),
    );
    assert_eq!(result, "placed_by_fallback");
    assert!(matches!(
        answer,
        Admission::Placed {
            fallback: Some(_),
            why: ref w,
            ..
        } if *w == why
    ));
    assert_eq!(placed(slots(&["a"]), "p", None, Why::default()).1, "placed");
    let wait = waiting(
        "2 replicas: 1 GPU",
        "a: 0 GPUs free",
        &"y".repeat(3000),
        "p",
        why.clone(),
    );
    let Admission::Waiting {
        message,
        by,
        why: w,
    } = wait
    else {
        panic!("waiting")
    };
    assert_eq!(by, "p");
    assert_eq!(w, why);
    assert!(message.starts_with(
        "waiting for capacity: 2 replicas: 1 GPU do not all fit (a: 0 GPUs free); yyy"
    ));
    assert!(message.len() < 1200, "{}", message.len());
}
