#!/usr/bin/env bash
# Builds integration/anchors/go/etcd-mutex (the official etcd Go client's
# concurrency.Mutex, used by the etcd interop tests and benchmark) into
# ${FENCING_CACHE:-$HOME/.cache/fencing}/bin/etcd-mutex, or reuses it.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/go-program.sh
build_go_program go-interop integration/anchors/go/etcd-mutex etcd-mutex
