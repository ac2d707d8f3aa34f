#!/usr/bin/env bash
# The whole test suite, as README.md documents it. Installs what is missing
# first, then runs every test in the workspace and the demo end to end.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo not found: install Rust with rustup first" >&2
    exit 1
fi

# Each backend adds an installer here (cluster binaries, cached outside the
# checkout in ${FENCING_CACHE:-$HOME/.cache/fencing}); they are idempotent.
# Docker, etcd, ZooKeeper and kube-apiserver first: the Compose images are
# built from them (on a fresh machine the glob's order would build the
# images before kube-apiserver exists).
shopt -s nullglob
ran=" "
for installer in scripts/install/docker.sh scripts/install/etcd.sh \
                 scripts/install/zookeeper.sh scripts/install/kube-apiserver.sh \
                 scripts/install/*.sh; do
    [[ "$ran" == *" $installer "* ]] && continue
    ran+="$installer "
    echo "== $installer"
    bash "$installer"
done

bash scripts/check.sh

echo "== cargo test (unit, conformance, crash, CLI, doc tests)"
cargo test --workspace --locked

echo "== fence demo (the README's main job)"
cargo run --locked -q -p fencing-cli --bin fence -- demo

echo "== docker compose: the etcd and ZooKeeper services for real, faults through Docker"
bash scripts/compose-test.sh

# The benchmarks start helper processes (the holder binary) from the same
# release directory, so build every integration binary first.
cargo build --locked -q --release -p fencing-integration --bins
# The fence-run campaign runs the CLI from the same directory.
cargo build --locked -q --release -p fencing-cli --bin fence

# Seeded fault campaigns on real clusters in network namespaces: partitions,
# pauses and kills while clients lock and write through gates; the history
# is checked (exit 1 on a violation, or on too few grants or faults). Fixed
# seeds keep CI reproducible; scripts/campaign.sh runs others. Each run must
# reach 300 grants: etcd and Kubernetes make fewer grants per minute under
# these faults than ZooKeeper (a waiter's session dies with its member; an
# apiserver takes seconds to restart), so they run longer.
# The elect runs make the clients LeaderElector candidates doing gated work;
# the fence-run run makes them run `fence run`, whose command (half of them
# ignoring SIGTERM) writes with FENCING_TOKEN.
# local runs LocalSource clients on one directory (client and clock faults);
# kube runs kube-apiserver on three etcd members (apiserver kills and
# pauses, Lease deletion, and the etcd faults; the clients are a user bound
# by deploy/kubernetes/rbac.yaml only). Every client also writes to
# a storage process (FencingLayer over a FileGate) that is killed and
# paused, and (lock workload, etcd and ZooKeeper) through the cluster's
# guarded write; with --postgres also to a PostgreSQL row through
# FencedUpdate and to a ledger row behind a FenceTable, the server crashed
# and paused too. The third client ignores
# its loss on purpose (careless3). With --anchor the fourth client is
# another library on the same lock (Go's concurrency.Mutex, Curator,
# client-go), whose late writes must be refused. client-go's release after
# its own pause clears the next holder's Lease: the checker excuses that
# holder, kubernetes::interop pins the bug down. kube runs longer, as
# client-go's slower retries leave fewer grants (314 in 170 s at seed 12).
campaign_out="${FENCING_CACHE:-$HOME/.cache/fencing}/campaigns"
for run in "local 60 lock --postgres" "zk 110 lock --postgres --anchor" "zk38 90 lock" \
           "etcd 170 lock --anchor" "etcd34 150 lock" "kube 210 lock --postgres --anchor" \
           "zk 60 elect" "etcd 160 elect" "zk 140 fence-run"; do
    set -- $run
    out="$campaign_out/$1-$3"
    echo "== fault campaign: $1, $3 workload, for $2 s (history and timeline in $out)"
    rm -rf "${out:?}"
    "${CARGO_TARGET_DIR:-target}/release/campaign" run --backend "$1" --seconds "$2" --seed 12 \
        --min-grants 300 --min-faults 40 --workload "$3" --out "$out" "${@:4}"
done

echo "== etcd cycle benchmark: EtcdSource vs Go concurrency.Mutex vs the two-commit floor, requests per cycle (figures)"
"${CARGO_TARGET_DIR:-target}/release/cycle-bench" --runs 3 --blocks 5

echo "== etcd benchmark: EtcdSource vs Go concurrency.Mutex (figures, not a pass/fail check)"
cargo run --locked -q --release -p fencing-integration --bin anchor-bench -- --backend etcd --iterations 40

echo "== etcd held-locks benchmark: N locks held from one source vs Go with one session (figures)"
cargo run --locked -q --release -p fencing-integration --bin held-bench -- --sizes 10,1000,10000 --in-flight 64 --idle-secs 4

echo "== ZooKeeper held-locks benchmark: N locks held from one source vs Curator with one client (figures)"
cargo run --locked -q --release -p fencing-integration --bin held-bench -- --backend zk --sizes 10,1000,10000 --in-flight 64 --idle-secs 4

echo "== ZooKeeper benchmark: ZkSource vs Curator InterProcessMutex (figures, not a pass/fail check)"
cargo run --locked -q --release -p fencing-integration --bin anchor-bench -- --backend zk --iterations 40

echo "== Kubernetes benchmark: KubeLeaseSource vs client-go leaderelection (figures, not a pass/fail check)"
cargo run --locked -q --release -p fencing-integration --bin anchor-bench -- --backend kube --iterations 40

echo "== gate benchmark: guarded vs plain PostgreSQL UPDATE, MemoryGate admit (figures, not a pass/fail check)"
cargo run --locked -q --release -p fencing-integration --bin gate-bench -- --iterations 500
