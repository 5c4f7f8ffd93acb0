#!/usr/bin/env bash
# Tests `make shell` the way a person uses it: in a terminal (a detached tmux session),
# waits for the guest's shell prompt, types an SMC-D echo test to the peer guest and
# reads its answer off the screen, types `exit`, and checks that the guest powered off,
# `make shell` ended and the host's observer saw the connection.
#
# Usage: tests/host/shell-check.sh      (make shell-check; needs make images emulator)
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
no_arguments "$@"

need_packages shell-check
SHELL_DIR="$BUILD_DIR/shell-check"
sock="ismemu-shell-$$"
tm() { tmux -L "$sock" "$@"; }
screen() { tm capture-pane -p -J -S -2000 -t shell 2>/dev/null || true; }
# wait_screen PATTERN SECONDS: until the terminal shows PATTERN (an ERE).
wait_screen() {
    local i
    for ((i = 0; i < $2 * 2; i++)); do
        screen | grep -Eq "$1" && return 0
        sleep 0.5
    done
    warn "shell-check: no '$1' on the terminal after $2 s; the screen:"
    screen | tail -n 30 >&2
    return 1
}
trap 'tm kill-server 2>/dev/null || true' EXIT

t0=$SECONDS
tm new-session -d -s shell -x 160 -y 50 \
    "cd '$REPO_ROOT' && make --no-print-directory shell SHELL_DIR='$SHELL_DIR' SHELL_TIMEOUT=600; echo \"SHELL-ENDED rc=\$?\"; sleep 600"
wait_screen '^ismtest: interactive shell' 300 || die "shell-check: the guest never offered its shell"
wait_screen '# $' 30 || die "shell-check: no shell prompt"
step "shell-check: at the guest's prompt after $((SECONDS - t0)) s; typing an echo test to guest b"
tm send-keys -t shell "smctest echo client --host=10.0.0.2 --port=12345 --rounds=5 --size=1K && echo HAND-TEST-OK" Enter
# Anchored: the typed command line itself, echoed on the screen, contains the marker too.
wait_screen '^HAND-TEST-OK' 180 || die "shell-check: the echo test typed at the prompt did not pass"
screen | grep -E '^CONN test=echo' | grep -q 'mode=SMCD' || die "shell-check: the connection on the screen is not SMC-D"
screen | grep -E '^(CONN|SUMMARY) ' | sed 's/^/  screen: /' | cut -c1-150
tm send-keys -t shell "uname -r; exit" Enter
wait_screen '^SHELL-ENDED rc=' 120 || die "shell-check: make shell did not end after 'exit'"
screen | grep -q '^SHELL-ENDED rc=0' || die "shell-check: make shell ended with $(screen | grep -o 'SHELL-ENDED rc=[0-9]*')"
grep -q '"kind":"conn_opened"' "$SHELL_DIR/observer.log" \
    || die "shell-check: the observer beside the shell saw no connection ($SHELL_DIR/observer.log)"
step "shell-check: passed in $((SECONDS - t0)) s (prompt, an SMC-D echo test typed and read back, exit, observer saw it)"
