//! The Node, Service and Endpoints printers' cells: node status, roles, age, version and
//! addresses; service type, cluster and external IPs, ports and selector; endpoint addresses
//! (`formatEndpoints`).
//!
//! Cells of these three kinds only.

use std::collections::BTreeSet;

use jiff::Timestamp;
use serde_json::Value;

use super::cell::{age, format_labels, name, str_of};

pub(super) fn node_cells(node: &Value, now: Timestamp) -> Vec<Value> {
    let status = &node["status"];
    let mut states: Vec<String> = Vec::new();
    // Later duplicates win, as with the Go map built from the conditions.
    if let Some(ready) = status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().rev().find(|c| str_of(&c["type"]) == "Ready"))
    {
        if str_of(&ready["status"]) == "True" {
            states.push("Ready".into());
        } else {
            states.push("NotReady".into());
        }
    }
    if states.is_empty() {
        states.push("Unknown".into());
    }
    if node["spec"]["unschedulable"].as_bool() == Some(true) {
        states.push("SchedulingDisabled".into());
    }
    let mut roles = BTreeSet::new();
    if let Some(labels) = node["metadata"]["labels"].as_object() {
        for (k, v) in labels {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                if !role.is_empty() {
                    roles.insert(role.to_string());
                }
            } else if k == "kubernetes.io/role" && !str_of(v).is_empty() {
                roles.insert(str_of(v).to_string());
            }
        }
    }
    let roles = if roles.is_empty() {
        "<none>".to_string()
    } else {
        roles.into_iter().collect::<Vec<_>>().join(",")
    };
    let address = |kind: &str| -> String {
        status["addresses"]
            .as_array()
            .and_then(|a| a.iter().find(|x| str_of(&x["type"]) == kind))
            .map_or_else(
                || "<none>".to_string(),
                |x| str_of(&x["address"]).to_string(),
            )
    };
    let info = &status["nodeInfo"];
    let or_unknown = |v: &Value| -> Value {
        let s = str_of(v);
        if s.is_empty() { "<unknown>" } else { s }.into()
    };
    vec![
        name(node),
        states.join(",").into(),
        roles.into(),
        age(node, now),
        str_of(&info["kubeletVersion"]).into(),
        address("InternalIP").into(),
        address("ExternalIP").into(),
        or_unknown(&info["osImage"]),
        or_unknown(&info["kernelVersion"]),
        or_unknown(&info["containerRuntimeVersion"]),
    ]
}

fn string_list(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|s| str_of(s).to_string()).collect())
        .unwrap_or_default()
}

pub(super) fn service_cells(svc: &Value, now: Timestamp) -> Vec<Value> {
    let spec = &svc["spec"];
    let svc_type = str_of(&spec["type"]);
    let cluster_ip = spec["clusterIPs"][0].as_str().unwrap_or("<none>");
    let external_ips = string_list(&spec["externalIPs"]);
    let external = match svc_type {
        "ClusterIP" | "NodePort" => {
            if external_ips.is_empty() {
                "<none>".to_string()
            } else {
                external_ips.join(",")
            }
        }
        "LoadBalancer" => {
            // The apiserver renders wide, so the load-balancer list is never clipped.
            let lb: BTreeSet<String> = svc["status"]["loadBalancer"]["ingress"]
                .as_array()
                .map(|ing| {
                    ing.iter()
                        .filter_map(|i| {
                            let ip = str_of(&i["ip"]);
                            let host = str_of(&i["hostname"]);
                            if !ip.is_empty() {
                                Some(ip.to_string())
                            } else if !host.is_empty() {
                                Some(host.to_string())
                            } else {
                                None
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            let mut all: Vec<String> = lb.into_iter().collect();
            if !external_ips.is_empty() {
                all.extend(external_ips);
                all.join(",")
            } else if !all.is_empty() {
                all.join(",")
            } else {
                "<pending>".to_string()
            }
        }
        "ExternalName" => str_of(&spec["externalName"]).to_string(),
        _ => "<unknown>".to_string(),
    };
    let ports: Vec<String> = spec["ports"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    let port = p["port"].as_i64().unwrap_or(0);
                    let protocol = str_of(&p["protocol"]);
                    match p["nodePort"].as_i64().filter(|n| *n > 0) {
                        Some(node_port) => format!("{port}:{node_port}/{protocol}"),
                        None => format!("{port}/{protocol}"),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let ports = if ports.is_empty() {
        "<none>".to_string()
    } else {
        ports.join(",")
    };
    vec![
        name(svc),
        svc_type.into(),
        cluster_ip.into(),
        external.into(),
        ports.into(),
        age(svc, now),
        format_labels(&spec["selector"]).into(),
    ]
}

fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `formatEndpoints(endpoints, nil)`: at most three addresses, then "+ N more...".
pub(super) fn format_endpoints(ep: &Value) -> String {
    let subsets = ep["subsets"].as_array().cloned().unwrap_or_default();
    if subsets.is_empty() {
        return "<none>".into();
    }
    const MAX: usize = 3;
    let mut list: Vec<String> = Vec::new();
    let mut more = false;
    let mut count = 0usize;
    for ss in &subsets {
        let addresses = ss["addresses"].as_array().cloned().unwrap_or_default();
        let ports = ss["ports"].as_array().cloned().unwrap_or_default();
        if ports.is_empty() {
            count += addresses.len();
            for a in &addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(str_of(&a["ip"]).to_string());
            }
            continue;
        }
        for port in &ports {
            count += addresses.len();
            for a in &addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(join_host_port(
                    str_of(&a["ip"]),
                    port["port"].as_i64().unwrap_or(0),
                ));
            }
        }
    }
    let joined = list.join(",");
    if more {
        format!("{joined} + {} more...", count.saturating_sub(MAX))
    } else {
        joined
    }
}
