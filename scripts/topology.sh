# Starting and stopping the emulator and guests for the demo and the end-to-end tests.
# Source it after scripts/lib.sh. Every process started here is stopped by `topo_cleanup`
# (installed as an EXIT trap by `topo_init`), so nothing outlives the script.

EMU_BIN="${EMU_BIN:-$REPO_ROOT/target/release/ism-emu}"
# GUEST_TIMEOUT (s): a guest's hard limit, read when it starts (600 unless the script or
# the caller sets it: a script's own default is set after this file is sourced).

_topo_pids=()
EMU_PID=""
EMU_EXTRA=()

# topo_init RUN_DIR: a fresh folder for sockets, logs and the event stream.
topo_init() {
    RUN_DIR="$1"
    rm -rf "$RUN_DIR"
    mkdir -p "$RUN_DIR"
    trap topo_cleanup EXIT
    trap 'exit 130' INT TERM
}

topo_cleanup() {
    local pid f
    # A guest still running is stopped at its QEMU: the TERM below ends run-guest.sh but
    # not the QEMU it started. The pid is taken only while that QEMU's command line names
    # the pidfile, so a stale file of a killed guest never hits a recycled pid.
    for f in "${RUN_DIR:-/nonexistent}"/*.qemu.pid; do
        # QEMU removes its pidfile as it exits, so the file may be gone by now.
        pid="$(cat "$f" 2>/dev/null)" && [ -n "$pid" ] || continue
        tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "-pidfile $f" || continue
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${_topo_pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${_topo_pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    _topo_pids=()
}

# check_artefacts [LINE[:VARIANT]...]: the emulator, QEMU and the kernel and initramfs of
# KERNEL and VARIANT are there, and of each LINE (in VARIANT unless it names one), for
# guests started with GUEST_LINE or a VARIANT of their own.
check_artefacts() {
    local f k v
    check_kernel_selection
    for f in "$EMU_BIN" "$BUILD_DIR/qemu/bin/qemu-system-s390x"; do
        [ -e "$f" ] || die "missing $f: run 'make images emulator' first"
    done
    for k in "$KERNEL" "$@"; do
        v="$VARIANT"
        [[ "$k" != *:* ]] || { v="${k#*:}"; k="${k%%:*}"; }
        for f in "$(guest_kernel "$k" "$v")" "$(guest_initrd "$k" "$v")"; do
            [ -e "$f" ] || die "missing $f: run 'make images emulator' (KERNEL=$k VARIANT=$v) first"
        done
    done
}

# emu_start N: the emulator with N functions (sockets ism0..ism<N-1>.sock in RUN_DIR),
# plus the arguments in the array EMU_EXTRA if set (e.g. --fault SPEC).
emu_start() {
    emu_serve "$RUN_DIR" "$CHID" "$1"
    EMU_PID="$EMU_LAST_PID"
}

# emu_start_named NAME CHID N: one more emulator, a machine of its own with that CHID and
# N functions, in RUN_DIR/NAME (sockets ism0..ism<N-1>.sock, control.sock, events.jsonl,
# emulator.log); its pid in EMU_PID_<NAME>. Guests take its functions as
# "RUN_DIR/NAME/ismI.sock,chid=CHID" (guest_start). EMU_EXTRA as for emu_start.
emu_start_named() {
    mkdir -p "$RUN_DIR/$1"
    emu_serve "$RUN_DIR/$1" "$2" "$3"
    printf -v "EMU_PID_$1" '%s' "$EMU_LAST_PID"
}

# emu_serve DIR CHID N: `ism-emu serve` with N functions, everything of it in DIR; its
# pid in EMU_LAST_PID once its control socket is up.
emu_serve() {
    local dir="$1" chid="$2" n="$3" i args=() pid
    for ((i = 0; i < n; i++)); do args+=(--socket "$dir/ism$i.sock"); done
    args+=("${EMU_EXTRA[@]}")
    RUST_LOG="${RUST_LOG:-info}" "$EMU_BIN" serve --chid "$chid" "${args[@]}" \
        --control "$dir/control.sock" --events "$dir/events.jsonl" \
        >"$dir/emulator.log" 2>&1 &
    pid=$!
    _topo_pids+=("$pid")
    EMU_LAST_PID="$pid"
    wait_for_socket "$dir/control.sock" 10 "$pid" && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$dir/emulator.log" >&2; die "the emulator exited at start"; }
    die "the emulator did not come up (see $dir/emulator.log)"
}

# device_cmds FUNCTION NAME...: the commands of those names the function (0: ism0, 1:
# ism1) issued, in order, one "name=ok|fail" a line, from the run's trace.
device_cmds() {
    python3 - "$RUN_DIR/trace.jsonl" "$@" <<'PY'
import json, sys
f, names = int(sys.argv[2]), set(sys.argv[3:])
for line in open(sys.argv[1]):
    rec = json.loads(line)
    cmd = rec.get("cmd")
    name = cmd if isinstance(cmd, str) else (next(iter(cmd)) if isinstance(cmd, dict) and cmd else None)
    if rec.get("op") == "cmd" and rec.get("f") == f and name in names:
        print(f"{name}={'ok' if rec.get('ret') == 0 else 'fail'}")
PY
}

# emu_stats: "RSS_KB FDS THREADS" of the running emulator (fields it cannot read: empty;
# the caller decides whether that is an error).
emu_stats() {
    local status="/proc/$EMU_PID/status" fds
    fds="$(find "/proc/$EMU_PID/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)"
    echo "$(awk '$1 == "VmRSS:" {print $2}' "$status" 2>/dev/null) $fds $(awk '$1 == "Threads:" {print $2}' "$status" 2>/dev/null)"
}

# emu_stop: SIGTERM, and check that it exited cleanly and removed its sockets.
emu_stop() {
    [ -n "$EMU_PID" ] || return 0
    local rc=0
    emu_stop_at "$EMU_PID" "$RUN_DIR" || rc=1
    EMU_PID=""
    return "$rc"
}

# emu_stop_named NAME: emu_stop for an emulator of emu_start_named.
emu_stop_named() {
    local var="EMU_PID_$1"
    [ -n "${!var:-}" ] || return 0
    emu_stop_at "${!var}" "$RUN_DIR/$1"
}

# emu_stop_at PID DIR: SIGTERM to the emulator PID, which serves its sockets in DIR.
emu_stop_at() {
    local pid="$1" dir="$2" rc=0
    kill -TERM "$pid" 2>/dev/null || true
    timeout 15 tail --pid="$pid" -f /dev/null || { kill -KILL "$pid" 2>/dev/null; rc=1; }
    wait "$pid" 2>/dev/null || rc=$?
    [ "$rc" -eq 0 ] || { warn "emulator exited with status $rc"; return 1; }
    if compgen -G "$dir/*.sock" >/dev/null; then
        warn "emulator left sockets behind: $(ls "$dir"/*.sock)"
        return 1
    fi
}

observe() { "$EMU_BIN" observe --control "$RUN_DIR/control.sock" "$@"; }
# observe_named NAME ARGS...: observe for an emulator of emu_start_named.
observe_named() { local n="$1"; shift; "$EMU_BIN" observe --control "$RUN_DIR/$n/control.sock" "$@"; }

# guest_start NAME ISM_SOCKET IP NET_SERVER(on|off) RUN_WORDS...   (ISM_SOCKET "": none)
# ISM_SOCKET may name several functions, separated by '|', each SOCKET[,chid=0xHEX]
# (run-guest.sh's --ism; without chid=, CHID's): "$RUN_DIR/A/ism0.sock,chid=0x1234|...".
# Boots one guest in the background; its pid is in GUEST_PID_<NAME>. QEMU records the
# guest's network traffic (the first 512 bytes of each frame: enough for the SMC CLC
# handshake, whose SMC-D version check_e2e.py reads) in RUN_DIR/NAME.net.pcap. Its QEMU
# monitor listens at RUN_DIR/NAME.monitor (tests/ismcheck/guest_where.py reads a stuck guest's
# CPUs through it).
# Optional, from the environment: GUEST_NET (the link's socket, default RUN_DIR/net.sock:
# a link joins exactly one listening and one connecting guest, so more pairs need one
# each), GUEST_NET_MCAST (GROUP:PORT instead: a hub on a UDP multicast group, any number
# of guests, run-guest.sh --net-mcast; NET_SERVER is then unused) with GUEST_MAC (this
# guest's MAC, unique on the hub), GUEST_MEM, GUEST_SMP and GUEST_TB_SIZE (run-guest.sh's
# --mem, --smp and --tb-size), GUEST_APPEND_EXTRA (more kernel parameters, e.g.
# ismtest.verbose=1), GUEST_LINE (this guest's kernel line instead of KERNEL, same
# VARIANT: `GUEST_LINE=5.10 guest_start a ...`; its kernel and initramfs must be built,
# check_artefacts LINE).
# GUEST_PCAP=off: no capture (bench-guests: a TCP phase at 100+ MB/s fills gigabytes, and
# QEMU writes each frame on the guest's own host CPU, which would slow the TCP it measures).
# GUEST_TRACE_EVENTS=FILE: QEMU traces the events FILE names into RUN_DIR/NAME.trace
# (its simple backend; scripts/hops.sh). A QEMU built with the log backend as well prints
# every such event too, to stderr unless -D says otherwise: a write per event into the pipe
# of run-guest.sh's tee, which then wakes on the vCPU's own host CPU, several times a
# store. -D /dev/null keeps that cost to the write. GUEST_GLOBAL=DRIVER.PROPERTY=VALUE: one
# -global for each guest's QEMU (e.g. vfio-user-pci.x-recv-inline=off).
guest_start() {
    local name="$1" sock="$2" ip="$3" net_server="$4"; shift 4
    local run size=() dump=() isms=() specs=() spec fns=() fn net=()
    [ "${GUEST_PCAP:-on}" = off ] ||
        dump=(-object "filter-dump,id=netdump0,netdev=net0,maxlen=512,file=$RUN_DIR/$name.net.pcap")
    run="$(IFS=+; echo "$*")"
    [ -z "${GUEST_MEM:-}" ] || size+=(--mem "$GUEST_MEM")
    [ -z "${GUEST_SMP:-}" ] || size+=(--smp "$GUEST_SMP")
    [ -z "${GUEST_TB_SIZE:-}" ] || size+=(--tb-size "$GUEST_TB_SIZE")
    if [ -n "${GUEST_NET_MCAST:-}" ]; then
        net=(--net-mcast "$GUEST_NET_MCAST" ${GUEST_MAC:+--mac "$GUEST_MAC"})
    else
        net=(--net-socket "${GUEST_NET:-$RUN_DIR/net.sock}" --net-server "$net_server" ${GUEST_MAC:+--mac "$GUEST_MAC"})
    fi
    # The emulated functions this guest gets (emu_start serves ismN.sock as function ismN;
    # one of emu_start_named NAME's is NAME/ismN): check_e2e.py compares the guest's view
    # of its function (/sys/class/dibs) with the host's. An empty ISM_SOCKET: no ISM
    # function (the loopback-ism guest of make coverage).
    IFS='|' read -r -a specs <<<"$sock"
    for spec in ${specs[@]+"${specs[@]}"}; do
        isms+=(--ism "$spec")
        fn="${spec%%,*}"; fn="${fn%.sock}"
        [[ "$fn" == "$RUN_DIR"/* ]] && fns+=("${fn#"$RUN_DIR"/}") || fns+=("${fn##*/}")
    done
    echo "${fns[*]:-none}" >"$RUN_DIR/$name.function"
    local timeout="${GUEST_TIMEOUT:-600}"
    local append="console=ttysclp0 panic=-1 oops=panic ismtest.ip=$ip ismtest.run=$run ismtest.timeout=$((timeout - 30))${GUEST_APPEND_EXTRA:+ $GUEST_APPEND_EXTRA}"
    ${GUEST_CPUS:+taskset -c "$GUEST_CPUS"} "$REPO_ROOT/qemu-configs/run-guest.sh" --name "$name" \
        --kernel "$(guest_kernel "${GUEST_LINE:-$KERNEL}")" \
        --initrd "$(guest_initrd "${GUEST_LINE:-$KERNEL}")" --append "$append" \
        ${isms[@]+"${isms[@]}"} --chid "$CHID" \
        "${net[@]}" ${size[@]+"${size[@]}"} \
        --log "$RUN_DIR/$name.console.log" --timeout "$timeout" \
        --pidfile "$RUN_DIR/$name.qemu.pid" --status-file "$RUN_DIR/$name.status" \
        -- ${dump[@]+"${dump[@]}"} \
        -monitor "unix:$RUN_DIR/$name.monitor,server=on,wait=off" \
        ${GUEST_TRACE_EVENTS:+-trace "events=$GUEST_TRACE_EVENTS,file=$RUN_DIR/$name.trace" -D /dev/null} \
        ${GUEST_GLOBAL:+-global "$GUEST_GLOBAL"} \
        >"$RUN_DIR/$name.run.log" 2>&1 &
    local pid=$!
    _topo_pids+=("$pid")
    printf -v "GUEST_PID_$name" '%s' "$pid"
    # A guest still running 20 s before its timeout is stuck: where its CPUs are goes to
    # RUN_DIR/NAME.where.txt before the timeout stops it (guest_wait prints it).
    if [ "$timeout" -gt 60 ]; then
        # (python3 itself in the background, not a subshell: topo_cleanup's TERM ends it)
        local _gw
        guest_where_argv "$name"
        "${_gw[@]}" --samples 10 --interval 0.2 --after $((timeout - 20)) --while-pid "$pid" \
            >"$RUN_DIR/$name.where.txt" 2>&1 &
        _topo_pids+=("$!")
    fi
}

