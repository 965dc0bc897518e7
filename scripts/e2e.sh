#!/usr/bin/env bash
# Runs the real-cluster e2e suite (tests/e2e.rs), every scenario, one at a time.
#
# - With DIORCH_E2E_KUBECONFIG set: against that cluster, as it is (set DIORCH_E2E_GPU_NODES,
#   DIORCH_E2E_SANDBOX_NODES, DIORCH_E2E_LOCAL_WEBHOOKS for what it has, or pass
#   `--skip <test>`; see tests/e2e.rs).
# - Otherwise against the real control plane in ../shared/kube (or $DIORCH_SHARED/kube):
#   starts it in target/kube, registers 4 simulated nodes of 8 GPUs with
#   `diorch-sandbox serve --attach`, runs every scenario, then stops both.
# - Neither: prints that the e2e suite was skipped, and exits 0 (exit code 0, nothing "passed").
# Extra arguments go to the test binary (e.g. `--skip e2e_gpu_placement`).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
target_dir=${CARGO_TARGET_DIR:-$repo/target}

run_suite() {
    local start end status=0
    start=$(date +%s)
    cargo test --locked --test e2e -- --include-ignored --test-threads=1 "$@" 2>&1 |
        tee "$target_dir/e2e-output.txt" || status=$?
    end=$(date +%s)
    echo "== e2e scenarios run against $DIORCH_E2E_KUBECONFIG:"
    grep -E '^(test e2e_|e2e_(controller|sandbox_api): scenario .* passed)' "$target_dir/e2e-output.txt" || true
    echo "== e2e suite: exit status $status in $((end - start)) s"
    return "$status"
}

if [ -n "${DIORCH_E2E_KUBECONFIG:-}" ]; then
    run_suite "$@"
    exit
fi

shared=${DIORCH_SHARED:-$repo/../shared}
if [ ! -x "$shared/kube/up.sh" ]; then
    echo "note: the real-cluster e2e suite (tests/e2e.rs) was SKIPPED: no control plane at $shared/kube and DIORCH_E2E_KUBECONFIG is not set"
    exit 0
fi
shared=$(cd "$shared" && pwd)

kube_dir=$target_dir/kube
attach_pid=
cleanup() {
    if [ -n "$attach_pid" ] && kill -0 "$attach_pid" 2>/dev/null; then
        kill -TERM "$attach_pid" 2>/dev/null || true
        wait "$attach_pid" 2>/dev/null || true
    fi
    "$shared/kube/down.sh" "$kube_dir" >/dev/null 2>&1 || true
}
trap cleanup EXIT

# Builds the test and, with it, target/debug/diorch with the features `cargo test` unifies
# (`cargo build --bin diorch` would build the binary a second time, without dev-dependencies).
cargo test --locked --test e2e --no-run
# The nodes' player: the sandbox crate's binary (never part of the operator's).
cargo build --locked -p diorch-sandbox --bin diorch-sandbox
echo "== starting the control plane from $shared/kube in $kube_dir"
kubeconfig=$("$shared/kube/up.sh" "$kube_dir")

# The simulated nodes and their kubelet, beside the real kube-scheduler.
RUST_LOG=${RUST_LOG:-info} "$target_dir/debug/diorch-sandbox" serve --attach --kubeconfig "$kubeconfig" \
    --nodes 4 --node-gpus 8 >"$kube_dir/log/attach.out" 2>"$kube_dir/log/attach.log" &
attach_pid=$!
for _ in $(seq 1 600); do
    grep -q '^sandbox attached: ' "$kube_dir/log/attach.out" 2>/dev/null && break
    if ! kill -0 "$attach_pid" 2>/dev/null; then
        echo "error: diorch-sandbox serve --attach stopped; its log:" >&2
        tail -20 "$kube_dir/log/attach.log" >&2
        exit 1
    fi
    sleep 0.1
done
if ! grep -q '^sandbox attached: ' "$kube_dir/log/attach.out"; then
    echo "error: diorch-sandbox serve --attach did not register its nodes within 60 s" >&2
    exit 1
fi
cat "$kube_dir/log/attach.out"

export DIORCH_E2E_KUBECONFIG=$kubeconfig
export DIORCH_E2E_GPU_NODES=1 DIORCH_E2E_SANDBOX_NODES=1 DIORCH_E2E_LOCAL_WEBHOOKS=1
run_suite "$@"
