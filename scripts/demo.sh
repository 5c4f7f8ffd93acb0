#!/usr/bin/env bash
# The main job: start the emulator and two s390x guests, let them talk SMC-D through the
# emulated ISM device (a request/response exchange and a short stream), then print the
# host's view of what the device saw, and stop everything.
#
# Usage: scripts/demo.sh       (make demo, which builds what is missing first)
# Environment: KERNEL, VARIANT (the guests' kernel, default 6.12 stock), GUEST_TIMEOUT.
# The last line is the verdict: "demo PASSED: ..." or "demo FAILED: ..." with the
# guests' checks, how many connections ran SMC-D and the host's verdict on the DMBs;
# exit status 0 if it passed, 1 if not. Logs, the event stream and a timeline stay in
# build/demo.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$REPO_ROOT/scripts/topology.sh"
no_arguments "$@"

check_artefacts
topo_init "$BUILD_DIR/demo"
step "starting the emulator (2 ISM functions on one fabric, CHID $CHID) and guests a (10.0.0.1, server) and b (10.0.0.2, client) under QEMU TCG"
ok=0 guests=0
run_pair echo stream seq || guests=1

echo
echo "=== what the guests' kernels say (smctest, via AF_SMC sock_diag) ==="
grep -h '^SUMMARY' "$RUN_DIR"/a.console.log "$RUN_DIR"/b.console.log | sed 's/^/  /' || true
echo
echo "=== the connections on each DMB (ism-emu observe conns) ==="
observe conns || ok=1
echo
echo "=== what the host saw (ism-emu observe summary) ==="
observe summary | tee "$RUN_DIR/summary.txt" || ok=1
emu_stop || { ok=1; warn "the emulator did not stop cleanly"; }
# The run as a timeline for Perfetto's UI (docs/observer.md, "Timeline"); the picture only
# where matplotlib already is: the demo installs nothing for it (`make timeline` does).
RUST_LOG=warn "$EMU_BIN" observe timeline --from "$RUN_DIR/events.jsonl" --out "$RUN_DIR/timeline.json" >/dev/null || ok=1
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    /usr/bin/python3 "$REPO_ROOT/scripts/timeline.py" "$RUN_DIR/timeline.json" --out "$RUN_DIR/timeline.png" >/dev/null || ok=1
fi
echo
echo "Logs: ${RUN_DIR#"$PWD"/} (consoles *.console.log, events.jsonl: $(wc -l <"$RUN_DIR/events.jsonl") events, timeline.json for Perfetto's UI$([ -e "$RUN_DIR/timeline.png" ] && echo ", timeline.png"))"

# The last line says whether it worked (scripts/topology.sh, pair_verdict).
verdict="$(pair_verdict "$RUN_DIR" "$guests")" || ok=1
[ "$ok" -eq 0 ] || verdict="FAILED: ${verdict#*: }"
echo "demo $verdict"
[ "$ok" -eq 0 ]
