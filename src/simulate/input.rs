//! The simulator's inputs: a cluster (YAML, or a `diorch plugin snapshot` file) and a trace of
//! jobs and node events (YAML). Every number that sizes the run's memory or time is bounded
//! here, with an error naming the entry, before anything is simulated.
//!
//! Owns: the file formats, their bounds, and their conversion into the Kubernetes objects the
//! operator's own code reads (Nodes, DIJobs). Must not touch: the simulation itself.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::Node;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::plugin::snapshot::Snapshot;
use diorch_core::api::DIJob;
use diorch_core::resources::{GPU, parse_quantity};
use diorch_core::validate;

/// Most nodes a cluster file may describe.
pub const MAX_NODES: usize = 100_000;
/// Most jobs a trace may hold.
pub const MAX_JOBS: usize = 1_000_000;
/// Most node events a trace may hold.
pub const MAX_NODE_EVENTS: usize = 1_000_000;
/// Latest virtual time anything may happen at, and longest a job may run: one year, in seconds.
pub const MAX_SECONDS: f64 = 365.0 * 24.0 * 3600.0;
/// Largest input file read.
pub const MAX_FILE_BYTES: u64 = 256 * 1024 * 1024;
/// Most throughput points per job.
pub const MAX_PROFILE_POINTS: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{path}: {message}")]
    Read { path: String, message: String },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("{path}: {what}: {message}")]
    Invalid {
        path: String,
        what: String,
        message: String,
    },
}

/// A quantity written as a number (`4`, `0.5`) or a Kubernetes quantity string (`500m`, `16Gi`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Qty {
    Number(f64),
    Text(String),
}

impl Qty {
    fn text(&self) -> String {
        match self {
            Qty::Number(n) => format!("{n}"),
            Qty::Text(t) => t.clone(),
        }
    }

    /// The quantity's canonical text, or why it is not one (negative, unparsable).
    fn checked(&self) -> Result<String, String> {
        let text = self.text();
        match parse_quantity(&text) {
            Some(milli) if milli >= 0 => Ok(text),
            Some(_) => Err(format!("{text:?} is negative")),
            None => Err(format!("{text:?} is not a quantity")),
        }
    }
}

/// Resource amounts by Kubernetes resource name; `gpus` is short for `nvidia.com/gpu`.
pub type Amounts = BTreeMap<String, Qty>;

fn resource_list(amounts: &Amounts) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for (name, q) in amounts {
        let name = if name == "gpus" { GPU } else { name.as_str() };
        let text = q.checked().map_err(|e| format!("{name}: {e}"))?;
        out.insert(name.to_string(), text);
    }
    Ok(out)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaintSpec {
    pub key: String,
    #[serde(default)]
    pub value: String,
    pub effect: String,
}

/// A node, or `count` alike nodes named `<name>-0` … `<name>-<count-1>`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeSpec {
    pub name: String,
    #[serde(default)]
    pub count: Option<usize>,
    pub capacity: Amounts,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub taints: Vec<TaintSpec>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ClusterFile {
    nodes: Vec<NodeSpec>,
}

/// The simulated cluster: its nodes as the API server would hold them, sorted by name.
#[derive(Debug, Clone)]
pub struct Cluster {
    pub nodes: Vec<Node>,
}

impl Cluster {
    /// Reads a cluster YAML file, or a snapshot JSON (`"version"` at its top) whose nodes are
    /// taken with their allocatable capacity (its jobs are not: the trace says what runs).
    pub fn load(path: &Path) -> Result<Cluster, InputError> {
        let text = read(path)?;
        let shown = path.display().to_string();
        if text.trim_start().starts_with('{') && text.contains("\"version\"") {
            let snapshot = Snapshot::from_json(&text).map_err(|e| InputError::Parse {
                path: shown.clone(),
                message: e.to_string(),
            })?;
            return Cluster::from_snapshot(&snapshot).map_err(|(what, message)| {
                InputError::Invalid {
                    path: shown,
                    what,
                    message,
                }
            });
        }
        Cluster::from_yaml(&text).map_err(|e| e.at(&shown))
    }

