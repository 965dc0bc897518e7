//! The simulated kubelet's pure pod logic: the `sandbox.diorch.io/*` annotations that script a
//! pod's life, durations, pod IP pools, a running pod's container states and the pod status the
//! kubelet writes (conditions, container statuses, phases) with real kubelet reasons.
//!
//! Owns no I/O; `sim_loop` drives these types from watches and timers. Must not touch the API
//! server or the sandbox's store.

use std::collections::{BTreeMap, HashSet};
use std::net::Ipv4Addr;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

/// How long after Running the containers exit (`5s`, `1m30s`, `200ms`).
pub const ANN_EXIT_AFTER: &str = "sandbox.diorch.io/exit-after";
/// Exit code of every container (default 0).
pub const ANN_EXIT_CODE: &str = "sandbox.diorch.io/exit-code";
/// Prefix of `sandbox.diorch.io/exit-code-<container>`: exit code of one container.
pub const ANN_EXIT_CODE_PREFIX: &str = "sandbox.diorch.io/exit-code-";
/// How long after Running the containers become ready (default: at once).
pub const ANN_READY_AFTER: &str = "sandbox.diorch.io/ready-after";
/// How long the containers take to stop once the pod is deleted (default
/// [`DEFAULT_STOP_AFTER`]); longer than the pod's grace period means they are killed at its end.
pub const ANN_STOP_AFTER: &str = "sandbox.diorch.io/stop-after";
/// How long containers take to stop after SIGTERM when no annotation says otherwise.
pub const DEFAULT_STOP_AFTER: Duration = Duration::from_secs(1);
/// Exit code of a container killed (SIGKILL) at the end of its grace period.
pub const KILLED_EXIT_CODE: i32 = 137;

/// Parses a Go-style duration: one or more `<number><unit>` with units `ns`, `us`, `µs`, `ms`,
/// `s`, `m`, `h` (e.g. `200ms`, `1.5s`, `1m30s`), or a bare `0`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let invalid = || format!("invalid duration {s:?} (expected e.g. 200ms, 5s, 1m30s)");
    let mut rest = s;
    let mut total = 0f64;
    if rest.is_empty() {
        return Err(invalid());
    }
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(invalid)?;
        let (num, tail) = rest.split_at(num_end);
        let value: f64 = num.parse().map_err(|_| invalid())?;
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_end);
        let secs = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(invalid()),
        };
        total += value * secs;
        rest = tail;
    }
    Duration::try_from_secs_f64(total).map_err(|_| invalid())
}

/// A pod's scripted life, from its annotations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Script {
    pub exit_after: Option<Duration>,
    pub ready_after: Option<Duration>,
    pub stop_after: Option<Duration>,
    pub exit_code: i32,
    pub container_codes: BTreeMap<String, i32>,
}

impl Script {
    /// Reads the annotations; invalid values are reported and ignored (the pod then runs
    /// as if the annotation were absent).
    pub fn from_pod(pod: &Pod) -> (Script, Vec<String>) {
        let mut script = Script::default();
        let mut errors = Vec::new();
        for (key, value) in pod.metadata.annotations.iter().flatten() {
            let duration = |errors: &mut Vec<String>| match parse_duration(value) {
                Ok(d) => Some(d),
                Err(e) => {
                    errors.push(format!("{key}: {e}"));
                    None
                }
            };
            let code = |errors: &mut Vec<String>| match value.trim().parse::<i32>() {
                Ok(c) => Some(c),
                Err(_) => {
                    errors.push(format!("{key}: invalid exit code {value:?}"));
                    None
                }
            };
            if key == ANN_EXIT_AFTER {
                script.exit_after = duration(&mut errors);
            } else if key == ANN_READY_AFTER {
                script.ready_after = duration(&mut errors);
            } else if key == ANN_STOP_AFTER {
                script.stop_after = duration(&mut errors);
            } else if key == ANN_EXIT_CODE {
                script.exit_code = code(&mut errors).unwrap_or(0);
            } else if let Some(container) = key.strip_prefix(ANN_EXIT_CODE_PREFIX)
                && let Some(c) = code(&mut errors)
            {
                script.container_codes.insert(container.to_string(), c);
            }
        }
        (script, errors)
    }

