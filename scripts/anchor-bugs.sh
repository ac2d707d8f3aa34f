#!/usr/bin/env bash
# The anchors' own bugs, reproduced (docs/anchor-bugs.md):
#   scripts/anchor-bugs.sh [FILTER]
# Builds the anchor programs (etcd's Go concurrency package, client-go's
# leader election, Curator) into the fencing cache, then runs each test of
# the anchor_bugs target alone (the target is not part of `cargo test
# --workspace`) and prints one row per bug: did the anchor show it, did our
# crate stay correct, how long the test took. FILTER (a substring of a test
# name) runs only the matching ones. Exit status 1 when any test failed.
set -euo pipefail
cd "$(dirname "$0")/.."
filter="${1:-}"
export FENCING_CACHE="${FENCING_CACHE:-$HOME/.cache/fencing}"

bash scripts/install/go-interop.sh
bash scripts/install/client-go-interop.sh
bash scripts/install/curator-interop.sh

cargo=(cargo test --locked --profile ci -p fencing-integration-tests --test anchor_bugs)
"${cargo[@]}" --no-run -q

tests=(
    anchor_bugs::etcd::etcd_unlock_retry_deletes_a_newer_lock
    anchor_bugs::etcd::etcd_resign_forgets_its_key
    anchor_bugs::etcd::etcd_campaign_error_leaves_its_key
    anchor_bugs::zk::curator_release_during_connection_loss
    anchor_bugs::kube::kube_split_brain_past_the_renew_deadline
)

logs=$(mktemp -d "${TMPDIR:-/tmp}/anchor-bugs.XXXXXX")
rows=() failed=0
for t in "${tests[@]}"; do
    [[ -z "$filter" || "$t" == *"$filter"* ]] || continue
    log="$logs/${t##*::}.log"
    start=$(date +%s.%N)
    if "${cargo[@]}" -q -- --exact "$t" --nocapture >"$log" 2>&1; then
        status=pass
    else
        status=FAIL failed=1
    fi
    # The test's own time as libtest reports it (cargo may first wait for a
    # build lock another cargo holds); the wall time when there is none.
    secs=$(sed -n 's/.*finished in \([0-9.]*\)s.*/\1/p' "$log" | tail -n1)
    [[ -n "$secs" ]] || secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    secs=$(awk -v s="$secs" 'BEGIN { printf "%.1f", s }')
    # The test's verdict line: ANCHOR-BUG|bug|reproduced=..|ours-correct=..
    line=$(grep -m1 '^ANCHOR-BUG|' "$log" || true)
    if [[ -n "$line" ]]; then
        IFS='|' read -r _ bug anchor ours <<<"$line"
        anchor=${anchor#reproduced=} ours=${ours#ours-correct=}
    else
        bug=${t##*::} anchor="?" ours="?"
    fi
    rows+=("$bug|$anchor|$ours|$secs|$status")
done

printf '\n%-50s  %-44s  %-6s  %7s  %s\n' "bug" "anchor reproduced" "ours" "seconds" "test"
for r in "${rows[@]}"; do
    IFS='|' read -r bug anchor ours secs status <<<"$r"
    printf '%-50s  %-44s  %-6s  %7s  %s\n' "$bug" "$anchor" "$ours" "$secs" "$status"
done
echo "logs: $logs"
exit "$failed"
