#!/usr/bin/env bash
# The public API of the library crates as a listing: the first line of
# every declaration below, without line numbers, sorted. Crude on purpose
# (text, no compiler): it also lists `pub` items of private modules, and a
# signature over several lines shows only its first. `check` compares it
# with the committed api/public-api.txt so that a change to the surface is
# made on purpose; `update` rewrites the file after such a change (and the
# change belongs in CHANGELOG.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
# Per file: `pub` items (not `pub(crate)`), `pub` fields, and the methods
# declared in a `pub trait`'s body.
declarations() {
    awk '
        /^[[:space:]]*pub trait / { in_trait = 1; depth = 0 }
        /^[[:space:]]*pub (async fn|fn|struct|enum|trait|type|const|static|mod|use) / ||
        /^[[:space:]]*pub [a-z_][a-z0-9_]*:/ ||
        (in_trait && depth == 1 && /^[[:space:]]*(async )?fn /) {
            line = $0; sub(/^[[:space:]]+/, "", line); sub(/[[:space:]]+$/, "", line)
            print FILENAME ": " line
        }
        in_trait {
            depth += gsub(/\{/, "{"); depth -= gsub(/\}/, "}")
            if (depth <= 0 && /\}/) in_trait = 0
        }
    ' "$@"
}
listing() {
    find crates/fencing crates/fencing-core crates/fencing-election crates/fencing-etcd \
        crates/fencing-zookeeper crates/fencing-kube crates/fencing-postgres crates/fencing-http \
        crates/fencing-testkit -path '*/src/*' -name '*.rs' | LC_ALL=C sort |
        while read -r file; do declarations "$file"; done | LC_ALL=C sort
}
case "${1:-check}" in
update) listing > api/public-api.txt ;;
check)
    if ! diff -u api/public-api.txt <(listing); then
        echo "the public API changed (above: - committed, + now); if on purpose," \
             "run scripts/lib/public-api.sh update and say so in CHANGELOG.md" >&2
        exit 1
    fi
    ;;
*) echo "usage: $0 [check|update]" >&2; exit 2 ;;
esac
