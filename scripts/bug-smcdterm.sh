#!/usr/bin/env bash
# The known net/smc bug "net/smc: a peer's shutdown ends every link group of an ISM function"
# (docs/known-bugs.md, section 5): smc_core.c smc_smcd_terminate() on 6.12 and 7.3 tests
#   lgr->peer_gid.gid == peer_gid->gid && !smc_ism_is_emulated(dev) ? 1 : <gid_ext equal>
# and ?: binds looser than &&: on an ISM function (not Emulated-ISM, GID extensions 0) a
# link group with any other peer matches too. A peer's shutdown event (smc_ism.c
# smcd_handle_sw_event, ISM_EVENT_CODE_SHUTDOWN) or GID event (smc_ism_event_work,
# ISM_EVENT_GID) then ends every link group of the function. VARIANT=smcdterm-fix
# (guest-tests/kernel/patches/smcdterm-fix) parenthesises the test.
#
# Usage: scripts/bug-smcdterm.sh [KERNEL:VARIANT...]   (default: 6.12:stock 6.12:smcdterm-fix)
#
# Each run: one emulator with three functions, three guests on one network (a UDP
# multicast hub), each with one function (guest-tests/progs/smcterm). a (ism0) streams to
# b (ism1), 24 MiB paced over about 25 s; once it runs, c (ism2) makes one SMC-D
# connection to a (a link group a-c) and powers off: its kernel sends a the shutdown of
# that link group through the device, then its function goes away.
# Verdict per run, within bounded time (never waited out):
#   BUG     a's stream to b ended with ECONNABORTED ("Software caused connection abort";
#           EPIPE accepted too), and the host saw a unregister its DMB of the a-b link
#           group within BUG_END_S (10) s of a ending its link group with c (or up to 1 s
#           before: the two link groups' terminations run side by side): a's kernel
#           ended the link group with b on c's event;
#   FIXED   a's stream completed, checked by b byte by byte (both sides' smctest passed),
#           c had left while it ran (the a-b connection closed after a ended its link
#           group with c), and a's DMBs of the a-b link group stayed registered until then;
#   OTHER   anything else (c's connection not SMC-D, c left before or after the stream,
#           a stream that ended some other way).
# One line per run on stdout ("bug-smcdterm KERNEL:VARIANT run i/n: VERDICT ..."); each
# run is a test in build/results/bug-smcdterm.{ktap,junit.xml} whose point is named after
# the bug. Exits 0 if every stock kernel showed the bug and every smcdterm-fix kernel was
# FIXED. Environment: BUG_RUNS (runs per kernel, 1), BUG_END_S, BUG_WAIT_S (how long the
# guests get to reach the end of a's stream, 300), SMCDTERM_BYTES (24M), BUG_DIR (logs,
# default build/bug-smcdterm), RESULTS_DIR, RESULTS_NAME.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$REPO_ROOT/scripts/topology.sh"

help_and_no_options "$@"
BUG_NAME="net/smc: a peer's shutdown ends every link group of an ISM function"
BUG_POINT="net_smc_peer_shutdown_ends_every_link_group_of_an_ism_function"
BUG_RUNS="${BUG_RUNS:-1}"
BUG_END_S="${BUG_END_S:-10}"
BUG_WAIT_S="${BUG_WAIT_S:-300}"
SMCDTERM_BYTES="${SMCDTERM_BYTES:-24M}"
BUG_DIR="${BUG_DIR:-$BUILD_DIR/bug-smcdterm}"
# One vCPU each: three TCG guests share the host's CPUs (override to try more).
export GUEST_SMP="${GUEST_SMP:-1}"
GUEST_TIMEOUT="${GUEST_TIMEOUT:-420}"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(6.12:stock 6.12:smcdterm-fix)
bug_targets "${targets[@]}"
need_packages guests
mkdir -p "$BUG_DIR"

