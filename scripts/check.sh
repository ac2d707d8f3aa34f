#!/usr/bin/env bash
# Static checks the test command runs before the tests: formatting, clippy
# with warnings as errors on every target (clippy's incompatible_msrv holds
# the code to the workspace's rust-version), rustdoc with warnings as
# errors, each library crate built alone, and every crate with features
# built with none, each alone and all (a crate, its tests included, must not
# lean on features another crate turns on).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all --check

echo "== cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -q -- -D warnings

echo "== cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked -q

# The library crates pick no k8s-openapi version; a build of them alone
# names one the way docs.rs does.
export K8S_OPENAPI_ENABLED_VERSION=1.35
for crate in fencing-core fencing-election fencing-etcd fencing-zookeeper fencing-kube \
             fencing-postgres fencing-http fencing-testkit; do
    echo "== $crate alone (default features, all targets)"
    cargo check --locked -q -p "$crate" --all-targets
done

# Each library crate with no default features, each feature alone and all
# of them (what cargo-hack's --each-feature does, without installing it).
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
crates_with_features | while read -r crate features; do
    for features in "" $features; do
        echo "== $crate --no-default-features --features [${features}]"
        check_without_warnings -p "$crate" --no-default-features --features "$features"
    done
    echo "== $crate --all-features"
    check_without_warnings -p "$crate" --all-features
done

# The facade's own tests without the file-backed parts.
echo "== fencing without local: unit tests"
cargo test --locked -q -p fencing --no-default-features --lib

# The metrics, with a recording exporter.
echo "== fencing-election with metrics"
cargo test --locked -q -p fencing-election --features metrics --test metrics

# Two rustls providers linked (ring and ZooKeeper's aws-lc-rs): a TLS
# connection before the application installed one is a typed error.
echo "== fencing with ring + zookeeper + kube: no provider installed by the library"
cargo test --locked -q -p fencing --no-default-features --features zookeeper,kube,ring \
    --test tls_provider

# Every crate packs with its metadata (description, license, readme,
# keywords, categories); building the packed crates again is left out (it
# would compile the whole workspace a second time).
echo "== cargo package (metadata and contents)"
cargo package --workspace --no-verify --locked --allow-dirty -q