    pub fn from_yaml(text: &str) -> Result<Cluster, Located> {
        let file: ClusterFile = yaml(text)?;
        let mut nodes = Vec::new();
        for spec in &file.nodes {
            let what = format!("node {:?}", spec.name);
            let names: Vec<String> = match spec.count {
                None => vec![spec.name.clone()],
                Some(n) if n <= MAX_NODES => (0..n).map(|i| format!("{}-{i}", spec.name)).collect(),
                Some(n) => {
                    return Err(Located::invalid(
                        what,
                        format!("count {n} is over {MAX_NODES}"),
                    ));
                }
            };
            if nodes.len() + names.len() > MAX_NODES {
                return Err(Located::invalid(
                    what,
                    format!("more than {MAX_NODES} nodes"),
                ));
            }
            let capacity =
                resource_list(&spec.capacity).map_err(|m| Located::invalid(what.clone(), m))?;
            for t in &spec.taints {
                if !matches!(
                    t.effect.as_str(),
                    "NoSchedule" | "PreferNoSchedule" | "NoExecute"
                ) {
                    return Err(Located::invalid(
                        what,
                        format!(
                            "taint effect {:?} is not NoSchedule, PreferNoSchedule or NoExecute",
                            t.effect
                        ),
                    ));
                }
            }
            for name in names {
                if !is_node_name(&name) {
                    return Err(Located::invalid(
                        what,
                        format!("{name:?} is not a valid node name"),
                    ));
                }
                let taints: Vec<Value> = spec
                    .taints
                    .iter()
                    .map(|t| json!({"key": t.key, "value": t.value, "effect": t.effect}))
                    .collect();
                let node: Node = serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": spec.labels, "resourceVersion": "1"},
                    "spec": {"taints": taints},
                    "status": {
                        "capacity": capacity,
                        "allocatable": capacity,
                        "conditions": [{"type": "Ready", "status": "True"}]
                    }
                }))
                .map_err(|e| Located::invalid(what.clone(), e.to_string()))?;
                nodes.push(node);
            }
        }
        finish_nodes(nodes)
    }

    fn from_snapshot(snapshot: &Snapshot) -> Result<Cluster, (String, String)> {
        if snapshot.nodes.len() > MAX_NODES {
            return Err(("nodes".into(), format!("more than {MAX_NODES}")));
        }
        let nodes = snapshot
            .nodes
            .iter()
            .map(|n| {
                let a = &n.allocatable;
                let mut capacity = BTreeMap::from([
                    ("cpu".to_string(), format!("{}m", a.cpu_millis)),
                    ("memory".to_string(), a.memory_bytes.to_string()),
                ]);
                if a.gpus > 0 {
                    capacity.insert(GPU.to_string(), a.gpus.to_string());
                }
                for (name, q) in &a.extended {
                    capacity.insert(name.clone(), q.to_string());
                }
                let labels: BTreeMap<&str, &str> = n
                    .labels
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                let taints: Vec<Value> = n
                    .taints
                    .iter()
                    .map(|t| json!({"key": t.key, "value": t.value, "effect": t.effect}))
                    .collect();
                let status = if n.ready { "True" } else { "False" };
                serde_json::from_value(json!({
                    "metadata": {"name": n.name, "labels": labels, "resourceVersion": "1"},
                    "spec": {"taints": taints},
                    "status": {
                        "capacity": capacity,
                        "allocatable": capacity,
                        "conditions": [{"type": "Ready", "status": status}]
                    }
                }))
                .map_err(|e| (format!("node {:?}", n.name), e.to_string()))
            })
            .collect::<Result<Vec<Node>, _>>()?;
        finish_nodes(nodes).map_err(|l| (l.what, l.message))
    }
}

fn finish_nodes(mut nodes: Vec<Node>) -> Result<Cluster, Located> {
    if nodes.is_empty() {
        return Err(Located::invalid(
            "nodes".into(),
            "the cluster has no nodes".into(),
        ));
    }
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for pair in nodes.windows(2) {
        if pair[0].metadata.name == pair[1].metadata.name {
            let name = pair[0].metadata.name.clone().unwrap_or_default();
            return Err(Located::invalid(
                format!("node {name:?}"),
                "named twice".into(),
            ));
        }
    }
    Ok(Cluster { nodes })
}

