#!/usr/bin/env bash
# The operator's heap at its peak, by owner: runs the memory part of the controller bench
# (sandbox; 5 000 preemptible DIJobs x 4 pods, a policy and a mutator loaded) with the operator
# built on glibc malloc (feature `system-allocator`; heaptrack does not see mimalloc) under
# heaptrack, then sorts the peak's call stacks into owners (examples/bench_report/ `heap`).
#
#   bash scripts/heap-owners.sh [csv]     env: MEMORY_JOBS (default 5000)
#
# Prints the owners; with a csv, appends them as `heap-owner` rows (scripts/bench.sh does).
# Needs heaptrack (Debian: apt-get install heaptrack); without it, says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."

csv="${1:-}"
if ! command -v heaptrack >/dev/null || ! command -v heaptrack_print >/dev/null; then
    echo "heap owners: skipped (heaptrack is not installed; Debian: apt-get install heaptrack)"
    exit 0
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

# The RSS this run prints is heaptrack's wrapper's, so its row is not recorded (no BENCH_CSV).
SIZES= WRITE_JOBS=0 MEMORY_JOBS="${MEMORY_JOBS:-5000}" BENCH_KUBECONFIG= BENCH_CSV= \
    OPERATOR_WRAPPER="heaptrack -o $out/operator" \
    cargo bench --locked --features system-allocator --bench controller_scale >"$out/bench.log" 2>&1 ||
    { tail -30 "$out/bench.log"; echo "heap owners: the bench failed" >&2; exit 1; }
# heaptrack names its file operator.<pid>.zst (or .gz, by build).
data=""
for f in "$out"/operator*.zst "$out"/operator*.gz; do
    if [ -f "$f" ]; then data="$f"; break; fi
done
[ -n "$data" ] || { echo "heap owners: heaptrack wrote no data" >&2; exit 1; }
heaptrack_print -f "$data" --print-peaks 0 --print-allocators 0 --print-temporary 0 \
    --print-leaks 0 -F "$out/stacks.txt" --flamegraph-cost-type peak 2>/dev/null |
    grep -E "peak heap memory consumption" || true
cargo run --release --locked --quiet --example bench_report -- heap "$out/stacks.txt" ${csv:+"$csv"}
if [ -n "$csv" ]; then
    echo "meta,command,heap-owners,bash scripts/heap-owners.sh" >>"$csv"
fi
