#!/usr/bin/env bash
# Build the s390x guest initramfs: $BUILD_DIR/initramfs-$KERNEL[-$VARIANT][-tools-stock].cpio.gz
#
#   KERNEL, VARIANT   as for build-kernel.sh; that kernel must be built already
#                     ($BUILD_DIR/kernel-$KERNEL[-$VARIANT]/)
#   INITRAMFS_MODULES modules to include with their dependencies (default: ism smc smc_diag,
#                     and rdma_rxe where the kernel builds it: the GCOV=1 kernels, for the
#                     e2e topology roce)
#   INITRAMFS_TOOLS   empty (the default: the lean test image) or "stock": the benchmark's
#                     flavour, a separate file (…-tools-stock.cpio.gz), which adds the
#                     field's stock tools sockperf and iperf3 (Debian s390x, dynamically
#                     linked: /lib/ld64.so.1 and the libraries they need), and smc_run
#                     with libsmc-preload.so (guest-tests/preload)
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

INITRAMFS_MODULES_SET="${INITRAMFS_MODULES:-}"
INITRAMFS_MODULES="${INITRAMFS_MODULES:-ism smc smc_diag}"

# ---- The one place that names the busybox package. -------------------------------------
BUSYBOX_SUITE=trixie
BUSYBOX_VER=1:1.37.0-6+b9
# ---- The one place that names the stock tools (INITRAMFS_TOOLS=stock). -----------------
# apt resolves the rest of the closure (libc6, libstdc++6, libiperf0, libsctp1, libssl3t64,
# ...) from the same suite. sid, not trixie: on 2026-12-03 trixie's index named libc6
# 2.41-12+deb13u5 and libssl3t64 3.5.9-1~deb13u1, which the archive answered 404 for
# (the pool behind its index); sid's closure downloads. sockperf is 3.7-1 in both.
STOCK_TOOLS_SUITE=sid
STOCK_TOOLS_PKGS="sockperf=3.7-1 iperf3=3.22-0.1"
# -----------------------------------------------------------------------------------------
INITRAMFS_TOOLS="${INITRAMFS_TOOLS:-}"
case "$INITRAMFS_TOOLS" in ""|stock) ;; *) die "INITRAMFS_TOOLS=$INITRAMFS_TOOLS: known are '' and stock" ;; esac

need_packages initramfs

SUFFIX="$(kernel_suffix)"
KOUT="$(kernel_dir)"
[ -f "$KOUT/bzImage" ] && [ -f "$KOUT/kernel.release" ] \
    || die "no kernel in $KOUT: run 'make kernel KERNEL=$KERNEL VARIANT=$VARIANT' first"
KREL="$(cat "$KOUT/kernel.release")"
KRESULT="$(readlink -f "$KOUT")"
OUT="$(guest_initrd)"
if [ -z "${INITRAMFS_MODULES_SET:-}" ] && kernel_has_module rdma_rxe "$KRESULT"; then
    # rxe's ICRC asks the crypto API for crc32, which no module depends on by symbol
    INITRAMFS_MODULES="$INITRAMFS_MODULES rdma_rxe crc32_generic"
fi

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

# ---- stock tools: the packages' closure (cached), the preload -------------------------
stock_inputs=()
if [ "$INITRAMFS_TOOLS" = stock ]; then
    # shellcheck disable=SC2086 # a list of pkg=version words
    STOCK_DIR="$CACHE_DIR/initramfs/stock-tools/$STOCK_TOOLS_SUITE-$(input_hash "$STOCK_TOOLS_SUITE" $STOCK_TOOLS_PKGS)"
    if [ ! -f "$STOCK_DIR/debs.list" ]; then
        step "downloading $STOCK_TOOLS_PKGS and their dependencies (Debian $STOCK_TOOLS_SUITE, s390x)"
        rm -rf "$STOCK_DIR.tmp"; mkdir -p "$STOCK_DIR.tmp/partial"
        # An empty private dpkg status: apt resolves the whole closure, and downloads it
        # only (into the cache), verified against the archive's signed index.
        # shellcheck disable=SC2086
        if ! logged "downloading $STOCK_TOOLS_PKGS (Debian $STOCK_TOOLS_SUITE, s390x)" \
            papt "$STOCK_TOOLS_SUITE" s390x -y -q --no-install-recommends \
                -o Dir::Cache::archives="$STOCK_DIR.tmp" install --download-only $STOCK_TOOLS_PKGS; then
            for pv in $STOCK_TOOLS_PKGS; do
                have="$(APT_CONFIG="$(papt_dir "$STOCK_TOOLS_SUITE" s390x)/apt.conf" apt-cache madison "${pv%%=*}" 2>/dev/null \
                    | awk '/Packages$/ {print $3}' | sort -uV | xargs)"
                echo "  ${pv%%=*}: pinned ${pv#*=}, Debian $STOCK_TOOLS_SUITE has: ${have:-nothing}" >&2
            done
            die "could not download the stock tools' closure (see above; a 404 is an archive whose pool is behind its index: try later, or another suite). The versions are pinned in guest-tests/build-initramfs.sh (STOCK_TOOLS_PKGS)."
        fi
        rm -rf "$STOCK_DIR.tmp/partial" "$STOCK_DIR.tmp/lock"
        (cd "$STOCK_DIR.tmp" && find . -name '*.deb' -printf '%f\n' | LC_ALL=C sort >debs.list)
        rm -rf "$STOCK_DIR"; mv "$STOCK_DIR.tmp" "$STOCK_DIR"
    fi
    step "building libsmc-preload.so and smc_run (guest-tests/preload)"
    PRELOAD="$BUILD_DIR/guest-preload"
    make -s -C "$REPO_ROOT/guest-tests/preload" OUT="$PRELOAD" >&2 || die "guest-tests/preload failed to build"
    stock_inputs=("$STOCK_TOOLS_SUITE" "$STOCK_TOOLS_PKGS" "$STOCK_DIR" "$PRELOAD/libsmc-preload.so" "$PRELOAD/smc_run")
