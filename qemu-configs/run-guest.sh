#!/usr/bin/env bash
# Start ONE s390x guest under the project's QEMU (qemu-configs/build-qemu.sh), with
# zero or more emulated ISM functions (vfio-user sockets served by ism-emu) and
# optionally a virtio-net NIC linked to a second guest. The QEMU command line is the
# template qemu-configs/guest.args; this script only fills it in and runs it.
#
# Usage: qemu-configs/run-guest.sh [options] [-- extra QEMU arguments]
#   -k, --kernel PATH     guest kernel          (GUEST_KERNEL; default: the built kernel of
#                         the selected line and variant, $BUILD_DIR/kernel-$KERNEL[-$VARIANT]/bzImage)
#   -i, --initrd PATH     initramfs             (GUEST_INITRD; default: the built initramfs
#                         of that line and variant, $BUILD_DIR/initramfs-$KERNEL[-$VARIANT].cpio.gz;
#                         "none" boots without one)
#   -a, --append STRING   kernel command line   (GUEST_APPEND; default "console=ttysclp0")
#   --ism SOCKET[,chid=0xHEX]
#                         add an ISM function served at this vfio-user socket; repeat for
#                         more (ISM_SOCKS, space-separated). The n-th gets uid=fid=n+1
#                         (2, 3, ...), QEMU id ism<uid>; the guest sees PCI domain <uid> (hex), e.g. 0002:00:00.0.
#                         chid=: this function's CHID (QEMU's zpci pchid, which CLP reports
#                         to the guest): that of the ism-emu serving SOCKET; default --chid's
#   --chid 0xHEX          CHID reported for every ISM function without its own chid=, in hex
#                         with its 0x, as ism-emu serve --chid takes it (CHID; default 0x1234;
#                         nonzero, not 0xFF00-0xFFFF; equal on both SMC-Dv2 peers)
#   --x-ism-post on|off   zpci x-ism-post (experimental): on: QEMU posts data moves
#                         without the signal flag and waits for the others; it plugs the
#                         function only if the server announces x_ism_posted_moves; off:
#                         QEMU waits for every store, as on ISM hardware
#                         (X_ISM_POST; default off)
#   --net-socket PATH     add a virtio-net NIC (zpci uid/fid 1) on a unix stream socket (NET_SOCK)
#   --net-server on|off   on: listen on the socket; off: connect, retrying every second
#                         (NET_SERVER; default on)
#   --net-mcast GROUP:PORT  instead of --net-socket: the NIC on a UDP multicast group on the
#                         host's loopback (NET_MCAST), a hub that joins any number of guests
#                         (each needs its own --mac)
#   --mac MAC             NIC MAC (MAC; default 52:54:00:00:00:01 for server=on, :02 for off)
#   --log PATH            console log (CONSOLE_LOG; default $BUILD_DIR/logs/<name>.console.log);
#                         QEMU's own messages go to <log minus .console.log>.qemu.log
#   --name NAME           name for logs and the QEMU process (NAME; default guest)
#   --echo                also copy the console to stdout (ECHO=1)
#   --timeout SECONDS     hard limit for the whole run (TIMEOUT; default 300)
#   --mem SIZE            guest RAM (MEM; default 1G)    --smp N   vCPUs (SMP; default 2)
#   --tb-size MB          TCG's translated-code cache (TB_SIZE; default QEMU's, up to 1 GiB,
#                         touched as it fills): a host-side bound on QEMU's memory, which
#                         many guests at once need (make scale); the guest sees no difference
#   --socket-wait SECONDS how long to wait for ISM sockets to appear (SOCKET_WAIT; default 10)
#   --qemu PATH           QEMU binary (QEMU; default $BUILD_DIR/qemu/bin/qemu-system-s390x)
#   --pidfile PATH        QEMU writes its pid there (PIDFILE), e.g. to kill the guest hard
#   --status-file PATH    this script's exit status goes there as it exits (STATUS_FILE):
#                         for a caller with hundreds of children, whose shell forgets a
#                         child's status once its PID is reused (make scale)
#   --dry-run             print the command line and exit
# COVERAGE_DIR=DIR: a GCOV=1 guest's counters, printed on its console at its end, go to
# DIR/<stamp>-<name>/ (scripts/coverage.py collect; docs/coverage.md).
#
# Exit status:
#   0    QEMU exited normally (the guest powered off or rebooted, which ends QEMU
#        because of -no-reboot) and the guest's /init reported no failure
#   2    a usage error: nothing was started
#   3    QEMU exited normally, but the guest's /init reported that its program failed
#        (ISMTEST: RESULT FAIL on the console; guest-tests/init/init)
#   124  the timeout ended QEMU
#   other  QEMU's status (1 on a guest kernel panic or a QEMU error; also 1 when the
#        QEMU binary, the kernel or the initramfs is missing)
# A line after QEMU's end says how the guest ended (with /init's RESULT line); on
# failure the last 30 console lines and QEMU's messages follow on stderr.
#
# Examples:
#   qemu-configs/run-guest.sh -k bzImage -i initrd.cpio.gz --ism /run/ism/a.sock --echo
#   qemu-configs/run-guest.sh --name g1 --ism /tmp/g1.sock --net-socket /tmp/net.sock --net-server on  &
#   qemu-configs/run-guest.sh --name g2 --ism /tmp/g2.sock --net-socket /tmp/net.sock --net-server off
#   qemu-configs/run-guest.sh --name g3 --ism /tmp/a/ism0.sock,chid=0x1234 --ism /tmp/b/ism0.sock,chid=0x5678
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

