#!/usr/bin/env bash
# The scripts' command lines, as a user meets them (`make cli-check`, part of `make test`):
#   - every script a user calls answers -h and --help with its usage on stdout, exit 0,
#     and nothing on stderr;
#   - wrong invocations are usage errors: exit 2, a message on stderr, and nothing done
#     (no run folder removed or created, no emulator or guest started);
#   - qemu-configs/run-guest.sh's exit status: 3 when the guest's /init reported
#     RESULT FAIL, 0 on RESULT PASS, QEMU's own status, 124 on its timeout; shown with a
#     stand-in for QEMU (--qemu) that writes a console and exits as told, so no guest
#     boots here (a real guest's RESULT FAIL and status 3: tests/smcd/e2e.sh's crash
#     topology, check survivor_alive);
#   - an unknown KERNEL gets the one message of `make kernel`, wherever it is used;
#   - the two-guest verdict line of `make demo` (pair_verdict) on made-up logs;
#   - `make help` lists every target; the Makefile echoes no recipe; progress lines
#     carry a UTC clock.
# Needs nothing built. Prints one line per check ("ok - ..." / "not ok - ...") and
# "N passed, M failed"; exit status 0 if all passed.
#
# Usage: tests/host/cli-check.sh    (make cli-check)
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
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
done < <(find scripts tests qemu-configs guest-tests -name '*.sh' -perm -u+x -not -path '*/progs/*' | LC_ALL=C sort)
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
run env BUILD_DIR="$WORK/build" E2E_DIR="$WORK/e2e" tests/smcd/e2e.sh two bogus
expect_rc 2 "e2e.sh two bogus: an unknown topology"
expect_in err "unknown topology 'bogus'" "e2e.sh names the unknown topology"
[ -z "$(ls -A "$WORK/e2e")" ] && ok "e2e.sh ran no topology before refusing the bad one" \
    || not_ok "e2e.sh left $(ls "$WORK/e2e") before refusing 'bogus'"

run env BUILD_DIR="$WORK/build" FAULTS_DIR="$WORK/faults" tests/fault/faults.sh reg-dmb slwo
expect_rc 2 "faults.sh reg-dmb slwo: an unknown scenario"
expect_in err "unknown scenario 'slwo'" "faults.sh names the unknown scenario"
[ ! -e "$WORK/faults" ] && ok "faults.sh ran nothing (not reg-dmb) before refusing slwo" \
    || not_ok "faults.sh started: $(ls "$WORK/faults")"

run env BUILD_DIR="$WORK/build" TOPO_DIR="$WORK/topologies" tests/topology/topologies.sh chid-one chid-all
expect_rc 2 "topologies.sh chid-one chid-all: an unknown case"
expect_in err "unknown case 'chid-all'" "topologies.sh names the unknown case"
[ ! -e "$WORK/topologies" ] && ok "topologies.sh ran no case before refusing chid-all" \
    || not_ok "topologies.sh created $WORK/topologies before refusing chid-all"

run env BUILD_DIR="$WORK/build" MATRIX_DIR="$WORK/matrix" tests/smcd/matrix.sh 6.12 9.9
expect_rc 2 "matrix.sh 6.12 9.9: an unknown kernel line"
[ ! -e "$WORK/matrix" ] && ok "matrix.sh ran no line before refusing 9.9" || not_ok "matrix.sh created $WORK/matrix"
run env BUILD_DIR="$WORK/build" SOAK_DIR="$WORK/soak" tests/device/soak.sh many bogus
expect_rc 2 "soak.sh many bogus: an unknown scenario"
run env BUILD_DIR="$WORK/build" BENCH_DIR="$WORK/bench" scripts/bench-guests.sh waited bogus
expect_rc 2 "bench-guests.sh waited bogus: an unknown mode"
run env BUILD_DIR="$WORK/build" SCALE_DIR="$WORK/scale" scripts/scale.sh extra
expect_rc 2 "scale.sh extra: scale takes no arguments"
run env BUILD_DIR="$WORK/build" SCALE_DIR="$WORK/scale" SCALE_GUESTS="32 256" scripts/scale.sh
expect_rc 1 "scale.sh with N=256: more than one VCHID's functions"
expect_in err "each N must be 2\.\.255" "scale.sh names the range of N"
[ ! -e "$WORK/scale" ] && ok "scale.sh ran nothing before refusing N=256" || not_ok "scale.sh created $WORK/scale"
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
for bad in "--kernel" "--chid 0" "--chid 0x0" "--chid 0xff00" "--chid 1234" "--timeout soon" "--net-server maybe" "--mem lots" "--smp 0" "--tb-size 0" "--mac 52:54" "--name a/b" \
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
for cmd in qemu-configs/run-guest.sh tests/smcd/e2e.sh tests/fault/faults.sh scripts/bench-guests.sh; do
    run env KERNEL=9.9 BUILD_DIR="$WORK/build" E2E_DIR="$WORK/e2e" FAULTS_DIR="$WORK/faults" "$cmd"
    if [ "$rc" -eq 1 ] && grep -qxF -- "$want" "$WORK/err" && ! grep -q 'make images' "$WORK/err"; then
        ok "KERNEL=9.9 $cmd: the same message, no 'make images'"
    else
        not_ok "KERNEL=9.9 $cmd: status $rc: $(head -c 300 "$WORK/err" | tr '\n' ' ')"
    fi
