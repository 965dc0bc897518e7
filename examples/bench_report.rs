//! Turns the CSV rows the benches append (env `BENCH_CSV`) into `performance.md` and
//! `ratio.svg`: the goals and what was measured against them, the controller timings, and a
//! chart of the operator/direct time ratio against the number of jobs.
//!
//! `cargo run --release --locked --example bench_report -- <csv> <out-dir>`; `scripts/bench.sh`
//! runs every bench and then this, into docs/. Row kinds (first field; numbers plain decimals):
//!
//! ```text
//! controller-time,<server>,<n>,<direct_exist_ms>,<operator_exist_ms>,<direct_running_ms>,<operator_running_ms>,<operator_cpu_s_per_1000_jobs>
//! controller-floor,<server>,<n>,<floor_exist_ms>,<floor_running_ms>
//! controller-writes,<server>,<resource>,<verb>,<per_job_create_to_running>,<per_job_running_to_succeeded>
//! memory,<server>,<jobs>,<rss_mib>,<kib_per_extra_job>
//! placement,<server>,<n>,<round>,<wasm_over_native_ratio>
//! replica-api,<connections>,<req_per_s>,<p50_ms>,<p99_ms>
//! plugin-calls,<name>,<microseconds>
//! hot-swap,<name>,<milliseconds>
//! heap-owner,<owner>,<mib>      (peak heap by owner, from `bench_report heap`)
//! meta,<key>,<value>            (the value is the rest of the line, commas included;
//!                                meta,command,<bench>,<command line> names a bench's command)
//! ```
//!
//! Unknown kinds are ignored with a warning, malformed lines reported and skipped (on stderr).
//!
//! `bench_report heap <stacks> [<csv>]` sorts a heaptrack peak flamegraph (`heaptrack_print
//! -F <stacks> --flamegraph-cost-type peak`) into the operator's owners of memory, prints them
//! and appends them to `<csv>` as `heap-owner` rows (`scripts/heap-owners.sh`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a measurement program: a panic is its report

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

/// The N the goals are stated at.
const GOAL_N: u64 = 1000;
/// Operator/direct time ratio goal (pods exist, pods Running).
const RATIO_GOAL: f64 = 1.3;
const RSS_GOAL_MIB: f64 = 200.0;
const KIB_PER_JOB_GOAL: f64 = 20.0;
const P99_GOAL_MS: f64 = 2.0;
const RPS_GOAL: f64 = 20_000.0;
const PLACEMENT_GOAL: f64 = 1.05;
/// Wasm `allocate` on 100 nodes against the same policy natively on borrowed data.
const WASM_BY_REF_GOAL: f64 = 3.0;
/// A fresh Store, instantiation and a trivial call.
const FIXED_COST_GOAL_US: f64 = 20.0;
/// ConfigMap write to the first call on the new version.
const HOT_SWAP_GOAL_MS: f64 = 100.0;
/// Write requests per job a controller cannot go below (without Events).
const WRITES_FLOOR_TO_RUNNING: f64 = 8.0;
const WRITES_FLOOR_TO_SUCCEEDED: f64 = 2.0;
const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

#[derive(Debug, Clone, PartialEq)]
enum Row {
    ControllerTime {
        server: String,
        n: u64,
        direct_exist_ms: f64,
        operator_exist_ms: f64,
        direct_running_ms: f64,
        operator_running_ms: f64,
        cpu_s_per_1000_jobs: f64,
    },
    /// The same burst written by the bench itself, the least a compatible controller writes.
    ControllerFloor {
        server: String,
        n: u64,
        exist_ms: f64,
        running_ms: f64,
    },
    ControllerWrites {
        server: String,
        resource: String,
        verb: String,
        to_running: f64,
        to_succeeded: f64,
    },
    Memory {
        server: String,
        jobs: u64,
        rss_mib: f64,
        kib_per_extra_job: f64,
    },
    Placement {
        server: String,
        n: u64,
        round: u64,
        ratio: f64,
    },
    ReplicaApi {
        connections: u64,
        req_per_s: f64,
        p50_ms: f64,
        p99_ms: f64,
    },
    PluginCall {
        name: String,
        microseconds: f64,
    },
    HotSwap {
        name: String,
        milliseconds: f64,
    },
    HeapOwner {
        owner: String,
        mib: f64,
    },
    Meta {
        key: String,
        value: String,
    },
}

/// What one line of the CSV is.
#[derive(Debug, PartialEq)]
enum Line {
    Row(Row),
    /// Blank, or a `#` comment.
    Empty,
    /// A row kind this report does not know (its name).
    Unknown(String),
}

fn number(field: &str, what: &str) -> Result<f64, String> {
    match field.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(format!("{what}: not a number: {field:?}")),
    }
}

fn count(field: &str, what: &str) -> Result<u64, String> {
    field
        .trim()
        .parse::<u64>()
        .map_err(|_| format!("{what}: not a whole number: {field:?}"))
}

fn text(field: &str, what: &str) -> Result<String, String> {
    let t = field.trim();
    if t.is_empty() {
        Err(format!("{what}: empty"))
    } else {
        Ok(t.to_string())
    }
}

/// Splits `fields` (after the kind) into a free-form name (which may hold commas) and a number
/// in the last field.
fn name_and_number(fields: &[&str], what: &str) -> Result<(String, f64), String> {
    match fields.split_last() {
        Some((last, name)) if !name.is_empty() => {
            Ok((text(&name.join(","), "name")?, number(last, what)?))
        }
        _ => Err("expected <name>,<number>".to_string()),
    }
}

fn parse_line(line: &str) -> Result<Line, String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(Line::Empty);
    }
    let fields: Vec<&str> = line.split(',').collect();
    let (kind, rest) = match fields.split_first() {
        Some((kind, rest)) => (kind.trim(), rest),
        None => return Ok(Line::Empty),
    };
    let want = |n: usize, shape: &str| -> Result<(), String> {
        if rest.len() == n {
            Ok(())
        } else {
            Err(format!(
                "{kind}: expected {n} fields after the kind ({shape}), got {}",
                rest.len()
            ))
        }
    };
    let row = match kind {
        "controller-time" => {
            want(
                7,
                "server,n,direct_exist_ms,operator_exist_ms,direct_running_ms,operator_running_ms,cpu_s_per_1000_jobs",
            )?;
            Row::ControllerTime {
                server: text(rest[0], "server")?,
                n: count(rest[1], "n")?,
                direct_exist_ms: number(rest[2], "direct_exist_ms")?,
                operator_exist_ms: number(rest[3], "operator_exist_ms")?,
                direct_running_ms: number(rest[4], "direct_running_ms")?,
                operator_running_ms: number(rest[5], "operator_running_ms")?,
                cpu_s_per_1000_jobs: number(rest[6], "cpu_s_per_1000_jobs")?,
            }
        }
        "controller-floor" => {
            want(4, "server,n,floor_exist_ms,floor_running_ms")?;
            Row::ControllerFloor {
                server: text(rest[0], "server")?,
                n: count(rest[1], "n")?,
                exist_ms: number(rest[2], "floor_exist_ms")?,
                running_ms: number(rest[3], "floor_running_ms")?,
            }
        }
        "controller-writes" => {
            want(5, "server,resource,verb,to_running,to_succeeded")?;
            Row::ControllerWrites {
                server: text(rest[0], "server")?,
                resource: text(rest[1], "resource")?,
                verb: text(rest[2], "verb")?,
                to_running: number(rest[3], "to_running")?,
                to_succeeded: number(rest[4], "to_succeeded")?,
            }
        }
        "memory" => {
            want(4, "server,jobs,rss_mib,kib_per_extra_job")?;
            Row::Memory {
                server: text(rest[0], "server")?,
                jobs: count(rest[1], "jobs")?,
                rss_mib: number(rest[2], "rss_mib")?,
                kib_per_extra_job: number(rest[3], "kib_per_extra_job")?,
            }
        }
        "placement" => {
            want(4, "server,n,round,ratio")?;
            Row::Placement {
                server: text(rest[0], "server")?,
                n: count(rest[1], "n")?,
                round: count(rest[2], "round")?,
                ratio: number(rest[3], "ratio")?,
            }
        }
        "replica-api" => {
            want(4, "connections,req_per_s,p50_ms,p99_ms")?;
            Row::ReplicaApi {
                connections: count(rest[0], "connections")?,
                req_per_s: number(rest[1], "req_per_s")?,
                p50_ms: number(rest[2], "p50_ms")?,
                p99_ms: number(rest[3], "p99_ms")?,
            }
        }
        "plugin-calls" => {
            let (name, microseconds) = name_and_number(rest, "microseconds")?;
            Row::PluginCall { name, microseconds }
        }
        "hot-swap" => {
            let (name, milliseconds) = name_and_number(rest, "milliseconds")?;
            Row::HotSwap { name, milliseconds }
        }
        "heap-owner" => {
            let (owner, mib) = name_and_number(rest, "mib")?;
            Row::HeapOwner { owner, mib }
        }
        "meta" => match rest.split_first() {
            Some((key, value)) if !value.is_empty() => Row::Meta {
                key: text(key, "key")?,
                value: value.join(",").trim().to_string(),
            },
            _ => return Err("meta: expected meta,<key>,<value>".to_string()),
        },
        other => return Ok(Line::Unknown(other.to_string())),
    };
    Ok(Line::Row(row))
}