# pins_for_two: the host CPUs for guests a and b in PINS ("CPUS_A CPUS_B", taskset lists;
# "none": leave placement to the scheduler). Default with 2 or more CPUs: the first two,
# each guest's QEMU (every thread) and the emulator's thread serving its function on one
# CPU of its own, so that a waited store's hand-overs (vCPU -> device -> QEMU's vfio-user
# thread -> vCPU) stay on one CPU instead of waking an idle one at every hop. Sets
# PIN_A and PIN_B (empty: no pinning).
pins_for_two() {
    local spec="${PINS:-}" cpus
    if [ -z "$spec" ]; then
        # The first two CPUs this process may run on (a cpuset may not start at 0).
        cpus="$(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0))[:2])')"
        if [ "$(wc -w <<<"$cpus")" = 2 ]; then spec="$cpus"; else spec=none; fi
    fi
    PIN_A=""; PIN_B=""
    [ "$spec" = none ] && return 0
    read -r PIN_A PIN_B <<<"$spec"
    [ -n "$PIN_B" ] || die "PINS='$spec': give two CPU lists (guest a's, guest b's) or none"
}

# pin_functions: after pins_for_two and emu_start, the emulator's ism0 thread beside guest
# a and ism1 beside guest b (nothing when PIN_A is empty).
pin_functions() {
    [ -n "$PIN_A" ] || return 0
    pin_function ism0 "$PIN_A" && pin_function ism1 "$PIN_B"
}

