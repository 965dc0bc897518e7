//! The goals table: each performance goal, what was measured against it and whether it is
//! met, in a fixed order.
//!
//! Owns: the goals' values and how a measurement is judged against them. Must not touch: the
//! row format (rows.rs) or the report's layout (markdown.rs).

use std::collections::BTreeMap;

use diorch::chart::thousands;

use crate::rows::{Row, command, ratio, servers};

/// The N the goals are stated at.
pub const GOAL_N: u64 = 1000;
/// Operator/floor time ratio goal (pods exist, pods Running), on either server (issue 39).
pub const FLOOR_RATIO_GOAL: f64 = 1.15;
/// The bench's label of the real API server (benches/common `Server::label`).
pub const REAL_SERVER: &str = "real API server";
/// Operator CPU seconds per 1 000 jobs on the real API server (issue 39).
pub const CPU_GOAL_S: f64 = 3.0;
pub const RSS_GOAL_MIB: f64 = 200.0;
pub const KIB_PER_JOB_GOAL: f64 = 20.0;
/// Memory per extra DIJob on the real API server (issue 39).
pub const REAL_KIB_PER_JOB_GOAL: f64 = 16.0;
/// `dijobs/status` writes per job from Running to Succeeded: one per phase change and at most
/// one count update (issue 39).
pub const STATUS_WRITES_GOAL_TO_SUCCEEDED: f64 = 2.0;
pub const STATUS_WRITES_FLOOR_TO_RUNNING: f64 = 3.0;
/// Events per job: no more than client-go's recorder (8 to Running, 2 after; issue 39).
pub const EVENTS_GOAL_TO_RUNNING: f64 = 8.0;
pub const EVENTS_GOAL_TO_SUCCEEDED: f64 = 2.0;
pub const P99_GOAL_MS: f64 = 2.0;
pub const RPS_GOAL: f64 = 20_000.0;
pub const PLACEMENT_GOAL: f64 = 1.05;
/// Wasm `allocate` on 100 nodes against the same policy natively on borrowed data.
pub const WASM_BY_REF_GOAL: f64 = 3.0;
/// A fresh Store, instantiation and a trivial call.
pub const FIXED_COST_GOAL_US: f64 = 20.0;
/// ConfigMap write to the first call on the new version.
pub const HOT_SWAP_GOAL_MS: f64 = 100.0;
/// Write requests per job a controller cannot go below (without Events).
pub const WRITES_FLOOR_TO_RUNNING: f64 = 8.0;
pub const WRITES_FLOOR_TO_SUCCEEDED: f64 = 2.0;
/// A shadow policy may slow the active one's allocate p99 by at most 5 % (issue 37).
pub const SHADOW_P99_GOAL: f64 = 1.05;
pub const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// One line of the goals table.
#[derive(Debug, Clone, PartialEq)]
pub struct Goal {
    pub what: String,
    pub goal: String,
    pub measured: String,
    /// None: nothing to meet (reported only).
    pub met: Option<bool>,
    pub command: Option<String>,
}

impl Goal {
    pub fn met_text(&self) -> &'static str {
        match self.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "-",
        }
    }
}

/// A memory run: jobs, RSS after them (MiB), KiB per extra job, high-water mark (MiB).
type MemoryRun = (u64, f64, f64, Option<f64>);

/// The floor's (pods exist, pods Running) ms of `server` at `n` (the last row wins).
pub fn floor_of(rows: &[Row], server: &str, n: u64) -> Option<(f64, f64)> {
    rows.iter().rev().find_map(|row| match row {
        Row::ControllerFloor {
            server: s,
            n: m,
            exist_ms,
            running_ms,
            ..
        } if s == server && *m == n => Some((*exist_ms, *running_ms)),
        _ => None,
    })
}

/// The CPU floor's seconds per 1 000 jobs of `server` at `n`, from the last floor row there.
pub fn cpu_floor_of(rows: &[Row], server: &str, n: u64) -> Option<f64> {
    rows.iter().rev().find_map(|row| match row {
        Row::ControllerFloor {
            server: s,
            n: m,
            cpu_s_per_1000_jobs,
            ..
        } if s == server && *m == n => Some(*cpu_s_per_1000_jobs),
        _ => None,
    })?
}

