// Owns: the spreading (anti-affinity) example policy, a port of plugins/policies/src/spread.rs
// (and of plugins/spread): a job's replicas go to different zones, then different nodes, then
// the least-allocated node, so one node or zone failure takes out as few as possible. Gives the
// same answers as the Rust one.

import { policy } from "@diorch/plugin-sdk";

import { greedy } from "../shared/engine.js";
import { ZONE_LABEL, spreadReason, withReasons } from "../shared/reasons.js";

/** The node label whose values count as failure domains. */
export { ZONE_LABEL };

/**
 * Per node, once per call: prefers-no-schedule, zone (as a small integer, -1 without the label)
 * and allocatable CPU (at least 1, the divisor); plus the counts of the job's replicas placed so
 * far per node and per zone, kept in step with `ctx.placed` (see `count`).
 */
function facts(ctx) {
  let f = ctx.memo.spread;
  if (f === undefined) {
    const zones = new Map();
    const zone = ctx.nodes.map((n) => {
      const z = n.label(ZONE_LABEL);
      if (z === undefined) return -1;
      if (!zones.has(z)) zones.set(z, zones.size);
      return zones.get(z);
    });
    f = {
      preferNoSchedule: ctx.nodes.map((n) => (n.preferNoSchedule ? 1 : 0)),
      zone,
      divisor: ctx.nodes.map((n) => Math.max(n.allocatable.cpuMillis, 1)),
      onNode: new Array(ctx.nodes.length).fill(0),
      inZone: new Array(zones.size).fill(0),
      counted: [],
    };
    ctx.memo.spread = f;
  }
  return f;
}

/** Brings the per-node and per-zone counts to `placed` (undoing the previous replica's). */
function count(f, placed) {
  for (const p of f.counted) {
    f.onNode[p]--;
    if (f.zone[p] >= 0) f.inZone[f.zone[p]]--;
  }
  for (const p of placed) {
    f.onNode[p]++;
    if (f.zone[p] >= 0) f.inZone[f.zone[p]]++;
  }
  f.counted = placed.slice();
}

/**
 * Rust's `(cpu_left.saturating_mul(1000) / divisor).min(1000)`, exactly: an integer division
 * done as (a - a % d) / d is exact while a fits a Number; beyond, BigInt.
 */
function permilleLeft(cpuLeft, divisor) {
  if (cpuLeft >= divisor) return 1000;
  const a = cpuLeft * 1000;
  if (a <= Number.MAX_SAFE_INTEGER) return (a - (a % divisor)) / divisor;
  return Number((BigInt(cpuLeft) * 1000n) / BigInt(divisor));
}

/**
 * Rust's score of a node, lowest wins: [prefers-no-schedule, replicas of this job in the node's
 * zone (on the node when it has no zone label), replicas on the node, ‰ of CPU used after
 * placement].
 */
export function choose(ctx, task) {
  const { schedulable, free } = ctx;
  const { cpuMillis, memoryBytes, gpus } = free;
  const f = facts(ctx);
  count(f, ctx.placed);
  const { preferNoSchedule, zone, divisor, onNode, inZone } = f;
  const request = task.requests;
  const needCpu = request.cpuMillis;
  const needMemory = request.memoryBytes;
  const needGpus = request.gpus;
  const needExtended = request.extendedPairs.length > 0;
  let best = -1;
  let best0 = 0;
  let best1 = 0;
  let best2 = 0;
  let best3 = 0;
  for (let i = 0; i < schedulable.length; i++) {
    if (!schedulable[i]) continue;
    const cpuLeft = cpuMillis[i] - needCpu;
    if (cpuLeft < 0 || memoryBytes[i] < needMemory || gpus[i] < needGpus) continue;
    if (needExtended && !free.fits(i, request)) continue;
    const s0 = preferNoSchedule[i];
    if (best >= 0 && s0 > best0) continue;
    const sameNode = onNode[i];
    const s1 = zone[i] < 0 ? sameNode : inZone[zone[i]];
    if (best >= 0 && s0 === best0 && (s1 > best1 || (s1 === best1 && sameNode > best2))) continue;
    // Least allocated: most CPU left after placement, as a fraction of allocatable (‰).
    const s3 = 1000 - permilleLeft(cpuLeft, divisor[i]);
    if (best >= 0 && s0 === best0 && s1 === best1 && sameNode === best2 && s3 >= best3) continue;
    best = i;
    best0 = s0;
    best1 = s1;
    best2 = sameNode;
    best3 = s3;
  }
  return best;
}

/** The policy on views, for tests and for reuse: answers without reasons. */
export const spread = greedy(choose);

/** The same with reasons (`{ nodes, reason }`, `{ job, nodes, reason }`), as exported. */
export const spreadWithReasons = withReasons(spread, "spread", (_job, nodes, answer) => spreadReason(nodes, answer));

export const { allocate, optimize } = policy(spreadWithReasons);
