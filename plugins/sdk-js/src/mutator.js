// Owns: `mutator()`, which turns an author's `(ctx, pod) => void` into the `pod-mutator` world's
// `mutate` export: the WIT task-context as a plain object, the pod parsed into a Pod, the
// edited pod back as JSON text, refusals as the WIT error variant.

import { u32 } from "./columns.js";
import { guarded } from "./errors.js";
import { Pod } from "./pod.js";

/** `[[key, value]]` as a frozen object, the first of a repeated key winning. */
function object(pairs) {
  const out = {};
  for (const [k, v] of pairs ?? []) {
    if (!Object.hasOwn(out, k)) Object.defineProperty(out, k, { value: v, enumerable: true });
  }
  return Object.freeze(out);
}

/** The WIT task-context as the author sees it (camelCase, labels as objects, node or null). */
export function taskContext(ctx) {
  return Object.freeze({
    jobKey: ctx.jobKey,
    taskName: ctx.taskName,
    taskType: ctx.taskType,
    rank: u32(ctx.rank),
    taskRank: u32(ctx.taskRank),
    worldSize: u32(ctx.worldSize),
    node: ctx.node ?? null,
    jobLabels: object(ctx.jobLabels),
    jobAnnotations: object(ctx.jobAnnotations),
    config: ctx.config ?? "",
  });
}

/**
 * The `pod-mutator` export for a mutator written on Pod:
 *
 *     export const { mutate } = mutator((ctx, pod) => { pod.setEnv(null, "X", "1"); });
 *
 * Throw InvalidInput (or NoFit) to refuse; anything else thrown is reported as `internal`.
 */
export function mutator(fn) {
  if (typeof fn !== "function") throw new TypeError("mutator() needs a function (ctx, pod) => void");
  return Object.freeze({
    mutate(ctx, podJson) {
      return guarded(() => {
        const pod = Pod.parse(podJson);
        fn(taskContext(ctx), pod);
        const text = JSON.stringify(pod.value);
        if (typeof text !== "string") throw new Error("the mutated pod is not JSON");
        return text;
      });
    },
  });
}
