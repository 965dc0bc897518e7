// Owns: tests of the Pod helpers (the semantics of plugins/sdk/src/pod.rs), the mutator()
// wrapper, and parseJson's serde_json-compatible refusals.

import assert from "node:assert/strict";
import { test } from "node:test";

import { InvalidInput, Pod, mutator, parseJson } from "../src/index.js";

const POD = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j-learner-0","labels":{"diengine/job":"j"}},
  "spec":{"containers":[{"name":"di-container","env":[{"name":"DI_RANK","value":"0"}]},{"name":"side"}]}}`;

test("edits round trip", () => {
  const pod = Pod.parse(POD);
  assert.equal(pod.name(), "j-learner-0");
  assert.deepEqual(pod.containerNames(), ["di-container", "side"]);
  assert.equal(pod.setEnv("di-container", "NCCL_DEBUG", "INFO"), 1);
  assert.equal(pod.setEnv(null, "X", "1"), 2);
  assert.equal(pod.setEnv(null, "X", "2"), 2);
  assert.equal(pod.setEnv("missing", "X", "2"), 0);
  pod.setNodeSelector("pool", "gpu");
  const tol = { key: "gpu", operator: "Exists", effect: "NoSchedule" };
  pod.addToleration(tol);
  pod.addToleration({ effect: "NoSchedule", key: "gpu", operator: "Exists" });
  tol.key = "changed"; // the pod kept its own copy
  const back = Pod.parse(JSON.stringify(pod));
  assert.equal(back.env("di-container", "NCCL_DEBUG"), "INFO");
  assert.equal(back.env("side", "X"), "2");
  assert.equal(back.env("di-container", "DI_RANK"), "0");
  assert.equal(back.env("di-container", "NOPE"), undefined);
  assert.equal(back.env("nope", "X"), undefined);
  assert.equal(back.nodeSelector("pool"), "gpu");
  assert.deepEqual(back.tolerations(), [{ key: "gpu", operator: "Exists", effect: "NoSchedule" }]);
  assert.equal(back.label("diengine/job"), "j");
  assert.equal(back.label("none"), undefined);
});

test("removeEnv and setName", () => {
  const pod = Pod.parse(POD);
  pod.removeEnv("DI_RANK");
  pod.setName("other");
  pod.setLabel("a", "b");
  pod.setAnnotation("c", "d");
  assert.equal(pod.env("di-container", "DI_RANK"), undefined);
  assert.equal(pod.name(), "other");
  assert.deepEqual(pod.value.metadata, { name: "other", labels: { "diengine/job": "j", a: "b" }, annotations: { c: "d" } });
  // Like Rust: removing env visits every container and gives each an env list.
  assert.deepEqual(pod.value.spec.containers, [{ name: "di-container", env: [] }, { name: "side", env: [] }]);
});

test("edits create or replace what is in the way, as pod.rs does", () => {
  const pod = Pod.parse('{"metadata":"x","spec":{"containers":[5,{"name":"a","env":{}}]}}');
  pod.setLabel("k", "v");
  assert.deepEqual(pod.value.metadata, { labels: { k: "v" } });
  assert.equal(pod.setEnv(null, "X", "1"), 2);
  assert.deepEqual(pod.value.spec.containers, [{ env: [{ name: "X", value: "1" }] }, { name: "a", env: [{ name: "X", value: "1" }] }]);
  const empty = Pod.parse("{}");
  assert.equal(empty.setEnv("c", "X", "1"), 0);
  assert.deepEqual(empty.value, { spec: { containers: [] } });
  assert.deepEqual(empty.containerNames(), []);
  assert.deepEqual(empty.tolerations(), []);
  assert.equal(empty.name(), undefined);
  const proto = Pod.parse("{}");
  proto.setLabel("__proto__", "x");
  assert.equal(Object.getPrototypeOf(proto.value.metadata.labels), Object.prototype);
  assert.equal(proto.label("__proto__"), "x");
});

test("a pod that is not a JSON object is invalid input", () => {
  assert.throws(() => Pod.parse("[1]"), new InvalidInput("pod is not a JSON object"));
  assert.throws(() => Pod.parse("{"), (e) => e instanceof InvalidInput && e.message.startsWith("pod is not JSON: "));
});

test("mutator(): the context as plain objects, the pod back as JSON, errors as variants", () => {
  let seen;
  const { mutate } = mutator((ctx, pod) => {
    seen = ctx;
    pod.setEnv(null, "RANK", String(ctx.rank));
  });
  const ctx = {
    jobKey: "ns/j",
    taskName: "learner",
    taskType: "learner",
    rank: 1,
    taskRank: 1,
    worldSize: 3,
    node: null,
    jobLabels: [["a", "1"], ["a", "2"]],
    jobAnnotations: [],
    config: "{}",
  };
  const out = JSON.parse(mutate(ctx, POD));
  assert.equal(out.spec.containers[1].env[0].value, "1");
  assert.deepEqual(seen, { ...ctx, jobLabels: { a: "1" }, jobAnnotations: {} });
  assert.throws(() => mutate(ctx, "nope"), (e) => e.tag === "invalid-input" && e.val.startsWith("pod is not JSON: "));
  assert.throws(() => mutate(ctx, "7"), { tag: "invalid-input", val: "pod is not a JSON object" });
  const failing = mutator(() => {
    throw new InvalidInput("no");
  });
  assert.throws(() => failing.mutate(ctx, POD), { tag: "invalid-input", val: "no" });
  const replacing = mutator((_, pod) => {
    pod.value = { kind: "Other" };
  });
  assert.equal(replacing.mutate(ctx, POD), '{"kind":"Other"}');
});

test("parseJson refuses what serde_json refuses", () => {
  assert.deepEqual(parseJson('{"a":[1,"é"]}'), { a: [1, "é"] });
  assert.deepEqual(parseJson(" [] "), []);
  const nest = (n) => "[".repeat(n) + "]".repeat(n);
  assert.ok(Array.isArray(parseJson(nest(127))));
  assert.throws(() => parseJson(nest(128)), /recursion limit exceeded/);
  assert.throws(() => parseJson(`{"a":${nest(127)}}`), /recursion limit exceeded/);
  assert.ok(parseJson(`"${"[".repeat(500)}"`), "brackets inside strings do not nest");
  assert.throws(() => parseJson('"\\ud800"'), /hex escape/);
  assert.throws(() => parseJson('{"\\udc00":1}'), /hex escape/);
  assert.equal(parseJson('"\\ud83d\\ude00"'), "😀");
  assert.throws(() => parseJson("1e400"), /number out of range/);
  assert.throws(() => parseJson("[-1e309]"), /number out of range/);
  assert.equal(parseJson("1e308"), 1e308);
  assert.equal(parseJson("1e-400"), 0);
  assert.throws(() => parseJson("\ufeff{}"), SyntaxError);
  assert.throws(() => parseJson("{} x"), SyntaxError);
});
