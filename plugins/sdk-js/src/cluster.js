// Owns: the read-only views a policy sees of one `cluster` record: Node, Resources, Job, Task.
// Mirrors plugins/sdk/src/view.rs. Nodes are read where the host put them: what a policy reads
// for every candidate node of every replica (ready, taint effects, allocatable and free amounts)
// is read once per node here; name, labels, taints and extended resources only when asked for.
// Jobs are few and small, so they are read whole.
//
// Cost matters here: QuickJS interprets, and a call reads every node. Measured in the host, a
// frozen Node with private fields and closures cost ~30 µs per node (30 ms at 1000 nodes),
// Object.freeze alone ~6 µs per object, a small function call ~0.3 µs. So views are not frozen
// (treat them as read-only; only the lazily built labels/extended objects are), keep their
// internals under module-private symbols, and the per-node path inlines its column reads.

import { at, at64, atSigned, col, run, u32, u64, MAX_SAFE, NO_NODE, StringTable, toNumber } from "./columns.js";

/** Taint effects by their WIT code; an unknown code reads as NoSchedule, the strictest. */
const EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

function effectCode(code) {
  return code === 1 || code === 2 ? code : 0;
}

// Internals of the views, out of Object.keys / JSON / for-in.
const SOURCE = Symbol("source");
const ROW = Symbol("row");
const PAIRS = Symbol("pairs");
const EXTENDED = Symbol("extended");
const NAME = Symbol("name");
const LABELS = Symbol("labels");
const TAINTS = Symbol("taints");

/** A data property that cannot be overwritten; also right for keys such as `__proto__`. */
function define(object, key, value) {
  Object.defineProperty(object, key, { value, enumerable: true });
}

/** Pairs as a frozen object, keeping the first value of a repeated key (like Rust's `find`). */
function firstWins(pairs) {
  const object = {};
  for (const [k, v] of pairs) if (!Object.hasOwn(object, k)) define(object, k, v);
  return Object.freeze(object);
}

const NO_PAIRS = Object.freeze([]);

/** The extended-resource pairs of a request: a Resources' own list, else a plain object's. */
function requestPairs(request) {
  if (request instanceof Resources) return request.extendedPairs;
  const ext = request == null ? null : request.extended;
  if (ext == null) return NO_PAIRS;
  if (Array.isArray(ext)) return ext;
  return Object.entries(ext);
}

/** One `resource-columns` record: its rows as Resources, extended resources read on demand. */
class ResourceColumns {
  constructor(strings, columns) {
    this.strings = strings;
    this.names = col(columns.extendedName);
    this.amounts = col(columns.extendedAmount);
    this.starts = col(columns.extendedStarts);
    this.cpuMillis = col(columns.cpuMillis);
    this.memoryBytes = col(columns.memoryBytes);
    this.gpus = col(columns.gpus);
  }

  /** Row `row` (`at()` inlined: this runs twice per node). */
  row(row) {
    let cpu = this.cpuMillis[row];
    if (typeof cpu !== "number" || !(cpu >= 0 && cpu <= MAX_SAFE)) cpu = u64(cpu);
    let memory = this.memoryBytes[row];
    if (typeof memory !== "number" || !(memory >= 0 && memory <= MAX_SAFE)) memory = u64(memory);
    let gpus = this.gpus[row];
    if (typeof gpus !== "number" || !(gpus >= 0)) gpus = u32(gpus);
    const r = new Resources(cpu, memory, gpus);
    r[SOURCE] = this;
    r[ROW] = row;
    return r;
  }

  pairs(row) {
    const [start, end] = run(this.starts, row, this.names.length);
    const out = [];
    for (let i = start; i < end; i++) out.push([this.strings.at(this.names, i), at64(this.amounts, i)]);
    return out;
  }
}

/**
 * Amounts of each resource. `extended` maps an extended resource name (e.g. `rdma/hca`) to its
 * amount, first occurrence winning; `extendedPairs` is the list as sent, repeats included.
 */
