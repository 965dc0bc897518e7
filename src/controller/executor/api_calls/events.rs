//! Events through the real Event worker, off the reconcile's own calls.

use super::*;

/// With the real Event worker the Events go to events.k8s.io on their own (interleaved with the
/// reconcile's writes, which stay exactly those pinned for a new job). An Event is created as
/// the pods are (`writes::create_unread`), under the field manager `diorch`, with no need of
/// `writes::FieldManagerLayer`, which this bare test client does not have.
#[tokio::test]
async fn events_are_recorded_by_the_worker_off_the_reconciles_calls() {
    let job = new_job();
    let h = Harness::with(&job, Settings::default(), true);
    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::await_change()
    );

    // 5 writes of the reconcile and 2 Events (the creates fold into one); the worker runs on
    // its own, so wait (bounded).
    let mut seen = h.server.seen.subscribe();
    tokio::time::timeout(BOUND, seen.wait_for(|n| *n >= 7))
        .await
        .expect("the Event worker did not post 2 Events within 10 s")
        .expect("server alive");
    let calls = h.server.take();
    let (events, writes): (Vec<Call>, Vec<Call>) = calls.into_iter().partition(Call::is_event);
    assert_calls(
        &writes,
        &[
            &[
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-learner-0",
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-collector-0",
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-collector-1",
                "POST /api/v1/namespaces/default/services?&fieldManager=diorch name=di-j",
            ],
            &[
                "PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j/status?&fieldManager=diorch phase=Pending rv=1",
            ],
        ],
    );
    let mut posted: Vec<String> = events
        .iter()
        .map(|e| {
            assert_eq!(
                (e.method.as_str(), e.path.as_str()),
                (
                    "POST",
                    "/apis/events.k8s.io/v1/namespaces/default/events?&fieldManager=diorch"
                )
            );
            assert_eq!(e.body["regarding"]["name"], "j");
            assert_eq!(e.body["reportingController"], "di-operator");
            let reason = e.body["reason"].as_str().unwrap_or_default();
            if reason == "SuccessfulCreate" {
                // DI-orchestrator's message for each object, in one note.
                let note = e.body["note"].as_str().unwrap_or_default();
                for object in [
                    "pod j-learner-0",
                    "pod j-collector-0",
                    "pod j-collector-1",
                    "service di-j",
                ] {
                    assert!(
                        note.contains(&format!("{object} was successfully created")),
                        "{note}"
                    );
                }
            }
            match e.body["related"]["name"].as_str() {
                Some(related) => format!("{reason} {related}"),
                None => reason.to_string(),
            }
        })
        .collect();
    posted.sort();
    assert_eq!(posted, ["JobPending", "SuccessfulCreate"]);
}
