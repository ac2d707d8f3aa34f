#!/usr/bin/env bash
# Local stand-ins for the images docker-compose.yml names (no image registry
# is reachable here), built from the same release binaries the suite runs
# and honouring the contract the compose file relies on. Idempotent: an
# image is rebuilt only when what it is made of changed.
#
#   fencing-local/etcd:v$ETCD_VERSION            for quay.io/coreos/etcd
#       etcd and etcdctl (scripts/install/etcd.sh builds both) in
#       /usr/local/bin on a Debian minbase root file system.
#   fencing-local/zookeeper:$ZOOKEEPER_VERSION   for zookeeper (Docker's)
#       the server jars (scripts/install/zookeeper.sh) on Debian with a
#       headless JRE, with the official image's contract: configuration in
#       /conf/zoo.cfg, data in /data and /datalog, an entrypoint that writes
#       /data/myid from ZOO_MY_ID, and `zkServer.sh start-foreground|status`.
#   fencing-local/kube-apiserver:v$KUBERNETES_VERSION  for registry.k8s.io's
#       the kube-apiserver scripts/install/kube-apiserver.sh builds, at
#       /usr/local/bin/kube-apiserver (the compose file names it as the
#       entrypoint), on Debian minbase.
#   fencing-local/curl                           for curlimages/curl
#       Debian's curl and sh, for the one-shot kube-init service.
#   fencing-local/postgres:$POSTGRES_VERSION      for postgres (Docker's)
#       Debian's server package, with the part of the official image's
#       contract the compose file uses: data in $PGDATA, initialised on
#       first start (POSTGRES_HOST_AUTH_METHOD for every host, then the
#       *.sh scripts in /docker-entrypoint-initdb.d), run as postgres, the
#       server programs on PATH.
#
# Prints the variables that point docker-compose.yml at them.
set -euo pipefail
cd "$(dirname "$0")/../.."

die() {
    echo "compose-images.sh: $*" >&2
    exit 1
}

# shellcheck source=../lib/apt.sh
. scripts/lib/apt.sh
# shellcheck source=../../versions.env
. versions.env

FENCING_CACHE="${FENCING_CACHE:-$HOME/.cache/fencing}"
cache="$FENCING_CACHE/images"
mkdir -p "$cache"
docker info >/dev/null 2>&1 || die "no Docker daemon answers (scripts/install/docker.sh starts one)"
# shellcheck source=../lib/rootfs.sh
. scripts/lib/rootfs.sh

MINBASE=fencing-local/debian:bookworm-slim
JRE=fencing-local/debian:bookworm-jre
ETCD_IMAGE="fencing-local/etcd:v$ETCD_VERSION"
ZK_IMAGE="fencing-local/zookeeper:$ZOOKEEPER_VERSION"
APISERVER_IMAGE="fencing-local/kube-apiserver:v$KUBERNETES_VERSION"
CURL_IMAGE=fencing-local/curl:bookworm
PG_BASE=fencing-local/debian:bookworm-postgres
PG_IMAGE="fencing-local/postgres:$POSTGRES_VERSION"

import_rootfs "$MINBASE" bookworm-minbase.tar
import_rootfs "$JRE" bookworm-jre.tar --include=openjdk-17-jre-headless
import_rootfs "$CURL_IMAGE" bookworm-curl.tar --include=curl,ca-certificates
import_rootfs "$PG_BASE" bookworm-postgres.tar --include="postgresql-$POSTGRES_VERSION"

# build_image TAG CONTEXT: builds CONTEXT/Dockerfile unless TAG already
# carries the hash of CONTEXT's files.
build_image() {
    local tag="$1" context="$2" hash
    hash="$(cd "$context" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
    if [ "$(docker image inspect "$tag" --format '{{index .Config.Labels "org.fencing.inputs"}}' 2>/dev/null)" = "$hash" ]; then
        echo "compose-images: reusing $tag ($hash)"
        return
    fi
    local log
    log="$(docker build -q --label "org.fencing.inputs=$hash" -t "$tag" "$context" 2>&1)" ||
        die "docker build of $tag failed:
$log"
    echo "compose-images: built $tag ($hash)"
}

context="$(mktemp -d)"
# Replaces apt.sh's trap: its log goes too.
trap 'rm -rf "$context" "$apt_log"' EXIT

# --- etcd --------------------------------------------------------------------
mkdir -p "$context/etcd"
for bin in etcd etcdctl; do
    src="$FENCING_CACHE/bin/$bin-v$ETCD_VERSION"
    [ -x "$src" ] || die "$src missing (scripts/install/etcd.sh builds it)"
    cp "$src" "$context/etcd/$bin"
done
cat >"$context/etcd/Dockerfile" <<DOCKERFILE
FROM $MINBASE
COPY etcd etcdctl /usr/local/bin/
EXPOSE 2379 2380
CMD ["/usr/local/bin/etcd"]
DOCKERFILE
build_image "$ETCD_IMAGE" "$context/etcd"

