// Owns: running plugin logic outside Wasm (plain `node --test`): diorch snapshot files read into
// the same Node/Job views a call gets, the WIT `cluster` record built from the plain model (what
// the host sends; the same encoding as plugins/sdk/src/view.rs `encode`), and log capture.
// Node.js only (reads files); never bundle it into a plugin.

import { readFileSync } from "node:fs";

import { openCluster, readJobs, readNodes } from "./cluster.js";
import { NO_NODE } from "./columns.js";
import { setLogSink } from "./log.js";

const EFFECT_CODES = { NoSchedule: 0, PreferNoSchedule: 1, NoExecute: 2 };

/** Length of `s` in UTF-8 bytes (string-ends count bytes). */
function utf8Length(s) {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const u = s.charCodeAt(i);
    if (u < 0x80) n += 1;
    else if (u < 0x800) n += 2;
    else if (u >= 0xd800 && u < 0xdc00 && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n += 4;
      i++;
    } else n += 3;
  }
  return n;
}

function resourceColumns() {
  return {
    cpuMillis: [],
    memoryBytes: [],
    gpus: [],
    extendedStarts: [0],
    extendedName: [],
    extendedAmount: [],
  };
}

function pairs(v) {
  if (v == null) return [];
  return Array.isArray(v) ? v : Object.entries(v);
}

/**
 * The WIT `cluster` record for a plain model `{nodes, jobs}` in the snapshot format (labels and
 * extended resources as objects or `[key, value]` lists, taint effects by name, `current` node
 * indices or null).
 */
export function encodeCluster({ nodes = [], jobs = [] } = {}) {
  const c = {
    strings: "",
    stringEnds: [],
    nodes: {
      name: [],
      labelStarts: [0],
      taintStarts: [0],
      allocatable: resourceColumns(),
      free: resourceColumns(),
      ready: [],
    },
    jobs: {
      key: [],
      priority: [],
      preemptible: [],
      taskStarts: [0],
      currentStarts: [0],
      profilings: [],
      ageSeconds: [],
    },
    tasks: {
      name: [],
      taskType: [],
      replicas: [],
      minReplicas: [],
      maxReplicas: [],
      requests: resourceColumns(),
    },
    placements: [],
    labels: { key: [], value: [] },
    taints: { key: [], value: [], effect: [] },
  };
  const texts = [];
  let bytes = 0;
  const text = (s) => {
    const v = String(s ?? "");
    texts.push(v);
    bytes += utf8Length(v);
    c.stringEnds.push(bytes);
    return c.stringEnds.length - 1;
  };
  const resources = (r, columns) => {
    const amounts = r ?? {};
    for (const [name, q] of pairs(amounts.extended)) {
      columns.extendedName.push(text(name));
      columns.extendedAmount.push(q);
    }
    columns.cpuMillis.push(amounts.cpuMillis ?? 0);
    columns.memoryBytes.push(amounts.memoryBytes ?? 0);
    columns.gpus.push(amounts.gpus ?? 0);
    columns.extendedStarts.push(columns.extendedName.length);
  };
  for (const n of nodes) {
    c.nodes.name.push(text(n.name));
    for (const [k, v] of pairs(n.labels)) {
      c.labels.key.push(text(k));
      c.labels.value.push(text(v));
    }
    c.nodes.labelStarts.push(c.labels.key.length);
    for (const t of n.taints ?? []) {
      c.taints.key.push(text(t.key));
      c.taints.value.push(text(t.value));
      c.taints.effect.push(EFFECT_CODES[t.effect] ?? 0);
    }
    c.nodes.taintStarts.push(c.taints.key.length);
    resources(n.allocatable, c.nodes.allocatable);
    resources(n.free, c.nodes.free);
    c.nodes.ready.push(n.ready ? 1 : 0);
  }
  for (const j of jobs) {
    c.jobs.key.push(text(j.key));
    c.jobs.priority.push(j.priority ?? 0);
    c.jobs.preemptible.push(j.preemptible ? 1 : 0);
    for (const t of j.tasks ?? []) {
      c.tasks.name.push(text(t.name));
      c.tasks.taskType.push(text(t.taskType));
      c.tasks.replicas.push(t.replicas ?? 0);
      c.tasks.minReplicas.push(t.minReplicas ?? 0);
      c.tasks.maxReplicas.push(t.maxReplicas ?? 0);
      resources(t.requests, c.tasks.requests);
    }
    c.jobs.taskStarts.push(c.tasks.name.length);
    for (const at of j.current ?? []) c.placements.push(at ?? NO_NODE);
    c.jobs.currentStarts.push(c.placements.length);
    c.jobs.profilings.push(text(j.profilings ?? ""));
    c.jobs.ageSeconds.push(j.ageSeconds ?? 0);
  }
  c.strings = texts.join("");
  return c;
}

