// Owns: the bounds-checked readers of the WIT `cluster` columns (integer entries, `starts`
// runs, the UTF-8 string table) and the normalisation of the integers componentize-qjs hands
// over into plain, correct Numbers. Same semantics as plugins/sdk/src/view.rs: anything out of
// range reads as 0 or empty, nothing here throws.
//
// What componentize-qjs 0.4.5 does with integers (measured): u32 values of 2^31 and above
// arrive as negative Numbers (their int32 reading: 4294967295 as -1); u64 values arrive as
// Numbers, rounded, and some of those of 2^63 and above as negative ones (2^64-1 as -1); u8
// lists come as Uint8Array. Other builds may give BigInt or BigUint64Array. On the way out it
// saturates a u32 above 2^31-1 to 2147483647, but writes a negative Number's int32 bits.

/** The `placements` entry of a replica that is not placed (u32::MAX). */
export const NO_NODE = 4294967295;

/** What a u64 above 2^53-1 reads as: Numbers cannot hold it exactly. */
export const MAX_SAFE = Number.MAX_SAFE_INTEGER;

const TWO_32 = 4294967296;
const EMPTY = Object.freeze([]);

/** A WIT u32 (or u8) as received: its unsigned value; 0 for anything else. */
export function u32(v) {
  if (typeof v === "number") return v >= 0 ? v : v + TWO_32;
  if (typeof v === "bigint") return Number(BigInt.asUintN(32, v));
  return 0;
}

/**
 * A WIT u64 as received, clamped at MAX_SAFE, so that policies can do ordinary arithmetic and
 * comparisons on it: a value read negative was 2^63 or more.
 */
export function u64(v) {
  if (typeof v === "number") return v >= 0 && v <= MAX_SAFE ? v : MAX_SAFE;
  if (typeof v === "bigint") return v >= 0n && v <= BigInt(MAX_SAFE) ? Number(v) : MAX_SAFE;
  return 0;
}

/** An amount an author passes (e.g. to Resources.of): BigInt clamped like u64, else as is. */
export function toNumber(v) {
  if (typeof v === "number") return v;
  if (typeof v === "bigint") return u64(v);
  return 0;
}

/** A u32 for the WIT: values of 2^31 and above as their int32 reading (see the header). */
export function lowerU32(n) {
  return n | 0;
}

/** Entry `i` of a u32 or u8 column; 0 when out of range (Rust's `at`). */
export function at(column, i) {
  if (!(i < column.length)) return 0;
  const v = column[i];
  return typeof v === "number" && v >= 0 ? v : u32(v);
}

/** Entry `i` of a u64 column, clamped at MAX_SAFE; 0 when out of range. */
export function at64(column, i) {
  if (!(i < column.length)) return 0;
  const v = column[i];
  return typeof v === "number" && v >= 0 && v <= MAX_SAFE ? v : u64(v);
}

/** Entry `i` of an s32 column; 0 when out of range. */
export function atSigned(column, i) {
  if (!(i < column.length)) return 0;
  const v = column[i];
  return typeof v === "number" ? v : typeof v === "bigint" ? Number(BigInt.asIntN(32, v)) : 0;
}

/**
 * The entries of a table of `len` rows that row `i` owns by a `starts` column, as [start, end):
 * empty when out of range, clamped to the table, never decreasing (Rust's `run`).
 */
export function run(starts, i, len) {
  if (i + 1 >= starts.length) return [0, 0];
  const end = Math.min(at(starts, i + 1), len);
  return [Math.min(at(starts, i), end), end];
}

/** A column, or an empty one when the record lacks it (hand-built inputs in tests). */
export function col(c) {
  return c == null ? EMPTY : c;
}

/** A WIT list<u32> (Array or typed array) as a plain Array of Numbers. */
export function plainU32s(list) {
  const out = new Array(list == null ? 0 : list.length);
  for (let i = 0; i < out.length; i++) out[i] = u32(list[i]);
  return out;
}

