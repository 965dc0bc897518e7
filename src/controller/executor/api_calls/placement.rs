//! Placement: a preemptible job waiting for capacity or placed on a node (its allocation
//! written before any pod), and a gang-scheduled job's PodGroup ensured before its pods.

use super::*;

/// A preemptible job that does not fit (the allocator sees no node) waits in Pending: its
/// service is created and the status says why, but no pod is written; it is tried again after
/// WAITING_RETRY at the latest.
#[tokio::test]
async fn a_preemptible_job_waiting_for_capacity_writes_no_pod() {
    let mut job = new_job();
    job.spec.preemptible = true;
    let mut h = Harness::new(&job);

    let result = h.reconcile(&job).await;
    assert_eq!(result.expect("reconcile"), Requeue::requeue(WAITING_RETRY));
    let calls = h.server.take();
    assert_calls(
        &calls,
        &[
            &["POST /api/v1/namespaces/default/services?&fieldManager=diorch name=di-j"],
            &[
                "PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j/status?&fieldManager=diorch phase=Pending rv=1",
            ],
        ],
    );
    let allocated = &calls[1].body["status"]["conditions"][0];
    assert_eq!(
        (&allocated["type"], &allocated["status"]),
        (&json!("Allocated"), &json!("False"))
    );
    assert!(calls[1].body["status"]["allocation"].is_null());
    assert_eq!(
        h.events(),
        [
            "Normal SuccessfulCreate Service/di-j",
            "Normal JobPending",
            "Warning FailedAllocation",
        ]
    );
}

/// A preemptible job that fits: its new allocation is written first (status_first), then the
/// pods go out pinned to the allocated node, with the service.
#[tokio::test]
async fn a_placed_preemptible_job_writes_its_allocation_before_any_pod() {
    let mut job = new_job();
    job.spec.preemptible = true;
    let mut h = Harness::new(&job);
    h.nodes
        .apply_watcher_event(&watcher::Event::Apply(node("n0", "32", "128Gi")));

    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::await_change()
    );
    let calls = h.server.take();
    assert_calls(
        &calls,
        &[
            &[
                "PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j/status?&fieldManager=diorch phase=Pending rv=1",
            ],
            &[
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-learner-0",
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-collector-0",
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-collector-1",
                "POST /api/v1/namespaces/default/services?&fieldManager=diorch name=di-j",
            ],
        ],
    );
    assert_eq!(
        calls[0].body["status"]["allocation"],
        json!(["n0", "n0", "n0"])
    );
    for name in ["j-learner-0", "j-collector-0", "j-collector-1"] {
        let pod = body_of(&calls, "POST", PODS, name);
        assert_eq!(
            pod["metadata"]["annotations"]["diengine/node"], "n0",
            "{name}"
        );
        assert_eq!(
            pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                ["nodeSelectorTerms"][0]["matchFields"],
            json!([{"key": "metadata.name", "operator": "In", "values": ["n0"]}]),
            "{name}"
        );
    }
}

/// The same when the status goes first (a new allocation): the Failed status is guarded by the
/// resourceVersion the allocation's write answered with.
#[tokio::test]
async fn an_invalid_pod_after_the_allocation_is_written_fails_the_job_on_the_same_pass() {
    let mut job = new_job();
    job.spec.preemptible = true;
    let mut h = Harness::new(&job);
    h.nodes
        .apply_watcher_event(&watcher::Event::Apply(node("n0", "32", "128Gi")));
    h.server
        .fail("POST", "pods", "j-collector-1", 422, "Invalid", "bad pod");

    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::await_change()
    );
    let calls = h.server.take();
    let status = "PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j/status?&fieldManager=diorch";
    assert_calls(
        &calls,
        &[
            &[&format!("{status} phase=Pending rv=1")],
            &[
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-learner-0",
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-collector-0",
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-collector-1",
                "POST /api/v1/namespaces/default/services?&fieldManager=diorch name=di-j",
            ],
            &[&format!("{status} phase=Failed rv=2")],
        ],
    );
    // Planned from the written status: the allocation stays (the failing patch leaves it).
    assert_eq!(calls[5].body["status"].get("allocation"), None);
    assert_eq!(
        h.server.job().status.and_then(|s| s.allocation),
        Some(vec!["n0".to_string(); 3])
    );
    assert_eq!(
        h.server.job().status.and_then(|s| s.phase),
        Some(Phase::Failed)
    );
    let events = h.events();
    assert_eq!(
        events
            .iter()
            .filter(|e| e.starts_with("Warning FailedCreate"))
            .collect::<Vec<_>>(),
        ["Warning FailedCreate Pod/j-collector-1"]
    );
    assert_eq!(events.last().map(String::as_str), Some("Warning JobFailed"));
}

/// With a gang scheduler the PodGroup is ensured before any pod; when it exists already (409)
/// its minMember is merge-patched instead.
#[tokio::test]
async fn a_gang_scheduled_job_ensures_its_podgroup_before_the_pods() {
    let settings = || Settings {
        build: BuildContext {
            gang: Some(Gang {
                kind: GangKind::Volcano,
                scheduler_name: "volcano".into(),
            }),
            ..BuildContext::default()
        },
        ..Settings::default()
    };
    let pods_and_service: &[&str] = &[
        "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-learner-0",
        "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-collector-0",
        "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-collector-1",
        "POST /api/v1/namespaces/default/services?&fieldManager=diorch name=di-j",
    ];
    let status: &[&str] = &[
        "PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j/status?&fieldManager=diorch phase=Pending rv=1",
    ];
    let groups = "/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups";

    let job = new_job();
    let h = Harness::with(&job, settings(), false);
    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::await_change()
    );
    let calls = h.server.take();
    let create = format!("POST {groups}?&fieldManager=diorch name=j");
    assert_calls(&calls, &[&[&create], pods_and_service, status]);
    // The whole PodGroup: named and labelled like the job, owned by it, minMember its replicas.
    assert_eq!(
        calls[0].body,
        json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {
                "name": "j",
                "namespace": "default",
                "labels": {"diengine/job": "j", "diengine/operator": "di-operator"},
                "ownerReferences": [{
                    "apiVersion": "diengine.opendilab.org/v2alpha1",
                    "kind": "DIJob",
                    "name": "j",
                    "uid": JOB_UID,
                    "controller": true,
                    "blockOwnerDeletion": true,
                }],
            },
            "spec": {"minMember": 3},
        })
    );
    let pod = body_of(&calls, "POST", PODS, "j-learner-0");
    assert_eq!(pod["spec"]["schedulerName"], "volcano");
    assert_eq!(
        pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"],
        "j"
    );

    // The PodGroup is there already (an earlier pass, a smaller job): its minMember is set.
    let h = Harness::with(&job, settings(), false);
    h.server.hold("podgroups", json!({"apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup", "metadata": {"name": "j", "namespace": "default"}, "spec": {"minMember": 1}}));
    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::await_change()
    );
    let patch = format!(
        r#"PATCH {groups}/j?&fieldManager=diorch application/merge-patch+json {{"spec":{{"minMember":3}}}}"#
    );
    assert_calls(
        &h.server.take(),
        &[&[&create], &[&patch], pods_and_service, status],
    );
}
