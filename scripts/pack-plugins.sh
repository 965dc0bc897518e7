#!/usr/bin/env bash
# Packs the example plugins as ConfigMaps for the operator's namespace, one `diorch plugin
# configmap` per plugin plus a kustomization, so `kubectl apply -k deploy/plugins` installs them.
#   bash scripts/pack-plugins.sh [NAMESPACE (diorch-system)] [OUT_DIR (deploy/plugins)]
# It builds the plugins and the binary first, unless DIORCH names a built `diorch` binary and
# target/plugins holds the plugins already (tests/operator/deploy.rs runs it that way).
# deploy/plugins/ is generated, not checked in.
set -euo pipefail
cd "$(dirname "$0")/.."

namespace="${1:-diorch-system}"
out="${2:-deploy/plugins}"
diorch="${DIORCH:-}"
if [ -z "$diorch" ]; then
    bash scripts/build-plugins.sh >/dev/null
    cargo build --quiet --locked --bin diorch
    diorch="${CARGO_TARGET_DIR:-target}/debug/diorch"
fi

mkdir -p "$out"
rm -f "$out"/*.yaml
pack() { # file name kind [extra flags...]
    local file=$1 name=$2 kind=$3
    shift 3
    "$diorch" plugin configmap "target/plugins/$file.wasm" --name "$name" --kind "$kind" \
        --namespace "$namespace" "$@" >"$out/$name.yaml"
    echo "- $name.yaml" >>"$out/kustomization.yaml"
}
printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n' >"$out/kustomization.yaml"
pack binpack binpack policy
pack spread spread policy
pack goodput goodput policy
# Mutators whose config the cluster owner writes: installed inert (a config that changes
# nothing but passes the operator's load-time smoke call; an empty one would be Rejected),
# Ignore on failure. Edit data.config to put them to work.
pack node_placement node-placement mutator --config '{}' --failure-policy Ignore
pack accel_env accel-env mutator --task-types learner --config '{"taskTypes":[]}' --failure-policy Ignore
# The same check the operator makes before loading a mutator.
"$diorch" plugin check target/plugins/node_placement.wasm --config '{}' >/dev/null
"$diorch" plugin check target/plugins/accel_env.wasm --config '{"taskTypes":[]}' >/dev/null
echo "wrote $(ls "$out"/*.yaml | wc -l) files to $out: kubectl apply -k $out"
