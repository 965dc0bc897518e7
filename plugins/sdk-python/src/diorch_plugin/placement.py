"""The greedy placement loop diorch's own policies use, for policies that only rank nodes.

Owns: the free-resource overlay, `place` (one job) and `optimize` (the keep-or-place re-plan),
the re-plan's job order, the no-fit message, and the reasons diorch's example policies give
(`binpack_reason`, `spread_reason`, `replan_reason`, `with_reasons`: contract 0.4). Must not
touch: how nodes are ranked (a policy's `score`) and anything beyond placement.

It is a line-by-line port of the Rust library `diorch-policies` (`engine.rs`), so a policy
written as a score function here decides exactly as the same score function does in Rust: the
parity tests run both over random clusters and compare every answer.

A score is a tuple, lower is better, ties go to the lower node index:

    def score(ctx: Placing, node: int, left: Resources, task: Task) -> tuple | None

A policy that says why (contract 0.4) wraps its answers, e.g.

    def allocate(job, nodes):
        chosen = placement.place(placement.binpack_score, job, nodes)
        return Decision(chosen, placement.binpack_reason(job, nodes, chosen))

    def optimize(jobs, nodes, previous):
        plan = placement.optimize(placement.binpack_score, jobs, nodes, previous)
        return placement.with_reasons("bin-pack", jobs, nodes, plan)

The reasons read the same, byte for byte, as those of the Rust and JavaScript examples.
"""

from __future__ import annotations

import math
from typing import Callable, List, Optional, Sequence, Tuple

from .errors import InvalidInput, NoFit, PluginError
from .model import U64_MAX, Job, JobAllocation, JobDecision, Node, Resources, Task


class Placing:
    """The state of one job's placement in progress, for scores."""

    __slots__ = ("nodes", "placed", "memo")

    def __init__(self, nodes: Sequence[Node], placed: List[int], memo: Optional[dict] = None):
        self.nodes = nodes
        #: Node indices chosen so far for this job's replicas, in the order they were chosen.
        self.placed = placed
        #: A score's own cache for the whole placement of this job (e.g. each node's zone),
        #: so that what does not change between replicas is read once, not once per candidate.
        self.memo = memo if memo is not None else {}


Score = Callable[[Placing, int, Resources, Task], Optional[tuple]]

#: Above every score a local score gives (its first entry must be a number).
_UNFIT = (math.inf,)


def local(score: Score) -> Score:
    """Marks `score` as local: it reads only node `i`, what `i` has left and the task, never
    `ctx.placed` or other nodes. `place` then scores each node once per task of a job and
    re-scores only the node a replica was put on, instead of every node for every replica: the
    same answers, a fraction of the calls. (A score that is not local, e.g. one that spreads
    replicas, must not be marked.)"""
    score.local = True  # type: ignore[attr-defined]
    return score


def saturating(x: int) -> int:
    """`x` clamped to the unsigned 64-bit range, as Rust's saturating arithmetic does."""
    return U64_MAX if x > U64_MAX else x


class Overlay:
    """What each node has left after the placements made so far (a list read by index: the
    placement loop reads it for every candidate node of every replica)."""

    __slots__ = ("cur",)

    def __init__(self, nodes: Sequence[Node]):
        self.cur = [n.free for n in nodes]

    def left(self, i: int) -> Resources:
        return self.cur[i]

    def take(self, i: int, request: Resources) -> None:
        """Subtracts `request` from node `i` (callers check `fits` first, so nothing saturates
        and `give_back` undoes it exactly)."""
        self.cur[i] = self.cur[i].minus(request)

    def give_back(self, taken: list) -> None:
        cur = self.cur
        for i, request in reversed(taken):
            r = cur[i]
            ext = r.extended
            if request.extended and ext:
                ext = dict(ext)
                for name, q in request.extended.items():
                    if name in ext:
                        ext[name] += q
            cur[i] = Resources(
                r.cpu_millis + request.cpu_millis,
                r.memory_bytes + request.memory_bytes,
                r.gpus + request.gpus,
                ext,
            )