ARGS_FILE="$REPO_ROOT/qemu-configs/guest.args"
QEMU="${QEMU:-$BUILD_DIR/qemu/bin/qemu-system-s390x}"
# Given from the environment or options, or else the built ones of KERNEL/VARIANT (then
# those are checked).
kernel_given="${GUEST_KERNEL:+1}" initrd_given="${GUEST_INITRD:+1}"
GUEST_KERNEL="${GUEST_KERNEL:-$(guest_kernel)}"
GUEST_INITRD="${GUEST_INITRD:-$(guest_initrd)}"
GUEST_APPEND="${GUEST_APPEND:-console=ttysclp0}"
read -r -a ism_socks <<<"${ISM_SOCKS:-}"
NET_SOCK="${NET_SOCK:-}"
NET_MCAST="${NET_MCAST:-}"
[ -z "${ISM_POST:-}" ] || die "ISM_POST is now X_ISM_POST (zpci x-ism-post, default off)"
X_ISM_POST="${X_ISM_POST:-off}"
NET_SERVER="${NET_SERVER:-on}"
MAC="${MAC:-}"
NAME="${NAME:-guest}"
CONSOLE_LOG="${CONSOLE_LOG:-}"
ECHO="${ECHO:-0}"
TIMEOUT="${TIMEOUT:-300}"
MEM="${MEM:-1G}"
SMP="${SMP:-2}"
TB_SIZE="${TB_SIZE:-}"
SOCKET_WAIT="${SOCKET_WAIT:-10}"
PIDFILE="${PIDFILE:-}"
STATUS_FILE="${STATUS_FILE:-}"
DRY_RUN=0
extra=()

need_arg() { [ $# -ge 2 ] || usage_error "option $1 needs an argument"; }

while [ $# -gt 0 ]; do
    case "$1" in
        -k|--kernel) need_arg "$@"; GUEST_KERNEL="$2"; kernel_given=1; shift 2 ;;
        -i|--initrd) need_arg "$@"; GUEST_INITRD="$2"; initrd_given=1; shift 2 ;;
        -a|--append) need_arg "$@"; GUEST_APPEND="$2"; shift 2 ;;
        --ism) need_arg "$@"; ism_socks+=("$2"); shift 2 ;;
        --chid) need_arg "$@"; CHID="$2"; shift 2 ;;
        --x-ism-post) need_arg "$@"; X_ISM_POST="$2"; shift 2 ;;
        --net-socket) need_arg "$@"; NET_SOCK="$2"; shift 2 ;;
        --net-server) need_arg "$@"; NET_SERVER="$2"; shift 2 ;;
        --net-mcast) need_arg "$@"; NET_MCAST="$2"; shift 2 ;;
        --mac) need_arg "$@"; MAC="$2"; shift 2 ;;
        --log) need_arg "$@"; CONSOLE_LOG="$2"; shift 2 ;;
        --name) need_arg "$@"; NAME="$2"; shift 2 ;;
        --echo) ECHO=1; shift ;;
        --timeout) need_arg "$@"; TIMEOUT="$2"; shift 2 ;;
        --mem) need_arg "$@"; MEM="$2"; shift 2 ;;
        --smp) need_arg "$@"; SMP="$2"; shift 2 ;;
        --tb-size) need_arg "$@"; TB_SIZE="$2"; shift 2 ;;
        --socket-wait) need_arg "$@"; SOCKET_WAIT="$2"; shift 2 ;;
        --qemu) need_arg "$@"; QEMU="$2"; shift 2 ;;
        --pidfile) need_arg "$@"; PIDFILE="$2"; shift 2 ;;
        --status-file) need_arg "$@"; STATUS_FILE="$2"; shift 2 ;;
        --dry-run) DRY_RUN=1; shift ;;
        -h|--help) script_usage "${BASH_SOURCE[0]}"; exit 0 ;;
        --) shift; extra=("$@"); break ;;
        *) usage_error "unknown option: $1" ;;
    esac
