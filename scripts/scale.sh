#!/usr/bin/env bash
# make scale: many guests on one emulator, one ISM function each, all attached at once
# (real hardware gives a VCHID up to 255 functions): a benchmark, not a test.
#
# For each N of SCALE_GUESTS: one emulator with N functions (one CHID, one machine) and
# N guests, paired on their own network links (10.0.P.1 serves 10.0.P.2); with N odd the
# last guest talks to itself. Every guest runs smcsuite's stream (SCALE_BYTES) and then
# seq (SCALE_CONNS short connections), all over SMC-D and checked byte for byte by
# smctest. The host samples the emulator and the machine every SCALE_SAMPLE_S seconds.
#
# The guests start in turns of SCALE_TURN (64): a turn starts when every guest of the one
# before has reported its result. A guest that has reported stays up (ismtest.hold=1),
# and once both guests of its pair have, their QEMUs are frozen (SIGSTOP): the function
# stays attached (QEMU keeps its vfio-user connection, the DMBs stay registered) at no
# CPU. At the end all N are attached at once; then each is thawed and ended (SIGTERM:
# QEMU exits 0). Why: on two cores, 255 guests booting and handshaking at once starve
# each other's kernels (RCU stalls, handshakes past their timeouts), and even idle this
# kernel (a periodic 250 Hz tick) costs 5.6 % of a core a guest, 14 cores for 255
# (docs/performance.md). SCALE_TURN=0 starts them all at once and freezes none.
#
# Prints one row per N: wall time (until the last guest reported); the emulator's CPU
# time, peak RSS, fds and threads; the guests' QEMUs' RSS (at the host's peak) and how
# many were up at once; the host's memory in use at its peak (and before the run);
# connections, how many were SMC-D on both sides and verified; and the host's reuse
# verdict (observe summary --check). A row passes when all N guests were up at once,
# every connection is SMC-D and verified and the verdict is CLEAN or no reuse.
#
# Usage: scripts/scale.sh              (or: make scale GUESTS="32 64 128 255")
# Environment: SCALE_GUESTS (32), SCALE_TURN (64), SCALE_BYTES (2M), SCALE_CONNS (4),
#   SCALE_SAMPLE_S (2), GUEST_MEM (128M), GUEST_SMP (1), GUEST_TB_SIZE (16),
#   GUEST_TIMEOUT (3600), SCALE_DIR (build/scale), KERNEL, VARIANT. Writes SCALE_DIR/results.txt (the table)
#   and SCALE_DIR/N/ (logs, samples.txt). Exit status 0 if every row passed.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$REPO_ROOT/scripts/topology.sh"

no_arguments "$@"
SCALE_GUESTS="${SCALE_GUESTS:-32}"
SCALE_TURN="${SCALE_TURN:-64}"
SCALE_BYTES="${SCALE_BYTES:-2M}"
SCALE_CONNS="${SCALE_CONNS:-4}"
SCALE_SAMPLE_S="${SCALE_SAMPLE_S:-2}"
SCALE_DIR="${SCALE_DIR:-$BUILD_DIR/scale}"
# Small guests: N of them share the host's memory, and the emulator maps all their RAM.
# TCG's code cache bounded at 16 MiB (run-guest.sh --tb-size; QEMU's default grows
# towards 1 GiB): 74 MiB of RSS per guest instead of 95 (7 guests, 2026-12-06).
export GUEST_MEM="${GUEST_MEM:-128M}" GUEST_SMP="${GUEST_SMP:-1}" GUEST_TB_SIZE="${GUEST_TB_SIZE:-16}"
# A guest of N gets about 2/N of a core while all boot: generous timeouts everywhere.
export GUEST_TIMEOUT="${GUEST_TIMEOUT:-3600}"
# No capture: 2 pcap writers per guest cost memory and fds and show nothing here.
export GUEST_PCAP=off
for n in $SCALE_GUESTS; do
    [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 2 ] && [ "$n" -le 255 ] \
        || die "SCALE_GUESTS: each N must be 2..255 (one VCHID's functions), got '$n'"
done
[[ "$SCALE_TURN" =~ ^[0-9]+$ ]] || die "SCALE_TURN: a number of guests (0: all at once), got '$SCALE_TURN'"
# Every guest stays up after its result until the host ends it (SIGTERM: QEMU exits 0).
export GUEST_APPEND_EXTRA="${GUEST_APPEND_EXTRA:+$GUEST_APPEND_EXTRA }ismtest.hold=1"
check_kernel_selection
need_packages guests
check_artefacts
mkdir -p "$SCALE_DIR"
# The emulator holds a few descriptors per function and QEMU a few per guest.
ulimit -n "$(ulimit -Hn)"

