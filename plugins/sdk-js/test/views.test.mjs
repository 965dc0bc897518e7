// Owns: tests of the cluster views (columns read in place, bounds checks, number normalisation)
// and of the policy() wrapper (error variants, answer checks, the default optimize).

import assert from "node:assert/strict";
import { test } from "node:test";

import { InvalidInput, NoFit, Resources, log, movedReplicas, perNode, policy, replanReason, tally } from "../src/index.js";
import { openCluster, readJob, readJobs, readNodes } from "../src/cluster.js";
import { wellFormed } from "../src/policy.js";
import { run, StringTable, u32, u64 } from "../src/columns.js";
import { captureLogs, encodeCluster } from "../src/testing.js";

const GPU_NODE = {
  name: "n-0",
  labels: [["zone", "a"], ["kind", "é"], ["zone", "b"]],
  taints: [{ key: "k", value: "v", effect: "PreferNoSchedule" }],
  allocatable: { cpuMillis: 4000, memoryBytes: 8000, gpus: 8 },
  free: { cpuMillis: 1000, memoryBytes: 2000, gpus: 3, extended: [["rdma/hca", 2], ["x/y", 5], ["rdma/hca", 9]] },
  ready: true,
};
const BARE_NODE = {
  name: "bare",
  taints: [{ key: "gone", value: "", effect: "NoExecute" }],
  allocatable: { cpuMillis: 1, memoryBytes: 2, gpus: 0 },
  free: { cpuMillis: 0, memoryBytes: 0, gpus: 0 },
  ready: false,
};
const JOB = {
  key: "ns/j",
  priority: -3,
  preemptible: true,
  tasks: [
    {
      name: "learner",
      taskType: "learner",
      replicas: 2,
      minReplicas: 1,
      maxReplicas: 4,
      requests: { cpuMillis: 1000, memoryBytes: 2000, gpus: 1, extended: { "rdma/hca": 1 } },
    },
    { name: "collector", taskType: "collector", replicas: 1, minReplicas: 1, maxReplicas: 2, requests: { cpuMillis: 5, memoryBytes: 6, gpus: 0 } },
  ],
  current: [0, null, 1],
  profilings: "{}",
  ageSeconds: 7,
};

function views(model) {
  const c = openCluster(encodeCluster(model));
  return { nodes: readNodes(c), jobs: readJobs(c) };
}

test("nodes read back what was encoded", () => {
  const { nodes } = views({ nodes: [GPU_NODE, BARE_NODE] });
  const [n, bare] = nodes;
  assert.equal(nodes.length, 2);
  assert.equal(n.index, 0);
  assert.equal(n.name, "n-0");
  assert.deepEqual({ ...n.labels }, { zone: "a", kind: "é" }, "first occurrence wins");
  assert.ok(Object.isFrozen(n.labels));
  assert.equal(n.label("zone"), "a");
  assert.equal(n.label("kind"), "é");
  assert.equal(n.label("none"), undefined);
  assert.deepEqual(n.taints, [{ key: "k", value: "v", effect: "PreferNoSchedule" }]);
  assert.ok(n.ready && n.schedulable && n.preferNoSchedule);
  assert.ok(!bare.ready && !bare.schedulable && !bare.preferNoSchedule);
  assert.equal(bare.taints[0].effect, "NoExecute");
  assert.deepEqual([n.free.cpuMillis, n.free.memoryBytes, n.free.gpus], [1000, 2000, 3]);
  assert.deepEqual([n.allocatable.cpuMillis, n.allocatable.gpus], [4000, 8]);
  assert.deepEqual({ ...n.free.extended }, { "rdma/hca": 2, "x/y": 5 });
  assert.deepEqual(n.free.extendedPairs, [["rdma/hca", 2], ["x/y", 5], ["rdma/hca", 9]]);
  assert.equal(n.free.extendedAmount("x/y"), 5);
  assert.equal(n.free.extendedAmount("gone"), 0);
  assert.deepEqual(bare.labels, {});
  assert.deepEqual(JSON.parse(JSON.stringify(n)).free, { cpuMillis: 1000, memoryBytes: 2000, gpus: 3, extended: { "rdma/hca": 2, "x/y": 5 } });
});

