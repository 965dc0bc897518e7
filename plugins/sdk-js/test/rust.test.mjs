// Owns: tests of the Rust standard-library behaviours the example ports reproduce
// (plugins/examples-js/shared/rust.js).

import assert from "node:assert/strict";
import { test } from "node:test";

import { load } from "./helpers/examples.mjs";

const { compareStrings, debugPairs, debugString, isBlank, trim } = await load("examples-js/shared/rust.js");

test("strings order by code point, as Rust's str does", () => {
  const sorted = ["b", "a", "\uffff", "😀", "é", "A", "", "ab", "10", "9"].sort(compareStrings);
  assert.deepEqual(sorted, ["", "10", "9", "A", "a", "ab", "b", "é", "\uffff", "😀"]);
  assert.equal(compareStrings("x", "x"), 0);
});

test("Debug text of strings and extended-resource lists", () => {
  assert.equal(debugPairs([["rdma/hca", 1]]), '[("rdma/hca", 1)]');
  assert.equal(debugPairs([["a", 1], ["b", 2]]), '[("a", 1), ("b", 2)]');
  assert.equal(debugString('a"b\\c\td\ne\r\0'), '"a\\"b\\\\c\\td\\ne\\r\\0"');
  assert.equal(debugString("it's é 😀"), '"it\'s é 😀"');
  assert.equal(debugString("\u0301x\u200b\u0007\u00a0 "), '"\\u{301}x\\u{200b}\\u{7}\\u{a0} "');
});

test("trim and blank use Unicode White_Space", () => {
  assert.ok(isBlank(""));
  assert.ok(isBlank(" \t\n\u0085\u3000"));
  assert.ok(!isBlank("\ufeff"), "U+FEFF is not white space in Rust");
  assert.equal(trim("\u0085 a b \u2029"), "a b");
  assert.equal(trim("\ufeffa"), "\ufeffa");
});
