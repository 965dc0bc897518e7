"""The glue between plain Python functions and the contract's two worlds.

Owns: `policy(...)` and `mutator(...)`, which return the `WitWorld` class componentize-py
exports, and the mapping of answers and exceptions to the contract's types: a policy's answer
(a list of node indices or a `Decision`; plan entries as `JobAllocation`, `JobDecision` or
tuples) becomes the contract's `decision` / `job-decision`, with `reason` none when the policy
gave none. A policy never preempts (contract 0.5's `preempt` answers none: a job that does not
fit waits). Must not touch:
policy logic. The generated bindings (`wit_world`) exist only inside a build, so they are
imported on the first call; on CPython the returned class can still be called with records of
the same shape (the tests do).
"""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Tuple, Union

from . import model
from .errors import InvalidInput, PluginError
from .model import Decision, Job, JobAllocation, JobDecision, Node
from .pod import Pod

U32_MAX = 0xFFFFFFFF


def _types():
    from wit_world.imports import types  # type: ignore[import-not-found]

    return types


def _err(e: BaseException):
    """The contract's `error` value for an exception a plugin raised."""
    from componentize_py_types import Err  # type: ignore[import-not-found]

    t = _types()
    if isinstance(e, PluginError):
        variant, message = e.variant, e.message
    else:
        variant, message = "internal", f"{type(e).__name__}: {e}"
    cls = {"no-fit": t.Error_NoFit, "invalid-input": t.Error_InvalidInput}.get(variant, t.Error_Internal)
    return Err(cls(str(message)))


def _indices(value, what: str) -> List[int]:
    """A plugin's node list as u32s, or an `internal` error naming what was wrong (a wrong
    type would otherwise trap the component while lowering the answer)."""
    try:
        out = [int(n) for n in value]
    except (TypeError, ValueError):
        raise PluginError(f"{what} must be a list of node indices, got {type(value).__name__}") from None
    for n in out:
        if not 0 <= n <= U32_MAX:
            raise PluginError(f"{what}: node index {n} is out of range")
    return out


def _reason(value, what: str) -> Optional[str]:
    """A plugin's reason as the contract's `option<string>`: None stays None, a str passes as
    it is (the host bounds its length and control characters), except that lone surrogates,
    which no UTF-8 string can hold, become U+FFFD instead of failing the whole answer."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise PluginError(f"{what} must be a str or None, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in value)
    return value


def _decision(value) -> Tuple[List[int], Optional[str]]:
    """(nodes, reason) of an `allocate` answer: a `Decision`, or node indices without reason."""
    if isinstance(value, Decision):
        return _indices(value.nodes, "allocate's answer"), _reason(value.reason, "allocate's reason")
    return _indices(value, "allocate's answer"), None


def _plan_entry(entry) -> Tuple[int, List[int], Optional[str]]:
    """(job, nodes, reason) of an `optimize` answer's entry: a `JobDecision`, a `JobAllocation`,
    a `(job, nodes)` pair or a `(job, nodes, reason)` triple."""
    if isinstance(entry, tuple):  # NamedTuples included
        if len(entry) == 2:
            (job, chosen), reason = entry, None
        elif len(entry) == 3:
            job, chosen, reason = entry
        else:
            raise PluginError(f"a plan's entry must be (job, nodes) or (job, nodes, reason), got {len(entry)} items")
    else:
        try:
            job, chosen = entry.job, entry.nodes
        except AttributeError:
            raise PluginError(f"a plan's entry must be a JobDecision, got {type(entry).__name__}") from None
        reason = getattr(entry, "reason", None)
    return (
        _indices([job], "a plan's job")[0],
        _indices(chosen, "a plan's nodes"),
        _reason(reason, "a plan's reason"),
    )


def policy(
    allocate: Callable[[Job, List[Node]], Union[Sequence[int], Decision]],
    optimize: Optional[Callable[[List[Job], List[Node], List[JobAllocation]], Sequence]] = None,
):
    """The `scheduling-policy` world from two functions:

    - `allocate(job, nodes)`: one node index per replica of `job`, in rank order, as a list,
      or as `Decision(nodes, reason)` to say why (contract 0.4; a list is a decision without
      a reason);
    - `optimize(jobs, nodes, previous)` (optional): the whole new plan, as `JobAllocation`s,
      `JobDecision`s (with a reason), `(job, nodes)` pairs or `(job, nodes, reason)` triples;
      without it, every job keeps its complete current placement.

    Raise `NoFit` or `InvalidInput` to refuse; any other exception reaches the host as
    `internal`. Use as `WitWorld = policy(allocate, optimize)` in the module you build.

    Contract 0.5.0's `preempt` (room for a job that does not fit, taken from running jobs of
    lower priority) always answers none: a Python policy does not preempt, so such a job waits
    (a known gap; the built-in and Rust policies do preempt).
    """

    def keep_current(jobs, nodes, previous):
        return [
            JobAllocation(j.index, list(j.current))
            for j in jobs
            if j.current and all(c is not None for c in j.current)
        ]

    optimize_fn = optimize or keep_current

    class WitWorld:
        def allocate(self, cluster):
            try:
                jobs, nodes = model.from_cluster(cluster)
                if len(jobs) != 1:
                    raise InvalidInput(f"allocate takes exactly one job, got {len(jobs)}")
                chosen, reason = _decision(allocate(jobs[0], nodes))
                return _types().Decision(chosen, reason)
            except Exception as e:  # every failure becomes the contract's error, never a trap
                raise _err(e) from None

        def optimize(self, cluster, previous):
            try:
                jobs, nodes = model.from_cluster(cluster)
                prev = [JobAllocation(p.job, list(p.nodes)) for p in previous]
                plan = optimize_fn(jobs, nodes, prev)
                t = _types()
                return [t.JobDecision(*_plan_entry(entry)) for entry in plan]
            except Exception as e:
                raise _err(e) from None

        def preempt(self, cluster, candidates):
            """No preemption (contract 0.5.0): the job that does not fit waits."""
            return None

    return WitWorld


class TaskContext:
    """What a mutator knows about its pod (the contract's `task-context`), with labels and
    annotations as dicts."""

    __slots__ = (
        "job_key",
        "task_name",
        "task_type",
        "rank",
        "task_rank",
        "world_size",
        "node",
        "job_labels",
        "job_annotations",
        "config",
    )

    def __init__(self, ctx):
        self.job_key = ctx.job_key
        self.task_name = ctx.task_name
        self.task_type = ctx.task_type
        self.rank = ctx.rank
        self.task_rank = ctx.task_rank
        self.world_size = ctx.world_size
        self.node = ctx.node
        self.job_labels = _first_wins(ctx.job_labels)
        self.job_annotations = _first_wins(ctx.job_annotations)
        self.config = ctx.config


def _first_wins(pairs) -> dict:
    if isinstance(pairs, dict):
        return dict(pairs)
    out = {}
    for k, v in pairs:
        out.setdefault(k, v)
    return out


def mutator(mutate: Callable[[TaskContext, Pod], None]):
    """The `pod-mutator` world from `mutate(ctx, pod)`, which edits `pod` in place (or returns a
    new `Pod`). Use as `WitWorld = mutator(mutate)` in the module you build."""

    class WitWorld:
        def mutate(self, ctx, pod_json: str) -> str:
            try:
                pod = Pod.parse(pod_json)
                out = mutate(ctx if isinstance(ctx, TaskContext) else TaskContext(ctx), pod)
                return (out if isinstance(out, Pod) else pod).to_json()
            except Exception as e:
                raise _err(e) from None

    return WitWorld
