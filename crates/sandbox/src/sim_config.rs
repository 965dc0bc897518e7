//! The simulated cluster's configuration and the node objects built from it: `ClusterArgs` (the
//! `diorch-sandbox serve` flags for nodes and timing) with its label and taint parsers, node
//! names, manifests and statuses, and `SimError`. Shared by `kubelet.rs` (which registers the
//! nodes) and `sim_loop` (which runs them), so that neither imports the other's items.
//!
//! Pure data and formatting: it must not call the API server or touch the event loop.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Taint;
use serde_json::{Value, json};

use crate::sim_pod::{IpPool, parse_duration, rfc3339};
use crate::sim_sched::parse_quantity;

/// Why the simulated cluster could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("invalid cluster configuration: {0}")]
    Config(String),
    #[error("cannot {action} node {node}: {source}")]
    Node {
        action: &'static str,
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot build node {node}: {source}")]
    NodeObject {
        node: String,
        #[source]
        source: serde_json::Error,
    },
}

/// Labels for every node, from `k=v,k2=v2`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeLabels(pub BTreeMap<String, String>);

/// Taints for every node, from `key[=value]:Effect,...`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeTaints(pub Vec<Taint>);

fn parse_labels(s: &str) -> Result<NodeLabels, String> {
    let mut out = BTreeMap::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (k, v) = item
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| format!("invalid label {item:?} (expected key=value)"))?;
        out.insert(k.to_string(), v.to_string());
    }
    Ok(NodeLabels(out))
}

fn parse_taints(s: &str) -> Result<NodeTaints, String> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let invalid = || format!("invalid taint {item:?} (expected key[=value]:Effect)");
        let (kv, effect) = item.rsplit_once(':').ok_or_else(invalid)?;
        if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            return Err(invalid());
        }
        let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
        if key.is_empty() {
            return Err(invalid());
        }
        out.push(Taint {
            key: key.to_string(),
            value: (!value.is_empty()).then(|| value.to_string()),
            effect: effect.to_string(),
            time_added: None,
        });
    }
    Ok(NodeTaints(out))
}

/// The simulated cluster's shape and timing (flattened into `diorch-sandbox serve`).
#[derive(clap::Args, Clone, Debug)]
pub struct ClusterArgs {
    /// Number of simulated nodes (sandbox-node-0 .. N-1).
    #[arg(long, default_value_t = 4)]
    pub nodes: u32,
    /// CPU capacity of each node.
    #[arg(long, default_value = "32")]
    pub node_cpu: String,
    /// Memory capacity of each node.
    #[arg(long, default_value = "128Gi")]
    pub node_memory: String,
    /// nvidia.com/gpu per node (0 = none).
    #[arg(long, default_value_t = 8)]
    pub node_gpus: u32,
    /// Maximum pods per node.
    #[arg(long, default_value_t = 110)]
    pub node_pods: u32,
    /// Ephemeral storage capacity of each node.
    #[arg(long, default_value = "100Gi")]
    pub node_ephemeral_storage: String,
    /// Extra labels for every node: k=v,k2=v2.
    #[arg(long, value_parser = parse_labels, default_value = "")]
    pub node_labels: NodeLabels,
    /// Taints for every node: key[=value]:Effect,...
    #[arg(long, value_parser = parse_taints, default_value = "")]
    pub node_taints: NodeTaints,
    /// Time from binding to Running (e.g. 200ms, 1s).
    #[arg(long, value_parser = parse_duration, default_value = "200ms")]
    pub pod_start_delay: Duration,
    /// API requests the scheduler and kubelets keep in flight at most.
    #[arg(long, default_value_t = 32)]
    pub sim_concurrency: usize,
    /// Write the kubelet's Pulled/Created/Started events (turn off for very large loads).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub kubelet_events: bool,
}

impl Default for ClusterArgs {
    fn default() -> Self {
        ClusterArgs {
            nodes: 4,
            node_cpu: "32".into(),
            node_memory: "128Gi".into(),
            node_gpus: 8,
            node_pods: 110,
            node_ephemeral_storage: "100Gi".into(),
            node_labels: NodeLabels::default(),
            node_taints: NodeTaints::default(),
            pod_start_delay: Duration::from_millis(200),
            sim_concurrency: 32,
            kubelet_events: true,
        }
    }
}

