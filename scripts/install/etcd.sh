#!/usr/bin/env bash
# Installs what the etcd backend and its real-cluster tests need, skipping
# whatever is already there (idempotent):
#   - protoc (Debian protobuf-compiler, libprotobuf-dev for the well-known
#     types): the etcd-client crate runs it at build time;
#   - etcd 3.4 (Debian etcd-server, /usr/bin/etcd) and etcdctl (etcd-client),
#     without letting the package start a system service;
#   - etcd $ETCD_VERSION of versions.env, built from the Go module
#     go.etcd.io/etcd/server/v3 into
#     ${FENCING_CACHE:-$HOME/.cache/fencing}/bin/etcd-v$ETCD_VERSION (the build
#     directory lives in the cache, never in the checkout), and its etcdctl
#     (etcdctl-v$ETCD_VERSION beside it) for the Compose stand-in image.
set -euo pipefail

FENCING_CACHE="${FENCING_CACHE:-$HOME/.cache/fencing}"
BIN_DIR="$FENCING_CACHE/bin"
# shellcheck source=../../versions.env
. "$(dirname "$0")/../../versions.env"
ETCD36_VERSION="v$ETCD_VERSION"
ETCD36_BIN="$BIN_DIR/etcd-$ETCD36_VERSION"
ETCDCTL36_BIN="$BIN_DIR/etcdctl-$ETCD36_VERSION"

die() {
    echo "etcd.sh: $*" >&2
    exit 1
}

# shellcheck source=../lib/apt.sh
. "$(dirname "$0")/../lib/apt.sh"

# --- protoc -----------------------------------------------------------------
# The compiler and the well-known types it imports (google/protobuf/*.proto,
# in libprotobuf-dev).
wkt=/usr/include/google/protobuf/descriptor.proto
if command -v protoc >/dev/null 2>&1 && [ -f "$wkt" ]; then
    echo "protoc: reusing $(command -v protoc) ($(protoc --version))"
else
    apt_install protobuf-compiler libprotobuf-dev
    command -v protoc >/dev/null 2>&1 || die "protoc still missing after installing protobuf-compiler"
    [ -f "$wkt" ] || die "$wkt still missing after installing libprotobuf-dev"
    echo "protoc: installed $(command -v protoc) ($(protoc --version)) with the well-known types"
fi

# --- etcd 3.4 (Debian) ------------------------------------------------------
if [ -x /usr/bin/etcd ] && command -v etcdctl >/dev/null 2>&1; then
    echo "etcd 3.4: reusing /usr/bin/etcd ($(/usr/bin/etcd --version 2>/dev/null | head -1))"
else
    apt_install_without_services etcd-server etcd-client
    # If a service manager started it anyway, stop that system etcd: the
    # tests run their own clusters and need no daemon on port 2379.
    if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet etcd 2>/dev/null; then
        systemctl stop etcd || true
    fi
    for pid in $(pgrep -x etcd || true); do
        if [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = /usr/bin/etcd ] \
            && [ "$(ps -o ppid= -p "$pid" | tr -d ' ')" = 1 ]; then
            kill "$pid" 2>/dev/null || true
        fi
    done
    [ -x /usr/bin/etcd ] || die "/usr/bin/etcd missing after installing etcd-server"
    echo "etcd 3.4: installed /usr/bin/etcd ($(/usr/bin/etcd --version 2>/dev/null | head -1))"
fi

# --- etcd 3.6 (built from the Go module) ------------------------------------
if [ -x "$ETCD36_BIN" ] && "$ETCD36_BIN" --version >/dev/null 2>&1; then
    echo "etcd 3.6: reusing $ETCD36_BIN ($("$ETCD36_BIN" --version | head -1))"
else
    command -v go >/dev/null 2>&1 || die "go not found: needed to build etcd $ETCD36_VERSION"
    mkdir -p "$BIN_DIR"
    build_dir="$FENCING_CACHE/build/etcd-$ETCD36_VERSION"
    rm -rf "$build_dir"
    mkdir -p "$build_dir"
    cat >"$build_dir/go.mod" <<'GOMOD'
module fencing.local/etcd36

go 1.24
GOMOD
    cat >"$build_dir/main.go" <<'GOMAIN'
// Command etcd is the stock etcd server entry point.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
GOMAIN
    (
        cd "$build_dir"
        export GOFLAGS=-mod=mod
        go get "go.etcd.io/etcd/server/v3@$ETCD36_VERSION" >build.log 2>&1
        go mod tidy >>build.log 2>&1
        go build -o "$ETCD36_BIN.tmp" . >>build.log 2>&1
    ) || die "building etcd $ETCD36_VERSION failed; see $build_dir/build.log:
$(tail -20 "$build_dir/build.log" 2>/dev/null)"
    mv -f "$ETCD36_BIN.tmp" "$ETCD36_BIN"
    "$ETCD36_BIN" --version >/dev/null 2>&1 || die "$ETCD36_BIN does not run"
    echo "etcd 3.6: built $ETCD36_BIN ($("$ETCD36_BIN" --version | head -1))"
fi

# --- etcdctl 3.6 (built from the Go module) ---------------------------------
if [ -x "$ETCDCTL36_BIN" ] && "$ETCDCTL36_BIN" version >/dev/null 2>&1; then
    echo "etcdctl 3.6: reusing $ETCDCTL36_BIN"
else
    build_dir="$FENCING_CACHE/build/etcdctl-$ETCD36_VERSION"
    rm -rf "$build_dir"
    mkdir -p "$build_dir"
    printf 'module fencing.local/etcdctl36\n\ngo 1.24\n' >"$build_dir/go.mod"
    (
        cd "$build_dir"
        export GOFLAGS=-mod=mod
        # The module's root package is the command; no tidy (this module
        # imports nothing, tidy would drop the requirement).
        go get "go.etcd.io/etcd/etcdctl/v3@$ETCD36_VERSION" >build.log 2>&1
        go build -o "$ETCDCTL36_BIN.tmp" go.etcd.io/etcd/etcdctl/v3 >>build.log 2>&1
    ) || die "building etcdctl $ETCD36_VERSION failed; see $build_dir/build.log:
$(tail -20 "$build_dir/build.log" 2>/dev/null)"
    mv -f "$ETCDCTL36_BIN.tmp" "$ETCDCTL36_BIN"
    echo "etcdctl 3.6: built $ETCDCTL36_BIN ($("$ETCDCTL36_BIN" version | head -1))"
fi
