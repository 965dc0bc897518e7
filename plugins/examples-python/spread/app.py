"""Spreading (anti-affinity) policy: a job's replicas go to different zones, then different
nodes, then the least allocated node, so one failure takes out as few replicas as possible.

The same decisions as diorch's Rust `spread` example: like it, a thin wrapper over the policy
library's score (`diorch_plugin.placement.spread_score`; read it to write your own).
"""

from diorch_plugin import placement, policy


def allocate(job, nodes):
    return placement.place(placement.spread_score, job, nodes)


def optimize(jobs, nodes, previous):
    return placement.optimize(placement.spread_score, jobs, nodes, previous)


WitWorld = policy(allocate, optimize)
