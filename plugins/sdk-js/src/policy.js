// Owns: `policy()`, which turns an author's allocate/optimize on views (Job, Node) into the
// `scheduling-policy` world's exports on the WIT `cluster` record, and checks what comes back
// is lowerable (a wrong value would trap the component instead of reporting an error), in the
// form componentize-qjs lowers correctly (plain Arrays; see columns.js for u32 >= 2^31).

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

function plan(list) {
  if (list == null || typeof list === "string" || typeof list.length !== "number") {
    throw new Error(`optimize returned ${describe(list)}, not an array of {job, nodes}`);
  }
  return Array.from(list, (entry, i) => {
    if (entry == null || typeof entry !== "object") {
      throw new Error(`optimize: entry ${i} is ${describe(entry)}, not {job, nodes}`);
    }
    return {
      job: index(entry.job, `optimize: entry ${i} job`),
      nodes: nodeIndices(entry.nodes, `optimize: entry ${i} nodes`),
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
 * The `scheduling-policy` exports for a policy written on views:
 *
 *     export const { allocate, optimize } = policy({
 *       allocate(job, nodes) { return [...one node index per replica] },
 *       optimize(jobs, nodes, previous) { return [{ job, nodes }] },  // optional
 *     });
 *
 * Throw NoFit or InvalidInput to refuse; anything else thrown is reported as `internal`.
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
        return nodeIndices(allocate.call(impl, job, readNodes(cluster)), "allocate");
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
  });
}
