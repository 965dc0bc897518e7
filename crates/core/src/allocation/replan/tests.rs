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

fn entry(job: &str, nodes: &[&str]) -> JobPlan {
    JobPlan {
        job: job.to_string(),
        nodes: nodes.iter().map(|n| n.to_string()).collect(),
        replicas: None,
        reason: None,
    }
}

#[test]
fn a_plan_made_while_a_job_of_its_group_changed_is_stale_whatever_it_says() {
    let never = |_: &[JobPlan]| -> Result<(), String> { panic!("not checked") };
    let ok: Result<Vec<JobPlan>, String> = Ok(vec![entry("ns/a", &["n1"])]);
    assert_eq!(
        after_call(true, true, ok, never),
        AfterCall::Stale("a job of the group changed during the call".to_string())
    );
    let failed: Result<Vec<JobPlan>, String> = Err("trap".to_string());
    assert!(matches!(
        after_call(true, false, failed, never),
        AfterCall::Stale(_)
    ));
}

#[test]
fn a_plan_is_checked_again_only_when_the_book_changed_during_the_call() {
    let plan = vec![entry("ns/a", &["n1"])];
    let never = |_: &[JobPlan]| -> Result<(), String> { panic!("not checked") };
    assert_eq!(
        after_call(false, false, Ok(plan.clone()), never),
        AfterCall::Plan(plan.clone())
    );
    let full = |_: &[JobPlan]| -> Result<(), String> { Err("node n1 is over-committed".into()) };
    assert_eq!(
        after_call(false, true, Ok(plan.clone()), full),
        AfterCall::Stale("node n1 is over-committed".to_string())
    );
    let room = |_: &[JobPlan]| -> Result<(), String> { Ok(()) };
    assert_eq!(
        after_call(false, true, Ok(plan.clone()), room),
        AfterCall::Plan(plan)
    );
}

#[test]
fn a_failed_call_falls_back_to_the_builtin_policy() {
    let never = |_: &[JobPlan]| -> Result<(), String> { panic!("not checked") };
    assert_eq!(
        after_call(false, true, Err("timeout".to_string()), never),
        AfterCall::Fallback("timeout".to_string())
    );
}

#[test]
fn a_plan_of_the_whole_group_is_not_checked_around_anything() {
    let plan = vec![entry("ns/a", &["n1"]), entry("ns/b", &["n2"])];
    let fitted = around_kept(
        plan.clone(),
        2,
        |_, _| -> Result<(), String> { panic!("nothing is kept") },
        |_| panic!("nothing to re-plan"),
    )
    .unwrap();
    assert_eq!(
        fitted,
        Fitted {
            plan,
            by_builtin: false
        }
    );
}

#[test]
fn a_plan_that_fits_around_the_jobs_it_keeps_stands() {
    let plan = vec![entry("ns/a", &["n1"])];
    let mut asked = Vec::new();
    let fitted = around_kept(
        plan.clone(),
        2,
        |moving, _| -> Result<(), String> {
            asked.push(moving.clone());
            Ok(())
        },
        |_| panic!("it fits"),
    )
    .unwrap();
    assert_eq!(fitted.plan, plan);
    assert!(!fitted.by_builtin);
    assert_eq!(asked, vec![BTreeSet::from(["ns/a".to_string()])]);
}

#[test]
fn a_plan_taking_the_room_of_kept_jobs_is_made_again_by_the_builtin_policy_for_the_jobs_it_moves() {
    // The policy moves a and b, keeps c; its plan uses c's room. The built-in policy re-plans a
    // and b around c, leaves b out as well, and that plan fits around b and c.
    let plan = vec![entry("ns/a", &["n3"]), entry("ns/b", &["n3"])];
    let mut rounds = Vec::new();
    let fitted = around_kept(
        plan,
        3,
        |moving, plan| {
            rounds.push(moving.len());
            if plan.iter().any(|e| e.nodes.contains(&"n3".to_string())) {
                Err("node n3 is over-committed".to_string())
            } else {
                Ok(())
            }
        },
        |moving| {
            assert_eq!(
                moving,
                &BTreeSet::from(["ns/a".to_string(), "ns/b".to_string()])
            );
            Ok(vec![entry("ns/a", &["n1"])])
        },
    )
    .unwrap();
    assert_eq!(fitted.plan, vec![entry("ns/a", &["n1"])]);
    assert!(fitted.by_builtin);
    assert_eq!(rounds, vec![2, 1]);
}

#[test]
fn when_the_builtin_policy_cannot_plan_around_the_kept_jobs_nothing_moves() {
    let plan = vec![entry("ns/a", &["n3"])];
    let out = around_kept(
        plan,
        2,
        |_, _| Err("node n3 is over-committed".to_string()),
        |_| Err("no fit".to_string()),
    );
    assert_eq!(out, Err("no fit".to_string()));
}

#[test]
fn a_builtin_plan_that_never_fits_ends_after_a_bounded_number_of_rounds() {
    let plan = vec![entry("ns/a", &["n3"])];
    let mut calls = 0;
    let out = around_kept(
        plan.clone(),
        2,
        |_, _| Err("node n3 is over-committed".to_string()),
        |_| {
            calls += 1;
            Ok(plan.clone())
        },
    );
    assert_eq!(out, Err("node n3 is over-committed".to_string()));
    assert!(calls <= 3, "{calls} rounds");
}
