#!/usr/bin/env bash
# Supply-chain checks with cargo-deny and deny.toml: licences, banned and duplicate crates, and
# sources (crates.io only) of the operator's dependency graph; licences and sources of the
# plugin workspace (its components ship in ConfigMaps); known vulnerabilities (RustSec) when a
# copy of the advisory database is on the machine. Installs cargo-deny when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

version=0.20.2
if ! cargo deny --version 2>/dev/null | grep -qx "cargo-deny $version"; then
    # No prebuilt binary can be fetched here: build it (measured: about 3 minutes on 2 cores).
    echo "installing cargo-deny $version with cargo install --locked"
    cargo install --locked --quiet cargo-deny --version "$version"
fi

cargo deny --locked check bans licenses sources
# The plugin workspace is checked for licences and sources only: its path dependencies carry
# no version (they are not published), and duplicate policy is the operator's concern.
cargo deny --locked --manifest-path plugins/Cargo.toml --config deny.toml \
    check -A license-not-encountered -A license-exception-not-encountered licenses sources

# The RustSec database is a git repository on GitHub, which the project's machines cannot
# reach: use a copy only if one is there (cargo-deny's default place, or DIORCH_ADVISORY_DB),
# offline, and fail on a copy older than deny.toml's maximum-db-staleness. Otherwise say so.
db_root="${DIORCH_ADVISORY_DB:-${CARGO_HOME:-$HOME/.cargo}/advisory-dbs}"
if compgen -G "$db_root/*/.git" >/dev/null || compgen -G "$db_root/*/crates" >/dev/null; then
    echo "cargo deny check advisories: using the RustSec database copy in $db_root"
    if [ -n "${DIORCH_ADVISORY_DB:-}" ]; then
        config=$(mktemp)
        trap 'rm -f "$config"' EXIT
        sed "s|^\[advisories\]|[advisories]\ndb-path = \"$db_root\"|" deny.toml >"$config"
        cargo deny --locked --offline --config "$config" check advisories
    else
        cargo deny --locked --offline check advisories
    fi
else
    echo "SKIPPED cargo deny check advisories: no RustSec advisory database under $db_root, and this machine cannot fetch it (github.com is unreachable); licences, bans and sources were checked. Put a clone of rustsec/advisory-db there (or set DIORCH_ADVISORY_DB) to check known vulnerabilities."
fi
