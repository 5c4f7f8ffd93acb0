#!/usr/bin/env bash
# Runs README.md's command blocks that are marked as tested, exactly as README shows
# them, and checks what they print. A block is marked by the line
#   <!-- tested: NAME -->
# right before its ```sh fence; NAME selects the checks below. When README and the
# scripts drift apart, this fails. First it checks README's length (150 lines at most)
# and README's and docs/'s links.
#
# Usage: tests/host/readme-check.sh          (make readme-check; needs make images emulator)
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
no_arguments "$@"

README="${README:-$REPO_ROOT/README.md}"
OUT_DIR="$BUILD_DIR/readme-check"
rm -rf "$OUT_DIR"; mkdir -p "$OUT_DIR"

# README is the page people read first: it holds to a budget of README_MAX_LINES (150).
README_MAX_LINES="${README_MAX_LINES:-150}"
n="$(wc -l <"$README")"
[ "$n" -le "$README_MAX_LINES" ] || die "README.md has $n lines, over its budget of $README_MAX_LINES: move detail to docs/"
echo "ok - README.md: $n lines (budget $README_MAX_LINES)"

# README links only into the repository, and every link of it and of docs/ resolves
# (tests/ismcheck/check_links.py; make lint runs it too).
step "README's and the docs' links"
ismcheck check_links --strict "$README" "$REPO_ROOT"/docs/*.md \
    || die "a link of README.md or docs/ leaves the repository or points at nothing (above)"

# Each marked block into $OUT_DIR/NAME.sh; the names, in order, into $OUT_DIR/blocks.
awk -v dir="$OUT_DIR" '
    name != "" && inblock && /^```$/ { print name; name = ""; inblock = 0; next }
    name != "" && inblock { print > (dir "/" name ".sh"); next }
    name != "" && /^```sh$/ { inblock = 1; next }
    match($0, /^<!-- tested: [a-z0-9-]+ -->$/) { name = substr($0, 14, length($0) - 17); next }
    { name = "" }
' "$README" >"$OUT_DIR/blocks" || die "cannot read the tested blocks of README.md"
mapfile -t names <"$OUT_DIR/blocks"
[ ${#names[@]} -gt 0 ] || die "README.md marks no command block as tested"

pass=0 fail=0
expect() {   # expect NAME DESCRIPTION EXTENDED-REGEX: a line of NAME's output matches
    if grep -qE -- "$3" "$OUT_DIR/$1.out"; then
        echo "ok - $1: $2"; pass=$((pass + 1))
    else
        echo "not ok - $1: $2 (no line matches '$3')"; fail=$((fail + 1))
    fi
}
expect_no() {   # expect_no NAME DESCRIPTION EXTENDED-REGEX: no line of NAME's output matches
    if grep -qE -- "$3" "$OUT_DIR/$1.out"; then
        echo "not ok - $1: $2 (a line matches '$3')"; fail=$((fail + 1))
    else
        echo "ok - $1: $2"; pass=$((pass + 1))
    fi
}

for name in "${names[@]}"; do
    step "README block '$name', as written:"
    sed 's/^/    /' "$OUT_DIR/$name.sh" >&2
    rc=0
    # Run from the top of the checkout, as README's reader does; bounded in time, in a
    # session of its own so that whatever the block leaves running is ended after it.
    (cd "$REPO_ROOT" && exec setsid --wait bash -c 'echo $$ >"$1"; exec timeout --kill-after=10 900 bash -e "$2"' \
        block "$OUT_DIR/$name.pgid" "$OUT_DIR/$name.sh") >"$OUT_DIR/$name.out" 2>&1 || rc=$?
    kill -KILL -- "-$(cat "$OUT_DIR/$name.pgid")" 2>/dev/null || true
    if [ "$rc" -eq 0 ]; then echo "ok - $name: the block ran to its end"; pass=$((pass + 1))
    else echo "not ok - $name: the block failed (status $rc)"; fail=$((fail + 1)); fi
    case "$name" in
        using-it-yourself)
            expect "$name" "the guest booted the built kernel with the built initramfs" '^ISMTEST: BOOTED '
            expect "$name" "the ISM function was bound by the unmodified driver" '^ISMTEST: ISM .*0002:00:00\.0'
            expect "$name" "the guest's echo test passed over SMC-D" '^SUITE: PASS echo'
            expect "$name" "the guest's sequential connections passed over SMC-D" '^SUITE: PASS seq'
            expect "$name" "the guest's program passed" '^ISMTEST: RESULT PASS'
            expect "$name" "run-guest.sh's last line says the guest's program passed" \
                "^==> \[[0-9:]+Z\] guest: the guest's program passed \(ISMTEST: RESULT PASS\)"
            expect_no "$name" "quiet: the kernel's boot log stays off the console" '^Linux version '
            expect "$name" "the host saw DMBs reused, each zeroed before its reuse" \
                '^[0-9]+ DMBs, [0-9]+ connections, [0-9]+ closes, [1-9][0-9]* zeroed after close, [1-9][0-9]* reuses \([1-9][0-9]* clean, 0 stale'
            expect "$name" "the host's verdict is CLEAN" '^VERDICT: CLEAN'
            expect "$name" "observe summary shows the function with its moves" '^ism0 +0x[0-9a-f]+ +(yes|no) +[0-9]+ +[1-9][0-9]*'
            ;;
        *) echo "not ok - $name: readme-check.sh has no checks for this block"; fail=$((fail + 1)) ;;
    esac
    [ "$fail" -eq 0 ] || { echo "--- last lines of the block's output:"; tail -n 30 "$OUT_DIR/$name.out"; }
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
