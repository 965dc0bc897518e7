// Owns: parsing JSON text the way the Rust plugins' serde_json does, so a JS port accepts and
// refuses the same documents: JSON.parse, plus serde_json's extra refusals (nesting deeper than
// 127, a lone UTF-16 surrogate from a `\u` escape, a number beyond the f64 range). Error texts
// are JSON.parse's or serde_json's, without serde_json's "at line L column C".

const MAX_DEPTH = 127;
const OPENERS = /[[{]/g;
// Strings (skipped whole) and brackets: enough to measure nesting without parsing.
const TOKENS = /"(?:[^"\\]|\\[\s\S])*"|[[\]{}]/g;
// Cheap hints that the slower checks are needed at all.
const SURROGATE_ESCAPE = /\\u[dD][89abcdefABCDEF]/;
const BIG_NUMBER = /\d[eE]\+?\d{3}|\d{309}/;

/**
 * True when `text` nests arrays/objects deeper than serde_json's limit. Checked before
 * JSON.parse: besides matching serde_json, it keeps a hostile document from overflowing the
 * engine's stack (a trap, not an error).
 */
function tooDeep(text) {
  const openers = text.match(OPENERS);
  if (openers === null || openers.length <= MAX_DEPTH) return false;
  let depth = 0;
  for (const [token] of text.matchAll(TOKENS)) {
    if (token === "[" || token === "{") {
      if (++depth > MAX_DEPTH) return true;
    } else if (token === "]" || token === "}") depth--;
  }
  return false;
}

/** A string with an unpaired surrogate (only a `\u` escape can put one in parsed JSON). */
function lone(s) {
  for (let i = 0; i < s.length; i++) {
    const u = s.charCodeAt(i);
    if (u >= 0xd800 && u < 0xdc00) {
      const next = s.charCodeAt(i + 1);
      if (next >= 0xdc00 && next < 0xe000) i++;
      else return true;
    } else if (u >= 0xdc00 && u < 0xe000) return true;
  }
  return false;
}

/** serde_json's refusal of a parsed value (a non-finite number, a lone surrogate), or null. */
function refusal(root) {
  const stack = [root];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v === "number") {
      if (!Number.isFinite(v)) return "number out of range";
    } else if (typeof v === "string") {
      if (lone(v)) return "unexpected end of hex escape";
    } else if (Array.isArray(v)) {
      for (const x of v) stack.push(x);
    } else if (v !== null && typeof v === "object") {
      for (const k of Object.keys(v)) {
        if (lone(k)) return "unexpected end of hex escape";
        stack.push(v[k]);
      }
    }
  }
  return null;
}

/** Parses `text` as serde_json::from_str::<Value> would accept it; throws SyntaxError otherwise. */
export function parseJson(text) {
  const s = typeof text === "string" ? text : String(text);
  if (tooDeep(s)) throw new SyntaxError("recursion limit exceeded");
  const value = JSON.parse(s);
  if (SURROGATE_ESCAPE.test(s) || BIG_NUMBER.test(s)) {
    const why = refusal(value);
    if (why !== null) throw new SyntaxError(why);
  }
  return value;
}
