#!/usr/bin/env bash
# End-to-end suite: unmodified guest kernels run SMC-D over the emulated ISM device.
#
# Usage: tests/smcd/e2e.sh [TOPOLOGY...]      (default: two self crash api v1 vlan)
#   two    two guests, one emulator process: guest a (10.0.0.1) serves, guest b
#          (10.0.0.2) connects; the TCP handshake crosses a QEMU socket netdev
#   self   one guest talking to itself through its own ISM function
#   crash  guest b is killed in the middle of a stream: guest a's connection must abort
#          promptly (the device tells it the peer's GID is gone), guest a and the
#          emulator carry on, and the emulator still shuts down cleanly
#   api    one guest talking to itself: the socket API subtest by subtest (smcapi: socket
#          options, ioctls, peek, urgent data, splice, shutdown, non-blocking, fallback,
#          IPPROTO_SMC, netlink, PNET table, sysctls), then the guest removes its modules
#          (ismtest.unload=1): the ism driver must unregister its SBA and event queue
#   v1     SMC-Dv1: two guests whose NIC and ISM function share a PNET ID (net/smc's
#          software PNET table, guest-tests/progs/smcconf): the client proposes v1 and v2;
#          with no common EID the server accepts v1, with the default EIDs v2
#   vlan   the same over an 802.1Q interface (VLAN 39) on both guests: the handshakes
#          tagged on the wire, each function registers VLAN 39 with the device and,
#          when the guest unloads smc, releases it
#   roce   (only when named; a kernel with soft-RoCE, rdma_rxe: the GCOV=1 kernels) each
#          guest has an ISM function and an RDMA device on its NIC, as a machine with
#          ISM and a RoCE adapter: SMC-D is chosen while both can run, SMC-Rv2 once the
#          ISM functions are unbound (smcroce)
#   idle   (only when named: 12 minutes) two connections, then both guests idle with
#          their link group: net/smc frees it 10 minutes after the last connection
#          (smc_lgr_free_work), and the host sees every DMB of both sides unregistered
#          then, not before and not only at power-off
# Environment: KERNEL (5.10 | 6.1 | 6.12 | 7.2 | 7.3), VARIANT (stock | prezero | nozero), TESTS (the
# smcsuite tests, default "echo stream seq concurrent"), GUEST_TIMEOUT (s, default 600),
# E2E_DIR (logs, default build/e2e), RESULTS_DIR and RESULTS_NAME (the KTAP and JUnit
# reports: RESULTS_DIR/RESULTS_NAME.ktap and .junit.xml; default build/results and
# <E2E_DIR's name>-<kernel>, e.g. e2e-6.12).
#
# Checks, per topology: each guest passed (every connection SMC-D, every byte verified,
# per smctest's sock_diag query in the guest); the emulator saw the traffic; its DMB
# observations match what the kernel variant does (tests/ismcheck/check_e2e.py); it shut down
# cleanly. Logs of every run stay in E2E_DIR.
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
source "$REPO_ROOT/scripts/topology.sh"

help_and_no_options "$@"
topologies=("$@")
[ ${#topologies[@]} -gt 0 ] || topologies=(two self crash api v1 vlan)
for topo in "${topologies[@]}"; do one_of topology "$topo" two self crash api v1 vlan roce idle; done
check_kernel_selection
need_packages guests   # python3: check_e2e.py
E2E_DIR="${E2E_DIR:-$BUILD_DIR/e2e}"
TESTS="${TESTS:-echo stream seq concurrent}"

check_artefacts
mkdir -p "$E2E_DIR"
failed=()
skipped=()
run_dirs=()

run_self() {
    emu_start 1
    # shellcheck disable=SC2086
    guest_start solo "$RUN_DIR/ism0.sock" 10.0.0.1/24 on smcsuite self 10.0.0.1 $TESTS
    guest_wait solo
}

run_api() {
    emu_start 1
    GUEST_APPEND_EXTRA="ismtest.unload=1${GUEST_APPEND_EXTRA:+ $GUEST_APPEND_EXTRA}" \
        guest_start solo "$RUN_DIR/ism0.sock" 10.0.0.1/24 on smcapi self 10.0.0.1
    local ok=0 log="$RUN_DIR/solo.console.log" line
    guest_wait solo || ok=1
    # guest_wait records the program's SUMMARY; each subtest's line is a test point too
    while read -r _ name verdict why; do
        case "$verdict" in
            ok) record_check "api_$name" 0 ;;
            skip) python3 -c 'import json, sys; print(json.dumps({"name": sys.argv[1], "ok": True, "skip": sys.argv[2], "diag": []}))' \
                "api_$name" "$why" >>"$RUN_DIR/checks.jsonl" ;;
            *) record_check "api_$name" 1 "$why" || true ;;
        esac
    done < <(grep -E '^API [a-z-]+ (ok|FAIL|skip)' "$log" | tr -d '\r')
    line="$(grep -E '^ISMTEST: UNLOAD ' "$log")"
    [[ "$line" == "ISMTEST: UNLOAD ok"* ]]
    record_check modules_unloaded $? "${line:-no UNLOAD line on the console}" || ok=1
    # The ism driver's remove path (ism_dev_exit) unregisters the event queue and the
    # SBA: the device must have seen both commands succeed, from this function.
    local cmds
    cmds="$(device_cmds 0 unreg_sba unreg_ieq)"
    [ "$(grep '^unreg_sba=' <<<"$cmds" | tail -n 1)" = unreg_sba=ok ] \
        && [ "$(grep '^unreg_ieq=' <<<"$cmds" | tail -n 1)" = unreg_ieq=ok ]
    record_check function_unregistered $? "the device saw ism0's SBA and event queue unregistered (trace: $(xargs <<<"${cmds:-none}"))" || ok=1
    return $ok
}

