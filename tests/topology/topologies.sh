#!/usr/bin/env bash
# The topologies real installations have (issue 39), one line per case: its verdict (as
# expected / NOT as expected), the SMC version, the CHIDs offered and accepted, the mode
# and the decline reason if any. Each case's expectation comes from the kernel's code
# (tests/ismcheck/check_topology.py names the functions; docs/testing.md, "make topologies").
#
# Usage: tests/topology/topologies.sh [CASE...]   (default: every case)
#   v1         SMC-Dv1: NIC and ISM function share a PNET ID (e2e.sh's topology v1)
#   vlan       the same over an 802.1Q interface (e2e.sh's topology vlan)
#   chid-both  two emulators (CHIDs A and B); guests a and b each have a function on
#              both, in opposite order: the client offers its CHIDs in the order of its
#              smcd_dev_list, the server takes the first it has, for every connection
#   chid-one   a on A and B, b on B only: B in both directions
#   chid-none  a on A, b on B: no common CHID; the server declines (NOSMCD2DEV), both
#              sides fall back to TCP with the bytes intact, no emulator sees a DMB
#   mixed-510-73, mixed-73-510, mixed-61-612, mixed-612-61
#              mixed kernel lines: guest a of the first line, b of the second, one function
#              each on emulator A, smcchid as in the CHID cases (b->a, then a->b). Every
#              line speaks SMC-Dv2 (no PNET ID: no v1), at the smaller SMC release of the
#              two (5.10/6.1: 0, 6.12+: 1), so the one first contact's accept and confirm
#              are 114 bytes, not 6.12+'s 130 (check_topology.py mixed_release)
#   mixed-612-73  the same between two release-1 lines: 130 bytes (the check's control)
#   multi      a multi-function emulator under load: emulators A and B with 4 functions
#              each, guests a b c d (10.0.0.1-4) each with one function of each, a and b
#              in the order A,B, c and d in B,A, on one network (a multicast hub); each
#              guest serves and streams to the next two (a->b,c b->c,d c->d,a d->a,b):
#              one connection (the link group's first contact), then MULTI_CONNS at once
#              (default 4), each of MULTI_BYTES (8M),
#              every guest at the same time: the clients a and b take one CHID, c and d
#              the other, both carry streams at once (check_topology.py multi)
#   loopback   6.12 guests with loopback-ism beside an ISM function (VARIANT=loopback),
#              one function each on emulator A: each guest's connections to itself first
#              (smcchid self) take loopback-ism, the host sees none of them; then b->a
#              and a->b offer loopback-ism first but take the ISM CHID (the peer's
#              loopback GID is never reachable)
# Environment: KERNEL, VARIANT (default 6.12, stock; the mixed cases take their lines
# from their names, in VARIANT), CHID_A and CHID_B (0x1234, 0x5678), MULTI_CONNS and
# MULTI_BYTES (the multi case's concurrent connections per stream and bytes each: 4, 8M),
# TOPO_DIR (logs, default build/topologies), GUEST_TIMEOUT (s, default 600),
# TOPO_PRINT_LINES=1 (print the other kernels the cases need, LINE:VARIANT, run nothing).
# Exit status: 0 if every case was as expected, 1 if not, 2 on a usage error.
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
source "$REPO_ROOT/scripts/topology.sh"

ALL_CASES=(v1 vlan chid-both chid-one chid-none mixed-510-73 mixed-73-510 mixed-61-612 mixed-612-61 mixed-612-73
    loopback multi)
help_and_no_options "$@"
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=("${ALL_CASES[@]}")
for c in "${cases[@]}"; do one_of case "$c" "${ALL_CASES[@]}"; done
check_kernel_selection
need_packages guests   # python3: check_e2e.py, check_topology.py
TOPO_DIR="${TOPO_DIR:-$BUILD_DIR/topologies}"
CHID_A="${CHID_A:-0x1234}"
CHID_B="${CHID_B:-0x5678}"
# mixed_lines CASE: "LINE_A LINE_B" of a mixed-line case (its name says them).
mixed_lines() {
    local l="${1#mixed-}"
    echo "$(mixed_line "${l%-*}") $(mixed_line "${l#*-}")"
}
mixed_line() { case "$1" in 510) echo 5.10 ;; 61) echo 6.1 ;; 612) echo 6.12 ;; 72) echo 7.2 ;; 73) echo 7.3 ;; esac; }

# The loopback case's kernel: 6.12 with loopback-ism (CONFIG_SMC_LO, 6.9-6.17).
LOOPBACK_KERNEL=6.12

others=()   # the other kernels the cases boot, LINE:VARIANT
for c in "${cases[@]}"; do
    case "$c" in
        mixed-*) for l in $(mixed_lines "$c"); do others+=("$l:$VARIANT"); done ;;
        loopback) others+=("$LOOPBACK_KERNEL:loopback") ;;
    esac
