// Owns: the reasons the example policies give with their answers (contract 0.4.0), on the
// SDK's helpers (tally, replanReason). The Rust examples (plugins/policies) and the Python ones
// give the very same strings, byte for byte (a parity test compares them): change all three
// together. `×` is U+00D7; amounts are plain decimal integers.

import { replanReason, tally } from "@diorch/plugin-sdk";

/** The node label whose values count as failure domains (spread's, and its reason's zones). */
export const ZONE_LABEL = "topology.kubernetes.io/zone";

/** True when a task of `job` asks for GPUs: bin-pack then speaks of free GPUs, else of CPU. */
function wantsGpus(job) {
  return job.tasks.some((t) => t.requests.gpus > 0);
}

/**
 * Bin-pack's text per node of `answer` (tally order): `name×count (G free GPUs)` for a job that
 * asks for GPUs, else `name×count (Cm CPU free)`; amounts are the node's free ones as given in
 * the call's input, before this placement.
 */
export function binpackParts(job, nodes, tallied) {
  const gpus = wantsGpus(job);
  return tallied.map(([i, count]) => {
    const node = nodes[i];
    return gpus
      ? `${node.name}×${count} (${node.free.gpus} free GPUs)`
      : `${node.name}×${count} (${node.free.cpuMillis}m CPU free)`;
  });
}

/** Bin-pack's reason for placing `job` on `answer`; null for an empty answer. */
export function binpackReason(job, nodes, answer) {
  if (answer.length === 0) return null;
  return `bin-pack, fullest fitting node first: ${binpackParts(job, nodes, tally(answer)).join(", ")}`;
}

/** Spread's text per node of `answer` (tally order): `name×count`. */
export function spreadParts(nodes, tallied) {
  return tallied.map(([i, count]) => `${nodes[i].name}×${count}`);
}

/**
 * Spread's reason for `answer`: `spread: K nodes in Z zones, at most M per node: ` and the
 * nodes, K the number of nodes used, Z the distinct zone labels among them (a node without the
 * label counting as a zone of its own), M the most replicas on one node; null when empty.
 */
export function spreadReason(nodes, answer) {
  if (answer.length === 0) return null;
  const tallied = tally(answer);
  const zones = new Set();
  let unlabelled = 0;
  let most = 0;
  for (const [i, count] of tallied) {
    const zone = nodes[i].label(ZONE_LABEL);
    if (zone === undefined) unlabelled++;
    else zones.add(zone);
    if (count > most) most = count;
  }
  const z = zones.size + unlabelled;
  return `spread: ${tallied.length} nodes in ${z} zones, at most ${most} per node: ${spreadParts(nodes, tallied).join(", ")}`;
}

/**
 * A policy on views (`{ allocate, optimize }` answering node indices and `{ job, nodes }`
 * entries, e.g. `greedy(choose)`) whose answers carry reasons, for the SDK's `policy()`:
 * `allocate` answers `{ nodes, reason: allocateReason(job, nodes, answer) }`, each `optimize`
 * entry gets `replanReason(by, job.current, entry.nodes, (t) => parts(job, nodes, t))`.
 */
export function withReasons(logic, { by, allocateReason, parts }) {
  return {
    allocate(job, nodes) {
      const answer = logic.allocate(job, nodes);
      return { nodes: answer, reason: allocateReason(job, nodes, answer) };
    },
    optimize(jobs, nodes, previous) {
      return logic.optimize(jobs, nodes, previous).map((entry) => {
        const job = jobs[entry.job];
        const reason = replanReason(by, job.current, entry.nodes, (t) => parts(job, nodes, t));
        return { job: entry.job, nodes: entry.nodes, reason };
      });
    },
  };
}

/** Bin-pack's reasons, for withReasons. */
export const BINPACK_REASONS = {
  by: "bin-pack",
  allocateReason: binpackReason,
  parts: binpackParts,
};

/** Spread's reasons, for withReasons. */
export const SPREAD_REASONS = {
  by: "spread",
  allocateReason: (_job, nodes, answer) => spreadReason(nodes, answer),
  parts: (_job, nodes, tallied) => spreadParts(nodes, tallied),
};
