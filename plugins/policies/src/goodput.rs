//! Goodput: an example policy that sizes a job's collectors by the throughput they were measured
//! to deliver (the profilings format is documented in docs/profilings.md).
//!
//! Owns: reading collector profilings, the gain rule, and the resize of a job's collector task in
//! a plan. Must not touch: how nodes are ranked (bin-pack's) or the keep-or-place loop (the
//! engine's), and the replica counts of tasks other than the job's single `collector` task.
//!
//! `allocate` is bin-pack's. `optimize` runs in two passes, jobs in the engine's order
//! (priority, then age, then key):
//! 1. every job keeps its current (or previously planned) placement, or is placed afresh by
//!    bin-pack, at its current size, except that collectors which gain nothing are dropped first,
//!    so the room they free serves the jobs after it;
//! 2. jobs whose collectors still pay off grow, one collector at a time, each on the node
//!    bin-pack ranks best among what pass 1 left. Growth therefore never displaces another job's
//!    placement, and when spare room is scarce the higher-priority job gets it first.
//!
//! How a resize is expressed. The plan is the WIT `job-allocation`: one node per replica in
//! global-rank order (tasks in spec order, then local rank), where `Job.tasks[].replicas` and
//! `Job.current` describe the job as it runs now. In a resized job every task but the collector
//! task keeps its `replicas`, so the collector count is the allocation length minus the other
//! tasks' replicas, and the collector block sits where the task sits in spec order. Grown
//! collectors are appended at the end of the block (new local ranks; existing ranks keep their
//! nodes); shrinking drops the highest local ranks (the last added go first). This is unambiguous
//! only because goodput changes at most one task, the job's only task of type `collector`: the
//! WIT itself cannot say which task a length change belongs to (see docs/profilings.md).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::Policy;
use crate::binpack::BinPack;
use crate::engine::{self, Overlay, Placing};
use crate::model::{Job, JobAllocation, NodeInfo, PolicyError, Task};

/// The task type goodput resizes.
pub const COLLECTOR: &str = "collector";

/// A step to more collectors pays off when each added collector adds more than nothing and at
/// least this share, in percent, of what an average collector delivered before the step. 5 %
/// treats a step as worth it until the curve is nearly flat: the collectors' cost to other jobs is
/// already bounded by priority order and by growing only onto spare room.
pub const MIN_GAIN_PERCENT: f64 = 5.0;

/// Bin-pack placement plus collector sizing by measured throughput.
#[derive(Debug, Default, Clone, Copy)]
pub struct Goodput;

/// A job's measured collector throughput: (collector count, env steps/s), sorted by count, with
/// at least one point. A single point shows no plateau yet, so it starts the probing (see
/// [`CollectorProfile::target`]); requiring two would leave a job that only ever reported its
/// current count stuck there.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectorProfile {
    points: Vec<(u32, f64)>,
}

impl CollectorProfile {
    /// The profile in a job's profilings text. `None` for anything that is not the documented
    /// format or has no usable measurement: a worker's bad report must not stop its
    /// job from being planned, so malformed input is "no profilings", never an error. Unknown
    /// keys are ignored; an unusable entry (count not a canonical decimal ≥ 1, throughput not a
    /// finite number ≥ 0) is skipped.
    pub fn parse(profilings: &str) -> Option<CollectorProfile> {
        let doc: Value = serde_json::from_str(profilings).ok()?;
        let collectors = doc.get("collectors")?.as_object()?;
        let mut points = BTreeMap::new();
        for (count, entry) in collectors {
            let Some(count) = canonical_count(count) else {
                continue;
            };
            let Some(throughput) = entry.get("throughput").and_then(Value::as_f64) else {
                continue;
            };
            if throughput.is_finite() && throughput >= 0.0 {
                points.insert(count, throughput);
            }
        }
        (!points.is_empty()).then(|| CollectorProfile {
            points: points.into_iter().collect(),
        })
    }

    /// The measurements, sorted by collector count.
    pub fn points(&self) -> &[(u32, f64)] {
        &self.points
    }

    /// The collector count to move to from `current`, before min/max clamping. Walking the
    /// measurements up from the smallest count, the first step that does not pay off marks the
    /// plateau: the target is that step's lower count (shrink or grow to it). When every measured
    /// step pays off the curve is still rising: the target is one collector past the largest
    /// measured count (a probe, whose measurement decides the next step), but never below
    /// `current`, since a count beyond the measurements has not been shown to gain nothing.
    pub fn target(&self, current: u32) -> u32 {
        // `parse` builds profiles with at least one point; an empty one would mean "keep".
        let Some(&(mut best, _)) = self.points.first() else {
            return current;
        };
        for step in self.points.windows(2) {
            if !pays_off(step[0], step[1]) {
                return best;
            }
            best = step[1].0;
        }
        current.max(best.saturating_add(1))
    }
}

