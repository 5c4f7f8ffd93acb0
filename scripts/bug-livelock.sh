#!/usr/bin/env bash
# The known net/smc bug "net/smc rx livelock on local peer_conn_abort" (docs/soak.md),
# reproduced on purpose: a reader whose own cursor update into the peer's DMB is refused
# by the device, with no GID event ever coming, spins in smc_rx_recvmsg() for good on a
# kernel that has the bug, and its read ends with an error on one that is fixed
# (VARIANT=rxabort-fix, guest-tests/kernel/patches/rxabort-fix).
#
# Usage: scripts/bug-livelock.sh [KERNEL:VARIANT...]   (default: 6.12:stock 6.12:rxabort-fix)
#
# Each run: one emulator, two guests with one vCPU each (GUEST_SMP=1, CONFIG_PREEMPT_NONE
# as built); b (ism1) streams to a (ism0), which reads. Once the stream flows the host
# adds `move@ism0`: the device refuses a's moves, all of them cursor updates (CDC messages,
# signalling moves) into b's DMB, as a real ISM refuses a move into a DMB that is no longer
# registered. Once the first refusal fired it sends b a GID-disabled event for a
# (`gid-disabled@ism1,peer=ism0`): b's kernel drops the connection and its DMB without a
# message to a (peer_shutdown), so b's DMB really is gone and b sends nothing more. a is
# told nothing: its GID event would come only if b's function went away.
# Verdict per run, within bounded time (never waited out):
#   FIXED   a's read ended with an error within BUG_END_S (10) s of the refusal;
#   BUG     a's read had not ended after BUG_WEDGE_S (20) s, although its SO_RCVTIMEO is
#           10 s (smcfault: a reader asleep in recv would have timed out), and its vCPU,
#           sampled through the QEMU monitor (scripts/guest_where.py), was never in wait
#           state and was in the receive loop (smc_rx_*, lock_sock/release_sock, softirq
#           re-enable);
#   OTHER   anything else (a read that ended some other way, a stream that never started).
# One line per run on stdout ("bug-livelock KERNEL:VARIANT run i/n: VERDICT ..."); each
# run is a test in build/results/bug-livelock.{ktap,junit.xml} whose point is named after
# the bug. The script exits 0 if every stock kernel showed the bug and every rxabort-fix
# kernel was FIXED. Environment: BUG_RUNS (runs per kernel, 1), BUG_WEDGE_S, BUG_END_S,
# BUG_DIR (logs, default build/bug-livelock), RESULTS_DIR, RESULTS_NAME.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$REPO_ROOT/scripts/topology.sh"

help_and_no_options "$@"
BUG_NAME="net/smc rx livelock on local peer_conn_abort"
BUG_POINT="net_smc_rx_livelock_on_local_peer_conn_abort"
BUG_RUNS="${BUG_RUNS:-1}"
BUG_WEDGE_S="${BUG_WEDGE_S:-20}"
BUG_END_S="${BUG_END_S:-10}"
BUG_DIR="${BUG_DIR:-$BUILD_DIR/bug-livelock}"
# One vCPU: the case the brief and the soak name (override to try more).
export GUEST_SMP="${GUEST_SMP:-1}"
# modsyms: guest_where.py names smc.ko's code from the symbols the guest's init prints.
export GUEST_APPEND_EXTRA="ismtest.modsyms=1${GUEST_APPEND_EXTRA:+ $GUEST_APPEND_EXTRA}"
GUEST_TIMEOUT="${GUEST_TIMEOUT:-300}"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(6.12:stock 6.12:rxabort-fix)
bug_targets "${targets[@]}"
need_packages guests
mkdir -p "$BUG_DIR"

fault() { "$EMU_BIN" fault --control "$RUN_DIR/control.sock" "$@"; }

# fault_fired ERE LIMIT: waits up to LIMIT s for a fault_injected event matching ERE.
fault_fired() {
    local start=$SECONDS
    while [ $((SECONDS - start)) -lt "$2" ]; do
        grep '"kind":"fault_injected"' "$RUN_DIR/events.jsonl" 2>/dev/null | grep -qE -- "$1" && return 0
        sleep 0.2
    done
    return 1
}

# a_phase_rc: the exit code of a's stream ("" while it runs).
a_phase_rc() { sed -n 's/^FAULT: PHASE broken rc=\([0-9]*\).*/\1/p' "$RUN_DIR/a.console.log" 2>/dev/null | head -n 1 || true; }