# --- ZooKeeper ---------------------------------------------------------------
zk_lib="$FENCING_CACHE/zookeeper-$ZOOKEEPER_VERSION/lib"
[ -f "$zk_lib/zookeeper-$ZOOKEEPER_VERSION.jar" ] || die "$zk_lib missing (scripts/install/zookeeper.sh fetches it)"
home="/apache-zookeeper-$ZOOKEEPER_VERSION-bin"
mkdir -p "$context/zk/lib"
cp "$zk_lib"/*.jar "$context/zk/lib/"
cat >"$context/zk/docker-entrypoint.sh" <<'SCRIPT'
#!/bin/bash
# The official image's contract: the server id comes from ZOO_MY_ID.
set -e
mkdir -p /data /datalog
[ -f /data/myid ] || echo "${ZOO_MY_ID:-1}" >/data/myid
exec "$@"
SCRIPT
cat >"$context/zk/zkServer.sh" <<SCRIPT
#!/bin/bash
# The two verbs of zkServer.sh that containers use.
case "\${1:-}" in
start-foreground)
    # JVMFLAGS: system properties, as the official image takes them.
    exec java -Xmx256m -Djava.net.preferIPv4Stack=true \\
        -Dorg.slf4j.simpleLogger.showDateTime=true \\
        \${JVMFLAGS:-} \\
        -cp "$home/lib/*" org.apache.zookeeper.server.quorum.QuorumPeerMain /conf/zoo.cfg ;;
status)
    # Serving only in a quorum: srvr then names the mode.
    exec 3<>/dev/tcp/127.0.0.1/2181 || exit 1
    echo srvr >&3
    grep -E '^Mode: (leader|follower|standalone)' <&3 ;;
*)
    echo "usage: zkServer.sh start-foreground|status" >&2
    exit 2 ;;
esac
SCRIPT
chmod +x "$context/zk/docker-entrypoint.sh" "$context/zk/zkServer.sh"
cat >"$context/zk/Dockerfile" <<DOCKERFILE
FROM $JRE
COPY lib $home/lib
COPY zkServer.sh $home/bin/zkServer.sh
COPY docker-entrypoint.sh /docker-entrypoint.sh
ENV PATH=$home/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    ZOOCFGDIR=/conf
WORKDIR $home
EXPOSE 2181 2888 3888
ENTRYPOINT ["/docker-entrypoint.sh"]
CMD ["zkServer.sh", "start-foreground"]
DOCKERFILE
build_image "$ZK_IMAGE" "$context/zk"

# --- kube-apiserver ----------------------------------------------------------
apiserver="$FENCING_CACHE/bin/kube-apiserver-v$KUBERNETES_VERSION"
[ -x "$apiserver" ] || die "$apiserver missing (scripts/install/kube-apiserver.sh builds it)"
mkdir -p "$context/kube"
cp "$apiserver" "$context/kube/kube-apiserver"
cat >"$context/kube/Dockerfile" <<DOCKERFILE
FROM $MINBASE
COPY kube-apiserver /usr/local/bin/kube-apiserver
ENTRYPOINT ["/usr/local/bin/kube-apiserver"]
DOCKERFILE
build_image "$APISERVER_IMAGE" "$context/kube"

# --- PostgreSQL --------------------------------------------------------------
mkdir -p "$context/pg"
cat >"$context/pg/docker-entrypoint.sh" <<'SCRIPT'
#!/bin/bash
# The official image's contract, as far as the compose file uses it.
set -euo pipefail
if [ "${1:0:1}" = - ]; then set -- postgres "$@"; fi
if [ "$1" = postgres ] && [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA" /var/run/postgresql
    chown -R postgres:postgres "$PGDATA" /var/run/postgresql
    chmod 700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
if [ "$1" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
    method="${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}"
    [ "$method" = trust ] || { echo "this stand-in knows POSTGRES_HOST_AUTH_METHOD=trust only" >&2; exit 1; }
    initdb -D "$PGDATA" -U "${POSTGRES_USER:-postgres}" --auth=trust -E UTF8
    echo "host all all all $method" >>"$PGDATA/pg_hba.conf"
    echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
    for f in /docker-entrypoint-initdb.d/*.sh; do
        [ -e "$f" ] && . "$f"
    done
fi
exec "$@"
SCRIPT
chmod +x "$context/pg/docker-entrypoint.sh"
cat >"$context/pg/Dockerfile" <<DOCKERFILE
FROM $PG_BASE
COPY docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENV PATH=/usr/lib/postgresql/$POSTGRES_VERSION/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PGDATA=/var/lib/postgresql/data
# As the official image: the data directory is the postgres user's (a
# named volume takes its owner), and the packaged default cluster is not used.
RUN rm -rf /var/lib/postgresql/$POSTGRES_VERSION /etc/postgresql/$POSTGRES_VERSION && \
    mkdir -p /var/lib/postgresql/data /var/run/postgresql && \
    chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql && \
    chmod 1777 /var/lib/postgresql/data
STOPSIGNAL SIGINT
EXPOSE 5432
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["postgres"]
DOCKERFILE
build_image "$PG_IMAGE" "$context/pg"

echo "FENCING_ETCD_IMAGE=$ETCD_IMAGE"
echo "FENCING_KUBE_APISERVER_IMAGE=$APISERVER_IMAGE"
echo "FENCING_CURL_IMAGE=$CURL_IMAGE"
echo "FENCING_ZOOKEEPER_IMAGE=$ZK_IMAGE"
echo "FENCING_POSTGRES_IMAGE=$PG_IMAGE"
