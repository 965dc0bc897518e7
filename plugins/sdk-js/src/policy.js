// Owns: `policy()`, which turns an author's allocate/optimize on views (Job, Node) into the
// `scheduling-policy` world's exports on the WIT `cluster` record, and checks what comes back
// is lowerable (a wrong value would trap the component instead of reporting an error), in the
// form componentize-qjs lowers correctly (plain Arrays; see columns.js for u32 >= 2^31). Since
// contract 0.4.0 an answer may carry a reason: the author returns either node indices (no
// reason) or `{ nodes, reason }`, and the exports always answer the WIT records `decision`
// (`{ nodes, reason }`) and `job-decision` (`{ job, nodes, reason }`), `reason` being a string
// or null (componentize-qjs's `option<string>`: null is none). Contract 0.5.0's `preempt` always
// answers none (`noPreempt`): a JavaScript policy does not preempt, so a job that does not fit
// waits (a known gap; the built-in and Rust policies do preempt).

import { jobCount, openCluster, readJob, readJobs, readNodes } from "./cluster.js";
import { lowerU32, plainU32s, u32 } from "./columns.js";
import { InvalidInput, guarded } from "./errors.js";

const U32_MAX = 4294967295;

/** An answer's index, checked, as componentize-qjs must be handed it. */
function index(value, what) {
  const n = typeof value === "bigint" ? Number(value) : value;
  if (typeof n !== "number" || !Number.isInteger(n) || n < 0 || n > U32_MAX) {
    throw new Error(`${what} is ${describe(value)}, not an index (an integer from 0 to ${U32_MAX})`);
  }
  return lowerU32(n);
}

function describe(value) {
  try {
    return typeof value === "string" ? JSON.stringify(value) : String(value);
  } catch {
    return typeof value;
  }
}

/** An answer's node list as a plain Array (componentize-qjs traps on a typed array). */
function nodeIndices(list, what) {
  if (list == null || typeof list === "string" || typeof list.length !== "number") {
    throw new Error(`${what} returned ${describe(list)}, not an array of node indices`);
  }
  const out = new Array(list.length);
  for (let i = 0; i < out.length; i++) out[i] = index(list[i], `${what}: entry ${i}`);
  return out;
}

// A UTF-16 code unit of a surrogate pair that is not part of one.
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/**
 * An answer's reason as the WIT `option<string>` is handed to componentize-qjs: null when
 * absent (undefined or null), else the string, a lone surrogate (which UTF-8 cannot encode)
 * replaced by U+FFFD as Rust's `String::from_utf16_lossy` does. Anything else is refused.
 * Length and control characters are left to the host, which keeps at most 256 bytes and turns
 * control characters into spaces.
 */
function reasonText(value, what) {
  if (value === undefined || value === null) return null;
  if (typeof value !== "string") {
    throw new Error(`${what} is ${describe(value)}, not a string (or null for no reason)`);
  }
  return wellFormed(value);
}

/**
 * `text` with every lone surrogate replaced by U+FFFD: String#toWellFormed where the engine has
 * it (native, so a long reason costs little), else a regular expression.
 */
export function wellFormed(text) {
  if (typeof text.isWellFormed === "function") return text.isWellFormed() ? text : text.toWellFormed();
  return text.replace(LONE_SURROGATE, "\ufffd");
}

function isArrayLike(value) {
  return value != null && typeof value !== "string" && typeof value.length === "number";
}

/** An allocate answer (node indices, or `{ nodes, reason }`) as the WIT `decision`. */
function decision(answer) {
  if (isArrayLike(answer)) return { nodes: nodeIndices(answer, "allocate"), reason: null };
  if (answer == null || typeof answer !== "object" || !("nodes" in answer)) {
    throw new Error(`allocate returned ${describe(answer)}, not an array of node indices or { nodes, reason }`);
  }
  return {
    nodes: nodeIndices(answer.nodes, "allocate: nodes"),
    reason: reasonText(answer.reason, "allocate: reason"),
  };
}

