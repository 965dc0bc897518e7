//! The jobs under diorch: the cleanly running job adopted as it is, the finished one left as
//! it was, the restarted one continued (its failed pod re-created with its table rank, a
//! template edit rolling adopted pods), and new jobs running beside them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::{Value, json};

use super::played::{Played, fqdn};
use super::reads::{
    address, assert_continues, env, env_names, job_field, job_json, path, replicas_answer,
    service_uid, uids, volumes, wait_job_field,
};
use super::{DI_ORCHESTRATOR_SERVER_URL, DIORCH_SERVER_URL, Kubectl};
use crate::common::controller::{
    T, end_pod, http, job_events, pods, uid, wait_phase, wait_pods_until,
};

/// Adoption of the cleanly running job: its rank table is diorch's first write for it.
pub(super) fn clean_job_adopted(n: &Kubectl, api: &str, ns: &str, played: &Played) {
    let Played {
        running: played_running,
        before,
        job_before,
        ..
    } = played;
    wait_job_field(n, "job-with-tasks", "{.status.ranks}", |r| !r.is_empty());
    let adopted = job_json(n, "job-with-tasks");
    assert_eq!(
        adopted["status"]["ranks"],
        json!([
            "job-with-tasks-learner-0",
            "job-with-tasks-evaluator-0",
            "job-with-tasks-collector-0",
            "job-with-tasks-collector-1"
        ]),
        "ranks taken from the pods' diengine/rank"
    );
    assert_continues(&adopted["status"], played_running);
    // The same object: replacing the CRD keeps the uid, and diorch's schema reads the spec as
    // DI-orchestrator's stored it (no new defaults).
    assert_eq!(adopted["metadata"]["uid"], job_before["metadata"]["uid"]);
    assert_eq!(adopted["spec"], job_before["spec"]);
    assert!(
        adopted["status"]["startTime"].is_string(),
        "{:#}",
        adopted["status"]
    );
    // The replica API answers for the adopted pods as di-server did (an address per rank).
    let want: Vec<String> = [
        "job-with-tasks-learner-0",
        "job-with-tasks-evaluator-0",
        "job-with-tasks-collector-0",
        "job-with-tasks-collector-1",
    ]
    .iter()
    .map(|p| address(&before[*p]))
    .collect();
    assert_eq!(
        replicas_answer(api, ns, "job-with-tasks"),
        json!(want),
        "GET replicas"
    );
}

/// The finished job is left as it was: its succeeded pod kept, no service made, its status
/// (completionTimestamp included) continued.
pub(super) fn finished_job_left(n: &Kubectl, played: &Played) {
    let Played {
        done: played_done,
        done_before,
        ..
    } = played;
    wait_job_field(n, "serial-done", "{.status.observedGeneration}", |g| {
        g == "1"
    });
    assert_continues(&job_json(n, "serial-done")["status"], played_done);
    assert_eq!(uids(&pods(n, "serial-done")), uids(done_before));
    assert!(
        !n.ok(&["get", "services", "-o", "name"])
            .contains("service/di-serial-done")
    );
}

