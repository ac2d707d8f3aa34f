# Shared by scripts/install/*.sh (sourced, not run). The caller defines
# die() first. apt output goes to a log shown only when something fails.

apt_updated=0
apt_log="$(mktemp)"
trap 'rm -f "$apt_log"' EXIT

# Installs Debian packages, running `apt-get update` first unless the
# package lists are less than an hour old (each installer is a process of
# its own: without that, one test run would update them five times).
apt_install() {
    command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install $* by hand"
    if [ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -mmin -60 2>/dev/null | head -1)" ]; then
        apt_updated=1
    fi
    if [ "$apt_updated" = 0 ]; then
        apt-get update -qq >"$apt_log" 2>&1 || die "apt-get update failed:
$(tail -20 "$apt_log")"
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" \
        >"$apt_log" 2>&1 || die "apt-get install $* failed:
$(tail -20 "$apt_log")"
}

# Installs packages that ship a service without letting them start it: the
# tests run servers of their own. invoke-rc.d consults policy-rc.d, and 101
# means "action forbidden"; an existing policy-rc.d is put back afterwards.
apt_install_without_services() {
    local policy=/usr/sbin/policy-rc.d backup=""
    if [ -e "$policy" ]; then
        backup="$(mktemp)"
        cp -p "$policy" "$backup"
    fi
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    local status=0
    (apt_install "$@") || status=$?
    if [ -n "$backup" ]; then
        mv -f "$backup" "$policy"
    else
        rm -f "$policy"
    fi
    [ "$status" = 0 ] || exit "$status"
}
