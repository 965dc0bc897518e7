"""Test-only policy that misbehaves when the job key's name says so (`default/<mode>`); any other
job is bin-packed normally, so the same component also serves good calls. The Python twin of
plugins/testdata/hostile-policy (Rust), for the host's bound tests in every language:
- `loop`: a busy loop; `sleep`: time.sleep(30) (WASI is stubbed: the clock call traps);
- `oom`: a 1 GiB bytearray, touched; `trap`: `SystemExit` escaping the call (the SDK maps
  exceptions, not exits: the interpreter aborts, a Wasm trap); `recurse`: unbounded recursion
  with the interpreter's limit lifted (CPython's frames live on its heap: the memory cap ends it);
- `garbage`: an answer naming a node that does not exist; `wrong-count`: one node too few;
- `huge-no-fit`: a 2 MiB no-fit message; `raise`: an exception the SDK maps to `internal`;
- `huge-reason`: a good answer with a 1 MiB reason (contract 0.4; under the host's copy cap, so
  it is cut to 256 bytes, not refused); `control-reason`: a good answer whose reason carries
  newlines, a NUL, terminal escapes, a bidi override and DEL (the host turns them into spaces).
  Both reasons are the Rust twin's, byte for byte.
Every other answer carries no reason, as a policy written for contract 0.3 answers: the
component also shows that such a policy still builds and answers.
"""

import sys
import time

from diorch_plugin import Decision, NoFit, placement, policy

CONTROL_REASON = "line one\nline two\r\0\x1b[31mred\x1b[0m \u202edesrever\x7f end"


def _reason(mode):
    """The reason of a reason mode, else None (made per call: 1 MiB built at import would end
    up in the component's initial memory)."""
    if mode == "huge-reason":
        return "why " * (256 << 10)
    if mode == "control-reason":
        return CONTROL_REASON
    return None


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
    chosen = placement.place(placement.binpack_score, job, nodes)
    reason = _reason(mode)
    if reason is not None:
        return Decision(chosen, reason)
    return chosen


def optimize(jobs, nodes, previous):
    return placement.optimize(placement.binpack_score, jobs, nodes, previous)


WitWorld = policy(allocate, optimize)