done
# TOPO_PRINT_LINES=1: only those, one a line (make topologies builds them first).
if [ "${TOPO_PRINT_LINES:-}" = 1 ]; then
    [ ${#others[@]} = 0 ] || printf '%s\n' "${others[@]}" | sort -u
    exit 0
fi
check_artefacts ${others[@]+"${others[@]}"}
mkdir -p "$TOPO_DIR"

# emus_done NAME...: each named emulator's snapshot (RUN_DIR/NAME/snapshot.json), then its
# clean stop, recorded as a check; 1 if either failed for one of them.
emus_done() {
    local e st rc=0
    for e in "$@"; do
        observe_named "$e" json >"$RUN_DIR/$e/snapshot.json" 2>>"$RUN_DIR/$e/emulator.log" || rc=1
        emu_stop_named "$e" && st=0 || st=$?
        record_check "emulator_${e}_clean_shutdown" "$st" "SIGTERM: exit status 0, sockets removed" || rc=1
    done
    return "$rc"
}

# run_chid CASE MODE A_FUNCS B_FUNCS A_SPECS B_SPECS [LINE_A LINE_B]: emulators A and B
# with that many functions (B_FUNCS 0: no emulator B), guests a and b with the functions
# their specs name (guest_start; of kernel lines LINE_A and LINE_B if given), both running
# smcchid (MODE: "fallback", "self": each guest first to itself, or ""); then each
# emulator's snapshot, its clean stop, and check_topology.py's line (with the lines: its
# mixed-line checks too; with self: its loopback checks).
run_chid() {
    local case="$1" mode="$2" rc=0 emus=(A) more=() a_args=(fallback) b_args=(fallback)
    emu_start_named A "$CHID_A" "$3"
    [ "$4" = 0 ] || { emu_start_named B "$CHID_B" "$4"; emus+=(B); }
    if [ -n "${7:-}" ]; then more=(--guest-line "a=$7" --guest-line "b=$8")
    else more=(--kernel-line "$KERNEL"); fi
    case "$mode" in
        "") a_args=(); b_args=() ;;
        self) a_args=(self 10.0.0.1); b_args=(self 10.0.0.2); more+=(--loopback) ;;
    esac
    GUEST_LINE="${7:-}" guest_start a "$5" 10.0.0.1/24 on smcchid a 10.0.0.2 ${a_args[@]+"${a_args[@]}"}
    GUEST_LINE="${8:-}" guest_start b "$6" 10.0.0.2/24 off smcchid b 10.0.0.1 ${b_args[@]+"${b_args[@]}"}
    guest_wait a || rc=1
    guest_wait b || rc=1
    emus_done "${emus[@]}" || rc=1
    topo_cleanup
    ismcheck check_topology chid --case "$case" --run-dir "$RUN_DIR" \
        "${emus[@]/#/--emulator=}" ${more[@]+"${more[@]}"} --line "$RUN_DIR/line" \
        >"$RUN_DIR/check.txt" || rc=1
    grep '^  ' "$RUN_DIR/check.txt" || true   # what was not as expected
    return "$rc"
}

