//! Snapshot files: a cluster's nodes, the DIJobs to place and the last applied plan, in the
//! plugin model, as JSON. `diorch plugin run` replays one against a policy plugin; a recorder
//! (`diorch plugin snapshot`) writes them from a live cluster with [`Snapshot::to_json`].
//!
//! Owns: the file format (version 1), its validation, and the pure helpers that derive a policy
//! call's inputs from it. Must not touch: clusters, Wasm, output.
//!
//! Format (camelCase; `examples/snapshot.json` is a complete one):
//! - `version`: `1`.
//! - `takenAt`: when it was recorded (RFC 3339; informational).
//! - `nodes`: the model's `Node`s. `free` is `allocatable` minus the requests of *every* pod on
//!   the node, the snapshot's jobs included; [`Snapshot::nodes_without`] gives capacity back for
//!   the jobs being (re)placed, as the operator does before `optimize`.
//! - `jobs`: the model's `Job`s; `current` holds indices into `nodes` (one per replica, or empty
//!   when the job is not placed).
//! - `previous`: the last plan applied, by job key and node names (the operator's `JobPlan`).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::{Job, JobPlan, Node, Resources};

/// The format version this build reads and writes.
pub const SNAPSHOT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Snapshot {
    pub version: u32,
    #[serde(default)]
    pub taken_at: String,
    pub nodes: Vec<Node>,
    pub jobs: Vec<Job>,
    #[serde(default)]
    pub previous: Vec<JobPlan>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("line {line} column {column}: {message}")]
    Parse {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("the snapshot has no \"version\" field (this diorch reads version {SNAPSHOT_VERSION})")]
    NoVersion,
    #[error(
        "snapshot version {found} is not supported (this diorch reads version {SNAPSHOT_VERSION})"
    )]
    Version { found: String },
    #[error("{0}")]
    Invalid(String),
    #[error("job {job:?} is not in the snapshot (its jobs: {known})")]
    UnknownJob { job: String, known: String },
    #[error("cannot write the snapshot as JSON: {0}")]
    Serialize(String),
}

fn parse_error(e: &serde_json::Error) -> SnapshotError {
    // serde_json appends " at line L column C" to its message; keep the position structured.
    let full = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    SnapshotError::Parse {
        line: e.line(),
        column: e.column(),
        message: full.strip_suffix(&suffix).unwrap_or(&full).to_string(),
    }
}

impl Snapshot {
    /// An empty snapshot of the current version.
    pub fn new(taken_at: impl Into<String>) -> Snapshot {
        Snapshot {
            version: SNAPSHOT_VERSION,
            taken_at: taken_at.into(),
            nodes: vec![],
            jobs: vec![],
            previous: vec![],
        }
    }

