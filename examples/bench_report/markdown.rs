//! `performance.md`: the machine, the goals table, the controller timings and writes, memory,
//! the replica API and plugin figures, as Markdown.
//!
//! Owns: the report's text and layout. Must not touch: the goals' judgement (goals.rs) or the
//! chart (ratio.rs draws `ratio.svg`, which the report links).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::goals::*;
use crate::rows::{Row, command, meta, ratio, servers};

/// A table cell: no line breaks, `|` escaped.
pub fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

pub fn code_cell(s: Option<String>) -> String {
    match s {
        Some(s) if !s.is_empty() => format!("`{}`", cell(&s.replace('`', "'"))),
        _ => "-".to_string(),
    }
}

/// Why the operator's writes can exceed the floor, and what keeps them near it (the controller
/// code these name is in src/controller/executor.rs).
pub const WRITES_ABOVE_THE_FLOOR: &str = "\
### Writes above the floor, and why

- **Events** are not in the floor. A client-go controller's recorder would write 8 for a \
4-pod job to Running (JobPending, one SuccessfulCreate per pod and for the service, \
JobStarting, JobRunning) and 2 after (JobSucceeded, the service's SuccessfulDelete). diorch \
folds a reconcile pass's successful creates, and its successful deletes, into one Event each \
(`coalesce_successes`: the note lists DI-orchestrator's message for every object), so a job \
to Running costs 4 Events. A lone create or delete keeps DI-orchestrator's exact Event. \
Events wait until no job waits for a reconcile and none runs (`Queue::idle`; 2 min at most), \
so during a burst they go behind every job's pod, service and status writes.
- **`dijobs/status`** above one write per phase: a write that changes only replica counts \
(`replicas`, `readyReplicas`, `taskStatus`) waits 3 s after the first such change \
(`COUNTS_HOLD`), and 1 s after the job's last status write, so pods that are created, \
scheduled, started or finished within moments of each other fold into the phase write that \
follows; what remains above the floor is a count change of pods spread over more than 3 s. \
`kubectl get dijobs` shows the counts 3 s late at most; a phase change is never held. A \
pass that still sees the job at the resourceVersion its own last status write replaced waits \
for the watch to show it (`own_status_seen`) instead of sending a write the server refuses \
(409); the bench lists refused requests on rows of their own (`patch (409)`). Each status \
write is a JSON merge patch of the status fields that changed, guarded by the \
resourceVersion it was planned from: the request carries no spec, and its answer is decoded \
with the spec skipped unread.
- **`services` create** above 1: only when a pass runs before the service's own watch event \
and after the 5 s in which a created service is taken as there (`service_expected`); the \
duplicate is answered 409 and ignored.
- Reads (`list`, `watch`) are the reflectors' (jobs, pods, services, nodes, plugin \
ConfigMaps) and are not per job.";

/// "Where the operator's CPU goes": a row per owner, a column per profile's label (both in the
/// order they first appear), and each profile's sample count.
pub fn cpu_owners_section(w: &mut String, rows: &[Row]) {
    let mut labels: Vec<&str> = Vec::new();
    let mut owners: Vec<&str> = Vec::new();
    // (label, owner) -> percent; the last row wins.
    let mut share: BTreeMap<(&str, &str), f64> = BTreeMap::new();
    let mut samples: BTreeMap<&str, u64> = BTreeMap::new();
    for row in rows {
        if let Row::CpuOwner {
            label,
            owner,
            percent,
            samples: n,
        } = row
        {
            if !labels.contains(&label.as_str()) {
                labels.push(label);
            }
            if !owners.contains(&owner.as_str()) {
                owners.push(owner);
            }
            if share.insert((label, owner), *percent).is_none() {
                *samples.entry(label).or_default() += n;
            }
        }
    }
    if labels.is_empty() {
        return;
    }
    let _ = writeln!(w, "\n## Where the operator's CPU goes\n");
    let _ = writeln!(
        w,
        "The operator under `perf record -g` (frame pointers) while N DIJobs × 4 pods run on \
         the real API server (N and the server in each column's label), `{}`: each sample goes \
         to the first owner in this table whose keys (examples/bench_report/cpu.rs) match its \
         stack; shares of the operator's samples.\n",
        command(rows, &["cpu-profile"])
            .unwrap_or_else(|| "bash scripts/profile-operator.sh".into())
    );
    let _ = write!(w, "| owner |");
    for label in &labels {
        let _ = write!(w, " {} |", cell(label));
    }
    let _ = write!(w, "\n|---|");
    for _ in &labels {
        let _ = write!(w, "---:|");
    }
    let _ = writeln!(w);
    for owner in &owners {
        let _ = write!(w, "| {} |", cell(owner));
        for label in &labels {
            let _ = match share.get(&(*label, *owner)) {
                Some(p) => write!(w, " {p:.1} % |"),
                None => write!(w, " - |"),
            };
        }
        let _ = writeln!(w);
    }
    let _ = write!(w, "| samples |");
    for label in &labels {
        let _ = write!(w, " {} |", samples.get(label).copied().unwrap_or(0));
    }
    let _ = writeln!(w);
}

