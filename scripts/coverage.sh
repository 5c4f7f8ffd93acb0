#!/usr/bin/env bash
# The guest kernel's coverage of SMC-D (docs/coverage.md): the suites run on GCOV=1
# kernels (gcov profiling of net/smc, the ism driver and dibs), every guest hands its
# counters to the host at its end, and scripts/coverage.py merges them into one table,
# build/coverage/summary.json and an HTML report. The columns, from the same commit:
#   emulated-ism   the four below together, over the emulated ISM between two guests
#                  (and a guest to itself): the headline figure;
#   suites         what `make test` runs on the default line: e2e (two, self, crash, v1,
#                  vlan, api; and idle, an idle link group freed after 10 minutes, in the
#                  background), make topologies' cases on the default line (two CHIDs:
#                  chid-both, chid-one, chid-none; four guests on two emulators: multi;
#                  the mixed-line cases boot other lines, which have no GCOV=1 kernel
#                  here), the seed experiment's connection loop;
#   faults         every fault scenario (tests/fault/faults.sh) and the receive
#                  livelock's stock half (bug/001);
#   roce           SMC-D beside SMC-R: the e2e topology roce, two guests with an ISM
#                  function and a soft-RoCE device each (rdma_rxe, in the GCOV=1 kernels
#                  only), SMC-D chosen over SMC-R, then SMC-Rv2 once the ISM
#                  functions are unbound; a column of its own, as most lines it adds are
#                  SMC-R's;
#   chaos          a fixed chaos campaign (tests/chaos/chaos.py: COVERAGE_CHAOS_ROUNDS
#                  rounds of seed COVERAGE_CHAOS_SEED, default 30 of 43) on the stock
#                  kernel;
#   chaos-debug    the same campaign on the debug kernel (VARIANT=debug, GCOV=1: KASAN,
#                  lockdep and the other detectors, as make chaos runs it), whose slower
#                  timing meets other windows; another build, so a column of its own
#                  beside the headline, compared with the suites line by line;
#   loopback-ism   the anchor: the same guest programs (smcsuite's tests) on one guest
#                  of VARIANT=loopback (CONFIG_SMC_LO, 7.x: CONFIG_DIBS_LO) with no ISM
#                  function, talking to itself over loopback-ism, as upstream's own
#                  tests reach SMC-D.
# Then, per source, the lines it reaches beyond the suites (coverage.py --beyond).
#
# Usage: scripts/coverage.sh [--short]
#   --short   CI's form: the two-guest e2e topology only, no anchor; the figures are
#             printed, never judged (it proves that collection keeps working)
# Environment: KERNEL (the line, default 6.12; 6.1 and later), COVERAGE_OUT (default
# build/coverage), COVERAGE_SUITES (what runs, default "idle e2e topologies experiment
# roce faults livelock chaos"; add chaos-debug for the debug kernel's column, which first
# builds a GCOV=1 debug kernel, about 25 minutes on two cores), COVERAGE_CHAOS_ROUNDS,
# COVERAGE_CHAOS_SEED, GUEST_TIMEOUT.
# Exit status: 0 when every guest's counters were collected and the report was written,
# whatever the suites said (a suite's failure is printed: under gcov the guests are
# slower, and it is the figures this measures); 1 otherwise.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SHORT=0
for a in "$@"; do
    case "$a" in
        --short) SHORT=1 ;;
        -h | --help) script_usage; exit 0 ;;
        *) usage_error "unknown argument $a" ;;
    esac
done
check_kernel_selection
case "$KERNEL" in 5.10 | custom) die "make coverage: KERNEL=$KERNEL is not supported (6.1 and later; the gcov patches do not apply)" ;; esac
need_packages coverage
OUT="${COVERAGE_OUT:-$BUILD_DIR/coverage}"
SUITES="${COVERAGE_SUITES:-idle e2e topologies experiment roce faults livelock chaos}"
[ "$SHORT" = 0 ] || SUITES=e2e-short
started=$SECONDS
rm -rf "$OUT"
mkdir -p "$OUT/raw/suites" "$OUT/raw/faults" "$OUT/raw/chaos" "$OUT/raw/roce" "$OUT/raw/chaos-debug" "$OUT/raw/loopback-ism" "$OUT/logs"
export GCOV=1 RESULTS_DIR="$OUT/results"

