#!/usr/bin/env bash
# What the partition tests and the fault campaign need (idempotent): iproute2
# (`ip netns`, veth, bridge), iptables, faketime, and strace (the durability
# test traces LocalSource's syscalls), and root to use them. They only
# touch namespaces they create themselves.
set -euo pipefail

die() {
    echo "netns.sh: $*" >&2
    exit 1
}

# shellcheck source=../lib/apt.sh
. "$(dirname "$0")/../lib/apt.sh"

[ "$(id -u)" = 0 ] || die "network namespaces need root"
missing=()
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
# The campaign's clock faults run clients under libfaketime.
command -v faketime >/dev/null 2>&1 || missing+=(faketime)
command -v strace >/dev/null 2>&1 || missing+=(strace)
if [ "${#missing[@]}" -gt 0 ]; then
    apt_install "${missing[@]}"
fi
ip netns list >/dev/null || die "ip netns does not work here"
echo "netns: $(ip -V), $(iptables --version), $(command -v faketime), $(command -v strace)"
