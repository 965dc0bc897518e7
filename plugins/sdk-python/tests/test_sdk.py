"""The SDK on CPython: views over a hand-built columnar record (including columns out of range),
pod helpers, the placement loop on the repository's sample snapshot, the answers' mapping to the
contract's types (with stand-ins for the generated bindings), the example policies' reasons,
the SDK's copy of the contract, and a build of a policy without reasons. The Wasm side is tested
by the host (tests/plugins/plugin_languages.rs in the repository)."""

import dataclasses
import importlib.util
import json
import re
import sys
import tempfile
import types as pytypes
import unittest
from pathlib import Path
from types import SimpleNamespace as R

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import diorch_plugin  # noqa: E402
from diorch_plugin import (  # noqa: E402
    Decision,
    InvalidInput,
    JobAllocation,
    JobDecision,
    NoFit,
    Pod,
    placement,
    policy,
)
from diorch_plugin.model import from_cluster  # noqa: E402
from diorch_plugin.testing import load_snapshot, task_context  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "plugins/examples-python/accel-env"))


def columns(cpu, mem, gpus, starts=None, names=(), amounts=()):
    return R(
        cpu_millis=list(cpu),
        memory_bytes=list(mem),
        gpus=list(gpus),
        extended_starts=list(starts if starts is not None else [0] * (len(cpu) + 1)),
        extended_name=list(names),
        extended_amount=list(amounts),
    )


def table(strings):
    """A string table and an id function."""
    text, ends = "", []
    for s in strings:
        text += s
        ends.append(len(text.encode()))
    return text, ends


class ViewsTest(unittest.TestCase):
    def cluster(self):
        text, ends = table(["n0", "n1", "zone", "a", "ns/j", "learner", "rdma/hca", "k", "v", "é"])
        return R(
            strings=text,
            string_ends=ends,
            nodes=R(
                name=[0, 1],
                label_starts=[0, 1, 1],
                taint_starts=[0, 0, 1],
                allocatable=columns([8000, 4000], [1 << 34, 1 << 33], [8, 0], [0, 1, 1], [6], [4]),
                free=columns([6000, 4000], [1 << 33, 1 << 33], [6, 0], [0, 1, 1], [6], [2]),
                ready=b"\x01\x00",
            ),
            jobs=R(
                key=[4],
                priority=[3],
                preemptible=b"\x01",
                task_starts=[0, 1],
                current_starts=[0, 2],
                profilings=[99],  # out of range: reads as ""
                age_seconds=[7],
            ),
            tasks=R(
                name=[5],
                task_type=[5],
                replicas=[2],
                min_replicas=[1],
                max_replicas=[2],
                requests=columns([1000], [1 << 30], [1], [0, 1], [6], [1]),
            ),
            placements=[0, 0xFFFFFFFF],
            labels=R(key=[2], value=[3]),
            taints=R(key=[7], value=[8], effect=b"\x07"),  # unknown effect code: NoSchedule
        )

    def test_reads_the_columns_as_records(self):
        jobs, nodes = from_cluster(self.cluster())
        n0, n1 = nodes
        self.assertEqual((n0.index, n0.name, n0.ready), (0, "n0", True))
        self.assertEqual(dict(n0.labels), {"zone": "a"})
        self.assertEqual(n0.free.gpus, 6)
        self.assertEqual(dict(n0.free.extended), {"rdma/hca": 2})
        self.assertTrue(n0.schedulable)
        self.assertFalse(n1.schedulable)
        self.assertEqual(n1.taints[0].effect, "NoSchedule")
        (job,) = jobs
        self.assertEqual((job.key, job.namespace, job.name, job.priority), ("ns/j", "ns", "j", 3))
        self.assertTrue(job.preemptible)
        self.assertEqual(job.current, (0, None))
        self.assertEqual(job.profilings, "")
        self.assertEqual(job.total_replicas, 2)
        self.assertTrue(n0.free.fits(job.tasks[0].requests))
        with self.assertRaises(AttributeError):
            n0.name = "x"
        with self.assertRaises(TypeError):
            n0.labels["zone"] = "b"

    def test_columns_out_of_range_read_as_empty_never_raise(self):
        c = self.cluster()
        c.nodes.label_starts = [5, 1]  # decreasing, then missing
        c.nodes.free.gpus = []  # shorter than the table
        c.string_ends = [2, 1]  # decreasing offsets
        jobs, nodes = from_cluster(c)
        self.assertEqual(dict(nodes[0].labels), {})
        self.assertEqual(nodes[1].free.gpus, 0)
        self.assertEqual(nodes[1].name, "")
        self.assertEqual(jobs[0].key, "")

    def test_utf8_offsets(self):
        c = self.cluster()
        c.nodes.name = [9]
        _, nodes = from_cluster(c)
        self.assertEqual(nodes[0].name, "é")


