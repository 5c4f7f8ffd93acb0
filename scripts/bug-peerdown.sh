#!/usr/bin/env bash
# Data already received, discarded when the peer system goes down (docs/known-bugs.md
# section 12): b writes 32 KiB, which all land in a's DMB, closes cleanly, and its guest
# powers off (smctest --close-after-send, then the guest's program is done); a starts
# reading 3 s later (--read-delay-ms). b's shutdown aborts its closed connection and
# signals the end of its link groups; a's kernel ends the link group, frees the
# connection with its RMB, and a's read gets end of file with none of the 32 KiB.
# A run the hardware could give: a peer that sends, closes and shuts down. No fault rule.
#
# Usage: scripts/bug-peerdown.sh [KERNEL:VARIANT...]
#   default: 6.12:stock 7.3:stock (no fix is written yet: every kernel must show the bug)
#
# Verdict per run:
#   BUG     b's send and close returned success, the host saw all of it written into
#           a's DMB before b's function went away, and a's read got end of file before
#           the first byte;
#   FIXED   a read every byte, or its read failed with an error (the loss told);
#   OTHER   anything else.
# Exits 0 if every kernel showed what it should (BUG on stock). One line per run; each
# run is a test in build/results/bug-peerdown.{ktap,junit.xml}.
# Environment: BUG_RUNS (runs per kernel, 1), BUG_DIR (default build/bug-peerdown),
# RESULTS_DIR, RESULTS_NAME.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$REPO_ROOT/scripts/topology.sh"

help_and_no_options "$@"
BUG_NAME="net/smc discards data already received when the peer system goes down"
BUG_POINT="net_smc_discards_data_already_received_when_the_peer_goes_down"
BUG_DEFAULTS=(6.12:stock 7.3:stock)
PEERDOWN_BYTES=32768
bug_setup bug-peerdown "$@"

# one_run: sets VERDICT (BUG, FIXED, OTHER) and DETAIL.
one_run() {
    VERDICT=OTHER DETAIL=""
    local a_sum b_sum delivered
    emu_start 2
    guest_start a "$RUN_DIR/ism0.sock" 10.0.0.1/24 on \
        smctest stream server --conns=1 --read-delay-ms=3000 --io-timeout=20 --timeout=90
    guest_start b "$RUN_DIR/ism1.sock" 10.0.0.2/24 off \
        smctest stream client --host=10.0.0.1 --bytes="$PEERDOWN_BYTES" --close-after-send \
        --io-timeout=20 --timeout=90
    guest_wait a || true
    guest_wait b || true
    a_sum="$(grep -m1 -E '^SUMMARY test=stream side=server' "$RUN_DIR/a.console.log" | tr -d '\r')" || true
    b_sum="$(grep -m1 -E '^SUMMARY test=stream side=client' "$RUN_DIR/b.console.log" | tr -d '\r')" || true
    # The host's count of what the connection wrote into a's DMB (the stream and its
    # 48-byte hello) when it closed.
    delivered="$(grep -m1 -E '"function":"ism0".*"kind":"conn_closed"' "$RUN_DIR/events.jsonl" 2>/dev/null |
        grep -oE '"bytes":[0-9]+' | cut -d: -f2)" || true
    if [[ "$b_sum" != *"smcd=1 "*" ok" ]]; then
        DETAIL="b did not send and close over SMC-D: ${b_sum:-no SUMMARY line} (b.console.log)"
    elif [[ "$a_sum" == *" ok" ]]; then
        VERDICT=FIXED DETAIL="a read all $PEERDOWN_BYTES bytes after b went down"
    elif [[ "$a_sum" == *"recv: unexpected EOF after 0 of"* ]] && [ "${delivered:-0}" -gt "$PEERDOWN_BYTES" ]; then
        VERDICT=BUG
        DETAIL="b's send and close returned success and the host saw $delivered bytes written into a's DMB; after b went down a's read got end of file with none of them"
    elif [[ "$a_sum" == *"first_error=conn 0: stream phase at byte 0 of"* && "$a_sum" != *"unexpected EOF"* ]]; then
        VERDICT=FIXED DETAIL="a's read failed with an error, the loss told (${a_sum##*first_error=conn 0: })"
    else
        DETAIL="a: ${a_sum:-no SUMMARY line}; the host: ${delivered:-no} bytes delivered (a.console.log)"
    fi
}

# No fix is written: every kernel line shows the bug.
bug_want() { case "$2" in *-fix) echo FIXED ;; *) echo BUG ;; esac; }

bug_loop bug-peerdown "${targets[@]}"
