//! The greedy placement loop the policies share; a placement strategy only ranks candidate nodes.
//!
//! Owns: the free-resource overlay, the keep-or-place re-plan loop, the job order of a re-plan and
//! the one `Policy` impl every [`Chooser`] gets. Must not touch: how nodes are ranked (that is the
//! strategy's) and anything beyond placement (resizing is `goodput`'s).

use crate::Policy;
use crate::model::{Amounts, Job, JobAllocation, NodeInfo, PolicyError, Resources, Task};

/// Free resources after the placements made so far, by node index. Only touched nodes are
/// copied, so a call costs O(replicas) copies, not O(nodes) (this is what keeps the Wasm call
/// cheap too); an attempt that fails gives back what it took instead of working on a copy of the
/// whole overlay (copying it per job made a re-plan of 50 jobs allocate ~20 000 times).
#[derive(Default)]
pub(crate) struct Overlay(Vec<Option<Resources>>);

/// What a node has left: the overlay's copy once the node was used, else the node's own `free`.
pub(crate) enum Left<'a, A> {
    Taken(&'a Resources),
    Untouched(A),
}

impl<A: Amounts> Amounts for Left<'_, A> {
    fn cpu_millis(&self) -> u64 {
        match self {
            Left::Taken(r) => r.cpu_millis,
            Left::Untouched(a) => a.cpu_millis(),
        }
    }
    fn memory_bytes(&self) -> u64 {
        match self {
            Left::Taken(r) => r.memory_bytes,
            Left::Untouched(a) => a.memory_bytes(),
        }
    }
    fn gpus(&self) -> u32 {
        match self {
            Left::Taken(r) => r.gpus,
            Left::Untouched(a) => a.gpus(),
        }
    }
    fn extended(&self, name: &str) -> u64 {
        match self {
            Left::Taken(r) => Amounts::extended(*r, name),
            Left::Untouched(a) => a.extended(name),
        }
    }
    fn to_resources(&self) -> Resources {
        match self {
            Left::Taken(r) => (*r).clone(),
            Left::Untouched(a) => a.to_resources(),
        }
    }
}

impl Overlay {
    pub fn get<'a, N: NodeInfo>(&'a self, nodes: &'a [N], i: usize) -> Left<'a, N::Amounts<'a>> {
        match self.0.get(i) {
            Some(Some(r)) => Left::Taken(r),
            _ => Left::Untouched(nodes[i].free()),
        }
    }

    /// Subtracts `request` from node `i`; callers check `fits` first, so it never saturates and
    /// [`Overlay::give_back`] undoes it exactly.
    pub fn take<N: NodeInfo>(&mut self, nodes: &[N], i: usize, request: &Resources) {
        if self.0.len() <= i {
            self.0.resize(nodes.len().max(i + 1), None);
        }
        self.0[i]
            .get_or_insert_with(|| nodes[i].free().to_resources())
            .take(request);
    }

    /// Undoes takes, last first. A node first touched by them keeps its copy, now equal to its
    /// own `free`, which reads the same.
    fn give_back(&mut self, taken: &[(usize, &Resources)]) {
        for &(i, request) in taken.iter().rev() {
            if let Some(Some(r)) = self.0.get_mut(i) {
                r.cpu_millis += request.cpu_millis;
                r.memory_bytes += request.memory_bytes;
                r.gpus += request.gpus;
                for (name, q) in &request.extended {
                    if let Some(slot) = r.extended.iter_mut().find(|(n, _)| n == name) {
                        slot.1 += *q;
                    }
                }
            }
        }
    }
}

/// What a policy decides: the best node for one replica, given what is left.
pub(crate) trait Chooser {
    /// A sort key per candidate node (lower is better); `None` when unfit. Ties go to the lower
    /// node index, so the result is deterministic. `left` is what the node has free now.
    fn score<N: NodeInfo>(
        &self,
        ctx: &Placing<'_, N>,
        node: usize,
        left: &impl Amounts,
        task: &Task,
    ) -> Option<Score>;

    /// The strategy's name in reasons, e.g. `bin-pack`.
    const LABEL: &'static str;