/// Name of simulated node `index`.
pub fn node_name(index: u32) -> String {
    format!("sandbox-node-{index}")
}

fn node_host_ip(index: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 0, 0, 0)).wrapping_add(index))
}

impl ClusterArgs {
    /// Checks quantities and that every node's pod CIDR fits.
    pub fn validate(&self) -> Result<(), SimError> {
        for (flag, q) in [
            ("--node-cpu", &self.node_cpu),
            ("--node-memory", &self.node_memory),
            ("--node-ephemeral-storage", &self.node_ephemeral_storage),
        ] {
            if parse_quantity(q).is_none_or(|v| v < 0) {
                return Err(SimError::Config(format!("{flag}: invalid quantity {q:?}")));
            }
        }
        if self.nodes > 0 && IpPool::for_node(self.nodes - 1, self.node_pods).is_none() {
            return Err(SimError::Config(format!(
                "{} nodes of {} pods do not fit in the pod network 10.244.0.0-10.255.255.255",
                self.nodes, self.node_pods
            )));
        }
        Ok(())
    }

    fn capacity(&self) -> Value {
        let mut cap = json!({
            "cpu": self.node_cpu,
            "memory": self.node_memory,
            "pods": self.node_pods.to_string(),
            "ephemeral-storage": self.node_ephemeral_storage,
        });
        if self.node_gpus > 0 {
            cap["nvidia.com/gpu"] = json!(self.node_gpus.to_string());
        }
        cap
    }

