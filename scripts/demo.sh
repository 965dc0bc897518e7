#!/usr/bin/env bash
# Builds diorch and runs its demo: a sandbox Kubernetes API with simulated nodes, the DIJob CRD,
# the operator (`diorch run`) and a DI-orchestrator sample job. The demo is the sandbox crate's
# binary (`diorch-sandbox demo`), which runs the operator binary built beside it. Pass
# `--cluster` to run the operator against the cluster of the current kubeconfig context instead.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--cluster" ]; then
    shift
    exec cargo run --locked --quiet -- run "$@"
fi
cargo build --locked --quiet --bin diorch
exec cargo run --locked --quiet -p diorch-sandbox --bin diorch-sandbox -- demo "$@"
