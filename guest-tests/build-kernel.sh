#!/usr/bin/env bash
# Build the s390x guest kernel that carries the SMC-D stack (ISM, SMC, SMC_DIAG).
#
#   KERNEL=X.Y       kernel line, one of scripts/config.sh's KERNEL_LINES (default
#                    6.12): Debian's linux-source-X.Y package, named in the table below
#   VARIANT=stock|prezero|nozero|...   (scripts/config.sh's VARIANTS)
#                    stock = the unmodified tree; the others apply
#                    guest-tests/kernel/patches/<variant>/*.patch and/or merge its
#                    <variant>.config fragments (negative controls, fixes, loopback)
#   GCOV=1           on top of the variant, gcov profiling of net/smc, the ism driver
#                    and dibs (guest-tests/kernel/gcov/; docs/coverage.md); the result
#                    also holds the .gcno files and those folders' sources (gcov/)
#   KERNEL=custom with KERNEL_SRC=DIR
#                    your own kernel tree (5.10 or later, clean or with uncommitted
#                    changes), built out of tree: the objects go to
#                    $BUILD_DIR/kernel-src/<tree>/obj, nothing is written into DIR.
#                    Cached by the tree's state: HEAD plus a hash of the uncommitted
#                    diff and untracked files (a git tree), or of every file's size and
#                    time (any other tree); a one-line change rebuilds incrementally.
#                    KERNEL_CONFIG=FILE merges the fragments into FILE (e.g. the .config
#                    of your own s390 build) instead of allnoconfig.
#   KERNEL_UNPACK_ONLY=1
#                    only fetch and unpack the line's source into the work folder
#                    (below) and bring it to VARIANT's patches (stock: pristine, a
#                    variant's patches reverted), build nothing: for tools that need
#                    the tree (scripts/results-check.sh, scripts/ci-smcd-check.sh).
#   KERNEL=custom with KERNEL_IMAGE=FILE MODULES_DIR=DIR
#                    a kernel you built already: its image and the folder its
#                    `make modules_install INSTALL_MOD_PATH=` filled (or its
#                    lib/modules/<release>); published as they are, after checks.
#                    (KERNEL_SRC or KERNEL_IMAGE alone imply KERNEL=custom.)
#
# The tree is Debian's linux-source-X.Y (architecture all; the kernel tree as a tarball),
# cross-compiled with bookworm's gcc-s390x-linux-gnu from `make allnoconfig` plus the
# fragments guest-tests/kernel/ism.config and ism-<major>.x.config.
#
# Output: $BUILD_DIR/kernel-$KERNEL[-$VARIANT][-gcov]/ (a symlink into the cache) with bzImage,
# System.map, .config and lib/modules/<release>/. The result is cached in
# $CACHE_DIR/kernel/<version>-<variant>-<hash of all inputs>/; a warm run only publishes it.
#
# The unpacked tree and the object directory live in $CACHE_DIR/kernel/work/<version>/
# (shared by the variants of one line: switching variant reverts/applies the patches in
# place, so only the patched files are recompiled). They are never part of a result.
source "$(dirname "$0")/../scripts/lib.sh"
no_arguments "$@"
check_kernel_selection

if [ "$KERNEL" = custom ]; then
    exec "$REPO_ROOT/guest-tests/build-kernel-tree.sh"
fi

# ---- The one place that names the source package of each kernel line. ----------------
# SUITE  Debian suite that carries the package; PKG  binary package; PKGVER  exact version.
case "$KERNEL" in
    5.10) SUITE=bullseye; PKG=linux-source-5.10; PKGVER=5.10.223-1 ;;
    6.1)  SUITE=bookworm; PKG=linux-source-6.1;  PKGVER=6.1.176-1 ;;
    6.12) SUITE=trixie;   PKG=linux-source-6.12; PKGVER=6.12.117-1 ;;
    7.2)  SUITE=sid;      PKG=linux-source-7.2;  PKGVER=7.2.13-1 ;;
    7.3)  SUITE=trixie-backports; PKG=linux-source-7.3; PKGVER=7.3.4-1~bpo13+1 ;;
    *) die "no Debian package named for KERNEL=$KERNEL in $0" ;;
esac
# ---------------------------------------------------------------------------------------

source "$REPO_ROOT/guest-tests/kernel-build.sh"
KDIR="$REPO_ROOT/guest-tests/kernel"
kernel_fragments "$KERNEL"

