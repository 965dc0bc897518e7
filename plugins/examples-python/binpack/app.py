"""GPU bin-packing policy: fill the fullest node that still fits, keep GPU nodes for GPU work.

The same decisions as diorch's Rust `binpack` example, written as a score for the SDK's
placement loop (lower is better): nodes that prefer no scheduling last, then CPU-only replicas
off GPU nodes, then the fewest GPUs left, then the least CPU and memory left.

Each answer says why (contract 0.4), in the same words as the Rust and JavaScript examples:
`allocate` names the nodes it filled and what they had free, `optimize` how many of a job's
replicas a re-plan moves (nothing for a job that stays where it is).
"""

from diorch_plugin import Decision, placement, policy


def allocate(job, nodes):
    chosen = placement.place(placement.binpack_score, job, nodes)
    return Decision(chosen, placement.binpack_reason(job, nodes, chosen))


def optimize(jobs, nodes, previous):
    plan = placement.optimize(placement.binpack_score, jobs, nodes, previous)
    return placement.with_reasons("bin-pack", jobs, nodes, plan)


WitWorld = policy(allocate, optimize)
