//! What a simulation run is worth, per policy: job completion and queueing times, makespan,
//! GPU utilisation, fragmentation, moves and resizes, fallbacks, preemption (urgent jobs'
//! queueing, shrinks, evictions, work lost), and the policy's call times; written as a
//! side-by-side table and CSV files.
//!
//! Every figure but the call times is a function of virtual time only, printed with fixed
//! decimals, so the same inputs give byte-identical files. Call times are wall time and live in
//! `calls.csv` (and the table's last rows) alone.
//!
//! Owns: the summary's definitions and the output formats. Must not touch: the simulation.

use std::fmt::Write as _;

use super::engine::Run;

/// Mean and nearest-rank percentiles of a sample.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Spread {
    pub count: usize,
    pub mean: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
}

impl Spread {
    pub fn of(values: &mut [f64]) -> Spread {
        if values.is_empty() {
            return Spread::default();
        }
        values.sort_by(f64::total_cmp);
        let rank = |p: f64| {
            // Nearest rank: the smallest value with at least p of the sample at or below it.
            let n = values.len();
            let r = ((p * n as f64).ceil() as usize).clamp(1, n);
            values[r - 1]
        };
        Spread {
            count: values.len(),
            mean: values.iter().sum::<f64>() / values.len() as f64,
            p50: rank(0.50),
            p95: rank(0.95),
            p99: rank(0.99),
        }
    }
}

/// One policy's figures.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub policy: String,
    pub jobs: usize,
    pub finished: usize,
    /// Seconds, over finished jobs.
    pub jct: Spread,
    /// Seconds from arrival to first running, over jobs that ran.
    pub queueing: Spread,
    /// Seconds from the first arrival to the last end.
    pub makespan: f64,
    /// Used over total GPU-time, from the first arrival to the end.
    pub gpu_utilisation: f64,
    /// Mean free GPUs on partly used nodes.
    pub fragmented_gpus: f64,
    /// Mean jobs waiting (arrived, not ended, not running).
    pub queue_length: f64,
    pub moves: u64,
    pub resizes: u64,
    pub fallbacks: u64,
    pub failures: u64,
    /// Pod creations past a node's allocatable: 0 unless placement has a bug.
    pub overcommits: u64,
    /// Pods that waited unbound for room on their node.
    pub bind_waits: u64,
    /// The run's preemption mode (`off`, `evict`, `shrink`).
    pub preemption: String,
    /// Urgent jobs (`priority: high`), and how many of them ran.
    pub urgent_jobs: usize,
    pub urgent_started: usize,
    /// Seconds from arrival to first running, over urgent jobs that ran: `queueing`'s
    /// definition, restricted to them.
    pub urgent_queueing: Spread,
    /// The allocator's counts of running jobs shrunk and evicted for a higher-priority job.
    pub shrinks: u64,
    pub evictions: u64,
    /// GPU-seconds of work evicted jobs lost, as the allocator counts it.
    pub work_lost_gpu_seconds: f64,
    /// Microseconds, wall time.
    pub allocate_us: Spread,
    pub optimize_us: Spread,
}

