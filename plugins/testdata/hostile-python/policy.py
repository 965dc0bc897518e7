"""Test-only policy that misbehaves when the job key's name says so (`default/<mode>`); any other
job is bin-packed normally, so the same component also serves good calls. The Python twin of
plugins/testdata/hostile-policy (Rust), for the host's bound tests in every language:
- `loop`: a busy loop; `sleep`: time.sleep(30) (WASI is stubbed: the clock call traps);
- `oom`: a 1 GiB bytearray, touched; `trap`: `SystemExit` escaping the call (the SDK maps
  exceptions, not exits: the interpreter aborts, a Wasm trap); `recurse`: unbounded recursion
  with the interpreter's limit lifted (CPython's frames live on its heap: the memory cap ends it);
- `garbage`: an answer naming a node that does not exist; `wrong-count`: one node too few;
- `huge-no-fit`: a 2 MiB no-fit message; `raise`: an exception the SDK maps to `internal`.
"""

import sys
import time

from diorch_plugin import NoFit, placement, policy


def _recurse(n):
    return _recurse(n + 1) + 1


def allocate(job, nodes):
    mode = job.name
    if mode == "loop":
        i = 0
        while True:
            i += 1
    if mode == "sleep":
        time.sleep(30)
    if mode == "oom":
        block = bytearray(1 << 30)
        for i in range(0, len(block), 4096):
            block[i] = 1
        return [0] * job.total_replicas
    if mode == "trap":
        raise SystemExit(3)
    if mode == "recurse":
        sys.setrecursionlimit(1 << 30)
        _recurse(0)
    if mode == "garbage":
        return [4294967000] * job.total_replicas
    if mode == "wrong-count":
        return [0] * (job.total_replicas - 1)
    if mode == "huge-no-fit":
        raise NoFit("x" * (2 << 20))
    if mode == "raise":
        raise KeyError("hostile policy raises on purpose")
    return placement.place(placement.binpack_score, job, nodes)


def optimize(jobs, nodes, previous):
    return placement.optimize(placement.binpack_score, jobs, nodes, previous)


WitWorld = policy(allocate, optimize)
