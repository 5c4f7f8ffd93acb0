# The project's defaults, named once. Sourced by scripts/lib.sh; every variable can be
# overridden from the environment (the Makefile passes KERNEL and VARIANT through).

# Every guest kernel line the project builds (guest-tests/build-kernel.sh names each one's
# Debian package): 5.10 (bullseye), 6.1 (bookworm), 6.12 (trixie), 7.2 (sid),
# 7.3 (trixie-backports).
KERNEL_LINES="5.10 6.1 6.12 7.2 7.3"
# The lines `make test` (CI's command) covers: the default line with the whole suite, the
# others with the matrix's run (`make e2e-matrix`). All but 7.2: 7.2 (sid) and 7.3
# (trixie-backports) have the same ISM driver and dibs layer and differ in net/smc by three
# small fixes, while each cold kernel build adds 5-18 minutes to CI; so CI keeps the newest
# and `make matrix` runs 7.2 too.
TEST_LINES="${TEST_LINES:-5.10 6.1 6.12 7.3}"
# Guest kernel line of a single run: 6.12 (Debian trixie) by default; "custom" is your own
# tree or build (KERNEL_SRC, or KERNEL_IMAGE with MODULES_DIR: guest-tests/build-kernel.sh),
# and the default when one of those is set.
if [ -z "${KERNEL:-}" ] && [ -n "${KERNEL_SRC:-}${KERNEL_IMAGE:-}" ]; then KERNEL=custom; fi
DEFAULT_KERNEL="${DEFAULT_KERNEL:-6.12}"
KERNEL="${KERNEL:-$DEFAULT_KERNEL}"
# Guest kernel variant: stock (unmodified), prezero or nozero (negative controls),
# rxabort-fix (the net/smc fix for the receive livelock: guest-tests/kernel/patches/rxabort-fix),
# lateabort-fix (the fix for an aborted connection's late CDC message in a reused DMB:
# guest-tests/kernel/patches/lateabort-fix; lateabort-fix-61 and -510 are its 6.1 and 5.10 forms),
# smcdterm-fix (6.12 and 7.3: the fix for smc_smcd_terminate() ending every link group of an
# ISM function on one peer's shutdown or GID event: guest-tests/kernel/patches/smcdterm-fix),
# chid0-peer and chid0-fix (5.10 only: the CHID-0 accept bug's crafted peer and its fix,
# tests/bug/010-012).
# readgid-fix (6.12 and 7.3: the ism driver fix for a probe whose READ_GID failed and that
# still reported success: guest-tests/kernel/patches/readgid-fix, tests/bug/023, 024).
# clientarr-fix (6.12 only, for the stable trees: the ism driver fix for a probe whose
# client array allocation failed and that still reported success: guest-tests/kernel/
# patches/clientarr-fix, tests/bug/025, 026, which run it with GCOV=1, the kernels with
# fault injection).
# hsleak-fix (every line: a client whose connect completed while it closed tells its peer
# with an abort, so that the server's connection does not wait for a close that never
# comes: guest-tests/kernel/patches/hsleak-fix, tests/bug/027, 028).
# ieqnull-fix (every line: the ism driver fix for an event interrupt before the event queue
# is published: guest-tests/kernel/patches/ieqnull-fix, tests/bug/013, 014).
# vlanlock-fix (6.12 and 7.x: the ism driver takes its command lock with interrupts off, so
# that net/smc's VLAN refcount, which issues a command under smcd->lock, cannot deadlock
# with the interrupt handler: guest-tests/kernel/patches/vlanlock-fix, tests/bug/015, 016).
# hslimit-fix (6.12 and 7.x: net.smc.limit_smc_hs's field a u8 and its sysctl
# proc_dou8vec_minmax, so that the sysctl works on big-endian machines:
# guest-tests/kernel/patches/hslimit-fix, tests/bug/005, 006).
# rxabort-kill (test only, 6.1 and later: the alternative to rxabort-fix, a failed ISM
# write kills the connection through its abort_work: guest-tests/kernel/patches/rxabort-kill).
# latedata-rfc (6.1 and later: an abort, not a close, when data is left unsent after the
# close wait, and no data after it: guest-tests/kernel/patches/latedata-rfc, an RFC;
# tests/bug/007, 008); latedata-rfc-510 is its 5.10 form.
# closeuaf-fix (every line: smc_close_active_abort() leaves the connection to
# __smc_release() while its owner may still be closing it: guest-tests/kernel/patches/
# closeuaf-fix); debug-closeuaf-fix is the same patch on the debug variant's config (KASAN).
# debug-closeuaf-window (test only, 6.12 and 7.x: the debug config and a patch that holds
# a closer woken by an error off its socket until it is killed, so that tests/bug/019
# meets the use-after-free every run) and debug-closeuaf-window-fix (the same with
# closeuaf-fix); debug-closeuaf-window-61 and -510 (and their -fix) are its forms for 6.1
# and 5.10, where conn->killed is a bit-field.
# loopback (a kernel with loopback-ism beside the ISM driver: CONFIG_SMC_LO on 6.9-6.17,
# CONFIG_DIBS_LO on 7.x; the coverage anchor, docs/coverage.md).
# debug (the kernel's bug detectors: KASAN, lockdep, DEBUG_SPINLOCK, DEBUG_ATOMIC_SLEEP, the
# hung-task detector: guest-tests/kernel/patches/debug/debug.config; any report fails a run).
# dibslock-bug (7.x only, test only: the debug variant with the CVE-2026-74617 fix reverted,
# for the dibs lock scenario of docs/known-bugs.md).
VARIANT="${VARIANT:-stock}"
VARIANTS="stock prezero nozero rxabort-fix rxabort-kill lateabort-fix lateabort-fix-61 lateabort-fix-510 smcdterm-fix ieqnull-fix vlanlock-fix hslimit-fix splicewait-fix readgid-fix clientarr-fix hsleak-fix closeuaf-fix latedata-rfc latedata-rfc-510 chid0-peer chid0-fix loopback debug dibslock-bug debug-ieqnull-fix debug-vlanlock-fix debug-closeuaf-fix debug-closeuaf-window debug-closeuaf-window-fix debug-closeuaf-window-61 debug-closeuaf-window-61-fix debug-closeuaf-window-510 debug-closeuaf-window-510-fix"
# GCOV=1: the selected line and variant built with gcov profiling of net/smc, the ism
# driver and dibs (guest-tests/kernel/gcov/); every guest booted with it hands its
# counters to the host at its end (make coverage, docs/coverage.md). Its artefacts carry
# "-gcov": build/kernel-6.12-gcov/, build/kernel-6.12-prezero-gcov/, ...
GCOV="${GCOV:-0}"

