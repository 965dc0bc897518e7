"""The SDK on CPython: views over a hand-built columnar record (including columns out of range),
pod helpers, the placement loop on the repository's sample snapshot, and the build command's
arguments. The Wasm side is tested by the host (tests/plugins/plugin_languages.rs in the
repository)."""

import json
import sys
import unittest
from pathlib import Path
from types import SimpleNamespace as R

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from diorch_plugin import InvalidInput, NoFit, Pod, placement  # noqa: E402
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


if __name__ == "__main__":
    unittest.main()
