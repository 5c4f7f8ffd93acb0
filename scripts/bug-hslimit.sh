#!/usr/bin/env bash
# net.smc.limit_smc_hs on a big-endian machine (docs/known-bugs.md section 4): the sysctl
# entry is an int (proc_dointvec_minmax, maxlen sizeof(int)) over a bool in struct
# netns_smc, so on s390x the 1 written lands in the padding after the bool and new
# sockets never get SMC_LIMIT_HS. One guest, smcapi's hs-sysctl subtest (it writes the
# sysctl, reads a new AF_SMC socket's SMC_LIMIT_HS, then switches the limitation on over
# netlink and reads the sysctl back), against VARIANT=hslimit-fix (the field a u8, the
# entry proc_dou8vec_minmax: guest-tests/kernel/patches/hslimit-fix). No fault rule: the
# device plays no part beyond carrying the guest's SMC-D.
#
# Usage: scripts/bug-hslimit.sh [KERNEL:VARIANT...]
#   default: 6.12:stock 6.12:hslimit-fix (7.3 the same: 7.3:stock 7.3:hslimit-fix)
#
# Verdict per run:
#   BUG     the subtest failed on its sysctl point: a new socket's SMC_LIMIT_HS was 0
#           after net.smc.limit_smc_hs=1, or the sysctl did not read 1 after netlink's
#           ENABLE_HS_LIMITATION;
#   FIXED   the subtest passed;
#   OTHER   anything else (the guest did not run it, another point failed).
# Exits 0 if every stock kernel showed the bug and every fixed one was FIXED. One line
# per run; each run is a test in build/results/bug-hslimit.{ktap,junit.xml}.
# Environment: BUG_RUNS (runs per kernel, 1), BUG_DIR (default build/bug-hslimit),
# RESULTS_DIR, RESULTS_NAME.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$REPO_ROOT/scripts/topology.sh"

help_and_no_options "$@"
BUG_NAME="net/smc limit_smc_hs sysctl writes an int into a bool"
BUG_POINT="net_smc_limit_smc_hs_sysctl_writes_an_int_into_a_bool"
BUG_DEFAULTS=(6.12:stock 6.12:hslimit-fix)
bug_setup bug-hslimit "$@"

# one_run: sets VERDICT (BUG, FIXED, OTHER) and DETAIL.
one_run() {
    VERDICT=OTHER DETAIL=""
    local line why
    emu_start 1
    guest_start solo "$RUN_DIR/ism0.sock" 10.0.0.1/24 on smcapi self 10.0.0.1 hs-sysctl
    guest_wait solo || true
    line="$(grep -m1 -E '^API hs-sysctl (ok|FAIL|skip)' "$RUN_DIR/solo.console.log" | tr -d '\r')" || true
    why="${line#API hs-sysctl FAIL }"
    case "$line" in
        "API hs-sysctl ok")
            VERDICT=FIXED DETAIL="a new socket got SMC_LIMIT_HS 1 after the sysctl, and the sysctl read 1 after netlink's ENABLE_HS_LIMITATION" ;;
        "API hs-sysctl FAIL "*"SMC_LIMIT_HS is 0"* | "API hs-sysctl FAIL "*"after ENABLE_HS_LIMITATION"*)
            VERDICT=BUG DETAIL="$why" ;;
        "")
            DETAIL="no hs-sysctl line on the console (solo.console.log)" ;;
        *)
            DETAIL="${line#API hs-sysctl }" ;;
    esac
}

bug_loop bug-hslimit "${targets[@]}"
