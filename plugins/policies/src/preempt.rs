//! Preemption on the plain model: which running jobs of lower priority give room to a job that
//! does not fit. Elastic tasks shrink first (toward their `min_replicas`, highest local ranks
//! first, so survivors keep their names); whole jobs are evicted only when shrinking everything
//! allowed is not enough, the cheapest first; then every eviction and removed replica that the
//! job can start without is given back. The operator's built-in policies answer with it; a Rust
//! policy can too.
//!
//! Owns: the victim choice. Must not touch: who may be preempted at all beyond the rules every
//! answer must keep (the host says, per job, whether its minimum run time and cool-down allow a
//! shrink or an eviction: [`Running`]), and carrying the answer out.

use std::collections::HashSet;

use crate::Policy;
use crate::model::{Job, Node, Resources};

/// How room may be taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Whole jobs only.
    Evict,
    /// Elastic replicas first, whole jobs only if that is not enough.
    Shrink,
}

/// A running job the host offers as a possible victim.
#[derive(Clone, Debug)]
pub struct Running {
    /// Its model, with `current` (the node of each replica, in slot order).
    pub job: Job,
    /// The host allows removing some of its elastic replicas (not in a cool-down).
    pub may_shrink: bool,
    /// The host allows evicting it (ran its minimum run time, not in a cool-down).
    pub may_evict: bool,
    /// Seconds of work an eviction loses: since its last checkpoint, else since its pods
    /// started (the host bounds a reported checkpoint by the job's own run time).
    pub lost_seconds: u64,
    /// Seconds since its last reported checkpoint (bounded by its run); `None`: it never
    /// reported one. The built-in choice ranks by `lost_seconds` only; a plugin may use it.
    pub checkpoint_age_seconds: Option<u64>,
}

impl Running {
    /// GPUs the job holds (placed replicas only).
    pub fn gpus(&self) -> u64 {
        self.placed_slots()
            .map(|(_, task)| u64::from(self.job.tasks[task].requests.gpus))
            .sum()
    }

    /// GPU-seconds an eviction loses.
    pub fn gpu_seconds_lost(&self) -> u64 {
        self.gpus().saturating_mul(self.lost_seconds)
    }

    /// What ranks victims by the work they lose: GPU-seconds, then CPU-core-seconds (so a
    /// CPU-only job does not look free to evict).
    fn cost(&self) -> (u64, u64) {
        let cores: u64 = self
            .placed_slots()
            .map(|(_, task)| self.job.tasks[task].requests.cpu_millis)
            .sum::<u64>()
            / 1000;
        (
            self.gpu_seconds_lost(),
            cores.saturating_mul(self.lost_seconds),
        )
    }

    /// (slot, task index) of every replica with a node.
    fn placed_slots(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let mut tasks = Vec::with_capacity(self.job.total_replicas());
        for (t, task) in self.job.tasks.iter().enumerate() {
            tasks.extend(std::iter::repeat_n(t, task.replicas as usize));
        }
        tasks
            .into_iter()
            .enumerate()
            .filter(|(slot, _)| matches!(self.job.current.get(*slot), Some(Some(_))))
    }
}

/// A victim shrunk: its new replica count per task (spec order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shrink {
    /// Index into the `running` list.
    pub job: usize,
    pub replicas: Vec<u32>,
}

/// The room made for a job, and where it goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preemption {
    /// The job's allocation on the room made (one node index per replica, rank order).
    pub nodes: Vec<u32>,
    pub shrinks: Vec<Shrink>,
    /// Indices into the `running` list.
    pub evictions: Vec<usize>,
}

