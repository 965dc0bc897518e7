#!/usr/bin/env bash
# Owns: building the JS example and test components (plugins/examples-js, plugins/testdata/
# hostile-js) into OUTDIR with the pinned toolchain, for CI and the host's tests. A component
# whose inputs are unchanged is kept: the SDK build tool bundles first (cheap) and skips
# componentize-qjs (the slow step) when the hash of bundle + WIT + tool versions + flags matches
# the one stored next to the component (OUT.wasm.inputs.sha256).
#
# usage: plugins/sdk-js/build-examples.sh OUTDIR
#   DIORCH_JS_TOOLS  directory whose node_modules/.bin has componentize-qjs and rolldown
#                    (default: target/lang/js of this repository)
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
plugins="$(dirname "$here")"
repo="$(dirname "$plugins")"
export DIORCH_JS_TOOLS="${DIORCH_JS_TOOLS:-$repo/target/lang/js}"
if [[ ! -x "$DIORCH_JS_TOOLS/node_modules/.bin/componentize-qjs" ]]; then
  echo "$0: no componentize-qjs in $DIORCH_JS_TOOLS/node_modules/.bin (set DIORCH_JS_TOOLS)" >&2
  exit 1
fi
out="$1"
mkdir -p "$out"

# name world entry
components=(
  "js_binpack policy $plugins/examples-js/binpack/index.js"
  "js_spread policy $plugins/examples-js/spread/index.js"
  "js_accel_env mutator $plugins/examples-js/accel-env/index.js"
  "js_hostile_policy policy $plugins/testdata/hostile-js/policy.js"
  "js_hostile_mutator mutator $plugins/testdata/hostile-js/mutator.js"
)
for c in "${components[@]}"; do
  read -r name world entry <<<"$c"
  node "$here/bin/diorch-plugin-js.mjs" build --if-changed --world "$world" "$entry" -o "$out/$name.wasm"
done
