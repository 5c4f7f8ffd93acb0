#!/usr/bin/env bash
# Reads back every KTAP and JUnit report under build/results (written by each e2e.sh run,
# tests/ismcheck/results.py) with real parsers, and fails unless they say exactly what the runs
# recorded: KTAP through the kernel's own parser (tools/testing/kunit/kunit.py parse, from
# a kernel tree the kernel step unpacked), JUnit through junitparser (PyPI, in a venv in
# the cache). So a CI system that reads either format sees the suite's real verdicts.
#
# Usage: tests/host/results-check.sh    (make results-check; RESULTS_DIR: another folder)
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
no_arguments "$@"

need_packages results
RESULTS_DIR="${RESULTS_DIR:-$BUILD_DIR/results}"
JUNITPARSER_VERSION=5.0.3

# The parser of the tree under test if it knows KTAP (kernels before 5.18 read only
# "TAP version 14"), else the newest unpacked line's that does. Where none does (say,
# `make ci-smcd-check` alone on a new machine: only the 5.10 tree is unpacked), the
# default line's source is unpacked for it; nothing is built.
knows_ktap() { grep -qs 'KTAP version' "$(dirname "$1")/kunit_parser.py"; }
ktap_parser() {
    local k
    for k in $(find "$CACHE_DIR/kernel/work" -path '*/src/tools/testing/kunit/kunit.py' 2>/dev/null | sort -Vr); do
        knows_ktap "$k" && { echo "$k"; return 0; }
    done
    return 1
}
kunit="${KERNEL_SRC:+$KERNEL_SRC/tools/testing/kunit/kunit.py}"
if ! knows_ktap "${kunit:-/nonexistent}"; then
    kunit="$(ktap_parser)" || {
        env -u KERNEL_SRC -u KERNEL_IMAGE KERNEL="$DEFAULT_KERNEL" VARIANT=stock KERNEL_UNPACK_ONLY=1 \
            "$REPO_ROOT/guest-tests/build-kernel.sh" >&2
        kunit="$(ktap_parser)"
    } || die "no kernel tree with a KTAP parser (tools/testing/kunit) in $CACHE_DIR/kernel/work"
fi

venv="$CACHE_DIR/tools/junitparser-$JUNITPARSER_VERSION"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import junitparser' 2>/dev/null; then
    step "results-check: junitparser $JUNITPARSER_VERSION into $venv"
    rm -rf "$venv"
    logged "python3 -m venv" python3 -m venv "$venv"
    logged "pip install junitparser" "$venv/bin/pip" install --disable-pip-version-check "junitparser==$JUNITPARSER_VERSION"
fi
ismcheck results check --kunit "$kunit" --junitparser-python "$venv/bin/python" "$RESULTS_DIR"
