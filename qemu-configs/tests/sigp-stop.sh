#!/usr/bin/env bash
# The check of QEMU patch s390x-sigp-exclusive, in two parts.
#
# 1. The series' own reproducer (tests/tcg/s390x/sigp-stop-flush.S, taken from patch
#    0002): a bare-metal program whose CPU 1 loops on COMPARE AND SWAP AND PURGE (each
#    purge queues CPU 1's part of a TLB flush of all CPUs as exclusive work) while CPU 0
#    stops and restarts it 100 times. With multi-threaded TCG, stock QEMU waits inside
#    cpu_exec() for the order and the two CPUs wait for each other: it never ends. It runs
#    against stock QEMU as Debian 12 ships it (qemu-system-misc; helper_sigp() and the
#    synced TLB flushes are the same code as in 10.2), where every run must hang, and
#    against the project's QEMU, where every run must end with the program's success.
# 2. A Linux guest powers off while its other CPU changes page tables (guest program
#    sigpstop: 256 pages made read-only and writable again, each page a global IPTE).
#    Stock QEMU 10.2 hung in 9 of 13 boots; with the patch every boot must power off.
#
# Usage: qemu-configs/tests/sigp-stop.sh
#   SIGP_BOOTS: Linux boots (default 8); SIGP_RUNS: reproducer runs on each QEMU
#   (default 3); SIGP_STOCK=0 leaves stock QEMU out; QEMU: the patched binary (default
#   the project's); the guest: the built kernel and initramfs of KERNEL, default 6.12.
# Prints a line per run and per boot, then "N of M boots powered off"; exits 1 unless
# stock hung every time and the project's QEMU never did.
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
no_arguments "$@"

BOOTS="${SIGP_BOOTS:-8}"
RUNS="${SIGP_RUNS:-3}"
[[ "$BOOTS" =~ ^[1-9][0-9]*$ ]] || usage_error "SIGP_BOOTS must be a positive number"
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || usage_error "SIGP_RUNS must be a positive number"
QEMU="${QEMU:-$BUILD_DIR/qemu/bin/qemu-system-s390x}"
[ -x "$QEMU" ] || die "QEMU ($QEMU): run make qemu"
WORK="$BUILD_DIR/sigp-stop"
rm -rf "$WORK"
mkdir -p "$WORK"
# A run of the reproducer takes about a second when it works; a hung one is killed here
# (SIGKILL: a hung QEMU does not end on SIGTERM, its main loop waits for the vCPUs).
RUN_LIMIT=10
failed=0

# build_reproducer: $WORK/sigp-stop-flush, assembled from the test the patch adds, so
# that the project runs exactly what it posts.
build_reproducer() {
    local patch src="$WORK/sigp-stop-flush.S"
    patch="$(ls "$REPO_ROOT"/qemu-configs/patches/s390x-sigp-exclusive/0002-*.patch)"
    # the new file's hunk: every line after its header, without the leading '+'
    awk '/^\+\+\+ b\/tests\/tcg\/s390x\/sigp-stop-flush.S$/ {f = 1; next}
         f && /^@@/ {next}
         f && /^\+/ {print substr($0, 2); next}
         f {exit}' "$patch" >"$src"
    [ -s "$src" ] || die "$patch adds no tests/tcg/s390x/sigp-stop-flush.S"
    # QEMU's tests/tcg/s390x/softmmu.ld: the image from address 0, lowcore included
    printf 'ENTRY(_start)\nSECTIONS {\n . = 0;\n .text : { *(.head) *(.text) }\n /DISCARD/ : { *(*) }\n}\n' \
        >"$WORK/softmmu.ld"
    s390x-linux-gnu-gcc -march=z13 -m64 -Wa,--noexecstack -c "$src" -o "$WORK/sigp-stop-flush.o" \
        && s390x-linux-gnu-gcc "$WORK/sigp-stop-flush.o" -o "$WORK/sigp-stop-flush" -nostdlib -static \
            -Wl,-T"$WORK/softmmu.ld" -Wl,--build-id=none \
        || die "could not build the reproducer from $patch"
}

