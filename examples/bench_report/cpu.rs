//! `bench_report cpu`: the operator's `perf script` samples sorted into owners of its CPU time,
//! printed and appended to the CSV as `cpu-owner` rows (`scripts/profile-operator.sh`).
//!
//! Owns: the owners, their call-stack keys and reading `perf script`'s text. Must not touch:
//! the report (the rows it appends are read like any other) or the heap owners (heap.rs).

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One owner of CPU time: a sample is its when any of `keys` occurs in a frame of the sample
/// and every one of `requires` occurs somewhere in the sample's stack.
pub struct CpuOwner {
    pub name: &'static str,
    pub keys: &'static [&'static str],
    pub requires: &'static [&'static str],
}

const fn owner(
    name: &'static str,
    keys: &'static [&'static str],
    requires: &'static [&'static str],
) -> CpuOwner {
    CpuOwner {
        name,
        keys,
        requires,
    }
}

/// Who owns a sample, by substrings of its frames; the first match wins, so an owner is the
/// work nearest to the operator's purpose (an Event's HTTP request is Event recording, not
/// HTTP), and the generic layers come last.
pub const CPU_OWNERS: [CpuOwner; 11] = [
    owner(
        "Event recording",
        &["diorch::events::", "spawn_event_worker"],
        &[],
    ),
    owner(
        "status writes (encode, send, decode answer)",
        &["executor::write_status"],
        &[],
    ),
    owner(
        "pod and service writes (build, mutate, send)",
        &[
            "executor::execute",
            "create_unread",
            "delete_unread",
            "diorch_core::build::",
        ],
        &[],
    ),
    owner(
        "reconcile decisions (plan, step)",
        &[
            "diorch_core::planner",
            "diorch_core::step",
            "reconcile_inner",
        ],
        &[],
    ),
    owner("allocator", &["diorch::allocator::"], &[]),
    // A watch's decode runs inside the controller's stream poll: before the controller's rule.
    owner(
        "watch events: JSON decode",
        &["serde", "Deserialize"],
        &["watcher"],
    ),
    owner(
        "kube-runtime controller (scheduler, queue)",
        &["kube_runtime::controller", "kube_runtime::scheduler"],
        &[],
    ),
    owner("TLS", &["rustls", "ring_core", "aws_lc"], &[]),
    owner("HTTP (hyper, tower)", &["hyper", "tower", "h2::"], &[]),
    owner("async runtime and idle (tokio)", &["tokio::runtime"], &[]),
    owner("kernel (syscalls, network)", &["([kernel.kallsyms])"], &[]),
];

/// The wrapper's own samples (`perf record` and its child before it execs the operator).
const WRAPPER_COMMS: [&str; 2] = ["perf", "perf-exec"];

/// One sample of `perf script`: the thread's name and its frames, leaf first.
#[derive(Debug, PartialEq)]
pub struct Sample<'a> {
    pub comm: &'a str,
    pub frames: Vec<&'a str>,
}

/// The samples of `perf script` text: blocks separated by blank lines, each a header line
/// (`comm pid time: period event:`) then a frame per line.
pub fn samples(text: &str) -> Vec<Sample<'_>> {
    let mut out = Vec::new();
    let mut current: Option<Sample> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            out.extend(current.take());
            continue;
        }
        if trimmed.starts_with('#') && current.is_none() {
            continue;
        }
        match &mut current {
            Some(s) => s.frames.push(trimmed),
            None => {
                current = Some(Sample {
                    comm: comm(trimmed),
                    frames: Vec::new(),
                })
            }
        }
    }
    out.extend(current);
    out
}

/// The thread name of a header line: what comes before the pid (a name may hold spaces).
fn comm(header: &str) -> &str {
    let is_pid =
        |t: &str| !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '/') && t != "/";
    let mut end = 0;
    for (i, token) in header.split(' ').enumerate() {
        if i > 0 && is_pid(token) {
            return header[..end].trim();
        }
        end += token.len() + 1;
    }
    header.split_whitespace().next().unwrap_or("")
}

/// The owner a sample's stack belongs to (`other` when none matches).
pub fn owner_of(frames: &[&str]) -> &'static str {
    CPU_OWNERS
        .iter()
        .find(|o| {
            o.keys.iter().any(|k| frames.iter().any(|f| f.contains(k)))
                && o.requires
                    .iter()
                    .all(|r| frames.iter().any(|f| f.contains(r)))
        })
        .map_or("other", |o| o.name)
}

/// Samples by owner, largest first, without the wrapper's.
pub fn cpu_owners(text: &str) -> Vec<(String, u64)> {
    let mut by: BTreeMap<&str, u64> = BTreeMap::new();
    for s in samples(text) {
        if WRAPPER_COMMS.contains(&s.comm) {
            continue;
        }
        *by.entry(owner_of(&s.frames)).or_default() += 1;
    }
    let mut owners: Vec<(String, u64)> = by.into_iter().map(|(o, n)| (o.to_string(), n)).collect();
    owners.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    owners
}

