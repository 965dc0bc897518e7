// Owns: helpers for the reasons a policy gives with its answers (contract 0.4.0: `decision`,
// `job-decision`): counting an answer per node (`tally`, `perNode`), counting the replicas a
// re-plan moves (`movedReplicas`), and the re-plan text every example policy gives an
// `optimize` entry (`replanReason`; plugins/policies/src/explain.rs `replan` in Rust). The
// example policies' texts (plugins/examples-js/shared/reasons.js) are built on these, and the
// Rust and Python examples give the same strings byte for byte: change them together.

/**
 * An answer counted per node: `[[nodeIndex, count], ...]`, nodes in the order of their first
 * appearance in the answer.
 *
 *     tally([7, 4, 7, 7]) // [[7, 3], [4, 1]]
 *
 * @param {ArrayLike<number>} answer node indices, one per replica
 * @returns {Array<[number, number]>}
 */
export function tally(answer) {
  const counts = new Map();
  const order = [];
  for (let r = 0; r < answer.length; r++) {
    const i = answer[r];
    const n = counts.get(i);
    if (n === undefined) {
      counts.set(i, 1);
      order.push(i);
    } else {
      counts.set(i, n + 1);
    }
  }
  return order.map((i) => [i, counts.get(i)]);
}

/**
 * How many replicas a re-plan moves: the ranks `r < min(nodes.length, current.length)` whose
 * current node is known (not null) and differs from `nodes[r]`.
 *
 * @param {ArrayLike<number | null>} current the job's current placement (`job.current`)
 * @param {ArrayLike<number>} nodes the new placement
 */
export function movedReplicas(current, nodes) {
  const n = Math.min(nodes.length, current.length);
  let moved = 0;
  for (let r = 0; r < n; r++) {
    const at = current[r];
    if (at !== null && at !== undefined && at !== nodes[r]) moved++;
  }
  return moved;
}

/**
 * `name×count` for each node of `answer` (tally order), joined by ", ": `a×2, b×1`. A node
 * index outside `nodes` reads as `?`.
 *
 * @param {ArrayLike<{ name: string }>} nodes the call's nodes
 * @param {ArrayLike<number>} answer node indices, one per replica
 */
export function perNode(nodes, answer) {
  return tally(answer)
    .map(([i, count]) => `${nodeName(nodes, i)}×${count}`)
    .join(", ");
}

/** The name of node `i`, `?` when there is no such node. */
export function nodeName(nodes, i) {
  return i >= 0 && i < nodes.length ? nodes[i].name : "?";
}

/**
 * The reason of an `optimize` entry placing `job` on `answer`: null (no reason) when the entry
 * leaves the job as it is (no replica moves, as many replicas as now, every one of them placed)
 * or is empty; else `re-planned by ${by}: ${moved} of ${answer.length} replicas move; now
 * ${perNode(nodes, answer)}`.
 *
 *     replanReason("bin-pack", job, nodes, [0, 1]) // "re-planned by bin-pack: 1 of 2 replicas move; now a×1, b×1"
 *
 * @param {string} by the policy's name in the text, e.g. "bin-pack"
 * @param {{ current: ArrayLike<number | null> }} job the job (its current placement is read)
 * @param {ArrayLike<{ name: string }>} nodes the call's nodes
 * @param {ArrayLike<number>} answer the entry's node indices
 * @returns {string | null}
 */
export function replanReason(by, job, nodes, answer) {
  if (answer.length === 0) return null;
  const current = job.current;
  const moved = movedReplicas(current, answer);
  if (moved === 0 && answer.length === current.length) {
    let complete = true;
    for (let r = 0; r < current.length; r++) {
      if (current[r] === null || current[r] === undefined) {
        complete = false;
        break;
      }
    }
    if (complete) return null;
  }
  return `re-planned by ${by}: ${moved} of ${answer.length} replicas move; now ${perNode(nodes, answer)}`;
}
