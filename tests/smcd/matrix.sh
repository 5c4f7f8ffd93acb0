#!/usr/bin/env bash
# The kernel matrix: the two-guest topology with the sequential-connections test on
# each kernel line, unmodified (VARIANT=stock), then one table: line, kernel release,
# SMC-D version negotiated on the wire, connections, SMC-D/fallback counts, DMB reuses,
# what the host saw the guest do with released DMBs (release / hand-out / stale) and the median
# delay from a close to the DMB reading zero, and whether the guests' dibs devices match
# the host (6.18+). Each run is checked by tests/ismcheck/check_e2e.py against what its kernel
# version should do (v5.17+: zeroing at release; older: at hand-out; 6.18+: dibs).
#
# Usage: tests/smcd/matrix.sh [LINE...]     (default: every line in KERNEL_LINES)
#        tests/smcd/matrix.sh --others      every line `make test` covers (TEST_LINES: all
#                                        but 7.2) except the default one ($KERNEL),
#                                        which `make test` covers with the full suite
# Environment: TESTS (default seq), MATRIX_DIR (logs, default build/matrix).
# Needs `make images-all emulator` (--others: `make images-test emulator`). Exit status 1
# if any line failed.
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

lines=("$@")
if [ "${lines[*]}" = --others ]; then
    lines=()
    for k in $TEST_LINES; do [ "$k" = "$KERNEL" ] || lines+=("$k"); done
    if [ ${#lines[@]} -eq 0 ]; then
        step "matrix: TEST_LINES ($TEST_LINES) has no line but $KERNEL: nothing to run"
        exit 0
    fi
else
    help_and_no_options "$@"
    [ ${#lines[@]} -gt 0 ] || read -r -a lines <<<"$KERNEL_LINES"
fi
# shellcheck disable=SC2086
for k in "${lines[@]}"; do one_of "kernel line" "$k" $KERNEL_LINES; done
need_packages guests   # python3: check_e2e.py, matrix_table.py
MATRIX_DIR="${MATRIX_DIR:-$BUILD_DIR/matrix}"
export TESTS="${TESTS:-seq}"

mkdir -p "$MATRIX_DIR"
results=()
for k in "${lines[@]}"; do
    step "matrix: kernel line $k, two guests, tests: $TESTS"
    rm -f "$MATRIX_DIR/two-$k/result.json"
    # One e2e run per line, in its own process (it installs its own EXIT trap).
    KERNEL="$k" VARIANT=stock E2E_DIR="$MATRIX_DIR" "$REPO_ROOT/tests/smcd/e2e.sh" two \
        >"$MATRIX_DIR/$k.log" 2>&1 && rc=0 || rc=$?
    [ "$rc" -eq 0 ] || { warn "matrix: line $k failed; its last lines (whole log: $MATRIX_DIR/$k.log):"; tail -n 25 "$MATRIX_DIR/$k.log" >&2; }
    results+=("$k=$rc=$MATRIX_DIR/two-$k/result.json")
done
python3 "$REPO_ROOT/tests/smcd/matrix_table.py" "${results[@]}"
