// Owns: tests of the example policies' reasons (plugins/examples-js/shared/reasons.js, on the
// SDK's tally/perNode/replanReason), pinning their exact text: the Rust examples
// (plugins/policies/src/explain.rs) and the Python ones give the same strings byte for byte, and
// the host's parity test compares them.

import assert from "node:assert/strict";
import { test } from "node:test";

import { encodeCluster, loadSnapshot } from "../src/testing.js";
import { SNAPSHOT, load } from "./helpers/examples.mjs";

const binpack = await load("examples-js/binpack/index.js");
const spread = await load("examples-js/spread/index.js");
const reasons = await load("examples-js/shared/reasons.js");

const GIB = 2 ** 30;
const ZONE = "topology.kubernetes.io/zone";

function node(name, { gpus = 0, usedGpus = 0, cpu = 32000, usedCpu = 0, zone } = {}) {
  return {
    name,
    labels: zone === undefined ? {} : { [ZONE]: zone },
    allocatable: { cpuMillis: cpu, memoryBytes: 256 * GIB, gpus },
    free: { cpuMillis: cpu - usedCpu, memoryBytes: 256 * GIB, gpus: gpus - usedGpus },
    ready: true,
  };
}

function job(tasks, current = []) {
  return {
    key: "ns/j",
    preemptible: true,
    tasks: tasks.map(([name, replicas, requests]) => ({
      name,
      taskType: name,
      replicas,
      minReplicas: 1,
      maxReplicas: replicas,
      requests: { memoryBytes: GIB, gpus: 0, ...requests },
    })),
    current,
  };
}

const GPU_JOB = job([["learner", 2, { cpuMillis: 4000, gpus: 2 }], ["collector", 3, { cpuMillis: 1000 }]]);
const CPU_JOB = job([["collector", 3, { cpuMillis: 8000 }]]);

test("bin-pack: a GPU job's reason names the free GPUs, a CPU job's the free CPU", () => {
  // The learners (2 GPUs each) fill gpu-1 then go to gpu-0, the collectors to the CPU node; the
  // nodes are named in rank order, with what they had free before this placement.
  const nodes = [node("gpu-0", { gpus: 8, usedGpus: 2, usedCpu: 2000 }), node("gpu-1", { gpus: 8, usedGpus: 6 }), node("cpu-0", { usedCpu: 16000 })];
  const gpu = binpack.allocate(encodeCluster({ nodes, jobs: [GPU_JOB] }));
  assert.deepEqual(gpu, {
    nodes: [1, 0, 2, 2, 2],
    reason: "bin-pack, fullest fitting node first: gpu-1×1 (2 free GPUs), gpu-0×1 (6 free GPUs), cpu-0×3 (0 free GPUs)",
  });
  // A GPU request on a task without replicas still makes it a GPU job (any task of the job).
  const cpuOnly = [node("a", { cpu: 16000, usedCpu: 4000 }), node("b", { cpu: 64000 })];
  assert.deepEqual(binpack.allocate(encodeCluster({ nodes: cpuOnly, jobs: [CPU_JOB] })), {
    nodes: [0, 1, 1],
    reason: "bin-pack, fullest fitting node first: a×1 (12000m CPU free), b×2 (64000m CPU free)",
  });
  const withIdleGpuTask = job([["collector", 1, { cpuMillis: 8000 }], ["learner", 0, { cpuMillis: 1, gpus: 1 }]]);
  assert.equal(
    binpack.allocate(encodeCluster({ nodes: cpuOnly, jobs: [withIdleGpuTask] })).reason,
    "bin-pack, fullest fitting node first: a×1 (0 free GPUs)",
  );
});

test("bin-pack: large amounts print as plain integers (no exponent, no n suffix)", () => {
  const big = { ...node("big"), free: { cpuMillis: 2 ** 50, memoryBytes: 2 ** 60, gpus: 4294967295 }, allocatable: { cpuMillis: 2 ** 50, memoryBytes: 2 ** 60, gpus: 4294967295 } };
  assert.equal(
    binpack.allocate(encodeCluster({ nodes: [big], jobs: [CPU_JOB] })).reason,
    "bin-pack, fullest fitting node first: big×3 (1125899906842624m CPU free)",
  );
  assert.equal(
    binpack.allocate(encodeCluster({ nodes: [big], jobs: [GPU_JOB] })).reason,
    "bin-pack, fullest fitting node first: big×5 (4294967295 free GPUs)",
  );
});