done
run env VARIANT=zeroed BUILD_DIR="$WORK/build" qemu-configs/run-guest.sh
expect_rc 1 "VARIANT=zeroed run-guest.sh"
expect_in err "^error: VARIANT=zeroed is unknown \(stock, prezero, nozero, rxabort-fix, rxabort-kill, lateabort-fix, lateabort-fix-61, lateabort-fix-510, smcdterm-fix, ieqnull-fix, vlanlock-fix, hslimit-fix, splicewait-fix, readgid-fix, clientarr-fix, hsleak-fix, closeuaf-fix, latedata-rfc, latedata-rfc-510, chid0-peer, chid0-fix, loopback, debug, dibslock-bug, debug-ieqnull-fix, debug-vlanlock-fix, debug-closeuaf-fix, debug-closeuaf-window, debug-closeuaf-window-fix, debug-closeuaf-window-61, debug-closeuaf-window-61-fix, debug-closeuaf-window-510, debug-closeuaf-window-510-fix\)" "run-guest.sh names the variants"

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
grep -qF '[ "$rc" -eq 3 ]' tests/smcd/e2e.sh && ok "e2e.sh's crash topology checks status 3 on a real guest's RESULT FAIL" \
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

# ---- the test runner (./check) and ./new ---------------------------------------------------
# A tree of its own: the runner and the shared helpers of this one, and a group of made-up
# tests that boot nothing: one passes, one prints other than its .out, one fails with the
# fix it guards, one cannot run here.
run ./check --help
expect_rc 0 "./check --help"
expect_in out '^Usage: ./check' "./check --help shows its usage"
for bad in "--shard 3/2" "--shard x" "-g" "--bogus" "no-such-group/001" "-c /nonexistent"; do
    # shellcheck disable=SC2086 # the words are the arguments
    run ./check $bad
    expect_rc 2 "./check $bad is a usage error"
done
run ./check -l
n_all="$(grep -c . "$WORK/out")"
[ "$n_all" -ge 10 ] && ok "./check -l lists $n_all tests" || not_ok "./check -l lists $n_all tests"
run ./check -l --shard 1/3
cat "$WORK/out" >"$WORK/shards"
run ./check -l --shard 2/3
cat "$WORK/out" >>"$WORK/shards"
run ./check -l --shard 3/3
cat "$WORK/out" >>"$WORK/shards"
run ./check -l
[ "$(sort "$WORK/shards")" = "$(sort "$WORK/out")" ] && [ "$(sort "$WORK/shards" | uniq -d | wc -l)" = 0 ] \
    && ok "--shard 1/3, 2/3, 3/3: disjoint, together every test" || not_ok "the three shards are not a partition of the tests"
run ./check -l -g debug -x bug
[ ! -s "$WORK/out" ] && ok "-x bug leaves out the bug group's debug tests" || not_ok "-g debug -x bug listed: $(head -c 200 "$WORK/out")"
# Every test: executable, parses, has its .out, a description of 60 characters at most
# (the runner's column) and groups.
bad=()
while IFS= read -r t; do
    [ -x "$t" ] && bash -n "$t" && [ -f "$t.out" ] || bad+=("$t (not executable, does not parse, or no .out)")
    d="$(bash -c 'source "$1" >/dev/null 2>&1; printf "%s|%s" "$DESCRIPTION" "$TEST_GROUPS"' _ "$t")"
    desc="${d%%|*}"
    [ -n "$desc" ] && [ "${#desc}" -le 60 ] && [ -n "${d#*|}" ] || bad+=("$t (description '$desc', groups '${d#*|}')")