test("a node with no taints is schedulable only when ready; NoSchedule excludes it", () => {
  const ns = { ...GPU_NODE, taints: [{ key: "a", value: "", effect: "NoSchedule" }] };
  const { nodes } = views({ nodes: [ns, { ...GPU_NODE, taints: [] }] });
  assert.ok(!nodes[0].schedulable && !nodes[0].preferNoSchedule);
  assert.ok(nodes[1].schedulable && !nodes[1].preferNoSchedule);
});

test("jobs read back what was encoded", () => {
  const { jobs } = views({ nodes: [GPU_NODE, BARE_NODE], jobs: [JOB, { ...JOB, key: "other", tasks: [], current: [] }] });
  const [j, other] = jobs;
  assert.equal(j.index, 0);
  assert.equal(j.key, "ns/j");
  assert.equal(j.namespace, "ns");
  assert.equal(j.name, "j");
  assert.equal(j.priority, -3);
  assert.equal(j.preemptible, true);
  assert.equal(j.profilings, "{}");
  assert.equal(j.ageSeconds, 7);
  assert.deepEqual(j.current, [0, null, 1]);
  assert.equal(j.totalReplicas, 3);
  assert.deepEqual(j.replicas().map((t) => t.name), ["learner", "learner", "collector"]);
  const [learner, collector] = j.tasks;
  assert.deepEqual(
    [learner.name, learner.taskType, learner.replicas, learner.minReplicas, learner.maxReplicas],
    ["learner", "learner", 2, 1, 4],
  );
  assert.deepEqual(learner.requests.extendedPairs, [["rdma/hca", 1]]);
  assert.equal(collector.requests.memoryBytes, 6);
  assert.equal(other.key, "other");
  assert.equal(other.namespace, "");
  assert.equal(other.name, "other");
  assert.deepEqual(other.tasks, []);
  assert.equal(other.totalReplicas, 0);
});

test("Resources.fits is Rust's Amounts::fits", () => {
  const left = Resources.of({ cpuMillis: 10, memoryBytes: 10, gpus: 1, extended: { a: 2 } });
  assert.ok(left.fits({ cpuMillis: 10, memoryBytes: 10, gpus: 1 }));
  assert.ok(left.fits(Resources.of({ cpuMillis: 1, extended: { a: 2 } })));
  assert.ok(!left.fits({ cpuMillis: 11 }));
  assert.ok(!left.fits({ memoryBytes: 11 }));
  assert.ok(!left.fits({ gpus: 2 }));
  assert.ok(!left.fits({ extended: { a: 3 } }));
  assert.ok(!left.fits({ extended: { b: 1 } }), "an absent extended resource is 0");
  assert.ok(left.fits({ extended: { b: 0 } }));
  // Every entry of a request counts, repeats included, each against the first entry.
  assert.ok(!left.fits(Resources.of({ extended: [["a", 1], ["a", 3]] })));
});

test("Resources.minus is Rust's Resources::take, on a copy", () => {
  const left = Resources.of({ cpuMillis: 10, memoryBytes: 10, gpus: 1, extended: [["a", 2], ["b", 1], ["a", 7]] });
  const after = left.minus(Resources.of({ cpuMillis: 4, memoryBytes: 11, gpus: 1, extended: { a: 1, c: 5 } }));
  assert.deepEqual([after.cpuMillis, after.memoryBytes, after.gpus], [6, 0, 0]);
  assert.deepEqual(after.extendedPairs, [["a", 1], ["b", 1], ["a", 7]]);
  assert.deepEqual([left.cpuMillis, left.extendedAmount("a")], [10, 2], "unchanged");
  assert.equal(left.minus({ gpus: 1 }).gpus, 0);
});