    /// Parses and validates a snapshot. The version is checked before the rest, so a file of a
    /// newer format is reported as such and not as an unknown field.
    pub fn from_json(text: &str) -> Result<Snapshot, SnapshotError> {
        // A generic parse first: syntax errors get their position, and the version is read
        // whatever the rest of the document looks like.
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| parse_error(&e))?;
        let Some(object) = value.as_object() else {
            return Err(SnapshotError::Invalid(
                "a snapshot is a JSON object with \"version\", \"nodes\" and \"jobs\"".into(),
            ));
        };
        match object.get("version") {
            None => return Err(SnapshotError::NoVersion),
            Some(v) if v.as_u64() == Some(u64::from(SNAPSHOT_VERSION)) => {}
            Some(v) => {
                return Err(SnapshotError::Version {
                    found: v.to_string(),
                });
            }
        }
        let snapshot: Snapshot = serde_json::from_str(text).map_err(|e| parse_error(&e))?;
        snapshot.validate()?;
        Ok(snapshot)
    }

    /// Pretty JSON with a final newline, as checked-in examples and `kubectl` users expect.
    pub fn to_json(&self) -> Result<String, SnapshotError> {
        let mut text = serde_json::to_string_pretty(self)
            .map_err(|e| SnapshotError::Serialize(e.to_string()))?;
        text.push('\n');
        Ok(text)
    }

    /// What a policy call needs to be meaningful: unique names, indices and plans that resolve.
    pub fn validate(&self) -> Result<(), SnapshotError> {
        let invalid = |m: String| Err(SnapshotError::Invalid(m));
        let mut names = BTreeSet::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if n.name.is_empty() {
                return invalid(format!("nodes[{i}] has an empty name"));
            }
            if !names.insert(n.name.as_str()) {
                return invalid(format!("nodes[{i}]: node {:?} appears twice", n.name));
            }
        }
        let mut keys = BTreeSet::new();
        for (i, j) in self.jobs.iter().enumerate() {
            if !keys.insert(j.key.as_str()) {
                return invalid(format!("jobs[{i}]: job {:?} appears twice", j.key));
            }
            let replicas = j.total_replicas();
            if !j.current.is_empty() && j.current.len() != replicas {
                return invalid(format!(
                    "jobs[{i}] ({}): current has {} entries for {replicas} replicas (one per \
                     replica, or none)",
                    j.key,
                    j.current.len()
                ));
            }
            if let Some(bad) = j
                .current
                .iter()
                .flatten()
                .find(|&&n| n as usize >= self.nodes.len())
            {
                return invalid(format!(
                    "jobs[{i}] ({}): current names node index {bad}, but there are {} nodes",
                    j.key,
                    self.nodes.len()
                ));
            }
        }
        let mut planned = BTreeSet::new();
        for (i, p) in self.previous.iter().enumerate() {
            let Some(job) = self.jobs.iter().find(|j| j.key == p.job) else {
                return invalid(format!("previous[{i}] names job {:?}, not in jobs", p.job));
            };
            if !planned.insert(p.job.as_str()) {
                return invalid(format!("previous[{i}]: job {:?} planned twice", p.job));
            }
            if p.nodes.len() != job.total_replicas() {
                return invalid(format!(
                    "previous[{i}] ({}): {} nodes for {} replicas",
                    p.job,
                    p.nodes.len(),
                    job.total_replicas()
                ));
            }
            if let Some(n) = p.nodes.iter().find(|n| !names.contains(n.as_str())) {
                return invalid(format!(
                    "previous[{i}] ({}) names node {n:?}, not in nodes",
                    p.job
                ));
            }
        }
        Ok(())
    }

    /// The job `key`, or an error listing the snapshot's jobs.
    pub fn job(&self, key: &str) -> Result<&Job, SnapshotError> {
        self.jobs
            .iter()
            .find(|j| j.key == key)
            .ok_or_else(|| SnapshotError::UnknownJob {
                job: key.to_string(),
                known: self
                    .jobs
                    .iter()
                    .map(|j| j.key.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Jobs none of whose replicas has a node: what `allocate` is for.
    pub fn unplaced_jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs
            .iter()
            .filter(|j| j.current.iter().all(Option::is_none))
    }

    /// Preemptible jobs: what `optimize` re-plans.
    pub fn preemptible_jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs.iter().filter(|j| j.preemptible)
    }

    /// The nodes with the requests of `jobs`' current replicas given back to `free` (capped at
    /// `allocatable`): the capacity a policy may hand those jobs.
    pub fn nodes_without(&self, jobs: &[&str]) -> Vec<Node> {
        let mut nodes = self.nodes.clone();
        for job in self.jobs.iter().filter(|j| jobs.contains(&j.key.as_str())) {
            for (task, at) in job.replicas().zip(&job.current) {
                if let Some(node) = at.and_then(|i| nodes.get_mut(i as usize)) {
                    give_back(&mut node.free, &node.allocatable, &task.requests);
                }
            }
        }
        nodes
    }
}

/// `free += request`, capped at `cap`.
fn give_back(free: &mut Resources, cap: &Resources, request: &Resources) {
    free.cpu_millis = free
        .cpu_millis
        .saturating_add(request.cpu_millis)
        .min(cap.cpu_millis);
    free.memory_bytes = free
        .memory_bytes
        .saturating_add(request.memory_bytes)
        .min(cap.memory_bytes);
    free.gpus = free.gpus.saturating_add(request.gpus).min(cap.gpus);
    for (name, q) in &request.extended {
        let max = cap
            .extended
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, m)| *m);
        if let Some(slot) = free.extended.iter_mut().find(|(n, _)| n == name) {
            slot.1 = slot.1.saturating_add(*q).min(max);
        }
    }
}

