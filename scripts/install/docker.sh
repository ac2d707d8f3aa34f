#!/usr/bin/env bash
# Installs and starts what the container tests need (idempotent):
#   - Debian's docker.io (dockerd and containerd) when no dockerd is installed;
#   - a running daemon: CI starts with none, so dockerd is started in the
#     background (log in $FENCING_CACHE/dockerd.log) unless one answers.
# No image registry is reachable here: the tests build their images from
# local root file systems (scripts/lib/rootfs.sh).
set -euo pipefail

die() {
    echo "docker.sh: $*" >&2
    exit 1
}

# shellcheck source=../lib/apt.sh
. "$(dirname "$0")/../lib/apt.sh"

cache="${FENCING_CACHE:-$HOME/.cache/fencing}"
mkdir -p "$cache"

if ! command -v dockerd >/dev/null 2>&1; then
    apt_install_without_services docker.io iptables
fi
command -v docker >/dev/null 2>&1 || die "docker client missing after installing docker.io"

if docker info >/dev/null 2>&1; then
    echo "docker: reusing the running daemon ($(docker version --format '{{.Server.Version}}'))"
    exit 0
fi

# containerd is started by dockerd itself when it is not running.
nohup dockerd >"$cache/dockerd.log" 2>&1 &
for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then
        echo "docker: started dockerd $(docker version --format '{{.Server.Version}}') (log $cache/dockerd.log)"
        exit 0
    fi
    sleep 1
done
die "dockerd did not answer within 60 s:
$(tail -20 "$cache/dockerd.log")"
