#!/usr/bin/env bash
# Hunts for failing campaign seeds: runs the fault campaign over a sweep of
# seeds and of focused fault mixes per backend (a mix that concentrates a
# few fault kinds finds what the full mix dilutes), and prints every
# failing run with the command line that replays it. See
# docs/fault-campaign.md#hunting.
#
#   scripts/hunt.sh                       the default sweep (below)
#   scripts/hunt.sh --seeds 1,2,3 --seconds 60 --backends zk,etcd
#   scripts/hunt.sh --mix "zk partition-client,pause-leader"
#
# Each run injects faults for --seconds (default 45) after its cluster is
# up (about 20 s more). The default sweep is 12 runs, about 15 minutes on
# 2 cores. Needs root and the clusters scripts/test.sh installs.
# Exit status: 0 when no run found a violation, 1 when one did, 2 when a
# run could not start.
set -euo pipefail
cd "$(dirname "$0")/.."

# backend|fault kinds ("all": every kind of the backend's lanes)|seeds
default_mixes=(
    "zk|partition-client,partition-follower,pause-client,pause-leader|7,12,3"
    "zk|depose-leader,partition-leader,pause-client|7,12"
    "etcd|partition-leader,depose-leader,depose-distant-leader,pause-client|7,12"
    "etcd|partition-client,pause-leader,kill-client,clock-fast|7,12"
    "kube|kill-apiserver,pause-apiserver,pause-client|7,12"
    "local|pause-client,clock-fast,wall-jump-back|7"
    "pg|promote-standby,partition-leader,pause-client,wall-jump-forward|7,12"
)
seconds=45 seeds="" backends="" mixes=()
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds=$2; shift 2 ;;
        --seeds) seeds=$2; shift 2 ;;
        --backends) backends=$2; shift 2 ;;
        --mix) read -r b kinds <<<"$2"; mixes+=("$b|$kinds|"); shift 2 ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        *) echo "hunt.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ ${#mixes[@]} -gt 0 ] || mixes=("${default_mixes[@]}")

export FENCING_CACHE="${FENCING_CACHE:-$HOME/.cache/fencing}"
target="${CARGO_TARGET_DIR:-target}/ci"
cargo build --profile ci --locked -q -p fencing-campaign --bins
out_root="$FENCING_CACHE/hunt"
mkdir -p "$out_root"
summary="$out_root/summary.txt"
: >"$summary"

started=$SECONDS runs=0 failures=0 broken=0
for mix in "${mixes[@]}"; do
    IFS='|' read -r backend kinds mix_seeds <<<"$mix"
    if [ -n "$backends" ] && [[ ",$backends," != *",$backend,"* ]]; then continue; fi
    mix_seeds=${seeds:-$mix_seeds}
    for seed in ${mix_seeds//,/ }; do
        [ -n "$seed" ] || continue
        args=(run --backend "$backend" --seed "$seed" --seconds "$seconds")
        [ "$kinds" = all ] || args+=(--faults "$kinds")
        name="$backend-${kinds//,/+}-$seed"
        out="$out_root/$name"
        rm -rf "$out"
        run_started=$SECONDS rc=0
        "$target/campaign" "${args[@]}" --out "$out" >"$out.log" 2>&1 || rc=$?
        took=$((SECONDS - run_started))
        runs=$((runs + 1))
        case $rc in
            0) verdict=held ;;
            1) verdict=VIOLATION; failures=$((failures + 1)) ;;
            3) verdict="held (short of floors)" ;;
            *) verdict="COULD NOT RUN (exit $rc, see $out.log)"; broken=$((broken + 1)) ;;
        esac
        line="$verdict  ${took}s  campaign ${args[*]}"
        echo "$line" | tee -a "$summary"
        if [ "$rc" = 1 ]; then
            grep -m3 -i "violat\|overlap\|stale" "$out.log" | sed 's/^/    /' | tee -a "$summary" || true
        fi
    done
done
echo "$runs runs in $(( (SECONDS - started) / 60 )) min; $failures found a violation; $broken could not run" | tee -a "$summary"
[ "$failures" = 0 ] || exit 1
[ "$broken" = 0 ] || exit 2
