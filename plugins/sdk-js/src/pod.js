// Owns: typed helpers over the pod JSON a mutator receives, the same edits and the same
// semantics as plugins/sdk/src/pod.rs (edits create missing intermediate objects and replace
// what is in the way: a `metadata` that is not an object becomes one, an `env` that is not an
// array becomes one). `pod.value` is the parsed JSON for anything else.

import { InvalidInput } from "./errors.js";
import { parseJson } from "./json.js";

function isObject(v) {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

/** Own member `key` of a JSON object; undefined for a non-object or a missing key. */
function get(v, key) {
  return isObject(v) && Object.hasOwn(v, key) ? v[key] : undefined;
}

function str(v) {
  return typeof v === "string" ? v : undefined;
}

/** Sets `object[key]` as an own data property (also for `__proto__`). */
function put(object, key, value) {
  Object.defineProperty(object, key, {
    value,
    writable: true,
    enumerable: true,
    configurable: true,
  });
}

/** `parent[key]` made an object if it is not one (missing, or anything else). */
function child(parent, key) {
  const v = get(parent, key);
  if (isObject(v)) return v;
  const fresh = {};
  put(parent, key, fresh);
  return fresh;
}

/** `parent[key]` made an array if it is not one. */
function array(parent, key) {
  const v = get(parent, key);
  if (Array.isArray(v)) return v;
  const fresh = [];
  put(parent, key, fresh);
  return fresh;
}

/** JSON equality (serde_json's `Value == Value`: objects regardless of key order). */
function jsonEqual(a, b) {
  if (a === b) return true;
  if (Array.isArray(a)) {
    return Array.isArray(b) && a.length === b.length && a.every((x, i) => jsonEqual(x, b[i]));
  }
  if (!isObject(a) || !isObject(b)) return false;
  const keys = Object.keys(a);
  if (keys.length !== Object.keys(b).length) return false;
  return keys.every((k) => Object.hasOwn(b, k) && jsonEqual(a[k], b[k]));
}

/** A deep copy through JSON, so a value handed in is not shared with the caller. */
function copy(v) {
  return v === undefined ? null : JSON.parse(JSON.stringify(v));
}

/** A pod as JSON (`v1.Pod`). */
export class Pod {
  #value;

  /** @param value the parsed pod (use Pod.parse for text) */
  constructor(value) {
    this.#value = value;
  }

  /** Parses pod JSON; not JSON or not an object is InvalidInput, as in the Rust SDK. */
  static parse(json) {
    let v;
    try {
      v = parseJson(json);
    } catch (e) {
      throw new InvalidInput(`pod is not JSON: ${e.message}`);
    }
    if (!isObject(v)) throw new InvalidInput("pod is not a JSON object");
    return new Pod(v);
  }

  toJSON() {
    return this.#value;
  }

  /** The pod as JSON text. */
  toString() {
    return JSON.stringify(this.#value);
  }

  /** The parsed pod, to read or edit directly. */
  get value() {
    return this.#value;
  }

  set value(v) {
    this.#value = v;
  }

  /** The root as an object (edits on a pod whose value was set to a non-object start afresh). */
  #root() {
    if (!isObject(this.#value)) this.#value = {};
    return this.#value;
  }

  /** `metadata.name`, or undefined. */
  name() {
    return str(get(get(this.#value, "metadata"), "name"));
  }

  setName(name) {
    put(child(this.#root(), "metadata"), "name", String(name));
  }

  /** `metadata.labels[key]`, or undefined. */
  label(key) {
    return str(get(get(get(this.#value, "metadata"), "labels"), key));
  }

  setLabel(key, value) {
    put(child(child(this.#root(), "metadata"), "labels"), key, String(value));
  }

  setAnnotation(key, value) {
    put(child(child(this.#root(), "metadata"), "annotations"), key, String(value));
  }

  setNodeSelector(key, value) {
    put(child(child(this.#root(), "spec"), "nodeSelector"), key, String(value));
  }

  /** `spec.nodeSelector[key]`, or undefined. */
  nodeSelector(key) {
    return str(get(get(get(this.#value, "spec"), "nodeSelector"), key));
  }

  /** Adds a toleration (a `v1.Toleration` object) unless an equal one is there. */
  addToleration(toleration) {
    const list = array(child(this.#root(), "spec"), "tolerations");
    const t = copy(toleration);
    if (!list.some((x) => jsonEqual(x, t))) list.push(t);
  }

  /** `spec.tolerations` (a copy of the list), or [] . */
  tolerations() {
    const list = get(get(this.#value, "spec"), "tolerations");
    return Array.isArray(list) ? list.slice() : [];
  }

  /** Names of `spec.containers`, in order (entries without a string name are skipped). */
  containerNames() {
    const list = get(get(this.#value, "spec"), "containers");
    if (!Array.isArray(list)) return [];
    const out = [];
    for (const c of list) {
      const n = str(get(c, "name"));
      if (n !== undefined) out.push(n);
    }
    return out;
  }

  /**
   * The containers named `container` (every one when null), each made an object. Like Rust's
   * `containers_mut`, this creates `spec.containers` when missing.
   */
  #containers(container) {
    const list = array(child(this.#root(), "spec"), "containers");
    const out = [];
    for (let i = 0; i < list.length; i++) {
      if (container == null || str(get(list[i], "name")) === container) {
        if (!isObject(list[i])) list[i] = {};
        out.push(list[i]);
      }
    }
    return out;
  }

  /**
   * Sets env var `name` in `container` (every container when null), replacing an existing entry
   * of that name; returns how many containers were changed.
   */
  setEnv(container, name, value) {
    name = String(name);
    container = container == null ? null : String(container);
    let changed = 0;
    for (const c of this.#containers(container)) {
      const env = array(c, "env");
      const entry = { name, value: String(value) };
      const at = env.findIndex((e) => str(get(e, "name")) === name);
      if (at >= 0) env[at] = entry;
      else env.push(entry);
      changed += 1;
    }
    return changed;
  }

  /** Removes env var `name` from every container. */
  removeEnv(name) {
    name = String(name);
    for (const c of this.#containers(null)) {
      const env = array(c, "env");
      const kept = env.filter((e) => str(get(e, "name")) !== name);
      env.length = 0;
      env.push(...kept);
    }
  }

  /** The plain value of env var `name` in (the first container named) `container`, or undefined. */
  env(container, name) {
    const list = get(get(this.#value, "spec"), "containers");
    if (!Array.isArray(list)) return undefined;
    const c = list.find((x) => str(get(x, "name")) === container);
    const env = get(c, "env");
    if (!Array.isArray(env)) return undefined;
    return str(get(env.find((e) => str(get(e, "name")) === name), "value"));
  }
}
