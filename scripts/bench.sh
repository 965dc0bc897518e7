#!/usr/bin/env bash
# Runs every benchmark and regenerates docs/performance.md (with docs/ratio.svg, the raw rows in
# docs/performance.csv and the benches' output in docs/performance.log). 19.7 minutes on 2 cores
# at its last timed run, with both servers and first-time compiles not counted; run it on an
# otherwise idle machine.
#
# The benches append CSV rows to $BENCH_CSV (controller_scale, placement, bench-replica-api.sh);
# plugin_calls and hot_swap print only, and their output is turned into rows here.
# examples/bench_report/ turns the rows into the report.
#
# With ../shared/kube (a real control plane; else the server of BENCH_KUBECONFIG, if set) the
# controller and placement benches also run against a real API server; BENCH_REAL=0 skips that.
#
# After the controller bench, scripts/profile-operator.sh profiles the operator under perf on the
# same real API server (else the sandbox) into `cpu-owner` rows: where its CPU goes. It skips
# itself without perf; its first run builds target/profile (10+ minutes on 2 cores, not in the
# time above).
#
# Env (defaults): CONTROLLER_SIZES (100,300,1000; on the real server REAL_CONTROLLER_SIZES,
# 1000), MEMORY_JOBS (5000; on the real server REAL_MEMORY_JOBS, 1000), WRITE_JOBS (100),
# PLACEMENT_SIZES (1000; on the real server REAL_PLACEMENT_SIZES, 300), ROUNDS (2, the placement bench's), BENCH_REAL (1); the benches' own variables (CONCURRENCY, MEDIAN_OF,
# NODES, SWAPS, CONNECTIONS, DURATION, THREADS, ...) pass through.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)

CONTROLLER_SIZES=${CONTROLLER_SIZES:-100,300,1000}
REAL_CONTROLLER_SIZES=${REAL_CONTROLLER_SIZES:-1000}
MEMORY_JOBS=${MEMORY_JOBS:-5000}
REAL_MEMORY_JOBS=${REAL_MEMORY_JOBS:-1000}
WRITE_JOBS=${WRITE_JOBS:-100}
PLACEMENT_SIZES=${PLACEMENT_SIZES:-1000}
REAL_PLACEMENT_SIZES=${REAL_PLACEMENT_SIZES:-300}
ROUNDS=${ROUNDS:-2}
BENCH_REAL=${BENCH_REAL:-1}
kube=../shared/kube

bash scripts/build-plugins.sh

work=$(mktemp -d)
csv="$work/bench.csv"
combined="$work/combined.log"
: >"$csv"
: >"$combined"
real_started=0
cleanup() {
    local rc=$?
    if [ "$real_started" = 1 ]; then
        bash "$kube/down.sh" "$work/kube" >/dev/null 2>&1 || true
    fi
    if [ "$rc" -eq 0 ]; then
        rm -rf "$work"
    else
        echo "bench.sh failed (exit $rc); rows and logs kept in $work" >&2
    fi
}
trap cleanup EXIT
# A signal ends the script through `exit`, so the EXIT trap stops the control plane too.
trap 'exit 130' INT
trap 'exit 143' TERM

# Meta rows: the machine, the commit, the date and each bench's command.
commit=$(git rev-parse --short HEAD)
[ -z "$(git status --porcelain)" ] || commit="$commit-dirty"
cpu_model=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)
memory_gib=$(free -g | awk '/^Mem:/ {print $2}')
{
    echo "meta,machine,$(nproc) cores, ${memory_gib} GiB memory, ${cpu_model:-unknown CPU}"
    echo "meta,commit,$commit"
    echo "meta,date,$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "meta,command,controller,SIZES=$CONTROLLER_SIZES REAL_SIZES=$REAL_CONTROLLER_SIZES MEMORY_JOBS=$MEMORY_JOBS REAL_MEMORY_JOBS=$REAL_MEMORY_JOBS WRITE_JOBS=$WRITE_JOBS cargo bench --locked --bench controller_scale"
    echo "meta,command,placement,SIZES=$PLACEMENT_SIZES REAL_SIZES=$REAL_PLACEMENT_SIZES ROUNDS=$ROUNDS SHADOW=1 cargo bench --locked --bench placement"
    echo "meta,command,shadow-cost,cargo bench --locked --bench shadow_cost"
    echo "meta,command,plugin-calls,cargo bench --locked --bench plugin_calls"
    echo "meta,command,hot-swap,cargo bench --locked --bench hot_swap"
    echo "meta,command,replica-api,bash scripts/bench-replica-api.sh"
} >>"$csv"
export BENCH_CSV="$csv"

if [ "$BENCH_REAL" = 0 ]; then
    unset BENCH_KUBECONFIG
    echo "real API server: skipped (BENCH_REAL=0)"
    echo "meta,servers,sandbox only" >>"$csv"
elif [ -f "$kube/up.sh" ]; then
    echo "starting a real control plane ($kube/up.sh)"
    real_started=1
    KC=$(bash "$kube/up.sh" "$work/kube")
    export BENCH_KUBECONFIG="$KC"
    # Each run on the real server gets a control plane of its own (benches/common
    # `fresh_control_plane`): one shared by every run slowed down run after run.
    export BENCH_KUBE_UP="$kube/up.sh"
    echo "meta,servers,sandbox and a real API server ($kube; a fresh control plane for each run)" >>"$csv"
