// Owns: checking the SDK's copy of the WIT contract is the repository's, byte for byte (the
// build compiles against the copy, the host against the original).

import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { test } from "node:test";

const COPY = new URL("../wit/plugins.wit", import.meta.url);
const ORIGINAL = new URL("../../../wit/plugins.wit", import.meta.url);

test("wit/plugins.wit is the repository's wit/plugins.wit", { skip: !existsSync(ORIGINAL) && "not in the diorch repository" }, () => {
  assert.ok(readFileSync(COPY).equals(readFileSync(ORIGINAL)), "copy wit/plugins.wit to plugins/sdk-js/wit/");
  assert.match(readFileSync(COPY, "utf8"), /^package diorch:plugins@0\.5\.0;$/m);
});
