//! Recorded decisions (`diorch run --record-decisions DIR`): every policy call the allocator
//! makes (a plugin's or the built-in policy's, `allocate` or `optimize`) is written with its
//! input and the answer the allocator read, one JSON object per line, to a bounded, rotating set
//! of files, for `diorch simulate replay` to feed to another policy.
//!
//! Format (version 1), one [`Record`] per line, in files `decisions-NNNNNNNN.jsonl` numbered
//! in order: `{"v":1,"at":RFC 3339,"policy":the policy jobs asked for ("" = the default),
//! "by":who answered (name@sha256 or builtin-…),"call":"allocate","job":Job,"nodes":[Node],
//! "answer":{"placed":[node per slot]}|{"waits":why}|{"failed":why}}`, or for a re-plan
//! `"call":"optimize","jobs":[Job],"nodes":[Node],"previous":[JobPlan],
//! "answer":{"plan":[JobPlan]}|{"failed":why}`. Jobs and nodes are the plugin model
//! (`wit/plugins.wit`, as `diorch plugin snapshot` writes them): only what a policy sees, no
//! pod specs, no secrets.
//!
//! Bounds: a file is closed at a tenth of `--record-decisions-max-mib` (at least 1 MiB) and the
//! oldest files are deleted while all of them pass the cap; a record larger than a file is not
//! written. Records wait in a queue of [`QUEUE_CAPACITY`]: serialising and writing happen on a
//! task of their own, and a full queue drops the record (counted), never delaying a decision.
//!
//! Owns: the format, the files and their bounds. Must not touch: the decisions themselves (it
//! writes what the allocator hands it).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::metrics::Metrics;
use crate::plugin::{Job, JobPlan, Node};
use diorch_core::allocation::admit::Answer;

/// The format version written in every record's `v`.
pub const FORMAT_VERSION: u32 = 1;
/// Records waiting to be written; more are dropped.
pub const QUEUE_CAPACITY: usize = 1024;
/// Files kept at the most: the cap is shared by this many.
const FILES: u64 = 10;

/// One decision, as written (see the module doc).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    pub v: u32,
    pub at: String,
    pub policy: String,
    pub by: String,
    #[serde(flatten)]
    pub call: Call,
}

/// A policy call's input and the answer the allocator read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "camelCase")]
pub enum Call {
    Allocate {
        job: Job,
        nodes: Vec<Node>,
        answer: Allocation,
    },
    Optimize {
        jobs: Vec<Job>,
        nodes: Vec<Node>,
        previous: Vec<JobPlan>,
        answer: Plan,
    },
}

/// An `allocate` answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Allocation {
    /// A node per slot.
    Placed(Vec<String>),
    Waits(String),
    Failed(String),
}

impl Allocation {
    pub fn of(answer: &Answer) -> Allocation {
        match answer {
            Answer::Slots(slots) => Allocation::Placed(slots.as_slice().to_vec()),
            Answer::NoFit(why) => Allocation::Waits(why.clone()),
            Answer::Failed { message, .. } => Allocation::Failed(message.clone()),
        }
    }

    /// As the admission rules read an answer (a recorded failure keeps its words only).
    pub fn answer(&self) -> Answer {
        match self {
            Allocation::Placed(nodes) => {
                Answer::Slots(diorch_core::placement::SlotNodes::new(nodes.clone()))
            }
            Allocation::Waits(why) => Answer::NoFit(why.clone()),
            Allocation::Failed(message) => Answer::Failed {
                reason: "Recorded",
                message: message.clone(),
            },
        }
    }
}

/// An `optimize` answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Plan {
    Plan(Vec<JobPlan>),
    Failed(String),
}

/// What the allocator hands over: shared inputs, serialised later on the writer's task.
pub enum Decision {
    Allocate {
        job: Arc<Job>,
        nodes: Arc<[Node]>,
        answer: Answer,
    },
    Optimize {
        jobs: Arc<[Job]>,
        nodes: Arc<[Node]>,
        previous: Vec<JobPlan>,
        answer: Result<Vec<JobPlan>, String>,
    },
}