# pin_function FUNCTION CPUS: the emulator's thread that serves FUNCTION (it carries the
# function's name) on those host CPUs (taskset's list), e.g. beside the guest that drives it.
pin_function() {
    local task
    for task in /proc/"$EMU_PID"/task/*; do
        [ "$(cat "$task/comm" 2>/dev/null)" = "$1" ] || continue
        taskset -p -c "$2" "${task##*/}" >/dev/null || return 1
        return 0
    done
    echo "pin_function: no emulator thread named $1" >&2
    return 1
}

# guest_kill NAME: SIGKILL to that guest's QEMU (by the pid QEMU wrote), as a crash.
guest_kill() {
    local pidfile="$RUN_DIR/$1.qemu.pid" pid i
    for ((i = 0; i < 50; i++)); do [ -s "$pidfile" ] && break; sleep 0.1; done
    pid="$(cat "$pidfile" 2>/dev/null)" && [ -n "$pid" ] || return 1
    kill -KILL "$pid"
}

# record_check NAME STATUS [DIAGNOSTIC...]: one test point of this run (STATUS 0: ok) in
# RUN_DIR/checks.jsonl, which tests/ismcheck/results.py turns into the KTAP and JUnit reports.
# Returns STATUS, so a check can end a function: `record_check x $? "why" || return 1`.
record_check() {
    local name="$1" status="$2"; shift 2
    python3 -c 'import json, sys; print(json.dumps({"name": sys.argv[1], "ok": sys.argv[2] == "0", "diag": sys.argv[3:]}))' \
        "$name" "$status" "$@" >>"$RUN_DIR/checks.jsonl"
    return "$status"
}

