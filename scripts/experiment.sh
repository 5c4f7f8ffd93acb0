#!/usr/bin/env bash
# The seed commit's experiment on the emulated device (docs/experiment.md): net/smc
# 1c5526968e27 moved the zeroing of a pooled buffer from its hand-out (smc_buf_create)
# to its release (smc_conn_free). For each kernel in EXP_KERNELS it boots an emulator
# and two guests that run guest-tests/progs/smcexp: the seed's connection-latency method
# (EXP_ROUNDS rounds of EXP_CONNS connections, SO_SNDBUF 16384 / SO_RCVBUF 131072,
# connect -> 1-byte exchange -> close) with the kernel timing smc_buf_create() and
# smc_conn_free() through kprobe events, one round over TCP for reference; the host's
# observer records every DMB (zeroing delays, reuse). Then SMC-D against TCP between the
# same two guests (scripts/bench-guests.sh, waited moves): stream, request/response,
# the device's own cost.
#
# Usage: scripts/experiment.sh            (make experiment; after make images emulator)
# Environment: EXP_KERNELS ("6.12 6.12-prezero 5.10": LINE or LINE-VARIANT; the first is
# the "with" kernel, the others are compared with it), EXP_CONNS (100), EXP_ROUNDS (5;
# the first is left out of the table, as the seed did), EXP_BENCH (1: the SMC-D/TCP part;
# 0 skips it), EXP_BENCH_BYTES (64M), EXP_BENCH_REPEAT (3), EXP_BENCH_ROUNDS (2000),
# EXP_DIR (build/experiment), GUEST_SMP (1).
# Writes EXP_DIR/results.json and EXP_DIR/experiment.png, prints the table; exit status 0
# when every guest passed, every SMC connection was SMC-D and the results file is whole.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$REPO_ROOT/scripts/topology.sh"
no_arguments "$@"

need_packages experiment   # python3, python3-matplotlib
EXP_DIR="${EXP_DIR:-$BUILD_DIR/experiment}"
EXP_KERNELS="${EXP_KERNELS:-6.12 6.12-prezero 5.10}"
EXP_CONNS="${EXP_CONNS:-100}"
EXP_ROUNDS="${EXP_ROUNDS:-5}"
EXP_BENCH="${EXP_BENCH:-1}"
# Debian's python3, which python3-matplotlib installs into (not a python3 of its own on PATH).
EXP_PYTHON="${EXP_PYTHON:-/usr/bin/python3}"
export GUEST_SMP="${GUEST_SMP:-1}"
[ "$EXP_ROUNDS" -ge 2 ] || die "EXP_ROUNDS=$EXP_ROUNDS: at least 2 (the first round is left out)"
[ -x "$EMU_BIN" ] || die "missing $EMU_BIN: run 'make emulator' first"
started=$SECONDS
mkdir -p "$EXP_DIR"

# split_kernel LINE[-VARIANT]: sets k (the line) and v (the variant, stock if none).
split_kernel() { k="${1%%-*}"; v=stock; [ "$k" = "$1" ] || v="${1#*-}"; }
rm -f "$EXP_DIR/results.json" "$EXP_DIR/experiment.png"

# The kernels the default images do not include are built here (cached by their inputs).
for kv in $EXP_KERNELS; do
    split_kernel "$kv"
    if [ ! -e "$(guest_kernel "$k" "$v")" ] || [ ! -e "$(guest_initrd "$k" "$v")" ]; then
        step "experiment: building kernel $k ($v)"
        make -C "$REPO_ROOT" --no-print-directory kernel initramfs KERNEL="$k" VARIANT="$v" \
            || die "building kernel $k ($v) failed"
    fi
done

ok=0
runs=()
for kv in $EXP_KERNELS; do
    split_kernel "$kv"
    step "experiment: kernel $k ($v): $EXP_ROUNDS x $EXP_CONNS connections over SMC-D, then $EXP_CONNS over TCP, ${GUEST_SMP} vCPU(s) per guest"
    topo_init "$EXP_DIR/kernel-$kv"
    printf '{"kernel": "%s", "variant": "%s", "conns": %s, "rounds": %s, "smp": %s}\n' \
        "$k" "$v" "$EXP_CONNS" "$EXP_ROUNDS" "$GUEST_SMP" >"$RUN_DIR/meta.json"
    RUST_LOG=warn emu_start 2
    KERNEL="$k" VARIANT="$v" guest_start a "$RUN_DIR/ism0.sock" 10.0.0.1/24 on smcexp server 10.0.0.1 "$EXP_CONNS" "$EXP_ROUNDS"
    KERNEL="$k" VARIANT="$v" guest_start b "$RUN_DIR/ism1.sock" 10.0.0.2/24 off smcexp client 10.0.0.1 "$EXP_CONNS" "$EXP_ROUNDS"
    guest_wait a || ok=1
    guest_wait b || ok=1
    observe json >"$RUN_DIR/observer.json" || ok=1
    emu_stop || ok=1
    topo_cleanup
    runs+=("$RUN_DIR")
done

bench=()
if [ "$EXP_BENCH" = 1 ]; then
    # The first kernel of the list, waited moves (QEMU's default and the hardware's: a
    # speed figure is never taken with a deviation, docs/fidelity.md).
    split_kernel "${EXP_KERNELS%% *}"
    BENCH_DIR="$EXP_DIR/bench" BENCH_BYTES="${EXP_BENCH_BYTES:-64M}" \
        BENCH_REPEAT="${EXP_BENCH_REPEAT:-3}" BENCH_ROUNDS="${EXP_BENCH_ROUNDS:-2000}" \
        KERNEL="$k" VARIANT="$v" "$REPO_ROOT/scripts/bench-guests.sh" waited || ok=1
    bench=(--bench "$EXP_DIR/bench/results.json")
fi

"$EXP_PYTHON" "$REPO_ROOT/scripts/experiment.py" report "$EXP_DIR/results.json" \
    --plot "$EXP_DIR/experiment.png" --wall "$((SECONDS - started))" "${bench[@]}" "${runs[@]}" || ok=1
"$EXP_PYTHON" "$REPO_ROOT/scripts/experiment.py" check "$EXP_DIR/results.json" ${bench[@]:+--need-bench} || ok=1
echo "results: $EXP_DIR/results.json, plot: $EXP_DIR/experiment.png"
exit $ok