fn secs(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

impl Summary {
    pub fn of(run: &Run) -> Summary {
        let mut jct: Vec<f64> = run
            .jobs
            .iter()
            .filter_map(|j| Some(secs(j.ended_ms?.saturating_sub(j.arrival_ms))))
            .collect();
        let queued =
            |j: &super::engine::JobResult| Some(secs(j.started_ms?.saturating_sub(j.arrival_ms)));
        let mut queueing: Vec<f64> = run.jobs.iter().filter_map(queued).collect();
        let mut urgent_queueing: Vec<f64> = run
            .jobs
            .iter()
            .filter(|j| j.high_priority)
            .filter_map(queued)
            .collect();
        let span = run.end_ms.saturating_sub(run.first_ms) as f64;
        let per_ms = |v: f64| if span > 0.0 { v / span } else { 0.0 };
        let us = |ns: &[u64]| {
            let mut v: Vec<f64> = ns.iter().map(|n| *n as f64 / 1000.0).collect();
            Spread::of(&mut v)
        };
        let last_end = run.jobs.iter().filter_map(|j| j.ended_ms).max();
        Summary {
            policy: run.policy.clone(),
            jobs: run.jobs.len(),
            finished: jct.len(),
            jct: Spread::of(&mut jct),
            queueing: Spread::of(&mut queueing),
            makespan: last_end.map_or(0.0, |e| secs(e.saturating_sub(run.first_ms))),
            gpu_utilisation: if run.total_gpu_ms > 0.0 {
                run.used_gpu_ms / run.total_gpu_ms
            } else {
                0.0
            },
            fragmented_gpus: per_ms(run.fragmented_gpu_ms),
            queue_length: per_ms(run.queued_job_ms),
            moves: run.jobs.iter().map(|j| u64::from(j.moves)).sum(),
            resizes: run.jobs.iter().map(|j| u64::from(j.resizes)).sum(),
            fallbacks: run.jobs.iter().map(|j| u64::from(j.fallbacks)).sum(),
            failures: run.calls.failures.values().sum(),
            overcommits: run.overcommits,
            bind_waits: run.bind_waits,
            preemption: run.preemption.as_str().to_string(),
            urgent_jobs: run.jobs.iter().filter(|j| j.high_priority).count(),
            urgent_started: urgent_queueing.len(),
            urgent_queueing: Spread::of(&mut urgent_queueing),
            shrinks: run.shrinks,
            evictions: run.evictions,
            work_lost_gpu_seconds: run.work_lost_gpu_seconds,
            allocate_us: us(&run.calls.allocate_ns),
            optimize_us: us(&run.calls.optimize_ns),
        }
    }
}

/// CSV field: quoted when it holds a comma, quote or line break.
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// `summary.csv`: one row per policy, virtual-time figures only.
pub fn summary_csv(summaries: &[Summary]) -> String {
    let mut out = String::from(
        "policy,jobs,finished,jct_mean_s,jct_p50_s,jct_p95_s,jct_p99_s,queue_mean_s,queue_p50_s,queue_p95_s,queue_p99_s,makespan_s,gpu_utilisation,fragmented_gpus,queue_length,moves,resizes,fallbacks,failures,overcommits,bind_waits,preemption,urgent_jobs,urgent_started,urgent_queue_mean_s,urgent_queue_p50_s,urgent_queue_p95_s,shrinks,evictions,work_lost_gpu_s\n",
    );
    for s in summaries {
        let _ = writeln!(
            out,
            "{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.4},{:.3},{:.3},{},{},{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{},{},{:.3}",
            field(&s.policy),
            s.jobs,
            s.finished,
            s.jct.mean,
            s.jct.p50,
            s.jct.p95,
            s.jct.p99,
            s.queueing.mean,
            s.queueing.p50,
            s.queueing.p95,
            s.queueing.p99,
            s.makespan,
            s.gpu_utilisation,
            s.fragmented_gpus,
            s.queue_length,
            s.moves,
            s.resizes,
            s.fallbacks,
            s.failures,
            s.overcommits,
            s.bind_waits,
            s.preemption,
            s.urgent_jobs,
            s.urgent_started,
            s.urgent_queueing.mean,
            s.urgent_queueing.p50,
            s.urgent_queueing.p95,
            s.shrinks,
            s.evictions,
            s.work_lost_gpu_seconds
        );
    }
    out
}

/// `jobs.csv`: every job under every policy.
pub fn jobs_csv(runs: &[Run]) -> String {
    let mut out = String::from(
        "policy,job,arrival_s,start_s,end_s,jct_s,queue_s,phase,gpus,moves,resizes,fallbacks,priority,shrunk,evicted,preempting\n",
    );
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
    for run in runs {
        for j in &run.jobs {
            let _ = writeln!(
                out,
                "{},{},{:.3},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                field(&run.policy),
                field(&j.name),
                secs(j.arrival_ms),
                opt(j.started_ms.map(secs)),
                opt(j.ended_ms.map(secs)),
                opt(j.ended_ms.map(|e| secs(e.saturating_sub(j.arrival_ms)))),
                opt(j.started_ms.map(|s| secs(s.saturating_sub(j.arrival_ms)))),
                j.phase,
                j.gpus,
                j.moves,
                j.resizes,
                j.fallbacks,
                if j.high_priority { "high" } else { "normal" },
                j.shrunk,
                j.evicted,
                j.preempting
            );
        }
    }
    out
}

/// `timeline.csv`: the cluster at each sample of each run.
pub fn timeline_csv(runs: &[Run]) -> String {
    let mut out = String::from(
        "policy,t_s,used_gpus,total_gpus,utilisation,fragmented_gpus,queued,running\n",
    );
    for run in runs {
        for s in &run.timeline {
            let util = if s.total_gpus > 0 {
                s.used_gpus as f64 / s.total_gpus as f64
            } else {
                0.0
            };
            let _ = writeln!(
                out,
                "{},{:.3},{},{},{:.4},{},{},{}",
                field(&run.policy),
                secs(s.at_ms),
                s.used_gpus,
                s.total_gpus,
                util,
                s.fragmented_gpus,
                s.queued,
                s.running
            );
        }
    }
    out
}

/// `calls.csv`: the policy's call times (wall time: differs from run to run).
pub fn calls_csv(summaries: &[Summary]) -> String {
    let mut out = String::from("policy,call,count,mean_us,p50_us,p99_us\n");
    for s in summaries {
        for (call, spread) in [("allocate", &s.allocate_us), ("optimize", &s.optimize_us)] {
            let _ = writeln!(
                out,
                "{},{call},{},{:.1},{:.1},{:.1}",
                field(&s.policy),
                spread.count,
                spread.mean,
                spread.p50,
                spread.p99
            );
        }
    }
    out
}

/// A row of the summary table: its name, and how it shows a policy's summary.
pub type Row = (&'static str, fn(&Summary) -> String);

/// The rows measured in virtual time: the same on every run of the same inputs.
pub const VIRTUAL_ROWS: [Row; 25] = [
    ("jobs finished", |s| format!("{}/{}", s.finished, s.jobs)),
    ("JCT mean (s)", |s| format!("{:.1}", s.jct.mean)),
    ("JCT p50 (s)", |s| format!("{:.1}", s.jct.p50)),
    ("JCT p95 (s)", |s| format!("{:.1}", s.jct.p95)),
    ("JCT p99 (s)", |s| format!("{:.1}", s.jct.p99)),
    ("queueing mean (s)", |s| format!("{:.1}", s.queueing.mean)),
    ("queueing p95 (s)", |s| format!("{:.1}", s.queueing.p95)),
    ("queueing p99 (s)", |s| format!("{:.1}", s.queueing.p99)),
    ("makespan (s)", |s| format!("{:.1}", s.makespan)),
    ("GPU utilisation", |s| {
        format!("{:.1} %", s.gpu_utilisation * 100.0)
    }),
    ("fragmented GPUs (mean)", |s| {
        format!("{:.2}", s.fragmented_gpus)
    }),
    ("queue length (mean)", |s| format!("{:.2}", s.queue_length)),
    ("moves", |s| s.moves.to_string()),
    ("resizes", |s| s.resizes.to_string()),
    ("fallbacks", |s| s.fallbacks.to_string()),
    ("policy failures", |s| s.failures.to_string()),
    ("node over-commits", |s| s.overcommits.to_string()),
    ("pods waiting for room", |s| s.bind_waits.to_string()),
    ("preemption", |s| s.preemption.clone()),
    ("urgent jobs started", |s| {
        format!("{}/{}", s.urgent_started, s.urgent_jobs)
    }),
    ("urgent queueing p50 (s)", |s| {
        format!("{:.1}", s.urgent_queueing.p50)
    }),
    ("urgent queueing p95 (s)", |s| {
        format!("{:.1}", s.urgent_queueing.p95)
    }),
    ("shrinks", |s| s.shrinks.to_string()),
    ("evictions", |s| s.evictions.to_string()),
    ("GPU-seconds lost", |s| {
        format!("{:.1}", s.work_lost_gpu_seconds)
    }),
];

/// The rows of the policy's call times (wall time).
pub const CALL_ROWS: [Row; 3] = [
    ("allocate calls", |s| s.allocate_us.count.to_string()),
    ("allocate p50/p99 (µs, wall)", |s| {
        format!("{:.0}/{:.0}", s.allocate_us.p50, s.allocate_us.p99)
    }),
    ("optimize p50/p99 (µs, wall)", |s| {
        format!("{:.0}/{:.0}", s.optimize_us.p50, s.optimize_us.p99)
    }),
];

/// The side-by-side table for a terminal.
pub fn table(summaries: &[Summary]) -> String {
    let rows = VIRTUAL_ROWS.iter().chain(&CALL_ROWS);
    let mut cells: Vec<Vec<String>> = vec![
        std::iter::once(String::new())
            .chain(summaries.iter().map(|s| s.policy.clone()))
            .collect(),
    ];
    for (name, f) in rows {
        cells.push(
            std::iter::once(name.to_string())
                .chain(summaries.iter().map(f))
                .collect(),
        );
    }
    let columns = summaries.len() + 1;
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            cells
                .iter()
                .map(|r| r[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in &cells {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            let pad = widths[c] - cell.chars().count();
            if c == 0 {
                let _ = write!(line, "{cell}{}", " ".repeat(pad));
            } else {
                let _ = write!(line, "  {}{cell}", " ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = Spread::of(&mut v);
        assert_eq!((s.p50, s.p95, s.p99, s.mean), (50.0, 95.0, 99.0, 50.5));
        let mut one = vec![7.0];
        assert_eq!(Spread::of(&mut one).p99, 7.0);
        assert_eq!(Spread::of(&mut []), Spread::default());
    }

    /// A constructed run: urgent jobs queued 10, 20, ..., 100 s and one that never ran, normal
    /// jobs that did not count toward the urgent figures, and the allocator's counts.
    pub(in crate::simulate) fn preempting_run() -> Run {
        use crate::simulate::engine::JobResult;
        let mut jobs: Vec<JobResult> = (1..=10u64)
            .map(|i| JobResult {
                name: format!("urgent-{i}"),
                arrival_ms: 1_000_000,
                high_priority: true,
                started_ms: Some(1_000_000 + i * 10_000),
                ended_ms: Some(2_000_000),
                phase: "Succeeded".into(),
                gpus: 4,
                preempting: 1,
                ..JobResult::default()
            })
            .collect();
        jobs.push(JobResult {
            name: "urgent-never".into(),
            arrival_ms: 1_500_000,
            high_priority: true,
            ..JobResult::default()
        });
        for (name, shrunk, evicted) in [("fill-a", 2, 0), ("fill-b", 0, 1)] {
            jobs.push(JobResult {
                name: name.into(),
                arrival_ms: 0,
                started_ms: Some(900_000),
                ended_ms: Some(4_000_000),
                phase: "Succeeded".into(),
                gpus: 6,
                shrunk,
                evicted,
                ..JobResult::default()
            });
        }
        Run {
            policy: "builtin:binpack/shrink".into(),
            jobs,
            timeline: Vec::new(),
            used_gpu_ms: 0.0,
            total_gpu_ms: 0.0,
            fragmented_gpu_ms: 0.0,
            queued_job_ms: 0.0,
            first_ms: 0,
            end_ms: 4_000_000,
            calls: Default::default(),
            overcommits: 0,
            bind_waits: 0,
            passes: Vec::new(),
            preemption: crate::allocator::Preemption::Shrink,
            shrinks: 2,
            evictions: 1,
            work_lost_gpu_seconds: 5400.3,
        }
    }

    #[test]
    fn urgent_queueing_shrinks_evictions_and_work_lost_are_reported() {
        let run = preempting_run();
        let s = Summary::of(&run);
        assert_eq!((s.urgent_jobs, s.urgent_started), (11, 10));
        // Nearest rank over the 10 that ran: p50 the 5th, p95 the 10th.
        assert_eq!(
            (s.urgent_queueing.p50, s.urgent_queueing.p95),
            (50.0, 100.0)
        );
        assert_eq!(s.urgent_queueing.mean, 55.0);
        // Everyone's queueing and JCT still count every job, normal ones too.
        assert_eq!((s.queueing.count, s.finished), (12, 12));
        assert_eq!(s.jct.mean, (10.0 * 1000.0 + 2.0 * 4000.0) / 12.0);
        assert_eq!((s.shrinks, s.evictions), (2, 1));
        assert_eq!(s.work_lost_gpu_seconds, 5400.3);
        assert_eq!(s.preemption, "shrink");

        let table = table(std::slice::from_ref(&s));
        for row in [
            "preemption               shrink",
            "urgent jobs started       10/11",
            "urgent queueing p50 (s)    50.0",
            "urgent queueing p95 (s)   100.0",
            "shrinks                       2",
            "evictions                     1",
            "GPU-seconds lost         5400.3",
        ] {
            let name = row.split("  ").next().unwrap();
            let line = table.lines().find(|l| l.starts_with(name)).unwrap();
            let (want, got) = (row.split_whitespace(), line.split_whitespace());
            assert!(want.eq(got), "{line:?} is not {row:?}");
        }

        // summary.csv: the new columns by name, as many cells as headers.
        let csv = summary_csv(&[s]);
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let cells: Vec<&str> = lines.next().unwrap().split(',').collect();
        assert_eq!(header.len(), cells.len());
        let cell = |name: &str| cells[header.iter().position(|h| *h == name).unwrap()];
        assert_eq!(cell("policy"), "builtin:binpack/shrink");
        assert_eq!(cell("preemption"), "shrink");
        assert_eq!((cell("urgent_jobs"), cell("urgent_started")), ("11", "10"));
        assert_eq!(cell("urgent_queue_p50_s"), "50.000");
        assert_eq!(cell("urgent_queue_p95_s"), "100.000");
        assert_eq!(cell("jct_mean_s"), "1500.000");
        assert_eq!((cell("shrinks"), cell("evictions")), ("2", "1"));
        assert_eq!(cell("work_lost_gpu_s"), "5400.300");

        // jobs.csv: each job's priority and the planner's preemption events on it.
        let jobs = jobs_csv(std::slice::from_ref(&run));
        let mut lines = jobs.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        assert_eq!(
            header[header.len() - 4..],
            ["priority", "shrunk", "evicted", "preempting"]
        );
        let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
        assert!(rows.iter().all(|r| r.len() == header.len()));
        let row =
            |job: &str| rows.iter().find(|r| r[1] == job).unwrap()[header.len() - 4..].to_vec();
        assert_eq!(row("urgent-1"), ["high", "0", "0", "1"]);
        assert_eq!(row("fill-a"), ["normal", "2", "0", "0"]);
        assert_eq!(row("fill-b"), ["normal", "0", "1", "0"]);
    }

    #[test]
    fn csv_fields_with_commas_are_quoted() {
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"x\""), "\"say \"\"x\"\"\"");
        assert_eq!(field("plain"), "plain");
    }
}
