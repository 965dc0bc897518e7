#!/usr/bin/env bash
# Where the operator's CPU goes: runs the operator's path of the controller bench (PATHS=operator;
# N DIJobs x 4 pods, on a real API server when there is one) with the operator built with frame
# pointers under `perf record -g`, then sorts the samples' call stacks into owners
# (examples/bench_report/ `cpu`).
#
#   bash scripts/profile-operator.sh [csv]     env: N (default 1000), LABEL (default
#                                              "N = $N, real API server" or "..., sandbox"),
#                                              KEEP=dir to keep perf.data there,
#                                              PROFILE_TARGET_DIR (default target/profile)
#
# The real API server: BENCH_KUBECONFIG's if set, else one started from ../shared/kube (stopped
# on exit), else (or with BENCH_REAL=0) none and the profile is of the sandbox. Prints the owners; with a csv, appends
# them as `cpu-owner` rows (scripts/bench.sh does). Builds into target/profile (frame pointers
# and line tables would otherwise rebuild target/release), bench_report too (it reuses that
# build of the crate): the first run takes 10+ minutes on 2 cores. Needs perf (Debian: apt-get install linux-perf) allowed to record; without it, says so
# and exits 0.
set -euo pipefail
csv="${1:-}"
# The csv is the caller's path: absolute before leaving the caller's directory.
if [ -n "$csv" ]; then csv="$(realpath -m "$csv")"; fi
cd "$(dirname "$0")/.."

if ! command -v perf >/dev/null; then
    echo "cpu profile: skipped (perf is not installed; Debian: apt-get install linux-perf)"
    exit 0
fi
if ! perf record -o /dev/null -- true >/dev/null 2>&1; then
    echo "cpu profile: skipped (perf cannot record here; see /proc/sys/kernel/perf_event_paranoid)"
    exit 0
fi

N=${N:-1000}
kube=../shared/kube
out="$(mktemp -d)"
kube_started=0
cleanup() {
    if [ "$kube_started" = 1 ]; then
        bash "$kube/down.sh" "$out/kube" >/dev/null 2>&1 || true
    fi
    if [ -n "${KEEP:-}" ] && [ -f "$out/perf.data" ]; then
        mkdir -p "$KEEP" && cp "$out/perf.data" "$KEEP/" || true
    fi
    rm -rf "$out"
}
trap cleanup EXIT
# A signal ends the script through `exit`, so the EXIT trap stops the control plane too.
trap 'exit 130' INT
trap 'exit 143' TERM

kubeconfig="${BENCH_KUBECONFIG:-}"
if [ "${BENCH_REAL:-1}" = 0 ]; then
    kubeconfig=""
elif [ -z "$kubeconfig" ] && [ -f "$kube/up.sh" ]; then
    echo "cpu profile: starting a real control plane ($kube/up.sh)"
    kube_started=1
    kubeconfig=$(bash "$kube/up.sh" "$out/kube")
fi
if [ -n "$kubeconfig" ]; then
    sizes="" real_sizes="$N" server="real API server"
else
    sizes="$N" real_sizes="" server="sandbox"
fi
LABEL=${LABEL:-"N = $N, $server"}

# The operator alone (PATHS=operator), no writes or memory runs; no rows (its CPU under perf is
# not the operator's own). Frame pointers: perf's -g walks them (no DWARF unwinding needed).
echo "cpu profile: $LABEL, the operator under perf record (log: $out/bench.log)"
# The release profile as the bench's, so the sandbox (the bench builds it --release) and
# bench_report share the operator's build.
build=(CARGO_TARGET_DIR="${PROFILE_TARGET_DIR:-target/profile}"
    RUSTFLAGS="-C force-frame-pointers=yes" CARGO_PROFILE_BENCH_DEBUG=line-tables-only
    CARGO_PROFILE_RELEASE_DEBUG=line-tables-only)
env "${build[@]}" PATHS=operator SIZES="$sizes" REAL_SIZES="$real_sizes" WRITE_JOBS=0 MEMORY_JOBS=0 \
    REAL_MEMORY_JOBS=0 BENCH_CSV= BENCH_KUBECONFIG="$kubeconfig" \
    OPERATOR_WRAPPER="perf record -g -F 499 -o $out/perf.data --" \
    cargo bench --locked --bench controller_scale >"$out/bench.log" 2>&1 ||
    { tail -30 "$out/bench.log"; echo "cpu profile: the bench failed" >&2; exit 1; }
[ -s "$out/perf.data" ] || { echo "cpu profile: perf wrote no data" >&2; exit 1; }
perf script -i "$out/perf.data" >"$out/perf.txt" 2>"$out/perf-script.log" ||
    { tail -5 "$out/perf-script.log"; echo "cpu profile: perf script failed" >&2; exit 1; }
env "${build[@]}" cargo run --release --locked --quiet --example bench_report -- \
    cpu "$out/perf.txt" "$LABEL" ${csv:+"$csv"}
if [ -n "$csv" ]; then
    echo "meta,command,cpu-profile,bash scripts/profile-operator.sh" >>"$csv"
fi