# stock_qemu: Debian's own qemu-system-s390x (package qemu-system-misc and its firmware
# in qemu-system-data) unpacked under the cache, never installed; prints its root. Its
# libraries come from the host's apt like every other package the project needs.
stock_qemu() {
    local root="$CACHE_DIR/qemu-stock" deb deps
    if [ ! -x "$root/usr/bin/qemu-system-s390x" ]; then
        rm -rf "$root.tmp"
        mkdir -p "$root.tmp/debs"
        # (once more after an update: the host's package lists may be missing or stale)
        (cd "$root.tmp/debs" && { apt-get download -q qemu-system-misc qemu-system-data >/dev/null 2>&1 \
            || { logged "apt-get update" apt-get update \
                 && logged "apt-get download qemu-system-misc qemu-system-data" \
                    apt-get download qemu-system-misc qemu-system-data; }; }) \
            || die "could not download Debian's qemu-system-misc (apt-get download)"
        for deb in "$root.tmp"/debs/*.deb; do dpkg-deb -x "$deb" "$root.tmp"; done
        mv -T "$root.tmp" "$root"
    fi
    # its run-time libraries: the package's Depends, but for the two unpacked here
    deps="$(dpkg-deb -f "$root"/debs/qemu-system-misc_*.deb Depends | tr ',' '\n' \
        | sed -e 's/|.*//' -e 's/(.*)//' -e 's/[[:space:]]//g' | grep -v -e '^$' -e '^qemu-system-')"
    # shellcheck disable=SC2086 # one package a word
    need_host_packages $deps >&2
    printf '%s\n' "$root"
}

# reproduce NAME EXPECT QEMU [ARGS...]: runs the reproducer RUNS times; EXPECT is
# "ends" (every run ends with the success PSW) or "hangs" (every run is still going at
# RUN_LIMIT s).
reproduce() {
    local name="$1" expect="$2" ok=0 i rc start outcome
    shift 2
    for i in $(seq 1 "$RUNS"); do
        start=$SECONDS
        rc=0
        # (in a subshell whose stderr takes the shell's "Killed" of a hung run)
        (timeout -s KILL "$RUN_LIMIT" "$@" -M s390-ccw-virtio -smp 2 -accel tcg,thread=multi \
            -action panic=exit-failure -display none -serial none -monitor none \
            -kernel "$WORK/sigp-stop-flush" >"$WORK/$name$i.out" 2>&1; exit $?) 2>/dev/null || rc=$?
        case "$rc" in
            0) outcome="ended (100 rounds) in $((SECONDS - start)) s" ;;
            137) outcome="HUNG (killed after $RUN_LIMIT s)" ;;
            *) outcome="FAILED (status $rc, $WORK/$name$i.out)" ;;
        esac
        printf 'reproducer on %s, run %d: %s\n' "$name" "$i" "$outcome"
        case "$expect:$rc" in ends:0 | hangs:137) ok=$((ok + 1)) ;; esac
    done
    if [ "$ok" -eq "$RUNS" ]; then
        printf 'reproducer on %s: %s every time (%d of %d)\n' "$name" "$expect" "$ok" "$RUNS"
    else
        printf 'reproducer on %s: expected it to %s every time, %d of %d did\n' \
            "$name" "${expect%s}" "$ok" "$RUNS"
        failed=1
    fi
}

step "the reproducer (tests/tcg/s390x/sigp-stop-flush.S of patch s390x-sigp-exclusive/0002)"
need_packages qemu-smoke
build_reproducer
if [ "${SIGP_STOCK:-1}" = 1 ]; then
    stock="$(stock_qemu)"
    reproduce "stock-$("$stock/usr/bin/qemu-system-s390x" --version | sed -n '1s/.*version \([^ ]*\).*/\1/p')" \
        hangs "$stock/usr/bin/qemu-system-s390x" -L "$stock/usr/share/qemu"
fi
reproduce patched ends "$QEMU"

step "Linux guests powering off while another CPU changes page tables"
ok=0
for i in $(seq 1 "$BOOTS"); do
    log="$WORK/boot$i.console.log"
    start=$SECONDS
    # 2 vCPUs (run-guest.sh's default): CPU 0 powers off, CPU 1 churns. A hung QEMU
    # does not end on SIGTERM either (its main loop waits for the vCPUs), hence the
    # kill 10 s after the limit (run-guest.sh).
    rc=0
    "$REPO_ROOT/qemu-configs/run-guest.sh" --qemu "$QEMU" --smp 2 --timeout 30 --name "sigp$i" \
        --log "$log" --append "console=ttysclp0 ismtest.run=sigpstop" >"$WORK/boot$i.out" 2>&1 || rc=$?
    said="$(grep -ao 'SIGPSTOP: .*' "$log" 2>/dev/null | tr -d '\r' | head -1)"
    if [ -z "$said" ]; then
        printf 'boot %d: the program did not run (run-guest.sh status %d; %s)\n' "$i" "$rc" "$WORK/boot$i.out"
    elif [ "$rc" -eq 0 ]; then
        printf 'boot %d: powered off in %d s (%s)\n' "$i" "$((SECONDS - start))" "${said#SIGPSTOP: }"
        ok=$((ok + 1))
    else
        printf 'boot %d: did NOT power off (run-guest.sh status %d after %d s; %s)\n' \
            "$i" "$rc" "$((SECONDS - start))" "${said#SIGPSTOP: }"
    fi
done
printf '%d of %d boots powered off\n' "$ok" "$BOOTS"
[ "$ok" -eq "$BOOTS" ] && [ "$failed" = 0 ]
