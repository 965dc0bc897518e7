"""Spreading (anti-affinity) policy: a job's replicas go to different zones, then different
nodes, then the least allocated node, so one failure takes out as few replicas as possible.

The same decisions as diorch's Rust `spread` example.
"""

from diorch_plugin import placement, policy

ZONE = "topology.kubernetes.io/zone"


def score(ctx, i, left, task):
    nodes = ctx.nodes
    node = nodes[i]
    same_node = ctx.placed.count(i)
    zone = node.labels.get(ZONE)
    if zone is None:
        same_zone = same_node
    else:
        same_zone = sum(1 for p in ctx.placed if nodes[p].labels.get(ZONE) == zone)
    # Least allocated: CPU left after placement, per mille of allocatable.
    cpu_left = left.cpu_millis - task.requests.cpu_millis
    used = 1000 - min(placement.saturating(cpu_left * 1000) // max(node.allocatable.cpu_millis, 1), 1000)
    return (node.prefers_no_schedule, same_zone, same_node, used)


def allocate(job, nodes):
    return placement.place(score, job, nodes)


def optimize(jobs, nodes, previous):
    return placement.optimize(score, jobs, nodes, previous)


WitWorld = policy(allocate, optimize)
