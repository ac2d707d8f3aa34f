#!/usr/bin/env bash
# A fault campaign against a real cluster in network namespaces (root):
#   scripts/campaign.sh --backend local|zk|zk38|etcd|etcd34|kube|pg [--minutes N] [--seed S] [--out DIR] [--workload lock|elect|fence-run|coordinated] [--anchor] [--postgres] [--clients N --locks L] [--faults KIND,...]
# Builds the campaign binary, runs it, and leaves history.jsonl,
# timeline.html and the member/client logs in the output directory.
# Exit status 1 means a safety property was violated (the seed is printed).
set -euo pipefail
cd "$(dirname "$0")/.."
backend="" minutes=1 extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --backend) backend="$2"; shift 2 ;;
        --minutes) minutes="$2"; shift 2 ;;
        --seed|--out|--clients|--locks|--workload|--faults) extra+=("$1" "$2"); shift 2 ;;
        --anchor|--postgres) extra+=("$1"); shift ;;
        *) echo "campaign.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -n "$backend" ] || { echo "usage: scripts/campaign.sh --backend local|zk|zk38|etcd|etcd34|kube|pg [--minutes N]" >&2; exit 2; }
export FENCING_CACHE="${FENCING_CACHE:-$HOME/.cache/fencing}"
cargo build --locked -q --release -p fencing-campaign --bin campaign -p fencing-cli --bin fence
target_dir="${CARGO_TARGET_DIR:-target}"
exec "$target_dir/release/campaign" run --backend "$backend" --seconds "$((minutes * 60))" "${extra[@]}"
