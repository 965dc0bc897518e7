// Owns: turning an author's entry module into a diorch plugin component, in one step: bundle
// the entry with this SDK (rolldown; the WIT imports stay external), then componentize-qjs with
// the pinned flags against the SDK's copy of the WIT. Also the input hash that lets CI skip a
// component whose inputs did not change. Node.js only.

import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The SDK package's root directory. */
export const SDK_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const WIT_PATH = join(SDK_ROOT, "wit", "plugins.wit");

/**
 * Short world names to the WIT worlds, the exports each needs from the entry, and the exports the
 * SDK supplies itself (export name to `src/policy.js` export): contract 0.5.0's `preempt` is
 * always the SDK's no-preemption, so entries written before it build unchanged.
 */
export const WORLDS = {
  policy: { world: "scheduling-policy", exports: ["allocate", "optimize"], sdkExports: { preempt: "noPreempt" } },
  mutator: { world: "pod-mutator", exports: ["mutate"], sdkExports: {} },
};

/**
 * componentize-qjs flags, pinned: `--sync` because the host does not enable component-model
 * async; `--stub-wasi` because the host only links `diorch:plugins/*` (plus deny-all WASI), and
 * a plugin needs no WASI: stubbed, the component imports nothing else (a stub traps if called,
 * e.g. by Date.now()).
 */
export const PINNED_FLAGS = ["--sync", "--stub-wasi"];

/** The directory holding `componentize-qjs` and `rolldown`, or an error saying where it looked. */
export function findTools(explicit = process.env.DIORCH_JS_TOOLS) {
  const candidates = [];
  if (explicit) candidates.push(join(explicit, "node_modules", ".bin"));
  else {
    for (let dir of [SDK_ROOT, process.cwd()]) {
      for (;;) {
        candidates.push(join(dir, "node_modules", ".bin"));
        const up = dirname(dir);
        if (up === dir) break;
        dir = up;
      }
    }
    // Inside the diorch repository: the toolchain CI pins (plugins/sdk-js -> target/lang/js).
    candidates.push(resolve(SDK_ROOT, "..", "..", "target", "lang", "js", "node_modules", ".bin"));
  }
  for (const bin of candidates) {
    if (existsSync(join(bin, "componentize-qjs")) && existsSync(join(bin, "rolldown"))) return bin;
  }
  throw new Error(
    `componentize-qjs and rolldown not found (looked in ${candidates.join(", ")}); ` +
      "install them next to the SDK or set DIORCH_JS_TOOLS to the directory holding their node_modules",
  );
}

function packageVersion(bin, name) {
  try {
    const pkg = JSON.parse(readFileSync(join(bin, "..", name, "package.json"), "utf8"));
    return `${name}@${pkg.version}`;
  } catch {
    return `${name}@unknown`;
  }
}

/** The tool versions that go into a build (and into its input hash). */
export function toolVersions(bin) {
  return [packageVersion(bin, "componentize-qjs"), packageVersion(bin, "rolldown")];
}

function run(command, args, cwd) {
  const r = spawnSync(command, args, { cwd, encoding: "utf8" });
  if (r.error) throw new Error(`${command}: ${r.error.message}`);
  if (r.status !== 0) {
    throw new Error(`${command} ${args.join(" ")} failed:\n${r.stdout}${r.stderr}`.trimEnd());
  }
  return r;
}

/**
 * Bundles `entry` with the SDK into one ES module (text). The SDK is always this package's own
 * sources, whatever `node_modules` holds, so a component is built from the SDK that builds it.
 */
export function bundle({ entry, world, bin, dir }) {
  const { exports, sdkExports } = WORLDS[world];
  const fromSdk = Object.entries(sdkExports).map(([name, from]) => `${from} as ${name}`);
  const wrapper = join(dir, "entry.mjs");
  const out = join(dir, "bundle.mjs");
  writeFileSync(
    wrapper,
    // The environment first: its module runs before the author's, so even top-level code has it.
    `import ${JSON.stringify(join(SDK_ROOT, "src", "wasm-env.js"))};\n` +
      `export { ${exports.join(", ")} } from ${JSON.stringify(entry)};\n` +
      (fromSdk.length > 0
        ? `export { ${fromSdk.join(", ")} } from ${JSON.stringify(join(SDK_ROOT, "src", "policy.js"))};\n`
        : ""),
  );
  const config = join(dir, "rolldown.config.mjs");
  writeFileSync(
    config,
    `const sdk = ${JSON.stringify(join(SDK_ROOT, "src", "index.js"))};
export default {
  input: ${JSON.stringify(wrapper)},
  cwd: ${JSON.stringify(dirname(entry))},
  platform: "neutral",
  external: [/^diorch:plugins\\//],
  plugins: [{ name: "diorch-plugin-sdk", resolveId: (id) => (id === "@diorch/plugin-sdk" ? sdk : null) }],
  output: { file: ${JSON.stringify(out)}, format: "esm" },
};
`,
  );
  run(join(bin, "rolldown"), ["-c", config, "--logLevel", "warn"], dir);
  return readFileSync(out, "utf8");
}

/** The hash of everything a component is made of: bundle, WIT, tools, flags. */
export function inputHash({ code, world, flags, bin }) {
  const h = createHash("sha256");
  for (const part of [code, readFileSync(WIT_PATH, "utf8"), WORLDS[world].world, ...flags, ...toolVersions(bin)]) {
    h.update(part);
    h.update("\0");
  }
  return h.digest("hex");
}

/**
 * Builds `entry` (an ES module exporting what policy() or mutator() returns) into the component
 * `output`. Options: `world` ("policy" | "mutator"), `optSize` (the smaller, slower QuickJS
 * runtime), `ifChanged` (skip when `output`'s recorded input hash matches), `keepBundle` (also
 * write the bundle next to `output`), `tools` (a DIORCH_JS_TOOLS directory).
 * Returns `{output, bytes, ms, skipped, hash}`.
 */
export function build({ entry, output, world, optSize = false, ifChanged = false, keepBundle = false, tools }) {
  if (!WORLDS[world]) throw new Error(`unknown world ${JSON.stringify(world)}: use policy or mutator`);
  const started = process.hrtime.bigint();
  const bin = findTools(tools);
  const source = resolve(entry);
  if (!existsSync(source)) throw new Error(`${entry}: no such file`);
  const target = resolve(output);
  const flags = [...PINNED_FLAGS, ...(optSize ? ["--opt-size"] : [])];
  const dir = mkdtempSync(join(tmpdir(), "diorch-plugin-js-"));
  try {
    const code = bundle({ entry: source, world, bin, dir });
    if (keepBundle) writeFileSync(`${target}.bundle.mjs`, code);
    const hash = inputHash({ code, world, flags, bin });
    const stamp = `${target}.inputs.sha256`;
    if (ifChanged && existsSync(target) && existsSync(stamp) && readFileSync(stamp, "utf8").trim() === hash) {
      return { output: target, bytes: statSync(target).size, ms: elapsed(started), skipped: true, hash };
    }
    rmSync(stamp, { force: true });
    run(
      join(bin, "componentize-qjs"),
      ["--wit", WIT_PATH, "--world", WORLDS[world].world, "--js", join(dir, "bundle.mjs"), "-o", target, ...flags],
      dir,
    );
    writeFileSync(stamp, `${hash}\n`);
    return { output: target, bytes: statSync(target).size, ms: elapsed(started), skipped: false, hash };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function elapsed(started) {
  return Number(process.hrtime.bigint() - started) / 1e6;
}