test("out-of-range ids and starts read as empty", () => {
  assert.equal(new StringTable("", []).get(0), "");
  const t = new StringTable("ab", [1, 9]);
  assert.deepEqual([t.get(0), t.get(1), t.get(2), t.get(-1)], ["a", "", "", ""]);
  assert.deepEqual(run([0], 0, 5), [0, 0]);
  assert.deepEqual(run([3, 1], 0, 5), [1, 1]);
  assert.deepEqual(run([2, 9], 0, 5), [2, 5]);
  assert.deepEqual(run([7, 9], 0, 5), [5, 5]);
  assert.deepEqual(run([0, 1, 2], 5, 5), [0, 0]);
});

test("the string table slices UTF-8 offsets like str::get", () => {
  // "é" is 2 bytes, "😀" 4: offsets inside a character read as "".
  const t = new StringTable("aé😀b", [1, 3, 7, 8, 2, 4, 8]);
  assert.deepEqual([0, 1, 2, 3].map((i) => t.get(i)), ["a", "é", "😀", "b"]);
  assert.equal(t.get(4), "", "backwards");
  assert.equal(t.get(5), "", "ends inside 😀");
  assert.equal(t.get(6), "", "starts inside 😀");
});

test("inconsistent columns read as zero and empty without throwing", () => {
  const c = encodeCluster({ nodes: [GPU_NODE], jobs: [JOB] });
  c.nodes.free.gpus = [];
  c.nodes.labelStarts = [0, 4294967295];
  c.taints.effect = [9];
  c.jobs.taskStarts = [5, 2];
  c.jobs.priority = [];
  c.stringEnds[0] = 1e6;
  const cluster = openCluster(c);
  const [n] = readNodes(cluster);
  assert.equal(n.free.gpus, 0);
  // Clamped to the table. The name's end is past the text, so it reads "", and so does the
  // first label key (its start is that end).
  assert.equal(n.name, "");
  assert.deepEqual({ ...n.labels }, { "": "a", kind: "é", zone: "b" });
  // An unknown effect is the strictest.
  assert.ok(!n.preferNoSchedule && !n.schedulable);
  assert.equal(n.taints[0].effect, "NoSchedule");
  const j = readJob(cluster, 0);
  assert.deepEqual(j.tasks, []);
  assert.equal(j.priority, 0);
  assert.equal(readJob(cluster, 7).key, "");
  assert.deepEqual(readJob(cluster, 7).current, []);
  // Whole tables missing.
  assert.deepEqual(readNodes(openCluster({})), []);
  assert.deepEqual(readJobs(openCluster({ jobs: { key: [0] } }))[0].tasks, []);
});

test("typed arrays and BigInt columns read as plain Numbers, u64 above 2^53-1 clamped", () => {
  assert.equal(u64(5n), 5);
  assert.equal(u64(2n ** 64n - 1n), Number.MAX_SAFE_INTEGER);
  assert.equal(u64(2 ** 60), Number.MAX_SAFE_INTEGER);
  assert.equal(u64(-1), Number.MAX_SAFE_INTEGER, "componentize-qjs reads 2^64-1 as -1");
  assert.equal(u64(undefined), 0);
  assert.equal(u32(-1), 4294967295, "componentize-qjs reads u32 2^31 and above as negative");
  assert.equal(u32(-2147483648), 2147483648);
  assert.equal(u32(7n), 7);
  const c = encodeCluster({ nodes: [GPU_NODE], jobs: [JOB] });
  c.nodes.free.cpuMillis = new BigUint64Array([2n ** 63n]);
  c.nodes.free.memoryBytes = [123n];
  c.nodes.free.extendedAmount = new BigUint64Array([7n, 8n, 9n]);
  c.nodes.ready = new Uint8Array([1]);
  c.taints.effect = new Uint8Array([2]);
  c.jobs.ageSeconds = new BigUint64Array([2n ** 53n]);
  c.placements = [-1, 0, 1];
  c.tasks.replicas = [-2147483648, 1];
  c.jobs.priority = [-3];
  const cluster = openCluster(c);
  const [n] = readNodes(cluster);
  assert.equal(n.free.cpuMillis, Number.MAX_SAFE_INTEGER);
  assert.equal(n.free.memoryBytes, 123);
  assert.equal(typeof n.free.extendedPairs[0][1], "number");
  assert.equal(n.free.extendedAmount("rdma/hca"), 7);
  assert.ok(n.ready && !n.schedulable, "NoExecute");
  const [j] = readJobs(cluster);
  assert.equal(j.ageSeconds, Number.MAX_SAFE_INTEGER);
  assert.deepEqual(j.current, [null, 0, 1], "u32::MAX read as -1 is still 'not placed'");
  assert.ok(Array.isArray(j.current));
  assert.equal(j.tasks[0].replicas, 2147483648);
  assert.equal(j.priority, -3, "s32 stays signed");
});