# run_multi: the multi case. Emulators A and B with 4 functions each; guest i of a b c d
# (10.0.0.i) has function ism<i-1> of each, a and b A's first, c and d B's first; all on
# one multicast hub (a group port of this process's own, so that two runs on one host do
# not share frames). Each runs smcmulti: a server for the two guests before it in the
# ring, clients to the two after it (1 + MULTI_CONNS connections each). Then each
# emulator's snapshot, its clean stop, and check_topology.py multi's line.
MULTI_GUESTS=(a b c d)
MULTI_CONNS="${MULTI_CONNS:-4}"
MULTI_BYTES="${MULTI_BYTES:-8M}"
run_multi() {
    local rc=0 i d n=${#MULTI_GUESTS[@]} g spec peers streams=() gargs=() mcast
    mcast="230.0.39.1:$((40000 + $$ % 20000))"
    emu_start_named A "$CHID_A" "$n"
    emu_start_named B "$CHID_B" "$n"
    for ((i = 0; i < n; i++)); do
        g="${MULTI_GUESTS[i]}"
        if [ "$i" -lt 2 ]; then
            spec="$A/ism$i.sock,chid=$CHID_A|$B/ism$i.sock,chid=$CHID_B"
        else
            spec="$B/ism$i.sock,chid=$CHID_B|$A/ism$i.sock,chid=$CHID_A"
        fi
        peers=()
        gargs+=(--guest "$g=10.0.0.$((i + 1))")
        for d in 1 2; do
            peers+=("10.0.0.$(((i + d) % n + 1))")
            streams+=(--stream "$g>${MULTI_GUESTS[(i + d) % n]}")
        done
        GUEST_NET_MCAST="$mcast" GUEST_MAC="52:54:00:39:00:0$((i + 1))" \
            guest_start "$g" "$spec" "10.0.0.$((i + 1))/24" off \
            smcmulti "$MULTI_CONNS" "$MULTI_BYTES" $((2 * (MULTI_CONNS + 1))) "$n" "${peers[@]}"
    done
    for g in "${MULTI_GUESTS[@]}"; do guest_wait "$g" || rc=1; done
    emus_done A B || rc=1
    topo_cleanup
    ismcheck check_topology multi --case multi --run-dir "$RUN_DIR" \
        --emulator=A --emulator=B --conns $((MULTI_CONNS + 1)) "${streams[@]}" "${gargs[@]}" --line "$RUN_DIR/line" >"$RUN_DIR/check.txt" || rc=1
    grep '^  ' "$RUN_DIR/check.txt" || true
    return "$rc"
}

# run_v1_case CASE [VLAN]: e2e.sh's run_v1, held to V1_EXPECT (V1_EXPECT_NOVLAN without a
# VLAN) by check_e2e.py, in one line.
run_v1_case() {
    local case="$1" vlan="${2:-}" rc=0 st expect=("${V1_EXPECT_NOVLAN[@]}")
    [ -z "$vlan" ] || expect=("${V1_EXPECT[@]}")
    run_v1 ${vlan:+"$vlan"} || rc=1
    observe json >"$RUN_DIR/snapshot.json" 2>>"$RUN_DIR/emulator.log" || rc=1
    emu_stop && st=0 || st=$?
    record_check emulator_clean_shutdown "$st" "SIGTERM: exit status 0, sockets removed" || rc=1
    topo_cleanup
    ismcheck check_e2e --variant "$VARIANT" --run-dir "$RUN_DIR" \
        --checks "$RUN_DIR/checks.jsonl" "${expect[@]}" ${vlan:+--vlan "$vlan"} \
        >"$RUN_DIR/check_e2e.txt" 2>&1 || rc=1
    [ "$rc" = 0 ] || sed 's/^/  /' "$RUN_DIR/check_e2e.txt"
    ismcheck check_topology e2e --case "$case" --run-dir "$RUN_DIR" \
        --status "$rc" --line "$RUN_DIR/line" >"$RUN_DIR/check.txt"
    grep '^  ' "$RUN_DIR/check.txt" || true
}

lines=()
failed=0
for c in "${cases[@]}"; do
    case "$c" in
        mixed-*) topo_init "$TOPO_DIR/$c-$VARIANT" ;;   # its name says its lines
        loopback) topo_init "$TOPO_DIR/$c-$LOOPBACK_KERNEL" ;;
        *) topo_init "$TOPO_DIR/$c-$(kernel_suffix)" ;;
    esac
    case "$c" in
        mixed-*) step "topologies: case '$c', kernels $(mixed_lines "$c" | sed 's/ / and /') ($VARIANT)" ;;
        loopback) step "topologies: case '$c', kernel $LOOPBACK_KERNEL (loopback)" ;;
        *) step "topologies: case '$c', kernel $KERNEL ($VARIANT)" ;;
    esac
    start=$SECONDS
    rc=0
    A="$RUN_DIR/A" B="$RUN_DIR/B"
    case "$c" in
        v1) run_v1_case v1 || rc=1 ;;
        vlan) run_v1_case vlan "$V1_VLAN" || rc=1 ;;
        # b's functions in the other order than a's: each direction's client decides.
        chid-both) run_chid "$c" "" 2 2 "$A/ism0.sock,chid=$CHID_A|$B/ism0.sock,chid=$CHID_B" \
            "$B/ism1.sock,chid=$CHID_B|$A/ism1.sock,chid=$CHID_A" || rc=1 ;;
        chid-one) run_chid "$c" "" 1 2 "$A/ism0.sock,chid=$CHID_A|$B/ism0.sock,chid=$CHID_B" \
            "$B/ism1.sock,chid=$CHID_B" || rc=1 ;;
        chid-none) run_chid "$c" fallback 1 1 "$A/ism0.sock,chid=$CHID_A" "$B/ism0.sock,chid=$CHID_B" || rc=1 ;;
        mixed-*) read -r la lb <<<"$(mixed_lines "$c")"
            run_chid "$c" "" 2 0 "$A/ism0.sock,chid=$CHID_A" "$A/ism1.sock,chid=$CHID_A" "$la" "$lb" || rc=1 ;;
        loopback) KERNEL="$LOOPBACK_KERNEL" VARIANT=loopback run_chid "$c" self 2 0 \
            "$A/ism0.sock,chid=$CHID_A" "$A/ism1.sock,chid=$CHID_A" || rc=1 ;;
        multi) run_multi || rc=1 ;;
    esac
    [ -s "$RUN_DIR/line" ] || printf '%-10s NOT as expected: no verdict (logs: %s)\n' "$c" "$RUN_DIR" >"$RUN_DIR/line"
    # A line that says "as expected" with a failed run (a guest, an emulator's shutdown) is not.
    [ "$rc" = 0 ] || sed -i -E 's/^([^ ]+ +)as expected:/\1NOT as expected:/' "$RUN_DIR/line"
    lines+=("$(cat "$RUN_DIR/line")")
    [ "$rc" = 0 ] || failed=$((failed + 1))
    step "topologies: case '$c' done in $((SECONDS - start)) s (logs: $RUN_DIR)"
done

echo
printf '%s\n' "${lines[@]}" | tee "$TOPO_DIR/verdicts.txt"
echo "$(( ${#cases[@]} - failed )) of ${#cases[@]} cases as expected"
[ "$failed" = 0 ]
