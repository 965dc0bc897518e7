"""Spreading (anti-affinity) policy: a job's replicas go to different zones, then different
nodes, then the least allocated node, so one failure takes out as few replicas as possible.

The same decisions as diorch's Rust `spread` example: like it, a thin wrapper over the policy
library's score (`diorch_plugin.placement.spread_score`; read it to write your own).

Each answer says why (contract 0.4), in the same words as the Rust and JavaScript examples:
`allocate` how many nodes and zones the job spans, `optimize` how many of a job's replicas a
re-plan moves (nothing for a job that stays where it is).
"""

from diorch_plugin import Decision, placement, policy


def allocate(job, nodes):
    chosen = placement.place(placement.spread_score, job, nodes)
    return Decision(chosen, placement.spread_reason(nodes, chosen))


def optimize(jobs, nodes, previous):
    plan = placement.optimize(placement.spread_score, jobs, nodes, previous)
    return placement.with_reasons("spread", jobs, nodes, plan)


WitWorld = policy(allocate, optimize)
