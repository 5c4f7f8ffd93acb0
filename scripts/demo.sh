#!/usr/bin/env bash
# The main job: start the emulator and two s390x guests, let them talk SMC-D through the
# emulated ISM device (a request/response exchange and a short stream), then print the
# host's view of what the device saw, and stop everything.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$REPO_ROOT/scripts/topology.sh"

check_artefacts
topo_init "$BUILD_DIR/demo"
step "starting the emulator: 2 ISM functions on one fabric, CHID $CHID"
emu_start 2
step "booting guest a (10.0.0.1, server) and guest b (10.0.0.2, client) under QEMU TCG"
guest_start a "$RUN_DIR/ism0.sock" 10.0.0.1/24 on smcsuite server 10.0.0.1 echo stream seq
guest_start b "$RUN_DIR/ism1.sock" 10.0.0.2/24 off smcsuite client 10.0.0.1 echo stream seq
ok=0
guest_wait a || ok=1
guest_wait b || ok=1

echo
echo "=== what the guests' kernels say (smctest, via AF_SMC sock_diag) ==="
grep -h '^SUMMARY' "$RUN_DIR"/a.console.log "$RUN_DIR"/b.console.log | sed 's/^/  /' || true
echo
echo "=== what the host saw (ism-emu observe summary) ==="
observe summary || ok=1
echo
echo "=== the connections on each DMB (ism-emu observe conns) ==="
observe conns || ok=1
echo
echo "Event stream: $RUN_DIR/events.jsonl ($(wc -l <"$RUN_DIR/events.jsonl") events); console logs: $RUN_DIR/*.console.log"
emu_stop || ok=1
[ "$ok" -eq 0 ] && step "demo finished" || die "demo failed (logs in $RUN_DIR)"
