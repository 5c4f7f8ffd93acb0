#!/usr/bin/env bash
# Where a waited ISM store's time goes, hop by hop: two guests stream SMC-D through the
# emulator (smcsuite stream and echo) while QEMU traces each store's way (its simple
# trace backend: the PCISTB helper, the vfio-user send, the reply's header on QEMU's
# vfio-user thread, the vCPU woken, the instruction done, and the receiving side's
# eventfd handler) and the emulator logs each message's steps (ISM_EMU_HOPS: header
# read, body read, served, reply written). Both clocks are CLOCK_MONOTONIC, so
# scripts/hops.py lines them up and prints each hop's median and p90.
#
# Usage: scripts/hops.sh        (make hops)
# Environment: HOPS_TESTS (smcsuite tests, default "stream echo"), GUEST_SMP (1),
#              KERNEL, VARIANT, X_ISM_POST (off: waited moves, the default).
# Tracing costs each traced event a few hundred nanoseconds: the hops are measured with
# it on, and the whole store with it is a little slower than without.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$REPO_ROOT/scripts/topology.sh"
help_and_no_options "$@"
check_artefacts
need_packages guests
export GUEST_SMP="${GUEST_SMP:-1}"
read -r -a tests <<<"${HOPS_TESTS:-stream echo}"

topo_init "$BUILD_DIR/hops"
mkdir -p "$RUN_DIR/hops"
GUEST_TRACE_EVENTS="$RUN_DIR/events.txt"
printf '%s\n' s390_pci_ism_store s390_pci_ism_store_done vfio_user_send_write \
    vfio_user_recv_hdr vfio_user_wait_done vfio_msi_interrupt >"$GUEST_TRACE_EVENTS"
export GUEST_TRACE_EVENTS
step "hops: two guests (${GUEST_SMP} vCPU each), smcsuite ${tests[*]}, QEMU traced, the emulator's hop log on"
pins_for_two
ISM_EMU_HOPS="$RUN_DIR/hops" RUST_LOG=warn emu_start 2
pin_functions
GUEST_CPUS=$PIN_A guest_start a "$RUN_DIR/ism0.sock" 10.0.0.1/24 on smcsuite server 10.0.0.1 "${tests[@]}"
GUEST_CPUS=$PIN_B guest_start b "$RUN_DIR/ism1.sock" 10.0.0.2/24 off smcsuite client 10.0.0.1 "${tests[@]}"
ok=0
guest_wait a || ok=1
guest_wait b || ok=1
# The hop log is written when each connection ends: QEMU has gone, the emulator stops.
emu_stop || ok=1
python3 "$REPO_ROOT/scripts/hops.py" report "$RUN_DIR" || ok=1
exit $ok