/** An optimize answer (`[{ job, nodes, reason? }]`) as WIT `job-decision`s. */
function plan(list) {
  if (!isArrayLike(list)) {
    throw new Error(`optimize returned ${describe(list)}, not an array of {job, nodes, reason?}`);
  }
  return Array.from(list, (entry, i) => {
    if (entry == null || typeof entry !== "object") {
      throw new Error(`optimize: entry ${i} is ${describe(entry)}, not {job, nodes, reason?}`);
    }
    return {
      job: index(entry.job, `optimize: entry ${i} job`),
      nodes: nodeIndices(entry.nodes, `optimize: entry ${i} nodes`),
      reason: reasonText(entry.reason, `optimize: entry ${i} reason`),
    };
  });
}

/**
 * The default optimize: every job whose current placement is complete (non-empty, every replica
 * placed) stays there; the others are left out, which keeps them as they are.
 */
export function keepCurrent(jobs) {
  const out = [];
  for (const job of jobs) {
    if (job.current.length > 0 && job.current.every((n) => n !== null)) {
      out.push({ job: job.index, nodes: job.current.slice() });
    }
  }
  return out;
}

/**
 * The `preempt` export (contract 0.5.0) of every JavaScript policy: no preemption (null is the
 * WIT `option`'s none), so a job that does not fit waits. The build exports it next to the
 * entry's `allocate` and `optimize`, so policies written before 0.5.0 build unchanged.
 *
 * @returns {null}
 */
export function noPreempt() {
  return null;
}

/**
 * The `scheduling-policy` exports for a policy written on views:
 *
 *     export const { allocate, optimize } = policy({
 *       allocate(job, nodes) { return [...one node index per replica] },
 *       optimize(jobs, nodes, previous) { return [{ job, nodes }] },  // optional
 *     });
 *
 * Either may say why (contract 0.4.0): `allocate` may return `{ nodes, reason }` instead of
 * the bare indices, and an `optimize` entry may have a `reason`; a reason is a string, or
 * undefined/null for none. The exports answer the WIT `decision` / `job-decision` records
 * either way (`reason: null` when none was given).
 *
 * Throw NoFit or InvalidInput to refuse; anything else thrown is reported as `internal`.
 *
 * The returned object's `preempt` (contract 0.5.0) answers null: no preemption (see noPreempt).
 *
 * @param {{
 *   allocate(job: import("./cluster.js").Job, nodes: import("./cluster.js").Node[]):
 *     ArrayLike<number | bigint> | { nodes: ArrayLike<number | bigint>, reason?: string | null },
 *   optimize?(jobs: import("./cluster.js").Job[], nodes: import("./cluster.js").Node[],
 *     previous: Array<{ job: number, nodes: number[] }>):
 *     Array<{ job: number, nodes: ArrayLike<number | bigint>, reason?: string | null }>,
 * }} impl
 * @returns {{
 *   allocate(cluster: object): { nodes: number[], reason: string | null },
 *   optimize(cluster: object, previous: Array<{ job: number, nodes: ArrayLike<number> }>):
 *     Array<{ job: number, nodes: number[], reason: string | null }>,
 * }}
 */
export function policy(impl) {
  const allocate = impl?.allocate;
  if (typeof allocate !== "function") {
    throw new TypeError("policy() needs { allocate(job, nodes), optimize?(jobs, nodes, previous) }");
  }
  const optimize = impl.optimize ?? ((jobs) => keepCurrent(jobs));
  return Object.freeze({
    allocate(record) {
      return guarded(() => {
        const cluster = openCluster(record);
        const n = jobCount(cluster);
        if (n !== 1) throw new InvalidInput(`allocate takes exactly one job, got ${n}`);
        const job = readJob(cluster, 0);
        return decision(allocate.call(impl, job, readNodes(cluster)));
      });
    },
    optimize(record, previous) {
      return guarded(() => {
        const cluster = openCluster(record);
        const jobs = readJobs(cluster);
        const before = Array.from(previous ?? [], (p) => ({
          job: u32(p.job),
          nodes: plainU32s(p.nodes),
        }));
        return plan(optimize.call(impl, jobs, readNodes(cluster), before));
      });
    },
    preempt: noPreempt,
  });
}