# one_run: sets VERDICT (FIXED, BUG, OTHER) and DETAIL.
one_run() {
    VERDICT=OTHER DETAIL=""
    emu_start 2
    guest_start a "$RUN_DIR/ism0.sock" 10.0.0.1/24 on smcfault server 10.0.0.1 rx-livelock
    guest_start b "$RUN_DIR/ism1.sock" 10.0.0.2/24 off smcfault client 10.0.0.1 rx-livelock
    python3 "$REPO_ROOT/scripts/wait_stream.py" "$EMU_BIN" "$RUN_DIR/control.sock" \
        --function ism1 --min-bytes $((4 << 20)) --timeout 120
    record_check stream_started $? "b's stream reached the device" \
        || { DETAIL="the stream never started"; return; }
    fault add 'move@ism0' >"$RUN_DIR/fault-add.out" 2>&1
    record_check fault_added $? "$(cat "$RUN_DIR/fault-add.out")" || { DETAIL="fault add failed"; return; }
    fault_fired '"fault":"move@ism0".*rejected' 30
    record_check cursor_update_refused $? "a's move into b's DMB was refused (fault_injected event)" \
        || { DETAIL="a never wrote into b's DMB"; return; }
    local t0=$SECONDS
    local st=0
    fault add 'gid-disabled@ism1,peer=ism0' >>"$RUN_DIR/fault-add.out" 2>&1 || st=$?
    record_check peer_dropped_connection "$st" "b told a's GID is gone: b drops the connection and its DMB, tells a nothing" || true
    # The fixed kernel's read ends at once; the buggy one's never: wait BUG_WEDGE_S at most.
    local rc=""
    while [ $((SECONDS - t0)) -lt "$BUG_WEDGE_S" ]; do
        rc="$(a_phase_rc)"
        [ -z "$rc" ] || break
        sleep 0.5
    done
    local took=$((SECONDS - t0)) err
    err="$(grep -E '^SUMMARY test=stream side=server' "$RUN_DIR/a.console.log" 2>/dev/null | grep -oE 'first_error=.*' | tr -d '\r' | cut -c1-160)" || true
    if [ -n "$rc" ]; then
        if [ "$rc" != 0 ] && [ "$took" -le "$BUG_END_S" ] && grep -qE 'recv: (Software caused connection abort|Connection reset by peer)' <<<"$err"; then
            VERDICT=FIXED DETAIL="a's read ended with an error ${took} s after the refusal (${err#first_error=})"
        else
            DETAIL="a's stream ended with rc=$rc after ${took} s: ${err:-no SUMMARY}"
        fi
        return
    fi
    # Still reading after BUG_WEDGE_S. The premise holds: b's kernel really dropped the
    # DMB a wrote into (the refused token is unregistered), and a got no GID event (the
    # emulator sends one only when b's function goes away: b stays attached).
    local token
    token="$(grep '"fault":"move@ism0"' "$RUN_DIR/events.jsonl" | head -n 1 | grep -oE '"token":"0x[0-9a-f]+"' || true)"
    grep '"kind":"dmb_unregistered"' "$RUN_DIR/events.jsonl" | grep '"function":"ism1"' | grep -qF -- "${token:-no token}"
    record_check peer_dmb_unregistered $? "b's kernel unregistered the DMB a's refused move went to (${token:-unknown})" || true
    ! grep -qE 'ism1 .*client disconnected' "$RUN_DIR/emulator.log"
    record_check reader_got_no_gid_event $? "b's function stayed attached: no GID event to a" || true
    # Where is a's CPU?
    guest_where_now a
    # The vCPU with the most samples in the receive loop (the only one, with GUEST_SMP=1):
    # its sample count, how many were in wait state, how many in the loop.
    local cpu samples waits inloop summary
    read -r cpu samples waits inloop < <(awk '/^sample / { c = $4; sub(":", "", c); n[c]++
            if ($0 ~ /\(wait,/) w[c]++
            if ($0 ~ /smc_rx_|smc_recvmsg|lock_sock|release_sock|local_bh_enable|sock_recvmsg/) l[c]++ }
        END { b = ""; for (c in n) if (b == "" || l[c] > l[b]) b = c
              if (b == "") print "- 0 0 0"; else print b, n[b], w[b] + 0, l[b] + 0 }' "$RUN_DIR/a.where.txt")
    summary="$(grep -E "^cpu $cpu:" "$RUN_DIR/a.where.txt" | head -n 1)" || true
    if [ "${samples:-0}" -gt 0 ] && [ "${waits:-0}" -eq 0 ] && [ "${inloop:-0}" -gt 0 ]; then
        VERDICT=BUG DETAIL="a's read still spinning ${took} s after the refusal (its 10 s SO_RCVTIMEO never fired): ${samples} samples of cpu ${cpu}, 0 in wait state, ${inloop} in the receive loop (${summary})"
    else
        DETAIL="a's read had not ended after ${took} s, but its CPU does not spin in the receive loop: samples=${samples:-0} wait=${waits:-0} in_loop=${inloop:-0} (${summary:-no samples})"
    fi
}

# A wedged guest does not power off: bug_loop stops it after each run.
bug_loop bug-livelock "${targets[@]}"
