#!/usr/bin/env bash
# SMC-D tests for a kernel tree, in one command, for a CI pipeline (docs/ci.md).
#
# Usage: scripts/ci-smcd.sh --kernel-src DIR [options]
#        scripts/ci-smcd.sh --kernel-image FILE --modules-dir DIR [options]
#   --kernel-src DIR      your kernel tree (5.10 or later; clean or with uncommitted
#                         changes); built out of tree, never written to
#   --kernel-config FILE  merge the project's fragments into FILE (an s390 .config)
#                         instead of allnoconfig
#   --kernel-image FILE, --modules-dir DIR
#                         a kernel you built already (s390x), and its modules_install folder
#   --topologies LIST     e2e topologies (default "two self crash", also api; tests/smcd/e2e.sh)
#   --tests LIST          smcsuite tests (default "echo stream seq concurrent")
#   --out DIR             artefacts (default build/ci-smcd)
#   --build-only          build QEMU, the emulator, the kernel and initramfs; run nothing
#
# Builds what is missing (QEMU, the emulator, the kernel of your tree, the initramfs;
# all cached by their inputs), runs the end-to-end suite against the kernel and
# collects in --out: results/*.ktap (KTAP, one test point per scenario and check),
# results/*.junit.xml (JUnit XML), logs/<run>/ (guest consoles, QEMU and emulator
# logs, the event stream, the host's view) and times.txt. Exit status: 0 if every check
# passed, 1 if any failed, 2 on a usage or build error.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ksrc="" kconfig="" kimage="" kmods="" topologies="two self crash" tests="echo stream seq concurrent"
out="$BUILD_DIR/ci-smcd" build_only=0
need_arg() { [ $# -ge 2 ] && [ -n "$2" ] || usage_error "option $1 needs a value"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --kernel-src) need_arg "$@"; ksrc="$2"; shift 2 ;;
        --kernel-config) need_arg "$@"; kconfig="$2"; shift 2 ;;
        --kernel-image) need_arg "$@"; kimage="$2"; shift 2 ;;
        --modules-dir) need_arg "$@"; kmods="$2"; shift 2 ;;
        --topologies) need_arg "$@"; topologies="$2"; shift 2 ;;
        --tests) need_arg "$@"; tests="$2"; shift 2 ;;
        --out) need_arg "$@"; out="$2"; shift 2 ;;
        --build-only) build_only=1; shift ;;
        -h|--help) script_usage; exit 0 ;;
        *) usage_error "unknown option $1" ;;
    esac
done
[ -n "$ksrc" ] || [ -n "$kimage" ] || usage_error "give --kernel-src DIR or --kernel-image FILE --modules-dir DIR"
[ -z "$ksrc" ] || [ -z "$kimage" ] || usage_error "--kernel-src and --kernel-image exclude each other"
[ -z "$kimage" ] || [ -n "$kmods" ] || usage_error "--kernel-image needs --modules-dir"
[ -z "$ksrc" ] || [ -d "$ksrc" ] || usage_error "--kernel-src $ksrc: no such directory"
# shellcheck disable=SC2086
for t in $topologies; do one_of topology "$t" two self crash api; done
[ -n "${topologies// /}" ] || usage_error "--topologies names none"

export KERNEL=custom VARIANT=stock KERNEL_SRC="$ksrc" KERNEL_CONFIG="$kconfig" \
    KERNEL_IMAGE="$kimage" MODULES_DIR="$kmods"
mkdir -p "$out"
: >"$out/times.txt"
timed() {   # timed WHAT CMD...: runs CMD, notes its wall time in times.txt
    local what="$1" t0=$SECONDS rc=0; shift
    "$@" || rc=$?
    echo "$what $((SECONDS - t0)) s" >>"$out/times.txt"
    return "$rc"
}

timed build make --no-print-directory -C "$REPO_ROOT" images emulator || { warn "ci-smcd: the build failed"; exit 2; }
step "ci-smcd: kernel $(cat "$(kernel_dir)/kernel.release") ready"
[ "$build_only" = 1 ] && { cat "$out/times.txt"; exit 0; }

rm -rf "$out/logs" "$out/results"
mkdir -p "$out/logs" "$out/results"
rc=0
# shellcheck disable=SC2086
TESTS="$tests" E2E_DIR="$out/logs" RESULTS_DIR="$out/results" RESULTS_NAME=ci-smcd \
    timed suite "$REPO_ROOT/tests/smcd/e2e.sh" $topologies || rc=1
[ -e "$out/results/ci-smcd.ktap" ] || { warn "ci-smcd: the suite wrote no results"; rc=1; }
cat "$out/times.txt"
step "ci-smcd: $( [ $rc = 0 ] && echo PASSED || echo FAILED ); KTAP: $out/results/ci-smcd.ktap, JUnit: $out/results/ci-smcd.junit.xml, logs: $out/logs"
exit "$rc"
