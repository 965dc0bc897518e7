// Owns: the few Rust standard-library behaviours the ports must reproduce to give the very same
// answers as the Rust plugins: `str` ordering (UTF-8 byte order, i.e. code point order, where JS
// compares UTF-16 code units), `str::trim` (Unicode White_Space, which is not JS's trim set) and
// the `{:?}` (Debug) text of strings and of `Vec<(String, u64)>`.

/**
 * Rust's `str::cmp`: by code point. UTF-16 order agrees except that a surrogate (a code point
 * above U+FFFF) sorts below U+E000..U+FFFF; lifting surrogates above that range fixes it.
 */
export function compareStrings(a, b) {
  if (a === b) return 0;
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x !== y) {
      if (x >= 0xd800) x = x >= 0xe000 ? x - 0x800 : x + 0x2000;
      if (y >= 0xd800) y = y >= 0xe000 ? y - 0x800 : y + 0x2000;
      return x < y ? -1 : 1;
    }
  }
  return a.length < b.length ? -1 : a.length > b.length ? 1 : 0;
}

// Rust's `char::is_whitespace` (the Unicode White_Space property). JS's trim also strips U+FEFF
// and keeps U+0085, so it cannot stand in for Rust's.
const RUST_BLANK = /^[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$/;
const RUST_TRIM = /^[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+|[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$/g;

/** `s.trim().is_empty()` in Rust. */
export function isBlank(s) {
  return RUST_BLANK.test(s);
}

/** `s.trim()` in Rust. */
export function trim(s) {
  return s.replace(RUST_TRIM, "");
}

// What `impl Debug for str` escapes as `\u{..}`: grapheme extenders, and what Rust's
// `is_printable` rejects (general categories Cc Cf Cs Co Cn Zl Zp Zs, except the space).
const UNICODE_ESCAPE = /[\p{Grapheme_Extend}\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]/u;
const SHORT_ESCAPES = { "\0": "\\0", "\t": "\\t", "\r": "\\r", "\n": "\\n", "\\": "\\\\", '"': '\\"' };

/** `format!("{:?}", s)` for a string: quoted, escaped as Rust does. */
export function debugString(s) {
  let out = '"';
  for (const ch of s) {
    const short = SHORT_ESCAPES[ch];
    if (short !== undefined) out += short;
    else if (ch !== " " && UNICODE_ESCAPE.test(ch)) out += `\\u{${ch.codePointAt(0).toString(16)}}`;
    else out += ch;
  }
  return out + '"';
}

/** `format!("{:?}", pairs)` for a `Vec<(String, u64)>`: `[("rdma/hca", 1)]`. */
export function debugPairs(pairs) {
  return `[${pairs.map(([name, q]) => `(${debugString(name)}, ${q})`).join(", ")}]`;
}
