//! A job's life in calls: a new job's creates and Pending, the defaulting patch, a failed pod
//! restarted (and a status conflict stopping the pass), cleanup on success, deletion, unsynced
//! caches, a steady job, a service the cache has not shown yet, and count changes spaced out.

use super::*;

/// A new job: every pod and the service are created (concurrently), then the status goes to
/// Pending with the cached resourceVersion as guard. Plain creations go first (status_first is
/// false): a rank a pod uses is recovered from the pod if the status write is lost.
#[tokio::test]
async fn a_new_job_creates_its_pods_and_service_then_writes_pending() {
    let job = new_job();
    let mut h = Harness::new(&job);

    let result = h.reconcile(&job).await;
    assert_eq!(result.expect("reconcile"), Requeue::await_change());
    let calls = h.server.take();
    assert_calls(
        &calls,
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

    // What each pod carries: the job label, its controller owner, and its place in the world.
    let nodes = [
        fqdn("j-learner-0"),
        fqdn("j-collector-0"),
        fqdn("j-collector-1"),
    ]
    .join(",");
    for (rank, name) in ["j-learner-0", "j-collector-0", "j-collector-1"]
        .iter()
        .enumerate()
    {
        let pod = body_of(&calls, "POST", PODS, name);
        assert_eq!(pod["metadata"]["labels"]["diengine/job"], "j", "{name}");
        assert_eq!(
            pod["metadata"]["labels"]["diengine/operator"], "di-operator",
            "{name}"
        );
        assert_eq!(
            pod["metadata"]["ownerReferences"],
            json!([{"apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob", "name": "j",
                "uid": JOB_UID, "controller": true, "blockOwnerDeletion": true}]),
            "{name}"
        );
        assert_eq!(env(pod, "DI_RANK"), rank.to_string(), "{name}");
        assert_eq!(env(pod, "DI_NODES"), nodes, "{name}");
        assert_eq!(env(pod, "DI_JOB_ID"), "default/j", "{name}");
        assert_eq!(pod["spec"]["hostname"], *name);
        assert_eq!(pod["spec"]["subdomain"], "di-j");
    }
    let svc = body_of(&calls, "POST", SERVICES, "di-j");
    assert_eq!(svc["spec"]["clusterIP"], "None");
    assert_eq!(svc["metadata"]["ownerReferences"][0]["uid"], JOB_UID);
    assert_eq!(svc["spec"]["selector"]["diengine/job"], "j");
    let status = &calls.last().expect("status write").body;
    assert_eq!(status["status"]["replicas"], 3);
    assert_eq!(
        status["status"]["ranks"],
        json!(["j-learner-0", "j-collector-0", "j-collector-1"])
    );
    // A merge patch of the status alone, guarded by the resourceVersion it was planned from:
    // neither the spec nor any other metadata goes along.
    assert_eq!(status["metadata"], json!({"resourceVersion": "1"}));
    assert_eq!(status.get("spec"), None);

    assert_eq!(
        h.events(),
        // The pass's four creates are one Event (its note lists each object).
        ["Normal SuccessfulCreate", "Normal JobPending"]
    );
}

/// A pass that still sees the job as it was before this process's own status write (its watch
/// event not in yet) makes no call: a status write from it would only be refused. Once the
/// cache shows the write, passes go on.
#[tokio::test]
async fn a_pass_from_before_its_own_status_write_makes_no_call() {
    let job = new_job();
    let mut h = Harness::new(&job);
    h.reconcile(&job).await.expect("reconcile");
    let calls = h.server.take();
    for name in ["j-learner-0", "j-collector-0", "j-collector-1"] {
        let pod: Pod =
            serde_json::from_value(body_of(&calls, "POST", PODS, name).clone()).expect("pod");
        h.cache_pod(&pod);
    }
    let svc: Service =
        serde_json::from_value(body_of(&calls, "POST", SERVICES, "di-j").clone()).expect("svc");
    h.services
        .apply(watcher::Event::Apply(CachedService::from(svc)));

    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::requeue(diorch_core::step::OWN_WRITES_RETRY)
    );
    assert_calls(&h.server.take(), &[]);
    // What held it back: forgetting the write, the same pass is refused (409) by the server.
    let key = diorch_core::key::ObjectKey::of(&job.metadata);
    let remembered = h.ctx.recall(&key);
    h.ctx.remember(&key, |m| m.status_unseen = None);
    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::requeue(diorch_core::step::CONFLICT_RETRY)
    );
    h.server.take();
    h.ctx.remember(&key, |m| *m = remembered);

    let written = h.server.job();
    assert_ne!(
        written.metadata.resource_version,
        job.metadata.resource_version
    );
    let again = h.reconcile(&written).await.expect("reconcile");
    assert_ne!(again, Requeue::requeue(diorch_core::step::OWN_WRITES_RETRY));
}

