#!/usr/bin/env bash
# The known net/smc bug "net/smc CHID-0 accept matches an empty ISM slot" (upstream
# 277740023def, docs/known-bugs.md), reproduced with a crafted peer: the server guest runs
# VARIANT=chid0-peer (5.10 with a test-only patch: its SMC-Dv2 accept names CHID 0), the
# client guest the kernel under test. The client proposes SMC-Dv2 only (no PNETID), so its
# SMC-Dv1 slot 0 is empty with CHID 0. The device plays its ordinary part: it is what
# makes the client offer SMC-D at all.
#
# Usage: scripts/bug-chid0.sh [KERNEL:VARIANT...]
#   the clients; default: 5.10:stock 5.10:chid0-fix 6.1:stock (chid0-fix: 5.10 with the
#   upstream fix, guest-tests/kernel/patches/chid0-fix; 6.1.176 has Debian's backport)
#
# Verdict per run, within bounded time (never waited out):
#   BUG     the client's kernel oopsed (a NULL smcd_dev in smc_conn_create(): on s390 a
#           low-address protection or translation fault) within BUG_WAIT_S (120) s;
#   FIXED   the client's program ended, its kernel alive, no oops, and its connects
#           failed with EPROTO (the fix finds no slot for CHID 0; no TCP fallback);
#   OTHER   anything else.
# The script exits 0 if stock 5.10 (before 5.10.266) showed the bug and every other
# client was FIXED. One line per run on stdout; each run is a test in
# build/results/bug-chid0.{ktap,junit.xml} named after the bug. Environment: BUG_RUNS
# (runs per kernel, 1), BUG_WAIT_S, BUG_DIR (default build/bug-chid0), RESULTS_DIR,
# RESULTS_NAME.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$REPO_ROOT/scripts/topology.sh"

help_and_no_options "$@"
BUG_NAME="net/smc CHID-0 accept matches an empty ISM slot"
BUG_POINT="net_smc_chid0_accept_matches_an_empty_ism_slot"
BUG_RUNS="${BUG_RUNS:-1}"
BUG_WAIT_S="${BUG_WAIT_S:-120}"
BUG_DIR="${BUG_DIR:-$BUILD_DIR/bug-chid0}"
PEER_KERNEL=5.10 PEER_VARIANT=chid0-peer
GUEST_TIMEOUT="${GUEST_TIMEOUT:-240}"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(5.10:stock 5.10:chid0-fix 6.1:stock)
bug_targets "${targets[@]}"
need_packages guests
mkdir -p "$BUG_DIR"

# bug_want KERNEL VARIANT (for bug_loop): BUG if that client kernel lacks the fix: 5.10.223
# (the backport came with 5.10.266) unless it is VARIANT=chid0-fix, which carries it.
bug_want() {
    if [ "$1" = 5.10 ] && [ "$2" != chid0-fix ]; then echo BUG; else echo FIXED; fi
}

OOPS_ERE='Unable to handle kernel|Low Address Protection|Kernel panic|Oops'

# one_run: sets VERDICT (BUG, FIXED, OTHER) and DETAIL.
one_run() {
    VERDICT=OTHER DETAIL=""
    emu_start 2
    KERNEL="$PEER_KERNEL" VARIANT="$PEER_VARIANT" guest_start a "$RUN_DIR/ism0.sock" 10.0.0.1/24 on \
        smctest echo server --conns=1 --allow-fallback --accept-timeout=90 --io-timeout=20
    guest_start b "$RUN_DIR/ism1.sock" 10.0.0.2/24 off \
        smctest echo client --host=10.0.0.1 --conns=1 --rounds=10 --allow-fallback \
        --connect-timeout=5 --io-timeout=20
    local t0=$SECONDS blog="$RUN_DIR/b.console.log"
    while [ $((SECONDS - t0)) -lt "$BUG_WAIT_S" ]; do
        grep -qE "$OOPS_ERE" "$blog" 2>/dev/null && break
        grep -qE '^ISMTEST: RESULT' "$blog" 2>/dev/null && break
        sleep 0.5
    done
    sleep 2 # the rest of an oops report
    local took=$((SECONDS - t0)) where conn
    if grep -qE "$OOPS_ERE" "$blog" 2>/dev/null; then
        where="$(grep -oE '(smc_conn_create|smc_connect_ism|__smc_connect)[^ ]*' "$blog" | head -n 1)" || true
        grep -q 'smc_conn_create' "$blog"
        record_check oops_in_smc_conn_create $? "the client's oops names smc_conn_create" || true
        VERDICT=BUG DETAIL="the client's kernel oopsed after ${took} s ($(grep -m1 -oE "$OOPS_ERE.*" "$blog" | tr -d '\r' | cut -c1-80); ${where:-no smc frame})"
        return
    fi
    conn="$(grep -E '^CONN ' "$blog" 2>/dev/null | head -n 1 | tr -d '\r' | cut -c1-160)" || true
    if grep -qE '^ISMTEST: RESULT' "$blog" 2>/dev/null; then
        # The fix makes smc_v2_determine_accepted_chid() find no slot: -EPROTO, which
        # connect() returns (no fallback), every attempt until --connect-timeout.
        local tries
        tries="$(grep -c 'Protocol error' "$blog")" || true
        if grep -qE '^CONN .*mode=SMCD' "$blog"; then
            DETAIL="the client ran SMC-D over a CHID-0 accept: $conn"
        elif [ "${tries:-0}" -gt 0 ]; then
            VERDICT=FIXED DETAIL="the client refused the CHID-0 accept (connect: Protocol error, ${tries} lines) and lived (${took} s)"
        else
            DETAIL="the client lived, but its connects did not fail with EPROTO: ${conn:-no connection}"
        fi
        return
    fi
    DETAIL="neither an oops nor an end of the client's program after ${took} s"
}

KERNEL="$PEER_KERNEL" VARIANT="$PEER_VARIANT" check_artefacts
step "bug-chid0: the peer runs $PEER_KERNEL ($PEER_VARIANT); the kernels below are the client's"
bug_loop bug-chid0 "${targets[@]}"