test("policy(): allocate takes exactly one job, before the author is called", () => {
  let called = false;
  const p = policy({ allocate: () => ((called = true), []) });
  for (const jobs of [[], [JOB, JOB]]) {
    assert.throws(() => p.allocate(encodeCluster({ nodes: [GPU_NODE], jobs })), {
      tag: "invalid-input",
      val: `allocate takes exactly one job, got ${jobs.length}`,
    });
  }
  assert.equal(called, false);
});

test("policy(): thrown errors become the WIT error variant", () => {
  const cluster = encodeCluster({ nodes: [GPU_NODE], jobs: [JOB] });
  const cases = [
    [() => { throw new NoFit("full"); }, { tag: "no-fit", val: "full" }],
    [() => { throw new InvalidInput("bad"); }, { tag: "invalid-input", val: "bad" }],
    [() => { throw new Error("boom"); }, { tag: "internal", val: "boom" }],
    [() => null.x, { tag: "internal" }],
    [() => { throw "a string"; }, { tag: "internal", val: "a string" }],
    [() => { throw Symbol("s"); }, { tag: "internal", val: "Symbol(s)" }],
  ];
  for (const [allocate, expected] of cases) {
    assert.throws(() => policy({ allocate }).allocate(cluster), (e) => {
      assert.equal(e.tag, expected.tag);
      if (expected.val !== undefined) assert.equal(e.val, expected.val);
      else assert.match(e.val, /^TypeError: /);
      return true;
    });
  }
});

test("policy(): answers become plain arrays; what cannot be lowered is internal", () => {
  const cluster = encodeCluster({ nodes: [GPU_NODE], jobs: [JOB] });
  const answer = policy({ allocate: () => new Uint32Array([0, 0, 2147483647, 2147483648, 4294967295]) }).allocate(cluster);
  assert.ok(Array.isArray(answer.nodes));
  // Indices of 2^31 and above go to componentize-qjs as their int32 reading, which it lowers
  // right (it would saturate the Number itself to 2147483647).
  assert.deepEqual(answer, { nodes: [0, 0, 2147483647, -2147483648, -1], reason: null });
  assert.deepEqual(policy({ allocate: () => [1n] }).allocate(cluster), { nodes: [1], reason: null });
  for (const bad of [[-1], [1.5], [2 ** 32], ["0"], [null], null, "01", 7, {}, { nodes: "01" }, { nodes: [-1] }, { nodes: null }]) {
    assert.throws(() => policy({ allocate: () => bad }).allocate(cluster), { tag: "internal" });
  }
  const plan = policy({ allocate: () => [], optimize: () => [{ job: 0, nodes: new Uint32Array([1]) }] }).optimize(cluster, []);
  assert.deepEqual(plan, [{ job: 0, nodes: [1], reason: null }]);
  assert.throws(() => policy({ allocate: () => [], optimize: () => [{ job: -1, nodes: [] }] }).optimize(cluster, []), { tag: "internal" });
  assert.throws(() => policy({ allocate: () => [], optimize: () => [7] }).optimize(cluster, []), { tag: "internal" });
});