/// The least preemption that lets `urgent` start at once on `nodes`, as `policy` places it;
/// `None` when none does (a preemption that would not let it start is never made). Only
/// preemptible jobs of strictly lower priority are touched, as `running` allows.
pub fn preempt<P: Policy>(
    policy: &P,
    urgent: &Job,
    running: &[Running],
    nodes: &[Node],
    mode: Mode,
) -> Option<Preemption> {
    let victim = |r: &Running| r.job.preemptible && r.job.priority < urgent.priority;
    let mut room = Room {
        policy,
        urgent,
        running,
        free: nodes.to_vec(),
        removed: Vec::new(),
        gone: HashSet::new(),
        evicted: Vec::new(),
    };

    // Shrink: lowest priority first, highest local ranks first, until the job fits.
    let mut fits = false;
    if mode == Mode::Shrink {
        let mut order: Vec<usize> = (0..running.len())
            .filter(|&i| victim(&running[i]) && running[i].may_shrink)
            .collect();
        order.sort_by(|&a, &b| {
            let (ja, jb) = (&running[a].job, &running[b].job);
            ja.priority.cmp(&jb.priority).then(ja.key.cmp(&jb.key))
        });
        let shrinkable: Vec<(usize, usize, usize)> = order
            .iter()
            .flat_map(|&i| shrinkable(&running[i].job).map(move |(t, slot)| (i, t, slot)))
            .collect();
        // One check with everything shrunk first: when that is not enough, the eviction below
        // starts from it, without a policy call per replica.
        for &(i, t, slot) in &shrinkable {
            room.remove(i, t, slot);
        }
        if room.fits() {
            while !room.removed.is_empty() {
                room.restore(room.removed.len() - 1);
            }
            for (i, t, slot) in shrinkable {
                if room.remove(i, t, slot) && room.fits() {
                    fits = true;
                    break;
                }
            }
        }
    }

    // Evict: only when shrinking all that may shrink is not enough; least work lost first.
    if !fits {
        let mut order: Vec<usize> = (0..running.len())
            .filter(|&i| victim(&running[i]) && running[i].may_evict)
            .collect();
        order.sort_by(|&a, &b| {
            let (ra, rb) = (&running[a], &running[b]);
            ra.job
                .priority
                .cmp(&rb.job.priority)
                .then(ra.cost().cmp(&rb.cost()))
                .then(ra.job.key.cmp(&rb.job.key))
        });
        // Nothing is made when even every allowed eviction is not enough.
        for &i in &order {
            room.evict(i);
        }
        if !room.fits() {
            return None;
        }
        for &i in order.iter().rev() {
            room.unevict(i);
        }
        room.evicted.clear();
        for i in order {
            room.evict(i);
            if room.fits() {
                break;
            }
        }
        // Give back every eviction the job can start without, dearest first.
        for e in (0..room.evicted.len()).rev() {
            let i = room.evicted[e];
            room.unevict(i);
            if room.fits() {
                room.evicted.remove(e);
            } else {
                room.evict(i);
            }
        }
    }

    // Give back removed replicas, lowest local rank of each task first: a task's removed ranks
    // stay the highest ones, so survivors keep their names.
    let mut stuck: Vec<(usize, usize)> = Vec::new();
    for k in (0..room.removed.len()).rev() {
        let (i, t, slot) = room.removed[k];
        if room.evicted.contains(&i) || stuck.contains(&(i, t)) {
            continue;
        }
        room.restore(k);
        if !room.fits() {
            room.remove(i, t, slot);
            stuck.push((i, t));
        }
    }

    let nodes = policy.allocate(urgent, &room.free).ok()?;
    let mut shrinks: Vec<Shrink> = Vec::new();
    for &(i, t, _) in &room.removed {
        if room.evicted.contains(&i) {
            continue;
        }
        let at = match shrinks.iter().position(|s| s.job == i) {
            Some(at) => at,
            None => {
                shrinks.push(Shrink {
                    job: i,
                    replicas: running[i].job.tasks.iter().map(|t| t.replicas).collect(),
                });
                shrinks.len() - 1
            }
        };
        shrinks[at].replicas[t] -= 1;
    }
    shrinks.sort_by_key(|s| s.job);
    let mut evictions = room.evicted;
    evictions.sort_unstable();
    Some(Preemption {
        nodes,
        shrinks,
        evictions,
    })
}

