#!/usr/bin/env bash
# Build the project's QEMU: Debian's qemu source package plus the patch series in
# qemu-configs/patches/ (applied in the order patches/series names them: the PCISTB
# byte-order fix, the vfio-user report-once fix, then the ISM series: zpci ism=/pchid=
# properties, ISM PCISTB forwarding to vfio-user), as a minimal s390x-softmmu build.
#
# Usage: qemu-configs/build-qemu.sh          (or: make qemu)
#        QEMU_SANITIZE=1 qemu-configs/build-qemu.sh   (or: make qemu-asan)
#        QEMU_SERIES_CHECK=1 qemu-configs/build-qemu.sh   (or: make qemu-series-check)
#
# Result: $BUILD_DIR/qemu -> $CACHE_DIR/qemu/<version>-<hash>/, so the emulator is
#         $BUILD_DIR/qemu/bin/qemu-system-s390x
#         With QEMU_SANITIZE=1, the same QEMU built a second time with AddressSanitizer
#         and UndefinedBehaviorSanitizer: $BUILD_DIR/qemu-asan -> its own cache entry
#         (the options are part of the key). Run the smoke test against it with
#         QEMU=$BUILD_DIR/qemu-asan/bin/qemu-system-s390x qemu-configs/tests/pcistb-smoke.sh
#         With QEMU_SERIES_CHECK=1, nothing is installed: the series is applied one patch
#         at a time to Debian's source, each patch checked with the source's own
#         scripts/checkpatch.pl --strict and followed by a build of qemu-system-s390x with
#         -Werror (incremental, in one tree): one line per patch, and a nonzero exit if a
#         patch does not build alone or checkpatch reports an error.
#
# The install is cached under a name made from the Debian version and a hash of the
# version, the patches, the configure options and the meson version (RECIPE): a warm run only verifies the cached binary and
# re-links it. Build a fresh copy by removing that folder.
#
# Environment: CACHE_DIR, BUILD_DIR, DEBIAN_MIRROR, SHARED_MIRROR (see scripts/lib.sh);
#              JOBS (default 2); QEMU_SANITIZE (1: the sanitizer build).
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
no_arguments "$@"

# The one place that names the QEMU version. It must be a Debian source package that
# still has the vfio-user client (QEMU >= 10.1) and that the patches apply to.
QEMU_DEB_VERSION="1:10.2.2+ds-1"
# Meson from PyPI (bookworm's 1.0 is too old for QEMU 10.2, which wants >= 1.5);
# 1.9.0 is the version QEMU 10.2 itself vendors.
MESON_VERSION="1.9.0"
JOBS="${JOBS:-2}"
# QEMU's configure options (besides --prefix, --python and --with-pkgversion, which
# follow from the cache key): a minimal s390x TCG build with what the guests use.
CONFIGURE_OPTS=(
    --target-list=s390x-softmmu
    --cross-prefix-s390x=s390x-linux-gnu-
    --without-default-features
    --disable-download
    --enable-tcg
    --enable-slirp
    --enable-fdt=system
    # virtio-9p-ccw: virtme-ng (vng) exports its guest root and tools over 9p
    # (docs/ci.md, "virtme-ng"); attr links glibc's xattr functions, no new package.
    --enable-virtfs
    --enable-attr
    # log: -trace to stderr, as stock; simple: the binary trace scripts/hops.sh reads
    # (a record costs ~100 ns, where a log line with its time costs microseconds).
    --enable-trace-backends=log,simple
    --disable-docs
    --disable-install-blobs
    --disable-werror
    --extra-cflags=-g0
)
# The sanitizer build: QEMU's own meson options asan and ubsan, which compile and link
# QEMU with -fsanitize=address and -fsanitize=undefined (what meson's
# b_sanitize=address,undefined would add) and know QEMU's exceptions (TCG's generated
# code is called through a plain pointer). The firmware is not built with them. At -O1,
# what AddressSanitizer's documentation asks for at least: the instrumented build is the
# longest compile of a cold CI run, and -O2 makes it longer still.
QEMU_SANITIZE="${QEMU_SANITIZE:-0}"
LINK_NAME=qemu
case "$QEMU_SANITIZE" in
    0) ;;
    1) CONFIGURE_OPTS+=(--enable-asan --enable-ubsan -Doptimization=1); LINK_NAME=qemu-asan
       # QEMU frees little at exit: LeakSanitizer's report would fail verify_install's
       # runs (the smoke test sets its own options)
       export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}" ;;
    *) die "QEMU_SANITIZE=$QEMU_SANITIZE: 0 or 1" ;;
