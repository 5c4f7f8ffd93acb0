#!/usr/bin/env bash
# make upstream: every kernel fix of docs/known-bugs.md as it would be mailed, checked.
#
# For each fix in FIXES (guest-tests/kernel/patches/<fix>/, described by its
# upstream.conf) it writes build/upstream/<fix>/:
#   - the patch(es) in `git format-patch` form against the newest kernel source the
#     project builds (UPSTREAM_BASE, default 7.3: Debian's linux-source-7.3), with the
#     subject prefix the conf names and a cover letter where there is more than one;
#   - README.txt: the standing, the lines it applies to, the reproducer as a maintainer
#     would run it with this project, the measured BUG -> FIXED counts, the tags left
#     for whoever sends it.
# and checks each one:
#   - it applies (patch -p1 -F0, offsets allowed, no fuzz) to every line of TEST_LINES that
#     has the code (the conf's LINES; the others are shown as "-");
#   - checkpatch.pl --strict of the base line's own tree reports 0 errors, 0 warnings and 0
#     checks, but for UNKNOWN_COMMIT_ID: checkpatch looks commit ids up in a git history,
#     which no Debian source package carries; fixes-checked.txt (next) stands in for it;
#   - every `Fixes:` tag has 12 characters and names a commit and subject that
#     guest-tests/kernel/patches/fixes-checked.txt lists, with the source it was checked
#     against;
#   - a copy of the patch under another variant (debug-<fix>) is the same file.
# BUG -> FIXED: read from the last runs of the fix's scenario (build/<script>/verdicts.txt,
# or for lateabort-fix make faults' late-write check files), per line; "not run" where
# this build has none (the recorded counts, from the fix's README, are in README.txt).
# Prints one table; exits 1 if a fix does not apply where it should, checkpatch is not
# clean, a Fixes: tag is unchecked, or a run's verdict was not the one expected.
#
# Usage: scripts/upstream.sh [FIX...]      (default: every fix of FIXES)
# Environment: UPSTREAM_DIR (default build/upstream), UPSTREAM_BASE (7.3), TEST_LINES.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

help_and_no_options "$@"
PATCHES_DIR="$REPO_ROOT/guest-tests/kernel/patches"
FIXES_CHECKED="$PATCHES_DIR/fixes-checked.txt"
# Fixes first, in the order docs/known-bugs.md gives their standing.
FIXES=(smcdterm-fix vlanlock-fix ieqnull-fix readgid-fix clientarr-fix hslimit-fix splicewait-fix hsleak-fix rxabort-fix lateabort-fix closeuaf-fix latedata-rfc)
UPSTREAM_DIR="${UPSTREAM_DIR:-$BUILD_DIR/upstream}"
UPSTREAM_BASE="${UPSTREAM_BASE:-7.3}"
wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=("${FIXES[@]}")
for f in "${wanted[@]}"; do
    [ -f "$PATCHES_DIR/$f/upstream.conf" ] || usage_error "'$f' is not a fix with an upstream.conf (known: ${FIXES[*]})"
done
need_packages upstream
mkdir -p "$UPSTREAM_DIR/src"

# line_source LINE: the line's pristine source, the parts the fixes touch and checkpatch
# needs, in UPSTREAM_DIR/src/LINE (kept; keyed by the package file's name). Taken from the
# Debian package the kernel build downloaded (fetched first if it has not).
line_deb() { find "$CACHE_DIR/kernel/work" -maxdepth 2 -name "linux-source-${1}_*_all.deb" 2>/dev/null | head -n 1; }
line_source() {
    local line="$1" deb dir tarball tmp
    deb="$(line_deb "$line")"
    if [ -z "$deb" ]; then
        KERNEL="$line" VARIANT=stock KERNEL_UNPACK_ONLY=1 "$REPO_ROOT/guest-tests/build-kernel.sh" >&2
        deb="$(line_deb "$line")"
        [ -n "$deb" ] || die "no linux-source-$line package after fetching it"
    fi
    dir="$UPSTREAM_DIR/src/$line"
    if [ "$(cat "$dir.from" 2>/dev/null)" != "$(basename "$deb")" ]; then
        step "upstream: unpacking $(basename "$deb") (net/smc, the ism driver, include, scripts)"
        rm -rf "$dir" "$dir.from"
        tmp="$(mktemp -d "$UPSTREAM_DIR/src/unpack.XXXXXX")"
        dpkg-deb -x "$deb" "$tmp"
        tarball="$(find "$tmp/usr/src" -maxdepth 1 -name "linux-source-$line.tar.*" | head -n 1)"
        mkdir -p "$dir"
        tar -C "$dir" --strip-components=1 -xaf "$tarball" --wildcards \
            "linux-source-$line/net/smc/*" "linux-source-$line/drivers/s390/net/*" \
            "linux-source-$line/drivers/dibs/*" "linux-source-$line/include/*" \
            "linux-source-$line/scripts/*" "linux-source-$line/[A-Z]*" 2>/dev/null || true
        rm -rf "$tmp"
        [ -d "$dir/net/smc" ] && [ -f "$dir/scripts/checkpatch.pl" ] || die "unpacking $(basename "$deb") gave no net/smc or checkpatch.pl"
        # checkpatch's test for a kernel tree's top (top_of_kernel_tree) wants these too.
        mkdir -p "$dir"/{Documentation,arch,fs,init,ipc,kernel,lib,drivers}
        basename "$deb" >"$dir.from"
    fi
    echo "$dir"
}

