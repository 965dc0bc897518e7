//! Issue 21's job controls as a user drives them with kubectl, on the sandbox
//! (`tests/operator/controller.rs`) and on a real API server (`tests/e2e.rs`): `spec.suspend`,
//! `spec.activeDeadlineSeconds` and `spec.ttlSecondsAfterFinished`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::Kubectl;
use super::controller::{
    T, apply, end_pod, job_events, jsonpath, pods, rank, standard_job, uid, wait_job_events,
    wait_no_pods, wait_no_service, wait_phase,
};

fn job_json(k: &Kubectl, job: &str) -> Value {
    serde_json::from_str(&k.ok(&["get", &format!("dijob/{job}"), "-o", "json"])).expect("job")
}

fn condition<'a>(job: &'a Value, type_: &str) -> &'a Value {
    job["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_} condition: {:#}", job["status"]))
}

fn time(v: &Value) -> jiff::Timestamp {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a time: {v}"))
}

fn patch_suspend(k: &Kubectl, job: &str, suspend: bool) {
    k.ok(&[
        "patch",
        "dijob",
        job,
        "--type=merge",
        "-p",
        &format!(r#"{{"spec":{{"suspend":{suspend}}}}}"#),
    ]);
}

/// Created suspended: nothing exists and the phase and condition say Suspended. Resumed: it
/// runs. Suspended while running: its pods and service go, its ranks and counters stay.
/// Resumed again: every pod comes back with its rank.
pub fn suspend_and_resume(k: &Kubectl, ns: &str) {
    let k = k.in_namespace(ns);
    let job = "held";
    apply(&k, &standard_job(job, "  suspend: true\n"));
    wait_phase(&k, job, "Suspended");
    let held = job_json(&k, job);
    let c = condition(&held, "Suspended");
    assert_eq!(
        (&c["status"], &c["reason"]),
        (&"True".into(), &"JobSuspended".into())
    );
    time(&c["lastTransitionTime"]);
    // Nothing was created, and nothing is while it stays suspended.
    std::thread::sleep(Duration::from_secs(2));
    wait_no_pods(&k, job);
    wait_no_service(&k, job);
    assert!(
        held["status"]["startTime"].is_null(),
        "{:#}",
        held["status"]
    );

    patch_suspend(&k, job, false);
    wait_phase(&k, job, "Running");
    let before = pods(&k, job);
    assert_eq!(before.len(), 4);
    let ranks: BTreeMap<String, i64> = before.iter().map(|(n, p)| (n.clone(), rank(p))).collect();
    let running = job_json(&k, job);
    let started = time(&running["status"]["startTime"]);
    assert_eq!(condition(&running, "Suspended")["status"], "False");
    let status_ranks = running["status"]["ranks"].clone();

    patch_suspend(&k, job, true);
    wait_phase(&k, job, "Suspended");
    wait_no_pods(&k, job);
    wait_no_service(&k, job);
    let suspended = job_json(&k, job);
    assert_eq!(suspended["status"]["ranks"], status_ranks, "ranks kept");
    assert_eq!(
        (
            &suspended["status"]["restarts"],
            &suspended["status"]["reschedules"],
            &suspended["status"]["readyReplicas"]
        ),
        (&0.into(), &0.into(), &0.into()),
        "a suspension is neither a restart nor a reschedule"
    );

    patch_suspend(&k, job, false);
    wait_phase(&k, job, "Running");
    let after = pods(&k, job);
    for (name, pod) in &after {
        assert_eq!(Some(&rank(pod)), ranks.get(name), "{name} keeps its rank");
        assert_ne!(uid(pod), uid(&before[name]), "{name} is a new pod");
    }
    assert_eq!(after.len(), 4);
    let resumed = job_json(&k, job);
    // Four spec writes so far (create, two suspends, a resume); the status says it saw the last.
    assert_eq!(
        resumed["metadata"]["generation"], 4,
        "{:#}",
        resumed["metadata"]
    );
    assert_eq!(resumed["status"]["observedGeneration"], 4);
    assert!(
        resumed["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().all(|c| c["observedGeneration"] == 4)),
        "{:#}",
        resumed["status"]["conditions"]
    );
    assert!(
        time(&resumed["status"]["startTime"]) > started,
        "resuming restarts the clock"
    );
    wait_job_events(&k, job, &["JobSuspended: ", "JobResumed: "]);
}

/// activeDeadlineSeconds: the job fails with DeadlineExceeded, never before its deadline, and
/// its running pods are cleaned (cleanPodPolicy Running). ttlSecondsAfterFinished: a failed job
/// is deleted with its pods and service.
pub fn deadline_and_ttl(k: &Kubectl, ns: &str) {
    let k = k.in_namespace(ns);
    let job = "bounded";
    apply(&k, &standard_job(job, "  activeDeadlineSeconds: 4\n"));
    wait_phase(&k, job, "Failed");
    let failed = job_json(&k, job);
    let c = condition(&failed, "Failed");
    assert_eq!(c["reason"], "DeadlineExceeded", "{c:#}");
    assert_eq!(
        c["message"],
        "job was active longer than its activeDeadlineSeconds (4 s)"
    );
    let active = time(&failed["status"]["completionTimestamp"])
        .duration_since(time(&failed["status"]["startTime"]));
    assert!(
        active >= jiff::SignedDuration::from_secs(4),
        "failed after {active:?}, before its deadline"
    );
    wait_no_pods(&k, job);
    wait_job_events(&k, job, &["DeadlineExceeded: "]);

    let job = "expiring";
    apply(
        &k,
        &standard_job(job, "  backoffLimit: 0\n  ttlSecondsAfterFinished: 2\n"),
    );
    wait_phase(&k, job, "Running");
    end_pod(&k, &format!("{job}-collector-0"), "Failed");
    k.wait_for(
        &["get", "dijobs", "-o", "name", "--ignore-not-found"],
        T,
        |s| !s.lines().any(|l| l.ends_with(&format!("/{job}"))),
    );
    wait_no_pods(&k, job);
    wait_no_service(&k, job);
    // The job that had no TTL stays.
    assert_eq!(jsonpath(&k, "dijob/bounded", "{.status.phase}"), "Failed");
}

/// `restartPolicy: RestartPod` on the collectors: a failed collector is replaced alone, with
/// its rank, and the job stays Running with no restart counted. `nonRetryableExitCodes`: a pod
/// whose container exits with a listed code fails the job at once.
pub fn restart_policies(k: &Kubectl, ns: &str) {
    let k = k.in_namespace(ns);
    let job = "partial";
    let manifest = standard_job(job, "  backoffLimit: 3\n  nonRetryableExitCodes: [3]\n").replace(
        "  - type: collector\n    replicas: 2\n",
        "  - type: collector\n    replicas: 2\n    restartPolicy: RestartPod\n",
    );
    assert!(manifest.contains("restartPolicy"), "{manifest}");
    apply(&k, &manifest);
    wait_phase(&k, job, "Running");
    let before = pods(&k, job);
    let victim = format!("{job}-collector-1");
    end_pod(&k, &victim, "Failed");
    k.wait_for(
        &[
            "get",
            &format!("dijob/{job}"),
            "-o",
            "jsonpath={.status.podRestarts.collector}",
        ],
        T,
        |n| n == "1",
    );
    let deadline = std::time::Instant::now() + T;
    let after = loop {
        let now = pods(&k, job);
        if now
            .get(&victim)
            .is_some_and(|p| uid(p) != uid(&before[&victim]))
            && now.len() == 4
        {
            break now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{victim} not replaced"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(rank(&after[&victim]), rank(&before[&victim]), "same rank");
    for name in before.keys().filter(|n| **n != victim) {
        assert_eq!(uid(&after[name]), uid(&before[name]), "{name} untouched");
    }
    wait_phase(&k, job, "Running");
    assert_eq!(
        jsonpath(
            &k,
            &format!("dijob/{job}"),
            "{.status.restarts} {.status.reschedules}"
        ),
        "0 0",
        "a pod restart is neither a job restart nor a reschedule"
    );
    let transitions = job_events(&k, job);
    assert!(
        !transitions.contains("JobRestarting") && !transitions.contains("JobRescheduling"),
        "{transitions}"
    );

    // The learner exits with 3, a listed code.
    let learner = format!("{job}-learner-0");
    let patch = r#"{"status":{"phase":"Failed","containerStatuses":[{"name":"di-container","image":"busybox","imageID":"","ready":false,"restartCount":0,"state":{"terminated":{"exitCode":3}}}]}}"#;
    k.ok(&[
        "patch",
        "pod",
        &learner,
        "--subresource=status",
        "--type=merge",
        "-p",
        patch,
    ]);
    wait_phase(&k, job, "Failed");
    let failed = job_json(&k, job);
    let c = condition(&failed, "Failed");
    assert_eq!(c["reason"], "NonRetryableExitCode", "{c:#}");
    assert_eq!(
        c["message"],
        format!(
            "job failed since pod {learner} failed: container di-container exited with code 3, listed in nonRetryableExitCodes"
        )
    );
    assert_eq!(failed["status"]["restarts"], 0, "no retry");
}

/// `kubectl apply --server-side` (what Flux and Argo CD use) of a job whose typed tasks have no
/// names, re-applied after the operator named them: the job keeps exactly its tasks, takes the
/// new scale, and runs. `spec.tasks` stays an atomic list for this: keyed by name (or by type
/// and name), the re-applied unnamed tasks would be new entries beside the named ones (measured
/// on kube-apiserver 1.24: 4 tasks, two learners), and the job would fail validation.
pub fn server_side_apply_of_unnamed_tasks(k: &Kubectl, ns: &str) {
    let k = k.in_namespace(ns);
    let job = "ssa";
    let manifest = |collectors: i32| {
        super::controller::job_manifest(
            job,
            "",
            &[("", "learner", 1), ("", "collector", collectors)],
        )
    };
    let apply_ssa = |text: &str| {
        k.ok_stdin(
            &[
                "apply",
                "--server-side",
                "--field-manager=gitops",
                "--force-conflicts",
                "-f",
                "-",
            ],
            text,
        )
    };
    let tasks = || {
        jsonpath(
            &k,
            &format!("dijob/{job}"),
            "{range .spec.tasks[*]}{.type}/{.name}/{.replicas} {end}",
        )
    };
    apply_ssa(&manifest(2));
    wait_phase(&k, job, "Running");
    assert_eq!(tasks().trim(), "learner/learner/1 collector/collector/2");
    apply_ssa(&manifest(3));
    k.wait_for(
        &[
            "get",
            "dijob",
            job,
            "-o",
            "jsonpath={.status.taskReplicaStatus.collector.readyReplicas}",
        ],
        T,
        |out| out == "3",
    );
    wait_phase(&k, job, "Running");
    assert_eq!(tasks().trim(), "learner/learner/1 collector/collector/3");
    assert_eq!(pods(&k, job).len(), 4);
    assert!(!job_events(&k, job).contains("JobFailed"));
}
