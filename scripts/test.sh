#!/usr/bin/env bash
# Runs every diorch test on a fresh machine: unit tests, CRD checks, and the integration tests
# that start the real `diorch` binary's sandbox and drive it with kube and kubectl.
# The real-cluster e2e suite runs too, and skips itself unless DIORCH_E2E_KUBECONFIG is set.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v kubectl >/dev/null 2>&1; then
    echo "error: the integration tests drive the sandbox with kubectl; install kubectl (1.28+) first" >&2
    exit 1
fi

if [ -z "${DIORCH_E2E_KUBECONFIG:-}" ]; then
    echo "note: the real-cluster e2e suite (tests/e2e.rs) will skip itself: set DIORCH_E2E_KUBECONFIG to a kubeconfig to run it"
fi

# The Wasm plugin tests need the example and hostile components: build them (this also installs
# the wasm32-wasip2 target), and run the plugin workspace's own native unit tests.
bash scripts/build-plugins.sh
(cd plugins && cargo test --locked --workspace)

cargo test --locked "$@"