// Non-ASCII characters: a surrogate pair (4 UTF-8 bytes), else one code unit (2 or 3 bytes).
const NON_ASCII = /[\ud800-\udbff][\udc00-\udfff]|[^\x00-\x7f]/g;

/**
 * The cluster's string table. Ends are offsets in UTF-8 bytes but the text arrives as a JS
 * (UTF-16) string, so a byte offset is turned into a code unit index, and a slice reads exactly
 * as Rust's `str::get(start..end)`: `""` off a character boundary, past the end or backwards.
 *
 * The text is scanned once, on the first read, for its non-ASCII characters (a native regex
 * search: a JS loop over 100 KB of names costs ~20 ms in QuickJS, the regex ~2 ms); offsets are
 * corrected by the bytes of the characters before them, found by binary search. ASCII text
 * (the usual: Kubernetes names and labels are ASCII) needs no correction at all.
 */
export class StringTable {
  #text;
  #ends;
  #cache;
  // Per non-ASCII character k, in order: its first byte, its byte length, and the extra bytes
  // (UTF-8 bytes minus UTF-16 units) of characters 0..k inclusive. null until scanned.
  #at = null;
  #length = null;
  #extra = null;
  #bytes = 0;

  constructor(text, ends) {
    this.#text = typeof text === "string" ? text : "";
    this.#ends = col(ends);
    this.#cache = new Array(this.#ends.length);
  }

  #scan() {
    const text = this.#text;
    const at = [];
    const length = [];
    const extra = [];
    let total = 0;
    NON_ASCII.lastIndex = 0;
    for (let m = NON_ASCII.exec(text); m !== null; m = NON_ASCII.exec(text)) {
      const units = m[0].length;
      const c = text.charCodeAt(m.index);
      const bytes = units === 2 ? 4 : c < 0x800 ? 2 : 3;
      at.push(m.index + total);
      length.push(bytes);
      total += bytes - units;
      extra.push(total);
    }
    this.#at = at;
    this.#length = length;
    this.#extra = extra;
    this.#bytes = text.length + total;
  }

  /** The code unit index of byte offset `b` (within the text), or -1 inside a character. */
  #unit(b) {
    const at = this.#at;
    let lo = 0;
    let hi = at.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (at[mid] <= b) lo = mid + 1;
      else hi = mid;
    }
    // Character lo - 1 is the last non-ASCII one starting at or before b.
    if (lo === 0) return b;
    const k = lo - 1;
    if (b === at[k]) return b - (k === 0 ? 0 : this.#extra[k - 1]);
    if (b < at[k] + this.#length[k]) return -1;
    return b - this.#extra[k];
  }

  /** String `id`; `""` for an id or offsets out of range (Rust's `text`). */
  get(id) {
    if (!(id < this.#ends.length)) return "";
    const cached = this.#cache[id];
    if (cached !== undefined) return cached;
    if (this.#at === null) this.#scan();
    const end = at(this.#ends, id);
    const start = id > 0 ? at(this.#ends, id - 1) : 0;
    let s = "";
    if (start <= end && end <= this.#bytes) {
      if (this.#at.length === 0) s = this.#text.slice(start, end);
      else {
        const a = this.#unit(start);
        const b = this.#unit(end);
        if (a >= 0 && b >= 0) s = this.#text.slice(a, b);
      }
    }
    this.#cache[id] = s;
    return s;
  }

  /** True when entry `i` of a column of string ids names `s` (without slicing it out). */
  is(column, i, s) {
    if (!(i < column.length)) return s === "";
    const id = at(column, i);
    if (!(id < this.#ends.length)) return s === "";
    if (this.#at === null) this.#scan();
    if (this.#at.length !== 0 || this.#cache[id] !== undefined) return this.get(id) === s;
    const end = at(this.#ends, id);
    const start = id > 0 ? at(this.#ends, id - 1) : 0;
    if (!(start <= end && end <= this.#bytes)) return s === "";
    return end - start === s.length && this.#text.startsWith(s, start);
  }

  /** The string that entry `i` of a column of string ids names; `""` when out of range. */
  at(column, i) {
    return i < column.length ? this.get(at(column, i)) : "";
  }
}
