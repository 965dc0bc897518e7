"""GPU bin-packing policy: fill the fullest node that still fits, keep GPU nodes for GPU work.

The same decisions as diorch's Rust `binpack` example, written as a score for the SDK's
placement loop (lower is better): nodes that prefer no scheduling last, then CPU-only replicas
off GPU nodes, then the fewest GPUs left, then the least CPU and memory left.
"""

from diorch_plugin import placement, policy


def allocate(job, nodes):
    return placement.place(placement.binpack_score, job, nodes)


def optimize(jobs, nodes, previous):
    return placement.optimize(placement.binpack_score, jobs, nodes, previous)


WitWorld = policy(allocate, optimize)
