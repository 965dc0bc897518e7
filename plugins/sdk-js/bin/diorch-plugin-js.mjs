#!/usr/bin/env node
// Owns: the `diorch-plugin-js` command line (argument parsing and reporting); the work is in
// ../src/build.js.

import { build, findTools, toolVersions, WORLDS } from "../src/build.js";

const USAGE = `usage: diorch-plugin-js build --world policy|mutator ENTRY.js -o OUT.wasm [options]

Bundles ENTRY.js with @diorch/plugin-sdk and builds it into a diorch plugin component
(componentize-qjs ${"--sync --stub-wasi"}, against the SDK's copy of wit/plugins.wit).
ENTRY.js exports what policy() or mutator() returns:
  export const { allocate, optimize } = policy({ allocate(job, nodes) { ... } });
  export const { mutate } = mutator((ctx, pod) => { ... });

options:
  --opt-size      the smaller QuickJS runtime (~1.4 MB instead of ~1.9 MB, ~30% slower)
  --if-changed    skip componentize when OUT.wasm.inputs.sha256 matches the inputs
  --keep-bundle   also write the bundled JS as OUT.wasm.bundle.mjs
  --tools DIR     where componentize-qjs and rolldown are (DIR/node_modules/.bin);
                  default $DIORCH_JS_TOOLS, else node_modules next to the SDK or the cwd
  --quiet         print nothing on success

       diorch-plugin-js tools     print the tools found and their versions`;

function fail(message) {
  console.error(`diorch-plugin-js: ${message}`);
  process.exit(2);
}

function parse(args) {
  const o = { entry: null, output: null, world: null, optSize: false, ifChanged: false, keepBundle: false, tools: undefined, quiet: false };
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    const value = () => (i + 1 < args.length ? args[++i] : fail(`${a} needs a value`));
    if (a === "--world" || a === "-w") o.world = value();
    else if (a === "-o" || a === "--output") o.output = value();
    else if (a === "--opt-size") o.optSize = true;
    else if (a === "--if-changed") o.ifChanged = true;
    else if (a === "--keep-bundle") o.keepBundle = true;
    else if (a === "--tools") o.tools = value();
    else if (a === "--quiet" || a === "-q") o.quiet = true;
    else if (a.startsWith("-")) fail(`unknown option ${a}\n${USAGE}`);
    else if (o.entry === null) o.entry = a;
    else fail(`one entry file only (got ${o.entry} and ${a})`);
  }
  if (!o.world || !WORLDS[o.world]) fail(`--world policy or --world mutator is required\n${USAGE}`);
  if (!o.entry) fail(`the entry file is required\n${USAGE}`);
  if (!o.output) fail(`-o OUT.wasm is required\n${USAGE}`);
  return o;
}

const [command, ...rest] = process.argv.slice(2);
try {
  if (command === "build") {
    const o = parse(rest);
    const r = build(o);
    if (!o.quiet) {
      const what = r.skipped ? "unchanged, kept" : "built";
      console.log(`${what} ${r.output}: ${r.bytes} bytes in ${(r.ms / 1000).toFixed(2)} s`);
    }
  } else if (command === "tools") {
    const bin = findTools();
    console.log(`${bin}: ${toolVersions(bin).join(", ")}`);
  } else if (command === "-h" || command === "--help" || command === "help") {
    console.log(USAGE);
  } else {
    fail(`unknown command ${command ?? "(none)"}\n${USAGE}`);
  }
} catch (e) {
  console.error(`diorch-plugin-js: ${e.message}`);
  process.exit(1);
}
