"""diorch plugin SDK for Python: scheduling policies and pod mutators as plain functions.

A policy (build with `diorch-plugin build --world policy app.py -o policy.wasm`):

    from diorch_plugin import NoFit, policy

    def allocate(job, nodes):
        free = [n for n in nodes if n.schedulable and n.free.gpus >= job.tasks[0].requests.gpus]
        if not free:
            raise NoFit(f"no node for {job.key}")
        return [free[0].index] * job.total_replicas

    WitWorld = policy(allocate)

A mutator (`--world mutator`):

    from diorch_plugin import mutator

    def mutate(ctx, pod):
        pod.set_env("di-container", "NCCL_DEBUG", "WARN")

    WitWorld = mutator(mutate)

Owns: the public names. The modules: `model` (read-only views of nodes, jobs and resources),
`placement` (the greedy loop diorch's own policies use, for policies that only rank nodes),
`pod` (pod helpers), `log`, `errors`, `testing` (snapshots on CPython), `build` (the one-command
build).
"""

from . import log, placement
from ._world import TaskContext, mutator, policy
from .errors import Internal, InvalidInput, NoFit, PluginError
from .model import Job, JobAllocation, Node, Resources, Taint, Task
from .pod import Pod

__all__ = [
    "Internal",
    "InvalidInput",
    "Job",
    "JobAllocation",
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
CONTRACT = "0.3.0"