struct Entry {
    policy: String,
    by: String,
    decision: Decision,
}

/// Where and how much is recorded (`--record-decisions`, `--record-decisions-max-mib`).
#[derive(Clone, Debug)]
pub struct RecordSettings {
    pub dir: PathBuf,
    pub max_bytes: u64,
}

/// Hands decisions to the writer task; cheap to clone.
#[derive(Clone)]
pub struct Recorder {
    queue: mpsc::Sender<Entry>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Recorder")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("--record-decisions {dir}: {source}")]
    Dir {
        dir: String,
        #[source]
        source: std::io::Error,
    },
}

impl Recorder {
    /// Creates `settings.dir` if missing and starts the writer (inside a tokio runtime).
    pub fn start(settings: RecordSettings, metrics: Arc<Metrics>) -> Result<Recorder, RecordError> {
        let files = Files::open(&settings).map_err(|source| RecordError::Dir {
            dir: settings.dir.display().to_string(),
            source,
        })?;
        let (queue, mut rx) = mpsc::channel::<Entry>(QUEUE_CAPACITY);
        let writer_metrics = metrics.clone();
        tokio::task::spawn_blocking(move || {
            let mut files = files;
            while let Some(entry) = rx.blocking_recv() {
                let line = match serde_json::to_vec(&record_of(entry)) {
                    Ok(line) => line,
                    Err(e) => {
                        tracing::warn!(error = %e, "a decision could not be serialised; not recorded");
                        continue;
                    }
                };
                let result = match files.write(&line) {
                    Ok(true) => "written",
                    Ok(false) => "too_large",
                    Err(e) => {
                        tracing::warn!(error = %e, dir = %files.dir.display(), "writing a recorded decision failed");
                        "failed"
                    }
                };
                writer_metrics.allocator.count_recorded(result);
            }
        });
        Ok(Recorder { queue, metrics })
    }

    /// Queues a decision; never waits (a full queue drops it, counted).
    pub fn record(&self, policy: &str, by: &str, decision: Decision) {
        let entry = Entry {
            policy: policy.to_string(),
            by: by.to_string(),
            decision,
        };
        if self.queue.try_send(entry).is_err() {
            self.metrics.allocator.count_recorded("dropped");
        }
    }
}

fn record_of(entry: Entry) -> Record {
    let call = match entry.decision {
        Decision::Allocate { job, nodes, answer } => Call::Allocate {
            job: Job::clone(&job),
            nodes: nodes.to_vec(),
            answer: Allocation::of(&answer),
        },
        Decision::Optimize {
            jobs,
            nodes,
            previous,
            answer,
        } => Call::Optimize {
            jobs: jobs.to_vec(),
            nodes: nodes.to_vec(),
            previous,
            answer: match answer {
                Ok(plan) => Plan::Plan(plan),
                Err(why) => Plan::Failed(why),
            },
        },
    };
    Record {
        v: FORMAT_VERSION,
        at: jiff::Timestamp::now().to_string(),
        policy: entry.policy,
        by: entry.by,
        call,
    }
}

/// The rotating files of one directory.
struct Files {
    dir: PathBuf,
    max_bytes: u64,
    file_bytes: u64,
    /// The file being written, its number and size.
    current: Option<(std::fs::File, u64, u64)>,
    next: u64,
}

/// The number of a recording file's name (`decisions-00000042.jsonl` → 42).
pub fn file_number(path: &Path) -> Option<u64> {
    path.file_name()?
        .to_str()?
        .strip_prefix("decisions-")?
        .strip_suffix(".jsonl")?
        .parse()
        .ok()
}

/// The recording files of `dir`, oldest first.
pub fn list(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter_map(|p| file_number(&p).map(|n| (n, p)))
        .collect();
    files.sort();
    Ok(files)
}

impl Files {
    fn open(settings: &RecordSettings) -> std::io::Result<Files> {
        std::fs::create_dir_all(&settings.dir)?;
        // A restart starts a new file after the last one: records already written stay whole.
        let next = list(&settings.dir)?.last().map_or(1, |(n, _)| n + 1);
        Ok(Files {
            dir: settings.dir.clone(),
            max_bytes: settings.max_bytes,
            file_bytes: (settings.max_bytes / FILES).max(1 << 20),
            current: None,
            next,
        })
    }

