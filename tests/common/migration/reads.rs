//! Reads and checks the scenario's phases share: the CRD served, a job, a pod's env and
//! volumes, the replica API's answer, and a status continued from DI-orchestrator's.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::{CRD, Kubectl};
use crate::common::controller::{T, http, uid};

pub(super) fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

pub(super) fn wait_established(k: &Kubectl) {
    // Right after a create, kube-apiserver answers without status.conditions, and `kubectl
    // wait` fails instead of waiting on such an object.
    k.wait_for(
        &[
            "get",
            CRD,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Established\")].status}",
        ],
        T,
        |out| out == "True",
    );
}

/// Waits until the API server serves the CRD just written: `kubectl get dijobs -o wide` shows
/// diorch's wide-only `Allocation` column exactly when `diorch` (the server switches to a
/// replaced definition a moment after the write). Needs a DIJob in `k`'s namespace.
pub(super) fn wait_served(k: &Kubectl, diorch: bool) {
    k.wait_for(&["get", "dijobs", "-o", "wide"], T, |table| {
        table
            .lines()
            .next()
            .is_some_and(|header| header.contains("ALLOCATION") == diorch)
    });
}

pub(super) fn text<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {v}"))
}

pub(super) fn job_json(k: &Kubectl, job: &str) -> Value {
    serde_json::from_str(&k.ok(&["get", &format!("dijob/{job}"), "-o", "json"])).expect("job")
}

pub(super) fn env<'a>(pod: &'a Value, name: &str) -> Option<&'a str> {
    pod["spec"]["containers"][0]["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)?["value"]
        .as_str()
}

pub(super) fn env_names(pod: &Value) -> Vec<String> {
    pod["spec"]["containers"][0]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["name"].as_str().map(String::from))
        .collect()
}

/// The pod's volumes but the service account token the API server adds to every pod (its
/// name is random).
pub(super) fn volumes(pod: &Value) -> Vec<Value> {
    pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| !text(&v["name"], "volume name").starts_with("kube-api-access-"))
        .cloned()
        .collect()
}

pub(super) fn uids(pods: &BTreeMap<String, Value>) -> BTreeMap<String, String> {
    pods.iter().map(|(n, p)| (n.clone(), uid(p))).collect()
}

/// The replica API's GET replicas of `job`: the `data` array.
pub(super) fn replicas_answer(api: &str, ns: &str, job: &str) -> Value {
    let (code, body) = http(
        api,
        "GET",
        &format!("/v2alpha1/job/{ns}.{job}/replicas"),
        "",
    );
    assert_eq!(code, 200, "{body}");
    body["data"].clone()
}

pub(super) fn address(pod: &Value) -> String {
    format!("{}:22270", text(&pod["status"]["podIP"], "podIP"))
}

/// The status fields diorch adds; DI-orchestrator's CRD prunes them.
pub(super) const DIORCH_STATUS: &[&str] = &["ranks", "startTime", "observedGeneration"];

/// `status` (as diorch wrote it) is `played` (as DI-orchestrator wrote it) continued: the same
/// phase, counters, counts and conditions (times included), diorch's observedGeneration added.
pub(super) fn assert_continues(status: &Value, played: &Value) {
    for field in [
        "phase",
        "restarts",
        "reschedules",
        "replicas",
        "readyReplicas",
        "taskStatus",
        "completionTimestamp",
    ] {
        assert_eq!(status[field], played[field], "status.{field}: {status:#}");
    }
    let conditions = status["conditions"].as_array().expect("conditions");
    let played_conditions = played["conditions"].as_array().expect("played");
    assert_eq!(conditions.len(), played_conditions.len(), "{status:#}");
    for (got, was) in conditions.iter().zip(played_conditions) {
        let mut got = got.clone();
        assert_eq!(got["observedGeneration"], 1, "{got}");
        got.as_object_mut()
            .expect("condition")
            .remove("observedGeneration");
        assert_eq!(&got, was);
    }
    assert_eq!(status["observedGeneration"], 1);
}

/// The uid of `job`'s headless service.
pub(super) fn service_uid(k: &Kubectl, job: &str) -> String {
    k.ok(&[
        "get",
        "service",
        &format!("di-{job}"),
        "-o",
        "jsonpath={.metadata.uid}",
    ])
}

/// `kubectl get dijob/<job> -o jsonpath=<jsonpath>`.
pub(super) fn job_field(k: &Kubectl, job: &str, jsonpath: &str) -> String {
    let (job, jsonpath) = (format!("dijob/{job}"), format!("jsonpath={jsonpath}"));
    k.ok(&["get", &job, "-o", &jsonpath])
}

/// Polls [`job_field`] until `done` holds.
pub(super) fn wait_job_field(k: &Kubectl, job: &str, jsonpath: &str, done: impl Fn(&str) -> bool) {
    let (job, jsonpath) = (format!("dijob/{job}"), format!("jsonpath={jsonpath}"));
    k.wait_for(&["get", &job, "-o", &jsonpath], T, done);
}