# smctest's own timeouts, for both sides: a guest may wait minutes for its peer to boot.
WAITS="--connect-timeout=1800,--accept-timeout=1800,--io-timeout=300,--timeout=3300"
TESTS="stream:--bytes=$SCALE_BYTES,$WAITS seq:--conns=$SCALE_CONNS,--bytes=64K,--rounds=2,--pause-ms=200,$WAITS"
# The guest's /init splits ismtest.run on ',' as on '+': the commas travel as %2C.
TESTS="${TESTS//,/%2C}"

mem_kb() { awk -v k="$1" '$1 == k ":" {print $2}' /proc/meminfo; }
proc_field() { awk -v k="$2" '$1 == k ":" {print $2}' "/proc/$1/status" 2>/dev/null; }

# sampler: every SCALE_SAMPLE_S s one line "t mem_used_kb emu_rss_kb emu_fds emu_threads
# qemu_rss_kb qemus" into RUN_DIR/samples.txt, until killed.
sampler() {
    # Not the run's traps: ending this sampler must not end the run (topo_cleanup).
    trap - EXIT INT TERM
    # A sample that cannot be read (no QEMU yet, the emulator gone) is a short line, never
    # the sampler's end.
    set +e +o pipefail
    local total t0=$SECONDS
    total="$(mem_kb MemTotal)"
    while :; do
        local q
        q="$(cat "$RUN_DIR"/*.qemu.pid 2>/dev/null | xargs -r ps -o rss= -p 2>/dev/null \
            | awk '{s += $1; n++} END {print s + 0, n + 0}')"
        printf '%s %s %s %s\n' $((SECONDS - t0)) $((total - $(mem_kb MemAvailable))) "$(emu_stats)" "$q"
        sleep "$SCALE_SAMPLE_S"
    done >>"$RUN_DIR/samples.txt"
}

# held NAME: the guest has reported and idles (ismtest.hold=1).
held() { grep -aq '^ISMTEST: HOLD' "$RUN_DIR/$1.console.log" 2>/dev/null; }
# partner NAME: the other guest of its pair (none for the guest alone).
partner() { case "$1" in s[0-9]*) echo "c${1#s}" ;; c[0-9]*) echo "s${1#c}" ;; esac; }
# await_results NAME...: until each guest has printed its RESULT line or its QEMU has
# ended (the run's own timeouts bound both). With turns, a pair whose guests both idle
# is frozen meanwhile.
declare -A frozen=()
await_results() {
    local g left p
    while :; do
        left=0
        for g in "$@"; do
            if [ "$SCALE_TURN" -gt 0 ] && [ -z "${frozen[$g]:-}" ] && held "$g"; then
                p="$(partner "$g")"
                if [ -z "$p" ] || held "$p"; then
                    kill -STOP "$(cat "$RUN_DIR/$g.qemu.pid")" 2>/dev/null && frozen[$g]=1
                fi
            fi
            grep -aq '^ISMTEST: RESULT ' "$RUN_DIR/$g.console.log" 2>/dev/null && continue
            local var="GUEST_PID_$g"
            kill -0 "${!var}" 2>/dev/null || continue
            left=$((left + 1))
        done
        [ "$left" -gt 0 ] || break
        sleep 2
    done
    step "scale: $# guests have reported, $((SECONDS - t0))s in (${#frozen[@]} frozen)"
}