/// The controller-time row of `server` at N = 1000, else at its largest N (the last row of
/// that N wins).
pub fn controller_at_goal_n<'a>(rows: &'a [Row], server: &str) -> Option<(u64, &'a Row)> {
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

/// The verb of a `controller-writes` row: its first word (the bench writes refused requests on
/// rows of their own, as `patch (409)`).
pub fn verb_of(verb: &str) -> &str {
    verb.split_whitespace().next().unwrap_or("")
}

/// Per job, (create→Running, Running→Succeeded), of the rows of `server` that `pick` takes
/// (resource, verb); None without a controller-writes row of `server`.
pub fn per_job(
    rows: &[Row],
    server: &str,
    pick: impl Fn(&str, &str) -> bool,
) -> Option<(f64, f64)> {
    let mut any = false;
    let (mut a, mut b) = (0.0, 0.0);
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
            if pick(resource, verb_of(verb)) {
                a += to_running;
                b += to_succeeded;
            }
        }
    }
    any.then_some((a, b))
}

/// Per job: `dijobs/status` writes, refused ones included.
pub fn status_writes(rows: &[Row], server: &str) -> Option<(f64, f64)> {
    per_job(rows, server, |resource, verb| {
        resource == "dijobs/status" && WRITE_VERBS.contains(&verb)
    })
}

/// Per job: Events written (created, or patched: a series' count update).
pub fn event_writes(rows: &[Row], server: &str) -> Option<(f64, f64)> {
    per_job(rows, server, |resource, verb| {
        is_events(resource) && matches!(verb, "create" | "patch")
    })
}

/// The controller-time rows of `server`, one per N (the last row of each), by N.
pub fn controller_by_n<'a>(rows: &'a [Row], server: &str) -> Vec<(u64, &'a Row)> {
    let mut by: BTreeMap<u64, &Row> = BTreeMap::new();
    for row in rows {
        if let Row::ControllerTime { server: s, n, .. } = row
            && s == server
        {
            by.insert(*n, row);
        }
    }
    by.into_iter().collect()
}

