#!/usr/bin/env bash
# The planted-bug zoo: applies each patch of integration/planted to a
# scratch copy of the work tree (never to the tree itself), runs the check
# its header names, and prints the catch matrix: a bug is caught when that
# check fails with the patch applied. See docs/safety-net.md.
#
#   scripts/planted.sh                    every bug (on-demand; needs the
#                                         clusters scripts/test.sh installs)
#   scripts/planted.sh --sample           the bugs whose header says
#                                         "sample: yes" (no cluster; the
#                                         test command runs this), and
#                                         whether every patch still applies
#   scripts/planted.sh --baseline NAME... also runs each check without its
#                                         patch first, which must pass
#   scripts/planted.sh --dir DIR          the patches of DIR instead (e.g.
#                                         mutants, scripts/mutants.sh --verify)
#   scripts/planted.sh --campaigns        also runs each bug's campaign (its
#                                         header's "campaign:" arguments) on
#                                         the patched tree: does the fault
#                                         campaign see it too?
#
# A patch's header (lines before the diff):
#   # breaks: what the bug does
#   # catch: integration TEST    a test of the integration binary, exactly
#   # catch: cli FILTER          fencing-cli's tests matching FILTER
#   # catch: cargo ARGS...       `cargo test ARGS...` in the scratch copy
#   # sample: yes                cheap enough for the test command
#   # campaign: ARGS...          `campaign run ARGS...` for --campaigns
#   # missed by: CHECK           a check that does not see it (documented)
#
# Exit status: 0 when every bug was caught; 1 when one was missed, its
# patch no longer applies or builds, or (--baseline) its check fails
# without it.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

sample=false baseline=false campaigns=false
names=() dir=integration/planted
while [ $# -gt 0 ]; do
    arg=$1; shift
    case "$arg" in
        --dir) dir=$(realpath "$1"); shift ;;
        --sample) sample=true ;;
        --baseline) baseline=true ;;
        --campaigns) campaigns=true ;;
        -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
        -*) echo "planted.sh: unknown option $arg" >&2; exit 2 ;;
        *) names+=("$arg") ;;
    esac
done

cache="${FENCING_CACHE:-$HOME/.cache/fencing}/planted"
scratch="$cache/src"
logs="$cache/logs"
mkdir -p "$scratch" "$logs"
# The sample builds only library tests, whose artifacts never land where
# the workspace's binaries are linked, so it shares the workspace's build
# (on a fresh machine it compiles one crate, not the dependencies again).
# The whole zoo builds binaries of the patched tree (the campaign, the
# test helpers, fence), which must never replace the workspace's own: it
# builds in a target directory of its own.
if $sample; then
    target="${CARGO_TARGET_DIR:-$repo/target}"
else
    target="$cache/target"
fi

header() { sed -n "s/^# $2: //p" "$1"; }

