#!/usr/bin/env bash
# An interactive guest on the emulated ISM, for poking at SMC-D by hand (`make shell`).
#
# Starts the emulator and, with SHELL_GUESTS=2 (default), a peer guest b (10.0.0.2) that
# serves smctest's echo test on port 12345 over and over; then boots guest a (10.0.0.1)
# with its console on this terminal and leaves you at its shell, the test programs on
# PATH (guest-tests/progs). The host observer runs beside it: every event goes to
# RUN_DIR/observer.log (follow it from another terminal with `tail -f`), and the host's
# view is printed when you leave. `exit` (or poweroff -f) in the guest ends it all.
#
# In the guest, for example:
#   smctest echo client --host=10.0.0.2 --port=12345 --rounds=10   (SHELL_GUESTS=2)
#   smctest echo self --host=10.0.0.1 --rounds=10                   (one guest, itself)
#   cat /sys/bus/pci/devices/*/pft;  dmesg | grep -i smc
#
# Environment: SHELL_GUESTS (1 or 2, default 2), SHELL_TIMEOUT (s, default 3600),
# SHELL_DIR (default build/shell), KERNEL/VARIANT/KERNEL_SRC as for the other targets.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$REPO_ROOT/scripts/topology.sh"
no_arguments "$@"

SHELL_GUESTS="${SHELL_GUESTS:-2}"
SHELL_TIMEOUT="${SHELL_TIMEOUT:-3600}"
case "$SHELL_GUESTS" in 1|2) ;; *) die "SHELL_GUESTS=$SHELL_GUESTS: 1 or 2" ;; esac
check_artefacts
topo_init "${SHELL_DIR:-$BUILD_DIR/shell}"
GUEST_TIMEOUT="$SHELL_TIMEOUT"

emu_start "$SHELL_GUESTS"
observe follow >"$RUN_DIR/observer.log" 2>&1 &
_topo_pids+=("$!")
net_server=on
if [ "$SHELL_GUESTS" = 2 ]; then
    # The peer serves one echo connection at a time, again and again, until poweroff.
    guest_start b "$RUN_DIR/ism1.sock" 10.0.0.2/24 on \
        sh -c "while%20:;%20do%20smctest%20echo%20server%20--port=12345%20--conns=1;%20sleep%201;%20done"
    net_server=off
fi
step "shell: guest a (10.0.0.1) on this console; the host's events: $RUN_DIR/observer.log"
[ "$SHELL_GUESTS" = 2 ] && step "shell: guest b (10.0.0.2) serves 'smctest echo' on port 12345"
"$REPO_ROOT/qemu-configs/run-guest.sh" --name a \
    --append "console=ttysclp0 panic=-1 ismtest.ip=10.0.0.1/24 ismtest.shell=1" \
    --ism "$RUN_DIR/ism0.sock" --chid "$CHID" \
    --net-socket "$RUN_DIR/net.sock" --net-server "$net_server" \
    --log "$RUN_DIR/a.console.log" --timeout "$SHELL_TIMEOUT" --echo \
    --pidfile "$RUN_DIR/a.qemu.pid" && rc=0 || rc=$?
echo
observe summary 2>/dev/null || true
step "shell: guest a ended (status $rc); logs and the event stream in $RUN_DIR"
exit "$rc"