/// The rows of `csv`, and a warning for each line skipped.
fn parse(csv: &str) -> (Vec<Row>, Vec<String>) {
    let mut rows = Vec::new();
    let mut warnings = Vec::new();
    for (i, line) in csv.lines().enumerate() {
        match parse_line(line) {
            Ok(Line::Row(row)) => rows.push(row),
            Ok(Line::Empty) => {}
            Ok(Line::Unknown(kind)) => warnings.push(format!(
                "line {}: unknown row kind {kind:?}, ignored",
                i + 1
            )),
            Err(e) => warnings.push(format!("line {}: skipped, {e}: {line:?}", i + 1)),
        }
    }
    (rows, warnings)
}

/// The servers in the order they first appear.
fn servers(rows: &[Row]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for row in rows {
        let server = match row {
            Row::ControllerTime { server, .. }
            | Row::ControllerWrites { server, .. }
            | Row::Memory { server, .. }
            | Row::Placement { server, .. } => server,
            _ => continue,
        };
        if !out.contains(server) {
            out.push(server.clone());
        }
    }
    out
}

fn meta<'a>(rows: &'a [Row], want: &str) -> Option<&'a str> {
    rows.iter().rev().find_map(|row| match row {
        Row::Meta { key, value } if key == want => Some(value.as_str()),
        _ => None,
    })
}

/// The command of the first of `kinds` a `meta,command,<kind>,<command>` row names.
fn command(rows: &[Row], kinds: &[&str]) -> Option<String> {
    let commands: BTreeMap<&str, &str> = rows
        .iter()
        .filter_map(|row| match row {
            Row::Meta { key, value } if key == "command" => value.split_once(','),
            _ => None,
        })
        .map(|(kind, cmd)| (kind.trim(), cmd.trim()))
        .collect();
    kinds
        .iter()
        .find_map(|k| commands.get(k))
        .map(|c| c.to_string())
}

/// A table cell: no line breaks, `|` escaped.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

fn code_cell(s: Option<String>) -> String {
    match s {
        Some(s) if !s.is_empty() => format!("`{}`", cell(&s.replace('`', "'"))),
        _ => "-".to_string(),
    }
}

/// 29500.4 -> "29 500".
fn thousands(v: f64) -> String {
    let rounded = v.round();
    let digits = format!("{:.0}", rounded.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    if rounded < 0.0 {
        format!("-{out}")
    } else {
        out
    }
}

fn ratio(operator: f64, direct: f64) -> Option<f64> {
    let r = operator / direct;
    (direct > 0.0 && r.is_finite()).then_some(r)
}

/// One line of the goals table.
#[derive(Debug, Clone, PartialEq)]
struct Goal {
    what: String,
    goal: String,
    measured: String,
    /// None: nothing to meet (reported only).
    met: Option<bool>,
    command: Option<String>,
}

impl Goal {
    fn met_text(&self) -> &'static str {
        match self.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "-",
        }
    }
}

/// The floor's (pods exist, pods Running) ms of `server` at `n` (the last row wins).
fn floor_of(rows: &[Row], server: &str, n: u64) -> Option<(f64, f64)> {
    rows.iter().rev().find_map(|row| match row {
        Row::ControllerFloor {
            server: s,
            n: m,
            exist_ms,
            running_ms,
        } if s == server && *m == n => Some((*exist_ms, *running_ms)),
        _ => None,
    })
}

/// The controller-time row of `server` at N = 1000, else at its largest N (the last row of
/// that N wins).
fn controller_at_goal_n<'a>(rows: &'a [Row], server: &str) -> Option<(u64, &'a Row)> {
    let mine: Vec<(u64, &Row)> = rows
        .iter()
        .filter_map(|row| match row {
            Row::ControllerTime { server: s, n, .. } if s == server => Some((*n, row)),
            _ => None,
        })
        .collect();
    mine.iter()
        .rev()
        .find(|(n, _)| *n == GOAL_N)
        .or_else(|| {
            let max = mine.iter().map(|(n, _)| *n).max()?;
            mine.iter().rev().find(|(n, _)| *n == max)
        })
        .copied()
}

/// Per job: (write requests create→Running, Running→Succeeded, the same without Events).
fn write_sums(rows: &[Row], server: &str) -> Option<(f64, f64, f64, f64)> {
    let mut any = false;
    let (mut a, mut b, mut a_no_events, mut b_no_events) = (0.0, 0.0, 0.0, 0.0);
    for row in rows {
        if let Row::ControllerWrites {
            server: s,
            resource,
            verb,
            to_running,
            to_succeeded,
        } = row
            && s == server
        {
            any = true;
            if WRITE_VERBS.contains(&verb.as_str()) {
                a += to_running;
                b += to_succeeded;
                if !is_events(resource) {
                    a_no_events += to_running;
                    b_no_events += to_succeeded;
                }
            }
        }
    }
    any.then_some((a, b, a_no_events, b_no_events))
}

fn is_events(resource: &str) -> bool {
    resource == "events" || resource.starts_with("events.")
}

/// The least write requests per job of a resource and verb (None: no floor stated).
fn floor(resource: &str, verb: &str, to_succeeded: bool) -> Option<&'static str> {
    match (resource, verb, to_succeeded) {
        ("pods", "create", false) => Some("4"),
        ("services", "create", false) => Some("1"),
        ("dijobs/status", "update" | "patch", false) => Some("3"),
        ("dijobs/status", "update" | "patch", true) => Some("1"),
        ("services", "delete", true) => Some("1"),
        (r, "create", false) if is_events(r) => Some("client-go: 8"),
        (r, "create", true) if is_events(r) => Some("client-go: 2"),
        _ => None,
    }
}