# conf FIX: loads the fix's upstream.conf (STANDING, PREFIX, LINES, SCENARIO, EVIDENCE,
# RECORDED, NOTES; BACKPORTS: LINE:VARIANT (or LINE:VARIANT/LINE, the variant's folder for
# that line) of a line whose code needs the fix in another
# form, that variant's own patches; BASE_LINE: the line a stable-only fix is written
# against, for code mainline no longer has).
conf() {
    STANDING="" PREFIX="PATCH net" LINES="" SCENARIO="" EVIDENCE="" RECORDED="" NOTES="" BACKPORTS="" BASE_LINE=""
    # shellcheck disable=SC1090
    source "$PATCHES_DIR/$1/upstream.conf"
    [ -n "$STANDING" ] && [ -n "$LINES" ] && [ -n "$EVIDENCE" ] || die "$1/upstream.conf: STANDING, LINES and EVIDENCE are required"
}

fix_patches() { find "$PATCHES_DIR/$1" -maxdepth 1 -name '*.patch' | LC_ALL=C sort; }

# backport LINE: the variant of the fix's backport to LINE (BACKPORTS), or nothing.
backport() {
    local b
    for b in $BACKPORTS; do [ "${b%%:*}" != "$1" ] || { echo "${b#*:}"; return; }; done
}

# backport_lines: the lines of BACKPORTS.
backport_lines() { local b; for b in $BACKPORTS; do echo "${b%%:*}"; done; }

# fix_variant LINE: the variant that carries the fix on LINE: its backport there, or FIX.
# (A backport may be a line's folder inside the fix's own variant: readgid-fix/6.12.)
fix_variant() { local v; v="$(backport "$1")"; v="${v%%/*}"; echo "${v:-$FIX}"; }

# touched PATCH...: the files the patches change.
touched() { sed -n 's|^+++ b/||p' "$@" | LC_ALL=C sort -u; }

# copy_touched SRC DEST PATCH...: the files the patches change, as SRC has them, into DEST
# (the same paths; a file SRC lacks is left out, and the patch then fails on it).
copy_touched() {
    local src="$1" dest="$2" f
    shift 2
    while read -r f; do
        [ -f "$src/$f" ] || continue
        mkdir -p "$dest/$(dirname "$f")"
        cp "$src/$f" "$dest/$f"
    done < <(touched "$@")
}

# applies LINE_DIR PATCH...: 0 if the patches apply in order with patch -p1 -F0 to a copy
# of the files they touch.
applies() {
    local src="$1" tmp f rc=0
    shift
    tmp="$(mktemp -d "$UPSTREAM_DIR/src/apply.XXXXXX")"
    copy_touched "$src" "$tmp" "$@"
    for f in "$@"; do
        patch -d "$tmp" -p1 -F0 -s --no-backup-if-mismatch <"$f" >/dev/null 2>&1 || { rc=1; break; }
    done
    rm -rf "$tmp"
    return "$rc"
}

