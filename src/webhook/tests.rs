//! AdmissionReview fixtures for every rule: accepted, defaulted, refused with the message.

use serde_json::{Value, json};

use super::*;

fn review(operation: &str, object: Value, old: Option<Value>) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "req-1",
            "kind": {"group": "diengine.opendilab.org", "version": "v2alpha1", "kind": "DIJob"},
            "resource": {"group": "diengine.opendilab.org", "version": "v2alpha1", "resource": "dijobs"},
            "name": "j", "namespace": "default", "operation": operation,
            "userInfo": {"username": "alice"},
            "object": object, "oldObject": old, "dryRun": false
        }
    })
}

fn job(tasks: Value) -> Value {
    json!({"apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
           "metadata": {"name": "j", "namespace": "default"}, "spec": {"tasks": tasks}})
}

fn container() -> Value {
    json!({"spec": {"containers": [{"name": "di-container", "image": "i"}]}})
}

fn response(review: &AdmissionReview<DynamicObject>) -> Value {
    let v = serde_json::to_value(review).expect("serialise");
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(v["kind"], "AdmissionReview");
    v["response"].clone()
}

#[test]
fn typed_tasks_are_named_after_their_type_once() {
    let object = job(
        json!([{"type": "learner", "template": container()}, {"type": "collector", "name": "c", "template": container()}]),
    );
    let out = response(&answer(review("CREATE", object.clone(), None), mutate));
    assert_eq!(out["uid"], "req-1");
    assert_eq!(out["allowed"], true);
    assert_eq!(out["patchType"], "JSONPatch");
    // On the wire the patch is base64; decode it from the typed response.
    let typed = mutate(&request(review("CREATE", object.clone(), None)));
    let patch: json_patch::Patch =
        serde_json::from_slice(typed.patch.as_deref().expect("patch")).expect("patch");
    let mut defaulted = object;
    json_patch::patch(&mut defaulted, &patch).expect("applies");
    assert_eq!(defaulted["spec"]["tasks"][0]["name"], "learner");
    assert_eq!(defaulted["spec"]["tasks"][1]["name"], "c");
    // A second pass changes nothing.
    let again = mutate(&request(review("CREATE", defaulted, None)));
    assert!(again.patch.is_none() && again.allowed);
}

fn request(v: Value) -> AdmissionRequest<DIJob> {
    serde_json::from_value::<AdmissionReview<DIJob>>(v)
        .expect("review")
        .try_into()
        .expect("request")
}

