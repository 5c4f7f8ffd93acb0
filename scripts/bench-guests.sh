#!/usr/bin/env bash
# SMC-D through the emulator against TCP between the same two TCG guests, and where a
# move's time goes. For each MODE, boots an emulator and two guests (server 10.0.0.1,
# client 10.0.0.2) that run guest-tests/progs/smcbench: a checked 64 MiB stream, 1-byte
# and 1 KiB request/response, each over AF_SMC and then over TCP on the virtio-net link.
# The host snapshots the emulator at every phase boundary (scripts/bench_guests.py).
#
# Usage: scripts/bench-guests.sh [MODE...]      (default: waited posted)
#   waited   QEMU waits for every move's reply (zpci x-ism-post=off, the default)
#   posted   QEMU posts moves without the signal flag (x-ism-post=on; the device must
#            announce x_ism_posted_moves, or QEMU refuses to plug the function)
# Environment: BENCH_BYTES (64M), BENCH_ROUNDS (2000), BENCH_REPEAT (5: stream pairs,
# the table shows their median), BENCH_DIR (build/bench-guests), GUEST_SMP (1: with two
# guests on a 2-core host, one vCPU each keeps the vCPU threads within the cores; two
# made the same run vary by a factor of 1.7), GUEST_MEM, KERNEL, VARIANT.
# Prints a table; writes BENCH_DIR/results.json. Exit status 0 if every AF_SMC run passed
# and was SMC-D (a failed TCP reference run is a warning: its ratio stays empty). Speeds
# are figures, not pass/fail criteria.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$REPO_ROOT/scripts/topology.sh"

help_and_no_options "$@"
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(waited posted)
for m in "${modes[@]}"; do one_of mode "$m" waited posted; done
check_kernel_selection
need_packages guests   # python3
BENCH_DIR="${BENCH_DIR:-$BUILD_DIR/bench-guests}"
BENCH_BYTES="${BENCH_BYTES:-64M}"
BENCH_ROUNDS="${BENCH_ROUNDS:-2000}"
BENCH_REPEAT="${BENCH_REPEAT:-5}"
export GUEST_SMP="${GUEST_SMP:-1}"
check_artefacts
mkdir -p "$BENCH_DIR"

dirs=()
ok=0
for mode in "${modes[@]}"; do
    post=on; [ "$mode" = posted ] || post=off
    step "bench $mode (x-ism-post=$post): ${BENCH_REPEAT} x ${BENCH_BYTES} stream, ${BENCH_ROUNDS} x 1 B and 1 KiB echo, SMC-D then TCP, ${GUEST_SMP} vCPU(s) per guest"
    topo_init "$BENCH_DIR/$mode"
    printf '{"mode": "%s", "ism_post": "%s", "bytes": "%s", "rounds": %s, "repeat": %s, "smp": %s}\n' \
        "$mode" "$post" "$BENCH_BYTES" "$BENCH_ROUNDS" "$BENCH_REPEAT" "$GUEST_SMP" >"$RUN_DIR/meta.json"
    RUST_LOG=warn emu_start 2
    X_ISM_POST=$post guest_start a "$RUN_DIR/ism0.sock" 10.0.0.1/24 on smcbench server 10.0.0.1 "$BENCH_BYTES" "$BENCH_ROUNDS" "$BENCH_REPEAT"
    X_ISM_POST=$post guest_start b "$RUN_DIR/ism1.sock" 10.0.0.2/24 off smcbench client 10.0.0.1 "$BENCH_BYTES" "$BENCH_ROUNDS" "$BENCH_REPEAT"
    python3 "$REPO_ROOT/scripts/bench_guests.py" watch "$EMU_BIN" "$RUN_DIR/control.sock" \
        "$RUN_DIR/b.console.log" "$RUN_DIR/phases.json" &
    watcher=$!
    # The guests' verdicts include the TCP reference runs; the report judges the SMC-D
    # ones (a guest whose QEMU failed leaves them missing or failed there).
    guest_wait a || true
    guest_wait b || true
    touch "$RUN_DIR/b.console.log.done"
    wait "$watcher" || ok=1
    emu_stop || ok=1
    topo_cleanup
    dirs+=("$RUN_DIR")
done
python3 "$REPO_ROOT/scripts/bench_guests.py" report "$BENCH_DIR/results.json" "${dirs[@]}" || ok=1
echo "results: $BENCH_DIR/results.json"
exit $ok
