#!/usr/bin/env bash
# Builds the `fence` container image from the repository's Dockerfile for the
# in-cluster test, with local stand-ins for its two base images (no image
# registry is reachable here). Idempotent:
#   - fencing-local/debian:bookworm-slim   debootstrap --variant=minbase;
#   - fencing-local/rust:bookworm          the same plus gcc and libc6-dev,
#                                          and this machine's Rust toolchain;
#   - fencing/fence:local                  `docker build` of the Dockerfile
#                                          on those two, rebuilt only when a
#                                          tracked file changed.
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
# scripts and docs (most commits) cannot change it, while a rebuild costs
# five minutes on two cores. Excluded trees keep the files cargo reads from
# them (the workspace's member manifests, the protoc wrapper of
# .cargo/config.toml); a new top-level file counts until excluded here.
source_hash="$({
    git ls-files -z -- . ':!README.md' ':!deploy' ':!.ci' ':!docker-compose.yml' \
        ':!integration' ':!examples' ':!scripts'
    git ls-files -z -- integration/Cargo.toml examples/Cargo.toml scripts/protoc
} | xargs -0 sha256sum | sha256sum | cut -c1-16)"
if [ "$(docker image inspect "$IMAGE" --format '{{index .Config.Labels "org.fencing.source"}}' 2>/dev/null)" = "$source_hash" ]; then
    echo "fence-image: reusing $IMAGE (sources $source_hash)"
    exit 0
fi
started=$SECONDS
log="$cache/fence-image-build.log"
docker build --build-arg RUST_IMAGE="$RUST" --build-arg RUNTIME_IMAGE="$RUNTIME" \
    --label org.fencing.source="$source_hash" -t "$IMAGE" . >"$log" 2>&1 ||
    die "docker build failed:
$(tail -30 "$log")"
# The build stage (2 GB) and replaced images would pile up run after run.
docker image prune -f >/dev/null
size="$(docker image inspect "$IMAGE" --format '{{.Size}}')"
echo "fence-image: built $IMAGE in $((SECONDS - started)) s ($((size / 1024 / 1024)) MiB, sources $source_hash)"