esac
# Bump when the way this script builds or installs changes (the key covers the version,
# the patches, the configure options and meson, not this script's messages).
RECIPE=3

HERE="$REPO_ROOT/qemu-configs"
PATCH_DIR="$HERE/patches"
# The patches, in the order they are applied: the series that $PATCH_DIR/series names,
# one folder each, in the order it names them; within a series its NNNN-*.patch files
# in name order. A cover letter (0000-cover-letter.patch) is for the mailing list:
# neither applied nor part of the cache key. The key hashes every applied patch, in
# this order, so a change to any of them, or to the order, is a new build.
PATCHES=()
mapfile -t SERIES < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$PATCH_DIR/series" 2>/dev/null)
[ ${#SERIES[@]} -gt 0 ] || die "no series named in $PATCH_DIR/series"
for s in "${SERIES[@]}"; do
    mapfile -t sp < <(find "$PATCH_DIR/$s" -maxdepth 1 -name '[0-9][0-9][0-9][0-9]-*.patch' \
        ! -name '0000-cover-letter.patch' 2>/dev/null | LC_ALL=C sort)
    [ ${#sp[@]} -gt 0 ] || die "series $s (named in $PATCH_DIR/series) has no patches in $PATCH_DIR/$s"
    PATCHES+=("${sp[@]}")
done
# A patch outside the series named would be left out without a word: refuse it.
loose="$(find "$PATCH_DIR" -maxdepth 1 -name '*.patch' | head -n 1)"
[ -z "$loose" ] || die "$loose: a patch belongs in the folder of a series named in $PATCH_DIR/series"
while IFS= read -r f; do
    case " ${SERIES[*]} " in *" $(basename "$(dirname "$f")") "*) ;;
        *) die "$f belongs to no series named in $PATCH_DIR/series" ;; esac
done < <(find "$PATCH_DIR" -mindepth 2 -maxdepth 2 -name '*.patch' ! -name '0000-cover-letter.patch')

ver_noepoch="${QEMU_DEB_VERSION#*:}"            # 10.2.2+ds-1
upstream_ver="${ver_noepoch%-*}"                 # 10.2.2+ds
dsc="qemu_${ver_noepoch}.dsc"
key="$(printf '%s' "$QEMU_DEB_VERSION" | tr -c 'A-Za-z0-9.\n-' '_')-$(input_hash "$QEMU_DEB_VERSION" "${PATCHES[@]}" \
    "${CONFIGURE_OPTS[*]}" "meson $MESON_VERSION" "recipe $RECIPE")"
OUT="$CACHE_DIR/qemu/$key"
QEMU_BIN="$OUT/bin/qemu-system-s390x"

# verify_install DIR: the binary runs, is the version we built, and has our zpci
# properties and the devices the project relies on.
verify_install() {
    local bin="$1/bin/qemu-system-s390x" out
    [ -x "$bin" ] || return 1
    [ "$(cat "$1/.ism-emu-key" 2>/dev/null)" = "$key" ] || return 1
    # (outputs are captured first: grep -q on a pipe could SIGPIPE QEMU under pipefail)
    out="$("$bin" --version 2>&1)" || return 1
    grep -q "Debian $ver_noepoch" <<<"$out" || { warn "$bin: unexpected --version"; return 1; }
    out="$("$bin" -M none -device zpci,help 2>&1)" || return 1
    grep -q '^ *ism=' <<<"$out" && grep -q '^ *pchid=' <<<"$out" \
        || { warn "$bin: zpci has no ism/pchid properties"; return 1; }
    out="$("$bin" -M none -device help 2>&1)" || return 1
    grep -q '"vfio-user-pci"' <<<"$out" && grep -q '"virtio-net-pci"' <<<"$out" \
        || { warn "$bin: vfio-user-pci or virtio-net-pci missing"; return 1; }
    out="$("$bin" -M none -object help 2>&1)" || return 1
    grep -q 'memory-backend-memfd' <<<"$out" || { warn "$bin: memory-backend-memfd missing"; return 1; }
    out="$("$bin" -M none -netdev help 2>&1)" || return 1
    grep -q '^stream$' <<<"$out" || { warn "$bin: -netdev stream missing"; return 1; }
    # s390-ccw-virtio always loads its IPL firmware, even with -kernel
    [ -s "$1/share/qemu/s390-ccw.img" ] || { warn "$1: s390-ccw.img missing"; return 1; }
    [ -x "$1/libexec/ism-emu/s390x-zpci-ism-test" ] || { warn "$1: the series' qtest is missing"; return 1; }
    [ -f "$1/libexec/ism-emu/functional/s390x/test_ism_vfio_user.py" ] \
        && [ -f "$1/libexec/ism-emu/functional/qemu_test/__init__.py" ] \
        && [ -d "$1/libexec/ism-emu/functional/python/qemu/machine" ] \
        || { warn "$1: the series' functional test is missing"; return 1; }
}

publish() {
    mkdir -p "$BUILD_DIR"
    ln -sfn "$OUT" "$BUILD_DIR/.$LINK_NAME.new"
    mv -T "$BUILD_DIR/.$LINK_NAME.new" "$BUILD_DIR/$LINK_NAME"
    step "QEMU ready: $BUILD_DIR/$LINK_NAME/bin/qemu-system-s390x -> $QEMU_BIN"
}

QEMU_SERIES_CHECK="${QEMU_SERIES_CHECK:-0}"
# A cached build that verifies is used without the lock: a build of another key (the
# sanitizer QEMU, half an hour under nice in a cold CI run) must not hold up a run that
# needs only this one. A half-installed entry fails verify_install and waits below.
if [ "$QEMU_SERIES_CHECK" != 1 ] && [ -d "$OUT" ] && verify_install "$OUT" 2>/dev/null; then
    step "cached QEMU $QEMU_DEB_VERSION ($key) verified"
    publish
    exit 0
fi

# One build at a time per cache (other checkouts may run this concurrently); a second
# run waits here and then finds the first one's result.
mkdir -p "$CACHE_DIR/qemu"
exec 9>"$CACHE_DIR/qemu/.lock"
if ! flock -n 9; then
    step "another QEMU build holds $CACHE_DIR/qemu/.lock; waiting (up to 30 min)"
    flock -w 1800 9 || die "timed out waiting for $CACHE_DIR/qemu/.lock"
fi

if [ "$QEMU_SERIES_CHECK" != 1 ] && [ -d "$OUT" ]; then
    step "checking cached QEMU $QEMU_DEB_VERSION ($key)"
    if verify_install "$OUT"; then
        publish
        exit 0
    fi
    warn "cached QEMU in $OUT failed verification: rebuilding"
    rm -rf "$OUT"
fi

step "building QEMU $QEMU_DEB_VERSION with ${#PATCHES[@]} patches (cache key $key)"
need_packages qemu

# --- meson from PyPI, in a venv inside the cache (the host's apt sources stay as they are)
VENV="$CACHE_DIR/qemu/tools/meson-$MESON_VERSION"
if [ ! -f "$VENV/.ok" ] || ! "$VENV/bin/meson" --version 2>/dev/null | grep -qx "$MESON_VERSION"; then
    step "installing meson $MESON_VERSION from PyPI into $VENV"
    rm -rf "$VENV"
    logged "python3 -m venv" /usr/bin/python3 -m venv "$VENV" || die "python3 -m venv failed"
    logged "pip install meson==$MESON_VERSION" timeout 600 "$VENV/bin/pip" install --disable-pip-version-check \
        "meson==$MESON_VERSION" || die "could not install meson $MESON_VERSION from PyPI"
    touch "$VENV/.ok"
fi
MESON_PY="$VENV/bin/python3"

# --- source package: Debian's archive first, then the checksummed shared mirror
SRC_DL="$CACHE_DIR/qemu/source/$ver_noepoch"
fetch_source() {
    local tmp="$SRC_DL.tmp"
    rm -rf "$tmp"; mkdir -p "$tmp"
    step "downloading source package qemu=$QEMU_DEB_VERSION from Debian's archive (sid, as the host's apt names the archive)"
    if (cd "$tmp" && logged "downloading qemu=$QEMU_DEB_VERSION sources" \
            papt sid amd64 source -q --download-only "qemu=$QEMU_DEB_VERSION") \
        && [ -f "$tmp/$dsc" ]; then
        : # apt checked every file against the signed Sources index
    elif [ -f "$SHARED_MIRROR/$dsc" ] && [ -f "$SHARED_MIRROR/SHA256SUMS" ]; then
        warn "Debian's archive did not serve qemu $QEMU_DEB_VERSION; using $SHARED_MIRROR"
        rm -rf "$tmp"; mkdir -p "$tmp"
        local sums
        # the .dsc, the Debian tarball and the upstream tarball(s) of this version
        sums="$(awk -v a="qemu_${ver_noepoch}." -v b="qemu_${upstream_ver}.orig" \
                    'index($2, a) == 1 || index($2, b) == 1' "$SHARED_MIRROR/SHA256SUMS")"
        grep -q " $dsc\$" <<<"$sums" || die "$dsc is not listed in $SHARED_MIRROR/SHA256SUMS"
        (cd "$SHARED_MIRROR" && sha256sum -c --quiet --strict - <<<"$sums") >&2 \
            || die "checksum mismatch for qemu $QEMU_DEB_VERSION in $SHARED_MIRROR (see SHA256SUMS)"
        awk '{print $2}' <<<"$sums" | (cd "$SHARED_MIRROR" && xargs cp -t "$tmp/")
    else
        die "qemu source package $QEMU_DEB_VERSION is available neither from Debian's archive (sid, as configured in apt, or DEBIAN_MIRROR) nor from $SHARED_MIRROR. Put its .dsc, .orig.tar.xz and .debian.tar.xz with a SHA256SUMS file into \$SHARED_MIRROR, or change QEMU_DEB_VERSION in $HERE/build-qemu.sh to a version the archive serves (>= 10.1, and refresh the patches)."
    fi
    mv -T "$tmp" "$SRC_DL"
}
[ -f "$SRC_DL/$dsc" ] || fetch_source

# unpack_source DIR: Debian's source in DIR/src, Debian's patches applied by dpkg-source,
# which checks every file against the .dsc.
unpack_source() {
    dpkg-source --no-copy -x "$SRC_DL/$dsc" "$1/src" >"$1/unpack.log" 2>&1 \
        || die "dpkg-source -x $SRC_DL/$dsc failed (checksums do not match the .dsc?); remove $SRC_DL and retry"
}

# apply_patch DIR PATCH: one patch of the series onto DIR/src.
apply_patch() {
    patch -d "$1/src" -p1 --quiet --forward --no-backup-if-mismatch <"$2" >&2 || die "patch $2 does not apply"
}

# configure_qemu DIR ARG...: configures DIR/src/build with meson from the venv and ARGs.
# The s390x cross compiler builds pc-bios/s390-ccw (the machine's IPL firmware, which the
# +ds source does not ship prebuilt); configure skips it silently without one.
configure_qemu() {
    local dir="$1"
    shift
    mkdir -p "$dir/src/build"
    (cd "$dir/src/build" && PATH="$VENV/bin:$PATH" ../configure --python="$MESON_PY" "$@" \
        >"$dir/configure.log" 2>&1) \
        || { tail -n 40 "$dir/configure.log" >&2; die "QEMU configure failed (full log: $dir/configure.log)"; }
}

# series_check: every patch alone, as a maintainer applies them (see Usage); exits.
series_check() {
    local dir="$CACHE_DIR/qemu/series-check.tmp" p rel totals built failed=0 warned=0
    local opts=("${CONFIGURE_OPTS[@]/--disable-werror/--enable-werror}")
    rm -rf "$dir"; mkdir -p "$dir"
    unpack_source "$dir"
    configure_qemu "$dir" --prefix="$dir/unused" "${opts[@]}"
    step "series check: building Debian's source once without the series (-Werror)"
    nice -n 10 make -C "$dir/src/build" -j"$JOBS" qemu-system-s390x >"$dir/build.log" 2>&1 \
        || { tail -n 40 "$dir/build.log" >&2; die "Debian's QEMU does not build with -Werror here"; }
    printf '%-86s %-11s %s\n' PATCH CHECKPATCH BUILDS
    for p in "${PATCHES[@]}"; do
        rel="${p#"$PATCH_DIR"/}"
        # (checkpatch exits nonzero on a warning: its totals line says what it found)
        totals="$( (cd "$dir/src" && perl scripts/checkpatch.pl --strict "$p" 2>&1 || true) \
            | sed -n 's/^total: \([0-9]*\) errors, \([0-9]*\) warnings.*/\1\/\2/p')"
        apply_patch "$dir" "$p"
        if nice -n 10 make -C "$dir/src/build" -j"$JOBS" qemu-system-s390x >"$dir/build.log" 2>&1; then
            built=yes
        else
            built=NO; failed=1
            grep -m 3 -E 'error' "$dir/build.log" | sed 's/^/    /' >&2
        fi
        printf '%-86s %-11s %s\n' "$rel" "${totals:-?}" "$built"
        case "$totals" in 0/0) ;; 0/*) warned=1 ;; *) failed=1 ;; esac
    done
    rm -rf "$dir"
    [ "$warned" = 0 ] || warn "checkpatch warned on a patch above: read its warnings before posting"
    [ "$failed" = 0 ] || die "the series check failed (a patch that does not build alone, or a checkpatch error)"
    step "series check: every patch builds alone with -Werror; checkpatch --strict has no error"
    exit 0
}
[ "$QEMU_SERIES_CHECK" = 1 ] && series_check

# --- unpack, patch, configure, build
WORK="$CACHE_DIR/qemu/$key.tmp"
rm -rf "$WORK"; mkdir -p "$WORK"
step "unpacking $dsc (Debian's patches applied by dpkg-source)"
unpack_source "$WORK"
for p in "${PATCHES[@]}"; do
    step "applying ${p#"$PATCH_DIR"/}"
    apply_patch "$WORK" "$p"
done

step "configuring (s390x-softmmu, minimal)"
configure_qemu "$WORK" --prefix="$OUT" "${CONFIGURE_OPTS[@]}" \
    --with-pkgversion="Debian $ver_noepoch + ism-emu ${key##*-}"

step "compiling (nice, -j$JOBS)"
nice -n 10 make -C "$WORK/src/build" -j"$JOBS" >"$WORK/build.log" 2>&1 \
    || { tail -n 40 "$WORK/build.log" >&2; die "QEMU build failed (full log: $WORK/build.log)"; }

# The ISM series' qtest (ism/0012), run against this QEMU by qemu-configs/tests/pcistb-smoke.sh.
step "building the series' qtest"
nice -n 10 make -C "$WORK/src/build" -j"$JOBS" tests/qtest/s390x-zpci-ism-test >>"$WORK/build.log" 2>&1 \
    || { tail -n 40 "$WORK/build.log" >&2; die "building the qtest failed (full log: $WORK/build.log)"; }

step "installing into the cache"
make -C "$WORK/src/build" install DESTDIR="$WORK/dest" >>"$WORK/build.log" 2>&1 \
    || { tail -n 40 "$WORK/build.log" >&2; die "QEMU install failed (full log: $WORK/build.log)"; }
# --disable-install-blobs keeps the prebuilt-blob list out; install the one firmware
# image this machine needs, built from source above.
[ -s "$WORK/src/build/pc-bios/s390-ccw/s390-ccw.img" ] \
    || die "s390-ccw.img was not built (is s390x-linux-gnu-gcc usable? see $WORK/configure.log)"
install -D -m 0644 "$WORK/src/build/pc-bios/s390-ccw/s390-ccw.img" "$WORK/dest$OUT/share/qemu/s390-ccw.img"
install -D -m 0755 "$WORK/src/build/tests/qtest/s390x-zpci-ism-test" "$WORK/dest$OUT/libexec/ism-emu/s390x-zpci-ism-test"
# The ISM series' functional test (ism/0013) with the framework it runs in (QEMU's
# tests/functional/qemu_test and python/qemu, all standard library but pycotap): it
# needs the source tree, not the build, so it is installed beside the qtest.
fdest="$WORK/dest$OUT/libexec/ism-emu/functional"
mkdir -p "$fdest/s390x" "$fdest/python"
cp -r "$WORK/src/tests/functional/qemu_test" "$fdest/qemu_test"
cp -r "$WORK/src/python/qemu" "$fdest/python/qemu"
install -m 0644 "$WORK/src/tests/functional/s390x/test_ism_vfio_user.py" "$fdest/s390x/"
printf '%s\n' "$key" >"$WORK/dest$OUT/.ism-emu-key"
printf '%s\n' "${PATCHES[@]#"$PATCH_DIR"/}" >"$WORK/dest$OUT/.ism-emu-patches"
mv -T "$WORK/dest$OUT" "$OUT"
verify_install "$OUT" || die "freshly built QEMU in $OUT failed verification"
publish
step "removing the build tree $WORK"
rm -rf "$WORK"
