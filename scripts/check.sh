#!/usr/bin/env bash
# Static checks the test command runs before the tests: formatting, clippy
# with warnings as errors on every target (clippy's incompatible_msrv holds
# the code to the workspace's rust-version), rustdoc with warnings as
# errors, and each library crate built alone and the facade with each
# feature alone (a crate, its tests included, must not lean on features
# another crate turns on).
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
    echo "== $crate alone"
    cargo check --locked -q -p "$crate" --all-targets
done
for features in "" etcd zookeeper kube postgres http "etcd,zookeeper,kube,postgres,http"; do
    echo "== fencing with features [${features}]"
    cargo check --locked -q -p fencing --no-default-features --features "$features"
done

# Every crate packs with its metadata (description, license, readme,
# keywords, categories); building the packed crates again is left out (it
# would compile the whole workspace a second time).
echo "== cargo package (metadata and contents)"
cargo package --workspace --no-verify --locked --allow-dirty -q