# Seconds guest a may take, after guest b was killed, to see its connection abort. Without
# the device's GID event it would wait for its 300 s I/O timeout.
CRASH_ABORT_LIMIT="${CRASH_ABORT_LIMIT:-60}"

run_crash() {
    emu_start 2
    guest_start a "$RUN_DIR/ism0.sock" 10.0.0.1/24 on smctest stream server --io-timeout=300
    guest_start victim "$RUN_DIR/ism1.sock" 10.0.0.2/24 off \
        smctest stream client --host=10.0.0.1 --bytes=64G --io-timeout=300
    ismcheck wait_stream "$EMU_BIN" "$RUN_DIR/control.sock" --timeout 300
    record_check stream_started $? "the stream between a and victim reached the device" \
        || { warn "crash: the stream never started"; tail -n 20 "$RUN_DIR"/*.console.log >&2; return 1; }
    step "crash: killing guest victim's QEMU mid-stream"
    guest_kill victim
    record_check victim_killed $? "SIGKILL to the victim's QEMU" || { warn "crash: no QEMU to kill"; return 1; }
    local killed=$SECONDS
    wait "$GUEST_PID_victim" 2>/dev/null || true
    local rc=0 ok=0
    wait "$GUEST_PID_a" || rc=$?
    local took=$((SECONDS - killed))
    guest_reports victim || ok=1
    guest_reports a || ok=1
    local log="$RUN_DIR/a.console.log" last
    echo "crash: guest a ended ${took} s after the kill (run-guest.sh status $rc)"
    last="$(grep -E '^(CONN|SUMMARY|smctest)' "$log" | tail -n 4)" || true
    sed 's/^/  a: /' <<<"$last"
    # run-guest.sh's 3: QEMU ended normally and the guest's /init reported that its
    # program failed (its stream, as it must; checked on the console just below).
    [ "$rc" -eq 3 ]
    record_check survivor_alive $? "guest a's run-guest.sh ended with status $rc (3: it ran to its end, its program failed)" \
        || { warn "crash: guest a did not end normally"; ok=1; }
    grep -q '^ISMTEST: RESULT FAIL' "$log"
    record_check survivor_stream_failed $? "$last" || { warn "crash: guest a's stream did not fail"; ok=1; }
    [ "$took" -le "$CRASH_ABORT_LIMIT" ]
    record_check survivor_noticed_in_time $? "${took} s from the kill to guest a's end (limit ${CRASH_ABORT_LIMIT} s)" \
        || { warn "crash: guest a took ${took} s (> ${CRASH_ABORT_LIMIT} s) to notice"; ok=1; }
    kill -0 "$EMU_PID" 2>/dev/null
    record_check emulator_alive $? || { warn "crash: the emulator died"; ok=1; }
    # The event stream's writer flushes in the background (every 100 ms when idle): a
    # survivor that notices at once can end before the line is in the file.
    local i
    for ((i = 0; i < 50; i++)); do
        grep -q '"kind":"function_detached"' "$RUN_DIR/events.jsonl" && break
        sleep 0.1
    done
    grep -q '"kind":"function_detached"' "$RUN_DIR/events.jsonl"
    record_check detach_event $? "a function_detached event in the stream (waited up to 5 s for the writer)" \
        || { warn "crash: no function_detached event"; ok=1; }
    return $ok
}

# SMC-R's connections in the roce topology, on each guest: rv2's stream and four short
# ones (guest-tests/progs/smcroce); phase both's five are SMC-D.
ROCE_SMCR_CONNS=5

run_roce() {
    emu_start 2
    guest_start a "$RUN_DIR/ism0.sock" 10.0.0.1/24 on smcroce server 10.0.0.1
    guest_start b "$RUN_DIR/ism1.sock" 10.0.0.2/24 off smcroce client 10.0.0.1
    local ok=0
    guest_wait a || ok=1
    guest_wait b || ok=1
    return $ok
}

# A link group outlives its last connection by 10 minutes (net/smc smc_core.c:
# SMC_LGR_FREE_DELAY_SERV; the client's is 10 s longer); then smc_lgr_free_work frees it:
# the server's kernel signals the peer (a shutdown event) and both unregister their DMBs.
# The guests stay up IDLE_SECS after their connections, well past that.
LGR_FREE_DELAY=600
IDLE_SECS="${IDLE_SECS:-700}"

run_idle() {
    emu_start 2
    local ok=0
    GUEST_TIMEOUT=$((IDLE_SECS + 300)) guest_start a "$RUN_DIR/ism0.sock" 10.0.0.1/24 on smcidle server 10.0.0.1 "$IDLE_SECS"
    GUEST_TIMEOUT=$((IDLE_SECS + 300)) guest_start b "$RUN_DIR/ism1.sock" 10.0.0.2/24 off smcidle client 10.0.0.1 "$IDLE_SECS"
    guest_wait a || ok=1
    guest_wait b || ok=1
    # (both guests have ended: the event writer has flushed every line)
    python3 - "$RUN_DIR/events.jsonl" "$LGR_FREE_DELAY" >"$RUN_DIR/idle.txt" <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
delay = int(sys.argv[2])
closed = [e["time_us"] for e in events if e["kind"] == "conn_closed"]
if not closed:
    print("no connection closed"); sys.exit(1)
last = max(closed)
ok = True
for fn in ("ism0", "ism1"):
    reg = {e["token"] for e in events if e["kind"] == "dmb_registered" and e["function"] == fn}
    unreg = {e["token"]: (e["time_us"] - last) / 1e6 for e in events
             if e["kind"] == "dmb_unregistered" and e["function"] == fn}
    after = sorted(unreg.values())
    print(f"{fn}: {len(reg)} DMBs registered, unregistered {', '.join(f'{s:.1f}' for s in after) or 'never'} s after the last close")
    # every DMB kept while the link group idles, all of them freed with it
    if not reg or set(unreg) != reg:
        print(f"  {fn}: not every DMB unregistered"); ok = False
    elif not all(delay - 10 <= s <= delay + 40 for s in after):
        print(f"  {fn}: outside [{delay - 10}, {delay + 40}] s"); ok = False
sys.exit(0 if ok else 1)
PY
    record_check lgr_freed_after_idle $? "$(cat "$RUN_DIR/idle.txt")" || ok=1
    cat "$RUN_DIR/idle.txt"
    return $ok
}

# The run's trace, replayed offline (ism-emu replay), must give the live event stream
# line for line and the live snapshot's DMBs; its size per MB moved goes to trace-size.
check_replay() {
    RUST_LOG=warn "$EMU_BIN" replay "$RUN_DIR/trace.jsonl" --events "$RUN_DIR/replay-events.jsonl" \
        --snapshot "$RUN_DIR/replay-snapshot.json" >"$RUN_DIR/replay.txt" 2>&1
    record_check replay_ran $? "$(head -n 3 "$RUN_DIR/replay.txt")" || return 1
    python3 - "$RUN_DIR" <<'PY'
import json, os, sys
run = sys.argv[1]
live = open(os.path.join(run, "events.jsonl")).read().splitlines()
again = open(os.path.join(run, "replay-events.jsonl")).read().splitlines()
diff = next((i for i, (a, b) in enumerate(zip(live, again)) if a != b), None)
if diff is None and len(live) != len(again):
    diff = min(len(live), len(again))
dmbs = lambda f: json.load(open(os.path.join(run, f)))["dmbs"]
same_dmbs = dmbs("snapshot.json") == dmbs("replay-snapshot.json")
moved = sum(int(f["counters"]["bytes_out"]) for f in json.load(open(os.path.join(run, "snapshot.json")))["functions"])
size = os.path.getsize(os.path.join(run, "trace.jsonl"))
times = [json.loads(l)["t"] for l in list(open(os.path.join(run, "trace.jsonl")))[1:]]
monotonic = all(a <= b for a, b in zip(times, times[1:]))
with open(os.path.join(run, "trace-size"), "w") as out:
    print(f"{size} bytes of trace for {moved / 1e6:.1f} MB moved: {size / max(moved / 1e6, 1e-9):.0f} bytes per MB", file=out)
print(f"replay: {len(again)} event lines against {len(live)} live, first difference: {diff}; DMB summaries {'equal' if same_dmbs else 'DIFFER'}; trace times {'non-decreasing' if monotonic else 'GO BACK'}")
if diff is not None:
    print(f"  live:   {live[diff] if diff < len(live) else '(end)'}\n  replay: {again[diff] if diff < len(again) else '(end)'}")
sys.exit(0 if diff is None and same_dmbs and monotonic else 1)
PY
    record_check replay_identical $? "$(cat "$RUN_DIR/trace-size" 2>/dev/null)" \
        || { warn "replay of $RUN_DIR/trace.jsonl differs from the live run"; return 1; }
    cat "$RUN_DIR/trace-size"
}

for topo in "${topologies[@]}"; do
    topo_init "$E2E_DIR/$topo-$(kernel_suffix)"
    step "e2e: topology '$topo', kernel $KERNEL ($VARIANT), tests: $TESTS"
    start=$SECONDS
    rc=0
    case "$topo" in
        two)
            # Recorded, for the replay check below (docs/trace.md).
            EMU_EXTRA=(--trace "$RUN_DIR/trace.jsonl")
            # shellcheck disable=SC2086
            run_pair $TESTS || rc=1
            EMU_EXTRA=() ;;
        self) run_self || rc=1 ;;
        api)
            # The trace holds every command: the unload's unregistrations are checked there.
            EMU_EXTRA=(--trace "$RUN_DIR/trace.jsonl")
            run_api || rc=1
            EMU_EXTRA=() ;;
        crash) run_crash || rc=1 ;;
        idle) run_idle || rc=1 ;;
        v1) run_v1 || rc=1 ;;
        vlan) run_v1 "$V1_VLAN" || rc=1 ;;
        roce)
            if ! kernel_has_module rdma_rxe; then
                step "e2e: topology 'roce' not run: this kernel has no soft-RoCE (rdma_rxe; the GCOV=1 kernels have it)"
                topo_cleanup
                skipped+=("$topo")
                continue
            fi
            run_roce || rc=1 ;;
        *) die "unknown topology '$topo'" ;;   # refused above
    esac
    observe json >"$RUN_DIR/snapshot.json" 2>>"$RUN_DIR/emulator.log" && st=0 || st=$?
    record_check emulator_snapshot "$st" "observe json answered" || rc=1
    observe summary >"$RUN_DIR/summary.txt" 2>&1 || true
    emu_stop && st=0 || st=$?
    record_check emulator_clean_shutdown "$st" "SIGTERM: exit status 0, sockets removed" || rc=1
    topo_cleanup
    if [ -s "$RUN_DIR/trace.jsonl" ]; then
        check_replay || rc=1
    fi
    if [ "$topo" != crash ]; then
        expect=()
        case "$topo" in
            v1) expect=("${V1_EXPECT_NOVLAN[@]}") ;;
            vlan) expect=("${V1_EXPECT[@]}" --vlan "$V1_VLAN") ;;
            # on the wire: both offered, SMC-D agreed; then SMC-R alone, version 2
            roce) expect=(--smcr-conns $((2 * ROCE_SMCR_CONNS)) --expect-smc 12360=B/D2 --expect-smc 12365=B/D2
                          --expect-smc 12361=R/R2 --expect-smc 12364=R/R2) ;;
            # connections back to back: DMB reuses cannot show when zeroing happened
            api) expect=(--unpaced) ;;
        esac
        ismcheck check_e2e --variant "$VARIANT" --run-dir "$RUN_DIR" \
            --result "$RUN_DIR/result.json" --checks "$RUN_DIR/checks.jsonl" ${expect[@]+"${expect[@]}"} || rc=1
    fi
    echo $((SECONDS - start)) >"$RUN_DIR/seconds"
    run_dirs+=("$RUN_DIR")
    cat "$RUN_DIR/summary.txt"
    if [ "$rc" -eq 0 ]; then
        step "e2e: topology '$topo' PASSED in $((SECONDS - start)) s (logs: $RUN_DIR)"
    else
        step "e2e: topology '$topo' FAILED after $((SECONDS - start)) s (logs: $RUN_DIR)"
        failed+=("$topo")
    fi
done

# KTAP and JUnit for this invocation, named after the log folder and the kernel.
ismcheck results write --name "${RESULTS_NAME:-$(basename "$E2E_DIR")-$(kernel_suffix)}" \
    --out "${RESULTS_DIR:-$BUILD_DIR/results}" "${run_dirs[@]}" || failed+=(results)

notrun="${skipped[*]:+, ${#skipped[@]} not run: ${skipped[*]}}"
if [ ${#failed[@]} -gt 0 ]; then
    echo "e2e: ${#topologies[@]} topologies, ${#failed[@]} failed: ${failed[*]}"
    echo "$(( ${#topologies[@]} - ${#failed[@]} - ${#skipped[@]} )) passed, ${#failed[@]} failed$notrun"
    exit 1
fi
echo "$(( ${#topologies[@]} - ${#skipped[@]} )) passed, 0 failed$notrun"