# guest_reports NAME: the kernel's own bug reports on guest NAME's console (WARN, BUG, an
# oops, KASAN, lockdep, the hung-task, soft-lockup and RCU stall detectors:
# tests/ismcheck/kernel_reports.py) as the test point kernel_reports_NAME, not ok if there is
# one, its diagnostics the reports' text (all of it in RUN_DIR/NAME.kernel-reports.txt).
# Every kernel can report (a stock one WARNs too); VARIANT=debug turns the detectors on.
# guest_wait calls it for every guest; a script that waits for a guest itself (e2e's
# crash) calls it after the wait. Returns 1 if there was a report.
guest_reports() {
    local name="$1" out rc=0
    out="$(ismcheck kernel_reports "$RUN_DIR/$name.console.log" \
        --out "$RUN_DIR/$name.kernel-reports.txt")" || rc=$?
    # A scenario that reaches a known bug may define known_reports NAME FILE: it prints
    # what explains every report in FILE and returns 0 only when its own evidence shows
    # that bug (then the point passes with that explanation, and KNOWN_REPORTS_NAME=1).
    local why
    if [ "$rc" = 1 ] && declare -F known_reports >/dev/null \
        && why="$(known_reports "$name" "$RUN_DIR/$name.kernel-reports.txt")"; then
        warn "guest $name: the kernel reported the known bug the scenario reaches: $why"
        printf -v "KNOWN_REPORTS_$name" 1
        record_check "kernel_reports_$name" 0 "$why"
        return 0
    fi
    case "$rc" in
        0) record_check "kernel_reports_$name" 0 "no kernel report on $name's console" ;;
        1) warn "guest $name: the kernel reported a bug ($RUN_DIR/$name.kernel-reports.txt):"
           sed -n '1,/^--- report 1 /p' <<<"$out" | sed '$d' >&2
           # The reports' text (at most 300 lines; the file has all), then the one-line
           # summary of each (JUnit's failure message is the last diagnostic line).
           record_check "kernel_reports_$name" 1 "$(sed -n '/^--- report 1 /,$p' <<<"$out" | head -n 300)" \
               "$(sed -n '1,/^--- report 1 /p' <<<"$out" | sed '$d' | tr -s ' ' | paste -sd ';' | cut -c1-480)" ;;
        *) record_check "kernel_reports_$name" 1 "tests/ismcheck/kernel_reports.py could not read $name's console (status $rc)" ;;
    esac
}