export class Resources {
  /** @internal Use Resources.of() to make one. */
  constructor(cpuMillis, memoryBytes, gpus) {
    this.cpuMillis = cpuMillis;
    this.memoryBytes = memoryBytes;
    this.gpus = gpus;
  }

  /** Resources from plain values: `{cpuMillis, memoryBytes, gpus, extended: {name: amount}}`. */
  static of({ cpuMillis = 0, memoryBytes = 0, gpus = 0, extended = {} } = {}) {
    const r = new Resources(toNumber(cpuMillis), toNumber(memoryBytes), toNumber(gpus));
    r[PAIRS] = (Array.isArray(extended) ? extended : Object.entries(extended ?? {})).map(([n, q]) => [
      String(n),
      toNumber(q),
    ]);
    return r;
  }

  /** Extended resources as `[name, amount]` pairs, in order, repeats included. */
  get extendedPairs() {
    let pairs = this[PAIRS];
    if (pairs === undefined) {
      const source = this[SOURCE];
      pairs = source === undefined ? NO_PAIRS : source.pairs(this[ROW]);
      this[PAIRS] = pairs;
    }
    return pairs;
  }

  /** Extended resources as a frozen object name -> amount (the first of a repeated name). */
  get extended() {
    let object = this[EXTENDED];
    if (object === undefined) {
      object = firstWins(this.extendedPairs);
      this[EXTENDED] = object;
    }
    return object;
  }

  /** The amount of extended resource `name`; 0 when absent. */
  extendedAmount(name) {
    const pairs = this.extendedPairs;
    for (let i = 0; i < pairs.length; i++) if (pairs[i][0] === name) return pairs[i][1];
    return 0;
  }

  /** True when `request` (Resources or a plain object of the same shape) fits in these. */
  fits(request) {
    if (
      !(this.cpuMillis >= toNumber(request.cpuMillis ?? 0)) ||
      !(this.memoryBytes >= toNumber(request.memoryBytes ?? 0)) ||
      !(this.gpus >= toNumber(request.gpus ?? 0))
    ) {
      return false;
    }
    for (const [name, q] of requestPairs(request)) {
      if (!(this.extendedAmount(name) >= toNumber(q))) return false;
    }
    return true;
  }

  /**
   * What is left once `request` is taken, as new Resources (Rust's `Resources::take`): each
   * amount less the request's, never below 0; an extended resource the request names comes off
   * the first entry of that name, one absent here stays absent.
   */
  minus(request) {
    const pairs = this.extendedPairs.map(([n, q]) => [n, q]);
    for (const [name, q] of requestPairs(request)) {
      const slot = pairs.find((p) => p[0] === name);
      if (slot !== undefined) slot[1] = Math.max(0, slot[1] - toNumber(q));
    }
    const r = new Resources(
      Math.max(0, this.cpuMillis - toNumber(request.cpuMillis ?? 0)),
      Math.max(0, this.memoryBytes - toNumber(request.memoryBytes ?? 0)),
      Math.max(0, this.gpus - toNumber(request.gpus ?? 0)),
    );
    r[PAIRS] = pairs;
    return r;
  }

  toJSON() {
    const { cpuMillis, memoryBytes, gpus, extended } = this;
    return { cpuMillis, memoryBytes, gpus, extended };
  }
}

/** The node table's columns, read once per call for every Node. */
class NodeColumns {
  constructor(cluster) {
    const { nodes, taints } = cluster.columns;
    this.cluster = cluster;
    this.ready = col(nodes.ready);
    this.taintStarts = col(nodes.taintStarts);
    this.effects = col(taints.effect);
    this.allocatable = new ResourceColumns(cluster.strings, nodes.allocatable ?? {});
    this.free = new ResourceColumns(cluster.strings, nodes.free ?? {});
  }
}