/// Checks `plan`, an answer for `urgent` over `running` on `nodes`, against the rules no answer
/// may bend, and returns the nodes with the room it frees: every victim a preemptible job of
/// lower priority the host allowed that action for, at most once; a shrink one count per task,
/// each between the task's minimum (at least 1) and its current count, at least one lower. The
/// caller still checks that `plan.nodes` fit the returned nodes.
pub fn check(
    urgent: &Job,
    running: &[Running],
    nodes: &[Node],
    plan: &Preemption,
) -> Result<Vec<Node>, String> {
    let mut seen = HashSet::new();
    let victim = |i: usize, what: &str| -> Result<&Running, String> {
        let r = running
            .get(i)
            .ok_or_else(|| format!("{what} names candidate {i} of {}", running.len()))?;
        if !r.job.preemptible || r.job.priority >= urgent.priority {
            return Err(format!(
                "{what} of {} (priority {}, preemptible {}) for a job of priority {}",
                r.job.key, r.job.priority, r.job.preemptible, urgent.priority
            ));
        }
        Ok(r)
    };
    let mut room = Room {
        policy: &NoPolicy,
        urgent,
        running,
        free: nodes.to_vec(),
        removed: Vec::new(),
        gone: HashSet::new(),
        evicted: Vec::new(),
    };
    for s in &plan.shrinks {
        let r = victim(s.job, "a shrink")?;
        if !r.may_shrink {
            return Err(format!("{} may not be shrunk now", r.job.key));
        }
        if !seen.insert(s.job) {
            return Err(format!("{} is preempted twice", r.job.key));
        }
        if s.replicas.len() != r.job.tasks.len() {
            return Err(format!(
                "a shrink of {} gives {} counts for {} tasks",
                r.job.key,
                s.replicas.len(),
                r.job.tasks.len()
            ));
        }
        let mut lower = false;
        for (task, &n) in r.job.tasks.iter().zip(&s.replicas) {
            if n < task.min_replicas.max(1) || n > task.replicas {
                return Err(format!(
                    "a shrink of {} gives task {} {n} replicas, not within {}..={}",
                    r.job.key,
                    task.name,
                    task.min_replicas.max(1),
                    task.replicas
                ));
            }
            lower |= n < task.replicas;
        }
        if !lower {
            return Err(format!("a shrink of {} removes nothing", r.job.key));
        }
        // The highest local ranks of each task go.
        let mut offset = 0usize;
        for (t, (task, &n)) in r.job.tasks.iter().zip(&s.replicas).enumerate() {
            for local in n..task.replicas {
                room.remove(s.job, t, offset + local as usize);
            }
            offset += task.replicas as usize;
        }
    }
    for &i in &plan.evictions {
        let r = victim(i, "an eviction")?;
        if !r.may_evict {
            return Err(format!("{} may not be evicted now", r.job.key));
        }
        if !seen.insert(i) {
            return Err(format!("{} is preempted twice", r.job.key));
        }
        room.evict(i);
    }
    if plan.nodes.len() != urgent.total_replicas() {
        return Err(format!(
            "{} nodes for {} replicas",
            plan.nodes.len(),
            urgent.total_replicas()
        ));
    }
    Ok(room.free)
}

/// `check` needs the room's bookkeeping, not a policy.
struct NoPolicy;

impl Policy for NoPolicy {
    fn allocate<N: crate::NodeInfo>(
        &self,
        _: &Job,
        _: &[N],
    ) -> Result<Vec<u32>, crate::PolicyError> {
        Err(crate::PolicyError::Internal("no policy".into()))
    }
    fn optimize<N: crate::NodeInfo>(
        &self,
        _: &[Job],
        _: &[N],
        _: &[crate::JobAllocation],
    ) -> Result<Vec<crate::JobAllocation>, crate::PolicyError> {
        Err(crate::PolicyError::Internal("no policy".into()))
    }
}