/// `text` parsed as YAML. The parser's own node and event budgets are raised to what a trace of
/// [`MAX_JOBS`] jobs needs (a job is about 30 nodes); the text itself is bounded by
/// [`MAX_FILE_BYTES`], and alias expansion keeps the parser's limits.
fn yaml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, Located> {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_nodes = 64 * MAX_JOBS;
    budget.max_events = 128 * MAX_JOBS;
    budget.max_total_scalar_bytes = usize::try_from(MAX_FILE_BYTES).unwrap_or(usize::MAX);
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    serde_saphyr::from_str_with_options(text, options).map_err(|e| Located::parse(&e))
}

/// An error in a text not yet tied to its file.
#[derive(Debug)]
pub struct Located {
    what: String,
    message: String,
    parse: bool,
}

impl Located {
    fn parse(e: &dyn std::fmt::Display) -> Located {
        Located {
            what: String::new(),
            message: e.to_string(),
            parse: true,
        }
    }

    fn invalid(what: String, message: String) -> Located {
        Located {
            what,
            message,
            parse: false,
        }
    }

    pub fn at(self, path: &str) -> InputError {
        if self.parse {
            InputError::Parse {
                path: path.to_string(),
                message: self.message,
            }
        } else {
            InputError::Invalid {
                path: path.to_string(),
                what: self.what,
                message: self.message,
            }
        }
    }
}

impl std::fmt::Display for Located {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.what.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.what, self.message)
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskSpec {
    /// Defaults to the type.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(rename = "type")]
    pub task_type: String,
    pub replicas: u32,
    #[serde(default)]
    pub min_replicas: Option<u32>,
    #[serde(default)]
    pub max_replicas: Option<u32>,
    /// Per replica.
    #[serde(default)]
    pub requests: Amounts,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Priority {
    #[default]
    Normal,
    High,
}

/// One job of a trace.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobSpec {
    pub name: String,
    /// Seconds from the start of the trace.
    pub arrival: f64,
    #[serde(default)]
    pub priority: Priority,
    /// Whether the allocator places (and may move and resize) it. Defaults to true; a job that
    /// is not preemptible is placed by the simulator's model of kube-scheduler.
    #[serde(default = "yes")]
    pub preemptible: bool,
    pub tasks: Vec<TaskSpec>,
    /// Seconds of running at its first size. With `throughput`, the work is this many seconds
    /// at the first size's throughput.
    #[serde(default)]
    pub duration: Option<f64>,
    /// Units of work (env steps) to do; needs `throughput`.
    #[serde(default)]
    pub work: Option<f64>,
    /// Work per second (all collectors together) by collector count; between two counts the
    /// rate is interpolated linearly, beyond the ends it stays at the nearest end's.
    #[serde(default)]
    pub throughput: BTreeMap<u32, f64>,
}

fn yes() -> bool {
    true
}

/// A node going down (NotReady: its pods fail and its jobs are placed again) or coming back.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeEvent {
    pub at: f64,
    pub node: String,
    pub ready: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TraceFile {
    jobs: Vec<JobSpec>,
    #[serde(default)]
    node_events: Vec<NodeEvent>,
}

/// A checked trace: jobs in arrival order (ties by name), node events in time order.
#[derive(Debug, Clone)]
pub struct Trace {
    pub jobs: Vec<TraceJob>,
    pub node_events: Vec<NodeEvent>,
}

/// A trace job as the simulator runs it.
#[derive(Debug, Clone)]
pub struct TraceJob {
    pub spec: JobSpec,
    pub arrival_ms: u64,
    /// Work to do, in the units of `rate`.
    pub work: f64,
    /// Index of the task of type `collector`, when the job has exactly one.
    pub collector: Option<usize>,
    /// The DIJob the job is submitted as (no status, no creation time yet).
    pub dijob: DIJob,
}

/// The namespace simulated jobs live in.
pub const NAMESPACE: &str = "sim";

impl TraceJob {
    /// Work per second at `collectors` collectors (1 per second without a profile).
    pub fn rate(&self, collectors: u32) -> f64 {
        rate_at(&self.spec.throughput, collectors)
    }
}

fn rate_at(profile: &BTreeMap<u32, f64>, count: u32) -> f64 {
    let (Some((&lo_n, &lo_t)), Some((&hi_n, &hi_t))) = (
        profile.range(..=count).next_back(),
        profile.range(count..).next(),
    ) else {
        // Beyond an end: that end's rate; no profile at all: one unit per second.
        return profile
            .range(..=count)
            .next_back()
            .or_else(|| profile.range(count..).next())
            .map_or(1.0, |(_, t)| *t);
    };
    if hi_n == lo_n {
        return lo_t;
    }
    let share = f64::from(count - lo_n) / f64::from(hi_n - lo_n);
    lo_t + (hi_t - lo_t) * share
}

