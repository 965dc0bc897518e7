// Owns: the public surface of @diorch/plugin-sdk (what `import ... from "@diorch/plugin-sdk"`
// gives a plugin author). Test-only helpers are in ./testing.js.

export { policy, keepCurrent } from "./policy.js";
export { mutator, taskContext } from "./mutator.js";
export { Node, Job, Task, Resources } from "./cluster.js";
export { NO_NODE, MAX_SAFE } from "./columns.js";
export { NoFit, InvalidInput } from "./errors.js";
export { Pod } from "./pod.js";
export { parseJson } from "./json.js";
export { log } from "./log.js";
export { tally, perNode, nodeName, movedReplicas, replanReason } from "./reasons.js";