/// The restarted job: the failure of the switch window is a restart counted on top of
/// DI-orchestrator's; only the failed pod is re-created, with its rank. A template edit then
/// rolls the adopted pods as well as diorch's own.
pub(super) fn restarted_job_continues(n: &Kubectl, api: &str, ns: &str, played: &Played) {
    let restarted_before = &played.restarted_before;
    // --- The restarted job: the failure of the switch window is a restart counted on top of
    // DI-orchestrator's; only the failed pod is re-created, with its rank. collector-0's rank 4
    // is past the job's size (4 replicas): the annotation is ignored and reported, and it
    // takes the free rank 2 in the table. Its pod is not touched: its env still says DI_RANK=4.
    wait_job_field(n, "job-restarted", "{.status.restarts}", |r| r == "2");
    wait_phase(n, "job-restarted", "Running");
    let after_window = pods(n, "job-restarted");
    let learner = &after_window["job-restarted-learner-0"];
    assert_ne!(
        uid(learner),
        uid(&restarted_before["job-restarted-learner-0"]),
        "the failed pod is replaced"
    );
    assert_eq!(
        (env(learner, "DI_RANK"), env(learner, "DI_SERVER_URL")),
        (Some("0"), Some(DIORCH_SERVER_URL))
    );
    for name in ["evaluator-0", "collector-0", "collector-1"] {
        let name = format!("job-restarted-{name}");
        assert_eq!(
            uid(&after_window[&name]),
            uid(&restarted_before[&name]),
            "{name}"
        );
    }
    let adopted = job_json(n, "job-restarted");
    assert_eq!(
        adopted["status"]["ranks"],
        json!([
            "job-restarted-learner-0",
            "job-restarted-evaluator-0",
            "job-restarted-collector-0",
            "job-restarted-collector-1"
        ])
    );
    let ignored = "RankIgnored: pod job-restarted-collector-0: annotation diengine/rank=\"4\" is not a rank of this job (0 to 3); ignored";
    crate::common::ha::wait_until("the RankIgnored Event", T, || {
        job_events(n, "job-restarted").contains(ignored)
    });
    // The replica API places pods by status.ranks before their annotations: the pod with the
    // stale rank 4 is answered at its table rank 2 (di-server panicked on it: 500, spec 15.6).
    assert_eq!(
        replicas_answer(api, ns, "job-restarted"),
        json!([
            address(learner),
            address(&restarted_before["job-restarted-evaluator-0"]),
            address(&restarted_before["job-restarted-collector-0"]),
            address(&restarted_before["job-restarted-collector-1"]),
        ])
    );

    // Workers' profilings reach the adopted job's status through the replica API (di-server
    // dropped them, spec 15.3).
    let (code, body) = http(
        api,
        "POST",
        &format!("/v2alpha1/job/{ns}.job-restarted/profilings"),
        r#"{"data": {"collector": {"throughput": 12.5}}}"#,
    );
    assert_eq!(code, 200, "{body}");
    wait_job_field(
        n,
        "job-restarted",
        "{.status.profilings.collector.throughput}",
        |t| t == "12.5",
    );

    // collector-0 fails under diorch: re-created with its table rank 2, inside DI_NODES.
    end_pod(n, "job-restarted-collector-0", "Failed");
    wait_job_field(n, "job-restarted", "{.status.restarts}", |r| r == "3");
    wait_phase(n, "job-restarted", "Running");
    let after = pods(n, "job-restarted");
    let old = &restarted_before["job-restarted-collector-0"];
    let new = &after["job-restarted-collector-0"];
    assert_ne!(uid(old), uid(new), "the failed pod is replaced");
    for name in ["learner-0", "evaluator-0", "collector-1"] {
        let name = format!("job-restarted-{name}");
        assert_eq!(uid(&after[&name]), uid(&after_window[&name]), "{name}");
    }
    // The same pod as DI-orchestrator's but for its rank, the server URL and diorch's template
    // hash.
    assert_eq!(new["metadata"]["labels"], old["metadata"]["labels"]);
    assert_eq!(
        new["metadata"]["ownerReferences"],
        old["metadata"]["ownerReferences"]
    );
    let annotations = |p: &Value| -> BTreeMap<String, String> {
        serde_json::from_value(p["metadata"]["annotations"].clone()).expect("annotations")
    };
    let (mut got, mut was) = (annotations(new), annotations(old));
    assert!(got.remove("diorch.io/template-hash").is_some(), "{got:?}");
    assert_eq!(got.remove("diengine/rank").as_deref(), Some("2"));
    assert_eq!(was.remove("diengine/rank").as_deref(), Some("4"));
    assert_eq!(got, was);
    for field in ["hostname", "subdomain", "restartPolicy"] {
        assert_eq!(new["spec"][field], old["spec"][field], "spec.{field}");
    }
    assert_eq!(
        volumes(new),
        volumes(old),
        "template volumes, then the job's"
    );
    assert_eq!(
        env_names(new).into_iter().collect::<BTreeSet<_>>(),
        env_names(old).into_iter().collect::<BTreeSet<_>>()
    );
    assert_eq!(env_names(new)[0], "NCCL_DEBUG", "the user's env first");
    for var in ["DI_NODES", "DI_COLLECTOR_NODES", "DI_JOB_ID"] {
        assert_eq!(env(new, var), env(old, var), "{var}");
    }
    assert_eq!(
        (env(old, "DI_RANK"), env(new, "DI_RANK")),
        (Some("4"), Some("2"))
    );
    let nodes: Vec<&str> = env(new, "DI_NODES")
        .unwrap_or_default()
        .split(',')
        .collect();
    assert_eq!(
        nodes.get(2).copied(),
        Some(fqdn("job-restarted-collector-0", "job-restarted", ns).as_str()),
        "DI_NODES[DI_RANK] is the pod's own FQDN again"
    );
    assert_eq!(
        (env(old, "DI_SERVER_URL"), env(new, "DI_SERVER_URL")),
        (Some(DI_ORCHESTRATOR_SERVER_URL), Some(DIORCH_SERVER_URL))
    );
    assert_eq!(
        env(&after["job-restarted-collector-1"], "DI_SERVER_URL"),
        Some(DI_ORCHESTRATOR_SERVER_URL),
        "adopted pods keep DI-orchestrator's URL"
    );
    crate::common::ha::wait_until("collector-0 in GET replicas", T, || {
        replicas_answer(api, ns, "job-restarted")[2] == json!(address(new))
    });

    // diorch recorded the template it adopted DI-orchestrator's pods with, so a template edit
    // rolls them as well as its own: both collectors get the new image (one reschedule), and
    // the collector task's record goes with its last adopted pod.
    let adopted = job_field(
        n,
        "job-restarted",
        "{.status.adoptedTemplateHashes.collector}",
    );
    assert!(
        !adopted.is_empty(),
        "collector-1 is adopted: a recorded hash"
    );
    n.ok(&[
        "patch",
        "dijob",
        "job-restarted",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/tasks/2/template/spec/containers/0/image","value":"opendilab/ding:v0.3.2-dist-test"}]"#,
    ]);
    let new_image = json!("opendilab/ding:v0.3.2-dist-test");
    let rolled = wait_pods_until(n, "job-restarted", "the collectors to roll", |now| {
        let image = |p: &str| now.get(p).map(|p| &p["spec"]["containers"][0]["image"]);
        image("job-restarted-collector-0") == Some(&new_image)
            && image("job-restarted-collector-1") == Some(&new_image)
            && now.len() == 4
    });
    wait_phase(n, "job-restarted", "Running");
    let c1 = &rolled["job-restarted-collector-1"];
    assert_ne!(
        uid(c1),
        uid(&after["job-restarted-collector-1"]),
        "re-created"
    );
    assert!(
        c1["metadata"]["annotations"]["diorch.io/template-hash"].is_string(),
        "the re-created pod carries diorch's hash"
    );
    assert_eq!(
        job_field(
            n,
            "job-restarted",
            "{.status.adoptedTemplateHashes.collector}"
        ),
        "",
        "no adopted collector left"
    );
    assert_eq!(
        job_field(
            n,
            "job-restarted",
            "{.status.restarts} {.status.reschedules} {.status.observedGeneration}"
        ),
        "3 1 2"
    );
}

