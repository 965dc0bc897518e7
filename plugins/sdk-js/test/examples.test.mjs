// Owns: tests of the example plugins (plugins/examples-js) and the hostile test plugins
// (plugins/testdata/hostile-js) outside Wasm, on examples/snapshot.json read by
// testing.loadSnapshot. Expected answers are the Rust plugins' (target/plugins/*.wasm) on the
// same inputs.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { InvalidInput, NoFit, Pod } from "../src/index.js";
import { captureLogs, encodeCluster, loadSnapshot } from "../src/testing.js";
import { SNAPSHOT, load } from "./helpers/examples.mjs";

const binpack = await load("examples-js/binpack/index.js");
const spread = await load("examples-js/spread/index.js");
const accel = await load("examples-js/accel-env/index.js");
const hostilePolicy = await load("testdata/hostile-js/policy.js");
const hostileMutator = await load("testdata/hostile-js/mutator.js");

// Each job allocated as if re-admitted (`diorch plugin run --job KEY`), by the Rust plugins.
const ALLOCATE = {
  binpack: {
    "research/dqn-pong": [0, 0, 7, 7, 7, 7, 7, 7, 7],
    "research/sac-halfcheetah": [4, 4, 4, 4, 4, 4],
    "prod/impala-atari": [1, 1, 1, 1, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 1],
    "research/ppo-football": [4, 4, 5, 5, 7, 7, 7, 7, 7, 7, 7, 7, 7],
    "research/r2d2-dmlab": [0, 2, 7, 7, 7, 7, 7],
    "prod/qmix-smac": [4, 7, 7, 7, 7, 7],
  },
  spread: {
    "research/dqn-pong": [0, 0, 7, 7, 7, 7, 7, 7, 7],
    "research/sac-halfcheetah": [4, 4, 4, 4, 4, 4],
    "prod/impala-atari": [1, 1, 1, 1, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 1],
    "research/ppo-football": [2, 5, 0, 4, 7, 7, 1, 5, 7, 2, 4, 7, 0],
    "research/r2d2-dmlab": [2, 0, 5, 7, 4, 7, 1],
    "prod/qmix-smac": [2, 5, 7, 0, 4, 7],
  },
};
// `diorch plugin run --call optimize` (the preemptible jobs, their usage given back).
const OPTIMIZE = {
  binpack: [
    { job: 0, nodes: [4, 4, 7, 7, 7, 7, 7, 7, 7] },
    { job: 1, nodes: [4, 4, 4, 4, 4, 4] },
    { job: 2, nodes: [5, 5, 5, 5, 7, 7, 7, 7, 4, 5, 5, 5, 7] },
    { job: 3, nodes: [0, 0, 7, 7, 7, 7, 7] },
  ],
  spread: [
    { job: 0, nodes: [0, 0, 7, 7, 7, 7, 7, 7, 7] },
    { job: 1, nodes: [4, 4, 4, 4, 4, 4] },
    { job: 2, nodes: [2, 5, 0, 4, 7, 7, 1, 5, 7, 2, 4, 7, 0] },
    { job: 3, nodes: [0, 2, 5, 7, 4, 7, 1] },
  ],
};
const POLICIES = { binpack: [binpack, binpack.binpack], spread: [spread, spread.spread] };

