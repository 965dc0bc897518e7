//! Turns the CSV rows the benches append (env `BENCH_CSV`) into `performance.md` and
//! `ratio.svg`: the goals and what was measured against them, the controller timings, and a
//! chart of the operator/direct time ratio against the number of jobs.
//!
//! `cargo run --release --locked --example bench_report -- <csv> <out-dir>`; `scripts/bench.sh`
//! runs every bench and then this, into docs/. Row kinds (first field; numbers plain decimals):
//!
//! ```text
//! controller-time,<server>,<n>,<direct_exist_ms>,<operator_exist_ms>,<direct_running_ms>,<operator_running_ms>,<operator_cpu_s_per_1000_jobs>
//! controller-floor,<server>,<n>,<floor_exist_ms>,<floor_running_ms>[,<floor_cpu_s_per_1000_jobs>]
//! controller-writes,<server>,<resource>,<verb>,<per_job_create_to_running>,<per_job_running_to_succeeded>
//! memory,<server>,<jobs>,<rss_mib>,<kib_per_extra_job>
//! placement,<server>,<n>,<round>,<wasm_over_native_ratio>
//! replica-api,<connections>,<req_per_s>,<p50_ms>,<p99_ms>
//! plugin-calls,<name>,<microseconds>
//! hot-swap,<name>,<milliseconds>
//! heap-owner,<owner>,<mib>      (peak heap by owner, from `bench_report heap`)
//! cpu-owner,<label>,<owner>,<percent>,<samples>
//!                               (the operator's CPU samples by owner, from `bench_report cpu`;
//!                                a label or owner holding a comma is in double quotes)
//! meta,<key>,<value>            (the value is the rest of the line, commas included;
//!                                meta,command,<bench>,<command line> names a bench's command)
//! ```
//!
//! Unknown kinds are ignored with a warning, malformed lines reported and skipped (on stderr).
//!
//! `bench_report heap <stacks> [<csv>]` sorts a heaptrack peak flamegraph (`heaptrack_print
//! -F <stacks> --flamegraph-cost-type peak`) into the operator's owners of memory, prints them
//! and appends them to `<csv>` as `heap-owner` rows (`scripts/heap-owners.sh`).
//!
//! `bench_report cpu <perf-script-text> <label> [<csv>]` sorts the samples of `perf script`
//! (the operator under `perf record -g`) into the owners of its CPU time, prints their shares
//! and appends them to `<csv>` as `cpu-owner` rows under `<label>` (`scripts/profile-operator.sh`).
//!
//! Owns: the command line and the files written. Must not touch: the row format (rows.rs), the
//! goals (goals.rs), the report's text (markdown.rs), the chart's lines (ratio.rs), the heap
//! owners (heap.rs) or the CPU owners (cpu.rs).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a measurement program: a panic is its report

mod cpu;
mod goals;
mod heap;
mod markdown;
mod ratio;
mod rows;

use std::path::PathBuf;

use cpu::cpu_command;
use heap::heap_command;
use markdown::report;
use ratio::{series, svg};
use rows::parse;

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
    if std::env::args_os().nth(1).is_some_and(|a| a == "cpu") {
        let (Some(script), Some(label), csv, None) =
            (args.nth(1), args.next(), args.next(), args.next())
        else {
            anyhow::bail!("usage: bench_report cpu <perf-script-text> <label> [<csv>]");
        };
        return cpu_command(
            std::path::Path::new(&script),
            &label.to_string_lossy(),
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
