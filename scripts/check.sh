#!/usr/bin/env bash
# Static checks the test command runs before the tests: formatting, clippy
# with warnings as errors on every target (clippy's incompatible_msrv holds
# the code to the workspace's rust-version), rustdoc with warnings as
# errors, and the published crates built from their tarballs outside the
# workspace, as a user, docs.rs and Rust 1.89 build them: each crate alone,
# and the facade with no feature, each feature alone and the combinations
# (a crate must not lean on features another crate turns on).
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

# The published crates as users get them (scripts/lib/packed.sh): packed,
# each checked alone from its tarball, documented as docs.rs will (its
# metadata's features, --cfg docsrs, none of this workspace's environment,
# warnings as errors) with its public API from rustdoc's JSON as committed
# (api/public-api.txt), and a newcomer's crate outside the workspace checked
# with each feature alone and with Rust 1.89, then built with the pages'
# programs, which scripts/compose-test.sh runs against the Compose services.
step "packed crates: each alone from its tarball, docs as docs.rs, public API as committed, a newcomer's crate (features, Rust 1.89, programs)" \
    bash scripts/lib/packed.sh
