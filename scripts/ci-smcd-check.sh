#!/usr/bin/env bash
# The project's own CI for scripts/ci-smcd.sh, on a real tree: the unpacked Debian source
# of the CI_TREE_LINE kernel line (default 5.10), copied and treated as someone's tree.
#  1. ci-smcd.sh --build-only on the clean tree (its first build);
#  2. a one-line change in net/smc (a MODULE_INFO line in af_smc.c), then ci-smcd.sh with the
#     suite: the changed tree must rebuild (a new cache entry whose smc.ko carries the
#     line, the clean tree's does not) and pass;
#  3. its KTAP and JUnit files read back by real parsers (scripts/results-check.sh).
# Prints the times: first build, rebuild after the change, suite.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

line="${CI_TREE_LINE:-5.10}"
work="$BUILD_DIR/ci-smcd-check"
tree="$work/tree"
out="$work/out"
marker="ci_smcd_check=ism-emu dirty tree"

src="$(debian_kernel_tree "$line")"
step "ci-smcd-check: copying the $line tree to $tree (someone's tree)"
rm -rf "$work"; mkdir -p "$work"
cp -a "$src" "$tree"   # -a: the files keep their times, so the clean state is the same each run

t0=$SECONDS
"$REPO_ROOT/scripts/ci-smcd.sh" --kernel-src "$tree" --out "$out" --build-only
first=$((SECONDS - t0))
clean_result="$(readlink -f "$BUILD_DIR/kernel-custom")"

# One line, as a developer's patch would add it: a tag in smc.ko's .modinfo
# (`modinfo smc` shows it), so the rebuilt module is recognisable.
file="$tree/net/smc/af_smc.c"
echo 'MODULE_INFO(ci_smcd_check, "ism-emu dirty tree");' >>"$file"

t0=$SECONDS
"$REPO_ROOT/scripts/ci-smcd.sh" --kernel-src "$tree" --out "$out" --build-only
rebuild=$((SECONDS - t0))
dirty_result="$(readlink -f "$BUILD_DIR/kernel-custom")"
[ "$dirty_result" != "$clean_result" ] || die "the changed tree did not get a kernel of its own ($dirty_result)"
has_marker() { find "$1/lib/modules" -name 'smc.ko*' -exec sh -c 'case "$1" in *.xz) xz -dc "$1";; *.zst) zstd -dc "$1";; *.gz) gzip -dc "$1";; *) cat "$1";; esac' _ {} \; | grep -aq "$marker"; }
has_marker "$dirty_result" || die "the rebuilt smc module does not carry the change"
! has_marker "$clean_result" || die "the clean tree's smc module carries the change"

t0=$SECONDS
"$REPO_ROOT/scripts/ci-smcd.sh" --kernel-src "$tree" --out "$out" \
    --topologies "${CI_TREE_TOPOLOGIES:-two crash}" --tests "${CI_TREE_TESTS:-echo seq}"
suite=$((SECONDS - t0))
KERNEL_SRC="$tree" RESULTS_DIR="$out/results" "$REPO_ROOT/scripts/results-check.sh"
step "ci-smcd-check: passed; Linux $line tree: first build ${first} s, rebuild after a one-line change ${rebuild} s, suite ${suite} s"