/** One node of the call. Read-only: treat its properties as constants. */
export class Node {
  /** @internal Nodes come from readNodes(). */
  constructor(columns, index) {
    // The effects of the node's taints as bits (1 << code), `run()` inlined.
    const starts = columns.taintStarts;
    const effects = columns.effects;
    let bits = 0;
    if (index + 1 < starts.length) {
      const end = Math.min(at(starts, index + 1), effects.length);
      for (let t = Math.min(at(starts, index), end); t < end; t++) {
        bits |= 1 << effectCode(at(effects, t));
      }
    }
    const ready = index < columns.ready.length && columns.ready[index] != 0;
    this.index = index;
    this.ready = ready;
    /** Ready and without a NoSchedule or NoExecute taint (tasks carry no tolerations). */
    this.schedulable = ready && (bits & 0b101) === 0;
    this.preferNoSchedule = (bits & 0b010) !== 0;
    this.allocatable = columns.allocatable.row(index);
    /** Allocatable minus what pods outside the job(s) being placed request. */
    this.free = columns.free.row(index);
    this[SOURCE] = columns.cluster;
  }

  get name() {
    let name = this[NAME];
    if (name === undefined) {
      const { strings, columns } = this[SOURCE];
      name = strings.at(col(columns.nodes.name), this.index);
      this[NAME] = name;
    }
    return name;
  }

  /** Labels as a frozen object; the first of a repeated key wins. */
  get labels() {
    let labels = this[LABELS];
    if (labels === undefined) {
      const { strings, columns } = this[SOURCE];
      const keys = col(columns.labels.key);
      const values = col(columns.labels.value);
      const [start, end] = run(col(columns.nodes.labelStarts), this.index, keys.length);
      const pairs = [];
      for (let l = start; l < end; l++) pairs.push([strings.at(keys, l), strings.at(values, l)]);
      labels = firstWins(pairs);
      this[LABELS] = labels;
    }
    return labels;
  }

  /** Taints in order, each `{key, value, effect}` with effect a Kubernetes effect name. */
  get taints() {
    let taints = this[TAINTS];
    if (taints === undefined) {
      const { strings, columns } = this[SOURCE];
      const { key, value, effect } = columns.taints;
      const keys = col(key);
      const [start, end] = run(col(columns.nodes.taintStarts), this.index, keys.length);
      const out = [];
      for (let t = start; t < end; t++) {
        out.push(
          Object.freeze({
            key: strings.at(keys, t),
            value: strings.at(col(value), t),
            effect: EFFECTS[effectCode(at(col(effect), t))],
          }),
        );
      }
      taints = Object.freeze(out);
      this[TAINTS] = taints;
    }
    return taints;
  }

  /** The value of label `key` (its first occurrence), or undefined. */
  label(key) {
    const labels = this[LABELS];
    if (labels !== undefined) return Object.hasOwn(labels, key) ? labels[key] : undefined;
    // Without building the labels object: policies often ask one label of every node.
    const { strings, columns } = this[SOURCE];
    const keys = col(columns.labels.key);
    const [start, end] = run(col(columns.nodes.labelStarts), this.index, keys.length);
    for (let l = start; l < end; l++) {
      if (strings.is(keys, l, key)) return strings.at(col(columns.labels.value), l);
    }
    return undefined;
  }

  toJSON() {
    const { index, name, ready, labels, taints, allocatable, free } = this;
    return { index, name, ready, labels, taints, allocatable, free };
  }
}

/** An entry of a job's `spec.tasks`, with the per-replica requests of its di-container. */
export class Task {
  /** @internal */
  constructor(name, taskType, replicas, minReplicas, maxReplicas, requests) {
    this.name = name;
    this.taskType = taskType;
    this.replicas = replicas;
    this.minReplicas = minReplicas;
    this.maxReplicas = maxReplicas;
    /** Per-replica requests. */
    this.requests = requests;
  }
}

