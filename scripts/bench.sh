#!/usr/bin/env bash
# The performance figures, ours beside the Go/Java anchors on real clusters:
#   scripts/bench.sh [--out DIR] [--runs N] [--only cycles,held,waiters,anchors,gates,failover]
# Writes CSV files, their SVG charts and every benchmark's printed output
# into DIR (default: bench-results/<UTC date-time>), and names it at the end.
# Needs what the test command installs (etcd, ZooKeeper, kube-apiserver,
# PostgreSQL, the Go and Java anchors): run scripts/test.sh once first.
set -euo pipefail
cd "$(dirname "$0")/.."
out="bench-results/$(date -u +%Y%m%d-%H%M%S)" runs=5 only=cycles,held,waiters,anchors,gates,failover
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out="$2"; shift 2 ;;
        --runs) runs="$2"; shift 2 ;;
        --only) only="$2"; shift 2 ;;
        *) echo "bench.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
export FENCING_CACHE="${FENCING_CACHE:-$HOME/.cache/fencing}"
cargo build --locked -q --release -p fencing-bench --bins -p fencing-integration-tests --bin holder
bin="${CARGO_TARGET_DIR:-target}/release"
mkdir -p "$out"

# One benchmark: its output is shown and kept in $out/NAME.txt.
bench() {
    local name="$1"; shift
    echo "== $name: $*"
    "$@" 2>&1 | tee "$out/$name.txt"
}

plot() {
    "$bin/bench-plot" "$@"
}

# Whether the part named $1 was asked for (--only).
part() {
    [[ ",$only," == *",$1,"* ]]
}

# 1. Uncontended acquire + release on etcd: ours, Go's Mutex and the
#    two-commit floor, interleaved, with requests per cycle by method.
if part cycles; then
    for version in 3.6 3.4; do
        v="${version/./}"
        bench "etcd$v-cycles" "$bin/cycle-bench" --version "$version" --runs "$runs" --blocks 20 \
            --csv "$out/etcd$v-cycles.csv"
        plot --csv "$out/etcd$v-cycles.csv" --x run --y median_us --series side \
            --title "etcd $version uncontended acquire + release, median per run" \
            --x-label "run" --y-label "µs" --out "$out/etcd$v-cycles.svg"
    done
fi

# 2. Many locks held from one source (1, 16 and 256 acquires in flight),
#    beside the anchor with one session (Go on etcd, Curator on ZooKeeper);
#    idle CPU of the renewals while they are held. $runs runs: a CSV row
#    per run, the charts plot their median.
if part held; then
    for backend in etcd zk; do
        name=$backend; [ "$backend" = zk ] && name=ZooKeeper
        csv="$out/$backend-held.csv"
        bench "$backend-held" "$bin/held-bench" --backend "$backend" --sizes 1,10,100,1000,10000 \
            --runs "$runs" --csv "$csv"
        plot --csv "$csv" --x n --y grants_per_s --series series --log-x \
            --title "$name: acquire throughput with N locks held (side, acquires in flight)" \
            --x-label "locks held at once" --y-label "grants/s" --out "$out/$backend-held-throughput.svg"
        plot --csv "$csv" --x n --y kb_per_grant --series series --log-x \
            --title "$name: resident memory per held grant" \
            --x-label "locks held at once" --y-label "KiB per grant" --out "$out/$backend-held-memory.svg"
        plot --csv "$csv" --x n --y idle_cpu_ms_per_s --series side --log-x \
            --title "$name: client CPU while N locks are held (renewals only)" \
            --x-label "locks held at once" --y-label "CPU ms per second" --out "$out/$backend-held-idle-cpu.svg"
    done
fi

# 3. Hand-over down a queue of 1..256 waiters on one lock, each backend
#    beside its anchor (Kubernetes up to 64: every waiter polls); $runs
#    runs per W, the sides taking turns to go first.
if part waiters; then
    for backend in etcd zk kube; do
        counts=1,4,16,64,256
        [ "$backend" = kube ] && counts=1,4,16,64
        bench "$backend-waiters" "$bin/waiter-bench" --backend "$backend" --counts "$counts" \
            --runs "$runs" --csv "$out/$backend-waiters.csv"
        plot --csv "$out/$backend-waiters.csv" --x waiters --y gap_us --series side --log-x \
            --title "$backend: hand-over gap with W waiters queued" \
            --x-label "waiters" --y-label "µs between grants (median)" --out "$out/$backend-waiters-gap.svg"
        plot --csv "$out/$backend-waiters.csv" --x waiters --y requests_per_handover --series side --log-x \
            --title "$backend: requests per hand-over with W waiters queued" \
            --x-label "waiters" --y-label "requests per hand-over" --out "$out/$backend-waiters-requests.svg"
    done
fi

# 4. Uncontended and hand-over latency beside each anchor, $runs runs each.
if part anchors; then
    for backend in etcd zk kube; do
        for i in $(seq "$runs"); do
            bench "$backend-anchor-$i" "$bin/anchor-bench" --backend "$backend" --iterations 100
        done
    done
fi

# 5. Gates.
if part gates; then
    bench gates "$bin/gate-bench" --iterations 2000 --csv "$out"
    plot --csv "$out/gates-memory.csv" --x threads --y ns_per_admit --series layout --log-x \
        --title "MemoryGate admit: one resource shared or one per thread" \
        --x-label "threads" --y-label "ns per admit per thread" --out "$out/gates-memory.svg"
    plot --csv "$out/gates-postgres.csv" --x connections --y updates_per_s --series side --log-x \
        --title "PostgreSQL: fenced UPDATE (FencedUpdate) vs plain UPDATE" \
        --x-label "connections" --y-label "updates/s" --out "$out/gates-postgres.svg"
fi

# 6. Failover: holder SIGKILLed, time until a queued candidate holds, at
#    three lease lengths, ours beside each anchor.
if part failover; then
    bench failover "$bin/failover-bench" --ttls 2,5,15 --runs "$runs" --csv "$out/failover.csv"
    plot --csv "$out/failover.csv" --x ttl_s --y median_per_ttl --series side \
        --title "Failover after SIGKILL of the holder (median of $runs), as a fraction of the TTL" \
        --x-label "TTL (s)" --y-label "failover / TTL" --out "$out/failover.svg"
fi

echo "bench.sh: results in $out"
