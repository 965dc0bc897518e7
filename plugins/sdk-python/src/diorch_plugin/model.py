"""Read-only views of what a policy call sees: nodes, jobs, tasks and resource amounts.

Owns: `Resources`, `Node`, `Task`, `Job`, `Taint`, and the two ways to get them: from the
contract's columnar `cluster` record (`from_cluster`, inside the component) and from a snapshot
document (`testing.load_snapshot`, on CPython); and a policy's answers: `JobAllocation` (a plan
entry), `Decision` and `JobDecision` (an `allocate` answer and a plan entry with an optional
reason, contract 0.4). Must not touch: the generated
bindings' modules (the record is read by attribute only, so this file imports on any Python).

The contract lays a call out as columns of integers with one string table (see
`wit/plugins.wit`); authors never see that: every read here is bounds-checked like the Rust
SDK's views (an entry out of range reads as 0 or empty, never raises), string ids become
strings, labels and extended resources become read-only dicts.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Iterator, Mapping, NamedTuple, Optional

#: A `placements` entry for a replica that is not placed.
NO_NODE = 0xFFFFFFFF
U64_MAX = (1 << 64) - 1

#: Taint effects by their code in the contract; an unknown code reads as the strictest.
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

_EMPTY: Mapping = MappingProxyType({})
_NO_EFFECTS = frozenset()


class Resources(NamedTuple):
    """An amount of each resource. `extended` maps names such as `rdma/hca` to quantities."""

    cpu_millis: int = 0
    memory_bytes: int = 0
    gpus: int = 0
    extended: Mapping[str, int] = _EMPTY

    def fits(self, request: "Resources") -> bool:
        """True when `request` fits in this amount."""
        if (
            self.cpu_millis < request.cpu_millis
            or self.memory_bytes < request.memory_bytes
            or self.gpus < request.gpus
        ):
            return False
        if request.extended:
            get = self.extended.get
            for name, q in request.extended.items():
                if get(name, 0) < q:
                    return False
        return True

    def minus(self, request: "Resources") -> "Resources":
        """What is left after `request` is taken (each amount at least 0; extended resources
        this amount does not have stay absent)."""
        ext = self.extended
        if request.extended and ext:
            ext = dict(ext)
            for name, q in request.extended.items():
                if name in ext:
                    ext[name] = max(0, ext[name] - q)
            ext = MappingProxyType(ext)
        return Resources(
            max(0, self.cpu_millis - request.cpu_millis),
            max(0, self.memory_bytes - request.memory_bytes),
            max(0, self.gpus - request.gpus),
            ext,
        )


class Taint(NamedTuple):
    key: str
    value: str
    #: `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    effect: str


class Task(NamedTuple):
    """One entry of a DIJob's `spec.tasks`; `requests` are per replica."""

    name: str
    task_type: str
    replicas: int
    min_replicas: int
    max_replicas: int
    requests: Resources


class JobAllocation(NamedTuple):
    """A plan entry: job index (into the call's jobs) and one node index per replica. `optimize`
    gets the previous plan as these; it may answer with them (no reason) or `JobDecision`s."""

    job: int
    nodes: list


class Decision(NamedTuple):
    """An `allocate` answer with a reason: one node index per replica, and optionally why, in
    words a person reading the job's status understands. Returning a plain list of node indices
    is the same as `Decision(nodes)` (no reason). The host keeps at most 256 bytes of a reason
    and turns control characters into spaces."""

    nodes: list
    reason: Optional[str] = None


class JobDecision(NamedTuple):
    """An `optimize` answer's entry with a reason: `JobAllocation` plus an optional `reason`
    (see `Decision`). A `JobAllocation` or a `(job, nodes)` pair is the same without one."""

    job: int
    nodes: list
    reason: Optional[str] = None


class Node:
    """One node of the call; `index` is what an allocation names. Its fields are read-only
    properties (a policy cannot change what the host sent by accident)."""

    __slots__ = ("_index", "_name", "_ready", "_effects", "_alloc", "_free", "_labels", "_taints", "_lazy")

    def __init__(self, index, name, ready, effects, allocatable, free, labels, taints, lazy=None):
        self._index = index
        self._name = name
        self._ready = ready
        self._effects = effects
        self._alloc = allocatable
        self._free = free
        self._labels = labels
        self._taints = taints
        # Reads labels and taints on first use: most policies never look at most nodes' labels.
        self._lazy = lazy

    def _load(self):
        self._labels, self._taints = self._lazy()
        self._lazy = None

    @property
    def index(self) -> int:
        return self._index

    @property
    def name(self) -> str:
        return self._name

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def allocatable(self) -> Resources:
        return self._alloc

    @property
    def free(self) -> Resources:
        """Allocatable minus what pods outside the job(s) being placed request."""
        return self._free

    @property
    def labels(self) -> Mapping[str, str]:
        if self._lazy is not None:
            self._load()
        return self._labels

    @property
    def taints(self) -> tuple:
        if self._lazy is not None:
            self._load()
        return self._taints

    def label(self, key: str) -> Optional[str]:
        return self.labels.get(key)

    def has_taint(self, effect: str) -> bool:
        return effect in self._effects

    @property
    def schedulable(self) -> bool:
        """Ready and without a NoSchedule/NoExecute taint (tasks carry no tolerations here)."""
        e = self._effects
        return self._ready and "NoSchedule" not in e and "NoExecute" not in e

    @property
    def prefers_no_schedule(self) -> bool:
        return "PreferNoSchedule" in self._effects

    def __repr__(self) -> str:
        return f"Node({self._index}, {self._name!r}, free={self._free})"