/// Per job: (write requests create→Running, Running→Succeeded, the same without Events).
pub fn write_sums(rows: &[Row], server: &str) -> Option<(f64, f64, f64, f64)> {
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
            if WRITE_VERBS.contains(&verb_of(verb)) {
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

pub fn is_events(resource: &str) -> bool {
    resource == "events" || resource.starts_with("events.")
}

/// The least write requests per job of a resource and verb (None: no floor stated).
pub fn floor(resource: &str, verb: &str, to_succeeded: bool) -> Option<&'static str> {
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

pub fn writes_measured(total: f64, without_events: f64, floor: f64) -> String {
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
pub const GOAL_ORDER: [&str; 18] = [
    "pods exist",
    "pods Running",
    "operator CPU",
    "write requests per job, create",
    "write requests per job, Running",
    "status writes per job, create",
    "status writes per job, Running",
    "Events per job, create",
    "Events per job, Running",
    "operator RSS",
    "operator memory",
    "replica API",
    "placement",
    "plugin call goal",
    "plugin hot swap goal",
    "shadow cost",
    "plugin call",
    "plugin hot swap",
];

pub fn goals(rows: &[Row]) -> Vec<Goal> {
    let mut out = Vec::new();
    let servers = servers(rows);
    let controller_cmd = command(rows, &["controller-time", "controller"]);
    for server in &servers {
        let goal_n = controller_at_goal_n(rows, server).map(|(n, _)| n);
        // The floor goal at the goal's N (issue 39: N = 1000); other sizes and the ratio over
        // direct are shown, informational.
        for (n, row) in controller_by_n(rows, server) {
            let Row::ControllerTime {
                direct_exist_ms,
                operator_exist_ms,
                direct_running_ms,
                operator_running_ms,
                ..
            } = row
            else {
                continue;
            };
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
                // Informational: over direct, the floor itself is above issue 20's 1.3x.
                if Some(n) == goal_n {
                    out.push(Goal {
                        what: format!("{measure} time, operator/direct, N = {n}, {server}"),
                        goal: "-".to_string(),
                        measured: match ratio(*operator, *direct) {
                            Some(r) => {
                                format!("{r:.2}x ({operator:.0} ms against {direct:.0} ms)")
                            }
                            None => format!("- ({operator:.0} ms against {direct:.0} ms)"),
                        },
                        met: None,
                        command: controller_cmd.clone(),
                    });
                }
                if let Some(floor) = floor {
                    let direct_floor =
                        ratio(floor, *direct).map_or("-".into(), |r| format!("{r:.2}x"));
                    let r = ratio(*operator, floor);
                    let at_goal = Some(n) == goal_n;
                    out.push(Goal {
                        what: format!("{measure} time, operator/floor, N = {n}, {server}"),
                        goal: if at_goal {
                            format!("≤ {FLOOR_RATIO_GOAL}x")
                        } else {
                            "-".to_string()
                        },
                        measured: match r {
                            Some(r) => format!(
                                "{r:.2}x ({operator:.0} ms against {floor:.0} ms; floor/direct {direct_floor})"
                            ),
                            None => format!("- ({operator:.0} ms against {floor:.0} ms)"),
                        },
                        met: r.filter(|_| at_goal).map(|r| r <= FLOOR_RATIO_GOAL),
                        command: controller_cmd.clone(),
                    });
                }
            }
        }
        if let Some((
            n,
            Row::ControllerTime {
                cpu_s_per_1000_jobs,
                ..
            },
        )) = controller_at_goal_n(rows, server)
        {
            // A goal on the real API server only: the sandbox answers faster than any server.
            let real = server == REAL_SERVER;
            out.push(Goal {
                what: format!("operator CPU per 1 000 jobs, N = {n}, {server}"),
                goal: if real {
                    format!("≤ {CPU_GOAL_S:.0} s")
                } else {
                    "-".to_string()
                },
                measured: match cpu_floor_of(rows, server, n) {
                    // A goal under the floor measured in the same run cannot be met by any
                    // client (issue 39: show the floor beside it and say so).
                    Some(floor) if real && floor > CPU_GOAL_S => format!(
                        "{cpu_s_per_1000_jobs:.2} s (CPU floor {floor:.2} s: {:.2}x; the goal is below the floor)",
                        cpu_s_per_1000_jobs / floor
                    ),
                    Some(floor) => format!(
                        "{cpu_s_per_1000_jobs:.2} s (CPU floor {floor:.2} s: {:.2}x)",
                        cpu_s_per_1000_jobs / floor
                    ),
                    None => format!("{cpu_s_per_1000_jobs:.2} s"),
                },
                met: real.then_some(*cpu_s_per_1000_jobs <= CPU_GOAL_S),
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
                command: cmd.clone(),
            });
            if let Some((a, b)) = status_writes(rows, server) {
                let over = a - STATUS_WRITES_FLOOR_TO_RUNNING;
                out.push(Goal {
                    what: format!("status writes per job, create→Running, {server}"),
                    goal: format!("floor {STATUS_WRITES_FLOOR_TO_RUNNING:.0}"),
                    measured: if over.abs() < 0.005 {
                        format!("{a:.2} (at the floor)")
                    } else {
                        format!("{a:.2} ({over:+.2} against the floor)")
                    },
                    met: None,
                    command: cmd.clone(),
                });
                out.push(Goal {
                    what: format!("status writes per job, Running→Succeeded, {server}"),
                    goal: format!(
                        "≤ {STATUS_WRITES_GOAL_TO_SUCCEEDED:.0} (one per phase change + at most one count update)"
                    ),
                    measured: format!("{b:.2}"),
                    met: Some(b <= STATUS_WRITES_GOAL_TO_SUCCEEDED + 1e-9),
                    command: cmd.clone(),
                });
            }
            if let Some((a, b)) = event_writes(rows, server) {
                for (phase, measured, goal) in [
                    ("create→Running", a, EVENTS_GOAL_TO_RUNNING),
                    ("Running→Succeeded", b, EVENTS_GOAL_TO_SUCCEEDED),
                ] {
                    out.push(Goal {
                        what: format!("Events per job, {phase}, {server}"),
                        goal: format!("≤ {goal:.0} (client-go's recorder)"),
                        measured: format!("{measured:.2}"),
                        met: Some(measured <= goal + 1e-9),
                        command: cmd.clone(),
                    });
                }
            }
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
                    peak_mib,
                } if s == server => Some((*jobs, *rss_mib, *kib_per_extra_job, *peak_mib)),
                _ => None,
            })
            .fold(None, |best: Option<MemoryRun>, m| match best {
                Some(b) if b.0 > m.0 => Some(b),
                _ => Some(m),
            });
        if let Some((jobs, rss, kib, peak)) = memory {
            // The most it held at once (bursts, re-plans): what a memory limit must allow.
            let peak = peak.map_or_else(String::new, |p| format!(" (high-water mark {p:.1} MiB)"));
            let cmd = command(rows, &["memory", "controller"]);
            out.push(Goal {
                what: format!(
                    "operator RSS after {} DIJobs, {server}",
                    thousands(jobs as f64)
                ),
                goal: format!("< {RSS_GOAL_MIB:.0} MiB"),
                measured: format!("{rss:.1} MiB{peak}"),
                met: Some(rss < RSS_GOAL_MIB),
                command: cmd.clone(),
            });
            let kib_goal = if server == REAL_SERVER {
                REAL_KIB_PER_JOB_GOAL
            } else {
                KIB_PER_JOB_GOAL
            };
            out.push(Goal {
                what: format!("operator memory per extra DIJob, {server}"),
                goal: format!("≤ {kib_goal:.0} KiB"),
                measured: format!("{kib:.1} KiB"),
                met: Some(kib <= kib_goal),
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
    // Shadow policies: the active policy's allocate p99 with a shadow attached is the goal;
    // the rest is reported.
    for row in rows {
        let Row::Shadow {
            bench,
            measure,
            alone,
            shadowed,
        } = row
        else {
            continue;
        };
        let ratio = shadowed / alone;
        let cmd = if bench == "admit" {
            command(rows, &["shadow-cost", "shadow_cost"])
        } else {
            command(rows, &["placement"])
        };
        if bench == "admit" && measure == "active allocate p99 ms" {
            out.push(Goal {
                what: "shadow cost goal: the active policy's allocate p99, shadowed / alone"
                    .to_string(),
                goal: format!("≤ {SHADOW_P99_GOAL}"),
                measured: format!("{ratio:.3} ({alone:.3} ms alone, {shadowed:.3} ms shadowed)"),
                met: Some(ratio <= SHADOW_P99_GOAL),
                command: cmd,
            });
        } else {
            out.push(Goal {
                what: format!("shadow cost: {bench}, {measure}"),
                goal: "-".to_string(),
                measured: format!("{alone:.3} alone, {shadowed:.3} shadowed ({ratio:.3}x)"),
                met: None,
                command: cmd,
            });
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::{SAMPLE, one, parse};

    fn goal<'a>(goals: &'a [Goal], what: &str) -> &'a Goal {
        goals
            .iter()
            .find(|g| g.what == what)
            .unwrap_or_else(|| panic!("no goal {what:?} in {goals:#?}"))
    }

    #[test]
    fn the_shadow_cost_is_a_goal_at_p99_and_reported_otherwise() {
        let (rows, _) = parse(SAMPLE);
        let goals = goals(&rows);
        // 0.270 / 0.264 = 1.023.
        let g = goal(
            &goals,
            "shadow cost goal: the active policy's allocate p99, shadowed / alone",
        );
        assert_eq!(g.met, Some(true));
        assert_eq!(g.measured, "1.023 (0.264 ms alone, 0.270 ms shadowed)");
        assert_eq!(
            g.command.as_deref(),
            Some("cargo bench --locked --bench shadow_cost")
        );
        let g = goal(
            &goals,
            "shadow cost: placement, operator CPU s per 1000 jobs",
        );
        assert_eq!(g.met, None);
        assert_eq!(g.measured, "2.700 alone, 2.900 shadowed (1.074x)");
        // Over the goal: marked not met.
        let mut worse = rows.clone();
        worse.push(Row::Shadow {
            bench: "admit".into(),
            measure: "active allocate p99 ms".into(),
            alone: 1.0,
            shadowed: 1.2,
        });
        let worse = super::goals(&worse);
        assert!(
            worse
                .iter()
                .any(|g| g.what.starts_with("shadow cost goal") && g.met == Some(false))
        );
    }

    #[test]
    fn goals_are_marked_met_or_not() {
        let (rows, _) = parse(SAMPLE);
        let goals = goals(&rows);
        // Over direct, informational: 1840.9 / 1610.4 = 1.14; 4340 / 3100 = 1.40.
        let g = goal(
            &goals,
            "pods exist time, operator/direct, N = 1000, sandbox",
        );
        assert_eq!((g.met, g.goal.as_str()), (None, "-"));
        assert!(g.measured.starts_with("1.14x"), "{}", g.measured);
        let g = goal(
            &goals,
            "pods exist time, operator/direct, N = 1000, real API server",
        );
        assert_eq!(g.met, None);
        assert!(g.measured.starts_with("1.40x"), "{}", g.measured);
        // Over the floor, the goal: 1840.9 / 1700.0 = 1.08 (the floor's own ratio is 1700.0 /
        // 1610.4 = 1.06) and 3410.6 / 3200 = 1.07 meet 1.15x; on the real server 4340 / 3500 =
        // 1.24 and 6100 / 5000 = 1.22 do not.
        let g = goal(&goals, "pods exist time, operator/floor, N = 1000, sandbox");
        assert_eq!((g.met, g.goal.as_str()), (Some(true), "≤ 1.15x"));
        assert_eq!(
            g.measured,
            "1.08x (1841 ms against 1700 ms; floor/direct 1.06x)"
        );
        assert_eq!(
            goal(
                &goals,
                "pods Running time, operator/floor, N = 1000, sandbox"
            )
            .met,
            Some(true)
        );
        for measure in ["pods exist", "pods Running"] {
            let g = goal(
                &goals,
                &format!("{measure} time, operator/floor, N = 1000, real API server"),
            );
            assert_eq!(g.met, Some(false), "{g:?}");
            assert_eq!(g.met_text(), "**no**");
        }
        // Every N with a floor row shows its ratio (the last row of the N): 205.7 / 200 =
        // 1.03 at N = 100, informational (the goal is at N = 1000); over direct only at the
        // goal's N.
        let mut small = rows.clone();
        small.push(one("controller-floor,sandbox,100,150.0,380.0"));
        small.push(one("controller-floor,sandbox,100,200.0,400.0"));
        let small = super::goals(&small);
        let g = goal(&small, "pods exist time, operator/floor, N = 100, sandbox");
        assert_eq!((g.met, g.goal.as_str()), (None, "-"));
        assert!(g.measured.starts_with("1.03x"), "{}", g.measured);
        // 470.1 / 400 = 1.18.
        let g = goal(
            &small,
            "pods Running time, operator/floor, N = 100, sandbox",
        );
        assert_eq!(g.met, None);
        assert!(g.measured.starts_with("1.18x"), "{}", g.measured);
        assert!(
            !small
                .iter()
                .any(|g| g.what == "pods exist time, operator/direct, N = 100, sandbox")
        );
        let no_floor: Vec<Row> = rows
            .iter()
            .filter(|r| !matches!(r, Row::ControllerFloor { server, .. } if server == REAL_SERVER))
            .cloned()
            .collect();
        assert!(
            !super::goals(&no_floor)
                .iter()
                .any(|g| g.what == "pods exist time, operator/floor, N = 1000, real API server"),
            "no floor row, no floor goal"
        );
        // CPU: a goal on the real API server (2.90 s meets 3 s), reported on the sandbox.
        let g = goal(&goals, "operator CPU per 1 000 jobs, N = 1000, sandbox");
        assert_eq!((g.met, g.measured.as_str()), (None, "2.45 s"));
        let g = goal(
            &goals,
            "operator CPU per 1 000 jobs, N = 1000, real API server",
        );
        assert_eq!(
            (g.met, g.goal.as_str(), g.measured.as_str()),
            (Some(true), "≤ 3 s", "2.90 s")
        );
        let mut busy = rows.clone();
        busy.push(one(
            "controller-time,real API server,1000,3100.0,4340.0,5200.0,6100.0,3.01",
        ));
        assert_eq!(
            goal(
                &super::goals(&busy),
                "operator CPU per 1 000 jobs, N = 1000, real API server"
            )
            .met,
            Some(false)
        );
        // With the CPU floor's seconds in the floor row, the CPU row shows them beside.
        busy.push(one(
            "controller-floor,real API server,1000,3000.0,5000.0,2.15",
        ));
        let with_cpu_floor = super::goals(&busy);
        let g = goal(
            &with_cpu_floor,
            "operator CPU per 1 000 jobs, N = 1000, real API server",
        );
        assert_eq!(
            (g.met, g.measured.as_str()),
            (Some(false), "3.01 s (CPU floor 2.15 s: 1.40x)")
        );
        // A floor above the goal is said to be.
        busy.push(one(
            "controller-floor,real API server,1000,3000.0,5000.0,3.50",
        ));
        let above_floor = super::goals(&busy);
        let g = goal(
            &above_floor,
            "operator CPU per 1 000 jobs, N = 1000, real API server",
        );
        assert_eq!(
            (g.met, g.measured.as_str()),
            (
                Some(false),
                "3.01 s (CPU floor 3.50 s: 0.86x; the goal is below the floor)"
            )
        );
        // Writes: 4 + 1 + 3 + 8 Events; 1 + 1 + 2 Events.
        let g = goal(&goals, "write requests per job, create→Running, sandbox");
        assert_eq!(g.measured, "16.00 (8.00 without Events, at the floor)");
        // The refused `patch (409)` counts as a patch: 1 + 1 + 1.5 + 2 + 0.5 Events.
        let g = goal(
            &goals,
            "write requests per job, Running→Succeeded, real API server",
        );
        assert_eq!(
            g.measured,
            "6.00 (3.50 without Events, +1.50 against the floor)"
        );
        // Status writes: 3 and 1 on the sandbox, at the floor and within 2; 3.5 and 1 + 1.5
        // refused on the real server, over.
        let g = goal(&goals, "status writes per job, create→Running, sandbox");
        assert_eq!((g.met, g.measured.as_str()), (None, "3.00 (at the floor)"));
        let g = goal(
            &goals,
            "status writes per job, create→Running, real API server",
        );
        assert_eq!(
            (g.met, g.measured.as_str()),
            (None, "3.50 (+0.50 against the floor)")
        );
        let g = goal(&goals, "status writes per job, Running→Succeeded, sandbox");
        assert_eq!((g.met, g.measured.as_str()), (Some(true), "1.00"));
        assert!(
            g.goal.starts_with("≤ 2 (one per phase change"),
            "{}",
            g.goal
        );
        let g = goal(
            &goals,
            "status writes per job, Running→Succeeded, real API server",
        );
        assert_eq!((g.met, g.measured.as_str()), (Some(false), "2.50"));
        // Events: created and patched (a series' count), against client-go's 8 and 2.
        let g = goal(&goals, "Events per job, create→Running, sandbox");
        assert_eq!(
            (g.met, g.goal.as_str(), g.measured.as_str()),
            (Some(true), "≤ 8 (client-go's recorder)", "8.00")
        );
        assert_eq!(
            goal(&goals, "Events per job, Running→Succeeded, sandbox").met,
            Some(true)
        );
        let g = goal(&goals, "Events per job, create→Running, real API server");
        assert_eq!((g.met, g.measured.as_str()), (Some(false), "9.00"));
        let g = goal(&goals, "Events per job, Running→Succeeded, real API server");
        assert_eq!((g.met, g.measured.as_str()), (Some(false), "2.50"));
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
        let g = goal(&goals, "operator memory per extra DIJob, real API server");
        assert_eq!((g.met, g.goal.as_str()), (Some(false), "≤ 16 KiB"));
        // 18 KiB: within the sandbox's 20, over the real server's 16; 15.9 within both.
        let mut other = rows.clone();
        other.push(one("memory,sandbox,5000,84.3,18.0"));
        other.push(one("memory,real API server,5000,150.0,15.9"));
        let other = super::goals(&other);
        assert_eq!(
            goal(&other, "operator memory per extra DIJob, sandbox").met,
            Some(true)
        );
        assert_eq!(
            goal(&other, "operator memory per extra DIJob, real API server").met,
            Some(true)
        );
        let mut other = rows.clone();
        other.push(one("memory,real API server,5000,150.0,18.0"));
        assert_eq!(
            goal(
                &super::goals(&other),
                "operator memory per extra DIJob, real API server"
            )
            .met,
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
}