fi

# ---- up to date? -----------------------------------------------------------------------
HASH="$(input_hash "$KRESULT" "$INITRAMFS_MODULES" "$BBDEB" "$REPO_ROOT/guest-tests/init" \
    "${progs[@]}" "$REPO_ROOT/guest-tests/build-initramfs.sh" "$INITRAMFS_TOOLS" "${stock_inputs[@]}")"
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
printf 'KERNEL=%s\nVARIANT=%s\nRELEASE=%s\nMODULES=%s\nPROGS=%s\nTOOLS=%s\n' "$KERNEL" "$VARIANT" "$KREL" \
    "$included" "$(printf '%s\n' "${progs[@]##*/}" | xargs)" "$INITRAMFS_TOOLS" >"$ROOT/etc/ismtest-image"

# ---- stock tools: the two programs and exactly the libraries they load ---------------
if [ "$INITRAMFS_TOOLS" = stock ]; then
    mkdir -p "$STAGE/debs" "$ROOT/usr/lib/s390x-linux-gnu" "$ROOT/usr/lib/ism-emu"
    while read -r deb; do dpkg-deb -x "$STOCK_DIR/$deb" "$STAGE/debs"; done <"$STOCK_DIR/debs.list"
    ln -s ../usr/lib/s390x-linux-gnu "$ROOT/lib/s390x-linux-gnu"
    # The DT_NEEDED closure of the programs and the preload, found in the packages'
    # library folders; each copied under its soname (symlinks resolved).
    declare -A have_lib=()
    todo=("$STAGE/debs/usr/bin/sockperf" "$STAGE/debs/usr/bin/iperf3" "$PRELOAD/libsmc-preload.so")
    for t in "${todo[@]:0:2}"; do [ -f "$t" ] || die "the stock tools' packages have no ${t##*/}"; done
    while [ ${#todo[@]} -gt 0 ]; do
        f="${todo[0]}"; todo=("${todo[@]:1}")
        for so in $(s390x-linux-gnu-readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
            [ -z "${have_lib[$so]:-}" ] || continue
            src=""
            for d in usr/lib/s390x-linux-gnu lib/s390x-linux-gnu usr/lib lib; do
                [ -e "$STAGE/debs/$d/$so" ] && { src="$STAGE/debs/$d/$so"; break; }
            done
            [ -n "$src" ] || die "${f##*/} needs $so, which no package of the closure has"
            cp -L "$src" "$ROOT/usr/lib/s390x-linux-gnu/$so"
            have_lib[$so]=1
            todo+=("$ROOT/usr/lib/s390x-linux-gnu/$so")
        done
    done
    interp="$(s390x-linux-gnu-readelf -l "$STAGE/debs/usr/bin/sockperf" | sed -n 's/.*interpreter: \(.*\)\]/\1/p')"
    [ "$interp" = /lib/ld64.so.1 ] || die "sockperf asks for the interpreter '$interp', not /lib/ld64.so.1"
    ldso="$(find "$STAGE/debs" -name ld64.so.1 \( -type f -o -type l \) | head -n1)"
    [ -n "$ldso" ] || die "libc6 has no ld64.so.1"
    cp -L "$ldso" "$ROOT/lib/ld64.so.1"
    install -m 755 "$STAGE/debs/usr/bin/sockperf" "$STAGE/debs/usr/bin/iperf3" "$PRELOAD/smc_run" "$ROOT/usr/bin/"
    install -m 644 "$PRELOAD/libsmc-preload.so" "$ROOT/usr/lib/ism-emu/"
    # shellcheck disable=SC2086
    printf 'STOCK_TOOLS=%s (Debian %s)\nSTOCK_LIBS=%s\n' "$STOCK_TOOLS_PKGS" "$STOCK_TOOLS_SUITE" \
        "$(printf '%s\n' "${!have_lib[@]}" | LC_ALL=C sort | xargs)" >>"$ROOT/etc/ismtest-image"
fi

(cd "$ROOT" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --owner 0:0 --quiet) \
    | gzip -9n >"$STAGE/initramfs.cpio.gz"
mv -f "$STAGE/initramfs.cpio.gz" "$OUT"
echo "$HASH" >"$OUT.inputs"
step "initramfs: $OUT ($(du -k "$OUT" | cut -f1) KiB; modules: $included${INITRAMFS_TOOLS:+; tools: $INITRAMFS_TOOLS})"
