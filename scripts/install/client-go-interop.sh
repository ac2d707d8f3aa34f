#!/usr/bin/env bash
# Builds integration/go/client-go-elector (client-go's tools/leaderelection
# with a LeaseLock, used by the Kubernetes interop tests and benchmarks) into
# ${FENCING_CACHE:-$HOME/.cache/fencing}/bin/client-go-elector.
# Idempotent: rebuilds only when the sources' content hash changed or the
# binary is missing, and prints one line saying which.
set -euo pipefail

cd "$(dirname "$0")/../.."
src=integration/go/client-go-elector
bin_dir="${FENCING_CACHE:-$HOME/.cache/fencing}/bin"
bin="$bin_dir/client-go-elector"
stamp="$bin.stamp"

command -v go >/dev/null || { echo "client-go-interop: 'go' not found on PATH" >&2; exit 1; }

# A content hash rather than mtimes (a fresh clone gives every file a new
# mtime); the Go version is part of it, so a toolchain change rebuilds.
hash=$( { go version; find "$src" -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) \
          -print0 | LC_ALL=C sort -z | xargs -0 sha256sum; } | sha256sum | cut -d' ' -f1)

if [[ -x "$bin" && -f "$stamp" && "$(cat "$stamp")" == "$hash" ]]; then
    echo "client-go-interop: reused $bin"
    exit 0
fi

mkdir -p "$bin_dir"
start=$(date +%s)
# To a temporary name first, so a concurrent reader never runs half a file.
(cd "$src" && go build -trimpath -o "$bin.tmp.$$" .)
mv -f "$bin.tmp.$$" "$bin"
echo "$hash" > "$stamp"
echo "client-go-interop: built $bin ($(( $(date +%s) - start ))s)"
