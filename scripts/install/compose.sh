#!/usr/bin/env bash
# Provides `docker compose` v2 (the CLI plugin, with `up --wait`), idempotent:
# built from the Go module of Docker Compose at $COMPOSE_VERSION into
# ${FENCING_CACHE:-$HOME/.cache/fencing}/bin/docker-compose-$COMPOSE_VERSION
# and linked into /usr/local/lib/docker/cli-plugins, where the docker CLI
# looks for plugins. An installed plugin that already answers is reused.
#
# `go install` of the module is refused (its go.mod has replace and exclude
# directives), so a one-line main module requires it, copies those
# directives from its go.mod, and builds its cmd package. v5.6.0 is the
# newest that this machine's Go builds.
set -euo pipefail

COMPOSE_VERSION=v5.6.0
MODULE=github.com/docker/compose/v5
FENCING_CACHE="${FENCING_CACHE:-$HOME/.cache/fencing}"
BIN="$FENCING_CACHE/bin/docker-compose-$COMPOSE_VERSION"
PLUGIN_DIR=/usr/local/lib/docker/cli-plugins

die() {
    echo "compose.sh: $*" >&2
    exit 1
}

command -v docker >/dev/null 2>&1 || die "no docker client (scripts/install/docker.sh installs one)"

if [ ! -x "$BIN" ] || ! "$BIN" version >/dev/null 2>&1; then
    command -v go >/dev/null 2>&1 || die "go not found: needed to build Docker Compose"
    build_dir="$FENCING_CACHE/build/compose-$COMPOSE_VERSION"
    rm -rf "$build_dir"
    mkdir -p "$build_dir" "$(dirname "$BIN")"
    started=$SECONDS
    (
        cd "$build_dir"
        export GOFLAGS=-mod=mod
        gomod="$(go mod download -json "$MODULE@$COMPOSE_VERSION" |
            sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
        [ -f "$gomod" ] || { echo "no go.mod for $MODULE@$COMPOSE_VERSION" >&2; exit 1; }
        {
            echo "module fencing.local/compose"
            echo
            echo "go $(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod")"
            echo
            echo "require $MODULE $COMPOSE_VERSION"
            echo
            # Every replace and exclude directive, one-line or block form.
            awk '/^(replace|exclude) \($/ {block=1} block {print} /^\)$/ {block=0}
                 /^(replace|exclude) [^(]/ {print}' "$gomod"
        } >go.mod
        # No tidy: this module imports nothing, so tidy would drop the
        # requirement; -mod=mod fills go.sum while building.
        go build -trimpath -ldflags "-s -w -X $MODULE/internal.Version=$COMPOSE_VERSION" \
            -o "$BIN.tmp" "$MODULE/cmd" >build.log 2>&1
    ) || die "building Docker Compose $COMPOSE_VERSION failed; see $build_dir/build.log:
$(tail -20 "$build_dir/build.log" 2>/dev/null)"
    mv -f "$BIN.tmp" "$BIN"
    echo "compose: built $BIN in $((SECONDS - started)) s"
fi

mkdir -p "$PLUGIN_DIR"
ln -sf "$BIN" "$PLUGIN_DIR/docker-compose"
docker compose version >/dev/null 2>&1 || die "docker compose does not answer after linking $BIN"
echo "compose: $(docker compose version)"
