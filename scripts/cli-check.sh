#!/usr/bin/env bash
# The scripts' command lines, as a user meets them (`make cli-check`, part of `make test`):
#   - every script a user calls answers -h and --help with its usage on stdout, exit 0,
#     and nothing on stderr;
#   - wrong invocations are usage errors: exit 2, a message on stderr, and nothing done
#     (no run folder removed or created, no emulator or guest started);
#   - qemu-configs/run-guest.sh's exit status: 3 when the guest's /init reported
#     RESULT FAIL, 0 on RESULT PASS, QEMU's own status, 124 on its timeout; shown with a
#     stand-in for QEMU (--qemu) that writes a console and exits as told, so no guest
#     boots here (a real guest's RESULT FAIL and status 3: scripts/e2e.sh's crash
#     topology, check survivor_alive);
#   - an unknown KERNEL gets the one message of `make kernel`, wherever it is used;
#   - the two-guest verdict line of `make demo` (pair_verdict) on made-up logs;
#   - `make help` lists every target; the Makefile echoes no recipe; progress lines
#     carry a UTC clock.
# Needs nothing built. Prints one line per check ("ok - ..." / "not ok - ...") and
# "N passed, M failed"; exit status 0 if all passed.
#
# Usage: scripts/cli-check.sh    (make cli-check)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
no_arguments "$@"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/ism-cli-check.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
cd "$REPO_ROOT" || exit 1

pass=0 fail=0
ok() { echo "ok - $*"; pass=$((pass + 1)); }
not_ok() { echo "not ok - $*"; fail=$((fail + 1)); }

# run CMD...: runs CMD (environment from `env` if given) with stdin closed; its status in
# $rc, its output in $WORK/out and $WORK/err. Never longer than 60 s.
run() {
    rc=0
    timeout 60 "$@" </dev/null >"$WORK/out" 2>"$WORK/err" || rc=$?
}
# expect_rc WANT WHAT: the last run's status was WANT.
expect_rc() {
    if [ "$rc" -eq "$1" ]; then ok "$2 (status $rc)"
    else not_ok "$2: status $rc, expected $1; stderr: $(head -c 300 "$WORK/err" | tr '\n' ' ')"; fi
}
# expect_in FILE ERE WHAT: a line of the last run's out or err matches ERE.
expect_in() {
    if grep -qE -- "$2" "$WORK/$1"; then ok "$3"
    else not_ok "$3: no line of std$1 matches /$2/; it has: $(head -c 300 "$WORK/$1" | tr '\n' ' ')"; fi
}
expect_not_in() {
    if grep -qE -- "$2" "$WORK/$1"; then not_ok "$3: std$1 has /$2/: $(grep -E -- "$2" "$WORK/$1" | head -n 2 | tr '\n' ' ')"
    else ok "$3"; fi
}

# ---- --help ------------------------------------------------------------------------------
# Every executable script outside the ones that are sourced (lib.sh, config.sh,
# topology.sh, kernel-build.sh) and the test's own helpers.
scripts=()
while IFS= read -r f; do
    case "$f" in
        scripts/lib.sh|scripts/config.sh|scripts/topology.sh|guest-tests/kernel-build.sh) ;;
        *) scripts+=("$f") ;;
    esac
