//! The way back: diorch stops, DI-orchestrator's CRD replaces diorch's, every job reads
//! through DI-orchestrator's schema with diorch's fields pruned, and a job written under that
//! schema loses them for good while one nobody wrote keeps them.

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use super::Kubectl;
use super::played::Played;
use super::reads::{DIORCH_STATUS, job_field, job_json, path, uids, wait_established, wait_served};
use crate::common::controller::{OperatorProcess, pods};

/// The way back: diorch stops first; DI-orchestrator's CRD cannot be applied client side (its last-applied
/// annotation would exceed 256 KiB), `kubectl replace` works. Then diorch's `crds` again.
pub(super) fn to_di_orchestrator(
    k: &Kubectl,
    n: &Kubectl,
    operator: &mut OperatorProcess,
    old_crd: &Path,
    crds: &Path,
    played: &Played,
) {
    let before = &played.before;
    let stopped = operator.terminate(Duration::from_secs(30));
    assert!(
        stopped.is_some_and(|s| s.success()),
        "diorch did not stop on SIGTERM: {stopped:?}"
    );
    let refused = k.fails(&["apply", "-f", path(old_crd)]);
    assert!(
        refused.contains("metadata.annotations: Too long"),
        "{refused}"
    );
    let exists = k.fails(&["create", "-f", path(old_crd)]);
    assert!(exists.contains("AlreadyExists"), "{exists}");
    k.ok(&["replace", "-f", path(old_crd)]);
    wait_established(k);
    wait_served(n, false);
    // Read through DI-orchestrator's schema: diorch's status fields are pruned; the phase,
    // counters and conditions (without observedGeneration) stay.
    for job in ["job-with-tasks", "job-restarted", "serial-done"] {
        let back = job_json(n, job);
        let status = &back["status"];
        for field in DIORCH_STATUS {
            assert!(
                status[field].is_null(),
                "{job}: status.{field} kept: {status:#}"
            );
        }
        assert!(
            status["conditions"]
                .as_array()
                .is_some_and(|cs| cs.iter().all(|c| c["observedGeneration"].is_null())),
            "{status:#}"
        );
    }
    assert_eq!(
        job_field(
            n,
            "job-restarted",
            "{.status.phase} {.status.restarts} {.status.reschedules}"
        ),
        "Running 3 1"
    );
    // DI-orchestrator's schema declares profilings as an object without fields.
    assert_eq!(
        job_json(n, "job-restarted")["status"]["profilings"],
        json!({}),
        "profilings pruned"
    );
    // The suspended job reads as Suspended (DI-orchestrator's schema has no phase enum), but
    // spec.suspend and every other diorch-only field are gone from what DI-orchestrator reads.
    let extended = job_json(n, "extended");
    assert_eq!(extended["status"]["phase"], "Suspended");
    for field in [
        "suspend",
        "activeDeadlineSeconds",
        "ttlSecondsAfterFinished",
        "nonRetryableExitCodes",
    ] {
        assert!(
            extended["spec"][field].is_null(),
            "spec.{field}: {extended:#}"
        );
    }
    let task = &extended["spec"]["tasks"][0];
    for field in ["restartPolicy", "minReplicas", "maxReplicas"] {
        assert!(task[field].is_null(), "tasks[0].{field}: {task:#}");
    }
    assert_eq!(
        task["template"]["metadata"],
        json!({}),
        "template labels pruned"
    );
    // kubectl shows every job with DI-orchestrator's columns.
    let table = n.ok(&["get", "dijobs"]);
    assert_eq!(
        crate::common::table_row(&table, 0),
        crate::common::foundation::DI_ORCHESTRATOR_COLUMNS,
        "{table}"
    );
    for (job, phase) in [
        ("extended", "Suspended"),
        ("job-restarted", "Running"),
        ("job-with-tasks", "Running"),
        ("serial-done", "Succeeded"),
        ("serial-test", "Running"),
    ] {
        assert!(
            table
                .lines()
                .any(|l| crate::common::table_row(l, 0).get(..2) == Some(&[job, phase][..])),
            "{job} {phase}: {table}"
        );
    }
    assert_eq!(uids(&pods(n, "job-with-tasks")), uids(before), "pods kept");

    // Pruning on read only hides the fields until the object is written again: a status write
    // under DI-orchestrator's schema (as its operator makes when a count changes) stores the
    // pruned object, spec included; a job nobody wrote keeps them for a later switch forward.
    n.ok(&[
        "patch",
        "dijob/job-with-tasks",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"readyReplicas":3}}"#,
    ]);
    k.ok(&["apply", "-f", path(crds)]);
    wait_established(k);
    wait_served(n, true);
    let written = job_json(n, "job-with-tasks");
    for field in DIORCH_STATUS {
        assert!(
            written["status"][field].is_null(),
            "status.{field} came back after a write: {:#}",
            written["status"]
        );
    }
    let unwritten = job_json(n, "extended");
    assert_eq!(unwritten["spec"]["suspend"], true, "{unwritten:#}");
    assert_eq!(unwritten["spec"]["tasks"][0]["restartPolicy"], "RestartPod");
    assert_eq!(
        unwritten["spec"]["tasks"][0]["template"]["metadata"]["labels"]["team"],
        "rl"
    );
    assert_eq!(unwritten["status"]["observedGeneration"], 1);
    assert_eq!(
        job_field(
            n,
            "job-restarted",
            "{.status.profilings.collector.throughput} {.status.ranks[2]}"
        ),
        "12.5 job-restarted-collector-0",
        "job-restarted was not written under DI-orchestrator's schema"
    );
}