pub fn report(rows: &[Row]) -> String {
    let mut md = String::new();
    let w = &mut md;
    let _ = writeln!(w, "# diorch performance\n");
    let _ = writeln!(
        w,
        "Generated by `scripts/bench.sh` (with `examples/bench_report/`) from the rows the \
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
            let mut passes = Vec::new();
            for row in mine {
                if let Row::ControllerWrites {
                    resource,
                    verb,
                    to_running,
                    to_succeeded,
                    ..
                } = row
                {
                    // The bench's reconcile counts ride along as `reconcile <result>`: not
                    // requests, told after the table.
                    if let Some(result) = verb.strip_prefix("reconcile ") {
                        passes.push(format!("{result} {to_running:.2} / {to_succeeded:.2}"));
                        continue;
                    }
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
            if !passes.is_empty() {
                let _ = writeln!(
                    w,
                    "\nDIJob reconciles per job (create→Running / Running→Succeeded), by result: {}.",
                    passes.join(", ")
                );
            }
        }
        let _ = writeln!(w, "\n{WRITES_ABOVE_THE_FLOOR}");
    }

    cpu_owners_section(w, rows);

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
             write: a lower bound). Ratios: operator/direct, and operator/floor in brackets. \
             The operator runs on one runtime thread, as deploy/ runs it (its CPU limit of 1 \
             gives it a current-thread runtime). CPU floor: the CPU seconds of a client that \
             only watches the DIJobs, pods and services (decoded into the operator's slim \
             shapes) and writes each job's pods, service, 3 status writes and 4 Events, on one \
             runtime thread (benches/controller_scale/cpu_floor.rs): the least a kube-rs \
             controller spends, with no cache and no decision. Both CPU figures run from the \
             first create until the pods run and the process's writes are done: the operator's \
             Events wait for an idle controller, so many are written after the last pod runs.\n"
        );
        let _ = writeln!(
            w,
            "| server | N | pods exist: direct ms | floor ms | via operator ms | ratio | pods Running: direct ms | floor ms | via operator ms | ratio | operator CPU s per 1 000 jobs | CPU floor s |"
        );
        let _ = writeln!(
            w,
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
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
                        "| {} | {n} | {direct_exist_ms:.1} | {} | {operator_exist_ms:.1} | {}{} | {direct_running_ms:.1} | {} | {operator_running_ms:.1} | {}{} | {cpu_s_per_1000_jobs:.2} | {} |",
                        cell(server),
                        ms(floor.map(|f| f.0)),
                        show(ratio(*operator_exist_ms, *direct_exist_ms)),
                        over(*operator_exist_ms, floor.map(|f| f.0)),
                        ms(floor.map(|f| f.1)),
                        show(ratio(*operator_running_ms, *direct_running_ms)),
                        over(*operator_running_ms, floor.map(|f| f.1)),
                        cpu_floor_of(rows, server, *n)
                            .map_or("-".to_string(), |f| format!("{f:.2}")),
                    );
                }
            }
        }
        let _ = writeln!(w, "\n![ratio against N](ratio.svg)");
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::{SAMPLE, parse};
    use diorch::chart::thousands;

    #[test]
    fn the_report_has_the_tables_and_the_chart() {
        let (rows, _) = parse(SAMPLE);
        let md = report(&rows);
        assert!(md.starts_with("# diorch performance\n"));
        assert!(md.contains("scripts/bench.sh"));
        assert!(md.contains("- Commit: abc1234-dirty"));
        assert!(md.contains("| what | goal | measured | met? | command |"));
        assert!(
            md.contains(
                "| pods exist time, operator/direct, N = 1000, real API server | - | 1.40x"
            )
        );
        assert!(md.contains("| services | delete | 0.00 | - | 1.00 | 1 |"));
        assert!(!md.contains("| dijobs | reconcile ok |"), "not a request");
        assert!(md.contains(
            "DIJob reconciles per job (create→Running / Running→Succeeded), by result: ok 5.50 / 1.25."
        ));
        assert!(md.contains("| events | create | 8.00 | client-go: 8 | 2.00 | client-go: 2 |"));
        assert!(
            md.contains("| sandbox | 100 | 180.2 | 170.0 | 205.7 | 1.14 (1.21) |"),
            "{md}"
        );
        assert!(
            md.contains("| sandbox | 1000 | 1610.4 | 1700.0 | 1840.9 | 1.14 (1.08) | 3020.0 | 3200.0 | 3410.6 | 1.13 (1.07) |"),
            "{md}"
        );
        assert!(md.contains("![ratio against N](ratio.svg)"));
        assert!(md.contains("| dijobs/status | patch (409) | 0.00 | - | 1.50 | - |"));
        // CPU owners: a column per label, in order, "-" where a profile has no such owner;
        // after the API requests, before the heap owners.
        let cpu = md
            .find("\n## Where the operator's CPU goes\n")
            .expect("cpu section");
        assert!(md.find("\n## API requests per job\n").unwrap() < cpu);
        assert!(md[cpu..].contains("`bash scripts/profile-operator.sh`"));
        assert!(md[cpu..].contains("`perf record -g` (frame pointers)"));
        assert!(
            md.contains(
                "| owner | N = 1000, real API server | N = 300, sandbox |\n|---|---:|---:|\n"
            ),
            "{md}"
        );
        assert!(md.contains("| status writes (encode, send, decode answer) | 20.0 % | - |"));
        assert!(md.contains("| other | 49.5 % | 60.0 % |"));
        assert!(md.contains("| TLS | - | 40.0 % |"));
        assert!(md.contains("| samples | 2000 | 200 |"));
        // No command row: "-".
        let bare: Vec<Row> = rows
            .into_iter()
            .filter(|r| !matches!(r, Row::Meta { .. }))
            .collect();
        let md = report(&bare);
        assert!(md.contains("- Machine: -"));
        assert!(
            md.contains("`bash scripts/profile-operator.sh`"),
            "the default command"
        );
        let no_cpu: Vec<Row> = bare
            .into_iter()
            .filter(|r| !matches!(r, Row::CpuOwner { .. }))
            .collect();
        assert!(!report(&no_cpu).contains("CPU goes"));
        assert!(md.contains("| 2.45 s | - | - |"), "{md}");
    }

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(29500.4), "29 500");
        assert_eq!(thousands(20000.0), "20 000");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1234567.0), "1 234 567");
    }
}
