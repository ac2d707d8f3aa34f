# Shared by scripts/test.sh (sourced): runs the test command's steps with
# their wall time, and prints the table of every step when the run ends,
# passed or not.
#   step NAME COMMAND...     runs COMMAND in the foreground as step NAME
#   step_bg NAME COMMAND...  runs it in the background, its output kept in a
#                            log that is printed when step_wait collects it
#   step_wait NAME           waits for a background step; fails as it did
# A step's time is its own wall time; background steps overlap the
# foreground ones, so the total is less than the column's sum.

steps_started=$SECONDS
steps_table=()
steps_dir="$(mktemp -d)"
declare -A steps_pid=()

steps_record() { # NAME SECONDS EXIT-STATUS [NOTE]
    local result=ok
    [ "$3" = 0 ] || result="FAILED ($3)"
    steps_table+=("$(awk -v n="$1" -v s="$2" -v r="$result${4:+, $4}" 'BEGIN { printf "%-58s %6d s %6.1f min  %s", n, s, s / 60, r }')")
}

step() {
    local name="$1" started=$SECONDS status=0
    shift
    echo "== $name"
    "$@" || status=$?
    steps_record "$name" $((SECONDS - started)) $status
    if [ $status != 0 ]; then
        echo "== $name failed after $((SECONDS - started)) s" >&2
        return $status
    fi
    echo "== $name: $((SECONDS - started)) s"
}

step_bg() {
    local name="$1" log
    shift
    log="$steps_dir/${#steps_pid[@]}.log"
    echo "== $name (in the background; its output follows when it ends)"
    (
        started=$SECONDS
        status=0
        "$@" >"$log" 2>&1 || status=$?
        echo "$((SECONDS - started)) $status" >"$log.done"
        exit $status
    ) &
    steps_pid[$name]="$!:$log"
}

step_wait() {
    local name="$1" pid log status=0 waited=$SECONDS
    pid="${steps_pid[$name]%%:*}"
    log="${steps_pid[$name]#*:}"
    wait "$pid" || status=$?
    unset "steps_pid[$name]"
    echo "== $name (background) output:"
    cat "$log"
    local took=0
    [ -f "$log.done" ] && read -r took _ <"$log.done"
    steps_record "$name (background)" "$took" $status "waited for it $((SECONDS - waited)) s"
    [ $status = 0 ] || { echo "== $name failed" >&2; return $status; }
}

# The table, on exit. CACHE_STATE, when set, says whether the run began on
# a cold or a warm cache.
steps_report() {
    local status=$?
    local pid
    for pid in "${steps_pid[@]%%:*}"; do kill "$pid" 2>/dev/null || true; done
    echo
    echo "== time per step (${CACHE_STATE:+cache: $CACHE_STATE; }exit status $status)"
    printf '%s\n' "${steps_table[@]}"
    local total=$((SECONDS - steps_started))
    awk -v s="$total" 'BEGIN { printf "%-58s %6d s %6.1f min\n", "total (wall)", s, s / 60 }'
    rm -rf "$steps_dir"
}
trap steps_report EXIT