/** A DIJob of the call. */
export class Job {
  /** @internal Jobs come from readJobs(). */
  constructor(index, key, priority, preemptible, tasks, current, profilings, ageSeconds) {
    const slash = key.indexOf("/");
    let total = 0;
    for (const t of tasks) total += t.replicas;
    this.index = index;
    /** `namespace/name`. */
    this.key = key;
    this.namespace = slash < 0 ? "" : key.slice(0, slash);
    this.name = key.slice(slash + 1);
    this.priority = priority;
    this.preemptible = preemptible;
    this.tasks = tasks;
    /** Node index per replica in rank order; null when unplaced or on a vanished node. */
    this.current = current;
    /** DI-engine profilings as JSON text ("" when none). */
    this.profilings = profilings;
    this.ageSeconds = ageSeconds;
    /** Sum of the tasks' replicas: the length of a valid allocation. */
    this.totalReplicas = total;
  }

  /** Each replica's task, in global-rank order (tasks in spec order, then local rank). */
  replicas() {
    const out = [];
    for (const t of this.tasks) for (let r = 0; r < t.replicas; r++) out.push(t);
    return out;
  }
}

/**
 * The call's input prepared for reading: normalised tables (a missing one reads as empty) and
 * the string table.
 */
export function openCluster(record) {
  const c = record ?? {};
  const columns = {
    nodes: c.nodes ?? {},
    jobs: c.jobs ?? {},
    tasks: c.tasks ?? {},
    placements: col(c.placements),
    labels: c.labels ?? {},
    taints: c.taints ?? {},
  };
  return { columns, strings: new StringTable(c.strings, c.stringEnds) };
}

/** Views of every node of the call, in index order. */
export function readNodes(cluster) {
  const columns = new NodeColumns(cluster);
  const n = col(cluster.columns.nodes.name).length;
  const out = new Array(n);
  for (let i = 0; i < n; i++) out[i] = new Node(columns, i);
  return out;
}

/** The number of jobs in the call. */
export function jobCount(cluster) {
  return col(cluster.columns.jobs.key).length;
}

/** The job and task tables' columns, read once per call for every Job. */
function jobColumns(cluster) {
  const { jobs, tasks } = cluster.columns;
  return {
    key: col(jobs.key),
    priority: col(jobs.priority),
    preemptible: col(jobs.preemptible),
    taskStarts: col(jobs.taskStarts),
    currentStarts: col(jobs.currentStarts),
    profilings: col(jobs.profilings),
    ageSeconds: col(jobs.ageSeconds),
    taskName: col(tasks.name),
    taskType: col(tasks.taskType),
    replicas: col(tasks.replicas),
    minReplicas: col(tasks.minReplicas),
    maxReplicas: col(tasks.maxReplicas),
    requests: new ResourceColumns(cluster.strings, tasks.requests ?? {}),
  };
}

function jobAt(cluster, c, j) {
  const { strings, columns } = cluster;
  const [t0, t1] = run(c.taskStarts, j, c.taskName.length);
  const tasks = [];
  for (let t = t0; t < t1; t++) {
    tasks.push(
      new Task(
        strings.at(c.taskName, t),
        strings.at(c.taskType, t),
        at(c.replicas, t),
        at(c.minReplicas, t),
        at(c.maxReplicas, t),
        c.requests.row(t),
      ),
    );
  }
  const placements = columns.placements;
  const [p0, p1] = run(c.currentStarts, j, placements.length);
  const current = [];
  for (let p = p0; p < p1; p++) {
    const node = at(placements, p);
    current.push(node === NO_NODE ? null : node);
  }
  return new Job(
    j,
    strings.at(c.key, j),
    atSigned(c.priority, j),
    at(c.preemptible, j) !== 0,
    tasks,
    current,
    strings.at(c.profilings, j),
    at64(c.ageSeconds, j),
  );
}

/** Job `j` of the call. */
export function readJob(cluster, j) {
  return jobAt(cluster, jobColumns(cluster), j);
}

/** Every job of the call, in index order. */
export function readJobs(cluster) {
  const c = jobColumns(cluster);
  const n = c.key.length;
  const out = new Array(n);
  for (let j = 0; j < n; j++) out[j] = jobAt(cluster, c, j);
  return out;
}