class PlacementTest(unittest.TestCase):
    def test_binpack_on_the_sample_snapshot(self):
        jobs, nodes, _ = load_snapshot(str(REPO / "examples/snapshot.json"))
        job = next(j for j in jobs if j.key == "research/ppo-football")
        got = placement.place(placement.binpack_score, job, nodes)
        self.assertEqual(got, [4, 4, 5, 5] + [7] * 9)

    def test_no_fit_names_the_task_and_is_what_rust_says(self):
        jobs, nodes, _ = load_snapshot(
            {
                "nodes": [{"name": "n", "ready": True, "allocatable": {"gpus": 1}, "free": {"gpus": 1}}],
                "jobs": [
                    {
                        "key": "ns/a",
                        "preemptible": True,
                        "tasks": [
                            {
                                "name": "learner",
                                "taskType": "learner",
                                "replicas": 2,
                                "requests": {"cpuMillis": 1, "memoryBytes": 2, "gpus": 1, "extended": {"x/y": 1}},
                            }
                        ],
                    }
                ],
            }
        )
        with self.assertRaises(NoFit) as e:
            placement.place(placement.binpack_score, jobs[0], nodes)
        self.assertEqual(
            str(e.exception),
            'job ns/a: a replica of task learner needs 1m CPU, 2 bytes memory, 1 GPUs and [("x/y", 1)] '
            "and no ready, untainted node has room",
        )

    def test_optimize_keeps_valid_placements(self):
        jobs, nodes, previous = load_snapshot(str(REPO / "examples/snapshot.json"))
        plan = placement.optimize(placement.binpack_score, jobs, nodes, previous)
        self.assertEqual([p.job for p in plan], sorted(p.job for p in plan))
        for p in plan:
            self.assertEqual(len(p.nodes), jobs[p.job].total_replicas)
        # The plan as the previous one, on nodes with nothing of these jobs on them: kept as is.
        again = placement.optimize(placement.binpack_score, jobs, nodes, plan)
        self.assertEqual(again, plan)


class PodTest(unittest.TestCase):
    POD = (
        '{"metadata":{"name":"j-learner-0","labels":{"diengine/job":"j"}},"spec":{"containers":'
        '[{"name":"di-container","env":[{"name":"DI_RANK","value":"0"}]},{"name":"side"}]}}'
    )

    def test_edits_round_trip(self):
        pod = Pod.parse(self.POD)
        self.assertEqual(pod.container_names, ["di-container", "side"])
        self.assertEqual(pod.set_env("di-container", "NCCL_DEBUG", "INFO"), 1)
        self.assertEqual(pod.set_env(None, "X", "1"), 2)
        self.assertEqual(pod.set_env(None, "X", "2"), 2)
        tol = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
        pod.add_toleration(tol)
        pod.add_toleration(dict(tol))
        back = Pod.parse(pod.to_json())
        self.assertEqual(back.env("di-container", "NCCL_DEBUG"), "INFO")
        self.assertEqual(back.env("side", "X"), "2")
        self.assertEqual(len(back.tolerations), 1)
        back.remove_env("DI_RANK")
        self.assertIsNone(back.env("di-container", "DI_RANK"))

    def test_refuses_what_is_not_a_pod(self):
        for text in ("[1]", "{", '{"a": NaN}'):
            with self.assertRaises(InvalidInput):
                Pod.parse(text)


