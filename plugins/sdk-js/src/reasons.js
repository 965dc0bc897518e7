// Owns: helpers for the reasons a policy gives with its answers (contract 0.4.0: `decision`,
// `job-decision`): counting an answer per node (`tally`), counting the replicas a re-plan moves
// (`movedReplicas`), and the re-plan text the example policies share (`replanReason`). The
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
 * The reason of an `optimize` entry: null (no reason) when the entry leaves the job as it is
 * (no replica moves, as many replicas as now, every one of them placed) or is empty; else
 * `re-planned by ${by}: ${moved} of ${nodes.length} replicas move; now ${parts.join(", ")}`.
 *
 * @param {string} by the policy's name in the text, e.g. "bin-pack"
 * @param {ArrayLike<number | null>} current the job's current placement (`job.current`)
 * @param {ArrayLike<number>} nodes the entry's placement
 * @param {(tallied: Array<[number, number]>) => string[]} parts the text of each node of the new
 *   placement, given `tally(nodes)`; called only when there is a reason
 * @returns {string | null}
 */
export function replanReason(by, current, nodes, parts) {
  if (nodes.length === 0) return null;
  const moved = movedReplicas(current, nodes);
  if (moved === 0 && nodes.length === current.length) {
    let complete = true;
    for (let r = 0; r < current.length; r++) {
      if (current[r] === null || current[r] === undefined) {
        complete = false;
        break;
      }
    }
    if (complete) return null;
  }
  return `re-planned by ${by}: ${moved} of ${nodes.length} replicas move; now ${parts(tally(nodes)).join(", ")}`;
}