/// A CSV field, quoted when it holds a comma or a quote (rows.rs reads `cpu-owner` rows so).
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The `cpu-owner` rows of `owners` under `label`.
pub fn cpu_rows(owners: &[(String, u64)], label: &str) -> String {
    let total: u64 = owners.iter().map(|(_, n)| n).sum();
    let mut rows = String::new();
    for (owner, n) in owners {
        let _ = writeln!(
            rows,
            "cpu-owner,{},{},{:.1},{n}",
            csv_field(label),
            csv_field(owner),
            percent(*n, total)
        );
    }
    rows
}

fn percent(n: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        n as f64 * 100.0 / total as f64
    }
}

pub fn cpu_command(
    script: &std::path::Path,
    label: &str,
    csv: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(script)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", script.display()))?;
    let owners = cpu_owners(&text);
    let total: u64 = owners.iter().map(|(_, n)| n).sum();
    anyhow::ensure!(
        total > 0,
        "{}: no samples of the operator (is it `perf script` output?)",
        script.display()
    );
    println!("operator CPU by owner, {label} ({total} samples):");
    for (owner, n) in &owners {
        println!("  {:>5.1} %  {n:>7}  {owner}", percent(*n, total));
    }
    if let Some(csv) = csv {
        use std::io::Write as _;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(csv)
            .and_then(|mut f| f.write_all(cpu_rows(&owners, label).as_bytes()))
            .map_err(|e| anyhow::anyhow!("cannot append to {}: {e}", csv.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::{Row, parse};

    /// Five samples: the wrapper's (skipped), one matching status writes and HTTP (the earlier
    /// owner wins), one in the kernel, one matched by nothing, one decoding a watch event.
    const SCRIPT: &str = "\
perf 100 66693.556977:     200040 cpu-clock:pppH: 
\tffffffff81630273 __kmem_cache_alloc_bulk+0xc3 ([kernel.kallsyms])

tokio-runtime-w 31636/31640 66693.557175:     200040 cpu-clock:pppH: 
\t         262e56b <hyper::proto::h1::role::Client as hyper::proto::h1::Http1Transaction>::encode+0x1b (/work/target/release/diorch)
\t         2662972 diorch::controller::executor::write_status::{{closure}}+0x12 (/work/target/release/diorch)
\t               0 [unknown] ([unknown])

diorch 31636 66693.557374:     200040 cpu-clock:pppH: 
\tffffffff821ced53 mas_preallocate+0x263 ([kernel.kallsyms])
\tffffffff821ed511 do_syscall_64+0x71 ([kernel.kallsyms])
\t           20ca3 mmap64+0x13 (/usr/lib/x86_64-linux-gnu/libc.so.6)

  diorch 31636 66693.557574:     200040 cpu-clock:pppH: 
\t            999a _dl_lookup_symbol_x+0x2a (/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2)
\t    7f0059abd538 [unknown] ([unknown])

tokio-runtime-w 31636/31641 66693.557774:     200040 cpu-clock:pppH: 
\t          150af <k8s_openapi::api::core::v1::Pod as serde::de::Deserialize>::deserialize+0x2f (/work/target/release/diorch)
\t          150b0 kube_runtime::watcher::step::{{closure}}+0x2f (/work/target/release/diorch)
\t          150c0 kube_runtime::controller::applier::{{closure}}+0x2f (/work/target/release/diorch)
";

    #[test]
    fn samples_are_read_with_their_thread_and_frames() {
        let s = samples(SCRIPT);
        assert_eq!(s.len(), 5);
        assert_eq!(s[0].comm, "perf");
        assert_eq!(s[1].comm, "tokio-runtime-w");
        assert_eq!(s[1].frames.len(), 3);
        assert_eq!(s[3].comm, "diorch", "a padded header");
        assert_eq!(comm("kube watcher 12 1.0: 1 cpu-clock:"), "kube watcher");
    }

    #[test]
    fn samples_go_to_the_first_owner_that_matches() {
        // One each, so by name; the wrapper's sample is not counted.
        assert_eq!(
            cpu_owners(SCRIPT),
            [
                ("kernel (syscalls, network)".to_string(), 1),
                ("other".to_string(), 1),
                ("status writes (encode, send, decode answer)".to_string(), 1),
                ("watch events: JSON decode".to_string(), 1),
            ]
        );
        // Without `watcher` on the stack a decode is not a watch's: the controller's.
        assert_eq!(
            owner_of(&[
                "1 <Pod as serde::de::Deserialize>::deserialize+0x1 (x)",
                "2 kube_runtime::controller::applier+0x1 (x)"
            ]),
            "kube-runtime controller (scheduler, queue)"
        );
    }

    #[test]
    fn rows_are_appended_quoted_and_read_back() {
        let owners = cpu_owners(SCRIPT);
        let rows = cpu_rows(&owners, "N = 1000, real API server");
        assert!(
            rows.contains(
                "cpu-owner,\"N = 1000, real API server\",\"status writes (encode, send, decode answer)\",25.0,1\n"
            ),
            "{rows}"
        );
        let (parsed, warnings) = parse(&rows);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(parsed.len(), 4);
        assert_eq!(
            parsed[2],
            Row::CpuOwner {
                label: "N = 1000, real API server".into(),
                owner: "status writes (encode, send, decode answer)".into(),
                percent: 25.0,
                samples: 1,
            }
        );
    }
}