/// The cluster as the preemption being built leaves it.
struct Room<'a, P> {
    policy: &'a P,
    urgent: &'a Job,
    running: &'a [Running],
    free: Vec<Node>,
    /// Replicas removed by shrinking: (running index, task, slot), in removal order.
    removed: Vec<(usize, usize, usize)>,
    /// The same, as (running index, slot), for lookups.
    gone: HashSet<(usize, usize)>,
    /// Running indices evicted, in eviction order.
    evicted: Vec<usize>,
}

impl<P: Policy> Room<'_, P> {
    fn fits(&self) -> bool {
        self.policy.allocate(self.urgent, &self.free).is_ok()
    }

    /// The node of a running job's slot, when it has one the model knows.
    fn node_of(&self, i: usize, slot: usize) -> Option<usize> {
        let n = (*self.running[i].job.current.get(slot)?)? as usize;
        (n < self.free.len()).then_some(n)
    }

    fn requests(&self, i: usize, t: usize) -> &Resources {
        &self.running[i].job.tasks[t].requests
    }

    /// Frees one replica's room; false when it has no node (nothing to free).
    fn release(&mut self, i: usize, t: usize, slot: usize) -> bool {
        let Some(n) = self.node_of(i, slot) else {
            return false;
        };
        let request = self.requests(i, t).clone();
        give(&mut self.free[n].free, &request);
        true
    }

    fn retake(&mut self, i: usize, t: usize, slot: usize) {
        if let Some(n) = self.node_of(i, slot) {
            let request = self.requests(i, t).clone();
            self.free[n].free.take(&request);
        }
    }

    /// Removes a replica by shrinking; false when it has no node (nothing to free).
    fn remove(&mut self, i: usize, t: usize, slot: usize) -> bool {
        if !self.release(i, t, slot) {
            return false;
        }
        self.removed.push((i, t, slot));
        self.gone.insert((i, slot));
        true
    }

    /// Gives the `k`th removed replica back.
    fn restore(&mut self, k: usize) {
        let (i, t, slot) = self.removed.remove(k);
        self.gone.remove(&(i, slot));
        self.retake(i, t, slot);
    }

    /// Frees every replica of job `i` not already removed by a shrink.
    fn evict(&mut self, i: usize) {
        for (slot, t) in self.running[i].placed_slots().collect::<Vec<_>>() {
            if !self.gone.contains(&(i, slot)) {
                self.release(i, t, slot);
            }
        }
        if !self.evicted.contains(&i) {
            self.evicted.push(i);
        }
    }

    fn unevict(&mut self, i: usize) {
        for (slot, t) in self.running[i].placed_slots().collect::<Vec<_>>() {
            if !self.gone.contains(&(i, slot)) {
                self.retake(i, t, slot);
            }
        }
    }
}

/// A job's removable replicas in the order they go: per task (spec order), local ranks from the
/// highest down to `min_replicas` (at least one replica of each task stays), as (task, slot).
fn shrinkable(job: &Job) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut offset = 0usize;
    job.tasks.iter().enumerate().flat_map(move |(t, task)| {
        let start = offset;
        offset += task.replicas as usize;
        (task.min_replicas.max(1)..task.replicas)
            .rev()
            .map(move |local| (t, start + local as usize))
    })
}

/// Adds `r` to `free` (a node's extended resource absent from `free` is added).
fn give(free: &mut Resources, r: &Resources) {
    free.cpu_millis = free.cpu_millis.saturating_add(r.cpu_millis);
    free.memory_bytes = free.memory_bytes.saturating_add(r.memory_bytes);
    free.gpus = free.gpus.saturating_add(r.gpus);
    for (name, q) in &r.extended {
        match free.extended.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = slot.1.saturating_add(*q),
            None => free.extended.push((name.clone(), *q)),
        }
    }
}

#[cfg(test)]
mod tests;
