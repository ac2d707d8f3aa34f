#!/usr/bin/env bash
# The published crates as users get them, outside this workspace:
#   1. `cargo package` packs every published crate (the workspace's
#      packaging resolves them against each other);
#   2. the tarballs are unpacked into a workspace of their own, with
#      [patch.crates-io] pointing at them, so a dependency `fencing = "0.1"`
#      means the packed crate, not a path into this repository, and each
#      crate is checked there alone, from its tarball;
#   3. docs: each crate documented as docs.rs will, with its
#      [package.metadata.docs.rs] features and rustdoc-args (--cfg docsrs),
#      warnings as errors, and none of this workspace's environment (no
#      .cargo/config.toml, no K8S_OPENAPI_ENABLED_VERSION; docs.rs has a
#      protoc, given here as PROTOC); the same as JSON gives the public API,
#      which must be the committed api/public-api.txt;
#   4. a newcomer's crate (integration/newcomer/Cargo.toml) checked with
#      the facade's features (none, each alone, the combinations; warnings
#      are errors) and on the minimum Rust version, then built with the
#      programs the
#      README, the getting-started page and the migration page show, which
#      scripts/compose-test.sh runs against the Compose services.
# The work tree is $FENCING_CACHE/packed, with target dirs of its own (the
# newcomer's binaries in target/debug/; the docs in target-docs/, built with
# RUSTC_BOOTSTRAP): a build script that sees another environment than the
# last build of the same unit runs again, and every unit after it rebuilds,
# so builds with different environments must not share a target dir.
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
    # Built from the tarballs below (alone), not by cargo package's own
    # verification: that builds (not checks) every crate and again each
    # crate it depends on, 170 s warm here, for no finding a check misses.
    cargo package --locked --allow-dirty --no-verify -q "${args[@]}"
}

# cargo package gives every file one fixed mtime, so cargo could not tell
# a changed file by its time: the tarballs go to a fresh folder, and only
# the files whose content differs are copied over the last run's (dated
# now); the others keep their times, and cargo reuses what they built.
unpack() {
    local crate fresh="$work/crates.new"
    rm -rf "$fresh"
    mkdir -p "$fresh" "$work/crates"
    for crate in "${published[@]}"; do
        tar -xzf "$target/package/$crate-$version.crate" -C "$fresh"
    done
    python3 - "$fresh" "$work/crates" <<'PY'
import filecmp, os, shutil, sys
src, dst = sys.argv[1:]
for root, _, files in os.walk(src):
    for name in files:
        a = os.path.join(root, name)
        b = os.path.join(dst, os.path.relpath(a, src))
        if not os.path.exists(b) or not filecmp.cmp(a, b, shallow=False):
            os.makedirs(os.path.dirname(b), exist_ok=True)
            shutil.copyfile(a, b)
for root, _, files in os.walk(dst):
    for name in files:
        b = os.path.join(root, name)
        if not os.path.exists(os.path.join(src, os.path.relpath(b, dst))):
            os.remove(b)
PY
    rm -rf "$fresh"

    # The newcomer's crate: its manifest and the pages' programs.
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
        CARGO_TARGET_DIR="$work/target" PROTOC="$repo/scripts/protoc" "$@")
}

# A warning fails the check too (the crates deny none themselves).
without_warnings() {
    local out
    out=$("$@" 2>&1) || { echo "$out"; return 1; }
    if grep -q '^warning' <<<"$out"; then echo "$out"; return 1; fi
}

# Each crate from its tarball, alone, with its default features: what
# cargo package's verification proves, as a check.
alone() {
    local crate targets
    for crate in "${published[@]}"; do
        echo "-- $crate from its tarball, alone"
        # Every crate but the CLI is a library; the CLI is binaries only.
        # Like any kube-rs library, fencing-kube names no API version.
        case "$crate" in
        fencing-cli) targets=(--bins) ;;
        fencing-kube) targets=(--lib --features k8s-openapi/v1_35) ;;
        *) targets=(--lib) ;;
        esac
        without_warnings outside cargo check -q -p "$crate" "${targets[@]}" || return
    done
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
        # shellcheck disable=SC2086
        as_docs_rs "${flags#*$'\t'}" cargo doc -q --no-deps -p "$crate" ${flags%%$'\t'*} ||
            return
        # The same again as JSON, for the public-API listing (the
        # dependencies are checked already: only the crate is documented).
        # shellcheck disable=SC2086
        as_docs_rs "${flags#*$'\t'}" cargo rustdoc -q --lib -p "$crate" ${flags%%$'\t'*} \
            -- -Z unstable-options --output-format json || return
    done
}

# RUSTDOCFLAGS COMMAND...: docs.rs builds on nightly; RUSTC_BOOTSTRAP lets
# stable's rustdoc take the nightly-only #![feature(doc_cfg)] that
# --cfg docsrs turns on.
as_docs_rs() {
    local flags="$1"
    shift
    outside env RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR="$work/target-docs" \
        RUSTDOCFLAGS="$flags -D warnings" "$@"
}

# The public API as docs.rs shows it, listed from rustdoc's JSON
# (scripts/lib/public_api.py): every item by the path users write,
# signatures, fields, variants, trait impls and auto traits.
api_listing() {
    local files=() crate
    for crate in "${published[@]}"; do
        [ "$crate" = fencing-cli ] || files+=("$work/target-docs/doc/${crate//-/_}.json")
    done
    python3 scripts/lib/public_api.py "${files[@]}"
}

# It must be the committed one, so that a change to it is made on purpose.
api() {
    if ! diff -u api/public-api.txt <(api_listing); then
        echo "the public API changed (above: - committed, + now); if on purpose," \
             "run scripts/lib/public-api.sh update and say so in CHANGELOG.md" >&2
        return 1
    fi
}

newcomer() {
    local features
    # The facade's features: none, each alone, and the ones that combine
    # with another (a TLS provider, the test hooks).
    for features in "" local etcd zookeeper kube postgres http metrics \
                    etcd,ring kube,ring etcd,zookeeper,test-util; do
        echo "-- a newcomer's crate with fencing's features [$features]"
        without_warnings outside cargo check -q -p newcomer --lib --no-default-features \
            --features "$features" || return
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
    for phase in pack unpack alone docs_like_docs_rs api newcomer; do
        started=$SECONDS
        "$phase"
        echo "-- packed.sh: $phase took $((SECONDS - started)) s"
    done
    ;;
api-update)
    pack
    unpack
    docs_like_docs_rs
    api_listing > api/public-api.txt
    ;;
*) echo "usage: $0 [all|api-update]" >&2; exit 2 ;;
esac
