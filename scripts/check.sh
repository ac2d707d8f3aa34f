#!/usr/bin/env bash
# Static checks the test command runs before the tests: formatting, clippy
# with warnings as errors on every target (clippy's incompatible_msrv holds
# the code to the workspace's rust-version), rustdoc with warnings as
# errors, each library crate and the CLI checked alone, and every crate
# with features checked with none, each alone and all (a crate, its tests
# included, must not lean on features another crate turns on).
#
# Everything here but two small test runs is `cargo check` (no code
# generation). Those two build in the debug profile: their feature sets
# differ from the workspace's, so they could share little with the test
# command's build anyway, and unoptimised dependencies compile in half the
# time (71 s against about 150 s at opt-level 1).
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
# The packages that are not published (publish = false): integration/'s
# four and the examples. Their path dependencies carry no version, so
# cargo package refuses them.
unpublished=(--exclude fencing-harness --exclude fencing-campaign --exclude fencing-bench
             --exclude fencing-integration-tests --exclude fencing-examples)

# The library crates pick no k8s-openapi version; a check of them alone
# names one the way docs.rs does. The CLI alone is what the README's
# `cargo run -p fencing-cli --bin fence -- demo` compiles.
export K8S_OPENAPI_ENABLED_VERSION=1.35
alone() {
    local crate
    for crate in fencing-core fencing-election fencing-etcd fencing-zookeeper fencing-kube \
                 fencing-postgres fencing-http fencing-testkit fencing-cli; do
        echo "-- $crate alone (default features, all targets)"
        cargo check --locked -q -p "$crate" --all-targets || return
    done
}
step "each library crate and the CLI alone" alone

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

# Every crate packs with its metadata (description, license, readme,
# keywords, categories); building the packed crates again is left out (it
# would compile the whole workspace a second time).
step "cargo package (metadata and contents)" \
    cargo package --workspace --no-verify --locked --allow-dirty -q "${unpublished[@]}"
