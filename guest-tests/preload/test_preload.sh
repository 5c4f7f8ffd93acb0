#!/usr/bin/env bash
# The preload's host check (make -C guest-tests/preload check, part of make unit): the
# host build of libsmc-preload.so under python3, through smc_run: which socket() calls
# it takes over (SMC_DEBUG lines), that a socket it cannot make as SMC (this host has no
# smc module) still opens, and smc_run's options and exit statuses. Needs
# SMC_PRELOAD_LIB (the host build); -h/--help prints this.
set -uo pipefail   # no -e: a failed check is counted, not fatal
for a in "$@"; do
    case "$a" in
        -h|--help) awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; exit 0 ;;
        *) echo "error: unknown argument $a (usage: $0 --help)" >&2; exit 2 ;;
    esac
done
cd "$(dirname "$0")" || exit 2
fails=0
check() {   # check WHAT COND-STATUS
    if [ "$2" = 0 ]; then echo "ok - $1"; else echo "not ok - $1"; fails=$((fails + 1)); fi
}
[ -f "${SMC_PRELOAD_LIB:-}" ] || { echo "SMC_PRELOAD_LIB must name the host build" >&2; exit 2; }

# A program that makes the sockets of each case and says whether each opened.
prog='
import socket
cases = [("tcp4", socket.AF_INET, socket.SOCK_STREAM, 0),
         ("tcp4-proto", socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP),
         ("tcp4-flags", socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC, 0),
         ("tcp6", socket.AF_INET6, socket.SOCK_STREAM, 0),
         ("udp4", socket.AF_INET, socket.SOCK_DGRAM, 0),
         ("unix", socket.AF_UNIX, socket.SOCK_STREAM, 0)]
for name, f, t, p in cases:
    try:
        s = socket.socket(f, t, p)
        print(name, "open", s.type & 0xf)
        s.close()
    except OSError as e:
        print(name, "error", e.errno)
'
run() { ./smc_run "$@" python3 -c "$prog"; }

out="$(run -d 2>"${TMPDIR:-/tmp}/smc_run.err")"
err="$(cat "${TMPDIR:-/tmp}/smc_run.err")"
for c in tcp4 tcp4-proto tcp4-flags udp4 unix; do
    grep -q "^$c open" <<<"$out"; check "$c opens under smc_run" $?
done
# IPv6 may be off on the host: then only "not taken over wrongly" is checked below.
n="$(grep -c '^smc-preload: socket(AF_INET' <<<"$err" || true)"
want=3; grep -q '^tcp6 open' <<<"$out" && want=4
[ "$n" = "$want" ]; check "the preload handles exactly the $want TCP sockets (saw $n)" $?
grep -q 'AF_SMC' <<<"$err"; check "af_smc mode asks for AF_SMC" $?
grep -q '^smc_run: LD_PRELOAD=.* SMC_PROTO=af_smc' <<<"$err"; check "smc_run -d names the library and the mode" $?
if grep -q 'fell back to TCP' <<<"$err"; then
    grep -q 'fell back to TCP, fd -1' <<<"$err"; [ $? = 1 ]; check "a failed SMC socket falls back to a working TCP socket" $?
fi

out="$(./smc_run -d -p python3 -c "$prog" 2>&1 >/dev/null)"
grep -q 'IPPROTO_SMC' <<<"$out" && ! grep -q 'AF_SMC' <<<"$out"; check "-p asks for IPPROTO_SMC" $?
out="$(SMC_PROTO=ipproto SMC_DEBUG=1 ./smc_run python3 -c "$prog" 2>&1 >/dev/null)"
grep -q 'IPPROTO_SMC' <<<"$out"; check "SMC_PROTO=ipproto is -p" $?
out="$(./smc_run python3 -c "$prog" 2>&1 >/dev/null)"
[ -z "$out" ]; check "without -d the preload is silent" $?

./smc_run -v | grep -q '^smc_run'; check "-v prints the version" $?
./smc_run -h | grep -q 'COMMAND'; check "-h prints the usage" $?
rc=0; ./smc_run -x true 2>/dev/null || rc=$?
[ "$rc" = 2 ]; check "an unknown option is status 2" $?
rc=0; ./smc_run 2>/dev/null || rc=$?
[ "$rc" = 2 ]; check "no command is status 2" $?
rc=0; ./smc_run sh -c 'exit 7' || rc=$?
[ "$rc" = 7 ]; check "the command's status is smc_run's" $?
# shellcheck disable=SC2016 # expanded by the inner shell
[ "$(./smc_run sh -c 'echo "$LD_PRELOAD"')" = "$SMC_PRELOAD_LIB" ]; check "LD_PRELOAD names the library" $?

[ "$fails" = 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "smc_run / libsmc-preload.so: all checks passed"
