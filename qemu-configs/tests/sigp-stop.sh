#!/usr/bin/env bash
# The check of QEMU patch s390x-sigp-exclusive: a TCG guest powers off while its other
# CPU changes page tables (guest program sigpstop: 256 pages made read-only and writable
# again, each page a global IPTE, which TCG turns into a TLB flush of all CPUs). The
# power-off's SIGP STOP to that CPU then often comes while the CPU has its part of such
# a flush queued as exclusive work; stock QEMU 10.2 waits in each for the other and the
# guest never powers off (9 of 13 boots here). With the patch every boot powers off.
#
# Usage: qemu-configs/tests/sigp-stop.sh   (SIGP_BOOTS: boots, default 8; QEMU: the
#        binary, default the project's; the guest: the built kernel and initramfs of
#        KERNEL, default 6.12)
# Prints a line per boot and "N of M boots powered off"; exits 1 unless all did.
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
no_arguments "$@"

BOOTS="${SIGP_BOOTS:-8}"
[[ "$BOOTS" =~ ^[1-9][0-9]*$ ]] || usage_error "SIGP_BOOTS must be a positive number"
QEMU="${QEMU:-$BUILD_DIR/qemu/bin/qemu-system-s390x}"
[ -x "$QEMU" ] || die "QEMU ($QEMU): run make qemu"
WORK="$BUILD_DIR/sigp-stop"
rm -rf "$WORK"
mkdir -p "$WORK"

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
[ "$ok" -eq "$BOOTS" ]