patches=()
if [ ${#names[@]} -gt 0 ]; then
    for n in "${names[@]}"; do patches+=("$dir/$n.patch"); done
else
    for p in "$dir"/*.patch; do
        if ! $sample || [ "$(header "$p" sample)" = yes ]; then patches+=("$p"); fi
    done
fi

# The work tree's tracked files, copied over the scratch copy. Without
# --times: a file put back after a patch gets a new mtime, so cargo
# rebuilds it (an old mtime would look older than the patched build).
sync_scratch() {
    local f
    git ls-files -z | while IFS= read -r -d '' f; do
        [ -f "$f" ] || continue
        cmp -s "$f" "$scratch/$f" 2>/dev/null && continue
        mkdir -p "$scratch/$(dirname "$f")"
        cp "$f" "$scratch/$f"
    done
}

# cargo test's arguments for a catch line.
catch_args() {
    local kind rest
    read -r kind rest <<<"$1"
    case "$kind" in
        integration) echo "-p fencing-integration-tests --test integration -- --exact $rest" ;;
        cli) echo "-p fencing-cli -- $rest" ;;
        cargo) echo "$rest" ;;
        *) echo "planted.sh: unknown catch kind '$kind'" >&2; return 1 ;;
    esac
}

# run_check LOG ARGS...: builds, then runs. 0 passed, 1 failed, 2 did not build.
run_check() {
    local log=$1; shift
    local -a args
    read -r -a args <<<"$*"
    local split=${#args[@]} i
    for i in "${!args[@]}"; do [ "${args[$i]}" = -- ] && { split=$i; break; }; done
    (cd "$scratch" && CARGO_TARGET_DIR="$target" \
        cargo test --profile ci --locked --no-run -q "${args[@]:0:$split}") >>"$log" 2>&1 || return 2
    (cd "$scratch" && CARGO_TARGET_DIR="$target" RUST_TEST_THREADS=1 \
        timeout 900 cargo test --profile ci --locked -q "${args[@]}") >>"$log" 2>&1 || return 1
    return 0
}

# The tests a failed check named, for the matrix.
failed_tests() {
    sed -n 's/^\(test \)\{0,1\}\([A-Za-z0-9_:]*\) --- FAILED$/\2/p; s/^    \([A-Za-z0-9_:]*\)$/\1/p' "$1" |
        sort -u | head -3 | paste -sd, -
}

# run_campaign NAME ARGS: the patched tree's campaign; prints its verdict.
run_campaign() {
    local name=$1 args=$2 rc=0 log="$logs/$1.campaign.log"
    local out="$cache/campaigns/$name"
    rm -rf "$out"
    (cd "$scratch" && CARGO_TARGET_DIR="$target" cargo build --profile ci --locked -q \
        -p fencing-campaign --bins) >"$log" 2>&1 || { echo "campaign did not build"; return; }
    # shellcheck disable=SC2086
    "$target/ci/campaign" run $args --out "$out" >>"$log" 2>&1 || rc=$?
    case $rc in
        0) echo "campaign MISSED" ;;
        1) echo "campaign caught" ;;
        3) echo "campaign fell short of its floors" ;;
        *) echo "campaign could not run (exit $rc)" ;;
    esac
}

rows=() failed=0
# The sample runs two bugs, but every patch must still apply: a patch
# that no longer fits the code is caught by the test command, not by the
# next person to run the zoo.
if $sample; then
    sync_scratch
    for patch in "$dir"/*.patch; do
        abs=$(realpath "$patch")
        if ! (cd "$scratch" && git apply --check "$abs") >/dev/null 2>&1; then
            rows+=("$(basename "$patch" .patch)|every patch must apply|PATCH NO LONGER APPLIES|-")
            failed=1
        fi
    done
fi
for patch in "${patches[@]}"; do
    name=$(basename "$patch" .patch)
    [ -f "$patch" ] || { echo "planted.sh: no $patch" >&2; exit 2; }
    catch=$(header "$patch" catch)
    args=$(catch_args "$catch")
    log="$logs/$name.log"
    : >"$log"
    : >"$log.baseline"
    sync_scratch
    if $baseline; then
        echo "-- $name: the check without the bug"
        if ! run_check "$log.baseline" "$args" || ! grep -q '^running [1-9]' "$log.baseline"; then
            rows+=("$name|$catch|CHECK FAILS OR RUNS NOTHING WITHOUT THE BUG|-")
            failed=1
            continue
        fi
    fi
    echo "-- $name: $(header "$patch" breaks)"
    abs=$(realpath "$patch")
    if ! (cd "$scratch" && git apply "$abs") >>"$log" 2>&1; then
        rows+=("$name|$catch|PATCH NO LONGER APPLIES|-")
        failed=1
        continue
    fi
    started=$SECONDS
    rc=0
    run_check "$log" "$args" || rc=$?
    took=$((SECONDS - started))
    # A filter that matches no test passes, and catches nothing.
    grep -q '^running [1-9]' "$log" || rc=3
    case $rc in
        1) verdict=caught; by=$(failed_tests "$log"); [ -n "$by" ] && catch="$catch [failed: $by]" ;;
        2) verdict="PATCHED TREE DOES NOT BUILD"; failed=1 ;;
        3) verdict="NO TEST RAN"; failed=1 ;;
        *) verdict=MISSED; failed=1 ;;
    esac
    echo "   $verdict in ${took} s (log: $log)"
    if $campaigns && [ -n "$(header "$patch" campaign)" ]; then
        started=$SECONDS
        seen=$(run_campaign "$name" "$(header "$patch" campaign)")
        catch="$catch; $seen in $((SECONDS - started)) s"
        echo "   $seen"
    fi
    rows+=("$name|$catch|$verdict|$took")
done
sync_scratch

echo
printf '%-30s %-9s %6s  %s\n' "planted bug" verdict "secs" "check"
for row in "${rows[@]}"; do
    IFS='|' read -r name catch verdict took <<<"$row"
    printf '%-30s %-9s %6s  %s\n' "$name" "$verdict" "$took" "$catch"
done
exit "$failed"