impl Trace {
    /// A YAML trace, or a CSV one when the file name ends in `.csv`.
    pub fn load(path: &Path) -> Result<Trace, InputError> {
        let text = read(path)?;
        let csv = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
        let trace = if csv {
            Trace::from_csv(&text)
        } else {
            Trace::from_yaml(&text)
        };
        trace.map_err(|e| e.at(&path.display().to_string()))
    }

    /// A CSV trace: a header row naming [`CSV_COLUMNS`], then one row per task; a job's rows
    /// are consecutive, and its job-level cells are read from its first row (later rows may
    /// leave them empty). `throughput` is `count:rate` pairs separated by `;`. Node events
    /// need the YAML form. Fields are plain (no quoting): no cell of this format needs a comma.
    pub fn from_csv(text: &str) -> Result<Trace, Located> {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'));
        let Some((_, header)) = lines.next() else {
            return Err(Located::invalid(
                "header".into(),
                "the CSV trace is empty".into(),
            ));
        };
        let columns: Vec<&str> = header.split(',').map(str::trim).collect();
        for c in &columns {
            if !CSV_COLUMNS.contains(c) {
                return Err(Located::invalid(
                    "header".into(),
                    format!(
                        "unknown column {c:?} (the columns are {})",
                        CSV_COLUMNS.join(",")
                    ),
                ));
            }
        }
        for required in ["job", "arrival", "type", "replicas"] {
            if !columns.contains(&required) {
                return Err(Located::invalid(
                    "header".into(),
                    format!("no {required:?} column"),
                ));
            }
        }
        let mut jobs: Vec<JobSpec> = Vec::new();
        for (n, line) in lines {
            let what = format!("line {}", n + 1);
            if line.contains('"') {
                return Err(Located::invalid(
                    what,
                    "quoted fields are not supported".into(),
                ));
            }
            let cells: Vec<&str> = line.split(',').map(str::trim).collect();
            if cells.len() != columns.len() {
                return Err(Located::invalid(
                    what,
                    format!("{} cells for {} columns", cells.len(), columns.len()),
                ));
            }
            let cell = |name: &str| -> &str {
                columns
                    .iter()
                    .position(|c| *c == name)
                    .map_or("", |i| cells[i])
            };
            let number = |name: &str| -> Result<Option<f64>, Located> {
                match cell(name) {
                    "" => Ok(None),
                    v => v.parse::<f64>().map(Some).map_err(|_| {
                        Located::invalid(what.clone(), format!("{name}: {v:?} is not a number"))
                    }),
                }
            };
            let count = |name: &str| -> Result<Option<u32>, Located> {
                match cell(name) {
                    "" => Ok(None),
                    v => v.parse::<u32>().map(Some).map_err(|_| {
                        Located::invalid(what.clone(), format!("{name}: {v:?} is not a count"))
                    }),
                }
            };
            let mut requests = Amounts::new();
            for (column, resource) in [("cpu", "cpu"), ("memory", "memory"), ("gpus", "gpus")] {
                if !cell(column).is_empty() {
                    requests.insert(resource.to_string(), Qty::Text(cell(column).to_string()));
                }
            }
            let task = TaskSpec {
                name: Some(cell("task"))
                    .filter(|t| !t.is_empty())
                    .map(String::from),
                task_type: cell("type").to_string(),
                replicas: count("replicas")?.unwrap_or(0),
                min_replicas: count("min_replicas")?,
                max_replicas: count("max_replicas")?,
                requests,
            };
            let name = cell("job");
            if let Some(job) = jobs.last_mut().filter(|j| j.name == name) {
                job.tasks.push(task);
                continue;
            }
            if jobs.len() >= MAX_JOBS {
                return Err(Located::invalid(what, format!("more than {MAX_JOBS} jobs")));
            }
            let mut throughput = BTreeMap::new();
            for pair in cell("throughput").split(';').filter(|p| !p.is_empty()) {
                let parsed = pair.split_once(':').and_then(|(c, r)| {
                    Some((c.trim().parse::<u32>().ok()?, r.trim().parse::<f64>().ok()?))
                });
                let Some((c, r)) = parsed else {
                    return Err(Located::invalid(
                        what,
                        format!("throughput: {pair:?} is not count:rate"),
                    ));
                };
                throughput.insert(c, r);
            }
            let priority = match cell("priority") {
                "" | "normal" => Priority::Normal,
                "high" => Priority::High,
                other => {
                    return Err(Located::invalid(
                        what,
                        format!("priority {other:?} is not normal or high"),
                    ));
                }
            };
            let preemptible = match cell("preemptible") {
                "" | "true" => true,
                "false" => false,
                other => {
                    return Err(Located::invalid(
                        what,
                        format!("preemptible {other:?} is not true or false"),
                    ));
                }
            };
            jobs.push(JobSpec {
                name: name.to_string(),
                arrival: number("arrival")?.unwrap_or(f64::NAN),
                priority,
                preemptible,
                tasks: vec![task],
                duration: number("duration")?,
                work: number("work")?,
                throughput,
            });
        }
        Trace::from_specs(jobs, Vec::new())
    }

