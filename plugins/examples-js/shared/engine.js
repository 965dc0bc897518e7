// Owns: the greedy placement loop the example policies share, a line-by-line port of
// plugins/policies/src/engine.rs (free-resource overlay, biggest-replica-first placement that
// keeps running replicas in place, keep-or-place re-plan in priority order). A strategy only
// chooses among candidate nodes. Must give the same answers and error texts as the Rust engine.
//
// Written for QuickJS, an interpreter that pays ~30-100 ns for every bytecode, call, property
// read and allocation (measured in the host: a 50-job re-plan on 100 nodes scores 35 000
// candidates): state is kept in per-call columns (what each node has left, which nodes are
// schedulable), and a strategy is not a score function called per node, as Rust's `Chooser`
// is, but its whole candidate loop (`choose`), so it can compare scores without building them
// and drop a candidate on the first score entry that loses.

import { InvalidInput, NoFit } from "@diorch/plugin-sdk";

import { compareStrings, debugPairs } from "./rust.js";

const U32_MAX = 4294967295;

/**
 * Free resources after the placements made so far, by node index (Rust's `Overlay`), as
 * columns: node `i` has `cpuMillis[i]`, `memoryBytes[i]`, `gpus[i]` left. Copied once per call,
 * not per touched node as in Rust, which reads the same. Extended resources, rare in requests,
 * are copied per node on the first take that involves them; until then the node's own `free`
 * answers, which also reads the same.
 */
export class Overlay {
  constructor(nodes) {
    const n = nodes.length;
    this.nodes = nodes;
    this.cpuMillis = new Array(n);
    this.memoryBytes = new Array(n);
    this.gpus = new Array(n);
    this.extended = new Array(n).fill(null);
    for (let i = 0; i < n; i++) {
      const free = nodes[i].free;
      this.cpuMillis[i] = free.cpuMillis;
      this.memoryBytes[i] = free.memoryBytes;
      this.gpus[i] = free.gpus;
    }
  }

  /** Extended resource `name` left on node `i` (the first entry of that name, as in Rust). */
  extendedAmount(i, name) {
    const pairs = this.extended[i];
    if (pairs === null) return this.nodes[i].free.extendedAmount(name);
    for (const p of pairs) if (p[0] === name) return p[1];
    return 0;
  }

  /** True when `request` fits in what node `i` has left (Rust's `Amounts::fits`). */
  fits(i, request) {
    if (
      this.cpuMillis[i] < request.cpuMillis ||
      this.memoryBytes[i] < request.memoryBytes ||
      this.gpus[i] < request.gpus
    ) {
      return false;
    }
    for (const [name, q] of request.extendedPairs) {
      if (this.extendedAmount(i, name) < q) return false;
    }
    return true;
  }

  /** Subtracts `request` from node `i`, saturating (Rust's `Resources::take`). */
  take(i, request) {
    this.cpuMillis[i] = Math.max(0, this.cpuMillis[i] - request.cpuMillis);
    this.memoryBytes[i] = Math.max(0, this.memoryBytes[i] - request.memoryBytes);
    this.gpus[i] = Math.max(0, this.gpus[i] - request.gpus);
    const want = request.extendedPairs;
    if (want.length === 0) return;
    let pairs = this.extended[i];
    if (pairs === null) {
      pairs = this.nodes[i].free.extendedPairs.map(([n, q]) => [n, q]);
      this.extended[i] = pairs;
    }
    for (const [name, q] of want) {
      const slot = pairs.find((p) => p[0] === name);
      if (slot !== undefined) slot[1] = Math.max(0, slot[1] - q);
    }
  }

  /** Undoes takes (`[node, request]` pairs), last first. */
  giveBack(taken) {
    for (let k = taken.length - 1; k >= 0; k--) {
      const [i, request] = taken[k];
      this.cpuMillis[i] += request.cpuMillis;
      this.memoryBytes[i] += request.memoryBytes;
      this.gpus[i] += request.gpus;
      const pairs = this.extended[i];
      if (pairs === null) continue;
      for (const [name, q] of request.extendedPairs) {
        const slot = pairs.find((p) => p[0] === name);
        if (slot !== undefined) slot[1] += q;
      }
    }
  }
}

/**
 * One policy call in progress (Rust's `Placing`, plus the call-wide state): the nodes, what they
 * have left (`free`), which are schedulable, the nodes chosen so far for the job being placed
 * (`placed`), and `memo`, where a strategy keeps per-node values it computes once per call.
 */
export class Placing {
  constructor(nodes) {
    this.nodes = nodes;
    this.free = new Overlay(nodes);
    this.schedulable = nodes.map((n) => n.schedulable);
    this.placed = [];
    this.memo = {};
  }
}

/** The no-fit text's "a replica of task ... needs ..." part (Rust's `describe`). */
function describe(task) {
  const r = task.requests;
  const extended = r.extendedPairs.length === 0 ? "" : ` and ${debugPairs(r.extendedPairs)}`;
  return `a replica of task ${task.name} needs ${r.cpuMillis}m CPU, ${r.memoryBytes} bytes memory, ${r.gpus} GPUs${extended}`;
}