# guest_wait NAME: waits for the guest; 0 if it ran its program, it passed and its kernel
# reported no bug (guest_reports). Records the outcome as the run's test point
# guest_NAME, with the guest's SUMMARY lines.
guest_wait() {
    local name="$1" var="GUEST_PID_$1" rc=0 reports=0
    wait "${!var}" 2>/dev/null || rc=$?
    # 127: bash no longer knows the child. It drops a finished child's status when a new
    # child gets its PID, which hundreds of guests and their threads make happen (PIDs
    # wrap at 32768); run-guest.sh wrote its status as it exited.
    [ "$rc" != 127 ] || [ ! -s "$RUN_DIR/$name.status" ] || rc="$(cat "$RUN_DIR/$name.status")"
    guest_reports "$name" || reports=1
    local log="$RUN_DIR/$name.console.log" summary
    summary="$(grep -E '^SUMMARY ' "$log" 2>/dev/null | cut -c1-300)" || true
    # 3: QEMU ended normally and /init reported RESULT FAIL (run-guest.sh): checked below.
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; then
        warn "guest $name: QEMU ended with status $rc; last console lines:"
        tail -n 40 "$log" >&2 || true
        cat "$RUN_DIR/$name.run.log" >&2 || true
        grep -E '^(guest_where|sample 0 |cpu [0-9]+:)' "$RUN_DIR/$name.where.txt" >&2 2>/dev/null || true
        record_check "guest_$name" 1 "QEMU ended with status $rc" "$(tail -n 5 "$log" 2>/dev/null)" \
            "$(grep -E '^cpu [0-9]+:' "$RUN_DIR/$name.where.txt" 2>/dev/null | paste -sd ';')"
        return 1
    fi
    if ! grep -q '^ISMTEST: RESULT PASS' "$log"; then
        warn "guest $name: test did not pass; last console lines:"
        tail -n 40 "$log" >&2
        record_check "guest_$name" 1 "the guest's program did not pass" "$summary" \
            "$(grep -E '^(ERROR|smctest|SUITE: FAIL)' "$log" | tail -n 5)"
        return 1
    fi
    record_check "guest_$name" 0 "$summary"
    return "$reports"
}