test("loadSnapshot reads the example into views", () => {
  const s = loadSnapshot(SNAPSHOT);
  assert.equal(s.nodes.length, 8);
  assert.equal(s.jobs.length, 6);
  assert.equal(s.nodes[3].name, "gpu-a-04");
  assert.ok(!s.nodes[3].schedulable, "NoSchedule taint");
  assert.ok(!s.nodes[6].ready);
  assert.equal(s.nodes[0].label("topology.kubernetes.io/zone"), "zone-a");
  assert.deepEqual({ ...s.nodes[0].free.extended }, { "rdma/hca": 8 });
  const dqn = s.jobs[0];
  assert.equal(dqn.key, "research/dqn-pong");
  assert.deepEqual(dqn.current, [0, 0, 7, 7, 7, 7, 7, 7, 7]);
  assert.equal(dqn.profilings, '{"learner":{"step_time_ms":85,"samples_per_s":12000}}');
  assert.equal(s.jobs[1].profilings, "");
  assert.deepEqual(s.jobs[4].tasks[0].requests.extended, { "rdma/hca": 1 });
  assert.deepEqual(s.previous, [
    { job: 0, nodes: [0, 0, 7, 7, 7, 7, 7, 7, 7] },
    { job: 1, nodes: [4, 4, 4, 4, 4, 4] },
  ]);
  // Also from JSON text or a parsed object.
  const text = readFileSync(SNAPSHOT, "utf8");
  assert.equal(loadSnapshot(text).jobs.length, 6);
  assert.equal(loadSnapshot(JSON.parse(text), { jobs: "preemptible" }).jobs.length, 4);
  assert.equal(loadSnapshot(JSON.parse(text), { jobs: "unplaced" }).jobs.length, 3);
  // Giving a job's usage back frees what it requests, capped at allocatable.
  const freed = loadSnapshot(SNAPSHOT, { jobs: ["research/dqn-pong"], giveBack: true });
  assert.equal(freed.nodes[0].free.gpus, 8);
  assert.equal(freed.nodes[7].free.cpuMillis, 37400 + 6 * 4000 + 2000);
});

for (const [name, [module, logic]] of Object.entries(POLICIES)) {
  test(`${name}: allocate matches the Rust plugin, on views and through the WIT export`, () => {
    for (const [key, expected] of Object.entries(ALLOCATE[name])) {
      const s = loadSnapshot(SNAPSHOT, { jobs: [key], giveBack: true });
      assert.deepEqual(logic.allocate(s.jobs[0], s.nodes), expected, key);
      const answer = module.allocate(s.cluster);
      assert.deepEqual(answer.nodes, expected, key);
      assert.match(answer.reason, name === "binpack" ? /^bin-pack, fullest fitting node first: / : /^spread: /, key);
    }
  });

  test(`${name}: optimize matches the Rust plugin`, () => {
    const s = loadSnapshot(SNAPSHOT, { jobs: "preemptible", giveBack: true });
    const plan = module.optimize(s.cluster, s.previous);
    assert.deepEqual(plan.map(({ job, nodes }) => ({ job, nodes })), OPTIMIZE[name]);
    assert.ok(plan.every((e) => e.reason === null || e.reason.startsWith("re-planned by ")));
    assert.deepEqual(logic.optimize(s.jobs, s.nodes, s.previous), OPTIMIZE[name]);
  });

  test(`${name}: refusals carry the Rust plugin's text`, () => {
    const snap = JSON.parse(readFileSync(SNAPSHOT, "utf8"));
    snap.nodes = snap.nodes.filter((n) => n.name === "cpu-c-01");
    snap.jobs = snap.jobs.filter((j) => j.key === "research/r2d2-dmlab");
    snap.jobs.push({
      key: "research/empty",
      preemptible: true,
      tasks: [{ name: "learner", taskType: "learner", replicas: 0, minReplicas: 0, maxReplicas: 1, requests: { cpuMillis: 1, memoryBytes: 1, gpus: 0 } }],
    });
    snap.previous = [];
    const one = (key) => loadSnapshot(snap, { jobs: [key] });
    assert.throws(() => module.allocate(one("research/r2d2-dmlab").cluster), {
      tag: "no-fit",
      val: 'job research/r2d2-dmlab: a replica of task learner needs 16000m CPU, 137438953472 bytes memory, 4 GPUs and [("rdma/hca", 1)] and no ready, untainted node has room',
    });
    const empty = one("research/empty");
    assert.throws(() => module.allocate(empty.cluster), { tag: "invalid-input", val: "job research/empty has no replicas" });
    assert.throws(() => logic.allocate(empty.jobs[0], empty.nodes), InvalidInput);
    assert.throws(() => module.allocate(loadSnapshot(snap).cluster), {
      tag: "invalid-input",
      val: "allocate takes exactly one job, got 2",
    });
    // optimize leaves out what fits nowhere.
    assert.deepEqual(module.optimize(loadSnapshot(snap).cluster, []), []);
  });
}