def _debug_str(s: str) -> str:
    """Rust's `{:?}` of a string, for messages that must read the same in every language."""
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\0":
            out.append("\\0")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append("\\u{%x}" % ord(ch))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def describe(task: Task) -> str:
    r = task.requests
    ext = ""
    if r.extended:
        ext = " and [" + ", ".join(f"({_debug_str(n)}, {q})" for n, q in r.extended.items()) + "]"
    return (
        f"a replica of task {task.name} needs {r.cpu_millis}m CPU, {r.memory_bytes} bytes memory, "
        f"{r.gpus} GPUs{ext}"
    )


def best_node(score: Score, ctx: Placing, free: Overlay, task: Task, schedulable: List[bool]) -> Optional[int]:
    """The best schedulable node with room for one replica of `task`, if any."""
    best = None
    best_i = None
    request = task.requests
    cpu, mem, gpus, ext = request.cpu_millis, request.memory_bytes, request.gpus, request.extended
    cur = free.cur
    for i in range(len(ctx.nodes)):
        if not schedulable[i]:
            continue
        left = cur[i]
        # `Resources.fits`, inlined: this runs for every candidate node of every replica.
        if left.cpu_millis < cpu or left.memory_bytes < mem or left.gpus < gpus:
            continue
        if ext and not left.fits(request):
            continue
        s = score(ctx, i, left, task)
        if s is not None and (best is None or s < best):
            best, best_i = s, i
    return best_i


def place(score: Score, job: Job, nodes: Sequence[Node], free: Optional[Overlay] = None, _sched=None) -> List[int]:
    """Places every replica of `job`: one node index per replica, in rank order. Replicas
    already running (`job.current`) stay while their node is usable and has room. Raises
    `NoFit` naming the task that found no node; `free` is left as it was then."""
    free = free if free is not None else Overlay(nodes)
    sched = _sched if _sched is not None else [n.schedulable for n in nodes]
    taken = []
    try:
        return _place(score, job, nodes, free, sched, taken)
    except PluginError:
        free.give_back(taken)
        raise


def _place(score, job, nodes, free, sched, taken):
    if job.total_replicas == 0:
        raise InvalidInput(f"job {job.key} has no replicas")
    ranks = list(enumerate(job.replicas()))
    # Biggest replicas first (GPUs, then CPU, then memory) so they get the best slots.
    order = sorted(
        ranks,
        key=lambda rt: (-rt[1].requests.gpus, -rt[1].requests.cpu_millis, -rt[1].requests.memory_bytes, rt[0]),
    )
    result = [None] * len(ranks)
    placed = []
    memo = {}
    current = job.current
    for rank, task in ranks:
        at = current[rank] if rank < len(current) else None
        if at is None:
            continue
        if 0 <= at < len(nodes) and sched[at] and free.left(at).fits(task.requests):
            free.take(at, task.requests)
            taken.append((at, task.requests))
            result[rank] = at
            placed.append(at)
    # A local score's candidates per task (by identity: a task's replicas share one object):
    # (score, node) for every node, `_UNFIT` where the replica cannot go.
    candidates = {} if getattr(score, "local", False) else None
    for rank, task in order:
        if result[rank] is not None:
            continue
        ctx = Placing(nodes, placed, memo)
        if candidates is None:
            i = best_node(score, ctx, free, task, sched)
        else:
            cands = candidates.get(id(task))
            if cands is None:
                cands = candidates[id(task)] = (task, [_candidate(score, ctx, free, task, sched, n) for n in range(len(nodes))])
            best = min(cands[1])
            i = None if best[0] is _UNFIT else best[1]
        if i is None:
            raise NoFit(f"job {job.key}: {describe(task)} and no ready, untainted node has room")
        free.take(i, task.requests)
        taken.append((i, task.requests))
        result[rank] = i
        placed.append(i)
        if candidates:
            # Only node i changed: its score for every task seen so far.
            for t, cands in candidates.values():
                cands[i] = _candidate(score, ctx, free, t, sched, i)
    return result


def _candidate(score, ctx, free, task, sched, i):
    """(score, i) of node i for a replica of `task`, or (`_UNFIT`, i)."""
    if sched[i]:
        left = free.cur[i]
        if left.fits(task.requests):
            s = score(ctx, i, left, task)
            if s is not None:
                return (s, i)
    return (_UNFIT, i)


