#!/usr/bin/env bash
# Builds the plugin components (examples and the hostile test plugins) for wasm32-wasip2 in
# release and copies them to target/plugins/, where the host tests, the benchmark and the docs
# find them. Needs only the Rust toolchain: the wasm target is installed here if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if command -v rustup >/dev/null 2>&1; then
    rustup target add wasm32-wasip2 >/dev/null
fi

(cd plugins && cargo build --locked --release --target wasm32-wasip2 --workspace)

out=target/plugins
mkdir -p "$out"
for name in binpack spread goodput node_placement accel_env hostile_policy hostile_mutator flapping_policy legacy_policy legacy_mutator v03_policy v04_policy; do
    cp "${CARGO_TARGET_DIR:-plugins/target}/wasm32-wasip2/release/$name.wasm" "$out/$name.wasm"
done
ls -l "$out"/*.wasm | awk '{print "plugin " $NF " " $5 " bytes"}'
