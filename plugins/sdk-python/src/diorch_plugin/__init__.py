"""diorch plugin SDK for Python: scheduling policies and pod mutators as plain functions.

A policy (build with `diorch-plugin build --world policy app.py -o policy.wasm`):

    from diorch_plugin import Decision, NoFit, policy

    def allocate(job, nodes):
        free = [n for n in nodes if n.schedulable and n.free.gpus >= job.tasks[0].requests.gpus]
        if not free:
            raise NoFit(f"no node for {job.key}")
        return [free[0].index] * job.total_replicas

    WitWorld = policy(allocate)

To say why (contract 0.4), answer `Decision(nodes, reason)` instead of the list; the reason
shows in the job's `Allocated` condition, its Events and `kubectl dijob explain`:

        return Decision([free[0].index] * job.total_replicas, f"{free[0].name} has the GPUs")

`optimize(jobs, nodes, previous)` entries likewise: `JobDecision(job, nodes, reason)` where a
`JobAllocation(job, nodes)` gives none. A policy that never gives a reason needs no change.

A mutator (`--world mutator`):

    from diorch_plugin import mutator

    def mutate(ctx, pod):
        pod.set_env("di-container", "NCCL_DEBUG", "WARN")

    WitWorld = mutator(mutate)

Owns: the public names. The modules: `model` (read-only views of nodes, jobs and resources,
and the answer types), `placement` (the greedy loop diorch's own policies use, for policies that
only rank nodes, and their reasons), `pod` (pod helpers), `log`, `errors`, `testing` (snapshots
on CPython), `build` (the one-command build).
"""

from . import log, placement
from ._world import TaskContext, mutator, policy
from .errors import Internal, InvalidInput, NoFit, PluginError
from .model import Decision, Job, JobAllocation, JobDecision, Node, Resources, Taint, Task
from .pod import Pod

__all__ = [
    "Decision",
    "Internal",
    "InvalidInput",
    "Job",
    "JobAllocation",
    "JobDecision",
    "NoFit",
    "Node",
    "PluginError",
    "Pod",
    "Resources",
    "Taint",
    "Task",
    "TaskContext",
    "log",
    "mutator",
    "placement",
    "policy",
]

#: The contract version this SDK builds against (`wit/plugins.wit`).
CONTRACT = "0.5.0"
