// Owns: loading the example and test plugins (plugins/examples-js, plugins/testdata/hostile-js)
// in the tests: registers the resolve hook first, then imports them dynamically (a static
// import would be resolved before the hook exists).

import { register } from "node:module";
import { fileURLToPath } from "node:url";

register("./resolve-sdk.mjs", import.meta.url);

const PLUGINS = new URL("../../../", import.meta.url);

/** The module of a plugin, by its path under plugins/ (e.g. "examples-js/binpack/index.js"). */
export function load(path) {
  return import(new URL(path, PLUGINS).href);
}

export const SNAPSHOT = fileURLToPath(new URL("../../../../examples/snapshot.json", import.meta.url));
