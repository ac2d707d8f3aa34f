#!/usr/bin/env bash
# Lets a fresh clone reuse the cargo artifacts of the last passing run.
#
# Cargo decides that a workspace crate is stale when one of its files is
# newer than its last build, and a clone gives every file the time of the
# clone: so every CI run compiled every workspace crate again, in every
# profile and feature set the checks use (about 7 minutes of a warm run).
#
#   source-mtimes.sh record    after a passing run: the content (git blob
#                              id) of every tracked file, kept in the
#                              target directory
#   source-mtimes.sh restore   before a run: every file whose content is
#                              the recorded one gets an old mtime, so the
#                              artifacts built from that content count as
#                              fresh; a changed file keeps the clone's
#                              time and its crate is built again
#
# The record is by content, not by commit time: a run that failed or was
# abandoned may have built other contents later. `restore` deletes the
# record, so after a run that does not pass (and records nothing) the next
# one builds everything. Only a clean work tree takes part: the index's
# blob ids must be what is on disk.
set -euo pipefail
cd "$(dirname "$0")/../.."
record="${CARGO_TARGET_DIR:?source-mtimes.sh needs CARGO_TARGET_DIR}/.fencing-sources"
# Older than any build: 2000-01-01.
OLD=946684800

clean_tree() {
    git rev-parse --is-inside-work-tree >/dev/null 2>&1 &&
        [ -z "$(git status --porcelain --untracked-files=no)" ]
}

case "${1:-}" in
    record)
        clean_tree || { echo "source-mtimes: work tree not clean, nothing recorded"; exit 0; }
        git ls-files -s >"$record.tmp" && mv "$record.tmp" "$record"
        echo "source-mtimes: recorded $(wc -l <"$record") files for the next run"
        ;;
    restore)
        if [ ! -f "$record" ]; then
            echo "source-mtimes: no record of a passing run, every crate is built"
            exit 0
        fi
        if ! clean_tree; then
            rm -f "$record"
            echo "source-mtimes: work tree not clean, every crate is built"
            exit 0
        fi
        # Lines present in both (same mode, blob, stage and path) are
        # unchanged files.
        unchanged=$(comm -12 <(sort "$record") <(git ls-files -s | sort) | cut -f2)
        rm -f "$record"
        total=$(git ls-files | wc -l)
        kept=0
        if [ -n "$unchanged" ]; then
            kept=$(wc -l <<<"$unchanged")
            tr '\n' '\0' <<<"$unchanged" | xargs -0 touch -h -d "@$OLD"
        fi
        echo "source-mtimes: $kept of $total files as in the last passing run (their artifacts are reused), $((total - kept)) changed"
        ;;
    *)
        echo "usage: source-mtimes.sh record|restore" >&2
        exit 2
        ;;
esac