class AccelEnvTest(unittest.TestCase):
    def test_learners_get_nccl_env(self):
        import app

        pod = Pod.parse(PodTest.POD)
        app.mutate(task_context("learner", config='{"interface":"ib0","rdma":true,"env":{"Z":"1","A":"2"}}'), pod)
        self.assertEqual(pod.env("di-container", "NCCL_SOCKET_IFNAME"), "ib0")
        self.assertEqual(pod.env("di-container", "NCCL_IB_DISABLE"), "0")
        names = [e["name"] for e in pod.value["spec"]["containers"][0]["env"]]
        self.assertEqual(names[-2:], ["A", "Z"])
        with self.assertRaises(InvalidInput):
            app.mutate(task_context("learner", config='{"env":{"DI_RANK":"0"}}'), pod)
        with self.assertRaises(InvalidInput):
            app.mutate(task_context("learner", config='{"rdma":null}'), pod)
        untouched = json.loads(PodTest.POD)
        pod = Pod.parse(PodTest.POD)
        app.mutate(task_context("collector"), pod)
        self.assertEqual(pod.value, untouched)


# --- contract 0.4: reasons -----------------------------------------------------------------------


def example(name):
    """The example policy module plugins/examples-python/NAME/app.py, under its own name."""
    path = REPO / "plugins/examples-python" / name / "app.py"
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def snapshot(nodes, jobs=()):
    """(jobs, nodes) of a small snapshot document."""
    jobs_, nodes_, _ = load_snapshot({"nodes": nodes, "jobs": list(jobs)})
    return jobs_, nodes_


def node(name, cpu=8000, gpus=0, zone=None):
    d = {
        "name": name,
        "ready": True,
        "allocatable": {"cpuMillis": cpu, "memoryBytes": 1 << 36, "gpus": gpus},
        "free": {"cpuMillis": cpu, "memoryBytes": 1 << 36, "gpus": gpus},
    }
    if zone is not None:
        d["labels"] = {placement.ZONE_LABEL: zone}
    return d


def job(key, tasks, current=None):
    return {
        "key": key,
        "tasks": [
            {"name": n, "replicas": r, "requests": {"cpuMillis": 1000, "memoryBytes": 1 << 20, "gpus": g}}
            for n, r, g in tasks
        ],
        "current": current or [],
    }