# run_pair TEST...: the two-guest topology. Guest a (10.0.0.1) serves, guest b
# (10.0.0.2) connects, both on one fabric of 2 functions; runs the smcsuite TESTs and
# waits for both. 0 if both passed.
run_pair() {
    emu_start 2
    guest_start a "$RUN_DIR/ism0.sock" 10.0.0.1/24 on smcsuite server 10.0.0.1 "$@"
    guest_start b "$RUN_DIR/ism1.sock" 10.0.0.2/24 off smcsuite client 10.0.0.1 "$@"
    local ok=0
    guest_wait a || ok=1
    guest_wait b || ok=1
    return $ok
}

# The VLAN of the topology vlan (e2e.sh, topologies.sh), and the ports of guest-tests/progs/smcv1's phases with
# the SMC-D version each must agree on (from the kernel's code: smcv1's header): V1_EXPECT
# over a VLAN, V1_EXPECT_NOVLAN without one, which adds the IPv6 phase.
# shellcheck disable=SC2034 # used by the scripts that source this one
V1_VLAN=39
# shellcheck disable=SC2034
V1_EXPECT=(--expect-clc "12345=1" --expect-clc "12346=2")
# shellcheck disable=SC2034
V1_EXPECT_NOVLAN=("${V1_EXPECT[@]}" --expect-clc "12347=1")
# 5.10 has no UEIDs and no SEID switch (its net/smc has no SMC_GEN_NETLINK family): its
# client cannot be kept from v2, which the server tries first, so every phase is v2.
if [ "$KERNEL" = 5.10 ]; then
    V1_EXPECT=(--expect-clc "12345=2" --expect-clc "12346=2")
    V1_EXPECT_NOVLAN=("${V1_EXPECT[@]}" --expect-clc "12347=2")
fi