test("policy(): a policy written before reasons (contract 0.3) still answers, with no reason", () => {
  // The 0.3 way: bare node indices from allocate, `{ job, nodes }` entries from optimize.
  const old = policy({
    allocate: (job) => job.replicas().map(() => 0),
    optimize: (jobs) => jobs.map((j) => ({ job: j.index, nodes: j.replicas().map(() => 0) })),
  });
  const cluster = encodeCluster({ nodes: [GPU_NODE], jobs: [JOB] });
  assert.deepEqual(old.allocate(cluster), { nodes: [0, 0, 0], reason: null });
  assert.deepEqual(old.optimize(cluster, []), [{ job: 0, nodes: [0, 0, 0], reason: null }]);
});

test("policy(): reasons reach the WIT decision and job-decision records", () => {
  const cluster = encodeCluster({ nodes: [GPU_NODE], jobs: [JOB] });
  const allocate = (answer) => policy({ allocate: () => answer }).allocate(cluster);
  assert.deepEqual(allocate({ nodes: [0, 0, 0], reason: "why" }), { nodes: [0, 0, 0], reason: "why" });
  assert.deepEqual(allocate({ nodes: new Uint32Array([0]) }), { nodes: [0], reason: null }, "no reason: null");
  assert.deepEqual(allocate({ nodes: [0], reason: undefined }), { nodes: [0], reason: null });
  assert.deepEqual(allocate({ nodes: [0], reason: null }), { nodes: [0], reason: null });
  assert.deepEqual(allocate({ nodes: [0], reason: "" }), { nodes: [0], reason: "" }, "an empty reason is still a reason");
  // Length and control characters are the host's to bound; only what UTF-8 cannot hold changes.
  const long = "x\u0000\n\u001b".repeat(1000);
  assert.equal(allocate({ nodes: [0], reason: long }).reason, long);
  assert.equal(allocate({ nodes: [0], reason: "a\ud800b\udc00c\ud83d\ude00" }).reason, "a\ufffdb\ufffdc\ud83d\ude00");
  assert.equal(allocate({ nodes: [0], reason: "end\ud800" }).reason, "end\ufffd");
  // The same without String#isWellFormed (an engine before ES2024).
  const original = Object.getOwnPropertyDescriptor(String.prototype, "isWellFormed");
  delete String.prototype.isWellFormed;
  try {
    assert.equal(wellFormed("a\ud800b\udc00c\ud83d\ude00\udbff"), "a\ufffdb\ufffdc\ud83d\ude00\ufffd");
    assert.equal(wellFormed("plain"), "plain");
  } finally {
    if (original) Object.defineProperty(String.prototype, "isWellFormed", original);
  }
  for (const bad of [7, {}, ["a"], Symbol("s")]) {
    assert.throws(() => allocate({ nodes: [0], reason: bad }), (e) => e.tag === "internal" && /^allocate: reason is .*, not a string/.test(e.val));
  }
  const optimize = (entries) => policy({ allocate: () => [], optimize: () => entries }).optimize(cluster, []);
  assert.deepEqual(optimize([{ job: 0, nodes: [0], reason: "moved" }, { job: 1, nodes: [0] }, { job: 2, nodes: [0], reason: null }]), [
    { job: 0, nodes: [0], reason: "moved" },
    { job: 1, nodes: [0], reason: null },
    { job: 2, nodes: [0], reason: null },
  ]);
  assert.throws(() => optimize([{ job: 0, nodes: [0], reason: 1 }]), { tag: "internal", val: "optimize: entry 0 reason is 1, not a string (or null for no reason)" });
});

