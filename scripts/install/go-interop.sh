#!/usr/bin/env bash
# Builds integration/go/etcd-mutex (the official etcd Go client's
# concurrency.Mutex, used by interop tests) into the fencing cache.
# Idempotent: rebuilds only when the sources' content hash changed or the
# binary is missing, and prints one line saying which.
set -euo pipefail

cd "$(dirname "$0")/../.."
src=integration/go/etcd-mutex
bin_dir="${FENCING_CACHE:-$HOME/.cache/fencing}/bin"
bin="$bin_dir/etcd-mutex"
stamp="$bin.stamp"

command -v go >/dev/null || { echo "go-interop: 'go' not found on PATH" >&2; exit 1; }

# A content hash (not mtimes): a fresh clone gives every file a new mtime, and
# an edit that keeps the mtime would otherwise be missed. The Go version is in
# the hash too, so a toolchain change rebuilds.
hash=$( { go version; find "$src" -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) \
          -print0 | LC_ALL=C sort -z | xargs -0 sha256sum; } | sha256sum | cut -d' ' -f1)

if [[ -x "$bin" && -f "$stamp" && "$(cat "$stamp")" == "$hash" ]]; then
    echo "go-interop: reused $bin"
    exit 0
fi

mkdir -p "$bin_dir"
# Build to a temp name and rename, so a concurrent reader never runs half a file.
(cd "$src" && go build -trimpath -o "$bin.tmp.$$" .)
mv -f "$bin.tmp.$$" "$bin"
echo "$hash" > "$stamp"
echo "go-interop: built $bin"