class Job:
    """One DIJob of the call (for `allocate`, the one being admitted). Read-only."""

    __slots__ = ("index", "key", "priority", "preemptible", "tasks", "current", "profilings", "age_seconds")

    def __init__(self, index, key, priority, preemptible, tasks, current, profilings, age_seconds):
        for k, v in (
            ("index", index),
            ("key", key),
            ("priority", priority),
            ("preemptible", preemptible),
            ("tasks", tuple(tasks)),
            ("current", tuple(current)),
            ("profilings", profilings),
            ("age_seconds", age_seconds),
        ):
            object.__setattr__(self, k, v)

    def __setattr__(self, key, value):
        raise AttributeError("jobs are read-only")

    @property
    def namespace(self) -> str:
        return self.key.split("/", 1)[0] if "/" in self.key else ""

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    @property
    def total_replicas(self) -> int:
        """The length of a valid allocation."""
        return sum(t.replicas for t in self.tasks)

    def replicas(self) -> Iterator[Task]:
        """Each replica's task, in global-rank order (tasks in spec order, then local rank)."""
        for t in self.tasks:
            for _ in range(t.replicas):
                yield t

    def __repr__(self) -> str:
        return f"Job({self.index}, {self.key!r}, tasks={list(self.tasks)})"


# --- the columnar record ----------------------------------------------------------------------


def _run(starts, i, length):
    """Row `i`'s entries of a table of `length` rows by a `starts` column; empty when out of range
    or decreasing."""
    if i < 0 or i + 1 >= len(starts):
        return range(0)
    end = min(starts[i + 1], length)
    return range(min(starts[i], end), end)


def _at(column, i):
    return column[i] if 0 <= i < len(column) else 0


class _Strings:
    """The string table: ids to strings, decoded once each. Offsets are UTF-8 byte offsets."""

    __slots__ = ("_text", "_bytes", "_ends", "_cache")

    def __init__(self, text: str, ends):
        raw = text.encode("utf-8")
        # ASCII (the usual case): byte offsets are character offsets, slice the str directly.
        self._text = text if len(raw) == len(text) else None
        self._bytes = raw
        self._ends = ends
        self._cache = {}

    def get(self, sid) -> str:
        s = self._cache.get(sid)
        if s is not None:
            return s
        ends = self._ends
        if not 0 <= sid < len(ends):
            return ""
        start = ends[sid - 1] if sid > 0 else 0
        end = ends[sid]
        if self._text is not None:
            s = self._text[start:end] if start <= end <= len(self._text) else ""
        else:
            try:
                s = self._bytes[start:end].decode("utf-8") if start <= end <= len(self._bytes) else ""
            except UnicodeDecodeError:
                s = ""
        self._cache[sid] = s
        return s

    def at(self, column, i) -> str:
        return self.get(column[i]) if 0 <= i < len(column) else ""


class _Amounts:
    """One `resource-columns` record, read row by row."""

    __slots__ = ("cpu", "mem", "gpus", "starts", "names", "amounts", "strings")

    def __init__(self, cols, strings):
        self.cpu = cols.cpu_millis
        self.mem = cols.memory_bytes
        self.gpus = cols.gpus
        self.starts = cols.extended_starts
        self.names = cols.extended_name
        self.amounts = cols.extended_amount
        self.strings = strings

    def row(self, i) -> Resources:
        cpu, mem, gpus = self.cpu, self.mem, self.gpus
        ext = _run(self.starts, i, len(self.names))
        extended = _EMPTY
        if ext:
            d = {}
            for e in ext:
                name = self.strings.at(self.names, e)
                if name not in d:
                    d[name] = _at(self.amounts, e)
            extended = MappingProxyType(d)
        return Resources(
            cpu[i] if i < len(cpu) else 0,
            mem[i] if i < len(mem) else 0,
            gpus[i] if i < len(gpus) else 0,
            extended,
        )

    def rows(self, n) -> list:
        """Rows 0..n, in one pass: a call reads every node's amounts, and one method call per
        row cost more than the reads."""
        cpu, mem, gpus, starts = self.cpu, self.mem, self.gpus, self.starts
        if len(cpu) >= n and len(mem) >= n and len(gpus) >= n and len(starts) > n:
            names, amounts = self.names, self.amounts
            cache, text = self.strings._cache, self.strings.get
            n_names, n_amounts = len(names), len(amounts)
            out = []
            append = out.append
            # tuple.__new__ skips NamedTuple's Python-level __new__: half the cost of a row.
            new, cls = tuple.__new__, Resources
            for i in range(n):
                end = starts[i + 1]
                if end > n_names:
                    end = n_names
                start = starts[i]
                extended = _EMPTY
                if start < end:
                    d = {}
                    for e in range(start, end):
                        sid = names[e]
                        name = cache.get(sid)
                        if name is None:
                            name = text(sid)
                        if name not in d:
                            d[name] = amounts[e] if e < n_amounts else 0
                    extended = MappingProxyType(d)
                append(new(cls, (cpu[i], mem[i], gpus[i], extended)))
            return out
        return [self.row(i) for i in range(n)]