class ReasonTest(unittest.TestCase):
    """The reasons' exact text: the Rust and JS examples give the same bytes (the host's parity
    test compares them), so every case pins the whole string."""

    def test_tally_keeps_first_appearance_order(self):
        self.assertEqual(placement.tally([3, 1, 3, 0, 1, 3]), [(3, 3), (1, 2), (0, 1)])
        self.assertEqual(placement.tally([]), [])

    def test_binpack_gpu_job_names_free_gpus(self):
        # Any task asking for a GPU makes it a GPU job, even when this answer's first node is
        # for a CPU-only task; the free amounts are the input's, before this placement.
        jobs, nodes = snapshot(
            [node("gpu-a", cpu=32000, gpus=2), node("gpu-b", cpu=64000, gpus=8)],
            [job("ns/j", [("collector", 1, 0), ("learner", 2, 1)])],
        )
        self.assertEqual(
            placement.binpack_reason(jobs[0], nodes, [1, 0, 0]),
            "bin-pack, fullest fitting node first: gpu-b\u00d71 (8 free GPUs), gpu-a\u00d72 (2 free GPUs)",
        )

    def test_binpack_cpu_job_names_free_cpu(self):
        jobs, nodes = snapshot(
            [node("cpu-a", cpu=4000), node("cpu-b", cpu=16000, gpus=4)],
            [job("ns/j", [("collector", 3, 0)])],
        )
        self.assertEqual(
            placement.binpack_reason(jobs[0], nodes, [1, 1, 0]),
            "bin-pack, fullest fitting node first: cpu-b\u00d72 (16000m CPU free), cpu-a\u00d71 (4000m CPU free)",
        )

    def test_spread_counts_zones_and_unlabelled_nodes_as_zones_of_their_own(self):
        _, nodes = snapshot(
            [node("a-1", zone="a"), node("a-2", zone="a"), node("b-1", zone="b"), node("bare-1"), node("bare-2")]
        )
        self.assertEqual(
            placement.spread_reason(nodes, [0, 1, 2]),
            "spread: 3 nodes in 2 zones, at most 1 per node: a-1\u00d71, a-2\u00d71, b-1\u00d71",
        )
        self.assertEqual(
            placement.spread_reason(nodes, [0, 2, 3, 4, 0]),
            "spread: 4 nodes in 4 zones, at most 2 per node: a-1\u00d72, b-1\u00d71, bare-1\u00d71, bare-2\u00d71",
        )
        self.assertEqual(
            placement.spread_reason(nodes, [3, 3, 3]),
            "spread: 1 nodes in 1 zones, at most 3 per node: bare-1\u00d73",
        )

    def test_empty_answers_have_no_reason(self):
        # As in Rust (explain::replan) and JS: an entry placing nothing says nothing, even for a
        # job that had replicas.
        jobs, nodes = snapshot([node("n0")], [job("ns/j", [("c", 1, 0)], current=[0]), job("ns/k", [])])
        self.assertIsNone(placement.binpack_reason(jobs[0], nodes, []))
        self.assertIsNone(placement.spread_reason(nodes, []))
        self.assertIsNone(placement.replan_reason("bin-pack", jobs[1], nodes, []))
        self.assertIsNone(placement.replan_reason("bin-pack", jobs[0], nodes, []))

    def test_nodes_out_of_range_read_as_question_marks_as_in_rust(self):
        jobs, nodes = snapshot([node("n0", zone="a")], [job("ns/j", [("c", 1, 1)])])
        self.assertEqual(
            placement.binpack_reason(jobs[0], nodes, [7, 0]),
            "bin-pack, fullest fitting node first: ?\u00d71 (), n0\u00d71 (0 free GPUs)",
        )
        self.assertEqual(
            placement.spread_reason(nodes, [7, 8, 0]),
            "spread: 3 nodes in 3 zones, at most 1 per node: ?\u00d71, ?\u00d71, n0\u00d71",
        )

    def test_replan_reason_counts_moved_replicas(self):
        nodes = [node("n0"), node("n1"), node("n2")]
        jobs, nodes = snapshot(
            nodes,
            [
                job("ns/same", [("c", 2, 0)], current=[0, 1]),
                job("ns/moved", [("c", 3, 0)], current=[0, 1, None]),
                job("ns/new", [("c", 2, 0)]),
                job("ns/partial", [("c", 2, 0)], current=[0, None]),
            ],
        )
        same, moved, new, partial = jobs
        self.assertIsNone(placement.replan_reason("bin-pack", same, nodes, [0, 1]))
        self.assertEqual(
            placement.replan_reason("bin-pack", same, nodes, [1, 1]),
            "re-planned by bin-pack: 1 of 2 replicas move; now n1\u00d72",
        )
        # Grown: nothing moves, but the job's replicas change.
        self.assertEqual(
            placement.replan_reason("spread", same, nodes, [0, 1, 1]),
            "re-planned by spread: 0 of 3 replicas move; now n0\u00d71, n1\u00d72",
        )
        # Shrunk: only the replicas both have are compared.
        self.assertEqual(
            placement.replan_reason("spread", moved, nodes, [2]),
            "re-planned by spread: 1 of 1 replicas move; now n2\u00d71",
        )
        # A replica that was not placed does not count as moved.
        self.assertEqual(
            placement.replan_reason("bin-pack", moved, nodes, [0, 2, 2]),
            "re-planned by bin-pack: 1 of 3 replicas move; now n0\u00d71, n2\u00d72",
        )
        self.assertEqual(
            placement.replan_reason("bin-pack", new, nodes, [2, 2]),
            "re-planned by bin-pack: 0 of 2 replicas move; now n2\u00d72",
        )
        self.assertEqual(
            placement.replan_reason("spread", partial, nodes, [0, 1]),
            "re-planned by spread: 0 of 2 replicas move; now n0\u00d71, n1\u00d71",
        )

    def test_with_reasons_wraps_a_plan(self):
        jobs, nodes = snapshot(
            [node("n0"), node("n1")],
            [job("ns/a", [("c", 1, 0)], current=[0]), job("ns/b", [("c", 1, 0)], current=[0])],
        )
        plan = [JobAllocation(0, [0]), JobAllocation(1, [1]), JobDecision(1, [1], "mine"), JobAllocation(5, [1])]
        self.assertEqual(
            placement.with_reasons("spread", jobs, nodes, plan),
            [
                JobDecision(0, [0], None),
                JobDecision(1, [1], "re-planned by spread: 1 of 1 replicas move; now n1\u00d71"),
                JobDecision(1, [1], "mine"),
                JobDecision(5, [1], None),
            ],
        )

    def test_binpack_example_says_why_on_the_sample_snapshot(self):
        jobs, nodes, _ = load_snapshot(str(REPO / "examples/snapshot.json"))
        job_ = next(j for j in jobs if j.key == "research/ppo-football")
        got = example("binpack").allocate(job_, nodes)
        self.assertIsInstance(got, Decision)
        self.assertEqual(got.nodes, [4, 4, 5, 5] + [7] * 9)
        self.assertEqual(
            got.reason,
            "bin-pack, fullest fitting node first: gpu-b-01\u00d72 (2 free GPUs), gpu-b-02\u00d72 (4 free GPUs), "
            "cpu-c-01\u00d79 (0 free GPUs)",
        )

    def test_spread_example_says_why(self):
        jobs, nodes = snapshot(
            [node("a-1", zone="a"), node("a-2", zone="a"), node("b-1", zone="b"), node("bare")],
            [job("ns/j", [("c", 3, 0)])],
        )
        got = example("spread").allocate(jobs[0], nodes)
        self.assertEqual(got.nodes, placement.place(placement.spread_score, jobs[0], nodes))
        self.assertEqual(
            got.reason,
            "spread: 3 nodes in 3 zones, at most 1 per node: a-1\u00d71, b-1\u00d71, bare\u00d71",
        )

    def test_examples_optimize_give_reasons_only_where_a_job_changes(self):
        jobs, nodes = snapshot(
            [node("n0", cpu=2000), node("n1", cpu=2000)],
            [
                job("ns/stays", [("c", 1, 0)], current=[1]),
                job("ns/new", [("c", 1, 0)]),
            ],
        )
        for name, word in (("binpack", "bin-pack"), ("spread", "spread")):
            plan = example(name).optimize(jobs, nodes, [])
            self.assertEqual([type(p) for p in plan], [JobDecision, JobDecision], name)
            self.assertEqual(plan[0], JobDecision(0, [1], None), name)
            self.assertEqual(plan[1].job, 1)
            (n,) = plan[1].nodes
            self.assertEqual(
                plan[1].reason, f"re-planned by {word}: 0 of 1 replicas move; now {nodes[n].name}\u00d71", name
            )


