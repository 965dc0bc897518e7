//! Test-only scheduling policy built against the frozen 0.4.0 contract (`wit/v0.4`) with plain
//! wit-bindgen, as a plugin from before 0.5 was (it exports no `preempt`): the host must keep
//! loading and calling it, and never asks it to preempt.
//!
//! The same first fit as `legacy-policy`, on 0.3's columns: each replica goes to the first node
//! (in index order) that is ready, has no NoSchedule taint, is not labelled `legacy/skip`, and
//! still has room for the task's requests, extended resources included, with a reason naming
//! the contract. `optimize` keeps every placed job where it is.

wit_bindgen::generate!({ path: "../../../wit/v0.4/plugins.wit", world: "scheduling-policy" });

use diorch::plugins::log::{Level, log};
use diorch::plugins::types::ResourceColumns;

struct V04;

fn text(c: &Cluster, id: u32) -> &str {
    let i = id as usize;
    let start = if i == 0 {
        0
    } else {
        c.string_ends.get(i - 1).copied().unwrap_or(0) as usize
    };
    let end = c.string_ends.get(i).copied().unwrap_or(0) as usize;
    c.strings.get(start..end).unwrap_or("")
}

/// Entries `starts[i]..starts[i+1]`, empty when out of range.
fn run(starts: &[u32], i: usize) -> std::ops::Range<usize> {
    let start = starts.get(i).copied().unwrap_or(0) as usize;
    let end = starts.get(i + 1).copied().unwrap_or(0) as usize;
    start..end.max(start)
}

/// Free room of a row: cpu, memory, gpus and extended (name, amount).
struct Room {
    cpu: u64,
    memory: u64,
    gpus: u32,
    extended: Vec<(String, u64)>,
}

impl Room {
    fn of(c: &Cluster, r: &ResourceColumns, i: usize) -> Room {
        Room {
            cpu: r.cpu_millis.get(i).copied().unwrap_or(0),
            memory: r.memory_bytes.get(i).copied().unwrap_or(0),
            gpus: r.gpus.get(i).copied().unwrap_or(0),
            extended: run(&r.extended_starts, i)
                .filter_map(|e| {
                    Some((
                        text(c, *r.extended_name.get(e)?).to_string(),
                        *r.extended_amount.get(e)?,
                    ))
                })
                .collect(),
        }
    }

    fn take(&mut self, want: &Room) -> bool {
        let fits = self.cpu >= want.cpu
            && self.memory >= want.memory
            && self.gpus >= want.gpus
            && want
                .extended
                .iter()
                .all(|(n, q)| self.extended.iter().any(|(m, have)| m == n && have >= q));
        if fits {
            self.cpu -= want.cpu;
            self.memory -= want.memory;
            self.gpus -= want.gpus;
            for (n, q) in &want.extended {
                if let Some(slot) = self.extended.iter_mut().find(|(m, _)| m == n) {
                    slot.1 -= q;
                }
            }
        }
        fits
    }
}

impl Guest for V04 {
    fn allocate(c: Cluster) -> Result<Decision, Error> {
        if c.jobs.key.len() != 1 {
            return Err(Error::InvalidInput("one job expected".into()));
        }
        log(
            Level::Info,
            "v0.4 allocate",
            &[("job".into(), text(&c, c.jobs.key[0]).into())],
        );
        let n = &c.nodes;
        let mut rooms: Vec<Option<Room>> = (0..n.name.len())
            .map(|i| {
                let usable = n.ready.get(i) == Some(&1)
                    && !run(&n.taint_starts, i).any(|t| c.taints.effect.get(t) == Some(&0))
                    && !run(&n.label_starts, i).any(|l| {
                        c.labels
                            .key
                            .get(l)
                            .is_some_and(|&k| text(&c, k) == "legacy/skip")
                    });
                usable.then(|| Room::of(&c, &n.free, i))
            })
            .collect();
        let mut answer = Vec::new();
        for t in run(&c.jobs.task_starts, 0) {
            let want = Room::of(&c, &c.tasks.requests, t);
            let name = c.tasks.name.get(t).map_or("", |&s| text(&c, s));
            for _ in 0..c.tasks.replicas.get(t).copied().unwrap_or(0) {
                let node = rooms
                    .iter_mut()
                    .position(|r| r.as_mut().is_some_and(|r| r.take(&want)))
                    .ok_or_else(|| Error::NoFit(format!("{name} does not fit")))?;
                answer.push(node as u32);
            }
        }
        Ok(Decision {
            nodes: answer,
            reason: Some("v0.4 first fit".into()),
        })
    }

    fn optimize(c: Cluster, _previous: Vec<JobAllocation>) -> Result<Vec<JobDecision>, Error> {
        Ok((0..c.jobs.key.len())
            .filter_map(|i| {
                let nodes: Vec<u32> = run(&c.jobs.current_starts, i)
                    .filter_map(|p| c.placements.get(p).copied())
                    .collect();
                let placed = !nodes.is_empty() && nodes.iter().all(|&n| n != u32::MAX);
                placed.then_some(JobDecision {
                    job: i as u32,
                    nodes,
                    reason: None,
                })
            })
            .collect())
    }
}

export!(V04);