/// A typed task without a name: one JSON patch of the DIJob (each `add` guarded by a `test`
/// of the task's type) and nothing else; the update brings the job back with its names.
#[tokio::test]
async fn an_unnamed_task_gets_a_guarded_json_patch_and_nothing_else() {
    let job = dijob()
        .task_json(json!({"type": "learner", "replicas": 1,
            "template": {"spec": {"containers": [{"name": "di-container", "image": "i"}]}}}))
        .build();
    let mut h = Harness::new(&job);

    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::await_change()
    );
    assert_calls(
        &h.server.take(),
        &[&[
            r#"PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j?&fieldManager=diorch application/json-patch+json [{"op":"test","path":"/spec/tasks/0/type","value":"learner"},{"op":"add","path":"/spec/tasks/0/name","value":"learner"}]"#,
        ]],
    );
    assert_eq!(
        h.server.job().spec.tasks[0].name.as_deref(),
        Some("learner")
    );
    assert!(h.events().is_empty());
}

/// `job` Running, `j-learner-0` failed in the cache (restarts left), the rest cached as they
/// are on the server.
fn with_failed_learner() -> (DIJob, Harness, Vec<Pod>) {
    let (job, pods) = running();
    let mut h = Harness::new(&job);
    h.with_service(&service(&job));
    let mut pods = pods;
    pods[0] = with_phase(pods[0].clone(), "Failed", false);
    for pod in &pods {
        h.with_pod(pod);
    }
    (job, h, pods)
}

/// A counted transition (Restarting) is committed first; when that write conflicts (the cache
/// is behind the stored job) nothing else is written and the job is requeued shortly, to be
/// planned again from the newer job.
#[tokio::test]
async fn a_status_conflict_stops_the_pass_before_any_pod_write() {
    let (job, mut h, _) = with_failed_learner();
    h.server.set_job_rv("2");

    let result = h.reconcile(&job).await;
    assert_eq!(
        result.expect("reconcile"),
        Requeue::requeue(Duration::from_millis(200))
    );
    assert_calls(
        &h.server.take(),
        &[&[
            "PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j/status?&fieldManager=diorch phase=Restarting rv=1",
        ]],
    );
    // The transition did not happen: no Event says it did.
    assert!(h.events().is_empty());
}

/// A failed pod with restarts left: Restarting (restarts 1) is written first, then the pod is
/// deleted with its uid as precondition and no grace (its containers have stopped). The next
/// pass, once the cache shows it gone, creates it again under the same name and rank, and the
/// one after that, seeing every pod, moves to Starting with a status write only.
#[tokio::test]
async fn a_failed_pod_is_deleted_after_restarting_is_written_and_recreated_next_pass() {
    let (job, mut h, pods) = with_failed_learner();

    let result = h.reconcile(&job).await;
    assert_eq!(result.expect("reconcile"), Requeue::await_change());
    let calls = h.server.take();
    assert_calls(
        &calls,
        &[
            &[
                "PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j/status?&fieldManager=diorch phase=Restarting rv=1",
            ],
            &["DELETE /api/v1/namespaces/default/pods/j-learner-0? uid=uid-j-learner-0 grace=0"],
        ],
    );
    assert_eq!(calls[0].body["status"]["restarts"], 1);
    assert_eq!(
        h.events(),
        [
            "Normal SuccessfulDelete Pod/j-learner-0",
            "Warning JobRestarting"
        ]
    );

    // Pass 2: the job as stored (Restarting, rv 2), the pod gone from the cache. Its new
    // replica counts are held back (written a moment ago), so the pass comes back soon.
    h.uncache_pod(&pods[0]);
    let job = h.server.job();
    assert_eq!(job.metadata.resource_version.as_deref(), Some("2"));
    let requeue = h.reconcile(&job).await.expect("reconcile");
    assert!(requeue != Requeue::await_change(), "{requeue:?}");
    let calls = h.server.take();
    assert_calls(
        &calls,
        &[&["POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-learner-0"]],
    );
    let pod = body_of(&calls, "POST", PODS, "j-learner-0");
    assert_eq!(env(pod, "DI_RANK"), "0", "the pod keeps its rank");
    assert_eq!(h.events(), ["Normal SuccessfulCreate Pod/j-learner-0"]);

    // Pass 3: the watch shows the new pod; every pod is there again.
    let created: Pod = serde_json::from_value(h.server.object("pods", "j-learner-0")).expect("pod");
    h.cache_pod(&with_phase(created, "Pending", false));
    let job = h.server.job();
    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::await_change()
    );
    assert_calls(
        &h.server.take(),
        &[&[
            "PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j/status?&fieldManager=diorch phase=Starting rv=2",
        ]],
    );
    assert_eq!(h.events(), ["Normal JobStarting"]);
}

