//! `diorch simulate replay DIR --policy P`: feeds the decisions recorded by
//! `diorch run --record-decisions DIR` (`allocator::record`) to policy P, through the same
//! output checks, and says per decision whether P agrees with the answer recorded (the same
//! comparison a shadow policy gets: `core::allocation::shadow`), then the totals.
//!
//! Replaying the policy that made a recording agrees on every decision: policies are
//! deterministic (no clock, no randomness, no I/O), and the record holds their whole input.
//!
//! Bounds: a line (one decision) of at most [`MAX_LINE_BYTES`]; a line that is not a record of a
//! known version, or a file that ends inside a line (a recording cut short), is refused with the
//! file and the byte offset where it went wrong.
//!
//! Owns: reading recordings and the report. Must not touch: the operator (files only).

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::allocator::record::{self, Call, FORMAT_VERSION, Plan, Record};
use crate::plugin::{Checked, SchedulingPolicy};
use diorch_core::allocation::shadow::{self as compare, Failure, Verdict};

/// Longest line read: a decision over 1 000 jobs and 5 000 nodes is a few MiB.
pub const MAX_LINE_BYTES: u64 = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("{dir}: {source}")]
    Dir {
        dir: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{dir}: no recording files (decisions-NNNNNNNN.jsonl)")]
    Empty { dir: String },
    #[error("{file} at byte {offset}: {message}")]
    Bad {
        file: String,
        offset: u64,
        message: String,
    },
}

/// One decision replayed.
#[derive(Debug, Clone)]
pub struct Replayed {
    pub file: PathBuf,
    pub line: usize,
    pub record: Record,
    pub verdict: Verdict,
    /// Jobs treated differently, as `job: recorded → replayed` (bounded).
    pub detail: Vec<String>,
}

/// Reads every record of `dir`, oldest first; refuses the first bad line with its place.
pub fn read(dir: &Path) -> Result<Vec<(PathBuf, usize, Record)>, ReplayError> {
    let files = record::list(dir).map_err(|source| ReplayError::Dir {
        dir: dir.display().to_string(),
        source,
    })?;
    if files.is_empty() {
        return Err(ReplayError::Empty {
            dir: dir.display().to_string(),
        });
    }
    let mut out = Vec::new();
    for (_, path) in files {
        let bad = |offset: u64, message: String| ReplayError::Bad {
            file: path.display().to_string(),
            offset,
            message,
        };
        let file = std::fs::File::open(&path).map_err(|e| bad(0, e.to_string()))?;
        let mut reader = BufReader::new(file);
        let mut offset = 0u64;
        let mut number = 0usize;
        loop {
            let mut line = Vec::new();
            let read = (&mut reader)
                .take(MAX_LINE_BYTES + 1)
                .read_until(b'\n', &mut line)
                .map_err(|e| bad(offset, e.to_string()))?;
            if read == 0 {
                break;
            }
            number += 1;
            if line.last() != Some(&b'\n') {
                return Err(bad(
                    offset,
                    if line.len() as u64 > MAX_LINE_BYTES {
                        format!("a line longer than {MAX_LINE_BYTES} bytes")
                    } else {
                        "the file ends inside a record (a recording cut short)".to_string()
                    },
                ));
            }
            let record: Record = serde_json::from_slice(&line)
                .map_err(|e| bad(offset, format!("line {number}: not a decision record: {e}")))?;
            if record.v != FORMAT_VERSION {
                return Err(bad(
                    offset,
                    format!(
                        "line {number}: format version {} (this diorch reads {FORMAT_VERSION})",
                        record.v
                    ),
                ));
            }
            out.push((path.clone(), number, record));
            offset += read as u64;
        }
    }
    Ok(out)
}

/// Feeds each record's input to `policy` and compares its answer with the recorded one.
pub async fn replay(
    records: Vec<(PathBuf, usize, Record)>,
    policy: Arc<dyn SchedulingPolicy>,
) -> Vec<Replayed> {
    let policy = Checked::plugin(policy);
    let mut out = Vec::with_capacity(records.len());
    for (file, line, record) in records {
        let comparison = match &record.call {
            Call::Allocate { job, nodes, answer } => {
                let replayed = crate::allocator::answer_of(
                    policy
                        .allocate(Arc::new(job.clone()), nodes.clone().into())
                        .await,
                );
                compare::allocation(&job.key, &answer.answer(), &replayed)
            }
            Call::Optimize {
                jobs,
                nodes,
                previous,
                answer,
            } => {
                let replayed = policy
                    .optimize(jobs.clone().into(), nodes.clone().into(), previous.clone())
                    .await
                    .map_err(|e| Failure(e.to_string()));
                let recorded = match answer {
                    Plan::Plan(plan) => Ok(plan.clone()),
                    Plan::Failed(why) => Err(Failure(why.clone())),
                };
                let keys: Vec<String> = jobs.iter().map(|j| j.key.clone()).collect();
                // Recorded and replayed both failing is agreement (the comparison counts the
                // second side's failure as `failed`).
                match (&recorded, &replayed) {
                    (Err(_), Err(_)) => compare::Comparison {
                        verdict: Verdict::Same,
                        jobs: Vec::new(),
                        differing: 0,
                    },
                    _ => compare::plan(&keys, &recorded, &replayed),
                }
            }
        };
        let verdict = match (&record.call, comparison.verdict) {
            // Both failing agrees for an allocation too.
            (
                Call::Allocate {
                    answer: record::Allocation::Failed(_),
                    ..
                },
                Verdict::Failed,
            ) => Verdict::Same,
            (_, v) => v,
        };
        let detail = comparison
            .jobs
            .iter()
            .take(4)
            .map(|d| {
                format!(
                    "{}: {} → {}",
                    d.job,
                    serde_json::to_string(&d.active).unwrap_or_default(),
                    serde_json::to_string(&d.shadow).unwrap_or_default()
                )
            })
            .collect();
        out.push(Replayed {
            file,
            line,
            record,
            verdict,
            detail,
        });
    }
    out
}