test("binpack: packs onto the fullest node and keeps running replicas (Rust unit tests)", () => {
  const node = (name, gpus, used) => ({
    name,
    allocatable: { cpuMillis: 32000, memoryBytes: 128 * 2 ** 30, gpus },
    free: { cpuMillis: 32000 - 2000 * used, memoryBytes: 128 * 2 ** 30, gpus: gpus - used },
    ready: true,
  });
  const job = (current = []) => ({
    key: "ns/a",
    preemptible: true,
    tasks: [{ name: "learner", taskType: "learner", replicas: 2, minReplicas: 1, maxReplicas: 2, requests: { cpuMillis: 2000, memoryBytes: 4 * 2 ** 30, gpus: 1 } }],
    current,
  });
  const nodes = [node("node-0", 8, 0), node("node-1", 8, 6), node("node-2", 8, 0)];
  const run = (j) => binpack.allocate(encodeCluster({ nodes, jobs: [j] })).nodes;
  assert.deepEqual(run(job()), [1, 1]);
  assert.deepEqual(run(job([0, null])), [0, 1]);
  assert.deepEqual(run(job([9, null])), [1, 1]);
  const soft = { ...node("soft", 8, 7), taints: [{ key: "k", value: "v", effect: "PreferNoSchedule" }] };
  const cpu = node("cpu", 0, 0);
  assert.deepEqual(binpack.allocate(encodeCluster({ nodes: [soft, node("ok", 8, 0)], jobs: [job()] })).nodes, [1, 1]);
  const mixed = { ...job(), tasks: [{ ...job().tasks[0], name: "collector", replicas: 2, requests: { cpuMillis: 2000, memoryBytes: 1, gpus: 0 } }] };
  assert.deepEqual(binpack.allocate(encodeCluster({ nodes: [node("gpu", 8, 0), cpu], jobs: [mixed] })).nodes, [1, 1]);
});

test("binpack: the saturated score entry still orders exactly", () => {
  // CPU left * 2^20 passes 2^64 on both nodes: Rust saturates both, so the tie goes to node 0,
  // whatever the memory.
  const big = (memory) => ({
    name: "n",
    allocatable: { cpuMillis: 2 ** 50, memoryBytes: memory, gpus: 0 },
    free: { cpuMillis: 2 ** 50, memoryBytes: memory, gpus: 0 },
    ready: true,
  });
  const job = { key: "ns/a", preemptible: true, tasks: [{ name: "t", taskType: "t", replicas: 1, minReplicas: 1, maxReplicas: 1, requests: { cpuMillis: 1, memoryBytes: 1, gpus: 0 } }] };
  assert.deepEqual(binpack.allocate(encodeCluster({ nodes: [big(2 ** 40), big(2 ** 30)], jobs: [job] })).nodes, [0]);
  // Below saturation, less memory left wins.
  const small = (memory) => ({ ...big(memory), allocatable: { cpuMillis: 8, memoryBytes: memory, gpus: 0 }, free: { cpuMillis: 8, memoryBytes: memory, gpus: 0 } });
  assert.deepEqual(binpack.allocate(encodeCluster({ nodes: [small(2 ** 40), small(2 ** 30)], jobs: [job] })).nodes, [1]);
});

test("spread: one replica per zone, then per node (Rust unit tests)", () => {
  const node = (i, zone) => ({
    name: `n${i}`,
    labels: zone === undefined ? {} : { "topology.kubernetes.io/zone": zone },
    allocatable: { cpuMillis: 16000, memoryBytes: 2 ** 36, gpus: 8 },
    free: { cpuMillis: 16000, memoryBytes: 2 ** 36, gpus: 8 },
    ready: true,
  });
  const job = (replicas) => ({ key: "ns/a", preemptible: true, tasks: [{ name: "collector", taskType: "collector", replicas, minReplicas: 1, maxReplicas: replicas, requests: { cpuMillis: 1000, memoryBytes: 2 ** 30, gpus: 0 } }] });
  const four = [0, 1, 2, 3].map((i) => node(i));
  assert.deepEqual(spread.allocate(encodeCluster({ nodes: four, jobs: [job(4)] })).nodes.sort(), [0, 1, 2, 3]);
  const twice = spread.allocate(encodeCluster({ nodes: four, jobs: [job(8)] })).nodes;
  for (const n of [0, 1, 2, 3]) assert.equal(twice.filter((x) => x === n).length, 2);
  const zoned = [node(0, "a"), node(1, "a"), node(2, "a"), node(3, "b")];
  assert.ok(spread.allocate(encodeCluster({ nodes: zoned, jobs: [job(2)] })).nodes.includes(3));
});