    /// When containers of a pod deleted with `grace` seconds stop, and whether they are
    /// killed then: they stop after `stop-after` (default [`DEFAULT_STOP_AFTER`]), or are
    /// killed when the grace period ends first.
    pub fn stop_plan(&self, grace: i64) -> (Duration, bool) {
        let grace = Duration::from_secs(grace.max(0).unsigned_abs());
        let stop = self.stop_after.unwrap_or(DEFAULT_STOP_AFTER);
        if stop > grace {
            (grace, true)
        } else {
            (stop, false)
        }
    }

    pub fn code_for(&self, container: &str) -> i32 {
        self.container_codes
            .get(container)
            .copied()
            .unwrap_or(self.exit_code)
    }
}

/// Pod IPs of one node: a power-of-two block of 10.244.0.0/12 per node (the node's podCIDR),
/// skipping the network, gateway (.1) and broadcast addresses.
#[derive(Clone, Debug)]
pub struct IpPool {
    base: u32,
    size: u32,
    next: u32,
    used: HashSet<u32>,
}

impl IpPool {
    /// The pool of node `index` when each node holds at most `max_pods` pods; `None` when the
    /// cluster does not fit in 10.244.0.0 – 10.255.255.255.
    pub fn for_node(index: u32, max_pods: u32) -> Option<IpPool> {
        let size = max_pods
            .checked_add(3)?
            .checked_next_power_of_two()?
            .max(256);
        let base = u32::from(Ipv4Addr::new(10, 244, 0, 0)).checked_add(index.checked_mul(size)?)?;
        let last = base.checked_add(size - 1)?;
        (last <= u32::from(Ipv4Addr::new(10, 255, 255, 255))).then_some(IpPool {
            base,
            size,
            next: 2,
            used: HashSet::new(),
        })
    }

    /// The node's `spec.podCIDR`.
    pub fn cidr(&self) -> String {
        format!(
            "{}/{}",
            Ipv4Addr::from(self.base),
            32 - self.size.trailing_zeros()
        )
    }

    /// The next free address, round-robin so a released address is not handed out again soon.
    pub fn allocate(&mut self) -> Option<Ipv4Addr> {
        for _ in 0..self.size {
            let offset = self.next;
            self.next = if self.next + 1 >= self.size - 1 {
                2
            } else {
                self.next + 1
            };
            if self.used.insert(offset) {
                return Some(Ipv4Addr::from(self.base + offset));
            }
        }
        None
    }

    /// Marks an address as used (a pod that already runs, seen after a restart).
    pub fn reserve(&mut self, ip: Ipv4Addr) -> bool {
        let ip = u32::from(ip);
        ip > self.base && ip < self.base + self.size - 1 && self.used.insert(ip - self.base)
    }