# run_v1 [VLAN]: SMC-Dv1 (e2e.sh's topologies v1 and vlan, topologies.sh's cases): guest a
# serves, guest b connects, both run smcv1 (over VLAN if given); check_e2e.py then holds the
# handshakes to V1_EXPECT.
run_v1() {
    local vlan="${1:-}" a_args=(server 10.0.0.1) b_args=(client 10.0.0.1)
    if [ -n "$vlan" ]; then
        a_args=(server "10.0.$vlan.1" "$vlan" "10.0.$vlan.1/24")
        b_args=(client "10.0.$vlan.1" "$vlan" "10.0.$vlan.2/24")
    fi
    emu_start 2
    guest_start a "$RUN_DIR/ism0.sock" 10.0.0.1/24 on smcv1 "${a_args[@]}"
    guest_start b "$RUN_DIR/ism1.sock" 10.0.0.2/24 off smcv1 "${b_args[@]}"
    local ok=0
    guest_wait a || ok=1
    guest_wait b || ok=1
    return $ok
}

# pair_verdict RUN_DIR GUESTS: one line that says whether a two-guest run worked, from
# the guests' own checks (GUESTS: run_pair's status), how many of the client b's
# connections its kernel reported as SMC-D (the SUMMARY lines on its console), and the
# host's verdict on the DMBs (the VERDICT line of RUN_DIR/summary.txt, ism-emu observe
# summary's output). Prints "PASSED: ..." or "FAILED: ..."; returns 0 if it passed.
pair_verdict() {
    local dir="$1" guests="$2" ok=0 conns smcd verdict
    read -r conns smcd < <(awk '/^SUMMARY / && / side=client / {
            for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "conns") c += kv[2]; if (kv[1] == "smcd") d += kv[2] } }
        END { print c + 0, d + 0 }' "$dir/b.console.log" 2>/dev/null || echo 0 0)
    verdict="$(sed -n 's/^VERDICT: //p' "$dir/summary.txt" 2>/dev/null | tail -n 1)"
    [ "$guests" = 0 ] || ok=1
    { [ "$conns" -gt 0 ] && [ "$smcd" -eq "$conns" ]; } || ok=1
    case "$verdict" in CLEAN*) ;; *) ok=1 ;; esac
    printf '%s: %s; %s of %s connections SMC-D; host: %s\n' "$([ $ok = 0 ] && echo PASSED || echo FAILED)" \
        "$([ "$guests" = 0 ] && echo "both guests' checks passed" || echo "a guest's checks FAILED")" \
        "$smcd" "$conns" "${verdict:-no verdict}"
    return "$ok"
}

# wait_console NAME ERE SECONDS: until guest NAME's console has a line matching ERE; 1
# if SECONDS pass first.
wait_console() {
    local t0=$SECONDS
    until grep -qE -- "$2" "$RUN_DIR/$1.console.log" 2>/dev/null; do
        [ $((SECONDS - t0)) -lt "$3" ] || return 1
        sleep 0.5
    done
}

# guest_where_argv NAME: sets _gw to the command of tests/ismcheck/guest_where.py on guest NAME
# (its monitor, its kernel's System.map, its console's MODSYM lines), options to follow.
guest_where_argv() {
    _gw=(ismcheck guest_where "$RUN_DIR/$1.monitor"
        "$(kernel_dir "${GUEST_LINE:-$KERNEL}")/System.map" --console "$RUN_DIR/$1.console.log")
}

# guest_where_now NAME [ARGS...]: samples where guest NAME's vCPUs are (20 samples 0.1 s
# apart, and ARGS, e.g. --stack WORDS) into RUN_DIR/NAME.where.txt, and sets WHERE to its
# summary lines ("cpu N: k/n samples in FUNCTION", joined by "; "). For a guest that
# stopped answering.
guest_where_now() {
    local name="$1" _gw
    shift
    guest_where_argv "$name"
    "${_gw[@]}" --samples 20 --interval 0.1 "$@" >"$RUN_DIR/$name.where.txt" 2>&1 || true
    WHERE="$(grep -E '^cpu [0-9]+:' "$RUN_DIR/$name.where.txt" | paste -sd ';' | sed 's/;/; /g')"
    [ -n "$WHERE" ] || WHERE="no sample ($(head -n 1 "$RUN_DIR/$name.where.txt"))"
}