def _keep_current(job, nodes, free, sched, hint):
    if job.current and all(c is not None for c in job.current):
        current = list(job.current)
    elif hint is not None:
        current = list(hint)
    else:
        return None
    if not current or len(current) != job.total_replicas:
        return None
    taken = []
    for n, task in zip(current, job.replicas()):
        if not (0 <= n < len(nodes) and sched[n] and free.left(n).fits(task.requests)):
            free.give_back(taken)
            return None
        free.take(n, task.requests)
        taken.append((n, task.requests))
    return current


def by_priority(jobs: Sequence[Job]) -> List[int]:
    """Job indices in re-plan order: priority (high first), then age (old first), then key."""
    return sorted(range(len(jobs)), key=lambda j: (-jobs[j].priority, -jobs[j].age_seconds, jobs[j].key))


def optimize(score: Score, jobs: Sequence[Job], nodes: Sequence[Node], previous: Sequence[JobAllocation]) -> List[JobAllocation]:
    """Global re-plan: jobs in `by_priority` order; a job keeps a still-valid placement (no
    needless restarts), else is placed afresh; a job that fits nowhere is left out."""
    free = Overlay(nodes)
    sched = [n.schedulable for n in nodes]
    plan = []
    for j in by_priority(jobs):
        job = jobs[j]
        hint = next((p.nodes for p in previous if p.job == j), None)
        chosen = _keep_current(job, nodes, free, sched, hint)
        if chosen is None:
            try:
                chosen = place(score, job, nodes, free, sched)
            except PluginError:
                chosen = None
        if chosen is not None:
            plan.append(JobAllocation(j, chosen))
    plan.sort(key=lambda p: p.job)
    return plan


# --- the scores of diorch's example policies ---------------------------------------------------

ZONE_LABEL = "topology.kubernetes.io/zone"


@local
def binpack_score(ctx: Placing, i: int, left: Resources, task: Task) -> tuple:
    """Best fit on GPUs, then CPU, then memory; CPU-only replicas avoid GPU nodes; nodes that
    prefer no scheduling only when nothing else fits."""
    n = ctx.nodes[i]
    r = task.requests
    # Saturating u64 arithmetic, inlined (Rust: saturating_mul, then saturating_add).
    packed = (left.cpu_millis - r.cpu_millis) << 20
    if packed > U64_MAX:
        packed = U64_MAX
    packed += (left.memory_bytes - r.memory_bytes) >> 20
    if packed > U64_MAX:
        packed = U64_MAX
    return (
        n.prefers_no_schedule,
        r.gpus == 0 and n.allocatable.gpus > 0,
        left.gpus - r.gpus,
        packed,
    )


