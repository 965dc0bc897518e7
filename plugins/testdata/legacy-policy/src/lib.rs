//! Test-only scheduling policy built against the frozen 0.2.0 contract (`wit/v0.2`) with plain
//! wit-bindgen, as a plugin from before 0.3 was: the host must keep loading and calling it.
//!
//! First fit, reading every part of the 0.2 input: each replica goes to the first node (in
//! index order) that is ready, has no NoSchedule taint, is not labelled `legacy/skip`, and still
//! has room for the task's requests, extended resources included. `optimize` keeps every placed
//! job where it is.

wit_bindgen::generate!({ path: "../../../wit/v0.2/plugins.wit", world: "scheduling-policy" });

use diorch::plugins::log::{Level, log};
use diorch::plugins::types::{Resources, Span, TaintEffect};

struct Legacy;

fn run<T>(list: &[T], span: Span) -> &[T] {
    let start = span.start as usize;
    list.get(start..start.saturating_add(span.len as usize))
        .unwrap_or(&[])
}

fn text(c: &Cluster, id: u32) -> &str {
    let i = id as usize;
    let start = if i == 0 {
        0
    } else {
        c.string_ends[i - 1] as usize
    };
    &c.strings[start..c.string_ends[i] as usize]
}

/// Free room of a node: cpu, memory, gpus and extended (name, amount).
struct Room {
    cpu: u64,
    memory: u64,
    gpus: u32,
    extended: Vec<(String, u64)>,
}

impl Room {
    fn of(c: &Cluster, r: &Resources) -> Room {
        Room {
            cpu: r.cpu_millis,
            memory: r.memory_bytes,
            gpus: r.gpus,
            extended: run(&c.quantities, r.extended)
                .iter()
                .map(|q| (text(c, q.name).to_string(), q.amount))
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

impl Guest for Legacy {
    fn allocate(c: Cluster) -> Result<Vec<u32>, Error> {
        let [job] = c.jobs.as_slice() else {
            return Err(Error::InvalidInput("one job expected".into()));
        };
        log(
            Level::Info,
            "legacy allocate",
            &[("job".into(), text(&c, job.key).into())],
        );
        let mut rooms: Vec<Option<Room>> = c
            .nodes
            .iter()
            .map(|n| {
                let usable = n.ready
                    && !run(&c.taints, n.taints)
                        .iter()
                        .any(|t| matches!(t.effect, TaintEffect::NoSchedule))
                    && !run(&c.labels, n.labels)
                        .iter()
                        .any(|l| text(&c, l.key) == "legacy/skip");
                usable.then(|| Room::of(&c, &n.free))
            })
            .collect();
        let mut answer = Vec::new();
        for task in run(&c.tasks, job.tasks) {
            let want = Room::of(&c, &task.requests);
            for _ in 0..task.replicas {
                let node = rooms
                    .iter_mut()
                    .position(|r| r.as_mut().is_some_and(|r| r.take(&want)))
                    .ok_or_else(|| Error::NoFit(format!("{} does not fit", text(&c, task.name))))?;
                answer.push(node as u32);
            }
        }
        Ok(answer)
    }

    fn optimize(c: Cluster, _previous: Vec<JobAllocation>) -> Result<Vec<JobAllocation>, Error> {
        Ok(c.jobs
            .iter()
            .enumerate()
            .filter_map(|(i, j)| {
                let current = run(&c.placements, j.current);
                let nodes: Option<Vec<u32>> = current.iter().copied().collect();
                nodes.filter(|n| !n.is_empty()).map(|nodes| JobAllocation {
                    job: i as u32,
                    nodes,
                })
            })
            .collect())
    }
}

export!(Legacy);