# phase_rc GUEST NAME: the exit code of that guest's smcterm phase ("" until it ended).
phase_rc() {
    sed -n "s/^SMCTERM: PHASE $2 rc=\([0-9]*\).*/\1/p" "$RUN_DIR/$1.console.log" 2>/dev/null | head -n 1 || true
}

# wait_phase GUEST NAME LIMIT: waits up to LIMIT s for that phase to end; 0 if it did.
wait_phase() {
    local start=$SECONDS
    while [ $((SECONDS - start)) -lt "$3" ]; do
        [ -z "$(phase_rc "$1" "$2")" ] || return 0
        sleep 1
    done
    return 1
}

# first_error GUEST TEST SIDE: smctest's first_error of that SUMMARY line, if any.
first_error() {
    grep -E "^SUMMARY test=$2 side=$3" "$RUN_DIR/$1.console.log" 2>/dev/null | grep -oE 'first_error=.*' \
        | head -n 1 | tr -d '\r' | cut -c13-160 || true
}

# host_facts: the host's view of the run from the event stream, as shell assignments:
# T_C (when a ended its link group with c: its first DMB for c unregistered, or c's
# function gone if earlier; µs), AB_UNREG (a's first DMB for b unregistered, µs, or
# empty), AB_TOKEN (that DMB), AB_CLOSE (how and when b's DMB of the stream saw its
# connection close: "HOW TIME"), B_UNREG (b's first DMB for a unregistered, µs), A_GONE
# (a's function detached, µs).
host_facts() {
    python3 - "$RUN_DIR/events.jsonl" <<'EOF'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
gid = {e["function"]: e["gid"] for e in ev if e["kind"] == "function_attached"}
a, b, c = (gid.get(f) for f in ("ism0", "ism1", "ism2"))
rgid = {}   # (function, token) -> the DMB's remote GID
for e in ev:
    if e["kind"] == "dmb_registered":
        rgid[(e["function"], e.get("token"))] = e["rgid"]
def unreg(f, peer):
    return [e for e in ev if e["kind"] == "dmb_unregistered" and e["function"] == f
            and rgid.get((f, e.get("token"))) == peer]
c_gone = [e["time_us"] for e in ev if e["kind"] == "function_detached" and e["function"] == "ism2"]
t_c = sorted([e["time_us"] for e in unreg("ism0", c)] + c_gone[:1])
ab = unreg("ism0", b)
close = [e for e in ev if e["kind"] == "conn_closed" and e["function"] == "ism1"
         and rgid.get(("ism1", e.get("token"))) == a and e.get("bytes", 0) > 0]
print(f"T_C={t_c[0] if t_c else ''}")
print(f"AB_UNREG={ab[0]['time_us'] if ab else ''}")
print(f"AB_TOKEN={ab[0].get('token', '') if ab else ''}")
ba = unreg("ism1", a)
a_gone = [e["time_us"] for e in ev if e["kind"] == "function_detached" and e["function"] == "ism0"]
print(f"B_UNREG={ba[0]['time_us'] if ba else ''}")
print(f"A_GONE={a_gone[0] if a_gone else ''}")
print(f"AB_CLOSE='{close[0]['how'] + ' ' + str(close[0]['time_us']) if close else ''}'")
EOF
}

# ms FROM TO: TO - FROM in ms (µs times).
ms() { echo $((($2 - $1) / 1000)); }