function replicasOf(job) {
  const out = [];
  for (const t of job.tasks ?? []) for (let r = 0; r < (t.replicas ?? 0); r++) out.push(t);
  return out;
}

function extendedAmount(r, name) {
  const hit = pairs(r?.extended).find(([n]) => n === name);
  return hit === undefined ? 0 : hit[1];
}

/**
 * `nodes` with the requests of `jobs`' current replicas given back to `free`, capped at
 * `allocatable` (the host's `Snapshot::nodes_without`).
 */
function giveBack(nodes, jobs) {
  const out = nodes.map((n) => ({
    ...n,
    free: {
      ...n.free,
      extended: pairs(n.free?.extended).map(([k, v]) => [k, v]),
    },
  }));
  for (const job of jobs) {
    const replicas = replicasOf(job);
    (job.current ?? []).forEach((at, rank) => {
      const node = at == null ? undefined : out[at];
      const task = replicas[rank];
      if (node === undefined || task === undefined) return;
      const cap = node.allocatable ?? {};
      const req = task.requests ?? {};
      const f = node.free;
      f.cpuMillis = Math.min((f.cpuMillis ?? 0) + (req.cpuMillis ?? 0), cap.cpuMillis ?? 0);
      f.memoryBytes = Math.min((f.memoryBytes ?? 0) + (req.memoryBytes ?? 0), cap.memoryBytes ?? 0);
      f.gpus = Math.min((f.gpus ?? 0) + (req.gpus ?? 0), cap.gpus ?? 0);
      for (const [name, q] of pairs(req.extended)) {
        const slot = f.extended.find(([n]) => n === name);
        if (slot) slot[1] = Math.min(slot[1] + q, extendedAmount(cap, name));
      }
    });
  }
  return out;
}

/**
 * Reads a diorch snapshot (`diorch plugin snapshot`; format of examples/snapshot.json), from a
 * file path, JSON text or a parsed object, into the views a policy call gets:
 * `{nodes, jobs, previous, cluster, snapshot}`; `previous` is the snapshot's last plan as
 * `{job, nodes}` indices (entries naming unknown jobs or nodes are dropped, as the host does).
 *
 * Options, to reproduce what `diorch plugin run` hands a policy:
 * - `jobs`: which jobs the call has: job keys, a predicate on the snapshot's job objects, or
 *   "preemptible" (an optimize call) or "unplaced" (what allocate is for); default all;
 * - `giveBack`: the chosen jobs' current usage counts as free again (true for optimize and for
 *   allocating a placed job as if re-admitted).
 */
export function loadSnapshot(source, { jobs: which = null, giveBack: back = false } = {}) {
  let snapshot = source;
  if (typeof source === "string") {
    const text = source.trimStart().startsWith("{") ? source : readFileSync(source, "utf8");
    snapshot = JSON.parse(text);
  }
  const allJobs = snapshot.jobs ?? [];
  let pick = () => true;
  if (which === "preemptible") pick = (j) => Boolean(j.preemptible);
  else if (which === "unplaced") pick = (j) => (j.current ?? []).every((n) => n == null);
  else if (typeof which === "function") pick = which;
  else if (Array.isArray(which)) pick = (j) => which.includes(j.key);
  const chosen = allJobs.filter((j) => pick(j));
  const modelNodes = back ? giveBack(snapshot.nodes ?? [], chosen) : (snapshot.nodes ?? []);
  const cluster = encodeCluster({ nodes: modelNodes, jobs: chosen });
  const opened = openCluster(cluster);
  const nodeIndex = new Map();
  modelNodes.forEach((n, i) => {
    if (!nodeIndex.has(n.name)) nodeIndex.set(n.name, i);
  });
  const previous = [];
  for (const p of snapshot.previous ?? []) {
    const job = chosen.findIndex((j) => j.key === p.job);
    const nodes = (p.nodes ?? []).map((name) => nodeIndex.get(name));
    if (job >= 0 && nodes.every((n) => n !== undefined)) previous.push({ job, nodes });
  }
  return {
    nodes: readNodes(opened),
    jobs: readJobs(opened),
    previous,
    cluster,
    snapshot,
  };
}

/**
 * Collects what the plugin logs (no-op outside Wasm otherwise): returns `{lines, restore}`,
 * each line `{level, message, fields}` with fields as an object.
 */
export function captureLogs() {
  const lines = [];
  const previous = setLogSink((level, message, fields) => {
    lines.push({ level, message, fields: Object.fromEntries(fields) });
  });
  return { lines, restore: () => setLogSink(previous) };
}
