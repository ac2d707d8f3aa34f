#!/usr/bin/env bash
# Runs every service of docker-compose.yml for real, on
# local stand-in images of the releases the suite runs (no image registry is
# reachable here; scripts/install/compose-images.sh builds them):
#   1. docker compose up -d --wait (health checks pass),
#   2. the CLI's external_clusters tests against the README's URLs (on
#      Kubernetes as the ServiceAccount kube-init made with rbac.yaml),
#   3. faults through Docker (integration/tests/tests/compose.rs): kill a member
#      while a lock is held and awaited, restart the etcd set, disconnect a
#      member from the network,
#   4. docker compose down -v, also on failure or Ctrl-C; nothing is left.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install/docker.sh
bash scripts/install/compose.sh
eval "$(bash scripts/install/compose-images.sh | grep '^FENCING_.*_IMAGE=' | sed 's/^/export /')"

export FENCING_COMPOSE_PROJECT=fencing-ci
# The test command's build profile (scripts/test.sh sets it).
profile="${FENCING_PROFILE:-test}"
services=(etcd1 etcd2 etcd3 zk1 zk2 zk3 kube-etcd kube-apiserver kube-init)
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
echo "compose-test: ${services[*]} healthy in $((SECONDS - started)) s ($FENCING_ETCD_IMAGE, $FENCING_ZOOKEEPER_IMAGE, $FENCING_KUBE_APISERVER_IMAGE, $FENCING_CURL_IMAGE)"

FENCING_ETCD_URL=etcd://127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379/fencing \
FENCING_ZK_URL=zk://127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183/fencing \
FENCING_KUBE_URL="kube://my-app?kubeconfig=$PWD/.compose/kube/kubeconfig.yaml" \
    cargo test --workspace --locked -q --profile "$profile" --test external_clusters -- --ignored

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