    /// Why an `allocate` answer is what it is (see [`crate::explain`]).
    fn explain<N: NodeInfo>(&self, job: &Job, nodes: &[N], answer: &[u32]) -> Option<String>;
}

pub(crate) type Score = [u64; 4];

/// Every placement strategy is a policy the same way: fresh placement for `allocate`, the shared
/// keep-or-place loop for `optimize`. One impl here instead of a copy per strategy.
impl<C: Chooser> Policy for C {
    fn allocate<N: NodeInfo>(&self, job: &Job, nodes: &[N]) -> Result<Vec<u32>, PolicyError> {
        place(self, job, nodes, &mut Overlay::default())
    }

    fn optimize<N: NodeInfo>(
        &self,
        jobs: &[Job],
        nodes: &[N],
        previous: &[JobAllocation],
    ) -> Result<Vec<JobAllocation>, PolicyError> {
        let mut plan = optimize(self, jobs, nodes, previous, &mut Overlay::default())?;
        crate::explain::replans(C::LABEL, jobs, nodes, &mut plan);
        Ok(plan)
    }

    fn explain_allocate<N: NodeInfo>(
        &self,
        job: &Job,
        nodes: &[N],
        answer: &[u32],
    ) -> Option<String> {
        self.explain(job, nodes, answer)
    }
}

/// The state of one job's placement in progress.
pub(crate) struct Placing<'a, N> {
    pub nodes: &'a [N],
    /// Nodes chosen so far for this job's replicas.
    pub placed: &'a [u32],
}

fn describe(task: &Task) -> String {
    let r = &task.requests;
    format!(
        "a replica of task {} needs {}m CPU, {} bytes memory, {} GPUs{}",
        task.name,
        r.cpu_millis,
        r.memory_bytes,
        r.gpus,
        if r.extended.is_empty() {
            String::new()
        } else {
            format!(" and {:?}", r.extended)
        }
    )
}

/// The best schedulable node with room for one replica of `task` on `free`, if any.
pub(crate) fn best_node<C: Chooser, N: NodeInfo>(
    chooser: &C,
    ctx: &Placing<'_, N>,
    free: &Overlay,
    task: &Task,
) -> Option<usize> {
    let nodes = ctx.nodes;
    let mut best: Option<(Score, usize)> = None;
    for (i, node) in nodes.iter().enumerate() {
        let left = free.get(nodes, i);
        if !node.schedulable() || !left.fits(&task.requests) {
            continue;
        }
        if let Some(score) = chooser.score(ctx, i, &left, task)
            && best.is_none_or(|(b, _)| score < b)
        {
            best = Some((score, i));
        }
    }
    best.map(|(_, i)| i)
}

/// Places every replica of `job` on `free` (updated in place on success only).
pub(crate) fn place<C: Chooser, N: NodeInfo>(
    chooser: &C,
    job: &Job,
    nodes: &[N],
    free: &mut Overlay,
) -> Result<Vec<u32>, PolicyError> {
    let mut taken = Vec::new();
    let placed = place_taking(chooser, job, nodes, free, &mut taken);
    if placed.is_err() {
        free.give_back(&taken);
    }
    placed
}

