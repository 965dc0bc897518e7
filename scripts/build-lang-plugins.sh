#!/usr/bin/env bash
# Builds the Python and JavaScript plugin components the tests and benchmarks use, with pinned
# toolchains installed under target/ (nothing outside the repository is touched):
# - target/lang/py: a venv with the Python SDK (plugins/sdk-python) and componentize-py 0.25.1;
# - target/lang/js: the npm tools of scripts/lang-tools (jco 1.35.0 with componentize-qjs 0.4.5,
#   componentize-js 0.23.0), installed from the lockfile.
# Components go to target/plugins/{py,js}_*.wasm. A component whose inputs (sources, SDK, WIT,
# tool versions) have not changed since its last build is not built again: CI builds on every
# run, and a Python component takes ~14 s.
#
# Without python3 or npm the language tests cannot run: this script then says so and writes
# target/lang/SKIPPED, which those tests read to report themselves skipped (never passed).
set -euo pipefail
cd "$(dirname "$0")/.."

out=target/plugins
lang=target/lang
mkdir -p "$out" "$lang"
rm -f "$lang/SKIPPED"

missing=()
command -v python3 >/dev/null 2>&1 || missing+=(python3)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "note: ${missing[*]} missing: the Python and JavaScript plugin tests are SKIPPED"
    echo "missing ${missing[*]}" >"$lang/SKIPPED"
    exit 0
fi

# --- toolchains ---------------------------------------------------------------------------
py="$lang/py"
sdk_py_hash=$(cat plugins/sdk-python/pyproject.toml $(find plugins/sdk-python/src -name '*.py' -o -name '*.wit' | sort) | sha256sum | cut -c1-16)
if [ ! -x "$py/bin/diorch-plugin" ] || [ "$(cat "$py/.sdk" 2>/dev/null)" != "$sdk_py_hash" ]; then
    echo "installing the Python plugin SDK and componentize-py into $py"
    [ -x "$py/bin/python" ] || python3 -m venv "$py"
    # The SDK is installed as a platform team would (pip, from the package folder), pulling the
    # pinned componentize-py as its dependency.
    "$py/bin/pip" install --quiet --disable-pip-version-check \
        --force-reinstall --no-deps ./plugins/sdk-python
    "$py/bin/pip" install --quiet --disable-pip-version-check componentize-py==0.25.1
    echo "$sdk_py_hash" >"$py/.sdk"
fi

js="$lang/js"
if ! cmp -s scripts/lang-tools/package-lock.json "$js/package-lock.json" || [ ! -x "$js/node_modules/.bin/componentize-qjs" ]; then
    echo "installing the JavaScript plugin toolchain into $js (npm ci, pinned by scripts/lang-tools)"
    mkdir -p "$js"
    cp scripts/lang-tools/package.json scripts/lang-tools/package-lock.json "$js/"
    (cd "$js" && npm ci --no-audit --no-fund --loglevel=error)
fi

# --- components ---------------------------------------------------------------------------
# build NAME WORLD ENTRY: the Python component NAME from ENTRY, unless its inputs are unchanged.
build_py() {
    local name=$1 world=$2 entry=$3
    local stamp
    stamp=$( (echo "$sdk_py_hash componentize-py-0.25.1 $world"; cat "$(dirname "$entry")"/*.py) | sha256sum | cut -c1-16)
    if [ -f "$out/$name.wasm" ] && [ "$(cat "$out/$name.inputs" 2>/dev/null)" = "$stamp" ]; then
        return
    fi
    "$py/bin/diorch-plugin" build --world "$world" "$entry" -o "$out/$name.wasm"
    echo "$stamp" >"$out/$name.inputs"
}

build_py py_binpack policy plugins/examples-python/binpack/app.py &
build_py py_spread policy plugins/examples-python/spread/app.py &
wait
build_py py_accel_env mutator plugins/examples-python/accel-env/app.py &
build_py py_hostile_policy policy plugins/testdata/hostile-python/policy.py &
wait
build_py py_hostile_mutator mutator plugins/testdata/hostile-python/mutator.py

DIORCH_JS_TOOLS="$PWD/$js" bash plugins/sdk-js/build-examples.sh "$out"
(cd plugins/sdk-js && node --test test/)
(cd plugins/sdk-python && "../../$py/bin/python" -m unittest discover -s tests -q)
