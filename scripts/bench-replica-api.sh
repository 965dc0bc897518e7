#!/usr/bin/env bash
# Replica API load bench: GET replicas of a 64-replica job, served by a release `diorch run`
# against a release `diorch-sandbox serve`, driven by wrk from a second process on loopback.
#
# Env: CONNECTIONS ("8 16 32", space separated: one wrk run each), THREADS (1), DURATION (10s),
# BUILD (1; 0 = use target/release's binaries as they are),
# BENCH_CSV (a file to append `replica-api,<connections>,<req_per_s>,<p50_ms>,<p99_ms>` rows to;
# scripts/bench.sh collects them into docs/performance.md).
#
# Fairness: with 2 or more CPUs and `taskset` (util-linux) the operator is pinned to CPU 0 and
# wrk to CPU 1, so the load generator does not steal the server's core; otherwise both run
# unpinned (said so in the output). Installs wrk (Debian package) if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v wrk >/dev/null 2>&1; then
    echo "installing wrk (Debian package)"
    if [ "$(id -u)" -eq 0 ]; then apt-get install -y wrk >/dev/null; else sudo apt-get install -y wrk >/dev/null; fi
fi
# BUILD=0 uses the release binaries as they are (scripts/bench.sh: its benches built them from
# this tree just before; a separate `cargo build` would relink the operator without the benches'
# feature set, minutes on 2 cores).
if [ "${BUILD:-1}" != 0 ] || [ ! -x target/release/diorch ] || [ ! -x target/release/diorch-sandbox ]; then
    cargo build --release --locked --bin diorch
    cargo build --release --locked -p diorch-sandbox --bin diorch-sandbox
fi
bin=target/release/diorch
sandbox_bin=target/release/diorch-sandbox
connections=${CONNECTIONS:-8 16 32}
threads=${THREADS:-1}
duration=${DURATION:-10s}

if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null 2>&1; then
    pin_operator=(taskset -c 0)
    pin_wrk=(taskset -c 1)
    echo "pinning: operator on CPU 0, wrk on CPU 1 (taskset)"
else
    pin_operator=()
    pin_wrk=()
    echo "unpinned: operator and wrk share the CPUs ($(nproc) CPUs, taskset $(command -v taskset >/dev/null 2>&1 && echo found || echo missing))"
fi

work=$(mktemp -d)
cleanup() {
    for pid in "${operator_pid:-}" "${sandbox_pid:-}"; do
        [ -n "$pid" ] || continue
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

"$sandbox_bin" serve --nodes 8 --node-pods 200 --pod-start-delay 10ms \
    --kubeconfig-out "$work/kubeconfig" >"$work/sandbox.log" 2>&1 &
sandbox_pid=$!
ready=0
for _ in $(seq 600); do
    if grep -q '^sandbox ready: ' "$work/sandbox.log"; then ready=1; break; fi
    kill -0 "$sandbox_pid" 2>/dev/null || break
    sleep 0.1
done
if [ "$ready" != 1 ]; then
    echo "error: diorch-sandbox serve did not print its ready line; its log:" >&2
    tail -20 "$work/sandbox.log" >&2
    exit 1
fi
export KUBECONFIG="$work/kubeconfig"
kubectl apply -f crds/ >/dev/null
kubectl wait --for=condition=Established --timeout=60s crd/dijobs.diengine.opendilab.org >/dev/null
RUST_LOG=info "${pin_operator[@]}" "$bin" run --metric-addr 0 --probe-addr 0 \
    --server-bind-address 127.0.0.1:18081 >"$work/operator.log" 2>&1 &
operator_pid=$!
kubectl apply -f - >/dev/null <<'YAML'
apiVersion: diengine.opendilab.org/v2alpha1
kind: DIJob
metadata:
  name: big
  namespace: default
spec:
  tasks:
  - {name: learner, type: learner, replicas: 8, template: {spec: {containers: [{name: di-container, image: busybox}]}}}
  - {name: collector, type: collector, replicas: 56, template: {spec: {containers: [{name: di-container, image: busybox}]}}}
YAML
for _ in $(seq 300); do
    [ "$(kubectl get dijob big -o jsonpath='{.status.phase}')" = Running ] && break
    sleep 0.2
done
url=http://127.0.0.1:18081/v2alpha1/job/default.big/replicas
count=$(curl -s "$url" | grep -o ':22270' | wc -l || true)
echo "GET $url -> $count addresses"
if [ "$count" -ne 64 ]; then
    echo "error: expected 64 replica addresses; last lines of the operator's log:" >&2
    tail -20 "$work/operator.log" >&2
    exit 1
fi

# wrk's output -> "<req_per_s> <p50_ms> <p99_ms>" (latencies like 412.00us, 1.93ms, 1.20s).
parse_wrk() {
    awk '
        function ms(v) {
            if (v ~ /us$/) return v * 0.001
            if (v ~ /ms$/) return v + 0
            if (v ~ /s$/) return v * 1000
            if (v ~ /m$/) return v * 60000
            if (v ~ /h$/) return v * 3600000
            return v + 0
        }
        $1 == "50%" { p50 = ms($2) }
        $1 == "99%" { p99 = ms($2) }
        $1 == "Requests/sec:" { rps = $2 + 0 }
        END {
            if (rps == "" || p50 == "" || p99 == "") exit 1
            printf "%.0f %.3f %.3f\n", rps, p50, p99
        }
    ' "$1"
}

for c in $connections; do
    out="$work/wrk-$c.txt"
    "${pin_wrk[@]}" wrk -t "$threads" -c "$c" -d "$duration" --latency "$url" | tee "$out"
    if grep -qE 'Non-2xx|Socket errors' "$out"; then
        echo "warning: wrk saw errors with $c connections (above)" >&2
    fi
    if ! read -r rps p50 p99 < <(parse_wrk "$out"); then
        echo "error: cannot read requests/s and latency percentiles from wrk's output" >&2
        exit 1
    fi
    echo "replica API GET, 64 replicas, $c connections: $rps req/s, p50 $(printf %.2f "$p50") ms, p99 $(printf %.2f "$p99") ms"
    if [ -n "${BENCH_CSV:-}" ]; then
        echo "replica-api,$c,$rps,$p50,$p99" >>"$BENCH_CSV"
    fi
done
