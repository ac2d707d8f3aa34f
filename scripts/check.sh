#!/usr/bin/env bash
# Static checks the test command runs before the tests: formatting, clippy
# with warnings as errors on every target (clippy's incompatible_msrv holds
# the code to the workspace's rust-version), rustdoc with warnings as
# errors, every crate with features checked with none, each alone and all
# (a crate must not lean on features another crate turns on), and the
# published crates built from their tarballs, outside the workspace, as a
# user, docs.rs and Rust 1.89 build them.
#
# Everything here but two small test runs and the packed crates is `cargo
# check` (no code generation). Those build in the debug profile: their
# feature sets differ from the workspace's, so they could share little with
# the test command's build anyway, and unoptimised dependencies compile in
# half the time (71 s against about 150 s at opt-level 1).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/steps.sh
. scripts/lib/steps.sh

step "cargo fmt --check" cargo fmt --all --check
step "docs: relative links resolve, README.md a front page" bash scripts/lib/doc-links.sh
step "cargo clippy (all targets, warnings are errors)" \
    cargo clippy --workspace --all-targets --locked -q -- -D warnings
# One rustdoc pass per library crate, as JSON: warnings are errors (the
# doc lints), and the public API it lists must be the committed one.
step "rustdoc JSON (warnings are errors), public API as committed (api/public-api.txt)" \
    bash scripts/lib/public-api.sh check
# The library crates pick no k8s-openapi version; the checks of them alone
# below name one in the environment.
export K8S_OPENAPI_ENABLED_VERSION=1.35

# Prints "CRATE FEATURE..." for every workspace crate that has features.
crates_with_features() {
    cargo metadata --locked --no-deps --format-version 1 | python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    features = [f for f in p["features"] if f != "default"]
    if features:
        print(p["name"], " ".join(features))'
}
# A warning in any combination fails the check (RUSTFLAGS=-D warnings would
# rebuild every dependency).
check_without_warnings() {
    local out
    out=$(cargo check --locked -q "$@" 2>&1) || { echo "$out"; return 1; }
    if grep -q '^warning' <<<"$out"; then echo "$out"; return 1; fi
}
# Each crate with no default features, each feature alone and all of them
# (what cargo-hack's --each-feature does, without installing it). The
# library target only: a feature changes what the library compiles.
feature_matrix() {
    local crate features feature
    while read -r crate features; do
        for feature in "" $features; do
            echo "-- $crate --no-default-features --features [${feature}]"
            check_without_warnings -p "$crate" --no-default-features --features "$feature" || return
        done
        echo "-- $crate --all-features"
        check_without_warnings -p "$crate" --all-features || return
    done < <(crates_with_features)
}
step "feature matrix (none, each alone, all)" feature_matrix
unset K8S_OPENAPI_ENABLED_VERSION

# The metrics, with a recording exporter.
step "fencing-election with metrics" \
    cargo test --locked -q -p fencing-election --features metrics --test metrics

# The facade without its file-backed parts (`local`): its unit tests (a
# local:// URL names the missing feature). And two rustls providers linked
# (ring and ZooKeeper's aws-lc-rs): a TLS connection before the application
# installed one is a typed error. One build serves both.
step "fencing without local, with ring + zookeeper + kube: unit tests, no provider installed" \
    cargo test --locked -q -p fencing --no-default-features \
    --features zookeeper,kube,ring --lib --test tls_provider

# The published crates as users get them (scripts/lib/packed.sh): packed
# and each built from its tarball; documented as docs.rs will (its metadata's
# features, --cfg docsrs, none of this workspace's environment); a
# newcomer's crate outside the workspace checked with each feature alone
# and with Rust 1.89, then built with the pages' programs, which
# scripts/compose-test.sh runs against the Compose services.
step "packed crates: verified, docs as docs.rs, a newcomer's crate (features, Rust 1.89, programs)" \
    bash scripts/lib/packed.sh
