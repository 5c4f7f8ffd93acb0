#!/usr/bin/env bash
# The known dibs bug "GID event interrupt before dibs->lock is initialised" (CVE-2026-74617,
# docs/known-bugs.md section 1): in 6.18 - 7.1.8, dibs_dev_add() initialised dibs->lock
# after the ism driver had registered its event queue and requested its interrupt, so an
# event that comes at once takes an uninitialised spinlock in ism_handle_irq(). No Debian
# line has it: VARIANT=dibslock-bug is 7.x with the fix reverted (test only), on
# VARIANT=debug's config (DEBUG_SPINLOCK, lockdep), and VARIANT=debug is the fixed kernel
# with the same detectors. The device's part is a rule the hardware could give: an event
# for a peer, queued with its interrupt as the function's REG_IEQ succeeds, before the
# reply (`reg-ieq-event`, docs/faults.md), on guest b's function at its first probe.
#
# Usage: scripts/bug-dibslock.sh [KERNEL:VARIANT...]   (default: 7.3:dibslock-bug 7.3:debug)
#
# Verdict per run, guests a and b running a short SMC-D echo (b the client):
#   BUG     b's kernel reported the uninitialised lock: DEBUG_SPINLOCK's "BUG: spinlock
#           bad magic" or lockdep's "INFO: trying to register non-static key";
#   FIXED   the rule fired at b's REG_IEQ, neither kernel reported anything, the echo
#           passed on SMC-D;
#   OTHER   anything else (the rule did not fire, another report, the echo failed).
# Exits 0 if every dibslock-bug kernel showed the bug and every other was FIXED. One line
# per run; each run is a test in build/results/bug-dibslock.{ktap,junit.xml}.
# Environment: BUG_RUNS (runs per kernel, 1), BUG_DIR (default build/bug-dibslock),
# RESULTS_DIR, RESULTS_NAME.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$REPO_ROOT/scripts/topology.sh"

help_and_no_options "$@"
BUG_NAME="dibs GID event before dibs->lock is initialised"
BUG_POINT="dibs_gid_event_before_the_lock_is_initialised"
GUEST_TIMEOUT="${GUEST_TIMEOUT:-300}"
BUG_DEFAULTS=(7.3:dibslock-bug 7.3:debug)
bug_setup bug-dibslock "$@"

# The lock checks' own words (kernel/locking/spinlock_debug.c spin_dump, lockdep.c
# register_lock_class on a key not in static storage).
LOCK_ERE='BUG: spinlock bad magic|INFO: trying to register non-static key'

# lock_report: the first lock report on b's console, if any.
lock_report() { grep -m1 -oE "$LOCK_ERE" "$RUN_DIR/b.console.log" 2>/dev/null; }

# one_run: sets VERDICT (BUG, FIXED, OTHER) and DETAIL.
one_run() {
    VERDICT=OTHER DETAIL=""
    local rc_a=0 rc_b=0 fired lock t0
    EMU_EXTRA=(--fault 'reg-ieq-event@ism1,peer=ism0,next=1')
    emu_start 2
    # b boots first and alone, with DIBS_SMP vCPUs: its probe is what the event must
    # meet. With one vCPU the interrupt came after dibs_dev_add() in 1 of 1 runs (QEMU
    # takes it from the device's eventfd in its main loop, which waits for the vCPU's
    # stores to end); with two, during the probe's next command (see docs/known-bugs.md).
    GUEST_SMP="${DIBS_SMP:-2}" guest_start b "$RUN_DIR/ism1.sock" 10.0.0.2/24 off \
        smctest echo client --host=10.0.0.1 --conns=1 --rounds=10 --connect-timeout=120 --io-timeout=30
    t0=$SECONDS
    until grep -q '^ISMTEST: ISMDEV' "$RUN_DIR/b.console.log" 2>/dev/null || lock_report >/dev/null ||
        [ $((SECONDS - t0)) -ge 90 ]; do
        sleep 0.5
    done
    lock="$(lock_report)" || true
    if [ -z "$lock" ] && ! grep -q '^ISMTEST: ISMDEV' "$RUN_DIR/b.console.log" 2>/dev/null; then
        # The probe never returned and the kernel printed nothing: where are b's CPUs?
        # (ismtest.modsyms names the module code; the event queue bug of section 1,
        # scripts/bug-ieqnull.sh, spins in ism_handle_event.)
        guest_where_now b --stack 512
        topo_cleanup
        DETAIL="b's probe did not return within 90 s and its kernel printed nothing (not the lock report): $WHERE"
        return
    fi
    if [ -n "$lock" ]; then
        # The lock is taken uninitialised and the probe does not come back (the guest
        # stalls): the report is the verdict; the guest is stopped, not waited out.
        sleep 6
        topo_cleanup
        python3 "$REPO_ROOT/scripts/kernel_reports.py" "$RUN_DIR/b.console.log" \
            --out "$RUN_DIR/b.kernel-reports.txt" >/dev/null || true
        rc_b=1
    else
        guest_start a "$RUN_DIR/ism0.sock" 10.0.0.1/24 on \
            smctest echo server --conns=1 --accept-timeout=120 --io-timeout=30
        guest_wait a || rc_a=$?
        guest_wait b || rc_b=$?
        lock="$(lock_report)" || true
    fi
    emu_stop || true
    fired="$(grep -c '"kind":"fault_injected".*reg-ieq-event' "$RUN_DIR/events.jsonl" 2>/dev/null)" || true
    if [ "${fired:-0}" = 0 ]; then
        DETAIL="the rule did not fire at b's REG_IEQ (no fault_injected event)"
    elif [ -n "$lock" ]; then
        VERDICT=BUG DETAIL="b's kernel: \"$lock\" in $(grep -m1 -oE 'ism_handle_irq|dibs_[a-z_]+' "$RUN_DIR/b.console.log" 2>/dev/null || echo 'no ism/dibs frame') ($((SECONDS - t0)) s after b started; the report: b.kernel-reports.txt)"
    elif [ "$rc_a" = 0 ] && [ "$rc_b" = 0 ]; then
        VERDICT=FIXED DETAIL="the event came at b's REG_IEQ; no kernel report; the echo passed"
    else
        DETAIL="no lock report, but a guest failed (a $rc_a, b $rc_b; reports: $(cat "$RUN_DIR"/*.kernel-reports.txt 2>/dev/null | head -n 1))"
    fi
}

# The bug is the revert's; every other variant (debug: the fix, same detectors) must not show it.
bug_want() { [ "$2" = dibslock-bug ] && echo BUG || echo FIXED; }

bug_loop bug-dibslock "${targets[@]}"