fn writes_measured(total: f64, without_events: f64, floor: f64) -> String {
    let mut notes = Vec::new();
    if (total - without_events).abs() > 1e-9 {
        notes.push(format!("{without_events:.2} without Events"));
    }
    let over = without_events - floor;
    notes.push(if over.abs() < 0.005 {
        "at the floor".to_string()
    } else {
        format!("{over:+.2} against the floor")
    });
    format!("{total:.2} ({})", notes.join(", "))
}

/// The order of the goals table, by the start of `Goal::what` (a stable sort keeps the servers'
/// order within each).
const GOAL_ORDER: [&str; 13] = [
    "pods exist",
    "pods Running",
    "operator CPU",
    "write requests per job, create",
    "write requests per job, Running",
    "operator RSS",
    "operator memory",
    "replica API",
    "placement",
    "plugin call goal",
    "plugin hot swap goal",
    "plugin call",
    "plugin hot swap",
];

fn goals(rows: &[Row]) -> Vec<Goal> {
    let mut out = Vec::new();
    let servers = servers(rows);
    let controller_cmd = command(rows, &["controller-time", "controller"]);
    for server in &servers {
        if let Some((
            n,
            Row::ControllerTime {
                direct_exist_ms,
                operator_exist_ms,
                direct_running_ms,
                operator_running_ms,
                cpu_s_per_1000_jobs,
                ..
            },
        )) = controller_at_goal_n(rows, server)
        {
            let floor = floor_of(rows, server, n);
            for (measure, direct, operator, floor) in [
                (
                    "pods exist",
                    direct_exist_ms,
                    operator_exist_ms,
                    floor.map(|f| f.0),
                ),
                (
                    "pods Running",
                    direct_running_ms,
                    operator_running_ms,
                    floor.map(|f| f.1),
                ),
            ] {
                let r = ratio(*operator, *direct);
                out.push(Goal {
                    what: format!("{measure} time, operator/direct, N = {n}, {server}"),
                    goal: format!("≤ {RATIO_GOAL}x"),
                    measured: match r {
                        Some(r) => format!("{r:.2}x ({operator:.0} ms against {direct:.0} ms)"),
                        None => format!("- ({operator:.0} ms against {direct:.0} ms)"),
                    },
                    met: r.map(|r| r <= RATIO_GOAL),
                    command: controller_cmd.clone(),
                });
                if let Some(floor) = floor {
                    let direct_floor =
                        ratio(floor, *direct).map_or("-".into(), |r| format!("{r:.2}x"));
                    out.push(Goal {
                        what: format!("{measure} time, operator/floor, N = {n}, {server}"),
                        goal: "-".to_string(),
                        measured: match ratio(*operator, floor) {
                            Some(r) => format!(
                                "{r:.2}x ({operator:.0} ms against {floor:.0} ms; floor/direct {direct_floor})"
                            ),
                            None => format!("- ({operator:.0} ms against {floor:.0} ms)"),
                        },
                        met: None,
                        command: controller_cmd.clone(),
                    });
                }
            }
            out.push(Goal {
                what: format!("operator CPU per 1 000 jobs, N = {n}, {server}"),
                goal: "-".to_string(),
                measured: format!("{cpu_s_per_1000_jobs:.2} s"),
                met: None,
                command: controller_cmd.clone(),
            });
        }
        if let Some((a, b, a_no_events, b_no_events)) = write_sums(rows, server) {
            let cmd = command(rows, &["controller-writes", "controller"]);
            out.push(Goal {
                what: format!("write requests per job, create→Running, {server}"),
                goal: format!("floor {WRITES_FLOOR_TO_RUNNING:.0}"),
                measured: writes_measured(a, a_no_events, WRITES_FLOOR_TO_RUNNING),
                met: None,
                command: cmd.clone(),
            });
            out.push(Goal {
                what: format!("write requests per job, Running→Succeeded, {server}"),
                goal: format!("floor {WRITES_FLOOR_TO_SUCCEEDED:.0}"),
                measured: writes_measured(b, b_no_events, WRITES_FLOOR_TO_SUCCEEDED),
                met: None,
                command: cmd,
            });
        }
        // The largest run (the last row of that size).
        let memory = rows
            .iter()
            .filter_map(|row| match row {
                Row::Memory {
                    server: s,
                    jobs,
                    rss_mib,
                    kib_per_extra_job,
                } if s == server => Some((*jobs, *rss_mib, *kib_per_extra_job)),
                _ => None,
            })
            .fold(None, |best: Option<(u64, f64, f64)>, m| match best {
                Some(b) if b.0 > m.0 => Some(b),
                _ => Some(m),
            });
        if let Some((jobs, rss, kib)) = memory {
            let cmd = command(rows, &["memory", "controller"]);
            out.push(Goal {
                what: format!(
                    "operator RSS after {} DIJobs, {server}",
                    thousands(jobs as f64)
                ),
                goal: format!("< {RSS_GOAL_MIB:.0} MiB"),
                measured: format!("{rss:.1} MiB"),
                met: Some(rss < RSS_GOAL_MIB),
                command: cmd.clone(),
            });
            out.push(Goal {
                what: format!("operator memory per extra DIJob, {server}"),
                goal: format!("≤ {KIB_PER_JOB_GOAL:.0} KiB"),
                measured: format!("{kib:.1} KiB"),
                met: Some(kib <= KIB_PER_JOB_GOAL),
                command: cmd,
            });
        }
        let largest = rows
            .iter()
            .filter_map(|row| match row {
                Row::Placement { server: s, n, .. } if s == server => Some(*n),
                _ => None,
            })
            .max();
        if let Some(n) = largest {
            let ratios: Vec<(u64, f64)> = rows
                .iter()
                .filter_map(|row| match row {
                    Row::Placement {
                        server: s,
                        n: rn,
                        round,
                        ratio,
                    } if s == server && *rn == n => Some((*round, *ratio)),
                    _ => None,
                })
                .collect();
            let worst = ratios.iter().map(|(_, r)| *r).fold(f64::MIN, f64::max);
            out.push(Goal {
                what: format!(
                    "placement time, Wasm/native bin-pack, worst of {} rounds, N = {n}, {server}",
                    ratios.len()
                ),
                goal: format!("≤ {PLACEMENT_GOAL}"),
                measured: format!("{worst:.3}"),
                met: Some(worst <= PLACEMENT_GOAL),
                command: command(rows, &["placement"]),
            });
        }
    }
    // Replica API: the last row of each connection count.
    let mut replica: BTreeMap<u64, (f64, f64, f64)> = BTreeMap::new();
    for row in rows {
        if let Row::ReplicaApi {
            connections,
            req_per_s,
            p50_ms,
            p99_ms,
        } = row
        {
            replica.insert(*connections, (*req_per_s, *p50_ms, *p99_ms));
        }
    }
    let replica_cmd = command(rows, &["replica-api"]);
    for (connections, (rps, p50, p99)) in &replica {
        out.push(Goal {
            what: format!("replica API GET p99 latency, {connections} connections"),
            goal: format!("≤ {P99_GOAL_MS} ms"),
            measured: format!("{p99:.2} ms (p50 {p50:.2} ms)"),
            met: Some(*p99 <= P99_GOAL_MS),
            command: replica_cmd.clone(),
        });
        out.push(Goal {
            what: format!("replica API GET throughput, {connections} connections"),
            goal: format!("≥ {} req/s", thousands(RPS_GOAL)),
            measured: format!("{} req/s", thousands(*rps)),
            met: Some(*rps >= RPS_GOAL),
            command: replica_cmd.clone(),
        });
    }
    let call = |wanted: &str| {
        rows.iter().rev().find_map(|row| match row {
            Row::PluginCall { name, microseconds } if name == wanted => Some(*microseconds),
            _ => None,
        })
    };
    let calls_cmd = command(rows, &["plugin-calls", "plugin_calls"]);
    if let (Some(wasm), Some(native)) = (
        call("allocate/wasm-binpack/100"),
        call("allocate/native-by-ref/100"),
    ) {
        let ratio = wasm / native;
        out.push(Goal {
            what: "plugin call goal: Wasm allocate / native by reference, 100 nodes".to_string(),
            goal: format!("≤ {WASM_BY_REF_GOAL:.0}x"),
            measured: format!("{ratio:.1}x ({wasm:.1} µs against {native:.1} µs)"),
            met: Some(ratio <= WASM_BY_REF_GOAL),
            command: calls_cmd.clone(),
        });
    }
    if let Some(fixed) = call("fixed-cost/fresh-store-instantiate-trivial-call") {
        out.push(Goal {
            what: "plugin call goal: fixed cost (fresh store, instantiate, trivial call)"
                .to_string(),
            goal: format!("≤ {FIXED_COST_GOAL_US:.0} µs"),
            measured: format!("{fixed:.1} µs"),
            met: Some(fixed <= FIXED_COST_GOAL_US),
            command: calls_cmd.clone(),
        });
    }
    let first_upload = rows.iter().rev().find_map(|row| match row {
        Row::HotSwap { name, milliseconds } if name.starts_with("first upload (compile) max") => {
            Some(*milliseconds)
        }
        _ => None,
    });
    if let Some(ms) = first_upload {
        out.push(Goal {
            what: "plugin hot swap goal: ConfigMap write to the first call on the new version, slowest first upload"
                .to_string(),
            goal: format!("≤ {HOT_SWAP_GOAL_MS:.0} ms"),
            measured: format!("{ms:.1} ms"),
            met: Some(ms <= HOT_SWAP_GOAL_MS),
            command: command(rows, &["hot-swap", "hot_swap"]),
        });
    }
    for row in rows {
        match row {
            Row::PluginCall { name, microseconds } => out.push(Goal {
                what: format!("plugin call: {name}"),
                goal: "-".to_string(),
                measured: format!("{microseconds:.2} µs"),
                met: None,
                command: command(rows, &["plugin-calls", "plugin_calls"]),
            }),
            Row::HotSwap { name, milliseconds } => out.push(Goal {
                what: format!("plugin hot swap: {name}"),
                goal: "-".to_string(),
                measured: format!("{milliseconds:.2} ms"),
                met: None,
                command: command(rows, &["hot-swap", "hot_swap"]),
            }),
            _ => {}
        }
    }
    // Built server by server; shown measure by measure (each with a row per server).
    out.sort_by_key(|g| {
        GOAL_ORDER
            .iter()
            .position(|prefix| g.what.starts_with(prefix))
            .unwrap_or(GOAL_ORDER.len())
    });
    out
}

