#!/usr/bin/env bash
# The lock order of docs/known-bugs.md section 11: net/smc's VLAN refcount
# (smc_ism_get_vlan()/put_vlan()) issues an ISM command, which takes ism->cmd_lock, under
# smcd->lock with interrupts off, while every other command takes ism->cmd_lock with
# interrupts on and the interrupt handler takes smcd->lock: a CPU interrupted in a
# command and another setting up a VLAN link group can wait for each other for good.
# lockdep names the order on the first SMC-D connection over a VLAN, so the scenario is
# the e2e suite's `vlan` topology (scripts/e2e.sh vlan: two guests, a VLAN interface on
# each, SMC-D streams over it) on VARIANT=debug (lockdep), against
# VARIANT=debug-vlanlock-fix (the same config; the ism driver takes its command lock with
# interrupts off: guest-tests/kernel/patches/vlanlock-fix). The device plays its
# ordinary part, no fault rule.
#
# Usage: scripts/bug-vlanlock.sh [KERNEL:VARIANT...]
#   default: 6.12:debug 6.12:debug-vlanlock-fix (7.3 the same: 7.3:debug 7.3:debug-vlanlock-fix)
#
# Verdict per run:
#   BUG     a guest's kernel reported lockdep's irq lock inversion between smcd->lock and
#           ism->cmd_lock;
#   FIXED   the topology passed (every connection SMC-D over the VLAN, bytes intact) and
#           neither kernel reported anything;
#   OTHER   anything else (another report, a failed point of the topology).
# Exits 0 if every debug kernel showed the order and every fixed one was FIXED. One line
# per run; each run is a test in build/results/bug-vlanlock.{ktap,junit.xml}.
# Environment: BUG_RUNS (runs per kernel, 1), BUG_DIR (default build/bug-vlanlock),
# RESULTS_DIR, RESULTS_NAME.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$REPO_ROOT/scripts/topology.sh"

help_and_no_options "$@"
BUG_NAME="net/smc VLAN refcount issues an ISM command under smcd->lock"
BUG_POINT="net_smc_vlan_refcount_issues_an_ism_command_under_smcd_lock"
BUG_DEFAULTS=(6.12:debug 6.12:debug-vlanlock-fix)
bug_setup bug-vlanlock "$@"

# bug_want KERNEL VARIANT (for bug_loop): the debug kernel has the order, the fix not.
bug_want() { if [ "$2" = debug-vlanlock-fix ]; then echo FIXED; else echo BUG; fi; }

# one_run: sets VERDICT (BUG, FIXED, OTHER) and DETAIL.
one_run() {
    VERDICT=OTHER DETAIL=""
    local rc=0 f first tmp reports=()
    # The topology's sockets live in its log directory, and a UNIX socket's path must be
    # shorter than 108 bytes: run it in a short temporary directory, keep its logs after.
    tmp="$(mktemp -d "${TMPDIR:-/tmp}/bug-vlanlock.XXXXXX")"
    KERNEL="$KERNEL" VARIANT="$VARIANT" E2E_DIR="$tmp" RESULTS_DIR="$RUN_DIR/e2e-results" \
        "$REPO_ROOT/scripts/e2e.sh" vlan >"$RUN_DIR/e2e.log" 2>&1 || rc=$?
    mkdir -p "$RUN_DIR/e2e"
    cp -r "$tmp"/. "$RUN_DIR/e2e/" 2>/dev/null || true
    rm -rf "$tmp"
    for f in "$RUN_DIR"/e2e/vlan-*/[ab].kernel-reports.txt; do
        [ -f "$f" ] && reports+=("$f")
    done
    for f in "${reports[@]}"; do
        if grep -q 'irq lock inversion' "$f" && grep -q 'smcd->lock' "$f" && grep -q 'ism->cmd_lock' "$f"; then
            VERDICT=BUG
            DETAIL="guest ${f##*/}: lockdep: $(grep -m1 -oE '\(&smcd->lock\)[^,]*, at: [^ ]+' "$f" || true) took (&ism->cmd_lock) in the past (HARDIRQ-unsafe)"
            DETAIL="${DETAIL/.kernel-reports.txt/}"
            return
        fi
    done
    if [ ${#reports[@]} -gt 0 ]; then
        first="$(grep -h -m1 -E '^  ' "${reports[@]}" | head -n 1 | sed 's/^ *//' || true)"
        DETAIL="another kernel report: $first"
    elif [ "$rc" -eq 0 ]; then
        VERDICT=FIXED
        DETAIL="the vlan topology passed on SMC-D with no kernel report ($(grep -m1 -oE '[0-9]+ runs, [0-9]+ points, [0-9]+ failed' "$RUN_DIR/e2e.log" || true))"
    else
        DETAIL="the vlan topology failed (status $rc, no lock report): $(grep -m1 -E 'not ok|error' "$RUN_DIR/e2e.log" | cut -c1-160 || true)"
    fi
}

bug_loop bug-vlanlock "${targets[@]}"