def from_cluster(cluster):
    """(jobs, nodes) of a contract `cluster` record."""
    strings = _Strings(cluster.strings, cluster.string_ends)
    return _jobs(cluster, strings), _nodes(cluster, strings)


def _nodes(cluster, strings):
    nt = cluster.nodes
    alloc = _Amounts(nt.allocatable, strings)
    free = _Amounts(nt.free, strings)
    taints, labels = cluster.taints, cluster.labels
    effects_col = taints.effect
    ready = nt.ready
    n = len(nt.name)
    alloc_rows, free_rows = alloc.rows(n), free.rows(n)
    taint_starts, n_effects = nt.taint_starts, len(effects_col)
    names = nt.name
    nodes = []
    for i in range(n):
        run = _run(taint_starts, i, n_effects)
        effects = (
            frozenset(EFFECTS[c] if c < 3 else "NoSchedule" for c in (effects_col[t] for t in run))
            if run
            else _NO_EFFECTS
        )

        def lazy(i=i):
            lab = {}
            for li in _run(nt.label_starts, i, len(labels.key)):
                k = strings.at(labels.key, li)
                if k not in lab:
                    lab[k] = strings.at(labels.value, li)
            tts = tuple(
                Taint(
                    strings.at(taints.key, t),
                    strings.at(taints.value, t),
                    EFFECTS[c] if (c := _at(effects_col, t)) < 3 else "NoSchedule",
                )
                for t in _run(nt.taint_starts, i, len(taints.key))
            )
            return MappingProxyType(lab), tts

        nodes.append(
            Node(
                i,
                strings.get(names[i]),
                _at(ready, i) != 0,
                effects,
                alloc_rows[i],
                free_rows[i],
                None,
                None,
                lazy,
            )
        )
    return nodes


def _jobs(cluster, strings):
    jt, tt = cluster.jobs, cluster.tasks
    req = _Amounts(tt.requests, strings)
    placements = cluster.placements
    jobs = []
    for j in range(len(jt.key)):
        tasks = [
            Task(
                strings.at(tt.name, t),
                strings.at(tt.task_type, t),
                _at(tt.replicas, t),
                _at(tt.min_replicas, t),
                _at(tt.max_replicas, t),
                req.row(t),
            )
            for t in _run(jt.task_starts, j, len(tt.name))
        ]
        current = [
            None if (n := _at(placements, p)) == NO_NODE else n
            for p in _run(jt.current_starts, j, len(placements))
        ]
        jobs.append(
            Job(
                j,
                strings.at(jt.key, j),
                _at(jt.priority, j),
                _at(jt.preemptible, j) != 0,
                tasks,
                current,
                strings.at(jt.profilings, j),
                _at(jt.age_seconds, j),
            )
        )
    return jobs


# --- plain documents (snapshots, tests) --------------------------------------------------------


def resources_from_doc(d) -> Resources:
    d = d or {}
    ext = d.get("extended") or {}
    return Resources(
        int(d.get("cpuMillis", 0)),
        int(d.get("memoryBytes", 0)),
        int(d.get("gpus", 0)),
        MappingProxyType({str(k): int(v) for k, v in ext.items()}) if ext else _EMPTY,
    )


def node_from_doc(i, d) -> Node:
    taints = tuple(Taint(t.get("key", ""), t.get("value", ""), t["effect"]) for t in d.get("taints") or [])
    return Node(
        i,
        d["name"],
        bool(d.get("ready", False)),
        frozenset(t.effect for t in taints),
        resources_from_doc(d.get("allocatable")),
        resources_from_doc(d.get("free")),
        MappingProxyType(dict(d.get("labels") or {})),
        taints,
    )


def job_from_doc(j, d) -> Job:
    return Job(
        j,
        d["key"],
        int(d.get("priority", 0)),
        bool(d.get("preemptible", False)),
        [
            Task(
                t["name"],
                t.get("taskType", t["name"]),
                int(t.get("replicas", 0)),
                int(t.get("minReplicas", 0)),
                int(t.get("maxReplicas", 0)),
                resources_from_doc(t.get("requests")),
            )
            for t in d.get("tasks") or []
        ],
        list(d.get("current") or []),
        d.get("profilings", ""),
        int(d.get("ageSeconds", 0)),
    )