/// A Succeeded job cleans up by its cleanPodPolicy: the service always, and the pods the
/// policy names, each delete guarded by the object's uid; pods whose containers stopped go
/// without grace. Nothing else: the status (complete already) is not written again.
#[tokio::test]
async fn a_succeeded_job_deletes_its_service_and_the_pods_its_clean_pod_policy_names() {
    let svc_delete = "DELETE /api/v1/namespaces/default/services/di-j? uid=svc-uid grace=null";
    let cases: [(&str, &[&str]); 3] = [
        (
            "Running",
            &[
                "DELETE /api/v1/namespaces/default/pods/j-collector-0? uid=uid-j-collector-0 grace=null",
            ],
        ),
        (
            "All",
            &[
                "DELETE /api/v1/namespaces/default/pods/j-learner-0? uid=uid-j-learner-0 grace=0",
                "DELETE /api/v1/namespaces/default/pods/j-collector-0? uid=uid-j-collector-0 grace=null",
                "DELETE /api/v1/namespaces/default/pods/j-collector-1? uid=uid-j-collector-1 grace=0",
            ],
        ),
        ("None", &[]),
    ];
    for (policy, pod_deletes) in cases {
        let (mut job, pods) = running();
        job.spec.clean_pod_policy = serde_json::from_value(json!(policy)).expect("policy");
        let status = job.status.get_or_insert_with(Default::default);
        status.phase = Some(Phase::Succeeded);
        status.completion_timestamp = Some(Time(jiff::Timestamp::now()));
        status.ready_replicas = 0;
        status.task_status = None;
        // As a finished job's status reads: scales kept, none ready.
        for task in status
            .task_replica_status
            .iter_mut()
            .flat_map(|m| m.iter_mut().map(|(_, task)| task))
        {
            task.ready_replicas = 0;
        }
        let mut h = Harness::new(&job);
        h.with_service(&service(&job));
        let phases = [("Succeeded", false), ("Running", true), ("Failed", false)];
        for (pod, (phase, ready)) in pods.into_iter().zip(phases) {
            h.with_pod(&with_phase(pod, phase, ready));
        }

        assert_eq!(
            h.reconcile(&job).await.expect("reconcile"),
            Requeue::await_change(),
            "{policy}"
        );
        let mut group = vec![svc_delete];
        group.extend_from_slice(pod_deletes);
        assert_calls(&h.server.take(), &[&group]);
        // The pass's deletes fold into one Event; a lone delete keeps its related object.
        let events = h.events();
        let expected = if group.len() == 1 {
            "Normal SuccessfulDelete Service/di-j"
        } else {
            "Normal SuccessfulDelete"
        };
        assert_eq!(events, [expected], "{policy}");
    }
}

/// A job being deleted: garbage collection removes its pods and service through the owner
/// references, so the reconcile makes no call at all, even with pods missing.
#[tokio::test]
async fn a_job_being_deleted_makes_no_call() {
    let mut job = new_job();
    job.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
    let mut h = Harness::new(&job);

    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::await_change()
    );
    assert_calls(&h.server.take(), &[]);
    assert!(h.events().is_empty());
}

/// Before every cache has synced the pod cache may be half-filled (a running job's pods would
/// look gone): no call, requeued shortly.
#[tokio::test]
async fn caches_not_synced_make_no_call() {
    let job = new_job();
    let mut h = Harness::new(&job);
    h.ctx
        .caches
        .ready
        .store(false, std::sync::atomic::Ordering::Release);

    let result = h.reconcile(&job).await;
    assert_eq!(
        result.expect("reconcile"),
        Requeue::requeue(Duration::from_millis(500))
    );
    assert_calls(&h.server.take(), &[]);
    assert!(h.events().is_empty());
}

