#!/usr/bin/env bash
# Soak with real guests: one emulator process, guests that come and go, and the
# emulator's own death. See docs/soak.md for what each scenario shows.
#
# Usage: tests/device/soak.sh [SCENARIO...]      (default: kill-return many emu-death)
#   kill-return  four guests on one emulator: guest "survivor" (10.0.0.1) serves; a
#                victim (10.0.0.2) boots, runs an SMC-D echo against it, starts an endless
#                stream and is SIGKILLed mid-stream, SOAK_ROUNDS times; a second pair
#                (10.0.1.1/.2) streams checksummed data the whole time. Every round: the
#                survivor's stream aborts within SOAK_ABORT_LIMIT s, the victim's echo ran
#                SMC-D after its re-attach, the pair saw no error and kept streaming.
#                A survivor that misses an abort is replaced and counted (survivors_lost,
#                the run fails), and the rounds go on. Over the run: the emulator's fds and threads do not grow, its RSS grows
#                by at most SOAK_RSS_SLACK_KB.
#   many         SOAK_GUESTS guests (SOAK_GUESTS/2 pairs) on one emulator, each pair
#                streaming at the same time; every connection SMC-D, every checksum
#                equal on both sides
#   emu-death    one pair streams; the emulator is SIGKILLed. Each guest must, within
#                SOAK_DEATH_LIMIT s, see its stream fail, or lose its QEMU (QEMU 10.2's
#                vfio-user client can abort on a reset socket), or be wedged (a vCPU thread
#                spinning: what the receiving guest does, docs/soak.md); a
#                connection that just hangs fails. Reports whether QEMU attaches to a
#                new emulator on the same sockets (it does not).
# Environment: SOAK_ROUNDS (100), SOAK_GUESTS (8), SOAK_ABORT_LIMIT (60),
# SOAK_DEATH_LIMIT (90), SOAK_RSS_SLACK_KB (8192), SOAK_PAIR_BYTES (the kill-return
# pair's stream size, 2M), SOAK_MANY_BYTES (per connection, 2M), SOAK_MANY_CONNS (per
# pair, 2), GUEST_MEM (384M), GUEST_SMP (2), KERNEL, VARIANT, SOAK_DIR (build/soak).
#
# kill-return and many also assert the host's reuse verdict (observe summary --check):
# CLEAN or no reuse.
# Each scenario prints one summary line ("soak <scenario>: ... PASS|FAIL"), also
# appended to SOAK_DIR/summary.txt; kill-return also one line per round
# (SOAK_DIR/kill-return/rounds.txt), so an interrupted run still has its figures.
# Exit status: 0 if every scenario passed.
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
source "$REPO_ROOT/scripts/topology.sh"