rows=() failed=()
for n in $SCALE_GUESTS; do
    topo_init "$SCALE_DIR/$n"
    pairs=$((n / 2))
    step "scale: $n guests ($pairs pairs$([ $((n % 2)) = 0 ] || echo ", one alone") of $GUEST_MEM, $GUEST_SMP vCPU) on one emulator, kernel $KERNEL ($VARIANT)"
    base_kb=$(( $(mem_kb MemTotal) - $(mem_kb MemAvailable) ))
    t0=$SECONDS
    emu_start "$n"
    sampler &
    sampler_pid=$!
    names=() turn=()
    for ((p = 0; p < pairs; p++)); do
        GUEST_NET="$RUN_DIR/net-$p.link" guest_start "s$p" "$RUN_DIR/ism$((2 * p)).sock" \
            "10.0.$p.1/24" on smcsuite server "10.0.$p.1" $TESTS
        GUEST_NET="$RUN_DIR/net-$p.link" guest_start "c$p" "$RUN_DIR/ism$((2 * p + 1)).sock" \
            "10.0.$p.2/24" off smcsuite client "10.0.$p.1" $TESTS
        names+=("s$p" "c$p") turn+=("s$p" "c$p")
        # A pair never straddles two turns: its server and client start together.
        if [ "$SCALE_TURN" -gt 0 ] && [ ${#turn[@]} -ge "$SCALE_TURN" ] && [ $((p + 1)) -lt "$pairs" ]; then
            await_results "${turn[@]}"
            turn=()
        fi
    done
    if [ $((n % 2)) = 1 ]; then
        GUEST_NET="$RUN_DIR/net-self.link" guest_start self "$RUN_DIR/ism$((n - 1)).sock" \
            "10.0.200.1/24" on smcsuite self 10.0.200.1 $TESTS
        names+=(self) turn+=(self)
    fi
    await_results "${turn[@]}"
    wall=$((SECONDS - t0))
    # All N up at once, idle: the sampler's last samples count them. Then each ended.
    sleep $((2 * SCALE_SAMPLE_S))
    step "scale: every guest has reported after ${wall}s; ending the $n guests"
    for g in "${names[@]}"; do
        # The TERM waits while the process is stopped and is taken as it resumes.
        pid="$(cat "$RUN_DIR/$g.qemu.pid" 2>/dev/null)" || continue
        kill -TERM "$pid" 2>/dev/null || true
        kill -CONT "$pid" 2>/dev/null || true
    done
    frozen=()
    ok=PASS
    for g in "${names[@]}"; do guest_wait "$g" || ok=FAIL; done
    # The emulator's CPU time and peak RSS before it stops.
    read -r utime stime < <(awk '{print $14, $15}' "/proc/$EMU_PID/stat")
    emu_cpu="$(awk -v u="$utime" -v s="$stime" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.1f", (u + s) / hz}')"
    emu_hwm="$(proc_field "$EMU_PID" VmHWM)"
    kill "$sampler_pid" 2>/dev/null || true
    wait "$sampler_pid" 2>/dev/null || true
    vst=0
    observe summary --check >"$RUN_DIR/summary.txt" 2>&1 || vst=$?
    verdict="$(grep -m1 '^VERDICT' "$RUN_DIR/summary.txt" | sed 's/^VERDICT:* *//' || true)"
    [ "$vst" = 0 ] || ok=FAIL
    emu_stop || ok=FAIL
    topo_cleanup
    # Connections: each has a CONN line per side (self: both in one console); SMC-D and
    # verified on both sides.
    read -r conns smcd verified < <(cat "$RUN_DIR"/*.console.log | tr -d '\r' | awk '
        /^CONN test=(stream|seq) / { n++; if (/ mode=SMCD /) s++; if (/ verify=ok/) v++ }
        END { print n / 2, s / 2, v / 2 }')
    expected=$(( (pairs + n % 2) * (1 + SCALE_CONNS) ))
    [ "$conns" = "$expected" ] && [ "$smcd" = "$expected" ] && [ "$verified" = "$expected" ] || ok=FAIL
    # Peaks from the samples: the host's memory in use, the emulator's fds and threads, the
    # QEMUs' RSS at the host's peak, and the most QEMUs up at once (all N, or it failed).
    read -r host_peak_kb emu_fds emu_threads qemu_kb qemus up < <(awk '
        $2 > m { m = $2; q = $6; c = $7 } $4 > f { f = $4 } $5 > t { t = $5 } $7 > u { u = $7 }
        END { print m + 0, f + 0, t + 0, q + 0, c + 0, u + 0 }' "$RUN_DIR/samples.txt")
    [ "$up" = "$n" ] || { warn "scale: at most $up of the $n guests were up at once"; ok=FAIL; }
    # (A connection with one side's report missing counts a half: %s, not %d.)
    row="$(printf '%3d | %5d | %6s | %5d | %4d / %3d | %3d | %3d | %5.1f (%4.1f) | %3s/%3s/%3s | %s | %s' \
        "$n" "$wall" "$emu_cpu" $((emu_hwm / 1024)) "$emu_fds" "$emu_threads" \
        $(( qemus > 0 ? qemu_kb / qemus / 1024 : 0 )) "$up" \
        "$(awk -v k="$host_peak_kb" 'BEGIN {printf "%.1f", k / 1048576}')" \
        "$(awk -v k="$base_kb" 'BEGIN {printf "%.1f", k / 1048576}')" \
        "$conns" "$smcd" "$verified" "${verdict:-none (status $vst)}" "$ok")"
    rows+=("$row")
    step "scale: $row (logs: $RUN_DIR)"
    [ "$ok" = PASS ] || failed+=("$n")
done

{
    echo "scale: kernel $KERNEL ($VARIANT), guests of $GUEST_MEM, $GUEST_SMP vCPU and a $GUEST_TB_SIZE MiB code cache, in turns of $([ "$SCALE_TURN" -gt 0 ] && echo "$SCALE_TURN" || echo "all"), stream $SCALE_BYTES + $SCALE_CONNS connections each, $(date -u +%Y-%m-%dT%H:%MZ)"
    echo "  N | wall s | emu CPU s | emu peak RSS MiB | emu fds / threads | QEMU RSS MiB/guest | up at once | host GiB at peak (before) | conns/SMC-D/verified | reuse verdict | result"
    printf '%s\n' "${rows[@]}"
} | tee -a "$SCALE_DIR/results.txt"
[ ${#failed[@]} -eq 0 ] || die "scale: failed for N = ${failed[*]} (logs: $SCALE_DIR/<N>)"
