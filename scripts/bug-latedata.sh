#!/usr/bin/env bash
# Data left unsent at close lands after the close (docs/known-bugs.md section 9): a slow
# reader alone, no fault (guest-tests/progs/smcfault's late-data). b sends 96 KiB and
# closes at once (smctest --close-after-send), then stays up; a waits 3 s before it reads
# (--read-delay-ms), longer than net/smc's 2 s close wait
# (SMC_MAX_STREAM_WAIT_TIMEOUT). a's ring holds 65,504 bytes, the rest waits in b's send
# buffer; after 2 s b's close goes out anyway, with the rest unsent. a reads its ring,
# finds the close and takes it as the end of the data: end of file, while every send()
# and the close() on b returned success. b's transmit path then writes the rest into
# a's DMB after the close (the host's late_write event; a may not have released the DMB
# yet). Against VARIANT=latedata-rfc (an abort instead of the close, and nothing written
# after it: guest-tests/kernel/patches/latedata-rfc, an RFC).
#
# Usage: scripts/bug-latedata.sh [KERNEL:VARIANT...]
#   default: 6.12:stock 6.12:latedata-rfc (7.3 the same: 7.3:stock 7.3:latedata-rfc)
#
# Verdict per run:
#   BUG     b's sends and close succeeded, a got end of file before all the bytes (the
#           silent truncation), and the host saw b write into a's DMB after its close;
#   FIXED   a got every byte, or its read failed with a reset (the loss told), and the
#           host saw nothing written after the close;
#   OTHER   anything else.
# Exits 0 if every stock kernel showed the bug and every fixed one was FIXED. One line
# per run; each run is a test in build/results/bug-latedata.{ktap,junit.xml}.
# Environment: BUG_RUNS (runs per kernel, 1), BUG_DIR (default build/bug-latedata),
# RESULTS_DIR, RESULTS_NAME.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$REPO_ROOT/scripts/topology.sh"

help_and_no_options "$@"
BUG_NAME="net/smc data left unsent at close is written after the close"
BUG_POINT="net_smc_data_left_unsent_at_close_is_written_after_the_close"
BUG_DEFAULTS=(6.12:stock 6.12:latedata-rfc)
LATEDATA_BYTES=98304   # smcfault late-data: 96 KiB
bug_setup bug-latedata "$@"

# one_run: sets VERDICT (BUG, FIXED, OTHER) and DETAIL.
one_run() {
    VERDICT=OTHER DETAIL=""
    local a_sum b_conn late late_bytes n
    emu_start 2
    guest_start a "$RUN_DIR/ism0.sock" 10.0.0.1/24 on smcfault server 10.0.0.1 late-data
    guest_start b "$RUN_DIR/ism1.sock" 10.0.0.2/24 off smcfault client 10.0.0.1 late-data
    guest_wait a || true
    guest_wait b || true
    a_sum="$(grep -m1 -E '^SUMMARY test=stream side=server' "$RUN_DIR/a.console.log" | tr -d '\r')" || true
    b_conn="$(grep -m1 -E '^CONN test=stream idx=0 side=client' "$RUN_DIR/b.console.log" | tr -d '\r')" || true
    # The host's view: b's writes into a's DMB after the connection's close.
    late="$(grep -E '"kind":"late_write"' "$RUN_DIR/events.jsonl" 2>/dev/null | grep '"function":"ism0"')" || true
    late_bytes=0
    for n in $(grep -oE '"bytes":[0-9]+' <<<"$late" | cut -d: -f2); do late_bytes=$((late_bytes + n)); done
    if [[ "$b_conn" != *"mode=SMCD"*"verify=ok"* ]]; then
        DETAIL="b's connection did not pass as SMC-D: ${b_conn:-no CONN line} (b.console.log)"
    elif [[ "$a_sum" == *" ok" ]]; then
        if [ "$late_bytes" = 0 ]; then
            VERDICT=FIXED DETAIL="a read all $LATEDATA_BYTES bytes, nothing written after the close"
        else
            DETAIL="a read all $LATEDATA_BYTES bytes, but the host saw $late_bytes bytes written into a's DMB after the close"
        fi
    elif [[ "$a_sum" == *"recv: unexpected EOF after"* ]]; then
        if [ "$late_bytes" -gt 0 ]; then
            VERDICT=BUG
            DETAIL="b's sends and close returned success; a: ${a_sum##*first_error=conn 0: } (end of file before the data's end); the host: $late_bytes bytes written into a's DMB after the close ($(grep -c . <<<"$late") late_write event(s), $(grep -oE '"after_zeroed":(true|false)' <<<"$late" | head -n1))"
        else
            DETAIL="a got end of file early (${a_sum##*first_error=}) but the host saw no write after the close"
        fi
    elif [[ "$a_sum" == *"Connection reset by peer"* ]]; then
        if [ "$late_bytes" = 0 ]; then
            VERDICT=FIXED DETAIL="a's read failed with a reset, the loss told (${a_sum##*first_error=conn 0: }); nothing written after the close"
        else
            DETAIL="a's read was reset, but the host saw $late_bytes bytes written after the close"
        fi
    else
        DETAIL="a: ${a_sum:-no SUMMARY line} (a.console.log)"
    fi
}

bug_loop bug-latedata "${targets[@]}"