elif [ -n "${BENCH_KUBECONFIG:-}" ]; then
    echo "real API server: the one of BENCH_KUBECONFIG ($BENCH_KUBECONFIG)"
    echo "meta,servers,sandbox and a real API server (BENCH_KUBECONFIG)" >>"$csv"
else
    echo "real API server: skipped ($kube/up.sh not found, BENCH_KUBECONFIG not set)"
    echo "meta,servers,sandbox only" >>"$csv"
fi

# run NAME COMMAND...: runs a bench, its stdout into $work/NAME.log and the combined log.
run() {
    local name=$1
    shift
    local t0
    t0=$(date +%s)
    echo "== $name: $*" | tee -a "$combined"
    "$@" | tee "$work/$name.log"
    cat "$work/$name.log" >>"$combined"
    echo "== $name: $(($(date +%s) - t0)) s" | tee -a "$combined"
}

run controller env SIZES="$CONTROLLER_SIZES" REAL_SIZES="$REAL_CONTROLLER_SIZES" \
    MEMORY_JOBS="$MEMORY_JOBS" REAL_MEMORY_JOBS="$REAL_MEMORY_JOBS" WRITE_JOBS="$WRITE_JOBS" \
    cargo bench --locked --bench controller_scale
# The operator under perf on the same server (BENCH_KUBECONFIG, exported above when there is
# one); BENCH_REAL=0 keeps it on the sandbox. Without perf it says so and adds no rows.
run cpu_profile env BENCH_REAL="$BENCH_REAL" bash scripts/profile-operator.sh "$csv"
# On the real server a placement run is the operator's client throttle (--qps 100) times its
# writes for either policy (1.003 at N = 1000, 78 s a run, four runs): N = 300 says the same.
# SHADOW=1: then Wasm bin-pack alone against it with a shadow policy attached (sandbox only).
run placement env SIZES="$PLACEMENT_SIZES" REAL_SIZES="$REAL_PLACEMENT_SIZES" ROUNDS="$ROUNDS" SHADOW=1 \
    cargo bench --locked --bench placement
# The rest use no real server: stop it, so its background work (garbage collection of the
# benches' namespaces) does not share the cores with them (the replica API's p99 doubled).
if [ "$real_started" = 1 ]; then
    bash "$kube/down.sh" "$work/kube" >/dev/null 2>&1 || true
    real_started=0
fi
unset BENCH_KUBECONFIG BENCH_KUBE_UP
run plugin_calls cargo bench --locked --bench plugin_calls
run hot_swap cargo bench --locked --bench hot_swap
run shadow_cost cargo bench --locked --bench shadow_cost
# The benches above built target/release's operator and sandbox from this tree.
run replica_api env BUILD=0 bash scripts/bench-replica-api.sh
# Last: it builds the operator on another allocator, which the benches above must not wait for.
run heap_owners env MEMORY_JOBS="$MEMORY_JOBS" bash scripts/heap-owners.sh "$csv"

# plugin_calls is a criterion bench: "<id>   time:   [<low> <unit> <estimate> <unit> <high> <unit>]",
# the id on the line before when it is long. One row per id: the estimate in microseconds.
sed 's/\x1b\[[0-9;]*m//g' "$work/plugin_calls.log" | awk '
    /^Benchmarking / { next }
    /time:[ \t]*\[/ {
        i = index($0, "time:")
        id = substr($0, 1, i - 1)
        gsub(/^[ \t]+|[ \t]+$/, "", id)
        if (id == "") id = last
        rest = substr($0, i + 5)
        gsub(/[][]/, " ", rest)
        n = split(rest, f, " ")
        if (n < 6 || id == "") next
        v = f[3]; u = f[4]
        if (u == "ps") us = v / 1e6
        else if (u == "ns") us = v / 1e3
        else if (u == "ms") us = v * 1e3
        else if (u == "s") us = v * 1e6
        else us = v + 0   # µs
        printf "plugin-calls,%s,%.3f\n", id, us
        next
    }
    /^[^ \t]/ && !/^(Found |Warning|Gnuplot|Running |==)/ { last = $0; sub(/[ \t]+$/, "", last) }
' >"$work/plugin_calls.csv"
if [ -s "$work/plugin_calls.csv" ]; then
    cat "$work/plugin_calls.csv" >>"$csv"
else
    echo "warning: no criterion results found in plugin_calls's output; no plugin-calls rows" >&2
fi

# hot_swap: "  <what>   n =   2, min   12.34 ms, median   15.00 ms, max   18.00 ms".
sed -nE 's/^ +(.*[^ ]) +n = +([0-9]+), min +([0-9.]+) ms, median +([0-9.]+) ms, max +([0-9.]+) ms.*/\1|\2|\4|\5/p' \
    "$work/hot_swap.log" | while IFS='|' read -r what n median max; do
    echo "hot-swap,$what median (n = $n),$median"
    echo "hot-swap,$what max (n = $n),$max"
done >"$work/hot_swap.csv"
if [ -s "$work/hot_swap.csv" ]; then
    cat "$work/hot_swap.csv" >>"$csv"
else
    echo "warning: no results found in hot_swap's output; no hot-swap rows" >&2
fi

cargo run --release --locked --example bench_report -- "$csv" docs
cp "$csv" docs/performance.csv
cp "$combined" docs/performance.log
elapsed=$(($(date +%s) - started))
echo "bench.sh: done in $((elapsed / 60)) min $((elapsed % 60)) s; see docs/performance.md"