/// A collector count as written in the profilings: decimal, ≥ 1, no sign or leading zeros (so
/// `"2"` and `"02"` cannot both claim count 2).
fn canonical_count(key: &str) -> Option<u32> {
    let n: u32 = key.parse().ok()?;
    (n >= 1 && n.to_string() == key).then_some(n)
}

/// The gain rule for a step from `a` to `b > a` collectors with throughputs `ta`, `tb`: the
/// marginal gain per added collector, `(tb - ta) / (b - a)`, must be positive and at least
/// `MIN_GAIN_PERCENT` % of the per-collector average before the step, `ta / a`.
fn pays_off((a, ta): (u32, f64), (b, tb): (u32, f64)) -> bool {
    let marginal = (tb - ta) / f64::from(b - a);
    let average = ta / f64::from(a);
    marginal > 0.0 && marginal * 100.0 >= MIN_GAIN_PERCENT * average
}

/// A change of one job's collector count.
#[derive(Debug, Clone, Copy)]
struct Resize {
    /// Index of the collector task in `job.tasks`.
    task: usize,
    /// Global rank of the collector task's first replica.
    start: usize,
    from: u32,
    to: u32,
}

impl Resize {
    /// The resize `job`'s profilings ask for, clamped to the task's min/max. `None` when there is
    /// nothing to change or nothing to go on: no profile, no collector task, more than one (which
    /// one the profile measures is unknown), or min above max.
    fn of(job: &Job) -> Option<Resize> {
        let mut collectors = job
            .tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| t.task_type == COLLECTOR);
        let (index, task) = collectors.next()?;
        if collectors.next().is_some() || task.min_replicas > task.max_replicas {
            return None;
        }
        let profile = CollectorProfile::parse(&job.profilings)?;
        // clamp cannot panic: min <= max was checked above.
        let to = profile
            .target(task.replicas)
            .clamp(task.min_replicas, task.max_replicas);
        let start = job.tasks[..index].iter().map(|t| t.replicas as usize).sum();
        (to != task.replicas).then_some(Resize {
            task: index,
            start,
            from: task.replicas,
            to,
        })
    }

    fn shrinks(&self) -> bool {
        self.to < self.from
    }

    /// Why `entry` resizes the job: the measured step the change rests on, and where the new
    /// collectors run. The entry's length says how far growth got (it stops when nothing fits).
    fn reason<N: NodeInfo>(&self, job: &Job, nodes: &[N], entry: &JobAllocation) -> Option<String> {
        let others = job.total_replicas() - self.from as usize;
        let to = entry.nodes.len().checked_sub(others)?;
        if to == self.from as usize {
            return None;
        }
        let profile = CollectorProfile::parse(&job.profilings)?;
        let steps = profile.points().windows(2);
        let step = if self.shrinks() {
            steps.clone().find(|s| s[0].0 as usize == to)
        } else {
            steps.clone().find(|s| s[1].0 as usize == to)
        }
        .or_else(|| steps.last());
        let head = format!("collectors {} → {to}", self.from);
        let Some(&[(a, ta), (b, tb)]) = step else {
            let a = profile.points().first().map_or(0, |p| p.0);
            return Some(format!(
                "{head}: one measurement so far ({a} collectors), probing the next count"
            ));
        };
        let per_added = (tb - ta) / f64::from(b - a);
        let average = ta / f64::from(a);
        let percent = if average > 0.0 {
            format!("{:+.0} %", 100.0 * per_added / average)
        } else {
            format!("{per_added:+.1} steps/s")
        };
        Some(if self.shrinks() {
            format!(
                "{head}: the measured step {a} → {b} collectors added {percent} per collector, \
                 under the {MIN_GAIN_PERCENT} % that pays off"
            )
        } else {
            let first_new = self.start + self.from as usize;
            let added = &entry.nodes[first_new.min(entry.nodes.len())..self.start + to];
            let on = crate::explain::tally(added)
                .iter()
                .map(|&(n, c)| {
                    let name = nodes.get(n as usize).map_or("?", NodeInfo::name);
                    format!("{name}×{c}")
                })
                .collect::<Vec<_>>()
                .join(", ");
            format!(
                "{head}: {percent} throughput per added collector in the measured step \
                 {a} → {b}; new ones on {on}"
            )
        })
    }

    /// `ranks` (one entry per replica of the job as it runs now) without the dropped collectors,
    /// or `None` when `ranks` has another length and so does not describe this job.
    fn shrink<T: Clone>(&self, ranks: &[T], total: usize) -> Option<Vec<T>> {
        if ranks.len() != total {
            return None;
        }
        let kept = self.start + self.to as usize;
        let dropped_end = self.start + self.from as usize;
        Some(
            ranks[..kept]
                .iter()
                .chain(&ranks[dropped_end..])
                .cloned()
                .collect(),
        )
    }

    /// `job` with its collector task shrunk to `to` and its current placement to match.
    fn shrunk_job(&self, job: &Job) -> Job {
        let mut sized = job.clone();
        sized.tasks[self.task].replicas = self.to;
        sized.current = self
            .shrink(&job.current, job.total_replicas())
            .unwrap_or_default();
        sized
    }

    /// Adds collectors to `alloc` one at a time at the end of the collector block, each on the
    /// node bin-pack ranks best among what `free` has left; stops at `to` or when nothing fits.
    fn grow<N: NodeInfo>(
        &self,
        alloc: &mut Vec<u32>,
        task: &Task,
        nodes: &[N],
        free: &mut Overlay,
    ) {
        let first_new = self.start + self.from as usize;
        for at in first_new..first_new + self.to.saturating_sub(self.from) as usize {
            let ctx = Placing {
                nodes,
                placed: alloc,
            };
            let Some(i) = engine::best_node(&BinPack, &ctx, free, task) else {
                break;
            };
            // Nodes arrive indexed by u32 in the WIT contract, so this cannot fail in practice.
            let Ok(index) = u32::try_from(i) else {
                break;
            };
            free.take(nodes, i, &task.requests);
            alloc.insert(at, index);
        }
    }
}