build() {   # build VARIANT: the GCOV=1 kernel and initramfs of KERNEL
    make -C "$REPO_ROOT" --no-print-directory -s kernel initramfs KERNEL="$KERNEL" VARIANT="$1" GCOV=1 \
        || die "the GCOV=1 kernel ($KERNEL, $1) did not build"
}
build stock
[ "$SHORT" = 1 ] || build loopback
[[ " $SUITES " != *" chaos-debug "* ]] || build debug
make -C "$REPO_ROOT" --no-print-directory -s emulator || die "the emulator did not build"

declare -A took=() status=()
suite() {   # suite COLUMN NAME COMMAND...: runs it with the counters going to COLUMN
    local column="$1" name="$2" t0=$SECONDS rc=0
    shift 2
    step "coverage: $column: '$name' on $KERNEL (GCOV=1)"
    COVERAGE_DIR="$OUT/raw/$column" "$@" || rc=$?
    took[$name]=$((SECONDS - t0)); status[$name]=$rc
    [ "$rc" = 0 ] || warn "coverage: suite '$name' ended with status $rc under GCOV=1 (its logs: $OUT/logs/$name)"
}
# The idle link group (e2e topology idle: 12 minutes, its two guests asleep nearly all
# the time) runs in the background beside the rest, and is waited for at the end.
idle_pid=""
if [[ " $SUITES " == *" idle "* ]]; then
    ( suite suites idle env E2E_DIR="$OUT/logs/idle" RESULTS_NAME=coverage-idle "$REPO_ROOT/tests/smcd/e2e.sh" idle
      echo "${took[idle]} ${status[idle]}" >"$OUT/logs/idle.took" ) &
    idle_pid=$!
fi
for s in $SUITES; do
    case "$s" in
        idle) ;;
        e2e) suite suites e2e env E2E_DIR="$OUT/logs/e2e" "$REPO_ROOT/tests/smcd/e2e.sh" ;;
        e2e-short) suite suites e2e-short env E2E_DIR="$OUT/logs/e2e" TESTS="echo seq" "$REPO_ROOT/tests/smcd/e2e.sh" two ;;
        topologies) suite suites topologies env TOPO_DIR="$OUT/logs/topologies" "$REPO_ROOT/tests/topology/topologies.sh" \
            chid-both chid-one chid-none multi ;;
        roce) suite roce roce env E2E_DIR="$OUT/logs/roce" RESULTS_NAME=coverage-roce "$REPO_ROOT/tests/smcd/e2e.sh" roce ;;
        faults) suite faults faults env FAULTS_DIR="$OUT/logs/faults" "$REPO_ROOT/tests/fault/faults.sh" ;;
        livelock) suite faults livelock env BUG_DIR="$OUT/logs/livelock" RESULTS_BASE="$OUT/logs/livelock" "$REPO_ROOT/check" bug/001 ;;
        experiment) suite suites experiment env EXP_DIR="$OUT/logs/experiment" EXP_KERNELS="$KERNEL" EXP_BENCH=0 \
            EXP_CONNS="${EXP_CONNS:-20}" EXP_ROUNDS="${EXP_ROUNDS:-3}" "$REPO_ROOT/scripts/experiment.sh" ;;
        # The stock kernel (make chaos defaults to debug: its detectors change no line of
        # net/smc, and a GCOV=1 debug kernel is a second kernel, not summed into the
        # headline: chaos-debug is its column).
        chaos) suite chaos chaos env VARIANT=stock CHAOS_DIR="$OUT/logs/chaos" "$REPO_ROOT/tests/chaos/chaos.py" \
            --rounds "${COVERAGE_CHAOS_ROUNDS:-30}" --seed "${COVERAGE_CHAOS_SEED:-43}" --once ;;
        chaos-debug) suite chaos-debug chaos-debug env VARIANT=debug CHAOS_DIR="$OUT/logs/chaos-debug" \
            "$REPO_ROOT/tests/chaos/chaos.py" --rounds "${COVERAGE_CHAOS_ROUNDS:-30}" --seed "${COVERAGE_CHAOS_SEED:-43}" --once ;;
        *) die "COVERAGE_SUITES: unknown suite '$s' (e2e, e2e-short, topologies, experiment, roce, faults, livelock, chaos, chaos-debug, idle)" ;;
    esac