/// A steady Running job makes no call; with its service deleted by hand, the only call is
/// the service's create (the status does not change).
#[tokio::test]
async fn a_steady_job_makes_no_call_and_a_lost_service_is_created_again() {
    let (job, pods) = running();
    let mut h = Harness::new(&job);
    for pod in &pods {
        h.with_pod(pod);
    }
    let svc = service(&job);
    h.with_service(&svc);
    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::await_change()
    );
    assert_calls(&h.server.take(), &[]);
    assert!(h.events().is_empty());

    h.services
        .apply(watcher::Event::Delete(CachedService::from(svc)));
    h.server.state().objects.remove("services");
    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::await_change()
    );
    assert_calls(
        &h.server.take(),
        &[&["POST /api/v1/namespaces/default/services?&fieldManager=diorch name=di-j"]],
    );
    assert_eq!(h.events(), ["Normal SuccessfulCreate Service/di-j"]);
}

/// A steady job's pass is quiet: the rolling resync skips the job while the caches show the
/// same job, pods and service (`Context::seen`), and passes over it again once any of them
/// moved; a pass with something to do leaves nothing for the resync to skip.
#[tokio::test]
async fn a_quiet_pass_lets_the_resync_skip_the_job_until_its_caches_move() {
    use diorch_core::step::resync_needed;
    let (mut job, pods) = running();
    job.metadata.resource_version = Some("7".into());
    let mut h = Harness::new(&job);
    for pod in &pods {
        h.with_pod(pod);
    }
    let svc = service(&job);
    h.with_service(&svc);
    h.cache_job(&job);
    let key = super::super::job_key(&job);
    let needed = |h: &Harness| resync_needed(&h.ctx.recall(&key), &h.ctx.seen(&key));
    assert!(needed(&h), "no pass yet");

    h.reconcile(&job).await.expect("reconcile");
    assert_calls(&h.server.take(), &[]);
    assert!(!needed(&h), "a quiet pass on what the caches still show");

    // Any event of one of its pods, even one that changes nothing.
    h.cache_pod(&pods[0]);
    assert!(needed(&h), "a pod event");
    h.reconcile(&job).await.expect("reconcile");
    assert!(!needed(&h));

    // A new version of the job.
    let mut edited = job.clone();
    edited.metadata.resource_version = Some("8".into());
    h.cache_job(&edited);
    assert!(needed(&h), "a job event");
    h.reconcile(&edited).await.expect("reconcile");
    assert!(!needed(&h));

    // The service gone: the pass creates it, and is not quiet.
    h.services
        .apply(watcher::Event::Delete(CachedService::from(svc)));
    h.server.state().objects.remove("services");
    assert!(needed(&h), "the service gone");
    h.reconcile(&edited).await.expect("reconcile");
    assert_eq!(h.server.take().len(), 1, "the service's create");
    assert_eq!(h.ctx.recall(&key).quiet, None);
    assert!(needed(&h));
}

/// A job still Starting at version 3 whose pods all run, on the server and in the caches: its
/// next pass writes it Running.
fn starting_with_every_pod_running() -> (DIJob, Vec<Pod>, Harness, diorch_core::key::ObjectKey) {
    let (mut job, pods) = running();
    if let Some(status) = job.status.as_mut() {
        status.phase = Some(Phase::Starting);
    }
    job.metadata.resource_version = Some("3".into());
    let mut h = Harness::new(&job);
    h.server.set_job_rv("3");
    for pod in &pods {
        h.with_pod(pod);
    }
    h.with_service(&service(&job));
    h.cache_job(&job);
    let key = super::super::job_key(&job);
    (job, pods, h, key)
}

/// The write that takes a job to Running leaves nothing for a pass on its echo: the echo
/// brings no pass (`status_echo`), and the resync skips the job too once the cache shows the
/// write, as it would after that pass; not before, nor once a pod moved.
#[tokio::test]
async fn the_write_to_running_leaves_the_resync_nothing_once_the_cache_shows_it() {
    use diorch_core::step::resync_needed;
    let (job, pods, mut h, key) = starting_with_every_pod_running();
    let needed = |h: &Harness| resync_needed(&h.ctx.recall(&key), &h.ctx.seen(&key));

    h.reconcile(&job).await.expect("reconcile");
    let calls = h.server.take();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(calls[0].line().contains("phase=Running"), "{calls:?}");
    let memory = h.ctx.recall(&key);
    let written = h.server.job();
    assert_eq!(memory.status_echo, written.metadata.resource_version);
    assert!(needed(&h), "the cache does not show the write yet");

    h.cache_job(&written);
    assert!(!needed(&h), "the echo, whose pass would be quiet");
    h.cache_pod(&pods[0]);
    assert!(needed(&h), "a pod event");
}

