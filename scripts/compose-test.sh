#!/usr/bin/env bash
# Runs every service of docker-compose.yml for real, on
# local stand-in images of the releases the suite runs (no image registry is
# reachable here; scripts/install/compose-images.sh builds them):
#   1. docker compose up -d --wait (health checks pass),
#   2. the CLI's external_clusters tests against the README's URLs (on
#      Kubernetes as the ServiceAccount kube-init made with rbac.yaml),
#   3. a newcomer's programs, built against the packed crates, on those URLs,
#   4. faults through Docker (integration/tests/tests/compose.rs): kill a member
#      while a lock is held and awaited, restart the etcd set, disconnect a
#      member from the network, promote the PostgreSQL standby,
#   5. docker compose down -v, also on failure or Ctrl-C; nothing is left.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install/docker.sh
bash scripts/install/compose.sh
eval "$(bash scripts/install/compose-images.sh | grep '^FENCING_.*_IMAGE=' | sed 's/^/export /')"

export FENCING_COMPOSE_PROJECT=fencing-ci
# The test command's build profile (scripts/test.sh sets it).
profile="${FENCING_PROFILE:-test}"
services=(etcd1 etcd2 etcd3 zk1 zk2 zk3 kube-etcd kube-apiserver kube-init postgres postgres-standby)
compose() { docker compose -p "$FENCING_COMPOSE_PROJECT" "$@"; }

cleanup() {
    compose down -v --remove-orphans --timeout 5 >/dev/null 2>&1 || true
    rm -rf .compose/kube
    local left
    left="$(docker ps -aq --filter "label=com.docker.compose.project=$FENCING_COMPOSE_PROJECT")"
    [ -z "$left" ] || echo "compose-test: containers left behind: $left" >&2
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cleanup
started=$SECONDS
compose up -d --wait --wait-timeout 180 "${services[@]}"
echo "compose-test: ${services[*]} healthy in $((SECONDS - started)) s ($FENCING_ETCD_IMAGE, $FENCING_ZOOKEEPER_IMAGE, $FENCING_KUBE_APISERVER_IMAGE, $FENCING_CURL_IMAGE, $FENCING_POSTGRES_IMAGE)"

etcd_url=etcd://127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379/fencing
zk_url=zk://127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183/fencing
kube_url="kube://my-app?kubeconfig=$PWD/.compose/kube/kubeconfig.yaml"
# PostgreSQL's demo and frozen run are the CLI's postgres test already (on a
# server of the harness); here its services meet the promotion test below.
FENCING_ETCD_URL=$etcd_url FENCING_ZK_URL=$zk_url FENCING_KUBE_URL=$kube_url \
    cargo test --workspace --locked -q --profile "$profile" --test external_clusters -- --ignored \
    --skip external_postgres

# A newcomer's programs (the README's, getting-started and migration ones),
# built by scripts/lib/packed.sh against the packed crates, on the same URLs.
newcomer() { # PROGRAM URL EXPECTED-LINE-PREFIX
    local out
    out=$(timeout 90 "${FENCING_CACHE:-$HOME/.cache/fencing}/packed/target/debug/$1" "$2" 2>&1) || {
        echo "$out"; echo "compose-test: $1 $2 failed" >&2; return 1; }
    grep -q "^$3" <<<"$out" || { echo "$out"; echo "compose-test: $1 $2 printed no '$3'" >&2; return 1; }
    echo "compose-test: $1 on ${2%%\?*}: $(grep "^$3" <<<"$out" | tail -1)"
}
newcomer quickstart-etcd "$etcd_url" "wrote balance=100 with token"
newcomer quickstart-leader "$zk_url" "wrote schedule=v1 as leader"
newcomer quickstart-leader "$kube_url" "wrote schedule=v1 as leader"
newcomer from-etcd-concurrency "$etcd_url" "wrote plan v3"
newcomer from-curator "$zk_url" "wrote balance=100"
newcomer from-client-go "$kube_url" "reconcile 3 with token"

# --workspace and the same profile: the same features and build as the
# suite's own run, so nothing rebuilds.
cargo test --workspace --locked -q --profile "$profile" --test compose -- --ignored --test-threads=1

cleanup
trap - EXIT
if docker volume ls -q | grep -q "^${FENCING_COMPOSE_PROJECT}_"; then
    echo "compose-test: volumes left behind" >&2
    exit 1
fi
echo "compose-test: passed in $((SECONDS - started)) s; everything taken down"