test("spread: zones are the label's values, a node without the label a zone of its own", () => {
  const nodes = [
    node("a-0", { zone: "a" }),
    node("a-1", { zone: "a" }),
    node("b-0", { zone: "b" }),
    node("bare-0"),
    node("bare-1"),
    node("empty", { zone: "" }),
  ];
  const views = loadSnapshot({ nodes, jobs: [] }).nodes;
  assert.equal(
    reasons.spreadReason(views, [0, 1, 2, 3, 4, 5, 0]),
    "spread: 6 nodes in 5 zones, at most 2 per node: a-0×2, a-1×1, b-0×1, bare-0×1, bare-1×1, empty×1",
  );
  assert.equal(reasons.spreadReason(views, [3, 4, 3]), "spread: 2 nodes in 2 zones, at most 2 per node: bare-0×2, bare-1×1");
  assert.equal(reasons.spreadReason(views, [1, 0]), "spread: 2 nodes in 1 zones, at most 1 per node: a-1×1, a-0×1");
  // Through the export: four replicas over two labelled zones and one unlabelled node.
  const three = [node("z1", { zone: "one" }), node("z2", { zone: "two" }), node("loose")];
  assert.deepEqual(spread.allocate(encodeCluster({ nodes: three, jobs: [CPU_JOB] })), {
    nodes: [0, 1, 2],
    reason: "spread: 3 nodes in 3 zones, at most 1 per node: z1×1, z2×1, loose×1",
  });
});

test("the Rust examples' unit cases (plugins/policies/src/explain.rs)", () => {
  const gpuNodes = loadSnapshot({ nodes: [node("a-1", { gpus: 8 }), node("a-3", { gpus: 8, usedGpus: 6 })], jobs: [job([["learner", 3, { cpuMillis: 1, gpus: 1 }]])] });
  assert.equal(
    reasons.binpackReason(gpuNodes.jobs[0], gpuNodes.nodes, [1, 1, 0]),
    "bin-pack, fullest fitting node first: a-3×2 (2 free GPUs), a-1×1 (8 free GPUs)",
  );
  const cpu = loadSnapshot({ nodes: [node("c", { cpu: 4000 })], jobs: [job([["collector", 2, { cpuMillis: 1 }]])] });
  assert.equal(reasons.binpackReason(cpu.jobs[0], cpu.nodes, [0, 0]), "bin-pack, fullest fitting node first: c×2 (4000m CPU free)");
  assert.equal(reasons.binpackReason(cpu.jobs[0], cpu.nodes, []), null);
  const four = loadSnapshot({ nodes: [node("n0", { zone: "z1" }), node("n1", { zone: "z1" }), node("n2"), node("n3")], jobs: [] }).nodes;
  assert.equal(reasons.spreadReason(four, [0, 1, 2, 3, 3]), "spread: 4 nodes in 3 zones, at most 2 per node: n0×1, n1×1, n2×1, n3×2");
  // An index outside the nodes (never in the examples' own answers): `?`, as in Rust.
  assert.equal(reasons.binpackReason(cpu.jobs[0], cpu.nodes, [0, 9]), "bin-pack, fullest fitting node first: c×1 (4000m CPU free), ?×1 ()");
  assert.equal(reasons.spreadReason(four, [9, 9]), "spread: 1 nodes in 1 zones, at most 2 per node: ?×2");
});

test("an empty answer has no reason", () => {
  const s = loadSnapshot({ nodes: [node("n")], jobs: [CPU_JOB] });
  assert.equal(reasons.binpackReason(s.jobs[0], s.nodes, []), null);
  assert.equal(reasons.spreadReason(s.nodes, []), null);
});

