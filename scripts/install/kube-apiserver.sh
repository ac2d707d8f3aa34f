#!/usr/bin/env bash
# Provides the real kube-apiserver that the Kubernetes tests run
# (integration/harness/src/kubernetes/cluster/): kube-apiserver $KUBERNETES_VERSION of
# versions.env, built from the
# Go module k8s.io/kubernetes by scripts/kube/build-apiserver.sh into
#   ${FENCING_CACHE:-$HOME/.cache/fencing}/bin/kube-apiserver-v$KUBERNETES_VERSION
# or reused when it is already there (one line says which).
#
# A build takes about 9 minutes on 2 cores and 1.8 GiB of memory at its
# peak, downloads included; its log stays in the cache's build directory.
# The apiserver runs on the etcd 3.6 build of scripts/install/etcd.sh (which
# sorts, and so runs, before this script).
set -euo pipefail

# shellcheck source=../../versions.env
. "$(dirname "$0")/../../versions.env"
VERSION="v$KUBERNETES_VERSION"
here="$(cd "$(dirname "$0")" && pwd)"
FENCING_CACHE="${FENCING_CACHE:-$HOME/.cache/fencing}"
export FENCING_CACHE

bash "$here/../kube/build-apiserver.sh" "$VERSION"

etcd36="$FENCING_CACHE/bin/etcd-v$ETCD_VERSION"
if [ ! -x "$etcd36" ]; then
    echo "kube-apiserver.sh: $etcd36 is missing; the apiserver tests need it: run scripts/install/etcd.sh" >&2
    exit 1
fi