    pub fn from_yaml(text: &str) -> Result<Trace, Located> {
        let file: TraceFile = yaml(text)?;
        if file.jobs.len() > MAX_JOBS {
            return Err(Located::invalid(
                "jobs".into(),
                format!("more than {MAX_JOBS}"),
            ));
        }
        if file.node_events.len() > MAX_NODE_EVENTS {
            return Err(Located::invalid(
                "nodeEvents".into(),
                format!("more than {MAX_NODE_EVENTS}"),
            ));
        }
        Trace::from_specs(file.jobs, file.node_events)
    }

    fn from_specs(jobs: Vec<JobSpec>, node_events: Vec<NodeEvent>) -> Result<Trace, Located> {
        let mut jobs = jobs
            .into_iter()
            .map(trace_job)
            .collect::<Result<Vec<_>, _>>()?;
        jobs.sort_by(|a, b| {
            a.arrival_ms
                .cmp(&b.arrival_ms)
                .then(a.spec.name.cmp(&b.spec.name))
        });
        for pair in jobs.windows(2) {
            if pair[0].spec.name == pair[1].spec.name {
                return Err(Located::invalid(
                    format!("job {:?}", pair[0].spec.name),
                    "named twice".into(),
                ));
            }
        }
        let mut node_events = node_events;
        for e in &node_events {
            seconds(e.at).map_err(|m| {
                Located::invalid(format!("node event for {:?}", e.node), format!("at: {m}"))
            })?;
        }
        // Stable: events at the same time keep the file's order.
        node_events.sort_by(|a, b| a.at.total_cmp(&b.at));
        Ok(Trace { jobs, node_events })
    }
}

/// The columns of a CSV trace (see [`Trace::from_csv`]).
pub const CSV_COLUMNS: [&str; 15] = [
    "job",
    "arrival",
    "priority",
    "preemptible",
    "duration",
    "work",
    "throughput",
    "task",
    "type",
    "replicas",
    "min_replicas",
    "max_replicas",
    "cpu",
    "memory",
    "gpus",
];

/// `s` as whole milliseconds, if it is a time the simulator can hold.
pub fn seconds(s: f64) -> Result<u64, String> {
    if !s.is_finite() || !(0.0..=MAX_SECONDS).contains(&s) {
        return Err(format!("{s} is not between 0 and {MAX_SECONDS} seconds"));
    }
    // In range, so the product fits.
    Ok((s * 1000.0).round() as u64)
}