/// Takes the requests of `job` placed on `placement` (node names, rank order) from the nodes'
/// free capacity, so the next placement in a replay sees them used.
pub fn take(nodes: &mut [Node], job: &Job, placement: &[String]) {
    for (task, name) in job.replicas().zip(placement) {
        if let Some(node) = nodes.iter_mut().find(|n| &n.name == name) {
            node.free.take(&task.requests);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::sample;

    fn example_path() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/snapshot.json")
    }

    /// `examples/snapshot.json` is `sample::snapshot()`; `DIORCH_WRITE_EXAMPLES=1` rewrites it.
    #[test]
    fn example_file_is_the_sample() {
        let text = sample::snapshot().to_json().unwrap();
        if std::env::var_os("DIORCH_WRITE_EXAMPLES").is_some() {
            std::fs::write(example_path(), &text).unwrap();
        }
        let on_disk = std::fs::read_to_string(example_path()).unwrap();
        assert_eq!(
            on_disk, text,
            "examples/snapshot.json is stale: rerun with DIORCH_WRITE_EXAMPLES=1"
        );
        assert_eq!(Snapshot::from_json(&on_disk).unwrap(), sample::snapshot());
    }

    #[test]
    fn sample_is_a_consistent_cluster() {
        let s = sample::snapshot();
        s.validate().unwrap();
        assert_eq!(s.nodes.len(), 8);
        assert_eq!(s.jobs.len(), 6);
        assert_eq!(s.unplaced_jobs().count(), 3);
        // Free capacity is what the placed jobs leave: giving every job back never exceeds
        // allocatable, and gives back exactly what the placed replicas request.
        let all: Vec<&str> = s.jobs.iter().map(|j| j.key.as_str()).collect();
        let empty = s.nodes_without(&all);
        let gpus = |nodes: &[Node]| nodes.iter().map(|n| n.free.gpus).sum::<u32>();
        let placed: u32 = s
            .jobs
            .iter()
            .flat_map(|j| j.replicas().zip(&j.current))
            .filter(|(_, at)| at.is_some())
            .map(|(t, _)| t.requests.gpus)
            .sum();
        assert!(placed > 0);
        assert_eq!(gpus(&empty), gpus(&s.nodes) + placed);
        for n in &empty {
            assert!(n.allocatable.fits(&n.free), "{}", n.name);
        }
    }

    #[test]
    fn model_json_is_camel_case_with_label_objects() {
        let s = sample::snapshot();
        let v: serde_json::Value = serde_json::from_str(&s.to_json().unwrap()).unwrap();
        assert_eq!(v["version"], 1);
        let node = &v["nodes"][0];
        assert_eq!(node["labels"]["topology.kubernetes.io/zone"], "zone-a");
        assert!(node["allocatable"]["cpuMillis"].is_u64(), "{node}");
        assert!(
            node["allocatable"]["extended"]["rdma/hca"].is_u64(),
            "{node}"
        );
        assert!(v["jobs"][0]["tasks"][0]["taskType"].is_string());
        assert!(v["previous"][0]["nodes"].is_array());
        let tainted = v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["taints"].is_array())
            .unwrap();
        assert_eq!(tainted["taints"][0]["effect"], "NoSchedule");
    }

    #[test]
    fn errors_are_specific() {
        let good = sample::snapshot().to_json().unwrap();
        let cases: Vec<(String, &str)> = vec![
            (
                "{\n  \"version\": 1,\n  \"nodes\": [,]\n}".into(),
                "line 3 column",
            ),
            ("[]".into(), "a snapshot is a JSON object"),
            ("{\"nodes\": []}".into(), "no \"version\" field"),
            (
                good.replacen("\"version\": 1", "\"version\": 2", 1),
                "version 2 is not supported",
            ),
            (
                good.replacen("\"cpuMillis\"", "\"cpu\"", 1),
                "unknown field `cpu`",
            ),
            (
                good.replacen("\"NoSchedule\"", "\"Sometimes\"", 1),
                "unknown variant `Sometimes`",
            ),
        ];
        for (text, needle) in cases {
            let err = Snapshot::from_json(&text).unwrap_err();
            assert!(err.to_string().contains(needle), "{needle}: {err}");
        }
        let err = Snapshot::from_json("{\n\"version\": 1,\n\"nodes\": [,]}").unwrap_err();
        assert!(
            matches!(
                err,
                SnapshotError::Parse {
                    line: 3,
                    column: 11,
                    ..
                }
            ),
            "{err:?}"
        );

        let mut s = sample::snapshot();
        s.nodes[1].name = s.nodes[0].name.clone();
        assert!(
            s.validate()
                .unwrap_err()
                .to_string()
                .contains("appears twice")
        );
        let mut s = sample::snapshot();
        let placed = s.jobs.iter_mut().find(|j| !j.current.is_empty()).unwrap();
        placed.current[0] = Some(99);
        assert!(
            s.validate()
                .unwrap_err()
                .to_string()
                .contains("node index 99")
        );
        let mut s = sample::snapshot();
        s.previous[0].nodes[0] = "gone".into();
        assert!(s.validate().unwrap_err().to_string().contains("\"gone\""));
        let s = sample::snapshot();
        let err = s.job("default/nope").unwrap_err().to_string();
        assert!(
            err.contains("default/nope") && err.contains(&s.jobs[0].key),
            "{err}"
        );
    }

    #[test]
    fn take_and_give_back_are_inverse() {
        let s = sample::snapshot();
        let job = s.jobs.iter().find(|j| !j.current.is_empty()).unwrap();
        let placement: Vec<String> = job
            .current
            .iter()
            .map(|i| s.nodes[i.unwrap() as usize].name.clone())
            .collect();
        let mut nodes = s.nodes_without(&[job.key.as_str()]);
        assert_ne!(nodes, s.nodes);
        take(&mut nodes, job, &placement);
        assert_eq!(nodes, s.nodes);
    }
}
