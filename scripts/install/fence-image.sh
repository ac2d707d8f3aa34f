#!/usr/bin/env bash
# Builds the `fence` container image fencing/fence:local for the in-cluster
# test, with a local stand-in for its runtime base image (no image registry
# is reachable here). Idempotent.
#
#   fence-image.sh FENCE_BINARY   the runtime stage of the repository's
#       Dockerfile (everything from its last FROM) with FENCE_BINARY, a
#       `fence` built on this machine (Debian bookworm, as the runtime
#       image), stripped, in place of the builder stage's output. This is
#       what the test command does: the binary is the one its build made,
#       so `fence` is not compiled a second time inside Docker (five
#       minutes on two cores).
#   fence-image.sh --from-source  the whole Dockerfile, builder stage
#       included, on local stand-ins for both base images (run it after
#       changing the Dockerfile's builder stage):
#         fencing-local/debian:bookworm-slim  debootstrap --variant=minbase;
#         fencing-local/rust:bookworm         the same plus gcc and libc6-dev,
#                                             and this machine's Rust toolchain.
# The root file systems are cached as tarballs in $FENCING_CACHE/images.
set -euo pipefail
cd "$(dirname "$0")/../.."

die() {
    echo "fence-image.sh: $*" >&2
    exit 1
}

# shellcheck source=../lib/apt.sh
. scripts/lib/apt.sh

cache="${FENCING_CACHE:-$HOME/.cache/fencing}/images"
mkdir -p "$cache"
docker info >/dev/null 2>&1 || die "no Docker daemon answers (scripts/install/docker.sh starts one)"

RUNTIME=fencing-local/debian:bookworm-slim
BUILD_BASE=fencing-local/bookworm-build-base
RUST=fencing-local/rust:bookworm
IMAGE=fencing/fence:local

# shellcheck source=../lib/rootfs.sh
. scripts/lib/rootfs.sh

import_rootfs "$RUNTIME" bookworm-minbase.tar

# build_labelled KEY CONTEXT [docker build options...]: builds $IMAGE from
# CONTEXT unless it already carries the label org.fencing.source=KEY.
build_labelled() {
    local key="$1" context="$2" started=$SECONDS log="$cache/fence-image-build.log" size
    shift 2
    if [ "$(docker image inspect "$IMAGE" --format '{{index .Config.Labels "org.fencing.source"}}' 2>/dev/null)" = "$key" ]; then
        echo "fence-image: reusing $IMAGE ($key)"
        return
    fi
    docker build "$@" --label org.fencing.source="$key" -t "$IMAGE" "$context" >"$log" 2>&1 ||
        die "docker build failed:
$(tail -30 "$log")"
    # Replaced images (and the 2 GB build stage) would pile up run after run.
    docker image prune -f >/dev/null
    size="$(docker image inspect "$IMAGE" --format '{{.Size}}')"
    echo "fence-image: built $IMAGE in $((SECONDS - started)) s ($((size / 1024 / 1024)) MiB, $key)"
}

if [ "${1:-}" != --from-source ]; then
    binary="${1:?usage: fence-image.sh FENCE_BINARY | --from-source}"
    [ -x "$binary" ] || die "$binary is not an executable (build it first: cargo build -p fencing-cli --bin fence)"
    context="$(mktemp -d)"
    trap 'rm -rf "$context" "$apt_log"' EXIT
    strip -o "$context/fence" "$binary"
    {
        echo "ARG RUNTIME_IMAGE"
        sed -n '/^FROM \${RUNTIME_IMAGE}/,$p' Dockerfile | sed 's#^COPY --from=build /out/fence #COPY fence #'
    } >"$context/Dockerfile"
    grep -q '^COPY fence /usr/local/bin/fence$' "$context/Dockerfile" ||
        die "the Dockerfile's runtime stage no longer copies /out/fence from the build stage; update this script"
    key="binary $(cat "$context/Dockerfile" "$context/fence" | sha256sum | cut -c1-16)"
    build_labelled "$key" "$context" --build-arg RUNTIME_IMAGE="$RUNTIME"
    exit 0
fi

import_rootfs "$BUILD_BASE" bookworm-build.tar --include=gcc,libc6-dev,ca-certificates

# The builder: this machine's toolchain (binaries and libraries, no docs)
# and its trusted certificates (cargo in the builder downloads crates through
# whatever this machine trusts) on the build root file system.
sysroot="$(rustc --print sysroot)"
ca_file="${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}"
builder_key="$(rustc --version | awk '{print $2}')-$(sha256sum "$ca_file" | cut -c1-12)"
if [ "$(docker image inspect "$RUST" --format '{{index .Config.Labels "org.fencing.builder"}}' 2>/dev/null)" != "$builder_key" ]; then
    context="$(mktemp -d)"
    mkdir -p "$context/rust"
    cp -a "$sysroot/bin" "$sysroot/lib" "$context/rust/"
    cp "$ca_file" "$context/ca-certificates.crt"
    cat >"$context/Dockerfile" <<DOCKERFILE
FROM $BUILD_BASE
COPY rust /usr/local/rust
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
ENV PATH=/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    CARGO_HOME=/usr/local/cargo
LABEL org.fencing.builder=$builder_key
DOCKERFILE
    docker build -q -t "$RUST" "$context" >/dev/null
    rm -rf "$context"
    echo "fence-image: made $RUST ($builder_key)"
fi

# The fence image, keyed by the content of every tracked file its build can
# read: the image holds only the `fence` binary, and the tests, benchmarks,
# scripts and docs cannot change it. Excluded trees keep the files cargo
# reads from them (the workspace's member manifests, the protoc wrapper of
# .cargo/config.toml); a new top-level file counts until excluded here.
source_hash="$({
    git ls-files -z -- . ':!*.md' ':!docs' ':!LICENSE' ':!deploy' ':!.ci' ':!docker-compose.yml' \
        ':!integration' ':!examples' ':!scripts'
    git ls-files -z -- 'integration/*/Cargo.toml' examples/Cargo.toml scripts/protoc \
        'scripts/protoc-vendored/*'
} | xargs -0 sha256sum | sha256sum | cut -c1-16)"
build_labelled "sources $source_hash" . --build-arg RUST_IMAGE="$RUST" --build-arg RUNTIME_IMAGE="$RUNTIME"
