#!/usr/bin/env bash
# One round of make chaos, as tests/chaos/chaos.py drew it (docs/chaos.md): one emulator with
# the round's start-up fault rules, two guests running its workload (smcfault chaos), the
# round's mid-run rules added (and, for the kill workload, guest b killed) once b's
# traffic reaches the device. Leaves everything the judge reads in RUN_DIR: the consoles,
# the event stream and trace, each guest's seconds from the action to its workload's end
# (NAME.took), the emulator's exit (emulator.status), fault-add.out, fault-list.txt.
# It judges nothing: tests/chaos/chaos.py does.
#
# Usage: tests/chaos/chaos-round.sh RUN_DIR
# Environment (set by tests/chaos/chaos.py): CHAOS_WORKLOAD, CHAOS_SCALE, CHAOS_IOT (the
# guests' socket timeout, s), CHAOS_DEADLINE (s), CHAOS_START and CHAOS_MID (fault specs,
# one a line); KERNEL, VARIANT.
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
source "$REPO_ROOT/scripts/topology.sh"

help_and_no_options "$@"
[ $# -eq 1 ] || usage_error "one RUN_DIR"
for v in CHAOS_WORKLOAD CHAOS_SCALE CHAOS_IOT CHAOS_DEADLINE; do
    [ -n "${!v:-}" ] || usage_error "$v is not set (tests/chaos/chaos.py sets it)"
done
check_artefacts
topo_init "$1"
# The guest's program is stopped 30 s before GUEST_TIMEOUT: past the deadline, so that a
# workload that overruns it is seen overrunning, not cut short.
GUEST_TIMEOUT=$((CHAOS_DEADLINE + 120))
# Kernel messages on the console as they come: a report must be seen even from a guest
# that never ends its program (tests/ismcheck/kernel_reports.py reads the console).
GUEST_APPEND_EXTRA="ismtest.verbose=1"

EMU_EXTRA=(--trace "$RUN_DIR/trace.jsonl")
while read -r spec; do [ -z "$spec" ] || EMU_EXTRA+=(--fault "$spec"); done <<<"${CHAOS_START:-}"
emu_start 2
words=(chaos "$CHAOS_WORKLOAD" "$CHAOS_SCALE" "$CHAOS_IOT" $((CHAOS_DEADLINE - 10)))
guest_start a "$RUN_DIR/ism0.sock" 10.0.0.1/24 on smcfault server 10.0.0.1 "${words[@]}" 10.0.0.1
guest_start b "$RUN_DIR/ism1.sock" 10.0.0.2/24 off smcfault client 10.0.0.1 "${words[@]}" 10.0.0.2

# The action comes once b's traffic flows (or after 60 s without: then it is noted).
if [ -n "${CHAOS_MID:-}" ] || [ "$CHAOS_WORKLOAD" = kill ]; then
    ismcheck wait_stream "$EMU_BIN" "$RUN_DIR/control.sock" \
        --function ism1 --min-bytes $((16 << 10)) --timeout 60 \
        || echo "b's traffic never reached 16 KiB; the action came anyway" >"$RUN_DIR/action-late.txt"
    while read -r spec; do
        [ -z "$spec" ] || "$EMU_BIN" fault --control "$RUN_DIR/control.sock" add "$spec" >>"$RUN_DIR/fault-add.out" 2>&1 \
            || echo "refused: $spec" >>"$RUN_DIR/fault-add.out"
    done <<<"${CHAOS_MID:-}"
    # (b may be gone already: a gid-disabled action can end its stream and its run.)
    if [ "$CHAOS_WORKLOAD" = kill ]; then
        sleep 1
        guest_kill b || echo "b had ended before the kill" >"$RUN_DIR/kill.txt"
    fi
fi

# Each guest's seconds from the action (or the start) to the end of its workload.
start=$SECONDS
left=(a b)
[ "$CHAOS_WORKLOAD" != kill ] || left=(a)
while [ ${#left[@]} -gt 0 ] && [ $((SECONDS - start)) -le $((CHAOS_DEADLINE + 60)) ]; do
    rest=()
    for g in "${left[@]}"; do
        if grep -q 'CHAOS: SECS' "$RUN_DIR/$g.console.log" 2>/dev/null; then
            echo $((SECONDS - start)) >"$RUN_DIR/$g.took"
        else
            rest+=("$g")
        fi
    done
    left=(${rest[@]+"${rest[@]}"})
    sleep 0.5
done
guest_wait a || true
guest_wait b || true
observe summary >"$RUN_DIR/summary.txt" 2>&1 || true
"$EMU_BIN" fault --control "$RUN_DIR/control.sock" list >"$RUN_DIR/fault-list.txt" 2>&1 || true
alive=0
kill -0 "$EMU_PID" 2>/dev/null || alive=1
emu_stop && st=0 || st=$?
echo "alive=$alive stop=$st" >"$RUN_DIR/emulator.status"
topo_cleanup