help_and_no_options "$@"
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(kill-return many emu-death)
for sc in "${scenarios[@]}"; do one_of scenario "$sc" kill-return many emu-death; done
check_kernel_selection
need_packages guests   # python3: wait_stream.py
SOAK_DIR="${SOAK_DIR:-$BUILD_DIR/soak}"
SOAK_ROUNDS="${SOAK_ROUNDS:-100}"
SOAK_GUESTS="${SOAK_GUESTS:-8}"
SOAK_ABORT_LIMIT="${SOAK_ABORT_LIMIT:-60}"
SOAK_DEATH_LIMIT="${SOAK_DEATH_LIMIT:-90}"
SOAK_RSS_SLACK_KB="${SOAK_RSS_SLACK_KB:-8192}"
SOAK_PAIR_BYTES="${SOAK_PAIR_BYTES:-2M}"
SOAK_MANY_BYTES="${SOAK_MANY_BYTES:-2M}"
SOAK_MANY_CONNS="${SOAK_MANY_CONNS:-2}"
# Small guests: up to nine of them share the host's cores under TCG, and the emulator maps
# all of their RAM.
GUEST_MEM="${GUEST_MEM:-384M}"
# Two vCPUs: with one, and the guest kernel's PREEMPT_NONE, net/smc's receive path can
# livelock after a failed ISM write (docs/soak.md); GUEST_SMP=1 reproduces it.
GUEST_SMP="${GUEST_SMP:-2}"
[[ "$SOAK_ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "SOAK_ROUNDS must be a positive number"
[[ "$SOAK_GUESTS" =~ ^[1-9][0-9]*$ ]] && [ $((SOAK_GUESTS % 2)) -eq 0 ] || die "SOAK_GUESTS must be an even number"

check_artefacts
mkdir -p "$SOAK_DIR"

now() { printf '%s' "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# count FILE REGEX: lines of FILE matching REGEX (0 if there is no FILE yet).
# The console log has the guest's CR LF line ends.
count() { local n; n="$(tr -d '\r' 2>/dev/null <"$1" | grep -cE -- "$2")" || true; echo "${n:-0}"; }

# wait_count FILE REGEX N TIMEOUT: until FILE has N lines matching REGEX; 1 on timeout.
wait_count() {
    local file="$1" re="$2" n="$3" end=$((SECONDS + $4))
    while [ "$(count "$file" "$re")" -lt "$n" ]; do
        [ "$SECONDS" -lt "$end" ] || return 1
        sleep 0.2
    done
}

# A guest whose QEMU is gone must not stay in the cleanup list: its pid may be reused.
forget_pid() {
    local pid="$1" keep=() p
    for p in "${_topo_pids[@]}"; do [ "$p" = "$pid" ] || keep+=("$p"); done
    _topo_pids=("${keep[@]}")
}

qemu_alive() { local pid; pid="$(cat "$RUN_DIR/$1.qemu.pid" 2>/dev/null)" && kill -0 "$pid" 2>/dev/null; }

# first/last/max of a column of numbers on stdin.
flm() { awk 'NR == 1 {f = $1} {l = $1; if ($1 > m) m = $1} END {printf "%s/%s/%s", f, l, m}'; }
# max/p50 of a column of numbers on stdin.
max_p50() { sort -g | awk '{v[NR] = $1} END {if (NR) printf "%s/%s", v[NR], v[int((NR + 1) / 2)]; else printf "-/-"}'; }

summary() {
    echo "$*"
    echo "$*" >>"$SOAK_DIR/summary.txt"
}

# ---- kill-return -----------------------------------------------------------------------
# Pair errors: a stream that failed on either side, or a pair guest whose loop ended (its
# /init printed RESULT) or whose QEMU is gone.
pair_errors() {
    local e=0 g
    for g in pserver pclient; do
        # One read: counting all and the "ok" ones in two reads races with a line being
        # written. A SUMMARY that is not ok says FAIL (smctest); one still being written
        # is counted by the next round.
        e=$((e + $(count "$RUN_DIR/$g.console.log" '^SUMMARY test=stream .* FAIL')))
        e=$((e + $(count "$RUN_DIR/$g.console.log" '^ISMTEST: RESULT')))
        qemu_alive "$g" || e=$((e + 1))
    done
    echo "$e"
}

# survivor_start NAME TIMEOUT: boots the survivor. It keeps its kernel's messages on the
# console: if it ever stops answering, they may say why (RCU stall reports, SMC warnings).
survivor_start() {
    GUEST_TIMEOUT="$2" GUEST_NET="$RUN_DIR/net-victim.link" GUEST_APPEND_EXTRA="ismtest.verbose=1 ismtest.modsyms=1" \
        guest_start "$1" "$RUN_DIR/ism0.sock" 10.0.0.1/24 on smcsoak survivor
}

survivor_up() {
    wait_count "$RUN_DIR/$1.console.log" 'listening on .*:12346' 1 600 && return 0
    warn "kill-return: survivor $1 never listened"
    tail -n 20 "$RUN_DIR/$1.console.log" >&2
    return 1
}

run_kill_return() {
    local long=$((SOAK_ROUNDS * 120 + 900)) rounds_file="$RUN_DIR/rounds.txt"
    local r failed=0 started=0 errs=0 pair_ok prev_ok stalls=0 lost=0 lost_rounds=() sv=survivor
    emu_start 4
    survivor_start "$sv" $long
    GUEST_TIMEOUT=$long GUEST_NET="$RUN_DIR/net-pair.link" \
        guest_start pserver "$RUN_DIR/ism2.sock" 10.0.1.1/24 on smcsoak server
    GUEST_TIMEOUT=$long GUEST_NET="$RUN_DIR/net-pair.link" \
        guest_start pclient "$RUN_DIR/ism3.sock" 10.0.1.2/24 off smcsoak client 10.0.1.1 "$SOAK_PAIR_BYTES"
    local t0
    t0="$(now)"
    survivor_up "$sv" || return 1
    wait_count "$RUN_DIR/pclient.console.log" '^SUMMARY test=stream side=client .* ok$' 1 600 \
        || { warn "kill-return: the pair never streamed"; tail -n 20 "$RUN_DIR"/p*.console.log >&2; return 1; }
    step "kill-return: survivor and pair up after $(since "$t0") s; $SOAK_ROUNDS rounds"
    : >"$rounds_file"
    : >"$RUN_DIR/stats.txt"
    prev_ok="$(count "$RUN_DIR/pclient.console.log" '^SUMMARY test=stream side=client .* ok$')"

    for ((r = 1; r <= SOAK_ROUNDS; r++)); do
        local name="victim$r" rt why="" boot_s="-" abort_s="-" pid rss fds threads
        rt="$(now)"
        GUEST_NET="$RUN_DIR/net-victim.link" \
            guest_start "$name" "$RUN_DIR/ism1.sock" 10.0.0.2/24 off smcsoak victim 10.0.0.1
        local vlog="$RUN_DIR/$name.console.log"
        if ! wait_count "$vlog" '^SUMMARY test=echo side=client' 1 300; then
            why="no echo from the victim"
        else
            boot_s="$(since "$rt")"
            if [ "$(count "$vlog" '^SUMMARY test=echo side=client .*smcd=1 .* ok$')" -ne 1 ]; then
                why="the victim's echo was not SMC-D or failed"
            elif ! ismcheck wait_stream "$EMU_BIN" "$RUN_DIR/control.sock" \
                --function ism1 --timeout 120; then
                why="the victim's stream never started"
            else
                started=$((started + 1))
            fi
        fi
        guest_kill "$name" || why="${why:-no QEMU to kill}"
        local killed
        killed="$(now)"
        pid="GUEST_PID_$name"
        wait "${!pid}" 2>/dev/null || true
        forget_pid "${!pid}"
        # Every started stream ends on the survivor's side with one SUMMARY line.
        if wait_count "$RUN_DIR/$sv.console.log" '^SUMMARY test=stream side=server' \
            "$started" $((SOAK_ABORT_LIMIT + 5)); then
            abort_s="$(since "$killed")"
            awk -v a="$abort_s" -v l="$SOAK_ABORT_LIMIT" 'BEGIN { exit !(a > l) }' \
                && why="${why:-the survivor took ${abort_s} s (> ${SOAK_ABORT_LIMIT} s) to see the abort}"
        else
            why="${why:-no abort seen by the survivor}"
            lost=1
        fi
        kill -0 "$EMU_PID" 2>/dev/null || why="${why:-the emulator died}"
        errs="$(pair_errors)"
        [ "$errs" -eq 0 ] || why="${why:-the pair saw $errs error(s)}"
        pair_ok="$(count "$RUN_DIR/pclient.console.log" '^SUMMARY test=stream side=client .* ok$')"
        # The pair must stream throughout, not just survive: at least one stream a round.
        if [ "$pair_ok" -le "$prev_ok" ]; then
            stalls=$((stalls + 1))
            why="${why:-the pair completed no stream this round}"
        fi
        local stats
        stats="$(emu_stats)"
        echo "$stats" >>"$RUN_DIR/stats.txt"
        [ "$abort_s" = - ] || echo "$abort_s" >>"$RUN_DIR/abort_s.txt"
        [ -z "$why" ] || failed=$((failed + 1))
        read -r rss fds threads <<<"$stats"
        printf 'round %d/%d: %s victim_echo_s=%s abort_s=%s pair_streams=%d(+%d) pair_errors=%d rss_kb=%s fds=%s threads=%s round_s=%s%s\n' \
            "$r" "$SOAK_ROUNDS" "$([ -z "$why" ] && echo ok || echo FAIL)" "$boot_s" "$abort_s" \
            "$pair_ok" $((pair_ok - prev_ok)) "$errs" "$rss" "$fds" "$threads" "$(since "$rt")" \
            "${why:+ ($why)}" | tee -a "$rounds_file"
        prev_ok="$pair_ok"
        # A survivor that missed an abort no longer answers (not even TCP, docs/soak.md):
        # the rounds after it need a new one. Counted, and the run fails.
        if [ "$lost" = 1 ]; then
            warn "kill-return: survivor $sv missed the abort of round $r; booting a new one"
            tr -d '\r' <"$RUN_DIR/$sv.console.log" | tail -n 8 | sed "s/^/  $sv: /" >&2
            # Where its CPU is, before it goes: the kernel function it is stuck in.
            guest_where_now "$sv"
            sed "s/^/  $sv where: /" "$RUN_DIR/$sv.where.txt" >&2
            lost_rounds+=("$r")
            pid="$(cat "$RUN_DIR/$sv.qemu.pid" 2>/dev/null)" && kill -KILL "$pid" 2>/dev/null || true
            pid="GUEST_PID_$sv"
            wait "${!pid}" 2>/dev/null || true
            forget_pid "${!pid}"
            sv="survivor$r"
            started=0
            lost=0
            survivor_start "$sv" $long
            survivor_up "$sv" || return 1
        fi
    done
    local done_rounds=$((r - 1))

    local rss_f fds_f thr_f rss_first rss_last fds_first fds_last thr_first thr_last ok=PASS
    rss_f="$(awk '{print $1}' "$RUN_DIR/stats.txt" | flm)"
    fds_f="$(awk '{print $2}' "$RUN_DIR/stats.txt" | flm)"
    thr_f="$(awk '{print $3}' "$RUN_DIR/stats.txt" | flm)"
    IFS=/ read -r rss_first rss_last _ <<<"$rss_f"
    IFS=/ read -r fds_first fds_last _ <<<"$fds_f"
    IFS=/ read -r thr_first thr_last _ <<<"$thr_f"
    [ "$failed" -eq 0 ] && [ "$done_rounds" -eq "$SOAK_ROUNDS" ] && [ ${#lost_rounds[@]} -eq 0 ] || ok=FAIL
    [ "$fds_last" -le "$fds_first" ] || { warn "kill-return: the emulator's fds grew ($fds_first -> $fds_last)"; ok=FAIL; }
    [ "$thr_last" -le "$thr_first" ] || { warn "kill-return: the emulator's threads grew ($thr_first -> $thr_last)"; ok=FAIL; }
    [ "$rss_last" -le $((rss_first + SOAK_RSS_SLACK_KB)) ] \
        || { warn "kill-return: the emulator's RSS grew by more than $SOAK_RSS_SLACK_KB KiB ($rss_first -> $rss_last)"; ok=FAIL; }
    summary "soak kill-return: rounds=$done_rounds/$SOAK_ROUNDS failed_rounds=$failed abort_s(max/p50)=$(max_p50 <"$RUN_DIR/abort_s.txt" 2>/dev/null || echo -/-)" \
        "round_s(max/p50)=$(awk '{for (i = 1; i <= NF; i++) if ($i ~ /^round_s=/) {sub(/round_s=/, "", $i); print $i}}' "$rounds_file" | max_p50)" \
        "survivors_lost=${#lost_rounds[@]}${lost_rounds[*]:+ (rounds ${lost_rounds[*]})}" \
        "pair_streams=$pair_ok pair_errors=$errs pair_stalls=$stalls rss_kb(first/last/max)=$rss_f (slack $SOAK_RSS_SLACK_KB)" \
        "fds(first/last/max)=$fds_f threads(first/last/max)=$thr_f $ok"
    [ "$ok" = PASS ]
}

# ---- many ------------------------------------------------------------------------------
run_many() {
    local pairs=$((SOAK_GUESTS / 2)) p ok=PASS t0
    emu_start "$SOAK_GUESTS"
    t0="$(now)"
    for ((p = 0; p < pairs; p++)); do
        GUEST_TIMEOUT=1200 GUEST_NET="$RUN_DIR/net-$p.link" \
            guest_start "s$p" "$RUN_DIR/ism$((2 * p)).sock" "10.0.$p.1/24" on \
            smctest stream server --port=12347 --conns="$SOAK_MANY_CONNS"
        GUEST_TIMEOUT=1200 GUEST_NET="$RUN_DIR/net-$p.link" \
            guest_start "c$p" "$RUN_DIR/ism$((2 * p + 1)).sock" "10.0.$p.2/24" off \
            smctest stream client --host="10.0.$p.1" --port=12347 --conns="$SOAK_MANY_CONNS" \
            --bytes="$SOAK_MANY_BYTES" --seed=$((p + 1)) --connect-timeout=600
    done
    for ((p = 0; p < pairs; p++)); do
        guest_wait "s$p" || ok=FAIL
        guest_wait "c$p" || ok=FAIL
    done
    # Each connection's two CONN lines (server and client side share idx) must agree on
    # the checksum; smctest checks that too, the host counts it independently.
    local conns=0 smcd=0 equal=0 expected=$((pairs * SOAK_MANY_CONNS))
    for ((p = 0; p < pairs; p++)); do
        local line idx mode sum other
        while IFS= read -r line; do
            conns=$((conns + 1))
            idx="$(grep -oE ' idx=[0-9]+' <<<"$line")"
            mode="$(grep -oE ' mode=[A-Z-]+' <<<"$line")"
            sum="$(grep -oE ' checksum=0x[0-9a-f]+' <<<"$line")"
            [ "$mode" != " mode=SMCD" ] || smcd=$((smcd + 1))
            other="$(grep -E "^CONN test=stream${idx} side=server " "$RUN_DIR/s$p.console.log" | grep -oE ' checksum=0x[0-9a-f]+' || true)"
            [ -z "$sum" ] || [ "$sum" != "$other" ] || ! grep -q 'verify=ok' <<<"$line" || equal=$((equal + 1))
        done < <(grep -E '^CONN test=stream idx=[0-9]+ side=client ' "$RUN_DIR/c$p.console.log")
        smcd=$((smcd + $(count "$RUN_DIR/s$p.console.log" '^CONN test=stream .* side=server mode=SMCD ')))
    done
    [ "$conns" -eq "$expected" ] && [ "$smcd" -eq $((2 * expected)) ] && [ "$equal" -eq "$expected" ] || ok=FAIL
    local stats
    stats="$(emu_stats)"
    summary "soak many: guests=$SOAK_GUESTS pairs=$pairs connections=$conns/$expected smcd_sides=$smcd/$((2 * expected))" \
        "checksums_equal=$equal/$expected bytes_per_conn=$SOAK_MANY_BYTES wall_s=$(since "$t0")" \
        "emulator rss_kb/fds/threads=${stats// //} $ok"
    [ "$ok" = PASS ]
}

# ---- emu-death -------------------------------------------------------------------------
# emu_death_outcome NAME KILLED: sets outcome[NAME] (the caller's) to what became of
# guest NAME after the emulator died at KILLED: "stream_ended@S" (its smctest stream
# failed, S s after the kill) or "qemu_exit=RC@S" (its QEMU ended with status RC);
# leaves it empty while neither happened.
emu_death_outcome() {
    local name="$1" pid="GUEST_PID_$1" rc=0
    if [ "$(count "$RUN_DIR/$name.console.log" '^SUMMARY test=stream')" -gt 0 ]; then
        outcome[$name]="stream_ended@$(since "$2")"
    elif ! kill -0 "${!pid}" 2>/dev/null; then
        wait "${!pid}" 2>/dev/null || rc=$?
        outcome[$name]="qemu_exit=$rc@$(since "$2")"
    fi
}

# qemu_cpu_ticks NAME: CPU time (user + system, clock ticks) of guest NAME's QEMU, 0 if gone.
qemu_cpu_ticks() {
    local pid
    pid="$(cat "$RUN_DIR/$1.qemu.pid" 2>/dev/null)" || { echo 0; return; }
    awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0
}

# qemu_thread_ticks NAME: "TID TICKS" for each thread of guest NAME's QEMU (none if gone).
# A vCPU spinning in the guest's kernel is one thread near a whole core, whatever the
# guest's other vCPU does meanwhile.
qemu_thread_ticks() {
    local pid
    pid="$(cat "$RUN_DIR/$1.qemu.pid" 2>/dev/null)" || return 0
    # The thread's name (field 2) may hold spaces: count fields from its closing ')'.
    for f in /proc/"$pid"/task/*/stat; do
        sed -E 's/^([0-9]+) \(.*\) /\1 /' "$f" 2>/dev/null | awk '{print $1, $13 + $14}'
    done
}

# thread_pcts PID BEFORE AFTER SECONDS: between two qemu_thread_ticks samples, the largest
# CPU share (% of one core) any thread took, and the share of all threads but the main
# one (PID: QEMU's main loop) together: its vCPUs and I/O threads.
thread_pcts() {
    awk -v main="$1" -v secs="$4" -v hz="$(getconf CLK_TCK)" '
        FNR == NR { before[$1] = $2; next }
        { d = $2 - before[$1]; if (d > max) max = d; if ($1 != main) sum += d }
        END { printf "%d %d\n", max * 100 / (secs * hz), sum * 100 / (secs * hz) }' \
        <(printf '%s\n' "$2") <(printf '%s\n' "$3")
}

run_emu_death() {
    local ok=PASS g killed alive=0 hung=0 exited=0 wedged=0
    local -A lines_before=() cpu_before=() cpu_pct=() threads_before=() thread_pct=() vcpus_pct=()
    # The guests' kernel messages stay on the console: what the kernel says when its
    # device stops answering is part of what this scenario documents.
    local GUEST_APPEND_EXTRA=ismtest.verbose=1
    local -A outcome=() loops_before=() loops_after=()
    emu_start 2
    GUEST_TIMEOUT=1200 GUEST_NET="$RUN_DIR/net-pair.link" \
        guest_start dserver "$RUN_DIR/ism0.sock" 10.0.0.1/24 on smcsoak server
    # Long streams, so that one is in flight when the emulator dies.
    GUEST_TIMEOUT=1200 GUEST_NET="$RUN_DIR/net-pair.link" \
        guest_start dclient "$RUN_DIR/ism1.sock" 10.0.0.2/24 off smcsoak client 10.0.0.1 1G
    ismcheck wait_stream "$EMU_BIN" "$RUN_DIR/control.sock" \
        --function ism1 --timeout 600 \
        || { warn "emu-death: the stream never started"; tail -n 20 "$RUN_DIR"/d*.console.log >&2; return 1; }
    step "emu-death: killing the emulator (pid $EMU_PID) mid-stream"
    kill -KILL "$EMU_PID"
    killed="$(now)"
    wait "$EMU_PID" 2>/dev/null || true
    forget_pid "$EMU_PID"
    EMU_PID=""
    # Both guests at once: each either sees its stream fail or loses its QEMU; a guest
    # with neither by the limit hangs.
    local end=$((SECONDS + SOAK_DEATH_LIMIT))
    while [ "$SECONDS" -lt "$end" ]; do
        for g in dserver dclient; do
            [ -n "${outcome[$g]:-}" ] || emu_death_outcome "$g" "$killed"
        done
        [ -z "${outcome[dserver]:-}" ] || [ -z "${outcome[dclient]:-}" ] || break
        sleep 0.2
    done
    # What a guest that kept its QEMU does afterwards: its loop tries new connections over
    # the dead device, or its console stays silent while its vCPU spins.
    for g in dserver dclient; do
        loops_before[$g]="$(count "$RUN_DIR/$g.console.log" '^SOAK: ')"
        lines_before[$g]="$(wc -l <"$RUN_DIR/$g.console.log")"
        cpu_before[$g]="$(qemu_cpu_ticks "$g")"
        threads_before[$g]="$(qemu_thread_ticks "$g")"
    done
    sleep 30
    for g in dserver dclient; do
        qemu_alive "$g" && alive=$((alive + 1))
        loops_after[$g]="$(count "$RUN_DIR/$g.console.log" '^SOAK: ')"
        cpu_pct[$g]=$(( ($(qemu_cpu_ticks "$g") - cpu_before[$g]) * 100 / (30 * $(getconf CLK_TCK)) ))
        read -r "thread_pct[$g]" "vcpus_pct[$g]" < <(thread_pcts "$(cat "$RUN_DIR/$g.qemu.pid" 2>/dev/null)" \
            "${threads_before[$g]}" "$(qemu_thread_ticks "$g")" 30)
        case "${outcome[$g]:-}" in
            stream_ended*) ;;
            qemu_exit*) exited=$((exited + 1)) ;;
            *)
                # Its stream neither failed nor did its QEMU end. A guest whose vCPU
                # threads are busy for at least half of the 30 s is wedged in its kernel:
                # the reader spins (docs/soak.md). The guest may move the spinning task
                # between its vCPUs, so their sum counts, not the busiest alone (a CI run
                # saw 49 % + 49 %). Its other vCPU may still serve the other loop (a TCP
                # fallback), so its console need not be silent. A stream that stays open
                # with no vCPU spinning is a connection that just hangs, which must not
                # happen.
                local grew=$(( $(wc -l <"$RUN_DIR/$g.console.log") - lines_before[$g] ))
                local shares="vcpu=${cpu_pct[$g]}%,vcpu_threads=${vcpus_pct[$g]:-0}%,busiest_thread=${thread_pct[$g]:-0}%"
                if [ "${vcpus_pct[$g]:-0}" -ge 50 ]; then
                    outcome[$g]="wedged($shares,console+${grew})"
                    wedged=$((wedged + 1))
                else
                    outcome[$g]="hang($shares,console+${grew})"
                    hung=$((hung + 1)); ok=FAIL
                    warn "emu-death: guest $g's stream did not end within $SOAK_DEATH_LIMIT s, and the guest is not wedged"
                fi
                ;;
        esac
    done
    # Does QEMU's vfio-user client come back to a new emulator on the same sockets? (The
    # killed one could not remove its sockets.)
    rm -f "$RUN_DIR"/*.sock
    emu_start 2
    sleep 10
    local reattached modes aborts
    reattached="$(observe json | python3 -c 'import json, sys; print(sum(f["attached"] for f in json.load(sys.stdin)["functions"]))')"
    modes="$(cat "$RUN_DIR"/d*.console.log | tr -d '\r' | grep -oE '^CONN test=stream .* mode=[A-Z-]+' \
        | grep -oE '[A-Z-]+$' | sort | uniq -c | awk '{printf "%s%s:%s", s, $2, $1; s = ","}')"
    aborts="$(cat "$RUN_DIR"/d*.qemu.log | grep -c 'Assertion' || true)"
    summary "soak emu-death: server=${outcome[dserver]} client=${outcome[dclient]} (limit $SOAK_DEATH_LIMIT s)" \
        "hung=$hung wedged=$wedged qemu_exited=$exited qemu_asserted=$aborts qemu_alive_after_30s=$alive/2" \
        "guest_loops(server/client)=${loops_before[dserver]}->${loops_after[dserver]}/${loops_before[dclient]}->${loops_after[dclient]}" \
        "conn_modes=${modes:-none} reattached_to_new_emulator=$reattached/2 $ok"
    grep -h -E 'vfio_user|failed to read|Assertion|Broken pipe' "$RUN_DIR"/d*.qemu.log 2>/dev/null \
        | sort | uniq -c | head -n 6 | sed 's/^/  qemu: /' || true
    [ "$ok" = PASS ]
}

failed=()
for sc in "${scenarios[@]}"; do
    topo_init "$SOAK_DIR/$sc"
    step "soak: scenario '$sc', kernel $KERNEL ($VARIANT), guests ${GUEST_MEM} / ${GUEST_SMP} vCPU"
    start=$SECONDS
    rc=0
    case "$sc" in
        kill-return) run_kill_return || rc=1 ;;
        many) run_many || rc=1 ;;
        emu-death) run_emu_death || rc=1 ;;
        *) die "unknown scenario '$sc' (kill-return, many, emu-death)" ;;
    esac
    # The host's reuse verdict from the snapshot (complete even where the event stream
    # dropped lines): CLEAN or no reuse, nothing stale, crossed or unchecked. Not for
    # emu-death, whose emulator is gone.
    if [ "$sc" = emu-death ]; then
        observe summary >"$RUN_DIR/summary.txt" 2>&1 || true
    else
        vst=0
        observe summary --check >"$RUN_DIR/summary.txt" 2>&1 || vst=$?
        verdict="$(grep -m1 '^VERDICT' "$RUN_DIR/summary.txt" || echo "no verdict (status $vst)")"
        summary "soak $sc: host $verdict"
        [ "$vst" -eq 0 ] || { warn "soak $sc: the host's reuse verdict is not clean (status $vst)"; rc=1; }
    fi
    emu_stop || rc=1
    topo_cleanup
    if [ "$rc" -eq 0 ]; then
        step "soak: scenario '$sc' PASSED in $((SECONDS - start)) s (logs: $RUN_DIR)"
    else
        step "soak: scenario '$sc' FAILED after $((SECONDS - start)) s (logs: $RUN_DIR)"
        failed+=("$sc")
    fi
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "soak: ${#scenarios[@]} scenario(s), ${#failed[@]} failed: ${failed[*]}"
    exit 1
fi
echo "soak: ${#scenarios[@]} scenario(s) passed"