done < <(find scripts qemu-configs guest-tests -name '*.sh' -perm -u+x -not -path '*/progs/*' | LC_ALL=C sort)
[ ${#scripts[@]} -ge 20 ] && ok "found ${#scripts[@]} scripts to ask for --help" \
    || not_ok "found only ${#scripts[@]} scripts (expected 20 or more)"
for f in "${scripts[@]}"; do
    for h in --help -h; do
        run env BUILD_DIR="$WORK/build" "$f" "$h"
        if [ "$rc" -eq 0 ] && [ "$(wc -l <"$WORK/out")" -ge 3 ] && [ ! -s "$WORK/err" ]; then
            ok "$f $h: usage on stdout, exit 0"
        else
            not_ok "$f $h: status $rc, $(wc -l <"$WORK/out") stdout lines, stderr: $(head -c 200 "$WORK/err" | tr '\n' ' ')"
        fi
    done
    run env BUILD_DIR="$WORK/build" "$f" --no-such-option
    expect_rc 2 "$f --no-such-option is a usage error"
done
[ ! -e "$WORK/build" ] && ok "no script created BUILD_DIR for --help or a bad option" \
    || not_ok "BUILD_DIR was created: $(find "$WORK/build" | head -n 5 | tr '\n' ' ')"

# ---- usage errors come before anything is done --------------------------------------------
mkdir -p "$WORK/e2e"
run env BUILD_DIR="$WORK/build" E2E_DIR="$WORK/e2e" scripts/e2e.sh two bogus
expect_rc 2 "e2e.sh two bogus: an unknown topology"
expect_in err "unknown topology 'bogus'" "e2e.sh names the unknown topology"
[ -z "$(ls -A "$WORK/e2e")" ] && ok "e2e.sh ran no topology before refusing the bad one" \
    || not_ok "e2e.sh left $(ls "$WORK/e2e") before refusing 'bogus'"

run env BUILD_DIR="$WORK/build" FAULTS_DIR="$WORK/faults" scripts/faults.sh reg-dmb slwo
expect_rc 2 "faults.sh reg-dmb slwo: an unknown scenario"
expect_in err "unknown scenario 'slwo'" "faults.sh names the unknown scenario"
[ ! -e "$WORK/faults" ] && ok "faults.sh ran nothing (not reg-dmb) before refusing slwo" \
    || not_ok "faults.sh started: $(ls "$WORK/faults")"

run env BUILD_DIR="$WORK/build" TOPO_DIR="$WORK/topologies" scripts/topologies.sh chid-one chid-all
expect_rc 2 "topologies.sh chid-one chid-all: an unknown case"
expect_in err "unknown case 'chid-all'" "topologies.sh names the unknown case"
[ ! -e "$WORK/topologies" ] && ok "topologies.sh ran no case before refusing chid-all" \
    || not_ok "topologies.sh created $WORK/topologies before refusing chid-all"

run env BUILD_DIR="$WORK/build" MATRIX_DIR="$WORK/matrix" scripts/matrix.sh 6.12 9.9
expect_rc 2 "matrix.sh 6.12 9.9: an unknown kernel line"
[ ! -e "$WORK/matrix" ] && ok "matrix.sh ran no line before refusing 9.9" || not_ok "matrix.sh created $WORK/matrix"
run env BUILD_DIR="$WORK/build" SOAK_DIR="$WORK/soak" scripts/soak.sh many bogus
expect_rc 2 "soak.sh many bogus: an unknown scenario"
run env BUILD_DIR="$WORK/build" BENCH_DIR="$WORK/bench" scripts/bench-guests.sh waited bogus
expect_rc 2 "bench-guests.sh waited bogus: an unknown mode"
run env BUILD_DIR="$WORK/build" scripts/demo.sh extra
expect_rc 2 "demo.sh extra: demo takes no arguments"
run scripts/fuzz.sh --can-run extra
expect_rc 2 "fuzz.sh --can-run extra: nothing may follow --can-run"

# ci-smcd.sh (docs/ci.md: 2 on a usage error)
run env BUILD_DIR="$WORK/build" scripts/ci-smcd.sh --kernel-src
expect_rc 2 "ci-smcd.sh --kernel-src without a value"
expect_in err "option --kernel-src needs a value" "ci-smcd.sh says which option lacks its value"
expect_not_in err "parameter null or not set" "ci-smcd.sh does not show bash's own error"
run env BUILD_DIR="$WORK/build" scripts/ci-smcd.sh
expect_rc 2 "ci-smcd.sh without a kernel"
run env BUILD_DIR="$WORK/build" scripts/ci-smcd.sh --kernel-src "$WORK" --kernel-image "$WORK/x"
expect_rc 2 "ci-smcd.sh --kernel-src with --kernel-image"
run env BUILD_DIR="$WORK/build" scripts/ci-smcd.sh --kernel-src "$WORK/no-such-tree"
expect_rc 2 "ci-smcd.sh --kernel-src on a missing folder"
run env BUILD_DIR="$WORK/build" scripts/ci-smcd.sh --kernel-src "$WORK" --topologies "two bogus"
expect_rc 2 "ci-smcd.sh --topologies with an unknown topology"
run env BUILD_DIR="$WORK/build" scripts/ci-smcd.sh --help
for o in --kernel-src --kernel-config --kernel-image --modules-dir --topologies --tests --out --build-only 'Exit status'; do
    expect_in out "$o" "ci-smcd.sh --help names $o"
done

# run-guest.sh's options
for bad in "--kernel" "--chid 0" "--chid 0x0" "--chid 0xff00" "--chid 1234" "--timeout soon" "--net-server maybe" "--mem lots" "--smp 0" "--mac 52:54" "--name a/b" \
    "--ism /x.sock,chid=0xff00" "--ism /x.sock,chid=1234" "--ism /x.sock,vlan=2"; do
    # shellcheck disable=SC2086
    run env BUILD_DIR="$WORK/build" qemu-configs/run-guest.sh $bad
    expect_rc 2 "run-guest.sh $bad is a usage error"
done
[ ! -e "$WORK/build" ] && ok "no usage error above created BUILD_DIR" || not_ok "BUILD_DIR was created by a usage error"

# ---- an unknown kernel line: one message, the one make kernel gives ----------------------
run env KERNEL=9.9 guest-tests/build-kernel.sh
expect_rc 1 "build-kernel.sh with KERNEL=9.9"
want="$(grep -m1 '^error: ' "$WORK/err")"
[ -n "$want" ] && ok "build-kernel.sh: $want" || not_ok "build-kernel.sh printed no error line"
expect_in err "known: 5\.10, 6\.1, 6\.12, 7\.2, 7\.3" "the message names the lines (from KERNEL_LINES)"
run make --no-print-directory kernel KERNEL=9.9
if grep -qxF -- "$want" "$WORK/err"; then ok "make kernel KERNEL=9.9 gives that message"; else not_ok "make kernel KERNEL=9.9: $(head -c 300 "$WORK/err")"; fi
for cmd in qemu-configs/run-guest.sh scripts/e2e.sh scripts/faults.sh scripts/bench-guests.sh; do
    run env KERNEL=9.9 BUILD_DIR="$WORK/build" E2E_DIR="$WORK/e2e" FAULTS_DIR="$WORK/faults" "$cmd"
    if [ "$rc" -eq 1 ] && grep -qxF -- "$want" "$WORK/err" && ! grep -q 'make images' "$WORK/err"; then
        ok "KERNEL=9.9 $cmd: the same message, no 'make images'"
    else
        not_ok "KERNEL=9.9 $cmd: status $rc: $(head -c 300 "$WORK/err" | tr '\n' ' ')"
    fi
done
run env VARIANT=zeroed BUILD_DIR="$WORK/build" qemu-configs/run-guest.sh
expect_rc 1 "VARIANT=zeroed run-guest.sh"
expect_in err "^error: VARIANT=zeroed is unknown \(stock, prezero, nozero, rxabort-fix, rxabort-kill, lateabort-fix, smcdterm-fix, ieqnull-fix, vlanlock-fix, hslimit-fix, closeuaf-fix, latedata-rfc, chid0-peer, chid0-fix, loopback, debug, dibslock-bug, debug-ieqnull-fix, debug-vlanlock-fix, debug-closeuaf-fix\)" "run-guest.sh names the variants"

# ---- run-guest.sh's exit status, with a stand-in for QEMU -----------------------------------
# It writes STUB_CONSOLE (printf format) where guest.args sends the console (the file
# chardev's path=, or the stdio chardev's logfile=), then sleeps STUB_SLEEP and exits STUB_RC.
cat >"$WORK/qemu" <<'STUB'
#!/usr/bin/env bash
log=""
for a in "$@"; do
    case "$a" in
        *id=con0,*) log="$(printf '%s\n' "$a" | tr ',' '\n' | sed -nE 's/^(path|logfile)=//p' | head -n 1)" ;;
    esac
done
[ -n "$log" ] || { echo "stub: no console chardev in: $*" >&2; exit 99; }
# shellcheck disable=SC2059
printf "${STUB_CONSOLE:-}" >>"$log"
[ "${STUB_ECHO:-0}" = 0 ] || printf "${STUB_CONSOLE:-}"
sleep "${STUB_SLEEP:-0}"
exit "${STUB_RC:-0}"
STUB
chmod +x "$WORK/qemu"
: >"$WORK/bzImage"
guest() {   # guest NAME [ENV=VALUE...] -- [run-guest options]: run-guest.sh on the stub
    local name="$1"; shift
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    run env "${envs[@]}" qemu-configs/run-guest.sh --qemu "$WORK/qemu" --kernel "$WORK/bzImage" --initrd none \
        --name "$name" --log "$WORK/$name.console.log" --timeout 5 "$@"
}
boot='ISMTEST: BOOTED 6.12.117\nISMTEST: RUN smcsuite self 10.0.0.1 echo\n'
guest fail "STUB_CONSOLE=${boot}SUITE: FAIL echo\nISMTEST: RESULT FAIL rc=1\n" --
expect_rc 3 "run-guest.sh: QEMU exits 0 after the guest's RESULT FAIL"
expect_in err "the guest's program failed \(ISMTEST: RESULT FAIL rc=1\)" "run-guest.sh says the guest's program failed"
guest failecho "STUB_CONSOLE=${boot}ISMTEST: RESULT FAIL rc=2\r\n" STUB_ECHO=1 -- --echo
expect_rc 3 "run-guest.sh --echo: RESULT FAIL (a console line ending in CR LF)"
guest pass "STUB_CONSOLE=${boot}SUITE: PASS echo\nISMTEST: RESULT PASS\n" --
expect_rc 0 "run-guest.sh: RESULT PASS"
if [ "$(tail -n 1 "$WORK/err" | grep -c "the guest's program passed (ISMTEST: RESULT PASS)")" = 1 ]; then
    ok "run-guest.sh's last line names the guest's RESULT PASS"
else not_ok "run-guest.sh's last line: $(tail -n 1 "$WORK/err")"; fi
guest noinit "STUB_CONSOLE=some other init\n" --
expect_rc 0 "run-guest.sh: QEMU exits 0, no /init RESULT line (another init)"
guest panic "STUB_CONSOLE=${boot}Kernel panic - not syncing\n" STUB_RC=1 --
expect_rc 1 "run-guest.sh: QEMU's own status (1, a guest panic)"
guest slow "STUB_CONSOLE=${boot}" STUB_SLEEP=30 -- --timeout 1
expect_rc 124 "run-guest.sh: the timeout ended QEMU"
# make upstream names the fixes it knows; an unknown one is a usage error, before any
# source is fetched.
run env BUILD_DIR="$WORK/build" scripts/upstream.sh no-such-fix
expect_rc 2 "upstream.sh: an unknown fix is a usage error"
expect_in err "'no-such-fix' is not a fix with an upstream.conf \\(known: smcdterm-fix" "upstream.sh names the fixes it knows"
run qemu-configs/run-guest.sh --help
expect_in out '^  3 +QEMU exited normally, but the guest.s /init reported' "run-guest.sh --help documents status 3"
expect_in out '^  2 +a usage error' "run-guest.sh --help documents status 2"
# The real guest's side: e2e.sh's crash topology needs status 3 from its survivor.
grep -qF '[ "$rc" -eq 3 ]' scripts/e2e.sh && ok "e2e.sh's crash topology checks status 3 on a real guest's RESULT FAIL" \
    || not_ok "e2e.sh's crash topology no longer checks run-guest.sh's status 3"

# ---- make demo's last line ------------------------------------------------------------------
source "$REPO_ROOT/scripts/topology.sh"
trap 'rm -rf "$WORK"' EXIT   # topology.sh's trap is installed only by topo_init
verdict_case() {   # verdict_case WANT(0|1) WHAT GUESTS CLIENT-SUMMARY VERDICT-LINE
    local d="$WORK/demo" line st=0
    rm -rf "$d"; mkdir -p "$d"
    printf '%b' "$4" >"$d/b.console.log"
    printf 'FUNC ...\n\n%s\n' "$5" >"$d/summary.txt"
    line="$(pair_verdict "$d" "$3")" || st=$?
    if [ "$st" = "$1" ] && [ "$(wc -l <<<"$line")" = 1 ]; then ok "pair_verdict, $2: $line"
    else not_ok "pair_verdict, $2: status $st (want $1): $line"; fi
}
two='SUMMARY test=echo side=client conns=1 smcd=1 fallback=0 ok\nSUMMARY test=seq side=client conns=12 smcd=12 fallback=0 ok\nSUMMARY test=seq side=server conns=12 smcd=12 ok\n'
clean='VERDICT: CLEAN — every reused DMB was zero when the next connection started'
verdict_case 0 "all well" 0 "$two" "$clean"
verdict_case 1 "a guest failed" 1 "$two" "$clean"
verdict_case 1 "a connection fell back to TCP" 0 'SUMMARY test=seq side=client conns=12 smcd=11 fallback=1 ok\n' "$clean"
verdict_case 1 "no connection" 0 '' "$clean"
verdict_case 1 "no reuse seen" 0 "$two" 'VERDICT: no DMB reuse seen'
verdict_case 1 "stale" 0 "$two" 'VERDICT: STALE — a reused DMB still held an earlier connection'"'"'s bytes'
line="$(pair_verdict "$WORK/demo" 0)" || true
[[ "$line" == *"13 of 13 connections SMC-D"* ]] && ok "pair_verdict counts the client's connections only" \
    || not_ok "pair_verdict counted: $line"
grep -q '^echo "demo \$verdict"$' scripts/demo.sh && [ "$(tail -n 2 scripts/demo.sh | head -n 1)" = 'echo "demo $verdict"' ] \
    && ok "demo.sh prints pair_verdict's line last" || not_ok "demo.sh no longer ends with pair_verdict's line"

# ---- make ---------------------------------------------------------------------------------
run make help
expect_rc 0 "make help"
first="$(head -n 1 "$WORK/out")"
[[ "$first" == Usage:* ]] && ok "make help echoes no recipe line" || not_ok "make help starts with: $first"
for t in $(sed -n '/^\.PHONY:/,/[^\\]$/p' Makefile | tr -d '\\' | sed 's/^\.PHONY://'); do
    grep -qE "^  $t +[^ ]" "$WORK/out" && ok "make help lists $t" || not_ok "make help has no line for $t"
done
if [ -x target/release/ism-emu ]; then
    run make emulator
    if [ "$rc" -eq 0 ] && [ ! -s "$WORK/out" ] && [ ! -s "$WORK/err" ]; then ok "make emulator, built already: silent"
    else not_ok "make emulator, built already: status $rc: $(head -c 300 "$WORK/out" "$WORK/err" | tr '\n' ' ')"; fi
else
    echo "# make emulator's quiet path not checked: no target/release/ism-emu (nothing is built here)"
fi

# ---- the progress lines' clock ------------------------------------------------------------
# A time zone 14 hours from UTC (POSIX form, no tzdata needed): the printed hour must be
# UTC's, marked Z.
line="$(TZ=XYZ-14 bash -c "source scripts/lib.sh && step probe" 2>&1)"
utc="$(date -u +%H)"
if [[ "$line" =~ ^'==> ['([0-9]{2}):[0-9]{2}:[0-9]{2}Z'] probe'$ ]] && [ "${BASH_REMATCH[1]}" = "$utc" ]; then
    ok "step prints UTC, marked Z: $line"
else
    not_ok "step printed '$line' (UTC hour now: $utc)"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