/// The report: a line per decision, then the totals.
pub fn report(label: &str, replayed: &[Replayed]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for r in replayed {
        let file = r
            .file
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or_default();
        let what = match &r.record.call {
            Call::Allocate { job, .. } => format!("allocate {}", job.key),
            Call::Optimize { jobs, .. } => format!("optimize {} jobs", jobs.len()),
        };
        let verdict = match r.verdict {
            Verdict::Same => "agrees",
            Verdict::Different => "differs",
            Verdict::Failed => "FAILED",
        };
        let _ = writeln!(
            out,
            "{file}:{} {} {what} (recorded by {}): {verdict}",
            r.line, r.record.at, r.record.by
        );
        for d in &r.detail {
            let _ = writeln!(out, "    {}", clean(d));
        }
    }
    let total = replayed.len();
    let agree = replayed
        .iter()
        .filter(|r| r.verdict == Verdict::Same)
        .count();
    let failed = replayed
        .iter()
        .filter(|r| r.verdict == Verdict::Failed)
        .count();
    let percent = if total == 0 {
        100.0
    } else {
        agree as f64 * 100.0 / total as f64
    };
    let _ = writeln!(
        out,
        "\n{label}: agrees on {agree} of {total} decisions ({percent:.1} %), differs on {}, failed on {failed}",
        total - agree - failed
    );
    out
}

/// One line of printable text (recorded texts came from policies: untrusted).
fn clean(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(400).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::NativePolicy;

    fn allocate_record(nodes_count: usize) -> Record {
        let (job, nodes) = crate::plugin::sample::allocate_input(nodes_count, 2);
        let placed = NativePolicy::BinPack
            .allocate_now(&job, &nodes)
            .unwrap()
            .nodes;
        Record {
            v: FORMAT_VERSION,
            at: "2026-11-27T00:00:00Z".into(),
            policy: "team".into(),
            by: "builtin-binpack".into(),
            call: Call::Allocate {
                job,
                nodes,
                answer: record::Allocation::Placed(placed),
            },
        }
    }

    fn write(dir: &Path, name: &str, lines: &[String], end: &str) {
        std::fs::write(dir.join(name), format!("{}{end}", lines.join("\n"))).unwrap();
    }

    #[tokio::test]
    async fn the_policy_that_made_a_recording_agrees_and_another_differs() {
        let dir = tempfile::tempdir().unwrap();
        let lines: Vec<String> = [10, 20]
            .iter()
            .map(|n| serde_json::to_string(&allocate_record(*n)).unwrap())
            .collect();
        write(dir.path(), "decisions-00000001.jsonl", &lines, "\n");
        let records = read(dir.path()).unwrap();
        assert_eq!(records.len(), 2);
        let same = replay(records.clone(), Arc::new(NativePolicy::BinPack)).await;
        assert!(same.iter().all(|r| r.verdict == Verdict::Same));
        let text = report("builtin:binpack", &same);
        assert!(
            text.contains("agrees on 2 of 2 decisions (100.0 %)"),
            "{text}"
        );
        let other = replay(records, Arc::new(NativePolicy::Spread)).await;
        assert!(other.iter().any(|r| r.verdict == Verdict::Different));
        let text = report("builtin:spread", &other);
        assert!(text.contains("differs"), "{text}");
    }

    #[test]
    fn a_truncated_or_corrupt_recording_is_refused_with_its_file_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        let good = serde_json::to_string(&allocate_record(3)).unwrap();
        // Cut short: the last record has no end.
        write(
            dir.path(),
            "decisions-00000001.jsonl",
            &[good.clone(), good[..good.len() / 2].to_string()],
            "",
        );
        let err = read(dir.path()).unwrap_err().to_string();
        let offset = good.len() + 1;
        assert!(
            err.contains("decisions-00000001.jsonl")
                && err.contains(&format!("at byte {offset}"))
                && err.contains("cut short"),
            "{err}"
        );
        // Garbage in the middle.
        write(
            dir.path(),
            "decisions-00000001.jsonl",
            &[
                good.clone(),
                "{\"v\":1,\"nonsense\":true}".into(),
                good.clone(),
            ],
            "\n",
        );
        let err = read(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains(&format!("at byte {offset}")) && err.contains("line 2"),
            "{err}"
        );
        // A newer format is refused, not misread.
        let newer = good.replacen("\"v\":1", "\"v\":2", 1);
        write(dir.path(), "decisions-00000001.jsonl", &[newer], "\n");
        let err = read(dir.path()).unwrap_err().to_string();
        assert!(err.contains("format version 2"), "{err}");
        // No files at all.
        let empty = tempfile::tempdir().unwrap();
        assert!(matches!(read(empty.path()), Err(ReplayError::Empty { .. })));
    }
}
