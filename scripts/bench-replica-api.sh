#!/usr/bin/env bash
# Replica API load bench: GET replicas of a 64-replica job, served by a release `diorch run`
# against the sandbox, driven by wrk from a second process on loopback.
# Installs wrk (Debian package) if missing. Env: DURATION (10s), CONNECTIONS (16), THREADS (1).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v wrk >/dev/null 2>&1; then
    echo "installing wrk (Debian package)"
    if [ "$(id -u)" -eq 0 ]; then apt-get install -y wrk >/dev/null; else sudo apt-get install -y wrk >/dev/null; fi
fi
cargo build --release --locked --bin diorch
bin=target/release/diorch
work=$(mktemp -d)
cleanup() { kill "${sandbox_pid:-}" "${operator_pid:-}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

"$bin" sandbox --nodes 8 --node-pods 200 --pod-start-delay 10ms --kubeconfig-out "$work/kubeconfig" >"$work/sandbox.log" 2>&1 &
sandbox_pid=$!
for _ in $(seq 100); do grep -q "sandbox ready" "$work/sandbox.log" && break; sleep 0.1; done
export KUBECONFIG="$work/kubeconfig"
kubectl apply -f crds/ >/dev/null
kubectl wait --for=condition=Established --timeout=60s crd/dijobs.diengine.opendilab.org >/dev/null
RUST_LOG=info "$bin" run --metric-addr 0 --probe-addr 0 --server-bind-address 127.0.0.1:18081 >"$work/operator.log" 2>&1 &
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
count=$(curl -s "$url" | grep -o ':22270' | wc -l)
echo "GET $url -> $count addresses"
[ "$count" -eq 64 ] || { echo "error: expected 64 replica addresses" >&2; exit 1; }
wrk -t "${THREADS:-1}" -c "${CONNECTIONS:-16}" -d "${DURATION:-10s}" --latency "$url"