impl Policy for Goodput {
    fn allocate<N: NodeInfo>(&self, job: &Job, nodes: &[N]) -> Result<Vec<u32>, PolicyError> {
        BinPack.allocate(job, nodes)
    }

    fn explain_allocate<N: NodeInfo>(
        &self,
        job: &Job,
        nodes: &[N],
        answer: &[u32],
    ) -> Option<String> {
        BinPack.explain_allocate(job, nodes, answer)
    }

    fn optimize<N: NodeInfo>(
        &self,
        jobs: &[Job],
        nodes: &[N],
        previous: &[JobAllocation],
    ) -> Result<Vec<JobAllocation>, PolicyError> {
        let resizes: Vec<Option<Resize>> = jobs.iter().map(Resize::of).collect();

        // Pass 1: keep or place every job at its size, shrunk where collectors gain nothing. The
        // clones cost one copy of the job list per re-plan, which runs every few seconds at most.
        let sized: Vec<Job> = jobs
            .iter()
            .zip(&resizes)
            .map(|(job, resize)| match resize {
                Some(r) if r.shrinks() => r.shrunk_job(job),
                _ => job.clone(),
            })
            .collect();
        let sized_previous: Vec<JobAllocation> = previous
            .iter()
            .filter_map(|p| {
                let job = jobs.get(p.job as usize)?;
                match resizes[p.job as usize] {
                    Some(r) if r.shrinks() => Some(JobAllocation {
                        job: p.job,
                        nodes: r.shrink(&p.nodes, job.total_replicas())?,
                        reason: None,
                    }),
                    _ => Some(p.clone()),
                }
            })
            .collect();
        let mut free = Overlay::default();
        let mut plan = engine::optimize(&BinPack, &sized, nodes, &sized_previous, &mut free)?;

        // Pass 2: growth onto what pass 1 left, in the same order. A job left out of the plan
        // (it fits nowhere) has nothing to grow.
        for j in engine::by_priority(jobs) {
            let Some(r) = resizes[j].filter(|r| r.to > r.from) else {
                continue;
            };
            let Ok(at) = plan.binary_search_by_key(&j, |p| p.job as usize) else {
                continue;
            };
            r.grow(
                &mut plan[at].nodes,
                &jobs[j].tasks[r.task],
                nodes,
                &mut free,
            );
        }
        for entry in &mut plan {
            let j = entry.job as usize;
            if let (Some(job), Some(Some(r))) = (jobs.get(j), resizes.get(j)) {
                entry.reason = r.reason(job, nodes, entry);
            }
        }
        crate::explain::replans("goodput", jobs, nodes, &mut plan);
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Node, Resources};
    use crate::testutil::*;