/// Pods of a Running job turn unready one after another: a change of the counts alone waits
/// `COUNTS_HOLD` (no call; a pass comes back for it when the hold is over) and then goes out
/// with whatever the counts are then; the next change waits again.
#[tokio::test]
async fn replica_counts_changing_wait_out_the_hold_and_go_in_one_write() {
    let (job, pods) = running();
    let mut h = Harness::new(&job);
    let svc = service(&job);
    h.with_service(&svc);
    let unready = |i: usize| {
        pods.iter()
            .enumerate()
            .map(|(j, p)| with_phase(p.clone(), "Running", j >= i))
            .collect::<Vec<_>>()
    };
    for pod in unready(1) {
        h.with_pod(&pod);
    }
    let requeue = h.reconcile(&job).await.expect("reconcile");
    assert_calls(&h.server.take(), &[]);
    assert!(
        requeue != Requeue::await_change(),
        "the held-back counts must bring a pass back within the hold: {requeue:?}"
    );
    // Another pod turns unready during the hold; then the hold is over.
    for pod in unready(2) {
        h.with_pod(&pod);
    }
    let again = h.reconcile(&job).await.expect("reconcile");
    assert!(again != Requeue::await_change(), "{again:?}");
    assert_calls(&h.server.take(), &[]);
    let key = diorch_core::key::ObjectKey::of(&job.metadata);
    h.ctx.remember(&key, |m| {
        m.counts_held_since = m
            .counts_held_since
            .map(|at| at - diorch_core::step::COUNTS_HOLD);
    });
    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::await_change()
    );
    assert_calls(
        &h.server.take(),
        &[&[
            "PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j/status?&fieldManager=diorch phase=unchanged rv=1",
        ]],
    );
    let job = h.server.job();
    assert_eq!(job.status.as_ref().map(|s| s.ready_replicas), Some(1));
    assert_eq!(h.ctx.recall(&key).counts_held_since, None);

    for pod in unready(3) {
        h.with_pod(&pod);
    }
    let requeue = h.reconcile(&job).await.expect("reconcile");
    assert_calls(&h.server.take(), &[]);
    assert!(requeue != Requeue::await_change(), "{requeue:?}");
}

/// A pass that comes before the service's watch event (the pods' events came first) does not
/// create the service again; once the cache shows it, or the expectation is old, the
/// planner's view holds again.
#[tokio::test]
async fn a_pass_before_the_service_watch_event_creates_no_duplicate_service() {
    let job = new_job();
    let mut h = Harness::new(&job);
    h.reconcile(&job).await.expect("reconcile");
    let first = h.server.take();
    assert!(
        first
            .iter()
            .any(|c| c.method == "POST" && c.path.contains("/services")),
        "the first pass creates the service"
    );
    for name in ["j-learner-0", "j-collector-0", "j-collector-1"] {
        let pod: Pod = serde_json::from_value(h.server.object("pods", name)).expect("pod");
        h.cache_pod(&with_phase(pod, "Pending", false));
    }
    let job = h.server.job();
    h.reconcile(&job).await.expect("reconcile");
    let calls = h.server.take();
    assert!(
        !calls.iter().any(|c| c.path.contains("/services")),
        "{calls:?}"
    );
}

/// After a status write, a pod event brings no pass while the job cache still shows the version
/// before the write (the pass would only wait for it), and the write's echo then brings one even
/// though its own pass had marked it quiet; once the cache shows the write, pod events bring
/// passes again.
#[tokio::test]
async fn a_pod_event_before_the_echo_of_a_status_write_leaves_the_pass_to_the_echo() {
    use diorch_core::step::echo_needs_pass;
    let (job, _, mut h, key) = starting_with_every_pod_running();
    assert!(
        h.ctx.owned_event_needs_pass(&key),
        "no write of its own yet"
    );

    h.reconcile(&job).await.expect("reconcile");
    let calls = h.server.take();
    assert!(calls[0].line().contains("phase=Running"), "{calls:?}");
    let written = h.server.job();
    assert_eq!(
        h.ctx.recall(&key).status_echo,
        written.metadata.resource_version,
        "a quiet echo"
    );

    assert!(
        !h.ctx.owned_event_needs_pass(&key),
        "the cache still shows version 3"
    );
    let mut memory = h.ctx.recall(&key);
    assert_eq!(memory.status_echo, None, "the echo brings the pass now");
    assert!(echo_needs_pass(
        &mut memory,
        written.metadata.resource_version.as_deref()
    ));

    h.cache_job(&written);
    assert!(h.ctx.owned_event_needs_pass(&key), "the write shows");
}
