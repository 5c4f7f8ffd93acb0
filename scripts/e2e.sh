#!/usr/bin/env bash
# End-to-end suite: unmodified guest kernels run SMC-D over the emulated ISM device.
#
# Usage: scripts/e2e.sh [TOPOLOGY...]      (default: two self)
#   two    two guests, one emulator process: guest a (10.0.0.1) serves, guest b
#          (10.0.0.2) connects; the TCP handshake crosses a QEMU socket netdev
#   self   one guest talking to itself through its own ISM function
# Environment: KERNEL (6.12 | 7.2), VARIANT (stock | prezero | nozero), TESTS (the
# smcsuite tests, default "echo stream seq concurrent"), GUEST_TIMEOUT (s, default 600),
# E2E_DIR (logs, default build/e2e).
#
# Checks, per topology: each guest passed (every connection SMC-D, every byte verified,
# per smctest's sock_diag query in the guest); the emulator saw the traffic; its DMB
# observations match what the kernel variant does (scripts/check_e2e.py); it shut down
# cleanly. Logs of every run stay in E2E_DIR.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$REPO_ROOT/scripts/topology.sh"

E2E_DIR="${E2E_DIR:-$BUILD_DIR/e2e}"
TESTS="${TESTS:-echo stream seq concurrent}"
topologies=("$@")
[ ${#topologies[@]} -gt 0 ] || topologies=(two self)

check_artefacts
mkdir -p "$E2E_DIR"
failed=()

run_two() {
    emu_start 2
    # shellcheck disable=SC2086
    guest_start a "$RUN_DIR/ism0.sock" 10.0.0.1/24 on smcsuite server 10.0.0.1 $TESTS
    # shellcheck disable=SC2086
    guest_start b "$RUN_DIR/ism1.sock" 10.0.0.2/24 off smcsuite client 10.0.0.1 $TESTS
    local ok=0
    guest_wait a || ok=1
    guest_wait b || ok=1
    return $ok
}

run_self() {
    emu_start 1
    # shellcheck disable=SC2086
    guest_start solo "$RUN_DIR/ism0.sock" 10.0.0.1/24 on smcsuite self 10.0.0.1 $TESTS
    guest_wait solo
}

for topo in "${topologies[@]}"; do
    topo_init "$E2E_DIR/$topo-$(kernel_suffix)"
    step "e2e: topology '$topo', kernel $KERNEL ($VARIANT), tests: $TESTS"
    start=$SECONDS
    rc=0
    case "$topo" in
        two) run_two || rc=1 ;;
        self) run_self || rc=1 ;;
        *) die "unknown topology '$topo' (two, self)" ;;
    esac
    observe json >"$RUN_DIR/snapshot.json" 2>>"$RUN_DIR/emulator.log" || rc=1
    observe summary >"$RUN_DIR/summary.txt" 2>&1 || true
    emu_stop || rc=1
    topo_cleanup
    python3 "$REPO_ROOT/scripts/check_e2e.py" --variant "$VARIANT" --run-dir "$RUN_DIR" || rc=1
    cat "$RUN_DIR/summary.txt"
    if [ "$rc" -eq 0 ]; then
        step "e2e: topology '$topo' PASSED in $((SECONDS - start)) s (logs: $RUN_DIR)"
    else
        step "e2e: topology '$topo' FAILED after $((SECONDS - start)) s (logs: $RUN_DIR)"
        failed+=("$topo")
    fi
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "e2e: ${#topologies[@]} topologies, ${#failed[@]} failed: ${failed[*]}"
    echo "$(( ${#topologies[@]} - ${#failed[@]} )) passed, ${#failed[@]} failed"
    exit 1
fi
echo "${#topologies[@]} passed, 0 failed"
