"""Run a plugin's functions on CPython, without building a component.

Owns: reading diorch's snapshot files (`diorch plugin snapshot` writes them; the format is
`examples/snapshot.json` in the diorch repository) and sample task contexts into the same views
a component sees. Must not touch: the build.

    jobs, nodes, previous = load_snapshot("sample.json")
    assert allocate(jobs[0], nodes) == [0, 0, 1]
"""

from __future__ import annotations

import json
from typing import List, Tuple, Union

from ._world import TaskContext
from .model import Job, JobAllocation, Node, job_from_doc, node_from_doc


def load_snapshot(source: Union[str, dict]) -> Tuple[List[Job], List[Node], List[JobAllocation]]:
    """(jobs, nodes, previous) of a snapshot file (path) or document (dict). Job `current`
    entries are node indices, or None for a replica that is not placed."""
    doc = source
    if not isinstance(source, dict):
        with open(source, encoding="utf-8") as f:
            doc = json.load(f)
    nodes = [node_from_doc(i, n) for i, n in enumerate(doc.get("nodes") or [])]
    jobs = [job_from_doc(j, d) for j, d in enumerate(doc.get("jobs") or [])]
    previous = [JobAllocation(p["job"], list(p["nodes"])) for p in doc.get("previous") or []]
    return jobs, nodes, previous


class _Ctx:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def task_context(
    task_type: str = "learner",
    *,
    job_key: str = "default/job",
    task_name: str = "",
    rank: int = 0,
    task_rank: int = 0,
    world_size: int = 1,
    node=None,
    job_labels=(),
    job_annotations=(),
    config: str = "",
) -> TaskContext:
    """A task context as the host would send it, for mutator tests."""
    return TaskContext(
        _Ctx(
            job_key=job_key,
            task_name=task_name or task_type,
            task_type=task_type,
            rank=rank,
            task_rank=task_rank,
            world_size=world_size,
            node=node,
            job_labels=list(dict(job_labels).items()),
            job_annotations=list(dict(job_annotations).items()),
            config=config,
        )
    )
