#!/usr/bin/env bash
# The project's own CI for scripts/ci-smcd.sh, on a real tree: the unpacked Debian source
# of the CI_TREE_LINE kernel line (default 5.10), copied and treated as someone's tree.
#  1. ci-smcd.sh --build-only on the clean tree (its first build);
#  2. a one-line change in net/smc (a MODULE_INFO line in af_smc.c), then ci-smcd.sh with the
#     suite: the changed tree must rebuild incrementally (a new cache entry whose smc.ko
#     carries the line, the clean tree's does not; a few objects recompiled, not the
#     tree) and pass;
#  3. its KTAP and JUnit files read back by real parsers (tests/host/results-check.sh).
# The copy's object folder starts as the stock build's (same sources, same configuration),
# with the paths kbuild recorded moved to the copy: a developer's tree has its objects
# from its first build, and CI need not compile the line a second time.
# Prints the times: first build, rebuild after the change, suite.
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
no_arguments "$@"

line="${CI_TREE_LINE:-5.10}"
work="$BUILD_DIR/ci-smcd-check"
tree="$work/tree"
out="$work/out"
marker="ci_smcd_check=ism-emu dirty tree"

step "ci-smcd-check: copying the $line tree to $tree (someone's tree)"
rm -rf "$work"; mkdir -p "$work"
# The copy is taken under the tree's build lock: a build may be unpacking the tree, or
# patching it for a variant (CI builds them in the background), and either leaves a copy
# that is not Debian's tree. A variant applied since debian_kernel_tree looked: again.
for attempt in 1 2 3; do
    src="$(realpath "$(debian_kernel_tree "$line")")"
    # -a: the files keep their times, so the clean state is the same each run
    if flock -w 3600 "$(dirname "$src")/lock" bash -c \
        '[ -z "$(cat "$1/applied" 2>/dev/null)" ] && cp -a "$2" "$3"' _ "$(dirname "$src")" "$src" "$tree"; then
        break
    fi
    rm -rf "$tree"
    [ "$attempt" -lt 3 ] || die "ci-smcd-check: the $line tree carried a variant's patches each time it was copied"
done
tree="$(realpath "$tree")"
obj="$(custom_obj_dir "$tree")"

# sed_literal TEXT: TEXT as a sed pattern that matches only itself.
sed_literal() { printf '%s' "$1" | sed 's/[][\.*^$|]/\\&/g'; }

# seed_objects: the stock build's object folder as the copy's. kbuild decides what is up
# to date by file times (kept by cp -a on both sides) and by the command it recorded for
# each target (.*.cmd, with the tree's absolute path in it): those get the copy's paths.
# Binaries that embed the old path are left as they are, as nothing compares them. If
# anything still differs, kbuild recompiles what it must: slower, never wrong.
seed_objects() {
    local stock_obj
    stock_obj="$(dirname "$src")/obj"
    rm -rf "$obj"
    if [ ! -f "$stock_obj/.config" ]; then
        warn "ci-smcd-check: no stock object folder for $line ($stock_obj): the first build compiles the tree"
        return 0
    fi
    step "ci-smcd-check: seeding $obj with the stock $line build's objects"
    mkdir -p "$(dirname "$obj")"
    # The stock build's lock: never copy a folder that a build is writing.
    flock -w 3600 "$(dirname "$src")/lock" cp -a "$stock_obj" "$obj" \
        || die "could not copy $stock_obj"
    find "$obj" -type f \( -name '*.cmd' -o -name '*.d' -o -path "$obj/Makefile" \) -print0 \
        | xargs -0r sed -i -e "s|$(sed_literal "$src")|$tree|g" -e "s|$(sed_literal "$stock_obj")|$obj|g"
}
seed_objects

# objects_since STAMP: how many object files were written after STAMP.
objects_since() { find "$obj" -name '*.o' -newer "$1" 2>/dev/null | wc -l; }

touch "$work/stamp-first"
t0=$SECONDS
"$REPO_ROOT/scripts/ci-smcd.sh" --kernel-src "$tree" --out "$out" --build-only
first=$((SECONDS - t0))
first_objs="$(objects_since "$work/stamp-first")"
clean_result="$(readlink -f "$BUILD_DIR/kernel-custom")"

# One line, as a developer's patch would add it: a tag in smc.ko's .modinfo
# (`modinfo smc` shows it), so the rebuilt module is recognisable.
file="$tree/net/smc/af_smc.c"
echo 'MODULE_INFO(ci_smcd_check, "ism-emu dirty tree");' >>"$file"

had_objs="$(find "$obj" -name '*.o' 2>/dev/null | wc -l)"
touch "$work/stamp-rebuild"
t0=$SECONDS
"$REPO_ROOT/scripts/ci-smcd.sh" --kernel-src "$tree" --out "$out" --build-only
rebuild=$((SECONDS - t0))
rebuild_objs="$(objects_since "$work/stamp-rebuild")"
dirty_result="$(readlink -f "$BUILD_DIR/kernel-custom")"
[ "$dirty_result" != "$clean_result" ] || die "the changed tree did not get a kernel of its own ($dirty_result)"
# A tree that had its objects must not compile again for one changed line (af_smc.o, the
# smc module's parts, what the link step makes): a tenth of them is already far too many.
if [ "$had_objs" -gt 0 ] && [ "$rebuild_objs" -gt $((had_objs / 10)) ]; then
    die "the one-line change recompiled $rebuild_objs of $had_objs objects: the rebuild is not incremental"
fi
has_marker() { find "$1/lib/modules" -name 'smc.ko*' -exec sh -c 'case "$1" in *.xz) xz -dc "$1";; *.zst) zstd -dc "$1";; *.gz) gzip -dc "$1";; *) cat "$1";; esac' _ {} \; | grep -aq "$marker"; }
has_marker "$dirty_result" || die "the rebuilt smc module does not carry the change"
! has_marker "$clean_result" || die "the clean tree's smc module carries the change"

t0=$SECONDS
"$REPO_ROOT/scripts/ci-smcd.sh" --kernel-src "$tree" --out "$out" \
    --topologies "${CI_TREE_TOPOLOGIES:-two crash}" --tests "${CI_TREE_TESTS:-echo seq}"
suite=$((SECONDS - t0))
KERNEL_SRC="$tree" RESULTS_DIR="$out/results" "$REPO_ROOT/tests/host/results-check.sh"
step "ci-smcd-check: passed; Linux $line tree: first build ${first} s ($first_objs objects compiled), rebuild after a one-line change ${rebuild} s ($rebuild_objs of $had_objs objects compiled), suite ${suite} s"