/// [`place`], recording in `taken` what it took from `free`, also when it fails.
fn place_taking<'j, C: Chooser, N: NodeInfo>(
    chooser: &C,
    job: &'j Job,
    nodes: &[N],
    free: &mut Overlay,
    taken: &mut Vec<(usize, &'j Resources)>,
) -> Result<Vec<u32>, PolicyError> {
    if job.total_replicas() == 0 {
        return Err(PolicyError::InvalidInput(format!(
            "job {} has no replicas",
            job.key
        )));
    }
    // Biggest replicas first (GPUs, then CPU, then memory) so they get the best slots; the
    // result is written back in rank order.
    let mut order: Vec<(usize, &Task)> = job.replicas().enumerate().collect();
    order.sort_by(|(ia, a), (ib, b)| {
        let ka = (
            a.requests.gpus,
            a.requests.cpu_millis,
            a.requests.memory_bytes,
        );
        let kb = (
            b.requests.gpus,
            b.requests.cpu_millis,
            b.requests.memory_bytes,
        );
        kb.cmp(&ka).then(ia.cmp(ib))
    });
    let mut result = vec![u32::MAX; order.len()];
    let mut placed: Vec<u32> = Vec::with_capacity(order.len());
    // Replicas that already run (`current`, e.g. a job being scaled) stay where they are while
    // their node is usable and has room: re-placing a job must not move its survivors.
    for (rank, task) in job.replicas().enumerate() {
        let Some(Some(at)) = job.current.get(rank) else {
            continue;
        };
        let i = *at as usize;
        if nodes.get(i).is_some_and(N::schedulable) && free.get(nodes, i).fits(&task.requests) {
            free.take(nodes, i, &task.requests);
            taken.push((i, &task.requests));
            result[rank] = *at;
            placed.push(*at);
        }
    }
    order.retain(|(rank, _)| result[*rank] == u32::MAX);
    for (rank, task) in order {
        let ctx = Placing {
            nodes,
            placed: &placed,
        };
        let Some(i) = best_node(chooser, &ctx, free, task) else {
            return Err(PolicyError::NoFit(format!(
                "job {}: {} and no ready, untainted node has room",
                job.key,
                describe(task)
            )));
        };
        free.take(nodes, i, &task.requests);
        taken.push((i, &task.requests));
        // ok: node counts come from a Vec indexed by u32 in the WIT contract.
        let index = u32::try_from(i).map_err(|_| PolicyError::Internal("too many nodes".into()))?;
        result[rank] = index;
        placed.push(index);
    }
    Ok(result)
}

/// The current placement of `job` if it is complete and still valid on `free`.
fn keep_current<N: NodeInfo>(
    job: &Job,
    nodes: &[N],
    free: &mut Overlay,
    hint: Option<&[u32]>,
) -> Option<Vec<u32>> {
    let current: Vec<u32> = if !job.current.is_empty() && job.current.iter().all(Option::is_some) {
        job.current.iter().flatten().copied().collect()
    } else {
        hint?.to_vec()
    };
    if current.len() != job.total_replicas() || current.is_empty() {
        return None;
    }
    let mut taken = Vec::with_capacity(current.len());
    for (&n, task) in current.iter().zip(job.replicas()) {
        let i = n as usize;
        if !nodes.get(i).is_some_and(N::schedulable) || !free.get(nodes, i).fits(&task.requests) {
            free.give_back(&taken);
            return None;
        }
        free.take(nodes, i, &task.requests);
        taken.push((i, &task.requests));
    }
    Some(current)
}

/// Job indices in re-plan order: priority (high first), then age (old first), then key.
pub(crate) fn by_priority(jobs: &[Job]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by(|&a, &b| {
        let (ja, jb) = (&jobs[a], &jobs[b]);
        jb.priority
            .cmp(&ja.priority)
            .then(jb.age_seconds.cmp(&ja.age_seconds))
            .then(ja.key.cmp(&jb.key))
    });
    order
}

/// Global re-plan on `free` (left holding what the plan uses, for callers that place more after
/// it): jobs in [`by_priority`] order; a job keeps a still-valid placement (no needless
/// restarts), else is placed afresh; a job that fits nowhere is left out of the plan.
pub(crate) fn optimize<C: Chooser, N: NodeInfo>(
    chooser: &C,
    jobs: &[Job],
    nodes: &[N],
    previous: &[JobAllocation],
    free: &mut Overlay,
) -> Result<Vec<JobAllocation>, PolicyError> {
    let mut plan = Vec::new();
    for j in by_priority(jobs) {
        let job = &jobs[j];
        let index = u32::try_from(j).map_err(|_| PolicyError::Internal("too many jobs".into()))?;
        let hint = previous
            .iter()
            .find(|p| p.job == index)
            .map(|p| p.nodes.as_slice());
        let chosen = match keep_current(job, nodes, free, hint) {
            Some(kept) => Some(kept),
            None => place(chooser, job, nodes, free).ok(),
        };
        if let Some(chosen) = chosen {
            plan.push(JobAllocation {
                job: index,
                nodes: chosen,
                reason: None,
            });
        }
    }
    plan.sort_by_key(|p| p.job);
    Ok(plan)
}
