#!/usr/bin/env bash
# Runs `.ci/run` on a clean clone of HEAD, RUNS times in a row (default 3), each with a CPU hog
# (`yes > /dev/null` on every core) running beside it: the check that no test's timing assumes a
# quiet machine. Stops at the first failing run. Prints each run's exit status and duration.
#
#   scripts/ci-under-load.sh [RUNS]
#
# The clone sits beside this repository (so `../shared` is the same as here), at
# ../diorch-ci-under-load. When that clone is already there, it is moved to HEAD and its target
# directory reused (what these runs check is the tests under load, not the build); otherwise the
# first run builds from scratch as CI does. DIORCH_LOAD_FRESH=1 builds every run from scratch.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
runs=${1:-3}
clone=$(dirname "$repo")/diorch-ci-under-load
rev=$(git rev-parse HEAD)
cores=$(nproc)

hogs=()
stop_hogs() {
    for pid in "${hogs[@]}"; do kill "$pid" 2>/dev/null || true; done
    hogs=()
}
trap stop_hogs EXIT

for run in $(seq 1 "$runs"); do
    if [ ! -d "$clone/.git" ] || [ -n "${DIORCH_LOAD_FRESH:-}" ]; then
        rm -rf "$clone"
        git clone --quiet "$repo" "$clone"
    fi
    git -C "$clone" fetch --quiet "$repo" HEAD
    git -C "$clone" checkout --quiet --detach "$rev"
    for _ in $(seq 1 "$cores"); do
        yes >/dev/null &
        hogs+=("$!")
    done
    start=$(date +%s)
    status=0
    (cd "$clone" && bash .ci/run) >"$clone.run$run.log" 2>&1 || status=$?
    stop_hogs
    echo "run $run of $runs at $rev with $cores CPU hogs: exit status $status in $(($(date +%s) - start)) s (log: $clone.run$run.log)"
    grep -E '^test result:|^== e2e' "$clone.run$run.log" | tail -25 || true
    [ "$status" = 0 ] || exit "$status"
done
