# Shared by scripts/install/*.sh (sourced, not run): Debian root file systems
# made with debootstrap and imported as local images, since no image
# registry is reachable here. The caller defines die() and $cache (where the
# tarballs are kept) first.

has_image() { docker image inspect "$1" >/dev/null 2>&1; }

# The Debian mirror this machine's apt uses.
mirror() {
    local uri
    uri="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
    [ -n "$uri" ] || uri="$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)"
    [ -n "$uri" ] || die "cannot find the Debian mirror in /etc/apt/sources.list(.d)"
    echo "$uri"
}

# import_rootfs TAG TARBALL [debootstrap options...]: imports a cached root
# file system, making it with debootstrap first when it is not cached.
import_rootfs() {
    local tag="$1" tarball="$cache/$2"
    shift 2
    has_image "$tag" && return
    command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap
    if [ ! -s "$tarball" ]; then
        local dir started=$SECONDS
        dir="$(mktemp -d)"
        debootstrap --variant=minbase "$@" bookworm "$dir" "$(mirror)" >"$dir.log" 2>&1 ||
            die "debootstrap for $tag failed:
$(tail -20 "$dir.log")"
        rm -rf "$dir/var/cache/apt/archives"/*.deb "$dir/var/lib/apt/lists"/*
        tar -C "$dir" -c . >"$tarball.tmp"
        mv "$tarball.tmp" "$tarball"
        rm -rf "$dir" "$dir.log"
        echo "rootfs: made the root file system of $tag ($((SECONDS - started)) s)"
    fi
    docker import --change 'CMD ["/bin/sh"]' "$tarball" "$tag" >/dev/null
}