/// Why the operator's writes can exceed the floor, and what keeps them near it (the controller
/// code these name is in src/controller/executor.rs).
const WRITES_ABOVE_THE_FLOOR: &str = "\
### Writes above the floor, and why

- **Events** are not in the floor. A client-go controller's recorder would write 8 for a \
4-pod job to Running (JobPending, one SuccessfulCreate per pod and for the service, \
JobStarting, JobRunning) and 2 after (JobSucceeded, the service's SuccessfulDelete). diorch \
folds a reconcile pass's successful creates, and its successful deletes, into one Event each \
(`coalesce_successes`: the note lists DI-orchestrator's message for every object), so a job \
to Running costs 4 Events. A lone create or delete keeps DI-orchestrator's exact Event.
- **`dijobs/status`** above one write per phase: a write that changes only replica counts \
(`replicas`, `readyReplicas`, `taskStatus`) waits until 1 s after the job's last status write \
(`counts_wait`), so pods that are created, scheduled and started one by one fold into the \
phase writes; what remains above the floor is a count change that comes more than a second \
after the last write (a slow pod), and a write retried after a 409 conflict (the cache was \
behind the job's own last write). From Running to Succeeded it is the same: the first pod \
to finish changes the counts more than a second after the Running write, so they are \
written at once, and the others fold into the Succeeded write: 2 where the floor says 1. \
Holding the first count change back as well would save it, at the cost of `taskStatus` \
lagging by up to the interval on every change. Each status write is a JSON merge patch of \
the status fields that changed, guarded by the resourceVersion it was planned from (a 409 \
when the job changed since): the request carries no spec, and its answer is decoded with the \
spec left raw.
- **`services` create** above 1: only when a pass runs before the service's own watch event \
and after the 5 s in which a created service is taken as there (`service_expected`); the \
duplicate is answered 409 and ignored.
- Reads (`list`, `watch`) are the reflectors' (jobs, pods, services, nodes, plugin \
ConfigMaps) and are not per job.";