    pub fn release(&mut self, ip: Ipv4Addr) {
        self.used.remove(&u32::from(ip).wrapping_sub(self.base));
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    Running {
        started: Timestamp,
    },
    Terminated {
        code: i32,
        started: Timestamp,
        finished: Timestamp,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerRun {
    pub name: String,
    pub image: String,
    pub restarts: i32,
    pub state: RunState,
    pub last: Option<RunState>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Running,
    Succeeded,
    Failed,
}

/// A pod the kubelet has started.
#[derive(Clone, Debug)]
pub struct PodRun {
    pub uid: String,
    pub ip: Ipv4Addr,
    pub host_ip: String,
    pub start_time: Timestamp,
    pub running_since: Timestamp,
    /// When the init containers completed (the app containers first started).
    pub init_done: Timestamp,
    pub init: Vec<(String, String)>,
    pub containers: Vec<ContainerRun>,
    /// The ready-after delay has passed (containers that run are ready).
    pub ready_gate: bool,
    pub phase: Phase,
    /// Condition type → (status, lastTransitionTime).
    conditions: BTreeMap<&'static str, (bool, Timestamp)>,
}

impl PodRun {
    /// Starts every container of `pod` at `now` (init containers shown as completed).
    pub fn start(
        pod: &Pod,
        ip: Ipv4Addr,
        host_ip: &str,
        admitted: Timestamp,
        now: Timestamp,
        ready_gate: bool,
    ) -> PodRun {
        let spec = pod.spec.as_ref();
        let init = spec
            .and_then(|s| s.init_containers.as_ref())
            .into_iter()
            .flatten()
            .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
            .collect();
        let containers = spec
            .map(|s| s.containers.as_slice())
            .unwrap_or(&[])
            .iter()
            .map(|c| ContainerRun {
                name: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                restarts: 0,
                state: RunState::Running { started: now },
                last: None,
            })
            .collect();
        let mut run = PodRun {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            ip,
            host_ip: host_ip.to_string(),
            start_time: admitted,
            running_since: now,
            init_done: now,
            init,
            containers,
            ready_gate,
            phase: Phase::Running,
            conditions: BTreeMap::new(),
        };
        run.update_conditions(now);
        run
    }

    /// Containers that currently run.
    pub fn any_running(&self) -> bool {
        self.containers
            .iter()
            .any(|c| matches!(c.state, RunState::Running { .. }))
    }

    pub fn set_ready(&mut self, now: Timestamp) {
        self.ready_gate = true;
        self.update_conditions(now);
    }

    /// The running containers exit with their scripted codes. Under restartPolicy `Always`
    /// (or `OnFailure` with a non-zero code) a container restarts at once: restartCount + 1,
    /// lastState holds the exit. Returns whether some container runs again.
    pub fn exit(&mut self, script: &Script, restart_policy: &str, now: Timestamp) -> bool {
        let mut restarted = false;
        for c in &mut self.containers {
            let RunState::Running { started } = c.state else {
                continue;
            };
            let code = script.code_for(&c.name);
            let ended = RunState::Terminated {
                code,
                started,
                finished: now,
            };
            let restart = match restart_policy {
                "Always" => true,
                "OnFailure" => code != 0,
                _ => false,
            };
            if restart {
                c.last = Some(ended);
                c.restarts += 1;
                c.state = RunState::Running { started: now };
                restarted = true;
            } else {
                c.state = ended;
            }
        }
        if restarted {
            self.running_since = now;
            self.ready_gate = script.ready_after.is_none_or(|d| d.is_zero());
        }
        if !self.any_running() {
            self.end_phase();
        }
        self.update_conditions(now);
        restarted
    }

    /// The pod was deleted: every running container stops, killed (exit code 137) or with its
    /// scripted code, and none restarts. The pod ends Failed when a code is non-zero, else
    /// Succeeded, as kubelets since 1.27 end deleted pods in a terminal phase.
    pub fn stop(&mut self, script: &Script, killed: bool, now: Timestamp) {
        for c in &mut self.containers {
            if let RunState::Running { started } = c.state {
                let code = if killed {
                    KILLED_EXIT_CODE
                } else {
                    script.code_for(&c.name)
                };
                c.state = RunState::Terminated {
                    code,
                    started,
                    finished: now,
                };
            }
        }
        self.end_phase();
        self.update_conditions(now);
    }

    /// The terminal phase of a pod none of whose containers runs: Failed when one exited with a
    /// non-zero code, else Succeeded (for containers that ended and for a deleted pod alike).
    fn end_phase(&mut self) {
        let failed = self
            .containers
            .iter()
            .any(|c| matches!(c.state, RunState::Terminated { code, .. } if code != 0));
        self.phase = if failed {
            Phase::Failed
        } else {
            Phase::Succeeded
        };
    }

    fn container_ready(&self, c: &ContainerRun) -> bool {
        self.phase == Phase::Running
            && self.ready_gate
            && matches!(c.state, RunState::Running { .. })
    }

    fn update_conditions(&mut self, now: Timestamp) {
        let all_ready = self.containers.iter().all(|c| self.container_ready(c));
        let running = self.phase == Phase::Running;
        for (kind, status) in [
            ("PodReadyToStartContainers", running),
            ("Initialized", true),
            ("ContainersReady", all_ready),
            ("Ready", all_ready),
            ("PodScheduled", true),
        ] {
            let entry = self.conditions.entry(kind).or_insert((status, now));
            if entry.0 != status {
                *entry = (status, now);
            }
        }
    }

    /// The pod `status` as the kubelet writes it (for a merge patch of pods/status).
    pub fn status(&self) -> Value {
        let unready: Vec<&str> = self
            .containers
            .iter()
            .filter(|c| !self.container_ready(c))
            .map(|c| c.name.as_str())
            .collect();
        let (not_ready_reason, not_ready_message) = match self.phase {
            Phase::Succeeded => ("PodCompleted", None),
            Phase::Failed => ("PodFailed", None),
            Phase::Running => (
                "ContainersNotReady",
                Some(format!(
                    "containers with unready status: [{}]",
                    unready.join(" ")
                )),
            ),
        };
        // The kubelet's order, which `kubectl describe` shows as is.
        let order = [
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled",
        ];
        let conditions: Vec<Value> = order
            .iter()
            .filter_map(|kind| self.conditions.get_key_value(kind))
            .map(|(kind, (status, since))| {
                let mut c = json!({
                    "type": kind,
                    "status": if *status { "True" } else { "False" },
                    "lastProbeTime": null,
                    "lastTransitionTime": rfc3339(*since),
                });
                let readiness = *kind == "ContainersReady" || *kind == "Ready";
                if !status && readiness {
                    c["reason"] = json!(not_ready_reason);
                    if let Some(m) = &not_ready_message {
                        c["message"] = json!(m);
                    }
                }
                if *kind == "Initialized" && self.phase == Phase::Succeeded && !self.init.is_empty()
                {
                    c["reason"] = json!("PodCompleted");
                }
                c
            })
            .collect();
        let init_statuses: Vec<Value> = self
            .init
            .iter()
            .map(|(name, image)| {
                let id = self.container_id(name, 0);
                json!({
                    "name": name,
                    "image": image,
                    "imageID": image_id(image),
                    "containerID": id,
                    "ready": true,
                    "started": false,
                    "restartCount": 0,
                    "state": {"terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "startedAt": rfc3339(self.start_time),
                        "finishedAt": rfc3339(self.init_done),
                        "containerID": id,
                    }},
                    "lastState": {},
                })
            })
            .collect();
        let statuses: Vec<Value> = self
            .containers
            .iter()
            .map(|c| {
                let id = self.container_id(&c.name, c.restarts);
                let running = matches!(c.state, RunState::Running { .. });
                json!({
                    "name": c.name,
                    "image": c.image,
                    "imageID": image_id(&c.image),
                    "containerID": id,
                    "ready": self.container_ready(c),
                    "started": running,
                    "restartCount": c.restarts,
                    "state": state_json(&c.state, &id),
                    "lastState": c.last.as_ref().map_or(json!({}), |s| {
                        state_json(s, &self.container_id(&c.name, c.restarts - 1))
                    }),
                })
            })
            .collect();
        let phase = match self.phase {
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        };
        let mut status = json!({
            "phase": phase,
            "conditions": conditions,
            "hostIP": self.host_ip,
            "hostIPs": [{"ip": self.host_ip}],
            "podIP": self.ip.to_string(),
            "podIPs": [{"ip": self.ip.to_string()}],
            "startTime": rfc3339(self.start_time),
            "containerStatuses": statuses,
        });
        if !init_statuses.is_empty() {
            status["initContainerStatuses"] = json!(init_statuses);
        }
        status
    }

    fn container_id(&self, name: &str, restarts: i32) -> String {
        if restarts == 0 {
            format!("sandbox://{}-{name}", self.uid)
        } else {
            format!("sandbox://{}-{name}-{restarts}", self.uid)
        }
    }
}

fn image_id(image: &str) -> String {
    format!("sandbox://{image}")
}

fn state_json(state: &RunState, container_id: &str) -> Value {
    match *state {
        RunState::Running { started } => json!({"running": {"startedAt": rfc3339(started)}}),
        RunState::Terminated {
            code,
            started,
            finished,
        } => json!({"terminated": {
            "exitCode": code,
            "reason": if code == 0 { "Completed" } else { "Error" },
            "startedAt": rfc3339(started),
            "finishedAt": rfc3339(finished),
            "containerID": container_id,
        }}),
    }
}

/// Seconds-precision RFC 3339, as `metav1.Time` serialises.
pub fn rfc3339(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(annotations: Value, init: bool) -> Pod {
        let mut spec = json!({"containers": [{"name": "main", "image": "busybox"}, {"name": "side", "image": "nginx"}]});
        if init {
            spec["initContainers"] = json!([{"name": "setup", "image": "alpine"}]);
        }
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u1", "annotations": annotations},
            "spec": spec
        }))
        .unwrap()
    }

    fn ts(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn cond<'a>(status: &'a Value, kind: &str) -> &'a Value {
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == kind)
            .unwrap()
    }

    #[test]
    fn durations_parse_like_go() {
        assert_eq!(parse_duration("200ms"), Ok(Duration::from_millis(200)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn script_reads_annotations_and_reports_bad_ones() {
        let p = pod(
            json!({ANN_EXIT_AFTER: "5s", ANN_EXIT_CODE: "3", "sandbox.diorch.io/exit-code-side": "0", ANN_READY_AFTER: "soon"}),
            false,
        );
        let (script, errors) = Script::from_pod(&p);
        assert_eq!(script.exit_after, Some(Duration::from_secs(5)));
        assert_eq!(script.ready_after, None);
        assert_eq!(script.code_for("main"), 3);
        assert_eq!(script.code_for("side"), 0);
        assert_eq!(errors.len(), 1);
        assert!(errors[0].contains(ANN_READY_AFTER), "{errors:?}");
    }

    #[test]
    fn ip_pools_are_disjoint_per_node_and_never_hand_out_used_addresses() {
        let mut a = IpPool::for_node(0, 110).unwrap();
        let b = IpPool::for_node(3, 110).unwrap();
        assert_eq!(a.cidr(), "10.244.0.0/24");
        assert_eq!(b.cidr(), "10.244.3.0/24");
        assert_eq!(IpPool::for_node(1, 5000).unwrap().cidr(), "10.244.32.0/19");
        assert!(IpPool::for_node(100_000, 110).is_none());
        let first = a.allocate().unwrap();
        assert_eq!(first, Ipv4Addr::new(10, 244, 0, 2));
        let mut seen = HashSet::from([first]);
        for _ in 0..252 {
            assert!(seen.insert(a.allocate().unwrap()));
        }
        assert_eq!(a.allocate(), None, "253 usable addresses in a /24");
        a.release(first);
        assert_eq!(a.allocate(), Some(first));
        assert!(!a.reserve(first));
    }

    #[test]
    fn running_status_has_ips_conditions_and_container_states() {
        let p = pod(json!({}), true);
        let run = PodRun::start(
            &p,
            Ipv4Addr::new(10, 244, 1, 2),
            "10.0.0.1",
            ts(0),
            ts(1),
            true,
        );
        let s = run.status();
        assert_eq!(s["phase"], "Running");
        assert_eq!(s["podIP"], "10.244.1.2");
        assert_eq!(s["podIPs"], json!([{"ip": "10.244.1.2"}]));
        assert_eq!(s["hostIP"], "10.0.0.1");
        for kind in [
            "PodReadyToStartContainers",
            "Initialized",
            "ContainersReady",
            "Ready",
            "PodScheduled",
        ] {
            assert_eq!(cond(&s, kind)["status"], "True", "{kind}");
        }
        let main = &s["containerStatuses"][0];
        assert_eq!(main["containerID"], "sandbox://u1-main");
        assert_eq!(main["ready"], true);
        assert_eq!(main["restartCount"], 0);
        assert_eq!(main["state"]["running"]["startedAt"], rfc3339(ts(1)));
        assert_eq!(
            s["initContainerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
    }

    #[test]
    fn conditions_are_listed_in_kubelet_order() {
        let run = PodRun::start(
            &pod(json!({}), false),
            Ipv4Addr::new(10, 244, 0, 2),
            "10.0.0.0",
            ts(0),
            ts(0),
            true,
        );
        let kinds: Vec<Value> = run.status()["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].clone())
            .collect();
        assert_eq!(
            kinds,
            vec![
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled"
            ]
        );
    }

    #[test]
    fn ready_after_keeps_containers_unready_until_set() {
        let p = pod(json!({}), false);
        let mut run = PodRun::start(
            &p,
            Ipv4Addr::new(10, 244, 0, 2),
            "10.0.0.0",
            ts(0),
            ts(0),
            false,
        );
        let s = run.status();
        assert_eq!(s["containerStatuses"][0]["ready"], false);
        assert_eq!(s["containerStatuses"][0]["started"], true);
        let ready = cond(&s, "Ready");
        assert_eq!(ready["status"], "False");
        assert_eq!(ready["reason"], "ContainersNotReady");
        assert_eq!(
            ready["message"],
            "containers with unready status: [main side]"
        );
        run.set_ready(ts(5));
        let s = run.status();
        assert_eq!(cond(&s, "Ready")["status"], "True");
        assert_eq!(cond(&s, "Ready")["lastTransitionTime"], rfc3339(ts(5)));
        assert_eq!(
            cond(&s, "PodScheduled")["lastTransitionTime"],
            rfc3339(ts(0))
        );
    }

    #[test]
    fn exit_with_never_ends_the_pod_with_codes_and_reasons() {
        let p = pod(
            json!({ANN_EXIT_CODE: "3", "sandbox.diorch.io/exit-code-side": "0"}),
            false,
        );
        let (script, _) = Script::from_pod(&p);
        let mut run = PodRun::start(
            &p,
            Ipv4Addr::new(10, 244, 0, 2),
            "10.0.0.0",
            ts(0),
            ts(0),
            true,
        );
        assert!(!run.exit(&script, "Never", ts(9)));
        let s = run.status();
        assert_eq!(s["phase"], "Failed");
        let main = &s["containerStatuses"][0]["state"]["terminated"];
        assert_eq!(main["exitCode"], 3);
        assert_eq!(main["reason"], "Error");
        assert_eq!(main["finishedAt"], rfc3339(ts(9)));
        assert_eq!(
            s["containerStatuses"][1]["state"]["terminated"]["reason"],
            "Completed"
        );
        assert_eq!(cond(&s, "Ready")["reason"], "PodFailed");
        assert_eq!(cond(&s, "ContainersReady")["status"], "False");
        assert_eq!(cond(&s, "PodReadyToStartContainers")["status"], "False");

        let ok = pod(json!({}), false);
        let mut run = PodRun::start(
            &ok,
            Ipv4Addr::new(10, 244, 0, 3),
            "10.0.0.0",
            ts(0),
            ts(0),
            true,
        );
        run.exit(&Script::default(), "Never", ts(2));
        let s = run.status();
        assert_eq!(s["phase"], "Succeeded");
        assert_eq!(cond(&s, "Ready")["reason"], "PodCompleted");
    }

    #[test]
    fn deleted_pods_stop_within_their_grace_or_are_killed() {
        let p = pod(json!({ANN_STOP_AFTER: "5s"}), false);
        let (script, errors) = Script::from_pod(&p);
        assert!(errors.is_empty());
        assert_eq!(script.stop_plan(30), (Duration::from_secs(5), false));
        assert_eq!(script.stop_plan(2), (Duration::from_secs(2), true));
        assert_eq!(Script::default().stop_plan(30), (DEFAULT_STOP_AFTER, false));
        assert_eq!(Script::default().stop_plan(0), (Duration::ZERO, true));
        let start = |ip| {
            PodRun::start(
                &p,
                Ipv4Addr::new(10, 244, 0, ip),
                "10.0.0.0",
                ts(0),
                ts(0),
                true,
            )
        };
        let mut killed = start(2);
        killed.stop(&script, true, ts(2));
        let s = killed.status();
        assert_eq!(s["phase"], "Failed");
        for c in s["containerStatuses"].as_array().unwrap() {
            assert_eq!(c["state"]["terminated"]["exitCode"], KILLED_EXIT_CODE);
            assert_eq!(c["ready"], false);
        }
        let mut stopped = start(3);
        stopped.stop(&script, false, ts(1));
        let s = stopped.status();
        assert_eq!(s["phase"], "Succeeded");
        assert_eq!(
            s["containerStatuses"][0]["state"]["terminated"]["exitCode"],
            0
        );
        assert_eq!(cond(&s, "Ready")["status"], "False");
    }

    #[test]
    fn on_failure_restarts_only_failed_containers() {
        let p = pod(json!({"sandbox.diorch.io/exit-code-main": "1"}), false);
        let (script, _) = Script::from_pod(&p);
        let mut run = PodRun::start(
            &p,
            Ipv4Addr::new(10, 244, 0, 2),
            "10.0.0.0",
            ts(0),
            ts(0),
            true,
        );
        assert!(run.exit(&script, "OnFailure", ts(5)));
        let s = run.status();
        assert_eq!(s["phase"], "Running");
        let main = &s["containerStatuses"][0];
        assert_eq!(main["restartCount"], 1);
        assert_eq!(main["containerID"], "sandbox://u1-main-1");
        assert_eq!(main["lastState"]["terminated"]["exitCode"], 1);
        assert_eq!(main["state"]["running"]["startedAt"], rfc3339(ts(5)));
        assert_eq!(
            s["containerStatuses"][1]["state"]["terminated"]["exitCode"],
            0
        );
        assert_eq!(
            cond(&s, "Ready")["status"],
            "False",
            "a completed container is not ready"
        );
    }
}
