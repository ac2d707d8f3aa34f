#!/usr/bin/env bash
# The public API of the library crates as a listing read from rustdoc's JSON
# (scripts/lib/public_api.py): every public item by the path users write,
# signatures, fields and variants, and every trait a public type implements,
# auto traits included. `check` compares it with the committed
# api/public-api.txt so that a change to the surface is made on purpose;
# `update` rewrites the file after such a change (and the change belongs in
# CHANGELOG.md).
#
# rustdoc's JSON output is unstable, so it is asked of the stable toolchain
# with RUSTC_BOOTSTRAP=1; each crate is documented with all its features
# and with warnings as errors, which makes this also the workspace's
# rustdoc check (broken intra-doc links and the like).
set -euo pipefail
cd "$(dirname "$0")/../.."
target="${CARGO_TARGET_DIR:-target}"
crates=(fencing fencing-core fencing-election fencing-etcd fencing-zookeeper fencing-kube
        fencing-postgres fencing-http fencing-testkit)

json_docs() {
    local crate
    # The library crates pick no k8s-openapi version; name one as docs.rs must.
    for crate in "${crates[@]}"; do
        K8S_OPENAPI_ENABLED_VERSION=1.35 RUSTC_BOOTSTRAP=1 RUSTDOCFLAGS="-D warnings" \
            cargo rustdoc --locked -q -p "$crate" --lib --all-features \
            -- -Z unstable-options --output-format json
    done
}

listing() {
    local files=()
    for crate in "${crates[@]}"; do
        files+=("$target/doc/${crate//-/_}.json")
    done
    python3 scripts/lib/public_api.py "${files[@]}"
}

case "${1:-check}" in
update)
    json_docs
    listing > api/public-api.txt
    ;;
check)
    json_docs
    if ! diff -u api/public-api.txt <(listing); then
        echo "the public API changed (above: - committed, + now); if on purpose," \
             "run scripts/lib/public-api.sh update and say so in CHANGELOG.md" >&2
        exit 1
    fi
    ;;
*) echo "usage: $0 [check|update]" >&2; exit 2 ;;
esac
