// Owns: the GPU bin-packing example policy, a port of plugins/policies/src/binpack.rs (and of
// plugins/binpack, its Wasm wrapper): fill the fullest node that still fits, keep GPU nodes for
// GPU work, so whole GPU nodes stay free for large jobs. Gives the same answers as the Rust one.

import { policy } from "@diorch/plugin-sdk";

import { greedy } from "../shared/engine.js";
import { binpackReason, withReasons } from "../shared/reasons.js";

const MIB = 2 ** 20;
const TWO_32 = 2 ** 32;
// Rust's last score entry, CPU left * 2^20 + MiB left, saturates at u64::MAX, which a Number
// cannot hold; it is kept as (hi, lo) with value = hi * 2^20 + lo and lo < 2^20: exact for
// every value, u64::MAX being (2^44 - 1, 2^20 - 1).
const HI_SATURATED = 2 ** 44 - 1;
const LO_SATURATED = MIB - 1;

/**
 * Per node, once per call: the score's first two entries (prefers-no-schedule, wastes a GPU
 * node) for a CPU-only replica and for a GPU one, packed as `entry0 * 2^33 + entry1 * 2^32` so
 * that adding the third entry (GPUs left, < 2^32) gives one exact Number that orders like the
 * first three entries.
 */
function facts(ctx) {
  return (ctx.memo.binpack ??= {
    cpuOnly: ctx.nodes.map(
      (n) => (n.preferNoSchedule ? 2 * TWO_32 : 0) + (n.allocatable.gpus > 0 ? TWO_32 : 0),
    ),
    gpu: ctx.nodes.map((n) => (n.preferNoSchedule ? 2 * TWO_32 : 0)),
  });
}

/**
 * Best fit on GPUs, then CPU, then memory; CPU-only replicas avoid GPU nodes when they can;
 * PreferNoSchedule nodes only when nothing else fits. Rust's score of a node, lowest wins:
 * [prefers-no-schedule, wastes-a-GPU-node, GPUs left, CPU left * 2^20 + MiB left (saturating)].
 */
export function choose(ctx, task) {
  const { schedulable, free } = ctx;
  const { cpuMillis, memoryBytes, gpus } = free;
  const request = task.requests;
  const needCpu = request.cpuMillis;
  const needMemory = request.memoryBytes;
  const needGpus = request.gpus;
  const needExtended = request.extendedPairs.length > 0;
  const head = needGpus === 0 ? facts(ctx).cpuOnly : facts(ctx).gpu;
  let best = -1;
  let bestHead = 0;
  let bestHi = 0;
  let bestLo = 0;
  for (let i = 0; i < schedulable.length; i++) {
    if (!schedulable[i]) continue;
    const gpusLeft = gpus[i] - needGpus;
    const cpuLeft = cpuMillis[i] - needCpu;
    const memoryLeft = memoryBytes[i] - needMemory;
    if (gpusLeft < 0 || cpuLeft < 0 || memoryLeft < 0) continue;
    if (needExtended && !free.fits(i, request)) continue;
    const h = head[i] + gpusLeft;
    if (best >= 0 && h > bestHead) continue;
    // Integer division by 2^20 without Math.floor (a call): both operands are exact.
    const mibLeft = (memoryLeft - (memoryLeft % MIB)) / MIB;
    let hi = cpuLeft + (mibLeft - (mibLeft % MIB)) / MIB;
    let lo = mibLeft % MIB;
    if (hi > HI_SATURATED) {
      hi = HI_SATURATED;
      lo = LO_SATURATED;
    }
    if (best >= 0 && h === bestHead && (hi > bestHi || (hi === bestHi && lo >= bestLo))) continue;
    best = i;
    bestHead = h;
    bestHi = hi;
    bestLo = lo;
  }
  return best;
}

/**
 * The policy on views, for tests and for reuse (e.g. by testdata/hostile-js): answers without
 * reasons (node indices, `{ job, nodes }` entries).
 */
export const binpack = greedy(choose);

/** The same with reasons (`{ nodes, reason }`, `{ job, nodes, reason }`), as exported. */
export const binpackWithReasons = withReasons(binpack, "bin-pack", binpackReason);

export const { allocate, optimize } = policy(binpackWithReasons);