fn trace_job(spec: JobSpec) -> Result<TraceJob, Located> {
    let what = format!("job {:?}", spec.name);
    let bad = |m: String| Located::invalid(what.clone(), m);
    let arrival_ms = seconds(spec.arrival).map_err(|m| bad(format!("arrival: {m}")))?;
    if spec.throughput.len() > MAX_PROFILE_POINTS {
        return Err(bad(format!(
            "more than {MAX_PROFILE_POINTS} throughput points"
        )));
    }
    for (count, t) in &spec.throughput {
        if *count == 0 || !t.is_finite() || *t <= 0.0 {
            return Err(bad(format!(
                "throughput {count}: {t}: counts must be at least 1 and rates finite and above 0"
            )));
        }
    }
    let collectors: Vec<usize> = spec
        .tasks
        .iter()
        .enumerate()
        .filter(|(_, t)| t.task_type == "collector")
        .map(|(i, _)| i)
        .collect();
    let collector = (collectors.len() == 1).then(|| collectors[0]);
    let first = collector.map_or(0, |i| spec.tasks[i].replicas);
    let work = match (spec.duration, spec.work) {
        (Some(_), Some(_)) => return Err(bad("give duration or work, not both".into())),
        (None, None) => return Err(bad("give duration or work".into())),
        (Some(d), None) => {
            if !(d.is_finite() && d > 0.0 && d <= MAX_SECONDS) {
                return Err(bad(format!(
                    "duration {d} is not above 0 and at most a year"
                )));
            }
            let work = d * rate_at(&spec.throughput, first);
            let slowest = spec
                .throughput
                .values()
                .copied()
                .fold(f64::INFINITY, f64::min);
            let longest = if spec.throughput.is_empty() {
                d
            } else {
                work / slowest
            };
            if longest > MAX_SECONDS {
                return Err(bad(
                    "the job takes more than a year at the profile's slowest rate".into(),
                ));
            }
            work
        }
        (None, Some(w)) => {
            if spec.throughput.is_empty() {
                return Err(bad("work needs a throughput profile".into()));
            }
            if !(w.is_finite() && w > 0.0) {
                return Err(bad(format!("work {w} is not a number above 0")));
            }
            // The job must end within a year at any size a policy may give it (the slowest
            // rate of its profile), so no resize can keep the run going forever.
            let slowest = spec
                .throughput
                .values()
                .copied()
                .fold(f64::INFINITY, f64::min);
            if w / slowest > MAX_SECONDS {
                return Err(bad(
                    "work takes more than a year at the profile's slowest rate".into(),
                ));
            }
            w
        }
    };
    let dijob = dijob(&spec).map_err(&bad)?;
    Ok(TraceJob {
        arrival_ms,
        work,
        collector,
        dijob,
        spec,
    })
}

/// The DIJob a trace job is submitted as, checked by the operator's own validation.
fn dijob(spec: &JobSpec) -> Result<DIJob, String> {
    let mut tasks = Vec::new();
    for t in &spec.tasks {
        let requests = resource_list(&t.requests)?;
        // GPUs are requested as limits too, as the device plugin requires.
        let limits: BTreeMap<&String, &String> =
            requests.iter().filter(|(k, _)| k.as_str() == GPU).collect();
        let mut task = json!({
            "name": t.name.clone().unwrap_or_else(|| t.task_type.clone()),
            "type": t.task_type,
            "replicas": t.replicas,
            "template": {"spec": {"containers": [{
                "name": "di-container",
                "image": "diorch-simulated",
                "resources": {"requests": requests, "limits": limits}
            }]}}
        });
        if let Some(m) = t.min_replicas {
            task["minReplicas"] = json!(m);
        }
        if let Some(m) = t.max_replicas {
            task["maxReplicas"] = json!(m);
        }
        tasks.push(task);
    }
    let priority = match spec.priority {
        Priority::Normal => "normal",
        Priority::High => "high",
    };
    let job: DIJob = serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1",
        "kind": "DIJob",
        "metadata": {"name": spec.name, "namespace": NAMESPACE, "uid": format!("sim-{}", spec.name)},
        "spec": {"priority": priority, "preemptible": spec.preemptible, "tasks": tasks}
    }))
    .map_err(|e| e.to_string())?;
    validate::validate(&job).map_err(|e| e.to_string())?;
    Ok(job)
}

/// A DNS subdomain, as Node names are.
fn is_node_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|part| {
            !part.is_empty()
                && !part.starts_with('-')
                && !part.ends_with('-')
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

fn read(path: &Path) -> Result<String, InputError> {
    let shown = path.display().to_string();
    let meta = std::fs::metadata(path).map_err(|e| InputError::Read {
        path: shown.clone(),
        message: e.to_string(),
    })?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(InputError::Read {
            path: shown,
            message: format!("{} bytes, over the {MAX_FILE_BYTES}-byte limit", meta.len()),
        });
    }
    std::fs::read_to_string(path).map_err(|e| InputError::Read {
        path: shown,
        message: e.to_string(),
    })
}
