#!/usr/bin/env bash
# Runs every diorch test on a fresh machine: unit tests, CRD checks, and the integration tests
# that start the real `diorch` binary's sandbox and drive it with kube and kubectl.
# Then the real-cluster e2e suite (scripts/e2e.sh): against DIORCH_E2E_KUBECONFIG when set, else
# against the control plane in ../shared/kube when it is there; otherwise it says it was skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v kubectl >/dev/null 2>&1; then
    echo "error: the integration tests drive the sandbox with kubectl; install kubectl (1.28+) first" >&2
    exit 1
fi

# tests/operator/deploy.rs validates the install manifests offline against the Kubernetes schemas
# with the kubernetes-validate package: install it into target/ (quick when it is already there).
# Only a machine without Python skips that check; a failed install fails the run.
if command -v python3 >/dev/null 2>&1; then
    venv=target/validate-venv
    if [ ! -x "$venv/bin/kubernetes-validate" ]; then
        rm -rf "$venv"
        if ! { python3 -m venv "$venv" &&
            "$venv/bin/pip" install --quiet --disable-pip-version-check kubernetes-validate==1.33.1; }; then
            echo "error: could not install kubernetes-validate into $venv (python3 -m venv, then pip from PyPI)" >&2
            exit 1
        fi
    fi
else
    echo "note: python3 is missing: tests/operator/deploy.rs will skip the offline schema validation of deploy/"
fi

# tests/plugins/oci_registry.rs pulls plugins from a real OCI registry: Debian's docker-registry
# (the CNCF distribution registry), started by the tests on 127.0.0.1. Installed here when missing
# and apt-get can (as root); elsewhere those tests say they were skipped.
if ! command -v docker-registry >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing docker-registry for the OCI registry tests (apt-get)"
        if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker-registry >/dev/null ||
            { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker-registry >/dev/null; }; }; then
            echo "error: could not install docker-registry with apt-get" >&2
            exit 1
        fi
    else
        echo "note: docker-registry is missing and cannot be installed here: the OCI registry tests are SKIPPED"
        export DIORCH_SKIP_REGISTRY_TESTS=1
    fi
fi

# tests/plugins/oci_registry.rs checks interop with ORAS through its Python SDK (`oras` on PyPI), in
# a venv under target/ (quick when it is already there); without Python those tests are skipped.
if command -v python3 >/dev/null 2>&1; then
    oras_venv=target/oras-venv
    if [ ! -x "$oras_venv/bin/python" ] || ! "$oras_venv/bin/python" -c 'import oras.client' 2>/dev/null; then
        rm -rf "$oras_venv"
        if ! { python3 -m venv "$oras_venv" &&
            "$oras_venv/bin/pip" install --quiet --disable-pip-version-check oras==0.2.43; }; then
            echo "error: could not install the oras Python SDK into $oras_venv (python3 -m venv, then pip from PyPI)" >&2
            exit 1
        fi
    fi
else
    echo "note: python3 is missing: the ORAS interop test is SKIPPED"
    export DIORCH_SKIP_ORAS_TESTS=1
fi

# The Wasm plugin tests need the example and hostile components: build them (this also installs
# the wasm32-wasip2 target), and run the plugin workspace's own native unit tests.
bash scripts/build-plugins.sh
(cd plugins && cargo test --locked --workspace)

# The Python and JavaScript SDKs (plugins/sdk-python, plugins/sdk-js): their pinned toolchains
# go under target/lang (a venv, and npm ci from scripts/lang-tools), their own tests run, and
# the examples and hostile twins are built into target/plugins (skipped when unchanged). The
# language tests (tests/plugins/plugin_languages.rs) compare them with the Rust guests.
bash scripts/build-lang-plugins.sh

# tests/e2e.rs is #[ignore]d here (reported as ignored): scripts/e2e.sh runs it below.
cargo test --locked --workspace "$@"

# The simulator's HTML report is checked in headless Chromium (Debian's chromium package):
# installed here when missing and apt-get can (as root); else the check is reported skipped.
if [ "$#" -eq 0 ]; then
    chromium="${DIORCH_CHROMIUM:-chromium}"
    if ! command -v "$chromium" >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing chromium for the report check (apt-get)"
        if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null ||
            { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; }; }; then
            echo "error: could not install chromium with apt-get" >&2
            exit 1
        fi
    fi
    if command -v "$chromium" >/dev/null 2>&1; then
        DIORCH_CHROMIUM="$chromium" cargo test --locked --test plugins -- --ignored --exact \
            simulate::the_report_renders_every_chart_in_headless_chromium
    else
        echo "note: the HTML report check was SKIPPED: no chromium, and it cannot be installed here"
    fi
fi

if [ "$#" -gt 0 ]; then
    echo "note: the real-cluster e2e suite was SKIPPED: test filters were given; run bash scripts/e2e.sh"
else
    bash scripts/e2e.sh
fi
