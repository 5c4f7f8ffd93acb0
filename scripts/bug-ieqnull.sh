#!/usr/bin/env bash
# The known ism driver bug "an event interrupt before the event queue is published"
# (docs/known-bugs.md, section 7): ism_dev_init() requests the interrupt and registers
# the summary bit area before register_ieq(), which stores ism->ieq (and ieq_idx = -1)
# only after ISM_REG_IEQ has returned. An event interrupt taken in between runs
# ism_handle_event() over a NULL queue with ieq_idx 0: it reads the CPU's lowcore at
# address 0, whose first word never equals ieq_idx + 1, and spins with the device lock
# held and interrupts off. The probe never returns. Every line has it (5.10 to 7.3, the
# same register_ieq()); VARIANT=ieqnull-fix (guest-tests/kernel/patches/ieqnull-fix)
# publishes the empty queue before the command.
#
# Usage: scripts/bug-ieqnull.sh [KERNEL:VARIANT...]
#        (default: 7.3:debug 7.3:debug-ieqnull-fix)
#
# The device's part is the rule bug-dibslock uses (`reg-ieq-event`, docs/faults.md): an
# event for a peer, queued with its interrupt as the function's REG_IEQ succeeds, before
# the reply. Whether QEMU injects that interrupt before the driver's stores after the
# command is a race in QEMU (its main loop waits for the lock the vCPU holds for each of
# the command's loads and stores): on a stock kernel the probe meets it in about 1 boot in
# 20, on the debug variant's (the same source, slower between the loads: KASAN, lockdep)
# in about half. So the default kernels are VARIANT=debug (stock source: the bug) and
# VARIANT=debug-ieqnull-fix (the same config with the fix), and a run boots b up to
# IEQ_BOOTS (6) times, each with a new emulator. b's init keeps the driver off the function
# until it has printed the modules' symbols (ismtest.bindlate, ismtest.modsyms), so the
# host can name where a hung CPU is.
# Verdict per run:
#   BUG     in one boot, b's probe did not return within IEQ_PROBE_S (30) s, and a vCPU
#           running with interrupts off was sampled (scripts/guest_where.py) in
#           ism_handle_event or ism_handle_irq, or in a function they called;
#   FIXED   every boot's probe returned with the rule fired, no kernel report, and in the
#           last one b's SMC-D echo with a (a second guest) passed;
#   OTHER   anything else (a hang elsewhere, the rule not fired, the echo failed).
# Exits 0 if every kernel without the fix (stock, debug) showed the bug and every other was
# FIXED. Environment: BUG_RUNS (runs per kernel, 1), IEQ_BOOTS, IEQ_PROBE_S, IEQ_CPUS (host
# CPUs for b's QEMU, taskset list), BUG_DIR (default build/bug-ieqnull), RESULTS_DIR,
# RESULTS_NAME.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$REPO_ROOT/scripts/topology.sh"

help_and_no_options "$@"
BUG_NAME="ism: an event interrupt before the event queue is published"
BUG_POINT="ism_event_interrupt_before_the_event_queue_is_published"
IEQ_BOOTS="${IEQ_BOOTS:-6}"
IEQ_PROBE_S="${IEQ_PROBE_S:-30}"
GUEST_TIMEOUT="${GUEST_TIMEOUT:-300}"
BUG_DEFAULTS=(7.3:debug 7.3:debug-ieqnull-fix)
bug_setup bug-ieqnull "$@"