fn refused(object: Value, old: Option<Value>) -> String {
    let op = if old.is_some() { "UPDATE" } else { "CREATE" };
    let out = response(&answer(review(op, object, old), check));
    assert_eq!(out["allowed"], false, "{out}");
    out["status"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn every_rule_is_refused_with_its_field_message_and_fix() {
    let cases = [
        (
            json!([{"type": "collector", "name": "a", "template": container()}, {"type": "collector", "name": "b", "template": container()}]),
            "spec.tasks[1].type: the number of collector task is more than one; a job has at most one learner, collector and evaluator task; raise that task's replicas, or use type none",
        ),
        (
            json!([{"type": "learner", "template": container()}, {"type": "none", "template": container()}]),
            "spec.tasks[1].name: none type task has no name; give every task of type none a name",
        ),
        (
            json!([{"type": "evaluator", "name": "name-test", "template": container()}, {"type": "collector", "name": "name-test", "template": container()}]),
            "spec.tasks[1].name: there is more than one task named name-test; give every task a different name",
        ),
        (
            json!([]),
            "spec.tasks: job has no tasks; add at least one task",
        ),
        (
            json!([{"type": "none", "name": "Bad_Name", "template": container()}]),
            "spec.tasks[0].name: task name Bad_Name must be a lowercase RFC 1123 label",
        ),
    ];
    for (tasks, message) in cases {
        let got = refused(job(tasks), None);
        assert!(got.starts_with(message), "got {got}\nwant {message}");
    }
    let mut long = job(json!([{"type": "learner", "template": container()}]));
    long["metadata"]["name"] = json!("x".repeat(58));
    assert!(
        refused(long, None)
            .contains("must be no more than 63 characters; shorten the job or task name")
    );
    // spec.priorityClassName (a diorch extension) must be able to name a PriorityClass.
    let mut classed = job(json!([{"type": "learner", "template": container()}]));
    classed["spec"]["priorityClassName"] = json!("Team_A");
    let got = refused(classed.clone(), None);
    assert!(
        got.starts_with(
            "spec.priorityClassName: priorityClassName Team_A must be a lowercase RFC 1123 subdomain"
        ),
        "{got}"
    );
    classed["spec"]["priorityClassName"] = json!("team-a.batch");
    let out = response(&answer(review("CREATE", classed, None), check));
    assert_eq!(out["allowed"], true, "{out}");
}

#[test]
fn oversized_numbers_are_refused_naming_the_field() {
    let task = |extra: Value| {
        let mut t = json!({"type": "collector", "template": container()});
        if let (Some(t), Some(extra)) = (t.as_object_mut(), extra.as_object()) {
            t.extend(extra.clone());
        }
        t
    };
    let cases = [
        (
            json!([task(json!({"replicas": 2_000_000_000}))]),
            "spec.tasks[0].replicas: task collector has replicas 2000000000, more than the 1000 a task may have; lower it",
        ),
        (
            json!([task(json!({"replicas": 2, "maxReplicas": 2_000_000_000}))]),
            "spec.tasks[0].maxReplicas: task collector has maxReplicas 2000000000, more than the 1000 a task may have",
        ),
        (
            json!([task(json!({"replicas": 2, "minReplicas": 1001}))]),
            "spec.tasks[0].minReplicas: task collector has minReplicas 1001",
        ),
        (
            json!((0..65)
                .map(|i| json!({"type": "none", "name": format!("t{i}"), "template": container()}))
                .collect::<Vec<_>>()),
            "spec.tasks: job has 65 tasks, more than the 64 a job may have; split the job",
        ),
        (
            json!((0..5)
                .map(|i| json!({"type": "none", "name": format!("t{i}"), "replicas": 10, "maxReplicas": 1000, "template": container()}))
                .collect::<Vec<_>>()),
            "spec.tasks: job has 5000 replicas over its tasks (each counted at its maxReplicas), more than the 4000 a job may have",
        ),
    ];
    for (tasks, message) in cases {
        let got = refused(job(tasks), None);
        assert!(got.starts_with(message), "got {got}\nwant {message}");
    }
    // At the limits exactly: admitted.
    let at = json!((0..4)
        .map(|i| json!({"type": "none", "name": format!("t{i}"), "replicas": 1, "maxReplicas": 1000, "template": container()}))
        .collect::<Vec<_>>());
    let out = response(&answer(review("CREATE", job(at), None), check));
    assert_eq!(out["allowed"], true, "{out}");
}

#[test]
fn volume_clash_index_finds_the_first_clash_among_many() {
    // 20 000 job volumes against 20 000 template volumes, the clash last: a nested scan would
    // compare 400 million names; the index compares 20 000.
    let template_volumes: Vec<Value> = (0..20_000)
        .map(|i| json!({"name": format!("t{i}"), "emptyDir": {}}))
        .collect();
    let mut job_volumes: Vec<Value> = (0..20_000)
        .map(|i| json!({"name": format!("j{i}"), "emptyDir": {}}))
        .collect();
    job_volumes.push(json!({"name": "t19999", "emptyDir": {}}));
    let mut object = job(json!([{"type": "learner", "template": {"spec": {
        "containers": [{"name": "di-container", "image": "i"}],
        "volumes": template_volumes}}}]));
    object["spec"]["volumes"] = json!(job_volumes);
    let typed: DIJob = serde_json::from_value(object).expect("job");
    assert_eq!(
        volume_clash(&typed).as_deref(),
        Some(
            "spec.volumes[20000].name: Duplicate value: \"t19999\": task learner already has a volume of that name in its template; rename one of them"
        )
    );
}

#[test]
fn job_volumes_may_not_clash_with_template_volumes() {
    let mut object = job(json!([{"type": "learner", "template": {"spec": {
        "containers": [{"name": "di-container", "image": "i"}],
        "volumes": [{"name": "cache", "emptyDir": {}}]}}}]));
    object["spec"]["volumes"] =
        json!([{"name": "data", "emptyDir": {}}, {"name": "cache", "emptyDir": {}}]);
    assert_eq!(
        refused(object, None),
        "spec.volumes[1].name: Duplicate value: \"cache\": task learner already has a volume of that name in its template; rename one of them"
    );
}

#[test]
fn updates_may_scale_and_edit_but_not_change_a_tasks_type() {
    let old = job(
        json!([{"type": "learner", "template": container()}, {"type": "none", "name": "x", "template": container()}]),
    );
    let scaled = job(
        json!([{"type": "learner", "replicas": 3, "template": container()}, {"type": "none", "name": "x", "template": container()}]),
    );
    let out = response(&answer(review("UPDATE", scaled, Some(old.clone())), check));
    assert_eq!(out["allowed"], true);
    let retyped = job(
        json!([{"type": "learner", "template": container()}, {"type": "collector", "name": "x", "template": container()}]),
    );
    let renamed = job(
        json!([{"type": "learner", "template": container()}, {"type": "none", "name": "y", "template": container()}]),
    );
    assert_eq!(
        refused(renamed, Some(old.clone())),
        "spec.tasks: Forbidden: the tasks of an existing job cannot be added, removed or renamed (it has learner, x, the update has learner, y); keep the task names, or delete and re-create the job"
    );
    let added = job(
        json!([{"type": "learner", "template": container()}, {"type": "none", "name": "x", "template": container()}, {"type": "evaluator", "template": container()}]),
    );
    assert!(refused(added, Some(old.clone())).contains("cannot be added, removed or renamed"));
    // Reordering is no change: names, not positions, identify tasks.
    let reordered = job(
        json!([{"type": "none", "name": "x", "template": container()}, {"type": "learner", "template": container()}]),
    );
    let out = response(&answer(
        review("UPDATE", reordered, Some(old.clone())),
        check,
    ));
    assert_eq!(out["allowed"], true);
    assert_eq!(
        refused(retyped, Some(old)),
        "spec.tasks[1].type: Forbidden: task x is a none task and cannot become a collector task on an existing job; delete and re-create the job, or add a new task"
    );
}

#[test]
fn valid_jobs_and_deletes_are_allowed_and_garbage_is_refused_not_panicked_on() {
    let ok = job(
        json!([{"type": "learner", "template": container()}, {"type": "collector", "replicas": 4, "template": container()}]),
    );
    assert_eq!(
        response(&answer(review("CREATE", ok, None), check))["allowed"],
        true
    );
    let mut delete = review("DELETE", Value::Null, None);
    delete["request"]["object"] = Value::Null;
    assert_eq!(response(&answer(delete, check))["allowed"], true);
    for garbage in [
        json!({}),
        json!([1]),
        json!({"request": {"uid": 5}}),
        Value::Null,
    ] {
        let out = response(&answer(garbage.clone(), check));
        assert_eq!(out["allowed"], false, "{garbage}");
        assert!(
            out["status"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    fn task() -> impl Strategy<Value = Value> {
        (
            prop_oneof![
                Just(json!("learner")),
                Just(json!("collector")),
                Just(json!("evaluator")),
                Just(json!("none")),
                Just(json!("trainer")),
                Just(Value::Null),
                Just(json!(7)),
            ],
            prop_oneof![
                Just(Value::Null),
                "[a-z][a-z0-9-]{0,70}".prop_map(Value::from),
                "[A-Z_ ]{0,5}".prop_map(Value::from)
            ],
            prop_oneof![
                any::<i64>().prop_map(Value::from),
                Just(json!("two")),
                Just(Value::Null)
            ],
            prop_oneof![Just(Value::Null), (-2i64..6).prop_map(Value::from)],
            prop_oneof![Just(Value::Null), (-2i64..6).prop_map(Value::from)],
        )
            .prop_map(|(type_, name, replicas, min, max)| {
                json!({"type": type_, "name": name, "replicas": replicas,
                       "minReplicas": min, "maxReplicas": max, "template": container()})
            })
    }

    fn object() -> impl Strategy<Value = Value> {
        prop_oneof![
            (
                "[a-z]{1,70}",
                proptest::collection::vec(task(), 0..5),
                any::<bool>()
            )
                .prop_map(|(name, tasks, preemptible)| {
                    let mut j = job(Value::Array(tasks));
                    j["metadata"]["name"] = json!(name);
                    j["spec"]["preemptible"] = json!(preemptible);
                    j
                }),
            Just(Value::Null),
            Just(json!({"spec": 3})),
        ]
    }

    fn body() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..128),
            (
                prop_oneof![
                    Just("CREATE"),
                    Just("UPDATE"),
                    Just("DELETE"),
                    Just("bogus")
                ],
                object(),
                prop_oneof![Just(None), object().prop_map(Some)],
            )
                .prop_map(|(op, object, old)| review(op, object, old).to_string().into_bytes()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// Whatever arrives: no panic, a well-formed AdmissionReview answer with the request's
        /// uid, a message on every refusal, and defaults that apply and are idempotent.
        #[test]
        fn any_body_gets_a_well_formed_review(body in body()) {
            let sent: Option<Value> = serde_json::from_slice(&body).ok();
            for (webhook, decide) in [("mutate", mutate as fn(&AdmissionRequest<DIJob>) -> AdmissionResponse), ("validate", check)] {
                let review = super::super::serve(&body, webhook, decide, None);
                let out = response(&review);
                let uid = sent.as_ref().and_then(|s| s.pointer("/request/uid")).and_then(Value::as_str);
                if out["allowed"] == true {
                    prop_assert_eq!(out["uid"].as_str(), uid);
                } else {
                    prop_assert!(out["status"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{}", out);
                    prop_assert!(out["status"]["code"].as_u64().is_some_and(|c| c >= 400), "{}", out);
                }
                if let Some(patch) = review.response.as_ref().and_then(|r| r.patch.as_ref()) {
                    let patch: json_patch::Patch = serde_json::from_slice(patch).expect("a JSON patch");
                    let mut object = sent.as_ref().expect("patched a review").pointer("/request/object").cloned().expect("object");
                    json_patch::patch(&mut object, &patch).expect("the patch applies");
                    let mut again = sent.clone().expect("review");
                    again["request"]["object"] = object;
                    let second = super::super::serve(again.to_string().as_bytes(), "mutate", mutate, None);
                    prop_assert!(second.response.as_ref().is_some_and(|r| r.allowed && r.patch.is_none()));
                }
            }
        }
    }
}

/// The `operation` label of `diorch_admission_reviews_total` comes from a fixed set: a review
/// with made-up operations (or none) cannot grow the metric's label set.
#[test]
fn the_operation_label_is_one_of_a_fixed_set() {
    let metrics = crate::metrics::Metrics::new();
    let object = job(json!([{"type": "learner", "template": {}}]));
    for i in 0..50 {
        let body = review(&format!("MADE-UP-{i}"), object.clone(), None);
        super::serve(
            body.to_string().as_bytes(),
            "validate",
            check,
            Some(&metrics),
        );
    }
    super::serve(b"not json", "validate", check, Some(&metrics));
    let create = review("CREATE", object, None);
    super::serve(
        create.to_string().as_bytes(),
        "validate",
        check,
        Some(&metrics),
    );
    let text = metrics.encode();
    let operations: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| l.starts_with("diorch_admission_reviews_total{"))
        .filter_map(|l| l.split("operation=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(
        operations,
        ["CREATE", "other"].into_iter().collect(),
        "{text}"
    );
    assert!(!text.contains("MADE-UP"), "{text}");
}

/// Alerts tell the webhook's failures from the jobs it refuses: garbage is `error`, a refused
/// job `denied`.
#[test]
fn a_body_that_is_not_a_review_counts_as_error_and_a_refused_job_as_denied() {
    let metrics = crate::metrics::Metrics::new();
    super::serve(b"not json", "validate", check, Some(&metrics));
    let two_learners = job(json!([
        {"type": "learner", "template": {}},
        {"type": "learner", "template": {}}
    ]));
    let body = review("CREATE", two_learners, None).to_string();
    super::serve(body.as_bytes(), "validate", check, Some(&metrics));
    let text = metrics.encode();
    for line in [
        "diorch_admission_reviews_total{webhook=\"validate\",operation=\"other\",result=\"error\"} 1",
        "diorch_admission_reviews_total{webhook=\"validate\",operation=\"CREATE\",result=\"denied\"} 1",
    ] {
        assert!(text.contains(line), "missing {line} in\n{text}");
    }
}