def spread_score(ctx: Placing, i: int, left: Resources, task: Task) -> tuple:
    """Different zones, then different nodes, then the least allocated node."""
    memo = ctx.memo
    zones = memo.get("zones")
    if zones is None:
        zones = memo["zones"] = [n.labels.get(ZONE_LABEL) for n in ctx.nodes]
    # How many replicas each node and zone holds so far: counted once per replica placed.
    placed = ctx.placed
    counts = memo.get("counts")
    if counts is None or counts[0] != len(placed):
        per_node, per_zone = {}, {}
        for p in placed:
            per_node[p] = per_node.get(p, 0) + 1
            z = zones[p]
            if z is not None:
                per_zone[z] = per_zone.get(z, 0) + 1
        counts = memo["counts"] = (len(placed), per_node, per_zone)
    same_node = counts[1].get(i, 0)
    zone = zones[i]
    same_zone = same_node if zone is None else counts[2].get(zone, 0)
    n = ctx.nodes[i]
    cpu_left = saturating((left.cpu_millis - task.requests.cpu_millis) * 1000)
    used_permille = 1000 - min(cpu_left // max(n.allocatable.cpu_millis, 1), 1000)
    return (n.prefers_no_schedule, same_zone, same_node, used_permille)


# --- reasons (contract 0.4) -----------------------------------------------------------------------
# A port of the Rust library's `explain.rs`, edge cases included (a node index out of range reads
# as the name "?"), so that the three languages' examples give the same bytes.


def tally(answer: Sequence[int]) -> List[Tuple[int, int]]:
    """(node index, replicas on it) of an answer, in the order each node first appears."""
    counts = {}
    for n in answer:
        counts[n] = counts.get(n, 0) + 1
    return list(counts.items())


def _name(nodes: Sequence[Node], i: int) -> str:
    return nodes[i].name if 0 <= i < len(nodes) else "?"


def _per_node(nodes: Sequence[Node], answer: Sequence[int]) -> str:
    """`a×2, b×1`."""
    return ", ".join(f"{_name(nodes, i)}\u00d7{c}" for i, c in tally(answer))


def binpack_reason(job: Job, nodes: Sequence[Node], answer: Sequence[int]) -> Optional[str]:
    """Why the bin-pack policy put `job` on `answer`: each node it chose with its replicas and
    what it had free before (GPUs for a job that asks for any, else CPU). None for an empty
    answer. E.g. `bin-pack, fullest fitting node first: gpu-a×2 (2 free GPUs), gpu-b×1 (8 free
    GPUs)`."""
    if not answer:
        return None
    gpu_job = any(t.requests.gpus > 0 for t in job.tasks)
    parts = []
    for i, c in tally(answer):
        free = ""
        if 0 <= i < len(nodes):
            left = nodes[i].free
            free = f"{left.gpus} free GPUs" if gpu_job else f"{left.cpu_millis}m CPU free"
        parts.append(f"{_name(nodes, i)}\u00d7{c} ({free})")
    return "bin-pack, fullest fitting node first: " + ", ".join(parts)


def spread_reason(nodes: Sequence[Node], answer: Sequence[int]) -> Optional[str]:
    """Why the spread policy put a job on `answer`: how many nodes and zones (the
    `topology.kubernetes.io/zone` label; a node without it is a zone of its own) and the most
    replicas on one node. None for an empty answer. E.g. `spread: 3 nodes in 2 zones, at most 1
    per node: a-1×1, b-1×1, a-2×1`."""
    if not answer:
        return None
    counts = tally(answer)
    zones = set()
    for i, _ in counts:
        if 0 <= i < len(nodes):
            zone = nodes[i].labels.get(ZONE_LABEL)
            zones.add(f"node:{nodes[i].name}" if zone is None else f"zone:{zone}")
        else:
            zones.add(f"node:?{i}")
    most = max(c for _, c in counts)
    return f"spread: {len(counts)} nodes in {len(zones)} zones, at most {most} per node: " + _per_node(nodes, answer)


def replan_reason(policy: str, job: Job, nodes: Sequence[Node], answer: Sequence[int]) -> Optional[str]:
    """Why a re-plan (`optimize`) gives `job` the nodes `answer`, next to its current placement:
    None when it places nothing or leaves the job exactly where it runs (every replica placed,
    none moves, as many replicas), else how many replicas move and where the job now runs, e.g.
    `re-planned by bin-pack: 1 of 2 replicas move; now n0×2`. `policy` names the policy
    (`bin-pack`)."""
    if not answer:
        return None
    current = job.current
    moved = sum(1 for n, c in zip(answer, current) if c is not None and c != n)
    if moved == 0 and len(answer) == len(current) and all(c is not None for c in current):
        return None
    return f"re-planned by {policy}: {moved} of {len(answer)} replicas move; now " + _per_node(nodes, answer)


def with_reasons(policy: str, jobs: Sequence[Job], nodes: Sequence[Node], plan) -> List[JobDecision]:
    """`plan` (`optimize`'s `JobAllocation`s) as `JobDecision`s, each with its `replan_reason`
    where it has no reason yet (an entry whose job is out of range keeps none)."""
    out = []
    for p in plan:
        reason = getattr(p, "reason", None)
        if reason is None and 0 <= p.job < len(jobs):
            reason = replan_reason(policy, jobs[p.job], nodes, p.nodes)
        out.append(JobDecision(p.job, p.nodes, reason))
    return out