PATCHES=()
# line_patches DIR: DIR's *.patch, or those of DIR/<line>/ (e.g. 6.12) or DIR/<major>.x/
# where present, appended to PATCHES.
line_patches() {
    local dir="$1" found=()
    if [ -d "$dir/$KERNEL" ]; then dir="$dir/$KERNEL"; fi
    mapfile -t found < <(find "$dir" -maxdepth 1 -name '*.patch' | LC_ALL=C sort)
    PATCHES+=("${found[@]}")
    if [ -d "$dir/${KERNEL%%.*}.x" ]; then
        mapfile -t found < <(find "$dir/${KERNEL%%.*}.x" -maxdepth 1 -name '*.patch' | LC_ALL=C sort)
        PATCHES+=("${found[@]}")
    fi
}
# A variant is its folder's patches, its config fragments (<variant>.config,
# <variant>-<major>.x.config), or both.
if [ "$VARIANT" != stock ]; then
    PATCHDIR="$KDIR/patches/$VARIANT"
    [ -d "$PATCHDIR" ] || die "no patches for VARIANT=$VARIANT ($PATCHDIR missing)"
    line_patches "$PATCHDIR"
    n_before=${#FRAGMENTS[@]}
    for f in "$PATCHDIR/$VARIANT.config" "$PATCHDIR/$VARIANT-${KERNEL%%.*}.x.config"; do
        [ -f "$f" ] && FRAGMENTS+=("$f")
    done
    [ ${#PATCHES[@]} -gt 0 ] || [ ${#FRAGMENTS[@]} -gt "$n_before" ] \
        || die "VARIANT=$VARIANT has neither patches nor a config fragment for $KERNEL in $PATCHDIR"
fi
# GCOV=1: profiling of the folders coverage measures, on top of the variant.
FLAVOUR="$VARIANT"
if [ "$GCOV" = 1 ]; then
    line_patches "$KDIR/gcov"
    FRAGMENTS+=("$KDIR/gcov/gcov.config")
    FLAVOUR="$VARIANT-gcov"
fi

export ARCH=s390 CROSS_COMPILE=s390x-linux-gnu-
# Reproducible-ish build identity (no host name in the image).
export KBUILD_BUILD_USER=ism-emu KBUILD_BUILD_HOST=ism-emu
# The variant shows in `uname -r` (e.g. 6.12.117-prezero); stock has no suffix.
LOCALVERSION="-$FLAVOUR"
LOCALVERSION="${LOCALVERSION#-stock}"

need_packages kernel

GCCVER="$(${CROSS_COMPILE}gcc --version | head -n1)"
# The package table enters the hash only as this line's PKG=PKGVER (the script is hashed
# without it): adding or updating another line leaves this line's cached build valid.
SCRIPT_BODY="$(sed '/^# ---- The one place/,/^# -----/d' "$REPO_ROOT/guest-tests/build-kernel.sh")"
HASH="$(input_hash "$PKG=$PKGVER" "$GCCVER" "$FLAVOUR" "${FRAGMENTS[@]}" "${PATCHES[@]}" \
    "$SCRIPT_BODY" "$REPO_ROOT/guest-tests/kernel-build.sh")"
RESULT="$CACHE_DIR/kernel/$PKGVER-$FLAVOUR-$HASH"
OUT="$(kernel_dir)"

publish() { publish_kernel "$RESULT" "$OUT" "$KERNEL ($FLAVOUR)"; }

UNPACK_ONLY="${KERNEL_UNPACK_ONLY:-0}"
if [ -f "$RESULT/bzImage" ] && [ "$UNPACK_ONLY" != 1 ]; then
    step "kernel $KERNEL ($FLAVOUR) is cached ($RESULT)"
    publish
    exit 0
fi

WORK="$CACHE_DIR/kernel/work/$PKGVER"
mkdir -p "$WORK"
# One build per line at a time: the variants share the tree and the object directory.
exec 9>"$WORK/lock"
flock -w 3600 9 || die "timed out waiting for another build of $PKGVER ($WORK/lock)"
if [ -f "$RESULT/bzImage" ] && [ "$UNPACK_ONLY" != 1 ]; then   # built by the run we waited for
    publish
    exit 0
fi

# ---- fetch and unpack the source package ----------------------------------------------
DEB="$WORK/${PKG}_${PKGVER}_all.deb"
if [ ! -f "$DEB" ]; then
    step "downloading $PKG $PKGVER (Debian $SUITE)"
    rm -rf "$WORK/dl"    # download aside, then move: never a partial .deb
    papt_download "$SUITE" amd64 "$PKG" "$PKGVER" "$WORK/dl" "guest-tests/build-kernel.sh (PKGVER for KERNEL=$KERNEL)"
    mv "$WORK"/dl/"${PKG}"_*_all.deb "$DEB" 2>/dev/null || die "download of $PKG=$PKGVER produced no .deb"
    rm -rf "$WORK/dl"
fi

SRC="$WORK/src"
OBJ="$WORK/obj"
fresh_tree() {
    step "unpacking $PKG $PKGVER"
    rm -rf "$SRC" "$OBJ" "$WORK/deb" "$WORK/applied"
    mkdir -p "$WORK/deb" "$SRC"
    dpkg-deb -x "$DEB" "$WORK/deb"
    local tarball
    tarball="$(find "$WORK/deb/usr/src" -maxdepth 1 -name "$PKG.tar.*" | head -n1)"
    [ -n "$tarball" ] || die "$DEB contains no /usr/src/$PKG.tar.*"
    # --touch: files get the current time, so nothing stale can look up to date.
    tar -C "$SRC" --strip-components=1 --touch -xaf "$tarball"
    rm -rf "$WORK/deb"
    : >"$WORK/applied"
}
[ -f "$SRC/Makefile" ] && [ -f "$WORK/applied" ] || fresh_tree

# ---- bring the tree to the wanted variant ---------------------------------------------
# $WORK/applied names the variant whose patches are in the tree (empty = pristine); the
# applied patches are kept in $WORK/applied.d so they can be reverted exactly.
current="$(cat "$WORK/applied")"
want=""; [ ${#PATCHES[@]} -eq 0 ] || want="$FLAVOUR:$(input_hash "${PATCHES[@]}")"
if [ "$current" != "$want" ]; then
    if [ -n "$current" ]; then
        step "reverting patches of ${current%%:*}"
        ok=1
        for p in $(find "$WORK/applied.d" -name '*.patch' | LC_ALL=C sort -r); do
            if patch -d "$SRC" -p1 -R -s -F0 --dry-run <"$p" >/dev/null 2>&1; then
                patch -d "$SRC" -p1 -R -s -F0 <"$p" >&2 || { ok=0; break; }
            elif ! patch -d "$SRC" -p1 -s -N -F0 --dry-run <"$p" >/dev/null 2>&1; then
                ok=0; break      # neither applied nor cleanly absent: the tree is unknown
            fi                   # else: never applied (an interrupted run), nothing to revert
        done
        [ $ok = 1 ] || { warn "could not revert the patches; unpacking afresh"; fresh_tree; }
        : >"$WORK/applied"; rm -rf "$WORK/applied.d"
    fi
    if [ -n "$want" ]; then
        step "applying $FLAVOUR patches"
        mkdir -p "$WORK/applied.d"
        # Marked as partly applied until every patch is in: an interrupted or failed apply
        # never matches a wanted state, so the next run reverts it (or unpacks afresh).
        echo "$want:partial" >"$WORK/applied"
        for p in "${PATCHES[@]}"; do
            cp "$p" "$WORK/applied.d/"
            patch -d "$SRC" -p1 -s -N -F0 --dry-run <"$p" >&2 || die "patch $(basename "$p") does not apply to $PKG $PKGVER"
            patch -d "$SRC" -p1 -s -N -F0 <"$p" >&2 || die "patch $(basename "$p") failed"
        done
        echo "$want" >"$WORK/applied"
    fi
fi

if [ "$UNPACK_ONLY" = 1 ]; then
    step "kernel $KERNEL: source unpacked in $SRC, as $FLAVOUR (KERNEL_UNPACK_ONLY: nothing built)"
    exit 0
fi

# ---- configure, build, collect (guest-tests/kernel-build.sh) -------------------------
KMAKE=(nice make --no-print-directory -C "$SRC" O="$OBJ" -j2 LOCALVERSION="$LOCALVERSION")
configure_kernel ""
build_kernel "$PKG $PKGVER ($FLAVOUR)"
collect_kernel "$RESULT" "KERNEL=$KERNEL" "VARIANT=$VARIANT" "GCOV=$GCOV" "PKG=$PKG" "PKGVER=$PKGVER"
publish