# check_kernel_selection: dies (scripts/lib.sh's die) unless KERNEL and VARIANT name
# something the project builds. The one wording of that error, for the build and for
# every script that would look for the build's artefacts.
check_kernel_selection() {
    case " $KERNEL_LINES custom " in
        *" $KERNEL "*) ;;
        *) die "KERNEL=$KERNEL is not a supported kernel line (known: ${KERNEL_LINES// /, }; or KERNEL_SRC=DIR for your own tree)" ;;
    esac
    case " $VARIANTS " in
        *" $VARIANT "*) ;;
        *) die "VARIANT=$VARIANT is unknown (${VARIANTS// /, })" ;;
    esac
    case "$GCOV" in
        0 | 1) ;;
        *) die "GCOV=$GCOV: 1 (a kernel with gcov profiling) or 0" ;;
    esac
}
# The CHID every emulated ISM function reports (one emulator process = one machine).
CHID="${CHID:-0x1234}"

# Artefacts of a kernel line and variant (default: the selected ones):
# build/kernel-6.12/, build/kernel-6.12-prezero/, build/initramfs-6.12.cpio.gz, ...
# (GCOV=1: build/kernel-6.12-gcov/, ...)
kernel_suffix() {
    local k="${1:-$KERNEL}" v="${2:-$VARIANT}" g=""
    [ "$GCOV" = 1 ] && g=-gcov
    [ "$v" = stock ] && echo "$k$g" || echo "$k-$v$g"
}
kernel_dir() { echo "$BUILD_DIR/kernel-$(kernel_suffix "$@")"; }
guest_kernel() { echo "$(kernel_dir "$@")/bzImage"; }
# kernel_has_module NAME [DIR]: the kernel in DIR (default: the selected one's kernel_dir)
# built module NAME (e.g. rdma_rxe, which only the GCOV=1 kernels have).
kernel_has_module() {
    [ -n "$(find "${2:-$(kernel_dir)}/lib/modules" -name "$1.ko*" -print -quit 2>/dev/null)" ]
}
# The benchmark's flavour (INITRAMFS_TOOLS=stock: sockperf, iperf3, smc_run) is its own
# file, initramfs-6.12-tools-stock.cpio.gz, so the test images stay lean.
guest_initrd() { echo "$BUILD_DIR/initramfs-$(kernel_suffix "$@")${INITRAMFS_TOOLS:+-tools-$INITRAMFS_TOOLS}.cpio.gz"; }