/** Places every replica of `job`, recording in `taken` what it took (also on failure). */
function placeTaking(choose, job, ctx, taken) {
  if (job.totalReplicas === 0) throw new InvalidInput(`job ${job.key} has no replicas`);
  const { nodes, schedulable, free } = ctx;
  const replicas = job.replicas();
  // Biggest replicas first (GPUs, then CPU, then memory) so they get the best slots; the result
  // is written back in rank order.
  const order = replicas.map((task, rank) => [rank, task]);
  order.sort(([ia, a], [ib, b]) => {
    const ra = a.requests;
    const rb = b.requests;
    if (ra.gpus !== rb.gpus) return rb.gpus < ra.gpus ? -1 : 1;
    if (ra.cpuMillis !== rb.cpuMillis) return rb.cpuMillis < ra.cpuMillis ? -1 : 1;
    if (ra.memoryBytes !== rb.memoryBytes) return rb.memoryBytes < ra.memoryBytes ? -1 : 1;
    return ia - ib;
  });
  const result = new Array(replicas.length).fill(U32_MAX);
  const placed = [];
  ctx.placed = placed;
  // Replicas that already run (`current`, e.g. a job being scaled) stay where they are while
  // their node is usable and has room: re-placing a job must not move its survivors.
  replicas.forEach((task, rank) => {
    const at = job.current[rank];
    if (at === undefined || at === null) return;
    if (at < nodes.length && schedulable[at] && free.fits(at, task.requests)) {
      free.take(at, task.requests);
      taken.push([at, task.requests]);
      result[rank] = at;
      placed.push(at);
    }
  });
  for (const [rank, task] of order) {
    if (result[rank] !== U32_MAX) continue;
    const i = choose(ctx, task);
    if (i < 0) {
      throw new NoFit(`job ${job.key}: ${describe(task)} and no ready, untainted node has room`);
    }
    free.take(i, task.requests);
    taken.push([i, task.requests]);
    result[rank] = i;
    placed.push(i);
  }
  return result;
}

/** Places every replica of `job` (`ctx.free` left as it was when placement fails). */
export function place(choose, job, ctx) {
  const taken = [];
  try {
    return placeTaking(choose, job, ctx, taken);
  } catch (e) {
    ctx.free.giveBack(taken);
    throw e;
  }
}

/** The current placement of `job` (else the previous plan's `hint`) if complete and still valid. */
function keepCurrent(job, ctx, hint) {
  const { nodes, schedulable, free } = ctx;
  let current;
  if (job.current.length > 0 && job.current.every((n) => n !== null)) current = job.current;
  else if (hint !== undefined) current = hint;
  else return null;
  if (current.length !== job.totalReplicas || current.length === 0) return null;
  const replicas = job.replicas();
  const taken = [];
  for (let r = 0; r < current.length; r++) {
    const i = current[r];
    const task = replicas[r];
    if (!(i < nodes.length && schedulable[i]) || !free.fits(i, task.requests)) {
      free.giveBack(taken);
      return null;
    }
    free.take(i, task.requests);
    taken.push([i, task.requests]);
  }
  return current.slice();
}

function compareNumbers(a, b) {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Job indices in re-plan order: priority (high first), then age (old first), then key. */
export function byPriority(jobs) {
  const order = jobs.map((_, i) => i);
  return order.sort((a, b) => {
    const ja = jobs[a];
    const jb = jobs[b];
    return (
      compareNumbers(jb.priority, ja.priority) ||
      compareNumbers(jb.ageSeconds, ja.ageSeconds) ||
      compareStrings(ja.key, jb.key) ||
      a - b
    );
  });
}

function isRefusal(e) {
  return e instanceof NoFit || e instanceof InvalidInput;
}

/**
 * Global re-plan: jobs in byPriority order; a job keeps a still-valid placement (no needless
 * restarts), else is placed afresh; a job that fits nowhere is left out of the plan.
 */
export function optimize(choose, jobs, ctx, previous) {
  const plan = [];
  for (const j of byPriority(jobs)) {
    const job = jobs[j];
    const hint = previous.find((p) => p.job === j)?.nodes;
    let chosen = keepCurrent(job, ctx, hint);
    if (chosen === null) {
      try {
        chosen = place(choose, job, ctx);
      } catch (e) {
        if (!isRefusal(e)) throw e;
      }
    }
    if (chosen !== null) plan.push({ job: j, nodes: chosen });
  }
  return plan.sort((a, b) => a.job - b.job);
}

/**
 * A policy (`{allocate, optimize}` on SDK views, ready for the SDK's `policy()`) from a node
 * choice (Rust's `Chooser`: "the best node for one replica, given what is left").
 * `choose(ctx, task)` returns the index of the node one replica of `task` goes to, or -1: among
 * the nodes that are schedulable (`ctx.schedulable[i]`) and have room (`ctx.free.fits(i,
 * request)`, or its columns `ctx.free.cpuMillis[i]`, `.memoryBytes[i]`, `.gpus[i]`), the one of
 * lowest score, ties going to the lower index. `ctx.placed` holds the nodes chosen so far for
 * the job, `ctx.memo` is the strategy's per-call scratch space.
 */
export function greedy(choose) {
  return {
    allocate: (job, nodes) => place(choose, job, new Placing(nodes)),
    optimize: (jobs, nodes, previous) => optimize(choose, jobs, new Placing(nodes), previous),
  };
}
