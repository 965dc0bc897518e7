// Owns: the accelerator-env example mutator, a port of plugins/accel-env: NCCL and CUDA env for
// learner pods. Same answers and error texts as the Rust one, except where Rust quotes
// serde_json's parse error (there only the "config is not JSON: " prefix is the same).
//
// Config (JSON, every field optional): {"taskTypes": ["learner"], "interface": "eth0",
// "rdma": false, "debug": "WARN", "env": {"NAME": "value"}}. Env goes into `di-container` (all
// containers if none has that name); names starting with `DI_` are refused, they belong to the
// operator.

import { InvalidInput, log, mutator, parseJson } from "@diorch/plugin-sdk";

import { compareStrings, debugString, isBlank } from "../shared/rust.js";

/** serde_json's `Value::get`: a member of an object; undefined for anything else. */
function member(config, key) {
  return config !== null && typeof config === "object" && !Array.isArray(config) && Object.hasOwn(config, key)
    ? config[key]
    : undefined;
}

/** The env to set for `ctx` as `[name, value]` pairs, or none when the task type is not targeted. */
export function envFor(ctx) {
  let config = {};
  if (!isBlank(ctx.config)) {
    try {
      config = parseJson(ctx.config);
    } catch (e) {
      throw new InvalidInput(`config is not JSON: ${e.message}`);
    }
  }
  const getString = (key, fallback) => {
    const v = member(config, key);
    if (v === undefined) return fallback;
    if (typeof v === "string") return v;
    throw new InvalidInput(`config ${debugString(key)} must be a string`);
  };
  const taskTypes = member(config, "taskTypes");
  let targeted;
  if (taskTypes === undefined) targeted = ctx.taskType === "learner";
  else if (Array.isArray(taskTypes)) targeted = taskTypes.some((t) => t === ctx.taskType);
  else throw new InvalidInput('config "taskTypes" must be a list');
  if (!targeted) return [];
  const rdmaValue = member(config, "rdma");
  let rdma = false;
  if (typeof rdmaValue === "boolean") rdma = rdmaValue;
  else if (rdmaValue !== undefined) throw new InvalidInput('config "rdma" must be a boolean');
  const env = [
    ["NCCL_SOCKET_IFNAME", getString("interface", "eth0")],
    ["NCCL_IB_DISABLE", rdma ? "0" : "1"],
    ["NCCL_DEBUG", getString("debug", "WARN")],
    ["NCCL_ASYNC_ERROR_HANDLING", "1"],
    ["CUDA_DEVICE_ORDER", "PCI_BUS_ID"],
    // The learner's place among the job's replicas, for frameworks that read torch-style env.
    ["LOCAL_RANK", "0"],
    ["LEARNER_RANK", String(ctx.taskRank)],
  ];
  const extra = member(config, "env");
  if (extra !== undefined) {
    if (extra === null || typeof extra !== "object" || Array.isArray(extra)) {
      throw new InvalidInput('config "env" must be an object');
    }
    // serde_json's map iterates in key (byte) order, not in document order.
    for (const k of Object.keys(extra).sort(compareStrings)) {
      if (k.startsWith("DI_")) throw new InvalidInput(`env ${k} belongs to the operator`);
      const v = extra[k];
      if (typeof v !== "string") throw new InvalidInput(`env ${k} must be a string`);
      env.push([k, v]);
    }
  }
  return env;
}

/** The mutation on a Pod, for tests and reuse. */
export function accelEnv(ctx, pod) {
  const env = envFor(ctx);
  if (env.length === 0) return;
  const target = pod.containerNames().includes("di-container") ? "di-container" : null;
  for (const [k, v] of env) pod.setEnv(target, k, v);
  log.debug("accelerator env set", { job: ctx.jobKey, task: ctx.taskName });
}

export const { mutate } = mutator(accelEnv);
