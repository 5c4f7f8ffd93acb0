#!/usr/bin/env bash
# Coverage-guided fuzzing of the device (device/fuzz: cargo-fuzz and libFuzzer, on a
# nightly toolchain): runs every target for FUZZ_SECS seconds, one after the other, and
# prints one line per target. Exits nonzero when a target crashed; the crash's input is
# then named in the output (reproduce it with the command docs/fuzzing.md gives).
#
#   FUZZ_SECS     seconds per target (default 60)
#   FUZZ_TARGETS  which targets (default: all four)
#   FUZZ_SANITIZER address (default) or none: without AddressSanitizer the targets run
#                 2 to 6 times faster (docs/fuzzing.md says what that gives up)
#
# cargo-fuzz is installed from crates.io, at a pinned version, into $CACHE_DIR/tools, so
# nothing depends on what is installed by hand. Corpora live in $BUILD_DIR/fuzz/corpus,
# seeded from the committed device/fuzz/seeds.
#
# scripts/fuzz.sh --can-run: exit 0 if this machine can fuzz (a nightly toolchain in
# rustup), else say why and exit 1; runs nothing (.ci/run asks before it fuzzes).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# cargo-fuzz needs a nightly toolchain (libFuzzer's instrumentation is nightly-only),
# which rustup cannot fetch on every machine.
have_nightly() { rustup toolchain list 2>/dev/null | grep -q '^nightly'; }
NO_NIGHTLY="no nightly toolchain in rustup (rustup toolchain list): run 'rustup toolchain install nightly'"
if [ "${1:-}" = --can-run ]; then
    [ $# -eq 1 ] || usage_error "--can-run takes nothing after it"
    have_nightly && exit 0
    echo "fuzz: $NO_NIGHTLY" >&2
    exit 1
fi
no_arguments "$@"

CARGO_FUZZ_VERSION=0.13.2
FUZZ_SECS="${FUZZ_SECS:-60}"
FUZZ_TARGETS="${FUZZ_TARGETS:-command function cdc_observer vfio_user_wire}"
FUZZ_SANITIZER="${FUZZ_SANITIZER:-address}"
FUZZ_DIR="$REPO_ROOT/device/fuzz"
case "$FUZZ_SANITIZER" in address|none) ;; *) die "FUZZ_SANITIZER=$FUZZ_SANITIZER: address or none" ;; esac
OUT="$BUILD_DIR/fuzz"

have_nightly || die "$NO_NIGHTLY — cargo-fuzz needs it"

tools="$CACHE_DIR/tools/cargo-fuzz-$CARGO_FUZZ_VERSION"
if [ ! -x "$tools/bin/cargo-fuzz" ]; then
    step "installing cargo-fuzz $CARGO_FUZZ_VERSION from crates.io into $tools"
    logged "cargo install cargo-fuzz $CARGO_FUZZ_VERSION" \
        cargo install --locked cargo-fuzz --version "$CARGO_FUZZ_VERSION" --root "$tools" \
        || die "could not install cargo-fuzz $CARGO_FUZZ_VERSION"
fi
export PATH="$tools/bin:$PATH"

# last_stat LOG NAME: the value of libFuzzer's final `stat::NAME:` line.
last_stat() { sed -n "s/^stat::$2:[[:space:]]*//p" "$1" | tail -n 1; }
# last_field LOG KEY: the value after `KEY:` on libFuzzer's last status line.
last_field() { grep -E "^#[0-9]+" "$1" | tail -n 1 | sed -nE "s/.* $2: ([0-9]+).*/\\1/p"; }

mkdir -p "$OUT/logs"
lines=()
failed=()
for t in $FUZZ_TARGETS; do
    [ -d "$FUZZ_DIR/seeds/$t" ] || die "unknown fuzz target '$t' (no device/fuzz/seeds/$t)"
    corpus="$OUT/corpus/$t"
    artifacts="$OUT/artifacts/$t"
    log="$OUT/logs/$t.log"
    mkdir -p "$corpus" "$artifacts"
    cp -n "$FUZZ_DIR/seeds/$t/"* "$corpus/" 2>/dev/null || true
    step "building fuzz target $t (nightly, sanitizer: $FUZZ_SANITIZER)"
    (cd "$FUZZ_DIR" && logged "cargo fuzz build $t" cargo +nightly fuzz build -s "$FUZZ_SANITIZER" "$t") \
        || die "fuzz target $t does not build"
    # Per target (docs/fuzzing.md): cdc_observer starts an observer, with its writer
    # thread, per input, whose thread-local channel state LeakSanitizer reports as a
    # leak; the vfio_user crate allocates a message's declared size (up to 4 GiB) before
    # reading it, which libFuzzer's malloc limit would report on every run.
    extra=()
    case "$t" in
        cdc_observer) extra=(-detect_leaks=0) ;;
        vfio_user_wire) extra=(-malloc_limit_mb=8192) ;;
    esac
    step "fuzzing $t for ${FUZZ_SECS}s (log: $log)"
    rc=0
    (cd "$FUZZ_DIR" && nice -n 10 cargo +nightly fuzz run -s "$FUZZ_SANITIZER" "$t" "$corpus" -- \
        -max_total_time="$FUZZ_SECS" -print_final_stats=1 -timeout=60 \
        -artifact_prefix="$artifacts/" "${extra[@]}") >"$log" 2>&1 || rc=$?
    crash="$(sed -nE 's/.*Test unit written to ([^ ]+).*/\1/p' "$log" | tail -n 1)"
    crashes=0
    if [ "$rc" -ne 0 ] || [ -n "$crash" ]; then
        crashes=1
        failed+=("$t: ${crash:-exit status $rc, see $log}")
        grep -E "panicked at|^==[0-9]+==ERROR|SUMMARY" "$log" | head -n 5 | sed 's/^/  | /' >&2 || true
    fi
    lines+=("$(printf '%-16s %12s %8s %8s %8s %8s %8s' "$t" \
        "$(last_stat "$log" number_of_executed_units)" "$(last_stat "$log" average_exec_per_sec)" \
        "$(last_field "$log" cov)" \
        "$(last_field "$log" ft)" "$(find "$corpus" -type f | wc -l)" "$crashes")")
done

printf '%-16s %12s %8s %8s %8s %8s %8s\n' target executions exec/s cov ft corpus crashes
printf '%s\n' "${lines[@]}"
if [ ${#failed[@]} -gt 0 ]; then
    printf 'crashed: %s\n' "${failed[@]}" >&2
    exit 1
fi