done
if [ "$SHORT" = 0 ]; then
    # The anchor: one guest, no ISM function, the same smcsuite tests to itself.
    source "$REPO_ROOT/scripts/topology.sh"
    t0=$SECONDS
    step "coverage: the anchor, VARIANT=loopback (GCOV=1): one guest to itself over loopback-ism"
    (
        VARIANT=loopback
        topo_init "$OUT/logs/loopback-ism"
        check_artefacts
        # shellcheck disable=SC2086
        COVERAGE_DIR="$OUT/raw/loopback-ism" guest_start solo "" 10.0.0.1/24 on \
            smcsuite self 10.0.0.1 ${TESTS:-echo stream seq concurrent}
        guest_wait solo
    ) || warn "coverage: the loopback-ism guest's tests failed (its console: $OUT/logs/loopback-ism/solo.console.log)"
    took[loopback-ism]=$((SECONDS - t0))
fi

if [ -n "$idle_pid" ]; then
    step "coverage: waiting for the idle link group's run"
    wait "$idle_pid" || true
    read -r took[idle] status[idle] <"$OUT/logs/idle.took" || status[idle]=lost
fi

# The headline column sums every source that ran; each source is a column of its own.
sources=()
for c in suites roce faults chaos; do
    [ -z "$(ls -A "$OUT/raw/$c")" ] || sources+=("$c")
done
[ ${#sources[@]} -gt 0 ] || die "coverage: no guest's counters in $OUT/raw/{suites,roce,faults,chaos}"
all="$(printf '%s,' "${sources[@]/#/$OUT/raw/}")"
columns=(--column "emulated-ism=${all%,}")
if [ ${#sources[@]} -gt 1 ]; then
    for c in "${sources[@]}"; do columns+=(--column "$c=$OUT/raw/$c"); done
    [[ " ${sources[*]} " != *" suites "* ]] || columns+=(--beyond suites)
fi
# The debug kernel's chaos: its own column, and what it reaches beyond the suites.
if [ -n "$(ls -A "$OUT/raw/chaos-debug")" ]; then
    columns+=(--column "chaos-debug=$OUT/raw/chaos-debug")
    if [[ " ${sources[*]} " == *" suites "* ]]; then
        [[ " ${columns[*]} " == *" --beyond suites "* ]] || columns+=(--beyond suites)
        columns+=(--also-beyond chaos-debug)
    fi
fi
if [ "$SHORT" = 0 ]; then
    [ -n "$(ls -A "$OUT/raw/loopback-ism")" ] || die "coverage: no guest's counters in $OUT/raw/loopback-ism"
    columns+=(--column "loopback-ism=$OUT/raw/loopback-ism")
fi
python3 "$REPO_ROOT/scripts/coverage.py" report "${columns[@]}" --build "$BUILD_DIR" --out "$OUT" \
    --reasons "$REPO_ROOT/guest-tests/kernel/gcov/never-reached.txt" | tee "$OUT/table.txt"
[ "${PIPESTATUS[0]}" = 0 ] || die "coverage: the report failed"
for s in "${!took[@]}"; do echo "coverage: $s took ${took[$s]} s${status[$s]:+, status ${status[$s]}}"; done | sort
echo "coverage: in all $((SECONDS - started)) s; table: $OUT/table.txt, summary: $OUT/summary.json"