    /// Writes one line; `Ok(false)` when it is larger than a file may be (not written).
    fn write(&mut self, line: &[u8]) -> std::io::Result<bool> {
        let len = line.len() as u64 + 1;
        if len > self.file_bytes {
            return Ok(false);
        }
        if self
            .current
            .as_ref()
            .is_some_and(|(_, _, size)| size + len > self.file_bytes)
        {
            self.current = None;
            self.prune()?;
        }
        if self.current.is_none() {
            let path = self.dir.join(format!("decisions-{:08}.jsonl", self.next));
            let file = std::fs::OpenOptions::new()
                .create_new(true)
                .append(true)
                .open(path)?;
            self.current = Some((file, self.next, 0));
            self.next += 1;
        }
        if let Some((file, _, size)) = &mut self.current {
            // One write per line: a crash leaves at most the last line cut short.
            let mut buf = Vec::with_capacity(line.len() + 1);
            buf.extend_from_slice(line);
            buf.push(b'\n');
            file.write_all(&buf)?;
            *size += len;
        }
        Ok(true)
    }

    /// Deletes the oldest closed files while all of them pass the cap (the next file's room
    /// counted).
    fn prune(&self) -> std::io::Result<()> {
        let files = list(&self.dir)?;
        let mut sizes: Vec<(PathBuf, u64)> = files
            .into_iter()
            .map(|(_, p)| {
                let size = std::fs::metadata(&p).map_or(0, |m| m.len());
                (p, size)
            })
            .collect();
        let mut total: u64 = sizes.iter().map(|(_, s)| s).sum::<u64>() + self.file_bytes;
        sizes.reverse();
        while total > self.max_bytes {
            let Some((oldest, size)) = sizes.pop() else {
                break;
            };
            std::fs::remove_file(&oldest)?;
            total = total.saturating_sub(size);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(dir: &Path, max_bytes: u64) -> RecordSettings {
        RecordSettings {
            dir: dir.to_path_buf(),
            max_bytes,
        }
    }

    #[test]
    fn files_rotate_and_the_oldest_go_once_the_cap_is_passed() {
        let dir = tempfile::tempdir().unwrap();
        // 10 MiB cap: files of 1 MiB; 100 KiB lines, ten to a file.
        let mut files = Files::open(&settings(dir.path(), 10 << 20)).unwrap();
        let line = vec![b'x'; 100 << 10];
        for _ in 0..300 {
            assert!(files.write(&line).unwrap());
        }
        let kept = list(dir.path()).unwrap();
        let total: u64 = kept
            .iter()
            .map(|(_, p)| std::fs::metadata(p).unwrap().len())
            .sum();
        assert!(total <= 10 << 20, "{total} bytes kept");
        assert!(kept.len() >= 8, "{} files", kept.len());
        // The newest are kept, numbered in order.
        assert_eq!(kept.last().unwrap().0, 30);
        // A line larger than a file is not written.
        assert!(!files.write(&vec![b'x'; 2 << 20]).unwrap());
        // A restart continues after the last file.
        let mut again = Files::open(&settings(dir.path(), 10 << 20)).unwrap();
        again.write(b"{}").unwrap();
        assert_eq!(list(dir.path()).unwrap().last().unwrap().0, 31);
    }

    #[test]
    fn a_record_round_trips_through_its_line() {
        let (job, nodes) = crate::plugin::sample::allocate_input(3, 2);
        let record = record_of(Entry {
            policy: "team".into(),
            by: "team@abc".into(),
            decision: Decision::Allocate {
                job: Arc::new(job),
                nodes: nodes.into(),
                answer: Answer::NoFit("no room".into()),
            },
        });
        let line = serde_json::to_string(&record).unwrap();
        assert!(line.contains(r#""call":"allocate""#), "{line}");
        assert!(line.contains(r#""answer":{"waits":"no room"}"#), "{line}");
        let back: Record = serde_json::from_str(&line).unwrap();
        assert_eq!(back, record);
    }
}