    /// `{"collectors": {"<n>": {"throughput": <t>}, ...}}` from (count, throughput) pairs.
    fn profile(points: &[(u32, f64)]) -> String {
        let entries: Vec<String> = points
            .iter()
            .map(|(n, t)| format!("\"{n}\": {{\"throughput\": {t}}}"))
            .collect();
        format!("{{\"collectors\": {{{}}}}}", entries.join(", "))
    }

    /// 100 steps/s per collector from 1 to `upto` collectors: every step pays off.
    fn linear(upto: u32) -> String {
        profile(
            &(1..=upto)
                .map(|n| (n, 100.0 * f64::from(n)))
                .collect::<Vec<_>>(),
        )
    }

    /// A job of only collectors (2 CPUs, 4 GiB each) with the given bounds and profilings.
    fn collectors(key: &str, replicas: u32, min: u32, max: u32, profilings: &str) -> Job {
        let mut j = job(key, &[("collector", replicas, 0)]);
        j.tasks[0].min_replicas = min;
        j.tasks[0].max_replicas = max;
        j.profilings = profilings.into();
        j
    }

    /// A learner (1 GPU) then collectors, as DI-engine jobs usually are.
    fn elastic(key: &str, replicas: u32, min: u32, max: u32, profilings: &str) -> Job {
        let mut j = job(key, &[("learner", 1, 1), ("collector", replicas, 0)]);
        j.tasks[1].min_replicas = min;
        j.tasks[1].max_replicas = max;
        j.profilings = profilings.into();
        j
    }

    /// A CPU-only node with room for `slots` replicas of 2 CPUs.
    fn slots(name: &str, slots: u64) -> Node {
        let mut n = cpu_node(name);
        n.free = Resources::new(2_000 * slots, 128 << 30, 0);
        n
    }

    fn only(plan: &[JobAllocation], job: u32) -> &[u32] {
        &plan
            .iter()
            .find(|p| p.job == job)
            .unwrap_or_else(|| panic!("job {job} missing from {plan:?}"))
            .nodes
    }

