// Owns: the reasons the example policies give with their answers (contract 0.4.0), on the
// SDK's helpers (tally, perNode, replanReason): a port of plugins/policies/src/explain.rs. The
// Rust examples and the Python ones give the very same strings, byte for byte (a parity test
// compares them): change all three together. `×` is U+00D7; amounts are plain decimal integers.

import { nodeName, perNode, replanReason, tally } from "@diorch/plugin-sdk";

/** The node label whose values count as failure domains (spread's, and its reason's zones). */
export const ZONE_LABEL = "topology.kubernetes.io/zone";

/**
 * Bin-pack's reason for placing `job` on `answer`: `bin-pack, fullest fitting node first: ` and
 * per node (tally order) `name×count (G free GPUs)` for a job with a task asking for GPUs, else
 * `name×count (Cm CPU free)`, the amounts free on the node in the call's input (before this
 * placement); null for an empty answer.
 */
export function binpackReason(job, nodes, answer) {
  if (answer.length === 0) return null;
  const gpuJob = job.tasks.some((t) => t.requests.gpus > 0);
  const parts = tally(answer).map(([i, count]) => {
    let free = "";
    if (i >= 0 && i < nodes.length) {
      const f = nodes[i].free;
      free = gpuJob ? `${f.gpus} free GPUs` : `${f.cpuMillis}m CPU free`;
    }
    return `${nodeName(nodes, i)}×${count} (${free})`;
  });
  return `bin-pack, fullest fitting node first: ${parts.join(", ")}`;
}

/**
 * Spread's reason for `answer`: `spread: K nodes in Z zones, at most M per node: ` and
 * `name×count` per node, K the number of nodes used, Z the distinct zones among them (the
 * ZONE_LABEL value; a node without the label is a zone of its own), M the most replicas on one
 * node; null for an empty answer.
 */
export function spreadReason(nodes, answer) {
  if (answer.length === 0) return null;
  const tallied = tally(answer);
  const zones = new Set();
  let most = 0;
  for (const [i, count] of tallied) {
    if (i >= 0 && i < nodes.length) {
      const zone = nodes[i].label(ZONE_LABEL);
      zones.add(zone === undefined ? `node:${nodes[i].name}` : `zone:${zone}`);
    } else {
      zones.add(`node:?${i}`);
    }
    if (count > most) most = count;
  }
  return `spread: ${tallied.length} nodes in ${zones.size} zones, at most ${most} per node: ${perNode(nodes, answer)}`;
}

/**
 * A policy on views (`{ allocate, optimize }` answering node indices and `{ job, nodes }`
 * entries, e.g. `greedy(choose)`) whose answers carry reasons, for the SDK's `policy()`:
 * `allocate` answers `{ nodes, reason: allocateReason(job, nodes, answer) }`, and each
 * `optimize` entry gets `replanReason(by, job, nodes, entry.nodes)`.
 *
 * @param {{ allocate: Function, optimize: Function }} logic
 * @param {string} by the policy's name in re-plan reasons, e.g. "bin-pack"
 * @param {(job, nodes, answer: number[]) => string | null} allocateReason
 */
export function withReasons(logic, by, allocateReason) {
  return {
    allocate(job, nodes) {
      const answer = logic.allocate(job, nodes);
      return { nodes: answer, reason: allocateReason(job, nodes, answer) };
    },
    optimize(jobs, nodes, previous) {
      return logic.optimize(jobs, nodes, previous).map((entry) => ({
        job: entry.job,
        nodes: entry.nodes,
        reason: replanReason(by, jobs[entry.job], nodes, entry.nodes),
      }));
    },
  };
}