done
[ -z "$STATUS_FILE" ] || trap 'rc=$?; echo "$rc" >"$STATUS_FILE"; exit "$rc"' EXIT

# --- check the inputs
[[ "$NAME" =~ ^[A-Za-z0-9._-]+$ ]] || usage_error "--name must be letters, digits, . _ -"
[[ "$TIMEOUT" =~ ^[0-9]+$ ]] || usage_error "--timeout must be a number of seconds"
# check_chid WHERE VALUE: VALUE as 0x%04x (WHERE prefixes it in an error), or a usage error. Hex with 0x only: a bare
# 1234 would be 0x04d2 here, and ism-emu refuses it.
check_chid() {
    [[ "$2" =~ ^0[xX][0-9a-fA-F]{1,4}$ ]] || usage_error "$1$2: give the CHID in hex with 0x, e.g. 0x1234"
    { [ $(($2)) -gt 0 ] && [ $(($2)) -lt $((0xFF00)) ]; } \
        || usage_error "$1$2: an ISM CHID must be nonzero and below 0xFF00"
    printf '0x%04x' $(($2))
}
CHID="$(check_chid "--chid " "$CHID")" || exit 2
# Each --ism's socket and CHID (its own chid=, else --chid's).
ism_chids=()
for i in "${!ism_socks[@]}"; do
    s="${ism_socks[i]}" c="$CHID"
    if [[ "$s" == *,* ]]; then
        [[ "${s#*,}" == chid=* ]] || usage_error "--ism $s: the only option after the socket is chid=0xHEX"
        c="$(check_chid "--ism ${s%%,*},chid=" "${s#*,chid=}")" || exit 2
        s="${s%%,*}"
    fi
    ism_socks[i]="$s"; ism_chids[i]="$c"
done
case "$NET_SERVER" in on|off) ;; *) usage_error "--net-server must be on or off" ;; esac
mcast_host="" mcast_port=""
if [ -n "$NET_MCAST" ]; then
    [ -z "$NET_SOCK" ] || usage_error "give --net-socket or --net-mcast, not both"
    [[ "$NET_MCAST" =~ ^(2(2[4-9]|3[0-9])(\.[0-9]{1,3}){3}):([0-9]{1,5})$ ]] && [ "${BASH_REMATCH[4]}" -gt 0 ] \
        && [ "${BASH_REMATCH[4]}" -lt 65536 ] || usage_error "--net-mcast $NET_MCAST: give a multicast GROUP:PORT, e.g. 230.0.39.1:40039"
    mcast_host="${BASH_REMATCH[1]}" mcast_port="${BASH_REMATCH[4]}"
