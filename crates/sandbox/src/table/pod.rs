//! The Pod printer's cells (`printPod`): ready containers, status reason (init containers,
//! waiting and terminated reasons, Terminating, NodeLost), restarts with their age, IP, node,
//! nominated node and readiness gates.
//!
//! Pod cells only.

use std::collections::BTreeSet;

use jiff::Timestamp;
use serde_json::Value;

use super::cell::{age, is_present, name, parse_time, since_ts, str_of};

pub(super) fn pod_cells(pod: &Value, now: Timestamp) -> Vec<Value> {
    let spec = &pod["spec"];
    let status = &pod["status"];
    let phase = str_of(&status["phase"]);
    let mut reason = phase.to_string();
    if let Some(r) = status["reason"].as_str().filter(|r| !r.is_empty()) {
        reason = r.to_string();
    }
    let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    for c in &conditions {
        if str_of(&c["type"]) == "PodScheduled" && str_of(&c["reason"]) == "SchedulingGated" {
            reason = "SchedulingGated".into();
        }
    }

    let init_specs = spec["initContainers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let restartable: BTreeSet<&str> = init_specs
        .iter()
        .filter(|c| str_of(&c["restartPolicy"]) == "Always")
        .map(|c| str_of(&c["name"]))
        .collect();
    let total = spec["containers"].as_array().map_or(0, Vec::len)
        + init_specs
            .iter()
            .filter(|c| str_of(&c["restartPolicy"]) == "Always")
            .count();

    let mut restarts: i64 = 0;
    let mut restartable_restarts: i64 = 0;
    let mut ready = 0usize;
    let mut last_restart: Option<Timestamp> = None;
    let mut last_restartable_restart: Option<Timestamp> = None;
    let later = |a: Option<Timestamp>, b: Option<Timestamp>| match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    };

    let mut initializing = false;
    let init_statuses = status["initContainerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (i, cs) in init_statuses.iter().enumerate() {
        let count = cs["restartCount"].as_i64().unwrap_or(0);
        let finished = parse_time(&cs["lastState"]["terminated"]["finishedAt"]);
        restarts += count;
        last_restart = later(last_restart, finished);
        let is_restartable = restartable.contains(str_of(&cs["name"]));
        if is_restartable {
            restartable_restarts += count;
            last_restartable_restart = later(last_restartable_restart, finished);
        }
        let terminated = &cs["state"]["terminated"];
        let waiting = &cs["state"]["waiting"];
        if is_present(terminated) && terminated["exitCode"].as_i64().unwrap_or(0) == 0 {
            continue;
        }
        if is_restartable && cs["started"].as_bool() == Some(true) {
            if cs["ready"].as_bool() == Some(true) {
                ready += 1;
            }
            continue;
        }
        if is_present(terminated) {
            let r = str_of(&terminated["reason"]);
            reason = if r.is_empty() {
                let signal = terminated["signal"].as_i64().unwrap_or(0);
                if signal != 0 {
                    format!("Init:Signal:{signal}")
                } else {
                    format!(
                        "Init:ExitCode:{}",
                        terminated["exitCode"].as_i64().unwrap_or(0)
                    )
                }
            } else {
                format!("Init:{r}")
            };
        } else if is_present(waiting)
            && !str_of(&waiting["reason"]).is_empty()
            && str_of(&waiting["reason"]) != "PodInitializing"
        {
            reason = format!("Init:{}", str_of(&waiting["reason"]));
        } else {
            reason = format!("Init:{i}/{}", init_specs.len());
        }
        initializing = true;
        break;
    }

    let initialized = conditions
        .iter()
        .any(|c| str_of(&c["type"]) == "Initialized" && str_of(&c["status"]) == "True");
    if !initializing || initialized {
        restarts = restartable_restarts;
        last_restart = last_restartable_restart;
        let mut has_running = false;
        let statuses = status["containerStatuses"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for cs in statuses.iter().rev() {
            restarts += cs["restartCount"].as_i64().unwrap_or(0);
            last_restart = later(
                last_restart,
                parse_time(&cs["lastState"]["terminated"]["finishedAt"]),
            );
            let waiting = &cs["state"]["waiting"];
            let terminated = &cs["state"]["terminated"];
            if is_present(waiting) && !str_of(&waiting["reason"]).is_empty() {
                reason = str_of(&waiting["reason"]).to_string();
            } else if is_present(terminated) && !str_of(&terminated["reason"]).is_empty() {
                reason = str_of(&terminated["reason"]).to_string();
            } else if is_present(terminated) {
                let signal = terminated["signal"].as_i64().unwrap_or(0);
                reason = if signal != 0 {
                    format!("Signal:{signal}")
                } else {
                    format!("ExitCode:{}", terminated["exitCode"].as_i64().unwrap_or(0))
                };
            } else if cs["ready"].as_bool() == Some(true) && is_present(&cs["state"]["running"]) {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            let pod_ready = conditions
                .iter()
                .any(|c| str_of(&c["type"]) == "Ready" && str_of(&c["status"]) == "True");
            reason = if pod_ready { "Running" } else { "NotReady" }.into();
        }
    }

    let deleting = !pod["metadata"]["deletionTimestamp"].is_null();
    if deleting && str_of(&status["reason"]) == "NodeLost" {
        reason = "Unknown".into();
    } else if deleting && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".into();
    }

    let restarts_cell = match last_restart {
        Some(t) if restarts != 0 => format!("{restarts} ({} ago)", since_ts(t, now)),
        _ => restarts.to_string(),
    };

    let pod_ip = status["podIPs"][0]["ip"]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or("<none>");
    let node = spec["nodeName"]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or("<none>");
    let nominated = status["nominatedNodeName"]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or("<none>");
    let gates = spec["readinessGates"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let readiness_gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let true_count = gates
            .iter()
            .filter(|g| {
                conditions
                    .iter()
                    .find(|c| c["type"] == g["conditionType"])
                    .is_some_and(|c| str_of(&c["status"]) == "True")
            })
            .count();
        format!("{true_count}/{}", gates.len())
    };

    vec![
        name(pod),
        format!("{ready}/{total}").into(),
        reason.into(),
        restarts_cell.into(),
        age(pod, now),
        pod_ip.into(),
        node.into(),
        nominated.into(),
        readiness_gates.into(),
    ]
}