const POD = `{"metadata":{"name":"p"},"spec":{"containers":[
  {"name":"side"},{"name":"di-container","env":[{"name":"DI_RANK","value":"1"}]}]}}`;

function ctx(taskType, config) {
  return {
    jobKey: "ns/j",
    taskName: taskType,
    taskType,
    rank: 1,
    taskRank: 1,
    worldSize: 3,
    node: "n1",
    jobLabels: [],
    jobAnnotations: [],
    config,
  };
}

test("accel-env: learners get NCCL env in di-container only (Rust unit tests)", () => {
  const logs = captureLogs();
  let pod;
  try {
    pod = Pod.parse(accel.mutate(ctx("learner", '{"interface":"ib0","rdma":true,"env":{"X":"y"}}'), POD));
  } finally {
    logs.restore();
  }
  assert.equal(pod.env("di-container", "NCCL_SOCKET_IFNAME"), "ib0");
  assert.equal(pod.env("di-container", "NCCL_IB_DISABLE"), "0");
  assert.equal(pod.env("di-container", "LEARNER_RANK"), "1");
  assert.equal(pod.env("di-container", "X"), "y");
  assert.equal(pod.env("di-container", "DI_RANK"), "1");
  assert.equal(pod.env("side", "NCCL_DEBUG"), undefined);
  assert.deepEqual(logs.lines, [{ level: "debug", message: "accelerator env set", fields: { job: "ns/j", task: "learner" } }]);
});

test("accel-env: other task types are untouched; extra env in key order", () => {
  assert.deepEqual(JSON.parse(accel.mutate(ctx("collector", ""), POD)), JSON.parse(POD));
  const pod = Pod.parse(accel.mutate(ctx("collector", '{"taskTypes":["collector"]}'), POD));
  assert.equal(pod.env("di-container", "NCCL_IB_DISABLE"), "1");
  const env = accel.envFor(ctx("learner", '{"env":{"b":"1","a":"2","10":"x","9":"y"}}'));
  assert.deepEqual(env.slice(7).map(([k]) => k), ["10", "9", "a", "b"]);
  const noDi = Pod.parse(accel.mutate(ctx("learner", ""), '{"spec":{"containers":[{"name":"a"},{"name":"b"}]}}'));
  assert.equal(noDi.env("b", "NCCL_DEBUG"), "WARN", "every container when none is di-container");
});

test("accel-env: refuses operator env and bad config with the Rust texts", () => {
  const refuse = (config, val) =>
    assert.throws(() => accel.mutate(ctx("learner", config), POD), (e) => e.tag === "invalid-input" && (val instanceof RegExp ? val.test(e.val) : e.val === val));
  refuse('{"env":{"DI_RANK":"0"}}', "env DI_RANK belongs to the operator");
  refuse('{"env":{"a":1}}', "env a must be a string");
  refuse('{"env":[]}', 'config "env" must be an object');
  refuse('{"rdma":"yes"}', 'config "rdma" must be a boolean');
  refuse('{"interface":5}', 'config "interface" must be a string');
  refuse('{"debug":null}', 'config "debug" must be a string');
  refuse('{"taskTypes":"learner"}', 'config "taskTypes" must be a list');
  refuse("{", /^config is not JSON: /);
  assert.throws(() => accel.envFor(ctx("learner", "{")), InvalidInput);
});