test("tally, perNode, movedReplicas, replanReason", () => {
  assert.deepEqual(tally([]), []);
  assert.deepEqual(tally([7, 4, 7, 7, 0]), [[7, 3], [4, 1], [0, 1]]);
  assert.deepEqual(tally([2, 0, 2, 1, 0]), [[2, 2], [0, 2], [1, 1]]);
  const nodes = [{ name: "a" }, { name: "b" }];
  assert.equal(perNode(nodes, [1, 0, 1]), "b×2, a×1");
  assert.equal(perNode(nodes, [7]), "?×1", "an index outside the nodes");
  assert.equal(movedReplicas([1, null, 2], [1, 5, 3]), 1, "an unplaced replica does not move");
  assert.equal(movedReplicas([1, 2], [2, 1, 0]), 2, "only ranks both have");
  assert.equal(movedReplicas([], [0, 1]), 0);
  const job = (current) => ({ current });
  // The Rust examples' cases (plugins/policies/src/explain.rs).
  assert.equal(replanReason("bin-pack", job([0, 0]), nodes, [0, 0]), null, "unchanged");
  assert.equal(replanReason("bin-pack", job([0, 0]), nodes, [0, 1]), "re-planned by bin-pack: 1 of 2 replicas move; now a×1, b×1");
  assert.equal(replanReason("spread", job([null, null]), nodes, [0, 1]), "re-planned by spread: 0 of 2 replicas move; now a×1, b×1", "first placement");
  assert.equal(replanReason("spread", job([null, null]), nodes, [7]), "re-planned by spread: 0 of 1 replicas move; now ?×1");
  assert.equal(replanReason("p", job([]), nodes, []), null, "empty");
  assert.equal(replanReason("p", job([1]), nodes, []), null, "empty");
  assert.equal(replanReason("p", job([]), nodes, [1, 1]), "re-planned by p: 0 of 2 replicas move; now b×2", "not placed before");
  assert.equal(replanReason("p", job([1]), nodes, [1, 1]), "re-planned by p: 0 of 2 replicas move; now b×2", "scaled up");
  assert.equal(replanReason("p", job([0, 1, 1]), nodes, [1, 0]), "re-planned by p: 2 of 2 replicas move; now b×1, a×1", "scaled down");
});

test("policy(): optimize sees jobs, nodes and the previous plan; the default keeps complete placements", () => {
  const jobs = [
    { ...JOB, key: "ns/complete", current: [1, 0, 1] },
    { ...JOB, key: "ns/partial", current: [1, null, 1] },
    { ...JOB, key: "ns/unplaced", current: [] },
  ];
  const cluster = encodeCluster({ nodes: [GPU_NODE, BARE_NODE], jobs });
  assert.deepEqual(policy({ allocate: () => [] }).optimize(cluster, []), [{ job: 0, nodes: [1, 0, 1], reason: null }]);
  let seen;
  policy({
    allocate: () => [],
    optimize(js, nodes, previous) {
      seen = { keys: js.map((j) => j.key), nodes: nodes.map((n) => n.name), previous };
      return [];
    },
  }).optimize(cluster, [{ job: 2, nodes: new Uint32Array([0, 0, 1]) }, { job: -1, nodes: [-1] }]);
  assert.deepEqual(seen, {
    keys: ["ns/complete", "ns/partial", "ns/unplaced"],
    nodes: ["n-0", "bare"],
    previous: [{ job: 2, nodes: [0, 0, 1] }, { job: 4294967295, nodes: [4294967295] }],
  });
});

test("log lines reach the sink with fields as string pairs", () => {
  const logs = captureLogs();
  try {
    log.info("placed", { job: "ns/j", n: 3 });
    log.warn("plain");
    log.error("pairs", [["a", "b"]]);
  } finally {
    logs.restore();
  }
  log.info("not captured");
  assert.deepEqual(logs.lines, [
    { level: "info", message: "placed", fields: { job: "ns/j", n: "3" } },
    { level: "warn", message: "plain", fields: {} },
    { level: "error", message: "pairs", fields: { a: "b" } },
  ]);
});