# --- the contract's types, with stand-ins for the generated bindings -----------------------------


class _Err(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value


def _bindings():
    """Modules shaped like componentize-py's generated ones for `wit/plugins.wit` 0.5.0."""

    def record(name, *fields):
        return dataclasses.make_dataclass(name, fields)

    types = pytypes.ModuleType("wit_world.imports.types")
    types.Decision = record("Decision", "nodes", "reason")
    types.JobDecision = record("JobDecision", "job", "nodes", "reason")
    types.JobAllocation = record("JobAllocation", "job", "nodes")
    for variant in ("NoFit", "InvalidInput", "Internal"):
        setattr(types, f"Error_{variant}", record(f"Error_{variant}", "value"))
    imports = pytypes.ModuleType("wit_world.imports")
    imports.types = types
    world = pytypes.ModuleType("wit_world")
    world.imports = imports
    cpt = pytypes.ModuleType("componentize_py_types")
    cpt.Err = _Err
    return {
        "wit_world": world,
        "wit_world.imports": imports,
        "wit_world.imports.types": types,
        "componentize_py_types": cpt,
    }


class WorldTest(unittest.TestCase):
    """`policy(...)`'s `WitWorld` maps answers with and without reasons to `decision` and
    `job-decision`; a policy written for 0.3 (lists, `JobAllocation`s) answers unchanged."""

    def setUp(self):
        self.saved = {k: sys.modules.get(k) for k in _bindings()}
        sys.modules.update(_bindings())
        self.t = sys.modules["wit_world.imports.types"]
        self.cluster = ViewsTest().cluster()

    def tearDown(self):
        for k, v in self.saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v

    def refusal(self, world, *args, call="allocate"):
        with self.assertRaises(_Err) as e:
            getattr(world(), call)(*args)
        return e.exception.value

    def test_a_policy_without_reasons_answers_as_before(self):
        world = policy(lambda job, nodes: [0] * job.total_replicas)
        self.assertEqual(world().allocate(self.cluster), self.t.Decision([0, 0], None))
        # Without optimize: a job keeps a complete placement (this one's is not: nothing).
        self.assertEqual(world().optimize(self.cluster, []), [])
        plan = lambda jobs, nodes, previous: [JobAllocation(0, [0, 0]), (0, (1, 0))]  # noqa: E731
        self.assertEqual(
            policy(lambda j, n: [0], plan)().optimize(self.cluster, []),
            [self.t.JobDecision(0, [0, 0], None), self.t.JobDecision(0, [1, 0], None)],
        )

    def test_a_policy_never_preempts(self):
        # Contract 0.5.0: `preempt` answers none (the job that does not fit waits).
        world = policy(lambda job, nodes: [0] * job.total_replicas)
        self.assertIsNone(world().preempt(self.cluster, None))

    def test_reasons_reach_the_contract(self):
        world = policy(lambda job, nodes: Decision([0, 0], "n0 has room"))
        self.assertEqual(world().allocate(self.cluster), self.t.Decision([0, 0], "n0 has room"))
        self.assertEqual(
            policy(lambda j, n: Decision((0, 0)))().allocate(self.cluster), self.t.Decision([0, 0], None)
        )
        plan = lambda jobs, nodes, previous: [  # noqa: E731
            JobDecision(0, [0, 0], "kept"),
            JobDecision(0, [0, 0]),
            (0, [0, 0], "a triple"),
            R(job=0, nodes=[0, 0], reason="an object"),
            R(job=0, nodes=[0, 0]),
        ]
        self.assertEqual(
            policy(lambda j, n: [0], plan)().optimize(self.cluster, []),
            [
                self.t.JobDecision(0, [0, 0], "kept"),
                self.t.JobDecision(0, [0, 0], None),
                self.t.JobDecision(0, [0, 0], "a triple"),
                self.t.JobDecision(0, [0, 0], "an object"),
                self.t.JobDecision(0, [0, 0], None),
            ],
        )

    def test_reasons_pass_as_they_are_except_what_utf8_cannot_hold(self):
        # Length and control characters are the host's to bound; a lone surrogate cannot be
        # sent at all, so it becomes U+FFFD rather than failing the answer.
        text = "a\x00b\x1b[31m\u202e" + "x" * (1 << 20)
        got = policy(lambda j, n: Decision([0, 0], text))().allocate(self.cluster)
        self.assertEqual(got.reason, text)
        got = policy(lambda j, n: Decision([0, 0], "bad \ud800 text"))().allocate(self.cluster)
        self.assertEqual(got.reason, "bad \ufffd text")

    def test_wrong_answers_are_internal_errors_not_traps(self):
        err = self.refusal(policy(lambda j, n: Decision([0, 0], 42)), self.cluster)
        self.assertIsInstance(err, self.t.Error_Internal)
        self.assertIn("allocate's reason must be a str or None, got int", err.value)
        err = self.refusal(policy(lambda j, n: Decision("n0")), self.cluster)
        self.assertIsInstance(err, self.t.Error_Internal)
        err = self.refusal(policy(lambda j, n: ([0, 0], "a tuple is not a decision")), self.cluster)
        self.assertIn("allocate's answer must be a list of node indices", err.value)
        bad_plans = [
            [(0, [0], "why", "extra")],
            [(0, [0], b"bytes")],
            [JobDecision(-1, [0])],
            [42],
        ]
        for bad in bad_plans:
            err = self.refusal(policy(lambda j, n: [0], lambda *a, b=bad: b), self.cluster, [], call="optimize")
            self.assertIsInstance(err, self.t.Error_Internal, bad)
        err = self.refusal(policy(lambda j, n: (_ for _ in ()).throw(NoFit("full"))), self.cluster)
        self.assertEqual(err, self.t.Error_NoFit("full"))


# --- the contract copy and a build -----------------------------------------------------------------

SDK = Path(__file__).resolve().parents[1]


class ContractTest(unittest.TestCase):
    def test_the_sdks_wit_is_the_repositorys_and_contract_names_its_version(self):
        ours = (SDK / "src/diorch_plugin/wit/plugins.wit").read_text(encoding="utf-8")
        self.assertEqual(ours, (REPO / "wit/plugins.wit").read_text(encoding="utf-8"))
        (version,) = re.findall(r"^package diorch:plugins@([0-9.]+);$", ours, re.M)
        self.assertEqual(diorch_plugin.CONTRACT, version)
        self.assertEqual(version, "0.5.0")


REASONLESS_POLICY = """
from diorch_plugin import JobAllocation, NoFit, policy

def allocate(job, nodes):
    fit = [n for n in nodes if n.schedulable]
    if not fit:
        raise NoFit("no node")
    return [fit[0].index] * job.total_replicas

def optimize(jobs, nodes, previous):
    return [JobAllocation(p.job, list(p.nodes)) for p in previous]

WitWorld = policy(allocate, optimize)
"""


class BuildTest(unittest.TestCase):
    def test_a_policy_without_reasons_builds_against_this_contract(self):
        from diorch_plugin import build

        try:
            build.componentize_py()
        except SystemExit as e:
            self.skipTest(f"componentize-py is not installed here ({e}); scripts/build-lang-plugins.sh runs this")
        with tempfile.TemporaryDirectory() as tmp:
            app = Path(tmp) / "app.py"
            app.write_text(REASONLESS_POLICY, encoding="utf-8")
            out = Path(tmp) / "policy.wasm"
            build.build(app, "policy", out)
            wasm = out.read_bytes()
        # A component (layer 1), importing this contract's version of the log interface.
        self.assertEqual(wasm[:8], b"\0asm\x0d\x00\x01\x00")
        self.assertIn(b"diorch:plugins/log@0.5.0", wasm)


if __name__ == "__main__":
    unittest.main()