# boot_b LAST: one boot of b in RUN_DIR with a new emulator and the rule; b's echo
# client waits for a, which only the LAST boot starts. Sets BOOT to hang, probed or none
# (b never reached its probe), and WHERE for a hang.
boot_b() {
    local last="$1"
    BOOT=none WHERE=""
    EMU_EXTRA=(--fault 'reg-ieq-event@ism1,peer=ism0,next=1')
    emu_start 2
    GUEST_SMP=2 GUEST_CPUS="${IEQ_CPUS-}" GUEST_APPEND_EXTRA="ismtest.bindlate=1 ismtest.modsyms=1" \
        guest_start b "$RUN_DIR/ism1.sock" 10.0.0.2/24 off \
        smctest echo client --host=10.0.0.1 --conns=1 --rounds=10 --connect-timeout=120 --io-timeout=30
    wait_console b '^ISMTEST: BIND' 120 || return 0
    if ! wait_console b '^ISMTEST: ISM ' "$IEQ_PROBE_S"; then
        BOOT=hang
        guest_where_now b --stack 512
        return 0
    fi
    BOOT=probed
    [ "$last" = 1 ] || return 0
    guest_start a "$RUN_DIR/ism0.sock" 10.0.0.1/24 on \
        smctest echo server --conns=1 --accept-timeout=120 --io-timeout=30
    ECHO_RC=0
    guest_wait a || ECHO_RC=1
    guest_wait b || ECHO_RC=1
}

# one_run: sets VERDICT (BUG, FIXED, OTHER) and DETAIL; boot k's logs in RUN_DIR/boot<k>.
one_run() {
    VERDICT=OTHER DETAIL=""
    local base="$RUN_DIR" k fired probed=0 reports="" stack
    ECHO_RC=1
    for ((k = 1; k <= IEQ_BOOTS; k++)); do
        RUN_DIR="$base/boot$k"
        mkdir -p "$RUN_DIR"
        boot_b "$([ "$k" = "$IEQ_BOOTS" ] && echo 1 || echo 0)"
        topo_cleanup
        fired="$(grep -c '"kind":"fault_injected".*reg-ieq-event' "$RUN_DIR/events.jsonl" 2>/dev/null)" || true
        python3 "$REPO_ROOT/scripts/kernel_reports.py" "$RUN_DIR/b.console.log" \
            --out "$RUN_DIR/b.kernel-reports.txt" >/dev/null || reports="$reports boot$k"
        RUN_DIR="$base"
        case "$BOOT" in
            hang)
                # A CPU spinning with interrupts off, the handler on its stack (the loop
                # spends most of its time in debug_event() and, on the debug kernel,
                # lockdep, where the samples land).
                stack="$(grep -m1 -E '^stack cpu [0-9]+: .*(ism_handle_event|ism_handle_irq)' "$base/boot$k/b.where.txt")" || true
                if grep -q '(run, irqs-off' "$base/boot$k/b.where.txt" && [ -n "$stack" ]; then
                    VERDICT=BUG
                    DETAIL="boot $k of $IEQ_BOOTS: b's probe did not return within $IEQ_PROBE_S s, the rule fired ($fired), b's CPUs: $WHERE; ${stack:0:200} (boot$k/b.where.txt)"
                else
                    DETAIL="boot $k: b's probe hung elsewhere: $WHERE"
                fi
                return ;;
            none) DETAIL="boot $k: b never reached its probe (boot$k/b.console.log)"; return ;;
        esac
        [ "${fired:-0}" != 0 ] || { DETAIL="boot $k: the rule did not fire at b's REG_IEQ"; return; }
        probed=$((probed + 1))
    done
    if [ -n "$reports" ]; then
        DETAIL="kernel reports in:$reports"
    elif [ "$ECHO_RC" = 0 ]; then
        VERDICT=FIXED DETAIL="$probed of $IEQ_BOOTS boots' probes returned with the event at REG_IEQ; no kernel report; the last boot's echo passed"
    else
        DETAIL="$probed of $IEQ_BOOTS boots' probes returned, but the last boot's echo failed (boot$IEQ_BOOTS)"
    fi
}

# The bug is in the stock source: the kernels without the patch must show it.
bug_want() { case "$2" in stock | debug) echo BUG ;; *) echo FIXED ;; esac; }

bug_loop bug-ieqnull "${targets[@]}"