    /// The Node object (metadata and spec) the kubelet registers for node `index`.
    pub fn node_manifest(&self, index: u32) -> Value {
        let name = node_name(index);
        let mut labels: BTreeMap<String, String> = self.node_labels.0.clone();
        for (k, v) in [
            ("kubernetes.io/hostname", name.as_str()),
            ("kubernetes.io/os", "linux"),
            ("kubernetes.io/arch", "amd64"),
            ("node.kubernetes.io/instance-type", "sandbox"),
            ("beta.kubernetes.io/os", "linux"),
            ("beta.kubernetes.io/arch", "amd64"),
        ] {
            labels.insert(k.to_string(), v.to_string());
        }
        let cidr = IpPool::for_node(index, self.node_pods).map(|p| p.cidr());
        let mut spec = json!({});
        if let Some(cidr) = cidr {
            spec["podCIDR"] = json!(cidr);
            spec["podCIDRs"] = json!([cidr]);
        }
        if !self.node_taints.0.is_empty() {
            spec["taints"] = json!(self.node_taints.0);
        }
        json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "spec": spec,
        })
    }

    /// The node status the kubelet of node `index` reports at `now`, its conditions unchanged
    /// `since` (a kubelet moves a condition's lastTransitionTime only when its status changes;
    /// a heartbeat renews lastHeartbeatTime alone).
    pub fn node_status(&self, index: u32, since: Timestamp, now: Timestamp) -> Value {
        let name = node_name(index);
        let (since, t) = (rfc3339(since), rfc3339(now));
        let cond = |kind: &str, status: &str, reason: &str, message: &str| {
            json!({"type": kind, "status": status, "reason": reason, "message": message,
                   "lastHeartbeatTime": t, "lastTransitionTime": since})
        };
        json!({
            "capacity": self.capacity(),
            "allocatable": self.capacity(),
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": node_host_ip(index).to_string()},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": format!("sandbox{index:024x}"),
                "systemUUID": format!("00000000-0000-0000-0000-{index:012x}"),
                "bootID": format!("00000000-0000-0000-0000-{index:012x}"),
                "kernelVersion": "6.8.0-sandbox",
                "osImage": "diorch sandbox (simulated)",
                "containerRuntimeVersion": "sandbox://1.0",
                "kubeletVersion": "v1.33.0-sandbox",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;

    #[test]
    fn label_and_taint_flags_parse() {
        assert_eq!(
            parse_labels("a=1, b=").unwrap().0,
            BTreeMap::from([("a".into(), "1".into()), ("b".into(), String::new())])
        );
        assert!(parse_labels("novalue").is_err());
        assert!(parse_labels("=x").is_err());
        let taints = parse_taints("gpu=yes:NoSchedule,dedicated:NoExecute")
            .unwrap()
            .0;
        assert_eq!(taints[0].key, "gpu");
        assert_eq!(taints[0].value.as_deref(), Some("yes"));
        assert_eq!(taints[1].value, None);
        assert_eq!(taints[1].effect, "NoExecute");
        assert!(parse_taints("gpu=yes:Sometimes").is_err());
        assert!(parse_taints("gpu").is_err());
    }

    #[test]
    fn clap_defaults_match_default_impl() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            cluster: ClusterArgs,
        }
        let parsed = <Cli as clap::Parser>::parse_from(["x"]).cluster;
        let default = ClusterArgs::default();
        assert_eq!(format!("{parsed:?}"), format!("{default:?}"));
        let custom = <Cli as clap::Parser>::parse_from([
            "x",
            "--nodes",
            "2",
            "--node-gpus",
            "0",
            "--pod-start-delay",
            "1s",
            "--node-labels",
            "team=rl",
        ])
        .cluster;
        assert_eq!(custom.nodes, 2);
        assert_eq!(custom.pod_start_delay, Duration::from_secs(1));
        assert_eq!(custom.node_labels.0["team"], "rl");
    }

    #[test]
    fn validation_rejects_bad_quantities_and_oversized_networks() {
        assert!(ClusterArgs::default().validate().is_ok());
        let bad_cpu = ClusterArgs {
            node_cpu: "lots".into(),
            ..ClusterArgs::default()
        };
        assert!(
            bad_cpu
                .validate()
                .unwrap_err()
                .to_string()
                .contains("--node-cpu")
        );
        let huge = ClusterArgs {
            nodes: 100_000,
            ..ClusterArgs::default()
        };
        assert!(huge.validate().is_err());
    }

    #[test]
    fn node_objects_carry_labels_capacity_and_info() {
        let cfg = ClusterArgs {
            node_labels: parse_labels("team=rl").unwrap(),
            node_taints: parse_taints("gpu:NoSchedule").unwrap(),
            ..ClusterArgs::default()
        };
        let mut node = cfg.node_manifest(2);
        node["status"] = cfg.node_status(2, Timestamp::UNIX_EPOCH, Timestamp::UNIX_EPOCH);
        let node: Node = serde_json::from_value(node).unwrap();
        let labels = node.metadata.labels.as_ref().unwrap();
        assert_eq!(node.metadata.name.as_deref(), Some("sandbox-node-2"));
        assert_eq!(labels["kubernetes.io/hostname"], "sandbox-node-2");
        assert_eq!(labels["node.kubernetes.io/instance-type"], "sandbox");
        assert_eq!(labels["team"], "rl");
        let spec = node.spec.as_ref().unwrap();
        assert_eq!(spec.pod_cidr.as_deref(), Some("10.244.2.0/24"));
        assert_eq!(spec.taints.as_ref().unwrap()[0].key, "gpu");
        let status = node.status.as_ref().unwrap();
        let alloc = status.allocatable.as_ref().unwrap();
        assert_eq!(alloc["nvidia.com/gpu"].0, "8");
        assert_eq!(alloc["pods"].0, "110");
        assert_eq!(status.capacity, status.allocatable);
        let ready = status
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "True");
        assert!(ready.last_heartbeat_time.is_some());
        // A heartbeat renews lastHeartbeatTime and keeps lastTransitionTime.
        let later = Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(10);
        let beat = &cfg.node_status(2, Timestamp::UNIX_EPOCH, later)["conditions"][3];
        assert_eq!(beat["type"], "Ready");
        assert_eq!(beat["lastTransitionTime"], "1970-01-01T00:00:00Z");
        assert_eq!(beat["lastHeartbeatTime"], "1970-01-01T00:00:10Z");
        let addresses = status.addresses.as_ref().unwrap();
        assert_eq!(addresses[0].address, "10.0.0.2");
        assert_eq!(
            status.node_info.as_ref().unwrap().kubelet_version,
            "v1.33.0-sandbox"
        );
        let no_gpu = ClusterArgs {
            node_gpus: 0,
            ..ClusterArgs::default()
        };
        assert!(
            no_gpu.node_status(0, Timestamp::UNIX_EPOCH, Timestamp::UNIX_EPOCH)["capacity"]
                .get("nvidia.com/gpu")
                .is_none()
        );
    }
}
