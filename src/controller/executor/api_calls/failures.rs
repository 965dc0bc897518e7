//! The API server refusing a write: a pod create answered AlreadyExists, an invalid pod that
//! fails the job on the same pass, and a job validation refuses.

use super::*;

/// A pod create answered 409 AlreadyExists: the executor looks the holder up (a LIST by name:
/// its RBAC has no pod `get`) and never creates it twice. Held by this very job's pod (a
/// retried create the cache has not shown yet): the goal is met, no Event, no error. Held by a
/// pod that is not the job's: FailedCreate, and the pass is an error to retry with backoff.
#[tokio::test]
async fn a_pod_create_answered_already_exists_lists_the_holder_and_never_creates_twice() {
    let creates_then_status = |list: &'static str| -> Vec<Vec<&'static str>> {
        vec![
            vec![
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-learner-0",
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-collector-0",
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-collector-1",
                "POST /api/v1/namespaces/default/services?&fieldManager=diorch name=di-j",
                list,
            ],
            vec![
                "PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j/status?&fieldManager=diorch phase=Pending rv=1",
            ],
        ]
    };
    let list = "GET /api/v1/namespaces/default/pods?&fieldSelector=metadata.name%3Dj-collector-1";
    for ours in [true, false] {
        let job = new_job();
        let mut h = Harness::new(&job);
        // The server holds j-collector-1; the cache does not show it.
        let (pods, _) = built(&job, &BuildContext::default());
        let mut holder = serde_json::to_value(&pods[2]).expect("pod JSON");
        if !ours {
            holder["metadata"]["ownerReferences"][0]["uid"] = json!("someone-else");
        }
        h.server.hold("pods", holder);

        let result = h.reconcile(&job).await;
        let calls = h.server.take();
        let expected = creates_then_status(list);
        let groups: Vec<&[&str]> = expected.iter().map(Vec::as_slice).collect();
        assert_calls(&calls, &groups);
        // The look-up follows the refused create.
        let at = |line: &str| calls.iter().position(|c| c.line() == line);
        assert!(
            at("POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-collector-1")
                < at(list)
        );
        let events = h.events();
        if ours {
            assert_eq!(result.expect("reconcile"), Requeue::await_change());
            assert!(
                !events.iter().any(|e| e.contains("j-collector-1")),
                "{events:?}"
            );
        } else {
            assert!(
                matches!(&result, Err(Error::Writes { failed: 1, kind: "create", first, .. })
                    if first.contains("a pod of that name exists that this job does not own")),
                "{result:?}"
            );
            assert!(
                events.contains(&"Warning FailedCreate Pod/j-collector-1".to_string()),
                "{events:?}"
            );
        }
    }
}

/// A pod the API server refuses as invalid (422) fails the job: retrying cannot help. It fails
/// on the same pass: the Failed status is planned from the job the pass's own status write
/// returned and guarded by its new resourceVersion (the cached one is stale by then, which
/// once made the server answer 409 and the failure be dropped, the pod re-created and a
/// FailedCreate recorded on every pass). The next pass creates nothing.
#[tokio::test]
async fn an_invalid_pod_fails_the_job_on_the_same_pass_with_the_servers_message() {
    let job = dijob().task("learner", 1).build();
    let mut h = Harness::new(&job);
    let message = "Pod \"j-learner-0\" is invalid: spec.containers[0].image: Required value";
    h.server
        .fail("POST", "pods", "j-learner-0", 422, "Invalid", message);
    let status = "PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j/status?&fieldManager=diorch";

    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::await_change()
    );
    let calls = h.server.take();
    let pending = format!("{status} phase=Pending rv=1");
    // Guarded by the resourceVersion the Pending write answered with.
    let failed = format!("{status} phase=Failed rv=2");
    assert_calls(
        &calls,
        &[
            &[
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-learner-0",
                "POST /api/v1/namespaces/default/services?&fieldManager=diorch name=di-j",
            ],
            &[&pending],
            &[&failed],
        ],
    );
    let conditions = calls[3].body["status"]["conditions"].clone();
    let condition = conditions
        .as_array()
        .and_then(|c| c.last())
        .cloned()
        .unwrap_or_default();
    assert_eq!(condition["type"], "Failed");
    assert_eq!(condition["reason"], "JobFailed");
    assert_eq!(
        condition["message"],
        format!("pod j-learner-0 failed to create: {message}")
    );
    // Planned from the job as the Pending write left it (its condition and rank table), not as
    // the pass found it (no status at all).
    let types: Vec<&Value> = conditions
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| &c["type"])
        .collect();
    assert_eq!(types, [&json!("Pending"), &json!("Failed")]);
    let rest_of = |status: &Value| {
        let mut status = status.clone();
        if let Some(s) = status.as_object_mut() {
            for ended in ["phase", "conditions", "completionTimestamp"] {
                s.remove(ended);
            }
        }
        status
    };
    let rest = |call: &Call| rest_of(&call.body["status"]);
    // The failing write changes only those; the rest stays as the Pending write left it.
    assert_eq!(rest(&calls[3]), json!({}));
    let stored = serde_json::to_value(h.server.job().status).expect("status");
    assert_eq!(rest_of(&stored), rest(&calls[2]));
    assert_eq!(
        h.server.job().status.and_then(|s| s.phase),
        Some(Phase::Failed)
    );
    assert_eq!(
        h.events(),
        [
            "Warning FailedCreate Pod/j-learner-0",
            "Normal SuccessfulCreate Service/di-j",
            "Normal JobPending",
            "Warning JobFailed",
        ]
    );
    // Both transitions of the pass are counted, the failure too.
    let transitions = |phase: &'static str| {
        h.ctx
            .metrics
            .controller
            .transitions
            .get_or_create(&PhaseLabels { phase })
            .get()
    };
    assert_eq!((transitions("Pending"), transitions("Failed")), (1, 1));

    // Pass 2, over the job as stored (Failed) and its service: the pod is not created again;
    // the finished job's service goes, as for any failed job.
    let svc: CachedService =
        serde_json::from_value(h.server.object("services", "di-j")).expect("service");
    h.services.apply(watcher::Event::Apply(svc));
    let job = h.server.job();
    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::await_change()
    );
    assert_calls(
        &h.server.take(),
        &[&["DELETE /api/v1/namespaces/default/services/di-j? uid=server-uid-1 grace=null"]],
    );
    assert_eq!(h.events(), ["Normal SuccessfulDelete Service/di-j"]);
}

/// A job validation refuses: Failed with the reason, a status write only (no pod, no
/// service, no defaulting patch).
#[tokio::test]
async fn an_invalid_job_fails_with_a_status_write_only() {
    let job = dijob().task("learner", 1).task("learner", 1).build();
    let mut h = Harness::new(&job);

    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::await_change()
    );
    let calls = h.server.take();
    assert_calls(
        &calls,
        &[&[
            "PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j/status?&fieldManager=diorch phase=Failed rv=1",
        ]],
    );
    assert_eq!(
        calls[0].body["status"]["conditions"][0]["message"],
        "the number of learner task is more than one"
    );
    assert_eq!(h.events(), ["Warning JobFailed"]);
}