# format_against FIX OUT BASE_DIR: the fix's patches applied with git am to the base
# line's files and written again by git format-patch into OUT (index lines of that tree,
# the conf's subject prefix, a cover letter from cover.txt where there are several).
format_against() {
    local fix="$1" out="$2" base="$3" repo n patches=()
    mapfile -t patches < <(fix_patches "$fix")
    repo="$UPSTREAM_DIR/src/git-$fix"
    rm -rf "$repo" && mkdir -p "$repo"
    copy_touched "$base" "$repo" "${patches[@]}"
    local id=(-c user.name="Your Name" -c user.email="your.name@example.com" -c commit.gpgsign=false)
    git -C "$repo" init -q
    git -C "$repo" add -A
    GIT_AUTHOR_DATE="2000-01-01T00:00:00Z" GIT_COMMITTER_DATE="2000-01-01T00:00:00Z" \
        git "${id[@]}" -C "$repo" commit -q -m "$(cat "$base.from")"
    git "${id[@]}" -C "$repo" am -q --committer-date-is-author-date "${patches[@]}" >"$out/git-am.log" 2>&1 || return 1
    n=${#patches[@]}
    local cover=()
    [ "$n" -gt 1 ] && cover=(--cover-letter)
    git "${id[@]}" -C "$repo" format-patch -q --subject-prefix="$PREFIX" "${cover[@]}" -o "$out" "HEAD~$n" >/dev/null
    if [ "$n" -gt 1 ] && [ -f "$PATCHES_DIR/$fix/cover.txt" ]; then
        python3 - "$out"/0000-cover-letter.patch "$PATCHES_DIR/$fix/cover.txt" <<'PY'
import sys
letter, cover = sys.argv[1], open(sys.argv[2]).read().split("\n", 1)
text = open(letter).read()
text = text.replace("*** SUBJECT HERE ***", cover[0]).replace("*** BLURB HERE ***", cover[1].strip())
open(letter, "w").write(text)
PY
    fi
    rm -rf "$repo"
}

# checkpatch_counts OUT BASE_DIR: "E/W/C" summed over OUT's patches (not the cover letter).
checkpatch_counts() {
    local out="$1" base="$2" p e=0 w=0 c=0 line
    : >"$out/checkpatch.txt"
    for p in "$out"/[0-9][0-9][0-9][0-9]-*.patch; do
        [[ "$p" == */0000-cover-letter.patch ]] && continue
        # From a folder without .git: checkpatch then does not try a history it cannot have.
        line="$(cd "$UPSTREAM_DIR" && perl "$base/scripts/checkpatch.pl" --strict --root="$base" \
            --ignore UNKNOWN_COMMIT_ID --no-color "$p" 2>&1 | tee -a "$out/checkpatch.txt" | grep -E '^total: ')" || true
        [[ "$line" =~ total:\ ([0-9]+)\ errors,\ ([0-9]+)\ warnings,\ ([0-9]+)\ checks ]] || { echo "?"; return; }
        e=$((e + BASH_REMATCH[1])) w=$((w + BASH_REMATCH[2])) c=$((c + BASH_REMATCH[3]))
    done
    echo "$e/$w/$c"
}

# fixes_checked OUT: "ok" if every Fixes: tag of OUT's patches is 12 characters and listed
# with its exact subject in fixes-checked.txt; else what is wrong. Writes OUT/fixes.txt.
fixes_checked() {
    local out="$1" tag hash subject row bad="" n=0
    : >"$out/fixes.txt"
    while read -r tag; do
        n=$((n + 1))
        if [[ "$tag" =~ ^Fixes:\ ([0-9a-f]{12})\ \(\"(.*)\"\)$ ]]; then
            hash="${BASH_REMATCH[1]}" subject="${BASH_REMATCH[2]}"
            row="$(awk -F'\t' -v h="$hash" -v s="$subject" '$1 == h && $3 == s' "$FIXES_CHECKED")"
            if [ -n "$row" ]; then
                printf '%s\n  checked: %s\n' "$tag" "$(cut -f4 <<<"$row")" >>"$out/fixes.txt"
            else
                bad="$bad $hash (not in fixes-checked.txt with that subject)"
            fi
        else
            bad="$bad '${tag:0:40}' (not 12 characters and the subject)"
        fi
    done < <(cat "$out"/[0-9][0-9][0-9][0-9]-*.patch | grep -E '^Fixes:')
    [ "$n" -gt 0 ] || bad=" no Fixes: tag"
    if [ -n "$bad" ]; then echo "NO:$bad"; else echo "ok ($n)"; fi
}

# evidence: per line of the last runs of the fix's scenario (EVIDENCE), "LINE BUG b/n ->
# FIXED f/m", with "(unexpected)" where a run's verdict was not the one its kernel should
# give.
evidence() {
    local kind script rest line v k out=() runs bug fixed nb nf
    read -r kind script rest <<<"$EVIDENCE"
    for line in $TEST_LINES; do
        # The lines the fix is for (its LINES and BACKPORTS): a run elsewhere judges
        # nothing of it.
        [[ " $LINES $(backport_lines | xargs) " == *" $line "* ]] || continue
        nb=0 bug=0 nf=0 fixed=0
        case "$kind" in
            verdicts)
                [ -f "$BUILD_DIR/$script/verdicts.txt" ] || continue
                while read -r _ k v; do
                    [ "${k%%:*}" = "$line" ] || continue
                    # The kernels without the fix (stock, debug, a test-only window on
                    # debug, or its form for an older line: debug-closeuaf-window-61)
                    # against the fix's own variants (debug-closeuaf-window-fix too);
                    # another test-only variant (rxabort-kill) is neither.
                    case "${k#*:}" in
                        *-fix | *-rfc | *-fix-[0-9]* | *-rfc-[0-9]*) nf=$((nf + 1)); [ "${v%% *}" = FIXED ] && fixed=$((fixed + 1)) ;;
                        stock | debug | *-window | *-window-[0-9]*) nb=$((nb + 1)); [ "${v%% *}" = BUG ] && bug=$((bug + 1)) ;;
                    esac
                done < <(sed -E 's/^([^ ]+) ([^ ]+) run [0-9]+\/[0-9]+: /\1 \2 /' "$BUILD_DIR/$script/verdicts.txt")
                ;;
            faults)
                # make faults' scenario SCRIPT on LINE stock (check $rest's first word must
                # pass: the bug shown) and on LINE-<fix> (its second word: fixed).
                local c_bug c_fix
                read -r c_bug c_fix <<<"$rest"
                runs="$BUILD_DIR/faults/$script-$line/checks.jsonl"
                [ -f "$runs" ] && { nb=1; grep -q "\"name\": *\"$c_bug\", *\"ok\": *true" "$runs" && bug=1; }
                runs="$BUILD_DIR/faults/$script-$line-$(fix_variant "$line")/checks.jsonl"
                [ -f "$runs" ] && { nf=1; grep -q "\"name\": *\"$c_fix\", *\"ok\": *true" "$runs" && fixed=1; }
                ;;
        esac
        [ $((nb + nf)) -gt 0 ] || continue
        v=""
        [ "$bug" = "$nb" ] && [ "$fixed" = "$nf" ] || v=" (unexpected)"
        local sb="$bug/$nb" sf="$fixed/$nf"
        [ "$nb" -gt 0 ] || sb="not run"
        [ "$nf" -gt 0 ] || sf="not run"
        out+=("$line BUG $sb -> FIXED $sf$v")
    done
    if [ ${#out[@]} -gt 0 ]; then (IFS=';'; echo "${out[*]}" | sed 's/;/; /g'); else echo "not run"; fi
}

# ---- the base line (format-patch, checkpatch) and every test line's source --------------
declare -A SRC
for line in $TEST_LINES $UPSTREAM_BASE; do
    [ -n "${SRC[$line]:-}" ] || SRC[$line]="$(line_source "$line")"
done

failed=0
rows=()
for FIX in "${wanted[@]}"; do
    conf "$FIX"
    # The line it is written against: UPSTREAM_BASE, or its BASE_LINE (a stable-only fix,
    # for code mainline no longer has).
    base_line="${BASE_LINE:-$UPSTREAM_BASE}"
    [ -n "${SRC[$base_line]:-}" ] || SRC[$base_line]="$(line_source "$base_line")"
    BASE="${SRC[$base_line]}"
    BASE_NAME="$(sed -E 's/^linux-source-[^_]+_([^_]+)_all\.deb$/\1/' "$BASE.from")"
    mapfile -t patches < <(fix_patches "$FIX")
    out="$UPSTREAM_DIR/$FIX"
    rm -rf "$out" && mkdir -p "$out"
    status=ok
    # applies, per test line
    app=()
    for line in $TEST_LINES; do
        if [[ " $LINES " == *" $line "* ]]; then
            if applies "${SRC[$line]}" "${patches[@]}"; then app+=("$line:yes"); else app+=("$line:NO"); status=failed; fi
        elif bp="$(backport "$line")" && [ -n "$bp" ]; then
            mapfile -t bpp < <(fix_patches "$bp")
            if applies "${SRC[$line]}" "${bpp[@]}"; then app+=("$line:backport"); else app+=("$line:NO"); status=failed; fi
        else
            app+=("$line:-")
        fi
    done
    # Every variant that carries a copy of one of the fix's patches (its debug twin, a
    # test's window with the fix) carries it unchanged.
    for p in "${patches[@]}"; do
        for copy in "$PATCHES_DIR"/*/"$(basename "$p")"; do
            [ -f "$copy" ] && [ "$copy" != "$p" ] || continue
            cmp -s "$copy" "$p" || { warn "$FIX: $copy differs from the fix's own patch"; status=failed; }
        done
    done
    if format_against "$FIX" "$out" "$BASE"; then
        cp=$(checkpatch_counts "$out" "$BASE")
        [ "$cp" = 0/0/0 ] || status=failed
        fx="$(fixes_checked "$out")"
        [[ "$fx" == ok* ]] || status=failed
    else
        cp="no (git am: $out/git-am.log)" fx="-" status=failed
    fi
    # Built: the lines whose kernel with this fix this build has (make kernel KERNEL=X
    # VARIANT=<fix>, or its debug twin), which the BUG -> FIXED runs boot.
    built=()
    for line in $LINES $(backport_lines); do
        for v in "$(fix_variant "$line")" "debug-$FIX"; do
            # (or its GCOV=1 build: the one bug/025-026 boot, for its fault injection)
            if [ -f "$(kernel_dir "$line" "$v")/bzImage" ] || [ -f "$(GCOV=1 kernel_dir "$line" "$v")/bzImage" ]; then
                built+=("$line"); break
            fi
        done
    done
    ev="$(evidence)"
    [[ "$ev" != *"(unexpected)"* ]] || status=failed
    [ "$status" = ok ] || failed=1
    {
        echo "$FIX: $(grep -m1 -h '^Subject:' "$out"/0001-*.patch 2>/dev/null | sed 's/^Subject: //')"
        echo
        echo "Standing: $STANDING"
        echo "Written against: Debian linux-source-$base_line $BASE_NAME (git format-patch; index lines of that tree)"
        echo "Applies (patch -p1 -F0): ${app[*]}   (-: the line has no such code; backport: its own form, ${BACKPORTS:-none})"
        echo "checkpatch --strict: $cp errors/warnings/checks (UNKNOWN_COMMIT_ID left to fixes.txt: no kernel history here)"
        echo "Fixes: $fx (fixes.txt)"
        echo "Built with the fix here: ${built[*]:-none}   (of the lines with the code: $LINES)"
        echo
        echo "Reproducer, with this project (README.md's set-up, then):"
        echo "  $SCENARIO"
        echo
        echo "BUG -> FIXED, this build's last runs: $ev"
        echo "Recorded (the fix's README): $RECORDED"
        [ -z "$NOTES" ] || { echo; echo "$NOTES"; }
        echo
        echo "Tags for whoever sends it: the From:/Signed-off-by: lines are placeholders"
        echo "(Your Name <your.name@example.com>); add Reported-by: (with its Closes: link,"
        echo "as checkpatch asks) and Tested-by: as they apply."
        echo "More: guest-tests/kernel/patches/$FIX/README.md, docs/known-bugs.md"
    } >"$out/README.txt"
    rows+=("$FIX|${STANDING%%[:,]*}|${app[*]}|$cp|$fx|$ev|$status")
    [ "$status" = ok ] || warn "$FIX: $status (see $out/README.txt)"
done

echo
echo "make upstream: against Debian linux-source-$UPSTREAM_BASE $(sed -E 's/^linux-source-[^_]+_([^_]+)_all\.deb$/\1/' "${SRC[$UPSTREAM_BASE]}.from") (a stable-only fix: its BASE_LINE); one folder per fix in $UPSTREAM_DIR"
{
    echo "fix|standing|applies|checkpatch|Fixes|BUG -> FIXED (last runs)|result"
    printf '%s\n' "${rows[@]}"
} | column -t -s '|'
exit "$failed"