/// A new sample job runs under diorch, and a job with diorch-only fields (suspended); the
/// cleanly running job keeps DI-orchestrator's pods and service all along.
pub(super) fn new_jobs_run_beside_adopted_ones(
    n: &Kubectl,
    ns: &str,
    samples: &Path,
    played: &Played,
) {
    let before = &played.before;
    let service_before = played.service_before.as_str();
    n.ok(&["create", "-f", path(&samples.join("dijob-serial.yaml"))]);
    wait_phase(n, "serial-test", "Running");
    let serial = &pods(n, "serial-test")["serial-test-serial-0"];
    assert_eq!(env(serial, "DI_SERVER_URL"), Some(DIORCH_SERVER_URL));
    assert_eq!(
        env(serial, "DI_SERIAL_NODES"),
        Some(fqdn("serial-test-serial-0", "serial-test", ns).as_str())
    );
    n.ok_stdin(
        &["create", "-f", "-"],
        r#"apiVersion: diengine.opendilab.org/v2alpha1
kind: DIJob
metadata: {name: extended}
spec:
  suspend: true
  activeDeadlineSeconds: 3600
  ttlSecondsAfterFinished: 600
  nonRetryableExitCodes: [3]
  tasks:
  - name: learner
    type: learner
    restartPolicy: RestartPod
    minReplicas: 1
    maxReplicas: 2
    template:
      metadata: {labels: {team: rl}}
      spec: {containers: [{name: di-container, image: busybox}]}
"#,
    );
    wait_phase(n, "extended", "Suspended");

    // After all that, the cleanly running job still has DI-orchestrator's pods and service,
    // and diorch never moved it through a phase.
    assert_eq!(uids(&pods(n, "job-with-tasks")), uids(before), "pods kept");
    assert_eq!(
        service_uid(n, "job-with-tasks"),
        service_before,
        "service kept"
    );
    let transitions = job_events(n, "job-with-tasks");
    assert!(
        ![
            "JobPending",
            "JobStarting",
            "JobRunning",
            "JobRestarting",
            "JobRescheduling"
        ]
        .iter()
        .any(|r| transitions.contains(r)),
        "{transitions}"
    );
}
