//! The re-plan rules, one test each.

use std::time::Instant;

use serde_json::json;

use super::*;
use crate::fixtures::elastic_job;

fn placed_job() -> DIJob {
    elastic_job(json!({
        "ranks": ["j-learner-0", "j-collector-0", "j-collector-1"],
        "allocation": ["n1", "n2", "n2"],
    }))
}

fn held(confirmed: bool, slots: &[&str]) -> Held {
    Held {
        uid: String::new(),
        slots: SlotNodes::new(slots.iter().map(|s| s.to_string()).collect()),
        usage: Vec::new(),
        confirmed,
        since: Instant::now(),
    }
}

#[test]
fn only_placed_confirmed_jobs_without_a_re_plan_in_flight_are_re_planned() {
    let job = placed_job();
    let confirmed = held(true, &["n1", "n2", "n2"]);
    assert!(candidate(&job, Some(&confirmed), false));
    assert!(
        !candidate(&job, Some(&confirmed), true),
        "a re-plan in flight"
    );
    assert!(
        !candidate(&job, Some(&held(false, &["n1"])), false),
        "a reservation"
    );
    assert!(!candidate(&job, None, false), "not in the book");
    let waiting = elastic_job(json!({}));
    assert!(
        !candidate(&waiting, Some(&confirmed), false),
        "needs an allocation"
    );
    let mut done = placed_job();
    if let Some(s) = done.status.as_mut() {
        s.phase = Some(crate::api::Phase::Succeeded);
    }
    assert!(!candidate(&done, Some(&confirmed), false), "finished");
}

#[test]
fn groups_with_a_high_priority_job_go_first_then_by_policy_name() {
    let mut groups = [
        (Some("zeta".to_string()), false),
        (Some("alpha".to_string()), false),
        (Some("mid".to_string()), true),
        (None, false),
    ];
    groups.sort_by(|a, b| group_first((&a.0, a.1), (&b.0, b.1)));
    let names: Vec<Option<&str>> = groups.iter().map(|g| g.0.as_deref()).collect();
    assert_eq!(names, [Some("mid"), None, Some("alpha"), Some("zeta")]);
}

#[test]
fn a_policy_sees_higher_priority_then_older_jobs_first() {
    let job = |key: &str, priority: i32, age: u64| plugin::Job {
        key: key.into(),
        priority,
        preemptible: true,
        tasks: Vec::new(),
        current: Vec::new(),
        profilings: String::new(),
        age_seconds: age,
    };
    let mut jobs = [
        job("ns/b", 0, 10),
        job("ns/a", 0, 10),
        job("ns/old", 0, 99),
        job("ns/urgent", 1, 1),
    ];
    jobs.sort_by(policy_order);
    let keys: Vec<&str> = jobs.iter().map(|j| j.key.as_str()).collect();
    assert_eq!(keys, ["ns/urgent", "ns/old", "ns/a", "ns/b"]);
}

#[test]
fn a_plan_is_stale_when_a_job_of_its_group_moved_on_during_the_call() {
    let key = ObjectKey::new("ns", "j");
    let slots = SlotNodes::new(vec!["n1".into()]);
    let current = HashMap::from([(key.clone(), slots)]);
    let mut book = Book::default();
    book.hold(key.clone(), held(true, &["n1"]));
    assert!(!moved_on(&current, &book, |_| false));
    assert!(moved_on(&current, &book, |_| true), "a re-plan in flight");
    book.hold(key.clone(), held(true, &["n2"]));
    assert!(moved_on(&current, &book, |_| false), "moved elsewhere");
    book.hold(key.clone(), held(false, &["n1"]));
    assert!(moved_on(&current, &book, |_| false), "no longer confirmed");
    let empty = Book::default();
    assert!(moved_on(&current, &empty, |_| false), "gone");
}