test("optimize: a job left where it is has no reason; a moved or completed one says so", () => {
  const nodes = [node("gpu-0", { gpus: 8 }), node("gpu-1", { gpus: 8, usedGpus: 4 }), node("cpu-0", { cpu: 128000, usedCpu: 16000 })];
  // Jobs are re-planned in key order here (same priority and age).
  const kept = { ...GPU_JOB, key: "ns/a-kept", current: [1, 1, 2, 2, 2] };
  // Its learners' node is not ready: they move.
  const moved = { ...GPU_JOB, key: "ns/b-moved", current: [3, 3, 2, 2, 2] };
  const partial = { ...CPU_JOB, key: "ns/c-partial", current: [2, null, 2] };
  const fresh = { ...CPU_JOB, key: "ns/d-fresh", current: [] };
  const gone = { ...node("gone", { gpus: 8 }), ready: false };
  const cluster = encodeCluster({ nodes: [...nodes, gone], jobs: [kept, moved, partial, fresh] });
  assert.deepEqual(binpack.optimize(cluster, []), [
    { job: 0, nodes: [1, 1, 2, 2, 2], reason: null },
    {
      job: 1,
      nodes: [0, 0, 2, 2, 2],
      reason: "re-planned by bin-pack: 2 of 5 replicas move; now gpu-0×2, cpu-0×3",
    },
    // Complete now, none moved: still a reason (it was not complete).
    { job: 2, nodes: [2, 2, 2], reason: "re-planned by bin-pack: 0 of 3 replicas move; now cpu-0×3" },
    { job: 3, nodes: [2, 2, 2], reason: "re-planned by bin-pack: 0 of 3 replicas move; now cpu-0×3" },
  ]);
  const zoned = [node("a", { zone: "x" }), node("b", { zone: "y" }), node("c")];
  const stays = { ...CPU_JOB, key: "ns/stays", current: [0, 1, 2] };
  // Rank 2's node is gone from the cluster: it moves, the others stay where they run.
  const shifts = { ...CPU_JOB, key: "ns/shifts", current: [0, 0, 5] };
  assert.deepEqual(spread.optimize(encodeCluster({ nodes: zoned, jobs: [stays, shifts] }), []), [
    { job: 0, nodes: [0, 1, 2], reason: null },
    { job: 1, nodes: [0, 0, 1], reason: "re-planned by spread: 1 of 3 replicas move; now a×2, b×1" },
  ]);
});

test("the example snapshot's reasons (as the Rust and Python examples give them)", () => {
  const allocate = (module, key) => module.allocate(loadSnapshot(SNAPSHOT, { jobs: [key], giveBack: true }).cluster).reason;
  assert.equal(
    allocate(binpack, "research/ppo-football"),
    "bin-pack, fullest fitting node first: gpu-b-01×2 (2 free GPUs), gpu-b-02×2 (4 free GPUs), cpu-c-01×9 (0 free GPUs)",
  );
  assert.equal(
    allocate(spread, "research/ppo-football"),
    "spread: 6 nodes in 3 zones, at most 4 per node: gpu-a-03×2, gpu-b-02×2, gpu-a-01×2, gpu-b-01×2, cpu-c-01×4, gpu-a-02×1",
  );
  const s = loadSnapshot(SNAPSHOT, { jobs: "preemptible", giveBack: true });
  assert.deepEqual(binpack.optimize(s.cluster, s.previous).map((e) => e.reason), [
    "re-planned by bin-pack: 2 of 9 replicas move; now gpu-b-01×2, cpu-c-01×7",
    null,
    "re-planned by bin-pack: 0 of 13 replicas move; now gpu-b-02×7, cpu-c-01×5, gpu-b-01×1",
    "re-planned by bin-pack: 0 of 7 replicas move; now gpu-a-01×2, cpu-c-01×5",
  ]);
  assert.deepEqual(spread.optimize(s.cluster, s.previous).map((e) => e.reason), [
    null,
    null,
    "re-planned by spread: 0 of 13 replicas move; now gpu-a-03×2, gpu-b-02×2, gpu-a-01×2, gpu-b-01×2, cpu-c-01×4, gpu-a-02×1",
    "re-planned by spread: 0 of 7 replicas move; now gpu-a-01×1, gpu-a-03×1, gpu-b-02×1, cpu-c-01×2, gpu-b-01×1, gpu-a-02×1",
  ]);
});
