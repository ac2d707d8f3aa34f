# Shared by scripts/install/*.sh (sourced, not run): builds one Go program of
# integration/anchors/go into ${FENCING_CACHE:-$HOME/.cache/fencing}/bin, or
# reuses the binary when its sources (its own and those of the local modules
# its go.mod replaces, such as ../lineproto) have not changed. Prints one line
# saying which.

# build_go_program LABEL SOURCE_DIR BINARY_NAME
build_go_program() {
    local label=$1 src=$2 name=$3
    local bin_dir="${FENCING_CACHE:-$HOME/.cache/fencing}/bin"
    local bin="$bin_dir/$name"
    local stamp="$bin.stamp"

    command -v go >/dev/null || { echo "$label: 'go' not found on PATH" >&2; return 1; }

    # A content hash rather than mtimes (a fresh clone gives every file a new
    # mtime); the Go version is part of it, so a toolchain change rebuilds.
    # Local replacements ("=> ../lineproto") are sources too.
    local dirs=("$src") dir
    while read -r dir; do
        dirs+=("$src/$dir")
    done < <(awk '/=>/ && $NF ~ /^\.\.?\// { print $NF }' "$src/go.mod")
    local hash
    hash=$( { go version; find "${dirs[@]}" -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) \
              -print0 | LC_ALL=C sort -z | xargs -0 sha256sum; } | sha256sum | cut -d' ' -f1)

    if [[ -x "$bin" && -f "$stamp" && "$(cat "$stamp")" == "$hash" ]]; then
        echo "$label: reused $bin"
        return 0
    fi

    mkdir -p "$bin_dir"
    local start
    start=$(date +%s)
    # To a temporary name first, so a concurrent reader never runs half a file.
    (cd "$src" && go build -trimpath -o "$bin.tmp.$$" .)
    mv -f "$bin.tmp.$$" "$bin"
    echo "$hash" > "$stamp"
    echo "$label: built $bin ($(( $(date +%s) - start ))s)"
}