fn report(rows: &[Row]) -> String {
    let mut md = String::new();
    let w = &mut md;
    let _ = writeln!(w, "# diorch performance\n");
    let _ = writeln!(
        w,
        "Generated by `scripts/bench.sh` (with `examples/bench_report.rs`) from the rows the \
         benches wrote, kept beside this file as `performance.csv` (their output in \
         `performance.log`). Do not edit by hand: run `bash scripts/bench.sh` again.\n"
    );
    for (key, label) in [
        ("machine", "Machine"),
        ("commit", "Commit"),
        ("date", "Date"),
    ] {
        let _ = writeln!(w, "- {label}: {}", meta(rows, key).unwrap_or("-"));
    }
    // Other meta rows, once each (the last value), except the commands shown in the table.
    let mut others: BTreeMap<&str, &str> = BTreeMap::new();
    for row in rows {
        if let Row::Meta { key, value } = row
            && !matches!(key.as_str(), "machine" | "commit" | "date" | "command")
        {
            others.insert(key, value);
        }
    }
    for (key, value) in others {
        let _ = writeln!(w, "- {key}: {value}");
    }

    let _ = writeln!(w, "\n## Goals\n");
    let goals = goals(rows);
    if goals.is_empty() {
        let _ = writeln!(w, "No rows measured.");
    } else {
        let _ = writeln!(w, "| what | goal | measured | met? | command |");
        let _ = writeln!(w, "|---|---|---|---|---|");
        for g in &goals {
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} |",
                cell(&g.what),
                cell(&g.goal),
                cell(&g.measured),
                g.met_text(),
                code_cell(g.command.clone())
            );
        }
    }

    let servers = servers(rows);
    let any_writes = rows
        .iter()
        .any(|r| matches!(r, Row::ControllerWrites { .. }));
    if any_writes {
        let _ = writeln!(w, "\n## API requests per job\n");
        let _ = writeln!(
            w,
            "Requests the operator sent per DIJob (4 replicas), from create to all jobs Running \
             and from there to all Succeeded, against the least a controller can do (the floor; \
             Events: what a client-go controller's recorder sends)."
        );
        for server in &servers {
            let mine: Vec<&Row> = rows
                .iter()
                .filter(|r| matches!(r, Row::ControllerWrites { server: s, .. } if s == server))
                .collect();
            if mine.is_empty() {
                continue;
            }
            let _ = writeln!(w, "\n### {}\n", server);
            let _ = writeln!(
                w,
                "| resource | verb | create→Running | floor | Running→Succeeded | floor |"
            );
            let _ = writeln!(w, "|---|---|---:|---:|---:|---:|");
            for row in mine {
                if let Row::ControllerWrites {
                    resource,
                    verb,
                    to_running,
                    to_succeeded,
                    ..
                } = row
                {
                    let _ = writeln!(
                        w,
                        "| {} | {} | {to_running:.2} | {} | {to_succeeded:.2} | {} |",
                        cell(resource),
                        cell(verb),
                        floor(resource, verb, false).unwrap_or("-"),
                        floor(resource, verb, true).unwrap_or("-"),
                    );
                }
            }
            if let Some((a, b, _, _)) = write_sums(rows, server) {
                let _ = writeln!(
                    w,
                    "| all writes | | {a:.2} | {WRITES_FLOOR_TO_RUNNING:.0} + Events | {b:.2} | {WRITES_FLOOR_TO_SUCCEEDED:.0} + Events |"
                );
            }
        }
        let _ = writeln!(w, "\n{WRITES_ABOVE_THE_FLOOR}");
    }

    let owners: Vec<(&str, f64)> = rows
        .iter()
        .filter_map(|r| match r {
            Row::HeapOwner { owner, mib } => Some((owner.as_str(), *mib)),
            _ => None,
        })
        .collect();
    if !owners.is_empty() {
        let _ = writeln!(w, "\n## Heap owners\n");
        let _ = writeln!(
            w,
            "The operator's heap at its peak in the memory run, by owner: glibc malloc (feature \
             `system-allocator`) under heaptrack, `{}`.\n",
            command(rows, &["heap-owners"]).unwrap_or_else(|| "bash scripts/heap-owners.sh".into())
        );
        let _ = writeln!(w, "| owner | MiB at peak |\n|---|---:|");
        for (owner, mib) in owners {
            let _ = writeln!(w, "| {} | {mib:.1} |", cell(owner));
        }
    }

    let any_time = rows.iter().any(|r| matches!(r, Row::ControllerTime { .. }));
    if any_time {
        let _ = writeln!(w, "\n## Controller timings\n");
        let _ = writeln!(
            w,
            "Time from the first create to all pods existing and to all pods Running: N DIJobs \
             of 4 replicas through the operator, against the same pods created directly, and \
             against the floor: the bench itself writes the DIJobs, their pods and services and \
             the Pending and Starting status writes, the least a DI-orchestrator-compatible \
             controller writes before the pods exist (no watch, no cache, no Events, no Running \
             write: a lower bound). Ratios: operator/direct, and operator/floor in brackets.\n"
        );
        let _ = writeln!(
            w,
            "| server | N | pods exist: direct ms | floor ms | via operator ms | ratio | pods Running: direct ms | floor ms | via operator ms | ratio | operator CPU s per 1 000 jobs |"
        );
        let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for server in &servers {
            let mut mine: Vec<&Row> = rows
                .iter()
                .filter(|r| matches!(r, Row::ControllerTime { server: s, .. } if s == server))
                .collect();
            mine.sort_by_key(|r| match r {
                Row::ControllerTime { n, .. } => *n,
                _ => 0,
            });
            for row in mine {
                if let Row::ControllerTime {
                    n,
                    direct_exist_ms,
                    operator_exist_ms,
                    direct_running_ms,
                    operator_running_ms,
                    cpu_s_per_1000_jobs,
                    ..
                } = row
                {
                    let show = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:.2}"));
                    let floor = floor_of(rows, server, *n);
                    let ms = |f: Option<f64>| f.map_or("-".to_string(), |f| format!("{f:.1}"));
                    let over = |operator: f64, floor: Option<f64>| {
                        floor
                            .and_then(|f| ratio(operator, f))
                            .map_or(String::new(), |r| format!(" ({r:.2})"))
                    };
                    let _ = writeln!(
                        w,
                        "| {} | {n} | {direct_exist_ms:.1} | {} | {operator_exist_ms:.1} | {}{} | {direct_running_ms:.1} | {} | {operator_running_ms:.1} | {}{} | {cpu_s_per_1000_jobs:.2} |",
                        cell(server),
                        ms(floor.map(|f| f.0)),
                        show(ratio(*operator_exist_ms, *direct_exist_ms)),
                        over(*operator_exist_ms, floor.map(|f| f.0)),
                        ms(floor.map(|f| f.1)),
                        show(ratio(*operator_running_ms, *direct_running_ms)),
                        over(*operator_running_ms, floor.map(|f| f.1)),
                    );
                }
            }
        }
        let _ = writeln!(w, "\n![ratio against N](ratio.svg)");
    }
    md
}

/// One line of the chart: a label and its (N, ratio) points, by N.
#[derive(Debug, Clone, PartialEq)]
struct Series {
    label: String,
    points: Vec<(f64, f64)>,
}

fn series(rows: &[Row]) -> Vec<Series> {
    let mut out = Vec::new();
    for server in servers(rows) {
        for running in [false, true] {
            // The last row of each N wins.
            let mut points: BTreeMap<u64, f64> = BTreeMap::new();
            for row in rows {
                if let Row::ControllerTime {
                    server: s,
                    n,
                    direct_exist_ms,
                    operator_exist_ms,
                    direct_running_ms,
                    operator_running_ms,
                    ..
                } = row
                    && *s == server
                {
                    let r = if running {
                        ratio(*operator_running_ms, *direct_running_ms)
                    } else {
                        ratio(*operator_exist_ms, *direct_exist_ms)
                    };
                    if let Some(r) = r
                        && *n > 0
                    {
                        points.insert(*n, r);
                    }
                }
            }
            if !points.is_empty() {
                out.push(Series {
                    label: format!(
                        "{server}, {}",
                        if running {
                            "pods Running"
                        } else {
                            "pods exist"
                        }
                    ),
                    points: points.into_iter().map(|(n, r)| (n as f64, r)).collect(),
                });
            }
        }
    }
    out
}

fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// A round step (1, 2 or 5 × 10^k) that cuts `span` into about `parts`.
fn nice_step(span: f64, parts: f64) -> f64 {
    let raw = (span / parts).max(1e-9);
    let magnitude = 10f64.powf(raw.log10().floor());
    let f = raw / magnitude;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

/// A tick label without needless decimals.
fn tick_label(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        thousands(v)
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

const COLORS: [&str; 6] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf",
];

fn svg(series: &[Series]) -> String {
    let (width, height) = (640.0, 360.0);
    let (left, right, top, bottom) = (64.0, 420.0, 40.0, 300.0);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r#"<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15" font-weight="bold">{}</text>"#,
        width / 2.0,
        xml_escape("Time via the operator / time direct, against N (DIJobs of 4 replicas)")
    );

    let points: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .collect();
    let (mut x_min, mut x_max) = points
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), (x, _)| {
            (lo.min(*x), hi.max(*x))
        });
    if points.is_empty() {
        (x_min, x_max) = (100.0, 1000.0);
    }
    let log = x_min > 0.0 && x_max / x_min >= 10.0;
    if x_max <= x_min {
        // One N: a domain around it.
        (x_min, x_max) = (x_min / 2.0, x_max * 2.0);
    }
    let fx = |x: f64| -> f64 {
        let (a, b, v) = if log {
            (x_min.log10(), x_max.log10(), x.log10())
        } else {
            (x_min, x_max, x)
        };
        let pad = (b - a) * 0.05;
        left + (v - (a - pad)) / ((b + pad) - (a - pad)) * (right - left)
    };
    let y_lo_raw = points.iter().map(|(_, y)| *y).fold(1.0f64, f64::min);
    let y_hi_raw = points.iter().map(|(_, y)| *y).fold(RATIO_GOAL, f64::max);
    let y_step = nice_step(y_hi_raw - y_lo_raw, 6.0);
    let y_lo = (y_lo_raw / y_step).floor() * y_step;
    let mut y_hi = (y_hi_raw / y_step).ceil() * y_step;
    if y_hi <= y_lo {
        y_hi = y_lo + y_step;
    }
    let fy = |y: f64| bottom - (y - y_lo) / (y_hi - y_lo) * (bottom - top);

    // Axes, grid and ticks.
    let _ = writeln!(
        s,
        r##"<g stroke="#000" stroke-width="1"><line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}"/><line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}"/></g>"##
    );
    let mut y = y_lo;
    let mut guard = 0;
    while y <= y_hi + y_step * 1e-6 && guard < 50 {
        let py = fy(y);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" y1="{py:.1}" x2="{right}" y2="{py:.1}" stroke="#e5e5e5"/><line x1="{}" y1="{py:.1}" x2="{left}" y2="{py:.1}" stroke="#000"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            left - 5.0,
            left - 8.0,
            py + 4.0,
            xml_escape(&tick_label(y))
        );
        y += y_step;
        guard += 1;
    }
    let x_ticks: Vec<f64> = if log {
        let mut ticks = Vec::new();
        let mut decade = 10f64.powf(x_min.log10().floor());
        while decade <= x_max * 1.0001 && ticks.len() < 40 {
            for m in [1.0, 2.0, 5.0] {
                let t = decade * m;
                if t >= x_min * 0.9999 && t <= x_max * 1.0001 {
                    ticks.push(t);
                }
            }
            decade *= 10.0;
        }
        ticks
    } else {
        let step = nice_step(x_max - x_min, 6.0);
        let mut ticks = Vec::new();
        let mut t = (x_min / step).ceil() * step;
        while t <= x_max + step * 1e-6 && ticks.len() < 40 {
            ticks.push(t);
            t += step;
        }
        ticks
    };
    for t in x_ticks {
        let px = fx(t);
        let _ = writeln!(
            s,
            r##"<line x1="{px:.1}" y1="{bottom}" x2="{px:.1}" y2="{}" stroke="#000"/><text x="{px:.1}" y="{}" text-anchor="middle">{}</text>"##,
            bottom + 5.0,
            bottom + 18.0,
            xml_escape(&tick_label(t))
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        (left + right) / 2.0,
        bottom + 38.0,
        xml_escape(if log {
            "N, DIJobs created (log scale)"
        } else {
            "N, DIJobs created"
        })
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">{}</text>"#,
        (top + bottom) / 2.0,
        (top + bottom) / 2.0,
        xml_escape("operator / direct")
    );

    // The goal.
    let gy = fy(RATIO_GOAL);
    let _ = writeln!(
        s,
        r##"<line class="goal" x1="{left}" y1="{gy:.1}" x2="{right}" y2="{gy:.1}" stroke="#d62728" stroke-width="1.5" stroke-dasharray="6 4"/><text x="{}" y="{:.1}" text-anchor="end" fill="#d62728">{}</text>"##,
        right - 4.0,
        gy - 5.0,
        xml_escape(&format!("goal ≤ {RATIO_GOAL}"))
    );

    if series.is_empty() {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            (left + right) / 2.0,
            (top + bottom) / 2.0,
            xml_escape("no controller-time rows")
        );
    }
    // The lines, and a marker on each point (a line of one point is not drawn).
    for (i, line) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<String> = line
            .points
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", fx(*x), fy(*y)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"><title>{}</title></polyline>"#,
            pts.join(" "),
            xml_escape(&line.label)
        );
        for (x, y) in &line.points {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"><title>{}</title></circle>"#,
                fx(*x),
                fy(*y),
                xml_escape(&format!("{}: N = {x}, {y:.2}", line.label))
            );
        }
    }
    // The legend, right of the plot.
    let lx = right + 12.0;
    for (i, line) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let ly = top + 10.0 + i as f64 * 20.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{}" y="{}" font-size="11">{}</text>"#,
            lx + 20.0,
            lx + 26.0,
            ly + 4.0,
            xml_escape(&line.label)
        );
    }
    let ly = top + 10.0 + series.len() as f64 * 20.0;
    let _ = writeln!(
        s,
        r##"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="#d62728" stroke-width="1.5" stroke-dasharray="6 4"/><text x="{}" y="{}" font-size="11">{}</text>"##,
        lx + 20.0,
        lx + 26.0,
        ly + 4.0,
        xml_escape(&format!("goal ≤ {RATIO_GOAL}"))
    );
    s.push_str("</svg>\n");
    s
}

/// Who owns heap, by a substring of an allocation's call stack; the first match wins.
const HEAP_OWNERS: [(&str, &[&str]); 9] = [
    ("Event series cache", &["diorch::events::"]),
    (
        "allocator book (counted pods, held allocations)",
        &["allocator::book::"],
    ),
    (
        "allocator (node cache, re-plan, pod watch)",
        &["diorch::allocator::"],
    ),
    ("controller pod cache (objects)", &["CachedPod"]),
    ("DIJob cache (objects)", &["CachedJob"]),
    (
        "reflector stores (entries and keys)",
        &["reflector::store::", "reflector::object_ref"],
    ),
    (
        "plugins (compiled components, calls)",
        &["wasmtime", "cranelift", "diorch::plugin::"],
    ),
    ("replica API", &["diorch::server::"]),
    (
        "HTTP clients, TLS, watches",
        &["hyper", "rustls", "kube_client", "watcher"],
    ),
];

