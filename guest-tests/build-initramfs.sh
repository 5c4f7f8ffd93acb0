#!/usr/bin/env bash
# Build the s390x guest initramfs: $BUILD_DIR/initramfs-$KERNEL[-$VARIANT].cpio.gz
#
#   KERNEL, VARIANT   as for build-kernel.sh; that kernel must be built already
#                     ($BUILD_DIR/kernel-$KERNEL[-$VARIANT]/)
#   INITRAMFS_MODULES modules to include with their dependencies (default: ism smc smc_diag)
#
# Contents: busybox-static (s390x, Debian trixie) with its applet links created at boot,
# the kernel modules (decompressed, depmod'ed), /init from guest-tests/init/init, and
# every executable in $BUILD_DIR/guest-progs/ as /progs/<name> (on PATH in the guest).
# If guest-tests/progs/Makefile exists it is run first (make OUT=$BUILD_DIR/guest-progs).
#
# Cheap to build, so not cached across versions: it is rebuilt whenever the hash of its
# inputs (kernel result, busybox package, init, programs, this script) changes.
source "$(dirname "$0")/../scripts/lib.sh"
no_arguments "$@"

INITRAMFS_MODULES="${INITRAMFS_MODULES:-ism smc smc_diag}"

# ---- The one place that names the busybox package. -------------------------------------
BUSYBOX_SUITE=trixie
BUSYBOX_VER=1:1.37.0-6+b9
# -----------------------------------------------------------------------------------------

need_packages initramfs

SUFFIX="$(kernel_suffix)"
KOUT="$(kernel_dir)"
[ -f "$KOUT/bzImage" ] && [ -f "$KOUT/kernel.release" ] \
    || die "no kernel in $KOUT: run 'make kernel KERNEL=$KERNEL VARIANT=$VARIANT' first"
KREL="$(cat "$KOUT/kernel.release")"
KRESULT="$(readlink -f "$KOUT")"
OUT="$(guest_initrd)"

# ---- busybox-static for s390x ----------------------------------------------------------
BBDIR="$CACHE_DIR/initramfs/busybox"
BBDEB="$BBDIR/busybox-static_${BUSYBOX_VER#*:}_s390x.deb"
if [ ! -f "$BBDEB" ]; then
    step "downloading busybox-static $BUSYBOX_VER (Debian $BUSYBOX_SUITE, s390x)"
    rm -rf "$BBDIR/dl"
    papt_download "$BUSYBOX_SUITE" s390x busybox-static "$BUSYBOX_VER" "$BBDIR/dl" "guest-tests/build-initramfs.sh (BUSYBOX_VER)"
    mv "$BBDIR"/dl/busybox-static_*_s390x.deb "$BBDEB"
fi

# ---- guest programs (another part of the tree builds them) -----------------------------
PROGS="$BUILD_DIR/guest-progs"
if [ -f "$REPO_ROOT/guest-tests/progs/Makefile" ]; then
    step "building guest programs (guest-tests/progs)"
    make -s -C "$REPO_ROOT/guest-tests/progs" OUT="$PROGS" >&2 || die "guest-tests/progs failed to build"
fi
progs=()
if [ -d "$PROGS" ]; then
    mapfile -t progs < <(find "$PROGS" -maxdepth 1 -type f -perm -u+x | LC_ALL=C sort)
fi

# ---- up to date? -----------------------------------------------------------------------
HASH="$(input_hash "$KRESULT" "$INITRAMFS_MODULES" "$BBDEB" "$REPO_ROOT/guest-tests/init" \
    "${progs[@]}" "$REPO_ROOT/guest-tests/build-initramfs.sh")"
if [ -f "$OUT" ] && [ "$(cat "$OUT.inputs" 2>/dev/null)" = "$HASH" ]; then
    step "initramfs is up to date: $OUT"
    exit 0
fi

step "assembling initramfs for $KREL (${#progs[@]} guest program(s))"
mkdir -p "$BUILD_DIR"
STAGE="$(mktemp -d "$BUILD_DIR/.initramfs-$SUFFIX.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT
ROOT="$STAGE/root"
mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,tmp,run,progs,etc,root,lib/modules}

dpkg-deb -x "$BBDEB" "$STAGE/bb"
bb="$(find "$STAGE/bb" -path '*bin/busybox' -type f | head -n1)"
[ -n "$bb" ] || die "busybox-static package has no bin/busybox"
cp "$bb" "$ROOT/bin/busybox"
ln -s busybox "$ROOT/bin/sh"          # /init starts with #!/bin/sh; the rest is linked at boot

# A console node, so the kernel can give /init its stdio (devtmpfs comes later).
if [ "$(id -u)" = 0 ]; then
    mknod -m 600 "$ROOT/dev/console" c 5 1
    mknod -m 666 "$ROOT/dev/null" c 1 3
fi

# ---- modules ---------------------------------------------------------------------------
# The wanted modules and everything they depend on, as modprobe resolves them.
mods="$(modprobe -d "$KRESULT" -S "$KREL" -a --show-depends $INITRAMFS_MODULES 2>&1)" \
    || die "cannot resolve modules '$INITRAMFS_MODULES' for $KREL: $mods"
KMODS="$KRESULT/lib/modules/$KREL"
IMODS="$ROOT/lib/modules/$KREL"
mkdir -p "$IMODS"
while read -r kind path _; do
    [ "$kind" = insmod ] || continue        # "builtin ..." needs nothing
    rel="${path#"$KRESULT/lib/modules/$KREL/"}"
    mkdir -p "$IMODS/$(dirname "$rel")"
    decompress_ko "$path" "$IMODS/${rel%.ko*}.ko"
done <<<"$mods"
for f in modules.order modules.builtin modules.builtin.modinfo; do
    [ -f "$KMODS/$f" ] && cp "$KMODS/$f" "$IMODS/"
done
depmod -b "$ROOT" "$KREL" || die "depmod failed"
included="$(cd "$IMODS" && find . -name '*.ko' -printf '%f\n' | sed 's/\.ko$//' | LC_ALL=C sort | xargs)"

# ---- init and programs -----------------------------------------------------------------
install -m 755 "$REPO_ROOT/guest-tests/init/init" "$ROOT/init"
for p in "${progs[@]}"; do install -m 755 "$p" "$ROOT/progs/"; done
printf 'KERNEL=%s\nVARIANT=%s\nRELEASE=%s\nMODULES=%s\nPROGS=%s\n' "$KERNEL" "$VARIANT" "$KREL" \
    "$included" "$(printf '%s\n' "${progs[@]##*/}" | xargs)" >"$ROOT/etc/ismtest-image"

(cd "$ROOT" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --owner 0:0 --quiet) \
    | gzip -9n >"$STAGE/initramfs.cpio.gz"
mv -f "$STAGE/initramfs.cpio.gz" "$OUT"
echo "$HASH" >"$OUT.inputs"
step "initramfs: $OUT ($(du -k "$OUT" | cut -f1) KiB; modules: $included)"
