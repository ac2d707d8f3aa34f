#!/usr/bin/env bash
# The published crates as users get them, outside this workspace:
#   1. `cargo package` packs every published crate (the workspace's
#      packaging resolves them against each other) and builds each one from
#      its tarball (verification);
#   2. the tarballs are unpacked into a workspace of their own, with
#      [patch.crates-io] pointing at them, so a dependency `fencing = "0.1"`
#      means the packed crate, not a path into this repository;
#   3. docs: each crate documented as docs.rs will, with its
#      [package.metadata.docs.rs] features and rustdoc-args (--cfg docsrs),
#      warnings as errors, and none of this workspace's environment (no
#      .cargo/config.toml, no K8S_OPENAPI_ENABLED_VERSION; docs.rs has a
#      protoc, given here as PROTOC);
#   4. a newcomer's crate (integration/newcomer/Cargo.toml) checked with
#      each feature of the facade alone, then built with the programs the
#      README, the getting-started page and the migration page show, which
#      scripts/compose-test.sh runs against the Compose services.
# The work tree is $FENCING_CACHE/packed (newcomer binaries in its
# target/); the build shares $CARGO_TARGET_DIR's cache.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo="$PWD"
work="${FENCING_CACHE:-$HOME/.cache/fencing}/packed"
target="${CARGO_TARGET_DIR:-$repo/target}"
published=(fencing-core fencing-election fencing-etcd fencing-zookeeper fencing-kube
           fencing-postgres fencing-http fencing-testkit fencing fencing-cli)

pack() {
    local args=()
    for crate in "${published[@]}"; do args+=(-p "$crate"); done
    # Verification builds fencing-kube alone, which (like any kube-rs
    # library) names no Kubernetes API version: the variable names one.
    K8S_OPENAPI_ENABLED_VERSION=1.35 cargo package --locked --allow-dirty -q "${args[@]}"
}

unpack() {
    rm -rf "$work/crates"
    mkdir -p "$work/crates"
    local crate
    for crate in "${published[@]}"; do
        tar -xzf "$target/package/$crate-$version.crate" -C "$work/crates"
    done
    rm -rf "$work/newcomer"
    mkdir -p "$work/newcomer/src/bin"
    cp integration/newcomer/Cargo.toml "$work/newcomer/"
    echo "//! Feature checks only; the programs are in src/bin." > "$work/newcomer/src/lib.rs"
    cp examples/quickstart/etcd_lock.rs "$work/newcomer/src/bin/quickstart-etcd.rs"
    cp examples/quickstart/leader_store.rs "$work/newcomer/src/bin/quickstart-leader.rs"
    cp examples/migrate/from_client_go.rs "$work/newcomer/src/bin/from-client-go.rs"
    cp examples/migrate/from_curator.rs "$work/newcomer/src/bin/from-curator.rs"
    cp examples/migrate/from_etcd_concurrency.rs "$work/newcomer/src/bin/from-etcd-concurrency.rs"
    {
        echo '[workspace]'
        echo 'resolver = "2"'
        echo 'members = ["crates/*", "newcomer"]'
        echo
        echo '[patch.crates-io]'
        for crate in "${published[@]}"; do
            echo "$crate = { path = \"crates/$crate-$version\" }"
        done
    } > "$work/Cargo.toml"
    # The versions this workspace tested with (cargo adds the newcomer).
    cp Cargo.lock "$work/Cargo.lock"
}

# What a build sees on a user's machine: nothing of this workspace.
outside() {
    (cd "$work" && env -u K8S_OPENAPI_ENABLED_VERSION -u RUSTFLAGS -u RUSTDOCFLAGS \
        PROTOC="$repo/scripts/protoc" "$@")
}

docs_like_docs_rs() {
    local crate flags
    for crate in "${published[@]}"; do
        [ "$crate" = fencing-cli ] && continue
        # "ARGS<TAB>RUSTDOCFLAGS" from the crate's docs.rs metadata.
        flags=$(python3 - "$work/crates/$crate-$version/Cargo.toml" <<'PY'
import sys, tomllib
meta = tomllib.load(open(sys.argv[1], "rb")).get("package", {}).get("metadata", {}).get("docs", {}).get("rs", {})
args = []
if meta.get("all-features"): args.append("--all-features")
if meta.get("no-default-features"): args.append("--no-default-features")
if meta.get("features"): args += ["--features", ",".join(meta["features"])]
print(" ".join(args) + "\t" + " ".join(meta.get("rustdoc-args", [])))
PY
)
        echo "-- $crate: cargo doc ${flags%%$'\t'*} (rustdoc: ${flags#*$'\t'})"
        # docs.rs builds on nightly; RUSTC_BOOTSTRAP lets stable's rustdoc
        # take the nightly-only #![feature(doc_cfg)] that --cfg docsrs turns on.
        # shellcheck disable=SC2086
        outside env RUSTC_BOOTSTRAP=1 RUSTDOCFLAGS="${flags#*$'\t'} -D warnings" \
            cargo doc -q --no-deps -p "$crate" ${flags%%$'\t'*} || return
    done
}

newcomer() {
    local feature
    for feature in local etcd zookeeper kube postgres http metrics ring; do
        echo "-- a newcomer's crate with fencing's feature $feature alone"
        outside cargo check -q -p newcomer --lib --no-default-features --features "$feature" || return
    done
    # The minimum supported Rust version, with the locked dependencies.
    echo "-- a newcomer's crate with every feature, on Rust $msrv"
    rustup toolchain list | grep -q "^$msrv" ||
        rustup toolchain install "$msrv" --profile minimal --no-self-update >/dev/null
    outside cargo "+$msrv" check -q -p newcomer --lib --features postgres,http,metrics || return
    echo "-- a newcomer's crate: the README's, getting-started and migration programs"
    outside cargo build -q -p newcomer --bins
}

# Every published crate has the workspace's version and rust-version.
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
msrv=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
case "${1:-all}" in
all)
    pack
    unpack
    docs_like_docs_rs
    newcomer
    ;;
*) echo "usage: $0" >&2; exit 2 ;;
esac