/// Peak bytes by owner from a heaptrack flamegraph (`frame;frame;... bytes` per line), largest
/// first, `other` for stacks no owner matches.
fn heap_owners(stacks: &str) -> Vec<(String, u64)> {
    let mut by: BTreeMap<&str, u64> = BTreeMap::new();
    for line in stacks.lines() {
        let Some((stack, bytes)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(bytes) = bytes.trim().parse::<u64>() else {
            continue;
        };
        let owner = HEAP_OWNERS
            .iter()
            .find(|(_, keys)| keys.iter().any(|k| stack.contains(k)))
            .map_or("other", |(owner, _)| owner);
        *by.entry(owner).or_default() += bytes;
    }
    let mut owners: Vec<(String, u64)> = by
        .into_iter()
        .filter(|(_, b)| *b > 0)
        .map(|(o, b)| (o.to_string(), b))
        .collect();
    owners.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    owners
}

fn heap_command(stacks: &std::path::Path, csv: Option<&std::path::Path>) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(stacks)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", stacks.display()))?;
    let owners = heap_owners(&text);
    let total: u64 = owners.iter().map(|(_, b)| b).sum();
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    println!("heap at its peak, by owner ({:.1} MiB in all):", mib(total));
    let mut rows = String::new();
    for (owner, bytes) in &owners {
        println!("  {:>8.1} MiB  {owner}", mib(*bytes));
        let _ = writeln!(rows, "heap-owner,{owner},{:.1}", mib(*bytes));
    }
    if let Some(csv) = csv {
        use std::io::Write as _;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(csv)
            .and_then(|mut f| f.write_all(rows.as_bytes()))
            .map_err(|e| anyhow::anyhow!("cannot append to {}: {e}", csv.display()))?;
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args_os().skip(1);
    if std::env::args_os().nth(1).is_some_and(|a| a == "heap") {
        let (Some(stacks), csv) = (args.nth(1), args.next()) else {
            anyhow::bail!("usage: bench_report heap <stacks> [<csv>]");
        };
        return heap_command(
            std::path::Path::new(&stacks),
            csv.as_deref().map(std::path::Path::new),
        );
    }
    let (Some(csv), Some(out), None) = (args.next(), args.next(), args.next()) else {
        anyhow::bail!("usage: bench_report <csv> <out-dir>");
    };
    let (csv, out) = (PathBuf::from(csv), PathBuf::from(out));
    let text = std::fs::read_to_string(&csv)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", csv.display()))?;
    let (rows, warnings) = parse(&text);
    for w in &warnings {
        eprintln!("warning: {}: {w}", csv.display());
    }
    std::fs::create_dir_all(&out)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", out.display()))?;
    let md = out.join("performance.md");
    let chart = out.join("ratio.svg");
    std::fs::write(&md, report(&rows))
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", md.display()))?;
    std::fs::write(&chart, svg(&series(&rows)))
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", chart.display()))?;
    println!(
        "wrote {} and {} from {} rows of {}",
        md.display(),
        chart.display(),
        rows.len(),
        csv.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = include_str!("bench_report_sample.csv");

    fn one(line: &str) -> Row {
        match parse_line(line) {
            Ok(Line::Row(row)) => row,
            other => panic!("{line:?}: {other:?}"),
        }
    }

    #[test]
    fn parses_every_row_kind() {
        assert_eq!(
            one("controller-time,real API server,1000,1.5,2,3,4.25,0.5"),
            Row::ControllerTime {
                server: "real API server".into(),
                n: 1000,
                direct_exist_ms: 1.5,
                operator_exist_ms: 2.0,
                direct_running_ms: 3.0,
                operator_running_ms: 4.25,
                cpu_s_per_1000_jobs: 0.5,
            }
        );
        assert_eq!(
            one("controller-floor,sandbox,1000,1200.5,2400"),
            Row::ControllerFloor {
                server: "sandbox".into(),
                n: 1000,
                exist_ms: 1200.5,
                running_ms: 2400.0,
            }
        );
        assert_eq!(
            one("controller-writes,sandbox,dijobs/status,patch,3.000,1.000"),
            Row::ControllerWrites {
                server: "sandbox".into(),
                resource: "dijobs/status".into(),
                verb: "patch".into(),
                to_running: 3.0,
                to_succeeded: 1.0,
            }
        );
        assert_eq!(
            one("memory,sandbox,5000,84.3,9.5"),
            Row::Memory {
                server: "sandbox".into(),
                jobs: 5000,
                rss_mib: 84.3,
                kib_per_extra_job: 9.5,
            }
        );
        assert_eq!(
            one("placement,sandbox,1000,2,1.0340"),
            Row::Placement {
                server: "sandbox".into(),
                n: 1000,
                round: 2,
                ratio: 1.034,
            }
        );
        assert_eq!(
            one("replica-api,16,29500,0.410,1.930"),
            Row::ReplicaApi {
                connections: 16,
                req_per_s: 29500.0,
                p50_ms: 0.41,
                p99_ms: 1.93,
            }
        );
        assert_eq!(
            one("plugin-calls,allocate/wasm, by value/100,48.2"),
            Row::PluginCall {
                name: "allocate/wasm, by value/100".into(),
                microseconds: 48.2,
            }
        );
        assert_eq!(
            one("hot-swap,first upload (compile) median,412.5"),
            Row::HotSwap {
                name: "first upload (compile) median".into(),
                milliseconds: 412.5,
            }
        );
        assert_eq!(
            one("meta,command,controller,SIZES=100,1000 cargo bench"),
            Row::Meta {
                key: "command".into(),
                value: "controller,SIZES=100,1000 cargo bench".into(),
            }
        );
    }

    #[test]
    fn the_sample_parses_without_warnings() {
        let (rows, warnings) = parse(SAMPLE);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(
            rows.len(),
            SAMPLE.lines().filter(|l| !l.trim().is_empty()).count()
        );
        assert_eq!(servers(&rows), ["sandbox", "real API server"]);
        assert_eq!(
            command(&rows, &["controller-time", "controller"]).as_deref(),
            Some("SIZES=100,1000 cargo bench --locked --bench controller_scale")
        );
        assert_eq!(
            meta(&rows, "machine"),
            Some("2 cores, 7 GiB, Intel(R) Xeon(R) CPU @ 2.20GHz")
        );
    }

    #[test]
    fn malformed_and_unknown_lines_are_skipped_with_a_warning() {
        let csv = format!(
            "{SAMPLE}\ncontroller-time,sandbox,100,abc,1,1,1,1\nmemory,sandbox,5000\n\
             replica-api,8,NaN,1,1\nplugin-calls,42\nmeta,lonely\nfrobnicate,1,2\n\n# comment\n"
        );
        let (rows, warnings) = parse(&csv);
        assert_eq!(rows.len(), parse(SAMPLE).0.len());
        assert_eq!(warnings.len(), 6, "{warnings:#?}");
        assert!(warnings[0].contains("direct_exist_ms"), "{}", warnings[0]);
        assert!(warnings[1].contains("expected 4 fields"), "{}", warnings[1]);
        assert!(
            warnings[5].contains("unknown row kind \"frobnicate\""),
            "{}",
            warnings[5]
        );
    }

    fn goal<'a>(goals: &'a [Goal], what: &str) -> &'a Goal {
        goals
            .iter()
            .find(|g| g.what == what)
            .unwrap_or_else(|| panic!("no goal {what:?} in {goals:#?}"))
    }

    #[test]
    fn goals_are_marked_met_or_not() {
        let (rows, _) = parse(SAMPLE);
        let goals = goals(&rows);
        // 1840.9 / 1610.4 = 1.14; 4340 / 3100 = 1.40.
        let g = goal(
            &goals,
            "pods exist time, operator/direct, N = 1000, sandbox",
        );
        assert_eq!(g.met, Some(true));
        assert!(g.measured.starts_with("1.14x"), "{}", g.measured);
        let g = goal(
            &goals,
            "pods exist time, operator/direct, N = 1000, real API server",
        );
        assert_eq!(g.met, Some(false));
        assert_eq!(g.met_text(), "**no**");
        assert_eq!(
            goal(
                &goals,
                "pods Running time, operator/direct, N = 1000, sandbox"
            )
            .met,
            Some(true)
        );
        // 1840.9 / 1700.0 = 1.08 over the floor, whose own ratio is 1700.0 / 1610.4 = 1.06.
        let g = goal(&goals, "pods exist time, operator/floor, N = 1000, sandbox");
        assert_eq!(g.met, None);
        assert_eq!(
            g.measured,
            "1.08x (1841 ms against 1700 ms; floor/direct 1.06x)"
        );
        assert!(
            !goals
                .iter()
                .any(|g| g.what == "pods exist time, operator/floor, N = 1000, real API server"),
            "no floor row, no floor goal"
        );
        let g = goal(&goals, "operator CPU per 1 000 jobs, N = 1000, sandbox");
        assert_eq!((g.met, g.measured.as_str()), (None, "2.45 s"));
        // Writes: 4 + 1 + 3 + 8 Events; 1 + 1 + 2 Events.
        let g = goal(&goals, "write requests per job, create→Running, sandbox");
        assert_eq!(g.measured, "16.00 (8.00 without Events, at the floor)");
        let g = goal(
            &goals,
            "write requests per job, Running→Succeeded, real API server",
        );
        assert_eq!(g.measured, "4.00 (2.00 without Events, at the floor)");
        let g = goal(
            &goals,
            "write requests per job, create→Running, real API server",
        );
        assert!(
            g.measured.contains("+0.50 against the floor"),
            "{}",
            g.measured
        );
        // Memory: the largest run counts.
        let g = goal(&goals, "operator RSS after 5 000 DIJobs, sandbox");
        assert_eq!((g.met, g.measured.as_str()), (Some(true), "84.3 MiB"));
        assert_eq!(
            goal(&goals, "operator RSS after 5 000 DIJobs, real API server").met,
            Some(false)
        );
        assert_eq!(
            goal(&goals, "operator memory per extra DIJob, sandbox").met,
            Some(true)
        );
        assert_eq!(
            goal(&goals, "operator memory per extra DIJob, real API server").met,
            Some(false)
        );
        // Replica API: p99 1.93 ms meets 2 ms, 2.64 does not; 24 100 req/s meets 20 000.
        assert_eq!(
            goal(&goals, "replica API GET p99 latency, 16 connections").met,
            Some(true)
        );
        assert_eq!(
            goal(&goals, "replica API GET p99 latency, 32 connections").met,
            Some(false)
        );
        let g = goal(&goals, "replica API GET throughput, 8 connections");
        assert_eq!((g.met, g.measured.as_str()), (Some(true), "24 100 req/s"));
        // Placement: the worst round.
        let g = goal(
            &goals,
            "placement time, Wasm/native bin-pack, worst of 2 rounds, N = 1000, sandbox",
        );
        assert_eq!((g.met, g.measured.as_str()), (Some(true), "1.034"));
        let g = goal(
            &goals,
            "placement time, Wasm/native bin-pack, worst of 2 rounds, N = 1000, real API server",
        );
        assert_eq!(g.met, Some(false));
        assert_eq!(
            goal(&goals, "plugin call: allocate/wasm-binpack/100").met,
            None
        );
        // 48.2 µs against 4.1 µs by reference: 11.8x, over 3x; 21.7 µs of fixed cost is over
        // 20; a slowest first upload of 430 ms is over 100.
        let g = goal(
            &goals,
            "plugin call goal: Wasm allocate / native by reference, 100 nodes",
        );
        assert_eq!(
            (g.met, g.measured.as_str()),
            (Some(false), "11.8x (48.2 µs against 4.1 µs)")
        );
        let g = goal(
            &goals,
            "plugin call goal: fixed cost (fresh store, instantiate, trivial call)",
        );
        assert_eq!((g.met, g.measured.as_str()), (Some(false), "21.7 µs"));
        let g = goal(
            &goals,
            "plugin hot swap goal: ConfigMap write to the first call on the new version, slowest first upload",
        );
        assert_eq!((g.met, g.measured.as_str()), (Some(false), "430.0 ms"));
        assert_eq!(
            goal(&goals, "plugin hot swap: re-upload (compile cache) median").measured,
            "6.20 ms"
        );
        assert_eq!(
            goal(&goals, "plugin hot swap: first upload (compile) median")
                .command
                .as_deref(),
            Some("cargo bench --locked --bench hot_swap")
        );
    }

    #[test]
    fn the_report_has_the_tables_and_the_chart() {
        let (rows, _) = parse(SAMPLE);
        let md = report(&rows);
        assert!(md.starts_with("# diorch performance\n"));
        assert!(md.contains("scripts/bench.sh"));
        assert!(md.contains("- Commit: abc1234-dirty"));
        assert!(md.contains("| what | goal | measured | met? | command |"));
        assert!(md.contains(
            "| pods exist time, operator/direct, N = 1000, real API server | ≤ 1.3x | 1.40x"
        ));
        assert!(md.contains("| services | delete | 0.00 | - | 1.00 | 1 |"));
        assert!(md.contains("| events | create | 8.00 | client-go: 8 | 2.00 | client-go: 2 |"));
        assert!(
            md.contains("| sandbox | 100 | 180.2 | - | 205.7 | 1.14 |"),
            "{md}"
        );
        assert!(
            md.contains("| sandbox | 1000 | 1610.4 | 1700.0 | 1840.9 | 1.14 (1.08) | 3020.0 | 3200.0 | 3410.6 | 1.13 (1.07) |"),
            "{md}"
        );
        assert!(md.contains("![ratio against N](ratio.svg)"));
        // No command row: "-".
        let bare: Vec<Row> = rows
            .into_iter()
            .filter(|r| !matches!(r, Row::Meta { .. }))
            .collect();
        let md = report(&bare);
        assert!(md.contains("- Machine: -"));
        assert!(md.contains("| 2.45 s | - | - |"), "{md}");
    }

    #[test]
    fn the_chart_is_an_svg_with_a_line_per_series_and_the_goal() {
        let (rows, _) = parse(SAMPLE);
        let lines = series(&rows);
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0].label, "sandbox, pods exist");
        assert_eq!(lines[3].label, "real API server, pods Running");
        let chart = svg(&lines);
        assert!(chart.starts_with("<svg"));
        assert!(chart.trim_end().ends_with("</svg>"));
        assert_eq!(chart.matches("<polyline").count(), 4);
        assert_eq!(chart.matches(r#"class="goal""#).count(), 1);
        assert!(chart.contains("stroke-dasharray"));
        assert!(chart.contains("log scale"), "N spans 10x: a log axis");
        // Text is escaped; tags balance (a rough well-formedness check).
        let odd = svg(&[Series {
            label: "a<b & \"c\"".into(),
            points: vec![(100.0, 1.1), (300.0, 1.2)],
        }]);
        assert!(odd.contains("a&lt;b &amp; &quot;c&quot;"));
        assert!(!odd.contains("log scale"), "N spans 3x: a linear axis");
        for chart in [&chart, &odd, &svg(&[])] {
            let opens = chart.matches('<').count();
            let closes = chart.matches('>').count();
            assert_eq!(opens, closes);
            assert_eq!(
                chart.matches("<text").count(),
                chart.matches("</text>").count()
            );
            assert!(!chart.contains("NaN") && !chart.contains("inf"), "{chart}");
        }
    }

    #[test]
    fn heap_stacks_are_sorted_into_owners_first_match_wins() {
        let stacks = "main;tokio;kube_runtime::reflector::store::Writer::apply;<diorch_core::cached::CachedPod as Clone>::clone; 3000\n\
            main;tokio;kube_runtime::reflector::store::Writer::apply; 1000\n\
            main;diorch::events::SeriesCache::record; 10\n\
            main;diorch::allocator::book::Book::apply_pod;diorch::allocator::Allocator::start; 500\n\
            main;std::rt::lang_start; 7\n\
            main;zero; 0\n\
            garbage line without a number\n";
        assert_eq!(
            heap_owners(stacks),
            [
                ("controller pod cache (objects)".to_string(), 3000),
                ("reflector stores (entries and keys)".to_string(), 1000),
                (
                    "allocator book (counted pods, held allocations)".to_string(),
                    500
                ),
                ("Event series cache".to_string(), 10),
                ("other".to_string(), 7),
            ]
        );
        assert_eq!(
            one("heap-owner,Event series cache,0.4"),
            Row::HeapOwner {
                owner: "Event series cache".into(),
                mib: 0.4
            }
        );
    }

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(29500.4), "29 500");
        assert_eq!(thousands(20000.0), "20 000");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1234567.0), "1 234 567");
    }
}
