#!/usr/bin/env bash
# Builds diorch and runs its demo: a sandbox Kubernetes API with simulated nodes, the DIJob CRD
# and a DI-orchestrator sample job. Pass `--cluster` to run the operator against the cluster of
# the current kubeconfig context instead.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--cluster" ]; then
    shift
    exec cargo run --locked --quiet -- run "$@"
fi
exec cargo run --locked --quiet -- demo "$@"
