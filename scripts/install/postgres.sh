#!/usr/bin/env bash
# Installs what the PostgreSQL real-server tests need, skipping whatever is
# already there (idempotent):
#   - the Debian PostgreSQL server (the `postgresql` package, which pulls in
#     the distribution's versioned server, e.g. postgresql-15) when no
#     /usr/lib/postgresql/<ver>/bin has both `initdb` and `postgres`;
#     the package must not start its own cluster: the tests run throwaway
#     servers of their own (integration/harness/src/postgres/server.rs picks the newest
#     /usr/lib/postgresql/*/bin).
set -euo pipefail

die() {
    echo "postgres.sh: $*" >&2
    exit 1
}

# shellcheck source=../lib/apt.sh
. "$(dirname "$0")/../lib/apt.sh"

# The newest /usr/lib/postgresql/<ver>/bin with a server in it, or nothing.
newest_bin() {
    local dir best="" best_ver=-1 ver
    for dir in /usr/lib/postgresql/*/bin; do
        [ -x "$dir/initdb" ] && [ -x "$dir/postgres" ] || continue
        ver="$(basename "$(dirname "$dir")")"
        ver="${ver%%.*}"
        case "$ver" in '' | *[!0-9]*) continue ;; esac
        if [ "$ver" -gt "$best_ver" ]; then
            best_ver="$ver"
            best="$dir"
        fi
    done
    echo "$best"
}

# --- PostgreSQL server (Debian) ---------------------------------------------
bin="$(newest_bin)"
if [ -n "$bin" ]; then
    echo "postgres: reusing $bin ($("$bin/postgres" --version))"
else
    apt_install_without_services postgresql
    # If a cluster got started anyway (a service manager, a package script
    # that ignores policy-rc.d), stop it: the tests need no system server.
    if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet postgresql 2>/dev/null; then
        systemctl stop postgresql || true
    fi
    if command -v pg_lsclusters >/dev/null 2>&1; then
        pg_lsclusters --no-header 2>/dev/null | while read -r ver name _port status _rest; do
            case "$status" in
                online*) pg_ctlcluster "$ver" "$name" stop >/dev/null 2>&1 || true ;;
            esac
        done
    fi
    bin="$(newest_bin)"
    [ -n "$bin" ] || die "no /usr/lib/postgresql/*/bin with initdb and postgres after installing postgresql"
    echo "postgres: installed $bin ($("$bin/postgres" --version))"
fi