test("hostile policy: the harmless modes answer as documented", () => {
  const snap = JSON.parse(readFileSync(SNAPSHOT, "utf8"));
  const job = snap.jobs.find((j) => j.key === "research/ppo-football");
  const cluster = (mode) => encodeCluster({ nodes: snap.nodes, jobs: [{ ...job, key: `default/${mode}` }] });
  const packed = [4, 4, 5, 5, 7, 7, 7, 7, 7, 7, 7, 7, 7];
  // 4294967000, handed to componentize-qjs as its int32 reading (see columns.js).
  assert.deepEqual(hostilePolicy.allocate(cluster("garbage")), { nodes: new Array(13).fill(4294967000 | 0), reason: null });
  assert.equal(hostilePolicy.allocate(cluster("wrong-count")).nodes.length, 12);
  // A good answer without a reason: the policy answers as one written for contract 0.3.
  assert.deepEqual(hostilePolicy.allocate(cluster("fine")), { nodes: packed, reason: null });
  assert.deepEqual(hostilePolicy.allocate(cluster("unknown-node")).nodes, new Array(13).fill(15));
  assert.deepEqual(hostilePolicy.allocate(cluster("not-ready")).nodes, new Array(13).fill(6));
  assert.throws(() => hostilePolicy.allocate(cluster("huge-no-fit")), (e) => e.tag === "no-fit" && e.val.length === 2 << 20);
  // Not the error variant: in the component, a trap.
  assert.throws(() => hostilePolicy.allocate(cluster("trap")), (e) => e instanceof Error && e.tag === undefined);
  // The reason modes: good answers whose reasons the host must bound.
  const huge = hostilePolicy.allocate(cluster("huge-reason"));
  assert.deepEqual(huge.nodes, packed);
  assert.equal(huge.reason, "why ".repeat(256 << 10));
  assert.equal(huge.reason.length, 1 << 20);
  assert.deepEqual(hostilePolicy.allocate(cluster("control-reason")), {
    nodes: packed,
    reason: "line one\nline two\r\u0000\u001b[31mred\u001b[0m \u202edesrever\u007f end",
  });
  assert.equal(hostilePolicy.allocate(cluster("surrogate-reason")).reason, "lone \ufffd high, lone \ufffd low, pair \ud83d\ude00 kept");
  // optimize: the same reasons for jobs so named, none for the others.
  const jobs = ["control-reason", "fine"].map((mode, i) => ({ ...job, key: `default/${mode}`, current: i === 0 ? [] : packed }));
  const plan = hostilePolicy.optimize(encodeCluster({ nodes: snap.nodes, jobs }), []);
  assert.deepEqual(plan.map((e) => [e.job, e.reason]), [
    [0, "line one\nline two\r\u0000\u001b[31mred\u001b[0m \u202edesrever\u007f end"],
    [1, null],
  ]);
});

test("hostile mutator: modes, later:, garbage and error", () => {
  const base = (config, rank = 1) => ({ ...ctx("learner", config), rank });
  const pod = (config, rank) => JSON.parse(hostileMutator.mutate(base(config, rank), POD));
  assert.equal(pod("").metadata.labels["hostile.test/seen"], "yes");
  const evil = pod("rename, privileged,host-path,host-network,drop-rank");
  assert.equal(evil.metadata.name, "renamed");
  assert.equal(evil.spec.containers[0].securityContext.privileged, true);
  assert.deepEqual(evil.spec.volumes, [{ name: "host-root", hostPath: { path: "/" } }]);
  assert.equal(evil.spec.hostNetwork, true);
  assert.equal(Pod.parse(JSON.stringify(evil)).env("di-container", "DI_RANK"), undefined);
  assert.equal(pod("later:rename", 0).metadata.name, "p");
  assert.equal(pod("later:rename", 1).metadata.name, "renamed");
  assert.throws(() => JSON.parse(hostileMutator.mutate(base("garbage"), POD)), SyntaxError);
  assert.throws(() => hostileMutator.mutate(base("error"), POD), { tag: "invalid-input", val: "hostile mutator refuses on purpose" });
});
