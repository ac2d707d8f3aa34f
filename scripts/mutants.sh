#!/usr/bin/env bash
# Mutation testing of the code that decides whether a grant is still held
# and whether a write is admitted (docs/mutation-testing.md):
#   scripts/mutants.sh [core|etcd|all] [--iterate] [--verify]
#
#   core     fencing-core's lease.rs, token.rs and gate/**, against
#            fencing-core's unit tests
#   etcd     fencing-etcd's session.rs and lock.rs, against its unit tests
#   all      both (the default)
#   --iterate    test again only what the last run of that phase did not
#                catch (cargo-mutants reads the previous mutants.out)
#   --verify     after the etcd phase, each survivor listed in
#                integration/mutants/etcd-survivors.tsv against the
#                real-cluster check named there, one mutant at a time
#                (scripts/planted.sh --dir; about 25 s a mutant)
#
# cargo-mutants is installed once, at the pinned version, under
# $FENCING_CACHE/tools. It copies the workspace to a scratch directory and
# mutates the copy, never this tree; its builds go to a target directory
# of their own, so that the test command's build is never overwritten with
# a mutated crate. Results go to $FENCING_CACHE/mutants/PHASE/mutants.out.
# The test module of gate/validating.rs is behind `cfg(all(test, ...))`,
# which cargo-mutants does not take for test code: it is left out by name.
# Only the unit tests run (`--lib`: each mutant builds one test binary,
# not the library, the tests/*.rs programs and every doctest as well,
# which more than doubled the time); one job at a time (2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."

version=27.1.0
export FENCING_CACHE="${FENCING_CACHE:-$HOME/.cache/fencing}"
tools="$FENCING_CACHE/tools"
out_root="$FENCING_CACHE/mutants"

phases=() iterate=() verify=false
for arg in "$@"; do
    case "$arg" in
        core | etcd) phases+=("$arg") ;;
        all) phases+=(core etcd) ;;
        --iterate) iterate=(--iterate) ;;
        --verify) verify=true ;;
        *) echo "mutants.sh: unknown argument $arg (core|etcd|all, --iterate, --verify)" >&2; exit 2 ;;
    esac
done
[ ${#phases[@]} -gt 0 ] || phases=(core etcd)

mutants="$tools/bin/cargo-mutants"
if ! { [ -x "$mutants" ] && "$mutants" mutants --version | grep -qx "cargo-mutants $version"; }; then
    echo "== installing cargo-mutants $version into $tools"
    cargo install --locked --quiet --version "$version" --root "$tools" cargo-mutants
fi

# Its own target directory: mutated builds never land in the shared one.
export CARGO_TARGET_DIR="$out_root/target"
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# Prints caught / (caught + missed) from a mutants.out directory, with the
# mutants that neither built nor finished in time shown apart.
score() { # LABEL DIR SECONDS
    python3 - "$@" <<'PY'
import json, sys
label, out, secs = sys.argv[1], sys.argv[2], int(sys.argv[3])
counts = {"CaughtMutant": 0, "MissedMutant": 0, "Timeout": 0, "Unviable": 0}
for o in json.load(open(f"{out}/mutants.out/outcomes.json"))["outcomes"]:
    if o["scenario"] != "Baseline" and o["summary"] in counts:
        counts[o["summary"]] += 1
caught, missed = counts["CaughtMutant"], counts["MissedMutant"]
tested = caught + missed
pct = f"{100 * caught / tested:.1f} %" if tested else "n/a"
print(f"{label}: score {caught}/{tested} = {pct} (caught / (caught + missed)); "
      f"timeouts {counts['Timeout']}, unviable {counts['Unviable']}; {secs} s")
PY
    if [ -s "$2/mutants.out/missed.txt" ]; then
        echo "survivors:"
        sed 's/^/  /' "$2/mutants.out/missed.txt"
    fi
}

run() { # PHASE CARGO-MUTANTS-ARGS...
    local phase="$1" started=$SECONDS status=0
    shift
    mkdir -p "$out_root/$phase"
    echo "== mutants: $phase"
    # Exit status 2 means survivors, 3 timeouts: the score says so; only a
    # failing baseline or a usage error (1, 4) stops the script.
    nice -n 19 "$mutants" mutants --jobs 1 --profile ci --cargo-arg=--locked \
        --timeout 90 --build-timeout 600 --output "$out_root/$phase" \
        --cargo-arg=--lib "${iterate[@]}" "$@" || status=$?
    case $status in 0 | 2 | 3) ;; *) echo "cargo-mutants failed ($status)" >&2; exit $status ;; esac
    score "$phase" "$out_root/$phase" $((SECONDS - started)) | tee "$out_root/$phase/score.txt"
    if [ ${#iterate[@]} -gt 0 ]; then
        echo "(--iterate: counts only the mutants tested again; those caught before are not in it)"
    fi
}

for phase in "${phases[@]}"; do
    case $phase in
        core) run core -p fencing-core \
            --file crates/fencing-core/src/lease.rs \
            --file crates/fencing-core/src/token.rs \
            --file 'crates/fencing-core/src/gate/**' \
            --exclude-re '^crates/fencing-core/src/gate/validating\.rs:.* tests::' ;;
        etcd) run etcd -p fencing-etcd \
            --file crates/fencing-etcd/src/session.rs \
            --file crates/fencing-etcd/src/lock.rs ;;
    esac
done

if $verify; then
    # The mutants' diffs as patches whose header names the check, applied
    # one at a time to a scratch copy by the planted-bug runner (its own
    # target directory; the clusters of scripts/test.sh's installers).
    patches="$out_root/verify"
    python3 scripts/lib/mutant_patches.py "$out_root/etcd/mutants.out" \
        integration/mutants/etcd-survivors.tsv "$patches" >/dev/null
    unset CARGO_TARGET_DIR
    bash scripts/planted.sh --dir "$patches"
fi