# one_run: sets VERDICT (BUG, FIXED, OTHER) and DETAIL.
one_run() {
    VERDICT=OTHER DETAIL=""
    local mcast g i
    # A group port of this process's own: two runs on one host do not share frames.
    mcast="230.0.39.5:$((40000 + $$ % 20000))"
    emu_start 3
    i=0
    for g in a b c; do
        GUEST_NET_MCAST="$mcast" GUEST_MAC="52:54:00:39:05:0$((i + 1))" \
            guest_start "$g" "$RUN_DIR/ism$i.sock" "10.0.0.$((i + 1))/24" off smcterm "$g" "$SMCDTERM_BYTES"
        i=$((i + 1))
    done
    wait_phase a stream "$BUG_WAIT_S"
    record_check stream_ended $? "a's stream to b ended within $BUG_WAIT_S s" \
        || { DETAIL="a's stream did not end within $BUG_WAIT_S s"; return; }
    # b's side, and c's departure (its QEMU ends after its power off).
    wait_phase b stream 30 || true
    local t=0 cpid=GUEST_PID_c
    while [ $t -lt 60 ] && kill -0 "${!cpid}" 2>/dev/null; do sleep 1; t=$((t + 1)); done
    sleep 1
    local arc brc crc aerr berr
    arc="$(phase_rc a stream)" brc="$(phase_rc b stream)" crc="$(phase_rc c connect)"
    aerr="$(first_error a stream client)" berr="$(first_error b stream server)"
    [ "$crc" = 0 ]
    record_check c_connected_smcd $? "c's one connection to a ran SMC-D (rc=${crc:-none})" \
        || { DETAIL="c's connection to a failed (rc=${crc:-none}): $(first_error c echo client)"; return; }
    local T_C AB_UNREG AB_TOKEN AB_CLOSE B_UNREG A_GONE
    eval "$(host_facts)"
    [ -n "$T_C" ]
    record_check a_ended_link_group_with_c $? "a ended its link group with c (its DMB for c unregistered, or c's function gone)" \
        || { DETAIL="the host never saw c leave"; return; }
    local rej
    rej="$(grep -c "ism1 .*rejected: unknown DMB token ${AB_TOKEN:-none}" "$RUN_DIR/emulator.log")" || true
    if [ "$arc" != 0 ] && [ -n "$AB_UNREG" ]; then
        local dt
        dt="$(ms "$T_C" "$AB_UNREG")"
        if grep -qE 'Software caused connection abort|Broken pipe' <<<"$aerr" && [ "$dt" -ge -1000 ] && [ "$dt" -le $((BUG_END_S * 1000)) ]; then
            VERDICT=BUG DETAIL="a's stream to b aborted ($aerr); a unregistered its DMB $AB_TOKEN of the a-b link group ${dt} ms after ending its link group with c"
            if [ -n "$B_UNREG" ] && [ -n "$A_GONE" ] && [ "$B_UNREG" -ge "$A_GONE" ]; then
                DETAIL+="; b kept its side until a's function went away ($(ms "$AB_UNREG" "$B_UNREG") ms later: the device's GID event)"
            fi
            DETAIL+="; b's moves to a's DMB refused (unknown DMB token): $rej; b's stream: rc=${brc:-still running}${berr:+ ($berr)}"
        else
            DETAIL="a's stream ended with rc=$arc ($aerr), a's a-b DMB unregistered ${dt} ms from c's leaving"
        fi
        return
    fi
    if [ "$arc" = 0 ] && [ "$brc" = 0 ]; then
        local how at
        read -r how at <<<"$AB_CLOSE"
        if [ -z "$at" ] || [ "$at" -le "$T_C" ]; then
            DETAIL="the stream completed, but c left after it (stream closed ${how:-never seen}): premise not met"
        elif [ -n "$AB_UNREG" ] && [ "$AB_UNREG" -le "$at" ]; then
            DETAIL="the stream completed, but a unregistered its a-b DMB $AB_TOKEN before it closed"
        else
            VERDICT=FIXED DETAIL="a's stream to b completed intact (checked by b) $(ms "$T_C" "$at") ms after a ended its link group with c; the a-b link group stayed ($(grep -E '^SUMMARY test=stream side=server' "$RUN_DIR/b.console.log" | grep -oE 'bytes=[0-9]+' | head -n 1))"
        fi
        return
    fi
    DETAIL="a's stream rc=${arc:-none} ($aerr), b's rc=${brc:-none} ($berr), a-b DMB unregistered: $([ -n "$AB_UNREG" ] && echo yes || echo no)"
}

# On the stock kernel b may still wait on a stream a no longer sends (or spin in make
# bug-livelock's receive loop, its cursor update refused): bug_loop stops it after each run.
bug_loop bug-smcdterm "${targets[@]}"