done < <(find tests -mindepth 2 -maxdepth 2 -type f -regex '.*/[0-9][0-9][0-9]' | sort)
[ ${#bad[@]} -eq 0 ] && ok "every test under tests/ is executable, parses, has a .out, a description and groups" \
    || not_ok "tests: ${bad[*]}"
run env KERNEL=6.12 ./check --needs bug/005 bug/006 bug/010
[ "$(paste -sd' ' "$WORK/out")" = "6.12:hslimit-fix 6.12:stock" ] && ok "--needs: the kernels the selected tests need, none of a test that does not apply" \
    || not_ok "--needs bug/005 bug/006 bug/010 printed: $(paste -sd' ' "$WORK/out")"
run ./new
expect_rc 2 "./new without a group"
run ./new common
expect_rc 2 "./new common: not a group name"

tree="$WORK/tree"
mkdir -p "$tree/tests/self"
cp check new "$tree/"
cp -r tests/common "$tree/tests/"
ln -s "$REPO_ROOT/tests/ismcheck" "$tree/tests/ismcheck"
ln -s "$REPO_ROOT/scripts" "$tree/scripts"
cat >"$tree/tests/self/001" <<'T'
. tests/common/rc
DESCRIPTION="passes"
TEST_GROUPS="quick"
test() { echo "same"; echo "noise" >&2; }
T
echo same >"$tree/tests/self/001.out"
cat >"$tree/tests/self/002" <<'T'
. tests/common/rc
DESCRIPTION="prints other than its .out"
test() { echo "got this"; }
T
echo "expected that" >"$tree/tests/self/002.out"
cat >"$tree/tests/self/003" <<'T'
. tests/common/rc
DESCRIPTION="fails, naming its fix"
_fixed_by_kernel_commit 0123456789ab "net/smc: a subject"
test() { echo "BUG"; _hint_fix; }
T
echo FIXED >"$tree/tests/self/003.out"
cat >"$tree/tests/self/004" <<'T'
. tests/common/rc
DESCRIPTION="cannot run here"
requires() { _require_program no-such-program-here; _require_line 9.9; }
test() { echo "ran"; }
T
: >"$tree/tests/self/004.out"
: >"$WORK/empty-config"
run env RESULTS_BASE="$WORK/results" "$tree/check" -c "$WORK/empty-config"
expect_rc 1 "the made-up tests: ./check exits 1 (two failed)"
expect_in out '^self/001 .*\[passed\]' "a test that prints its .out passed"
expect_in out '^    \+got this$' "a test that printed other than its .out shows the diff"
expect_in out 'this kernel may lack the fix: 0123456789ab \("net/smc: a subject"\)' "a failed test names the fix it guards"
expect_in out "^self/004 .*\[not run\]" "an unmet requirement: not run"
expect_in out "no 'no-such-program-here' on this host; kernel line 6.12: the code it tests is in 9.9 only" "not run gives every reason"
expect_in out '^Ran 4 tests .*1 passed, 2 failed, 1 not run' "the summary counts passed, failed and not run apart"
[ -f "$WORK/results/6.12-stock/self/002.out.bad" ] && grep -q noise "$WORK/results/6.12-stock/self/001.full" \
    && ok "results: the failed test's .out.bad, the passed one's full log" || not_ok "results/6.12-stock/self lacks .out.bad or .full"
grep -q '# SKIP' "$WORK/results/6.12-stock/check.ktap" && grep -q '<skipped' "$WORK/results/6.12-stock/check.junit.xml" \
    && ok "KTAP and JUnit: the not-run test is a skip" || not_ok "check.ktap/junit.xml have no skip"
run env RESULTS_BASE="$WORK/results" "$tree/check" -c "$WORK/empty-config" --strict self/004
expect_rc 1 "--strict: a test that misses a program fails"
cat >"$tree/tests/self/006" <<'T'
. tests/common/rc
DESCRIPTION="does not apply here"
requires() { _require_line 9.9; }
test() { echo "ran"; }
T
: >"$tree/tests/self/006.out"
run env RESULTS_BASE="$WORK/results" "$tree/check" -c "$WORK/empty-config" --strict self/006
expect_rc 0 "--strict: a test that does not apply to the line is not run, not failed"
run env RESULTS_BASE="$WORK/results" "$tree/check" -c "$WORK/empty-config" self/001
expect_rc 0 "./check self/001 runs that test only"
expect_in out 'runtime [0-9]+s \(last [0-9]+s\)' "a test's runtime beside its last run's"
printf 'KERNEL=7.3\n' >"$WORK/config"
run env RESULTS_BASE="$WORK/results" "$tree/check" -c "$WORK/config" self/001
[ -d "$WORK/results/7.3-stock/self" ] && ok "-c FILE: KERNEL from the configuration" || not_ok "no results/7.3-stock after KERNEL=7.3 in -c"
run env -C "$tree" ./new self
[ "$rc" = 0 ] && [ "$(head -n 1 "$WORK/out")" = tests/self/007 ] && [ -x "$tree/tests/self/007" ] \
    && [ -f "$tree/tests/self/007.out" ] && bash -n "$tree/tests/self/007" \
    && ok "./new self writes tests/self/007 (the next number) and its .out" || not_ok "./new self: status $rc, $(cat "$WORK/out" "$WORK/err")"

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