fi
case "$X_ISM_POST" in on|off) ;; *) usage_error "--x-ism-post must be on or off" ;; esac
[[ "$MEM" =~ ^[0-9]+[KMGT]?$ ]] || usage_error "--mem must be a size like 1G or 512M"
[[ "$SMP" =~ ^[1-9][0-9]*$ ]] || usage_error "--smp must be a positive number"
[ -z "$TB_SIZE" ] || [[ "$TB_SIZE" =~ ^[1-9][0-9]*$ ]] || usage_error "--tb-size must be a number of MiB"
[[ "$SOCKET_WAIT" =~ ^[0-9]+$ ]] || usage_error "--socket-wait must be a number of seconds"
[ -z "$MAC" ] || [[ "$MAC" =~ ^([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}$ ]] || usage_error "--mac $MAC is not a MAC address"
[ -n "$MAC" ] || { [ "$NET_SERVER" = on ] && MAC=52:54:00:00:00:01 || MAC=52:54:00:00:00:02; }
[ ${#ism_socks[@]} -le 200 ] || usage_error "too many ISM functions"
[ -n "$CONSOLE_LOG" ] || CONSOLE_LOG="$BUILD_DIR/logs/$NAME.console.log"
QEMU_LOG="${CONSOLE_LOG%.console.log}"; QEMU_LOG="${QEMU_LOG%.log}.qemu.log"
for s in "${ism_socks[@]}" "$NET_SOCK" "$CONSOLE_LOG"; do
    case "$s" in *'"'*|*\\*|*,*) die "path must not contain '\"', '\\' or ',' (QEMU option syntax): $s" ;; esac
done
# What must exist (checked after the arguments: a usage error wins).
[ "$kernel_given$initrd_given" = 11 ] || check_kernel_selection
[ -x "$QEMU" ] || die "no QEMU at $QEMU: run qemu-configs/build-qemu.sh (make qemu) first"
[ -f "$GUEST_KERNEL" ] || die "no guest kernel at $GUEST_KERNEL: run 'make images KERNEL=$KERNEL VARIANT=$VARIANT', or give --kernel PATH"
[ "$GUEST_INITRD" != none ] || GUEST_INITRD=""
[ -z "$GUEST_INITRD" ] || [ -f "$GUEST_INITRD" ] \
    || die "no initramfs at $GUEST_INITRD: run 'make images KERNEL=$KERNEL VARIANT=$VARIANT', or give --initrd PATH (or none)"
mkdir -p "$(dirname "$CONSOLE_LOG")" "$(dirname "$QEMU_LOG")"

# --- fill in the template
declare -A V=(
    [MEM]="$MEM" [SMP]="$SMP" [TCG_OPTS]="${TB_SIZE:+,tb-size=$TB_SIZE}" [GUEST_KERNEL]="$GUEST_KERNEL" [GUEST_APPEND]="$GUEST_APPEND"
    [GUEST_INITRD]="$GUEST_INITRD" [CONSOLE_LOG]="$CONSOLE_LOG" [CHID]="$CHID"
    [NET_SOCK]="$NET_SOCK" [NET_MCAST_HOST]="$mcast_host" [NET_MCAST_PORT]="$mcast_port" [MAC]="$MAC" [ISM_UID]="" [ISM_SOCK]="" [X_ISM_POST]="$X_ISM_POST"
)
subst() {   # subst LINE -> LINE with ${VAR} replaced from V
    local line="$1" out="" name
    while [[ "$line" =~ ^([^$]*)\$\{([A-Z_]+)\}(.*)$ ]]; do
        name="${BASH_REMATCH[2]}"
        [ -n "${V[$name]+set}" ] || die "$ARGS_FILE: unknown variable \${$name}"
        out+="${BASH_REMATCH[1]}${V[$name]}"
        line="${BASH_REMATCH[3]}"
    done
    printf '%s' "$out$line"
}
cmd=()
emit_section() {   # emit_section NAME: append that section's options to cmd
    local want="$1" cur="" line opt
    while IFS= read -r line || [ -n "$line" ]; do
        line="${line%$'\r'}"
        [[ "$line" =~ ^[[:space:]]*(#|$) ]] && continue
        if [[ "$line" =~ ^\[([a-z-]+)\]$ ]]; then cur="${BASH_REMATCH[1]}"; continue; fi
        [ "$cur" = "$want" ] || continue
        line="$(subst "$line")" || exit 1
        opt="${line%% *}"
        cmd+=("$opt")
        [ "$opt" = "$line" ] || cmd+=("${line#* }")
    done <"$ARGS_FILE"
}
emit_section base
[ -z "$GUEST_INITRD" ] || emit_section initrd
if [ "$ECHO" = 1 ]; then emit_section console-stdout; else emit_section console-file; fi
uid=2
for i in "${!ism_socks[@]}"; do
    V[ISM_UID]="$uid"; V[ISM_SOCK]="${ism_socks[i]}"; V[CHID]="${ism_chids[i]}"
    emit_section ism
    uid=$((uid + 1))
done
if [ -n "$NET_SOCK" ]; then
    emit_section "net-$( [ "$NET_SERVER" = on ] && echo server || echo client )"
    emit_section net
elif [ -n "$NET_MCAST" ]; then
    emit_section net-mcast
    emit_section net
fi
cmd+=(-name "$NAME,process=qemu-$NAME")
[ -z "$PIDFILE" ] || cmd+=(-pidfile "$PIDFILE")
cmd+=("${extra[@]}")

if [ "$DRY_RUN" = 1 ]; then
    shq() { if [[ "$1" =~ ^[A-Za-z0-9_./:=,+@%-]+$ ]]; then printf '%s' "$1"; else printf "'%s'" "${1//\'/\'\\\'\'}"; fi; }
    shq "$QEMU"
    for ((i = 0; i < ${#cmd[@]}; i++)); do
        a="${cmd[i]}"
        if [[ "$a" == -* ]] && [ $((i + 1)) -lt ${#cmd[@]} ] && [[ "${cmd[i+1]}" != -* ]]; then
            printf ' \\\n    %s %s' "$a" "$(shq "${cmd[i+1]}")"; i=$((i + 1))
        else
            printf ' \\\n    %s' "$(shq "$a")"
        fi
    done
    printf '\n'
    exit 0
fi

# --- wait for the ISM sockets (ism-emu may be starting at the same time)
for s in "${ism_socks[@]}"; do
    wait_for_socket "$s" "$SOCKET_WAIT" || die "no vfio-user socket at $s after ${SOCKET_WAIT}s: is ism-emu serving it?"
done

step "$NAME: kernel $GUEST_KERNEL, initramfs ${GUEST_INITRD:-none}"
step "$NAME: starting the guest (timeout ${TIMEOUT}s, ${#ism_socks[@]} ISM function(s)${NET_SOCK:+, NIC server=$NET_SERVER}${NET_MCAST:+, NIC on $NET_MCAST}); console: $CONSOLE_LOG"
: >"$CONSOLE_LOG"
start=$SECONDS
set +e
# --foreground on a terminal, or QEMU (in timeout's own process group) stops on tty reads
fg=(); [ -t 0 ] && fg=(--foreground)
timeout "${fg[@]}" --kill-after=10 "$TIMEOUT" "$QEMU" "${cmd[@]}" 2> >(tee "$QEMU_LOG" >&2)
rc=$?
set -e
wait 2>/dev/null || true   # let tee finish
# A GCOV=1 guest's counters (make coverage, docs/coverage.md): never a reason to fail.
if [ -n "${COVERAGE_DIR:-}" ]; then
    python3 "$REPO_ROOT/scripts/coverage.py" collect --console "$CONSOLE_LOG" --name "$NAME" \
        --out "$COVERAGE_DIR" >&2 || warn "$NAME: its coverage counters could not be collected"
fi

# The guest's own verdict: /init's last RESULT line (none when another init ran).
result="$(grep -a -E '^ISMTEST: RESULT ' "$CONSOLE_LOG" 2>/dev/null | tail -n 1 | tr -d '\r')" || true
if [ "$rc" -eq 0 ]; then
    case "$result" in
        *'RESULT FAIL'*)
            warn "$NAME: the guest's program failed ($result); QEMU exited normally after $((SECONDS - start))s"
            rc=3 ;;
        *'RESULT PASS'*)
            step "$NAME: the guest's program passed ($result); QEMU exited normally after $((SECONDS - start))s"
            exit 0 ;;
        *)
            step "$NAME: QEMU exited normally after $((SECONDS - start))s (no ISMTEST: RESULT line on the console)"
            exit 0 ;;
    esac
elif [ "$rc" -eq 124 ]; then
    warn "$NAME: timed out after ${TIMEOUT}s; QEMU killed"
else
    warn "$NAME: QEMU exited with status $rc after $((SECONDS - start))s${result:+ ($result)}"
fi
{
    echo "--- last 30 lines of $CONSOLE_LOG:"
    tail -n 30 "$CONSOLE_LOG" 2>/dev/null
    if [ -s "$QEMU_LOG" ]; then echo "--- QEMU messages ($QEMU_LOG):"; tail -n 30 "$QEMU_LOG"; fi
} >&2
exit "$rc"
