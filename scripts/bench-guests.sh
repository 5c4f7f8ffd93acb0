#!/usr/bin/env bash
# SMC-D through the emulator against TCP between the same two TCG guests, with the
# field's stock tools and the project's own program. For each MODE and guest SHAPE, boots
# an emulator and two guests (server 10.0.0.1, client 10.0.0.2) from the benchmark's
# image flavour (INITRAMFS_TOOLS=stock) that run guest-tests/progs/stockbench:
#   - sockperf (tp: throughput, 65507-byte messages; pp: ping-pong latency, 14 bytes)
#     and iperf3 (-t BENCH_SECS), unmodified, over SMC-D through smc_run (AF_SMC; and
#     IPPROTO_SMC, smc_run -p, on kernels 6.11 and later) and over plain TCP;
#   - then smcbench: a checked stream, 1-byte and 1 KiB request/response, over AF_SMC
#     and TCP (smctest).
# The host snapshots the emulator at every phase boundary (scripts/bench_guests.py); an
# SMC-D phase whose bytes the ISM device did not move (a TCP fallback) fails the run.
#
# Usage: scripts/bench-guests.sh [MODE...]      (default: waited)
#   waited   QEMU waits for every move's reply (zpci x-ism-post=off, the default)
#   posted   QEMU posts moves without the signal flag (x-ism-post=on; the device must
#            announce x_ism_posted_moves, or QEMU refuses to plug the function)
# Environment:
#   BENCH_SHAPES   vCPUs per guest, one run each (default "2 1": run-guest.sh's default
#                  and one vCPU; "2" when BENCH_REPEAT=1, CI's short run; GUEST_SMP=N
#                  alone means BENCH_SHAPES=N)
#   BENCH_BYTES    smcbench's stream (64M)
#   BENCH_ROUNDS   smcbench's request/response rounds (2000)
#   BENCH_REPEAT   smcbench's stream repeats (5; the table shows their median and range)
#   BENCH_STOCK_REPEAT  sockperf tp and iperf3 repeats (BENCH_REPEAT, at most 3)
#   BENCH_SECS     sockperf's and iperf3's run time in seconds (5; 1 when BENCH_REPEAT=1)
#   PINS           host CPUs of guest a and b ("0 1" on 2+ CPUs: each guest's QEMU and
#                  the emulator's thread serving its function share one CPU; "none":
#                  the scheduler places them; scripts/topology.sh, pins_for_two)
#   BENCH_DIR (build/bench-guests), GUEST_MEM, KERNEL, VARIANT.
# Prints a table (the stock tools first, then smcbench) and writes BENCH_DIR/results.json.
# Exit status 0 if every SMC-D run passed and the device moved its bytes (a failed TCP
# reference run is a warning: its ratio stays empty). Speeds are figures, not pass/fail
# criteria.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$REPO_ROOT/scripts/topology.sh"

help_and_no_options "$@"
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(waited)
for m in "${modes[@]}"; do one_of mode "$m" waited posted; done
check_kernel_selection
need_packages guests   # python3
BENCH_DIR="${BENCH_DIR:-$BUILD_DIR/bench-guests}"
BENCH_BYTES="${BENCH_BYTES:-64M}"
BENCH_ROUNDS="${BENCH_ROUNDS:-2000}"
BENCH_REPEAT="${BENCH_REPEAT:-5}"
short=0; [ "$BENCH_REPEAT" != 1 ] || short=1
BENCH_STOCK_REPEAT="${BENCH_STOCK_REPEAT:-$((BENCH_REPEAT < 3 ? BENCH_REPEAT : 3))}"
BENCH_SECS="${BENCH_SECS:-$([ $short = 1 ] && echo 1 || echo 5)}"
BENCH_SHAPES="${BENCH_SHAPES:-${GUEST_SMP:-$([ $short = 1 ] && echo 2 || echo "2 1")}}"
read -r -a shapes <<<"$BENCH_SHAPES"
for n in "${shapes[@]}"; do [[ "$n" =~ ^[1-8]$ ]] || usage_error "BENCH_SHAPES: '$n' is not a vCPU count (1-8)"; done
for v in BENCH_REPEAT BENCH_STOCK_REPEAT BENCH_SECS BENCH_ROUNDS; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || usage_error "$v=${!v} is not a positive number"
done
# The benchmark's image flavour: the stock tools and smc_run (guest-tests/build-initramfs.sh).
# Built here (a no-op when up to date) for callers that built only the test images, such as
# make experiment; without the kernel check_artefacts says what to build.
export INITRAMFS_TOOLS=stock
if [ -f "$(guest_kernel)" ]; then
    "$REPO_ROOT/guest-tests/build-initramfs.sh" || die "could not build the stock-tools image ($(guest_initrd))"
fi
check_artefacts
pins_for_two
mkdir -p "$BENCH_DIR"
krel="$(cat "$(kernel_dir)/kernel.release" 2>/dev/null || echo "$KERNEL")"

dirs=()
ok=0
for mode in "${modes[@]}"; do
  for smp in "${shapes[@]}"; do
    post=on; [ "$mode" = posted ] || post=off
    step "bench $mode (x-ism-post=$post), $smp vCPU(s) per guest, kernel $krel: sockperf tp ${BENCH_STOCK_REPEAT} x ${BENCH_SECS} s, pp ${BENCH_SECS} s, iperf3 ${BENCH_STOCK_REPEAT} x ${BENCH_SECS} s (SMC-D via smc_run, TCP); smcbench ${BENCH_REPEAT} x ${BENCH_BYTES} stream, ${BENCH_ROUNDS} x 1 B and 1 KiB echo"
    topo_init "$BENCH_DIR/$mode-smp$smp"
    printf '{"mode": "%s", "ism_post": "%s", "bytes": "%s", "rounds": %s, "repeat": %s, "smp": %s, "secs": %s, "stock_repeat": %s, "kernel": "%s", "pins": "%s"}\n' \
        "$mode" "$post" "$BENCH_BYTES" "$BENCH_ROUNDS" "$BENCH_REPEAT" "$smp" "$BENCH_SECS" "$BENCH_STOCK_REPEAT" "$krel" "${PIN_A:+$PIN_A $PIN_B}" >"$RUN_DIR/meta.json"
    RUST_LOG=warn emu_start 2
    pin_functions
    stock=("$BENCH_SECS" "$BENCH_STOCK_REPEAT" -- "$BENCH_BYTES" "$BENCH_ROUNDS" "$BENCH_REPEAT")
    GUEST_PCAP=off GUEST_CPUS=$PIN_A GUEST_SMP=$smp X_ISM_POST=$post guest_start a "$RUN_DIR/ism0.sock" 10.0.0.1/24 on stockbench server 10.0.0.1 "${stock[@]}"
    GUEST_PCAP=off GUEST_CPUS=$PIN_B GUEST_SMP=$smp X_ISM_POST=$post guest_start b "$RUN_DIR/ism1.sock" 10.0.0.2/24 off stockbench client 10.0.0.1 "${stock[@]}"
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
done
python3 "$REPO_ROOT/scripts/bench_guests.py" report "$BENCH_DIR/results.json" "${dirs[@]}" || ok=1
echo "results: $BENCH_DIR/results.json"
exit $ok
