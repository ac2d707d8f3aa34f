#!/usr/bin/env bash
# Builds integration/anchors/java/curator-mutex (Apache Curator's
# InterProcessMutex, used by ZooKeeper interop tests) into one runnable jar in
# the fencing cache.
# Idempotent: rebuilds only when the sources' content hash changed or the jar
# is missing, and prints one line saying which. Run it from any directory;
# it leaves no target/ directory in the work tree.
set -euo pipefail

cd "$(dirname "$0")/../.."
src=integration/anchors/java/curator-mutex
bin_dir="${FENCING_CACHE:-$HOME/.cache/fencing}/bin"
jar="$bin_dir/curator-mutex.jar"
stamp="$jar.stamp"

command -v java >/dev/null || { echo "curator-interop: 'java' not found on PATH" >&2; exit 1; }
command -v mvn >/dev/null || { echo "curator-interop: 'mvn' not found on PATH" >&2; exit 1; }

# A content hash (not mtimes), over pom.xml and everything under src/, plus
# the Java version, so a JDK change rebuilds too.
hash=$( { java -version 2>&1; find "$src/pom.xml" "$src/src" -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum; } \
        | sha256sum | cut -d' ' -f1)

if [[ -f "$jar" && -f "$stamp" && "$(cat "$stamp")" == "$hash" ]]; then
    echo "curator-interop: reused $jar"
    exit 0
fi

mkdir -p "$bin_dir"
build=$(mktemp -d "${TMPDIR:-/tmp}/curator-mutex-build.XXXXXX")
trap 'rm -rf "$build"' EXIT
# The pom reads its build directory from -DbuildDirectory, so nothing is
# written into the work tree. Maven's own output goes to stderr: stdout is the
# one status line.
mvn -q -B -Dstyle.color=never -f "$src/pom.xml" -DbuildDirectory="$build" package >&2
shaded=$(find "$build" -maxdepth 1 -name 'curator-mutex-*.jar' ! -name 'original-*' | head -n1)
[[ -n "$shaded" ]] || { echo "curator-interop: maven produced no jar in $build" >&2; exit 1; }
# Copy to a temp name and rename, so a concurrent reader never runs half a file.
cp "$shaded" "$jar.tmp.$$"
mv -f "$jar.tmp.$$" "$jar"
echo "$hash" > "$stamp"
echo "curator-interop: built $jar"
