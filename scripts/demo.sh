#!/usr/bin/env bash
# The main job: start the emulator and two s390x guests, let them talk SMC-D through the
# emulated ISM device (a request/response exchange and a short stream), then print the
# host's view of what the device saw, and stop everything.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$REPO_ROOT/scripts/topology.sh"

check_artefacts
topo_init "$BUILD_DIR/demo"
step "starting the emulator (2 ISM functions on one fabric, CHID $CHID) and guests a (10.0.0.1, server) and b (10.0.0.2, client) under QEMU TCG"
ok=0
run_pair echo stream seq || ok=1

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
# The run as a timeline for Perfetto's UI (docs/observer.md, "Timeline"); the picture only
# where matplotlib already is: the demo installs nothing for it (`make timeline` does).
RUST_LOG=warn "$EMU_BIN" observe timeline --from "$RUN_DIR/events.jsonl" --out "$RUN_DIR/timeline.json" || ok=1
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    /usr/bin/python3 "$REPO_ROOT/scripts/timeline.py" "$RUN_DIR/timeline.json" --out "$RUN_DIR/timeline.png" || ok=1
fi
echo "Timeline: $RUN_DIR/timeline.json (open it in Perfetto's UI or chrome://tracing)$([ -e "$RUN_DIR/timeline.png" ] && echo ", $RUN_DIR/timeline.png")"
[ "$ok" -eq 0 ] && step "demo finished" || die "demo failed (logs in $RUN_DIR)"
