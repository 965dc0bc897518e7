// Owns: a test-only JS policy that misbehaves when the job key's name says so (key
// `namespace/<mode>`), for the host's bound tests on QuickJS components; any other name is
// bin-packed normally (the binpack example), so the same component also serves good calls.
// The JS counterpart of plugins/testdata/hostile-policy. Modes:
// - `loop`: a busy loop, forever;
// - `sleep`: ~30 s of busy waiting. A plugin has no clock (WASI is stubbed, and the SDK pins
//   Date.now() at 0, as the host's deny-all clocks do), so waiting on the time would never end;
//   this spins a fixed count instead, calibrated to ~30 s in the host (QuickJS in wasmtime ran
//   this loop at ~15 M iterations/s on a 2-core dev VM), then bin-packs;
// - `oom`: allocates 1 GiB (an ArrayBuffer) and touches every page;
// - `trap`: an exception that is not the WIT error variant leaves the export (the SDK would
//   turn it into `internal`, so this one is rethrown past it): componentize-qjs then executes
//   `unreachable`, a Wasm trap, as a Rust panic does;
// - `recurse`: unbounded recursion, which exhausts the Wasm call stack (a trap: QuickJS's own
//   stack check does not fire first);
// - `garbage`: node index 4294967000 for every replica;
// - `wrong-count`: one node fewer than the job has replicas;
// - `huge-no-fit`: a 2 MiB `no-fit` text;
// - `unknown-node`, `not-ready`, `huge-answer` (2 Mi entries), `log-flood` (200 lines of 64 KiB
//   with 64 fields of 1 KiB keys and values, then a good answer): as the Rust one;
// - `huge-reason` (contract 0.4): a good answer with a 1 MiB reason, as the Rust one (under the
//   host's 4 MiB copy cap, so the host cuts it to 256 bytes rather than refusing the answer);
// - `control-reason`: a good answer whose reason carries newlines, a NUL, terminal escapes, DEL
//   and a bidi override: the Rust one's text, which the host turns into spaces;
// - `surrogate-reason`: a good answer whose reason holds lone UTF-16 surrogates, which UTF-8
//   cannot encode: the SDK sends U+FFFD for each.
// `optimize` gives the reason modes' reasons to jobs so named. Every other answer carries no
// reason, as a policy written for contract 0.3 answers: the component also shows that such a
// policy still builds and answers.

import { NoFit, log, policy } from "@diorch/plugin-sdk";

import { binpack } from "../../examples-js/binpack/index.js";

/** The `trap` mode's message, by which the export recognises it. */
const TRAP = "hostile policy traps on purpose";

/** ~30 s of the busy loop below in the host (see the header). */
const SLEEP_ITERATIONS = 460_000_000;

function recurse(n) {
  return recurse(n + 1) + 1;
}

function logFlood() {
  const message = "m".repeat(64 << 10);
  const key = "k".repeat(1 << 10);
  const value = "v".repeat(1 << 10);
  const fields = Array.from({ length: 64 }, () => [key, value]);
  for (let i = 0; i < 200; i++) log.info(message, fields);
}

/** The reason of a reason mode, else undefined (built per call: not kept in the heap). */
function reasonFor(mode) {
  switch (mode) {
    case "huge-reason":
      return "why ".repeat(256 << 10);
    case "control-reason":
      return CONTROL_REASON;
    case "surrogate-reason":
      return "lone \ud800 high, lone \udc00 low, pair \ud83d\ude00 kept";
    default:
      return undefined;
  }
}

/** The Rust hostile policy's `control-reason` text. */
const CONTROL_REASON = "line one\nline two\r\0\u001b[31mred\u001b[0m \u202edesrever\u007f end";

function misbehave(job, nodes) {
  const n = job.totalReplicas;
  switch (job.name) {
    case "loop": {
      let i = 0;
      for (;;) i = (i + 1) | 0;
    }
    case "sleep": {
      let x = 0;
      for (let i = 0; i < SLEEP_ITERATIONS; i++) x = (x + i) | 0;
      if (x === 42) log.debug("never", {});
      return binpack.allocate(job, nodes);
    }
    case "oom": {
      const big = new Uint8Array(1 << 30);
      for (let i = 0; i < big.length; i += 4096) big[i] = 1;
      return new Array(n).fill(big[4096]);
    }
    case "trap":
      throw new Error(TRAP);
    case "recurse":
      return [recurse(0)];
    case "garbage":
      return new Array(n).fill(4294967000);
    case "wrong-count":
      return binpack.allocate(job, nodes).slice(0, Math.max(n - 1, 0));
    case "huge-no-fit":
      throw new NoFit("no room ".repeat(256 << 10));
    case "unknown-node":
      return new Array(n).fill(nodes.length + 7);
    case "not-ready": {
      const i = nodes.findIndex((node) => !node.ready);
      return new Array(n).fill(i < 0 ? 0 : i);
    }
    case "huge-answer":
      return new Array(2 << 20).fill(0);
    case "log-flood":
      logFlood();
      return binpack.allocate(job, nodes);
    case "huge-reason":
    case "control-reason":
    case "surrogate-reason":
      return { nodes: binpack.allocate(job, nodes), reason: reasonFor(job.name) };
    default:
      return binpack.allocate(job, nodes);
  }
}

/** Bin-pack's plan, the reason modes' reasons on the jobs so named, no reason elsewhere. */
function optimizeWithReasons(jobs, nodes, previous) {
  return binpack.optimize(jobs, nodes, previous).map((entry) => {
    const reason = reasonFor(jobs[entry.job].name);
    return reason === undefined ? entry : { ...entry, reason };
  });
}

const hostile = policy({ allocate: misbehave, optimize: optimizeWithReasons });

export function allocate(cluster) {
  try {
    return hostile.allocate(cluster);
  } catch (e) {
    // Not the error variant: componentize-qjs traps on it.
    if (e?.tag === "internal" && e.val === TRAP) throw new Error(TRAP);
    throw e;
  }
}

export const { optimize } = hostile;