    #[test]
    fn parses_the_documented_format_and_ignores_unknown_keys() {
        let text = r#"{
            "collectors": {
                "2": {"throughput": 1200.0, "env": "atari", "at": "2024-05-01T10:00:00Z"},
                "4": {"throughput": 2100}
            },
            "learner": {"step_time_ms": 120}
        }"#;
        let p = CollectorProfile::parse(text).unwrap();
        assert_eq!(p.points(), &[(2, 1200.0), (4, 2100.0)]);
    }

    #[test]
    fn unusable_entries_are_skipped_and_malformed_profilings_are_none() {
        let text = r#"{"collectors": {
            "1": {"throughput": 100}, "3": {"throughput": 300},
            "0": {"throughput": 5}, "02": {"throughput": 7}, "+4": {"throughput": 9},
            "x": {"throughput": 1}, "5": {"throughput": -1}, "6": {"throughput": "fast"},
            "7": 700, "8": {}
        }}"#;
        let p = CollectorProfile::parse(text).unwrap();
        assert_eq!(p.points(), &[(1, 100.0), (3, 300.0)]);
        for bad in [
            "",
            "not json",
            "[]",
            "null",
            r#"{"collectors": [{"replicas": 2, "throughput": 1200.0}]}"#,
            r#"{"collectors": "many"}"#,
            r#"{"collector": {"1": {"throughput": 1}, "2": {"throughput": 2}}}"#,
            r#"{"collectors": {}}"#,
            r#"{"collectors": {"0": {"throughput": 1200.0}}}"#,
            r#"{"collectors": {"1": {"throughput": 1e999}, "2": {"throughput": 2}}}"#,
            r#"{"collectors": {"1": {"throughput": 1}, "2": {"throughput": 2}}"#,
        ] {
            assert_eq!(CollectorProfile::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_gain_rule_and_its_threshold() {
        // From 2 collectors at 1000/s (500 each), 5 % is 25/s per added collector.
        assert!(pays_off((2, 1000.0), (4, 1050.0)));
        assert!(!pays_off((2, 1000.0), (4, 1049.0)));
        // A drop, or no gain even from nothing, never pays off.
        assert!(!pays_off((2, 1000.0), (3, 900.0)));
        assert!(!pays_off((1, 0.0), (2, 0.0)));
        assert!(pays_off((1, 0.0), (2, 10.0)));
    }

    #[test]
    fn target_probes_past_a_rising_curve_and_stops_at_a_plateau() {
        let rising = CollectorProfile::parse(&linear(4)).unwrap();
        assert_eq!(rising.target(2), 5);
        assert_eq!(rising.target(5), 5, "the probe is pending: wait for it");
        assert_eq!(rising.target(9), 9, "unmeasured counts are not shrunk");
        let flat = CollectorProfile::parse(&profile(&[(2, 1000.0), (4, 2000.0), (6, 2010.0)]));
        let flat = flat.unwrap();
        assert_eq!(flat.target(6), 4);
        assert_eq!(flat.target(9), 4);
        assert_eq!(flat.target(1), 4);
        // One measurement shows no plateau: probe one past it.
        let single = CollectorProfile::parse(&profile(&[(2, 1200.0)])).unwrap();
        assert_eq!(
            (single.target(2), single.target(1), single.target(4)),
            (3, 3, 4)
        );
        // The first flat step ends the walk even if a later one rises again (noise).
        let bumpy = profile(&[(1, 100.0), (2, 101.0), (3, 300.0)]);
        assert_eq!(CollectorProfile::parse(&bumpy).unwrap().target(3), 1);
    }

    /// The worked example of docs/profilings.md, report by report.
    #[test]
    fn the_documented_worked_example() {
        let nodes = vec![gpu_node("gpu", 8), cpu_node("cpu")];
        let mut j = elastic("default/my-job", 2, 1, 8, "");
        j.current = vec![Some(0), Some(1), Some(1)];
        let mut reports = BTreeMap::new();
        for (count, throughput, next) in [
            (2, 1200.0, 3),
            (3, 1750.0, 4),
            (4, 2100.0, 5),
            (5, 2120.0, 4),
        ] {
            assert_eq!(j.tasks[1].replicas, count);
            reports.insert(count, throughput);
            j.profilings = profile(&reports.clone().into_iter().collect::<Vec<_>>());
            let plan = Goodput
                .optimize(std::slice::from_ref(&j), &nodes, &[])
                .unwrap();
            let alloc = only(&plan, 0);
            assert_eq!(
                alloc.len(),
                1 + next as usize,
                "after the report at {count}"
            );
            assert!(alloc[1..].iter().all(|&n| n == 1));
            j.tasks[1].replicas = next;
            j.current = alloc.iter().copied().map(Some).collect();
        }
        // Settled: 4 is the plateau's lower end.
        let plan = Goodput
            .optimize(std::slice::from_ref(&j), &nodes, &[])
            .unwrap();
        assert_eq!(only(&plan, 0).len(), 5);
    }

    #[test]
    fn allocate_is_bin_packs() {
        let nodes = vec![gpu_node("a", 8), gpu_node_used("b", 8, 6), cpu_node("c")];
        let j = elastic("ns/a", 3, 1, 8, &linear(4));
        assert_eq!(Goodput.allocate(&j, &nodes), BinPack.allocate(&j, &nodes));
    }

    #[test]
    fn grows_while_gain_is_high_keeping_current_nodes() {
        let nodes = vec![gpu_node("gpu", 8), cpu_node("cpu-0"), cpu_node("cpu-1")];
        let mut j = elastic("ns/a", 2, 1, 10, &linear(4));
        j.current = vec![Some(0), Some(2), Some(2)];
        let plan = Goodput.optimize(&[j], &nodes, &[]).unwrap();
        // Measured up to 4 and still rising: 4, plus one probe. New ranks follow the old ones.
        assert_eq!(only(&plan, 0), &[0, 2, 2, 2, 2, 2]);
        // 3 → 4 added 100 steps/s against an average of 100: +100 %.
        assert_eq!(
            plan[0].reason.as_deref(),
            Some(
                "collectors 2 → 5: +100 % throughput per added collector in the measured step \
                 3 → 4; new ones on cpu-1×3"
            )
        );
    }

    #[test]
    fn resized_layout_of_the_docs() {
        let nodes = vec![gpu_node("gpu", 8), cpu_node("cpu-0"), cpu_node("cpu-1")];
        let mut j = job(
            "ns/a",
            &[("learner", 1, 1), ("collector", 2, 0), ("evaluator", 1, 0)],
        );
        j.tasks[1].max_replicas = 3;
        j.profilings = linear(2);
        j.current = [0, 1, 1, 2].map(Some).to_vec();
        let plan = Goodput.optimize(&[j], &nodes, &[]).unwrap();
        assert_eq!(only(&plan, 0), &[0, 1, 1, 1, 2]);
    }

    #[test]
    fn growth_stops_at_max_replicas() {
        let nodes = vec![gpu_node("gpu", 8), cpu_node("cpu")];
        let j = elastic("ns/a", 2, 1, 3, &linear(8));
        let plan = Goodput.optimize(&[j], &nodes, &[]).unwrap();
        assert_eq!(only(&plan, 0).len(), 1 + 3);
    }

    #[test]
    fn growth_stops_at_capacity() {
        // One node: the learner and collectors share 6 slots of 2 CPUs.
        let mut node = gpu_node("only", 1);
        node.free = Resources::new(12_000, 128 << 30, 1);
        let nodes = vec![node];
        let mut j = elastic("ns/a", 2, 1, 10, &linear(8));
        j.current = vec![Some(0); 3];
        let plan = Goodput
            .optimize(std::slice::from_ref(&j), &nodes, &[])
            .unwrap();
        assert_eq!(only(&plan, 0), &[0; 6]);
        let mut grown = j.clone();
        grown.tasks[1].replicas = 5;
        assert_capacity(&grown, &nodes, only(&plan, 0));
    }

    #[test]
    fn shrinks_the_last_collectors_when_gain_is_flat() {
        let nodes = vec![gpu_node("gpu", 8), cpu_node("cpu-0"), cpu_node("cpu-1")];
        let flat = profile(&[(2, 1000.0), (4, 2000.0), (6, 2010.0)]);
        let mut j = job(
            "ns/a",
            &[("learner", 1, 1), ("collector", 6, 0), ("evaluator", 1, 0)],
        );
        j.tasks[1].max_replicas = 8;
        j.profilings = flat;
        j.current = [0, 1, 2, 1, 2, 1, 2, 1].map(Some).to_vec();
        let plan = Goodput.optimize(&[j], &nodes, &[]).unwrap();
        // Collector ranks 4 and 5 go; the evaluator keeps its node after the shorter block.
        assert_eq!(only(&plan, 0), &[0, 1, 2, 1, 2, 1]);
        // 4 → 6 added 5 steps/s per collector against an average of 500: +1 %.
        assert_eq!(
            plan[0].reason.as_deref(),
            Some(
                "collectors 6 → 4: the measured step 4 → 6 collectors added +1 % per collector, \
                 under the 5 % that pays off"
            )
        );
    }

    #[test]
    fn shrinking_follows_the_previous_plan_when_there_is_no_current() {
        let nodes = vec![gpu_node("gpu", 8), cpu_node("cpu-0"), cpu_node("cpu-1")];
        let flat = profile(&[(1, 1000.0), (2, 1001.0)]);
        let j = elastic("ns/a", 3, 1, 8, &flat);
        let previous = [JobAllocation {
            job: 0,
            nodes: vec![0, 2, 1, 2],
            reason: None,
        }];
        let plan = Goodput.optimize(&[j], &nodes, &previous).unwrap();
        assert_eq!(only(&plan, 0), &[0, 2]);
    }

    #[test]
    fn respects_min_replicas() {
        let nodes = vec![gpu_node("gpu", 8), cpu_node("cpu")];
        let flat = profile(&[(1, 1000.0), (2, 1000.0), (3, 1000.0)]);
        let j = elastic("ns/a", 3, 2, 8, &flat);
        let plan = Goodput.optimize(&[j], &nodes, &[]).unwrap();
        assert_eq!(only(&plan, 0).len(), 1 + 2);
        // And grows to min even when the curve says fewer would do.
        let j = elastic("ns/b", 1, 3, 8, &flat);
        let plan = Goodput.optimize(&[j], &nodes, &[]).unwrap();
        assert_eq!(only(&plan, 0).len(), 1 + 3);
    }

    #[test]
    fn no_usable_profilings_keep_sizes_and_plan_like_bin_pack() {
        let nodes = vec![
            gpu_node("gpu", 8),
            gpu_node_used("half", 8, 4),
            cpu_node("cpu"),
        ];
        for profilings in [
            "",
            "{",
            r#"{"learner": {"step_time_ms": 120}}"#,
            r#"{"collectors": {"4": {"throughput": -2100}}}"#,
            r#"{"collectors": {"1": {"throughput": "1"}, "2": {"throughput": null}}}"#,
        ] {
            let mut a = elastic("ns/a", 2, 1, 10, profilings);
            a.current = vec![Some(1), Some(2), Some(1)];
            let b = elastic("ns/b", 4, 1, 10, profilings);
            let jobs = [a, b];
            let placements = |plan: Vec<JobAllocation>| -> Vec<(u32, Vec<u32>)> {
                plan.into_iter().map(|e| (e.job, e.nodes)).collect()
            };
            let plan = Goodput.optimize(&jobs, &nodes, &[]).unwrap();
            assert_eq!(
                placements(plan.clone()),
                placements(BinPack.optimize(&jobs, &nodes, &[]).unwrap()),
                "{profilings}"
            );
            // The same words as bin-pack's, under goodput's name.
            assert_eq!(
                plan[1].reason.as_deref(),
                Some("re-planned by goodput: 0 of 5 replicas move; now half×1, cpu×4"),
                "{profilings}"
            );
            assert_eq!(only(&plan, 0), &[1, 2, 1]);
            assert_eq!(only(&plan, 1).len(), 5);
        }
    }

    #[test]
    fn two_collector_tasks_are_left_alone() {
        let nodes = vec![gpu_node("gpu", 8), cpu_node("cpu")];
        let mut j = job("ns/a", &[("collector", 2, 0), ("other", 2, 0)]);
        j.tasks[1].task_type = COLLECTOR.into();
        j.tasks[0].max_replicas = 10;
        j.profilings = linear(8);
        let plan = Goodput.optimize(&[j], &nodes, &[]).unwrap();
        assert_eq!(only(&plan, 0).len(), 4);
    }

    #[test]
    fn scarce_room_goes_to_the_higher_priority_job_first() {
        // 6 slots; 2 + 3 in use, one spare, both jobs want to grow.
        let nodes = vec![slots("n", 6)];
        let mut low = collectors("ns/low", 3, 1, 10, &linear(8));
        low.current = vec![Some(0); 3];
        low.age_seconds = 1_000;
        let mut high = collectors("ns/high", 2, 1, 10, &linear(8));
        high.current = vec![Some(0); 2];
        high.priority = 5;
        let plan = Goodput
            .optimize(&[low.clone(), high.clone()], &nodes, &[])
            .unwrap();
        assert_eq!(only(&plan, 0).len(), 3, "low keeps its size");
        assert_eq!(only(&plan, 1).len(), 3, "high gets the spare slot");
        // Equal priority: the older job first.
        high.priority = 0;
        let plan = Goodput.optimize(&[low, high], &nodes, &[]).unwrap();
        assert_eq!((only(&plan, 0).len(), only(&plan, 1).len()), (4, 2));
    }

    #[test]
    fn growth_never_displaces_another_jobs_placement() {
        // Full node: the high-priority job wants 8 more collectors, the low one keeps its place.
        let nodes = vec![slots("n", 6)];
        let mut low = collectors("ns/low", 4, 1, 4, "");
        low.current = vec![Some(0); 4];
        let mut high = collectors("ns/high", 2, 1, 10, &linear(8));
        high.current = vec![Some(0); 2];
        high.priority = 5;
        let plan = Goodput.optimize(&[low, high], &nodes, &[]).unwrap();
        assert_eq!(only(&plan, 0), &[0; 4]);
        assert_eq!(only(&plan, 1), &[0; 2]);
    }

    #[test]
    fn shrinking_frees_room_for_lower_priority_jobs() {
        let nodes = vec![slots("n", 6)];
        let flat = profile(&[(2, 1000.0), (4, 1010.0)]);
        let mut high = collectors("ns/high", 4, 1, 4, &flat);
        high.current = vec![Some(0); 4];
        high.priority = 5;
        let low = collectors("ns/low", 4, 4, 4, "");
        let jobs = [high, low];
        // Without the shrink the low job does not fit.
        assert_eq!(BinPack.optimize(&jobs, &nodes, &[]).unwrap().len(), 1);
        let plan = Goodput.optimize(&jobs, &nodes, &[]).unwrap();
        assert_eq!(only(&plan, 0), &[0; 2]);
        assert_eq!(only(&plan, 1), &[0; 4]);
    }

    /// A tiny deterministic generator (the plugin workspace has no proptest): xorshift64*.
    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        fn chance(&mut self, percent: u64) -> bool {
            self.below(100) < percent
        }
    }

    fn random_profilings(g: &mut Gen) -> String {
        match g.below(5) {
            0 => String::new(),
            1 => "{\"collectors\": [1, 2]".into(),
            _ => {
                let points: Vec<(u32, f64)> = (0..g.below(6))
                    .map(|_| (g.below(9) as u32, g.below(5_000) as f64))
                    .collect();
                profile(&points)
            }
        }
    }

    fn random_case(g: &mut Gen) -> (Vec<Job>, Vec<Node>, Vec<JobAllocation>) {
        let nodes: Vec<Node> = (0..1 + g.below(6))
            .map(|i| {
                let gpus = [0, 1, 8][g.below(3) as usize];
                let mut n = gpu_node(&format!("n{i}"), gpus);
                n.free = Resources::new(2_000 * g.below(12), 4 << 30 << g.below(5), gpus);
                n.ready = !g.chance(10);
                if g.chance(10) {
                    n.taints.push(taint(crate::TaintEffect::NoSchedule));
                }
                if g.chance(10) {
                    n.taints.push(taint(crate::TaintEffect::PreferNoSchedule));
                }
                n
            })
            .collect();
        let jobs: Vec<Job> = (0..1 + g.below(5))
            .map(|j| {
                let types = ["learner", "collector", "evaluator", "collector"];
                let tasks: Vec<(&str, u32, u32)> = (0..1 + g.below(3))
                    .map(|_| {
                        let t = types[g.below(4) as usize];
                        (t, g.below(5) as u32, u32::from(t == "learner"))
                    })
                    .collect();
                let mut job = job(&format!("ns/j{j}"), &tasks);
                for t in &mut job.tasks {
                    t.min_replicas = g.below(4) as u32;
                    t.max_replicas = g.below(9) as u32;
                }
                job.priority = g.below(3) as i32;
                job.age_seconds = g.below(3);
                job.profilings = random_profilings(g);
                if g.chance(60) {
                    job.current = (0..job.total_replicas())
                        .map(|_| (!g.chance(10)).then(|| g.below(nodes.len() as u64 + 1) as u32))
                        .collect();
                }
                job
            })
            .collect();
        let mut previous = Vec::new();
        for (j, job) in jobs.iter().enumerate() {
            if g.chance(30) {
                let len = job.total_replicas() + g.below(2) as usize;
                previous.push(JobAllocation {
                    job: j as u32,
                    nodes: (0..len)
                        .map(|_| g.below(nodes.len() as u64) as u32)
                        .collect(),
                    reason: None,
                });
            }
        }
        (jobs, nodes, previous)
    }

    #[test]
    fn every_plan_is_valid_on_generated_cases() {
        let mut g = Gen(0x9E37_79B9_7F4A_7C15);
        let mut resized = 0;
        for case in 0..3_000 {
            let (jobs, nodes, previous) = random_case(&mut g);
            let plan = Goodput.optimize(&jobs, &nodes, &previous).unwrap();
            assert_eq!(plan, Goodput.optimize(&jobs, &nodes, &previous).unwrap());
            let mut free: Vec<Resources> = nodes.iter().map(|n| n.free.clone()).collect();
            let mut seen = vec![false; jobs.len()];
            for p in &plan {
                let job = &jobs[p.job as usize];
                assert!(
                    !std::mem::replace(&mut seen[p.job as usize], true),
                    "case {case}"
                );
                // The per-task counts the documented layout implies.
                let mut sized = job.clone();
                if let Some(r) = Resize::of(job) {
                    let others = job.total_replicas() - r.from as usize;
                    let count = p.nodes.len() as u32 - others as u32;
                    if r.shrinks() {
                        assert_eq!(count, r.to, "case {case}: {job:?} -> {p:?}");
                    } else {
                        assert!((r.from..=r.to).contains(&count), "case {case}");
                    }
                    let task = &job.tasks[r.task];
                    assert!(r.to >= task.min_replicas && r.to <= task.max_replicas);
                    resized += usize::from(count != r.from);
                    sized.tasks[r.task].replicas = count;
                }
                assert_eq!(p.nodes.len(), sized.total_replicas(), "case {case}");
                for (&n, task) in p.nodes.iter().zip(sized.replicas()) {
                    let node = &nodes[n as usize];
                    assert!(
                        node.schedulable(),
                        "case {case}: {} not schedulable",
                        node.name
                    );
                    let left = &mut free[n as usize];
                    assert!(left.fits(&task.requests), "case {case}: {} full", node.name);
                    left.take(&task.requests);
                }
            }
            assert!(plan.windows(2).all(|w| w[0].job < w[1].job));
        }
        assert!(resized > 300, "the generator resizes too rarely: {resized}");
    }
}
