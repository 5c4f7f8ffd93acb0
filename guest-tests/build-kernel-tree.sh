#!/usr/bin/env bash
# The guest kernel from your own tree (KERNEL_SRC) or your own build (KERNEL_IMAGE +
# MODULES_DIR), published as $BUILD_DIR/kernel-custom/ like a Debian line's kernel, so
# every script runs on it: `make e2e KERNEL_SRC=~/linux`. build-kernel.sh calls this for
# KERNEL=custom; see its header for the variables. The suite derives what it expects
# (e.g. when released DMBs are zeroed) from the release the guest reports.
#
# KERNEL_SRC=DIR   configured like the Debian lines (allnoconfig + the fragments of the
#                  tree's version, each option verified; KERNEL_CONFIG=FILE merges them
#                  into FILE instead), built with O=$BUILD_DIR/kernel-src/<tree>/obj.
#                  Cached in $CACHE_DIR/kernel/custom-<state hash>.
# KERNEL_IMAGE=FILE MODULES_DIR=DIR
#                  checked (an s390 image; s390x modules for ism, smc and smc_diag or
#                  those built in) and published as they are.
source "$(dirname "$0")/../scripts/lib.sh"
source "$REPO_ROOT/guest-tests/kernel-build.sh"
no_arguments "$@"

[ "$VARIANT" = stock ] || die "VARIANT=$VARIANT applies to the Debian lines only; your own tree carries its own changes"
[ -n "${KERNEL_SRC:-}" ] && [ -n "${KERNEL_IMAGE:-}" ] && die "set KERNEL_SRC (a tree to build) or KERNEL_IMAGE (a built kernel), not both"
OUT="$(kernel_dir)"
MIN_VERSION=5.10   # the oldest line the suite knows (scripts/config.sh KERNEL_LINES)

version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

# elf_machine FILE: the ELF e_machine of FILE (22 = s390), after decompressing a .ko.xz etc.
elf_machine() {
    python3 - "$1" <<'EOF'
import lzma, gzip, sys
path = sys.argv[1]
data = open(path, "rb").read(64)
if path.endswith(".xz"):
    data = lzma.open(path).read(64)
elif path.endswith(".gz"):
    data = gzip.open(path).read(64)
elif path.endswith(".zst"):
    import subprocess
    data = subprocess.run(["zstd", "-dc", path], capture_output=True).stdout[:64]
if data[:4] != b"\x7fELF":
    print("not-elf")
else:
    order = "big" if data[5] == 2 else "little"
    print(int.from_bytes(data[18:20], order))
EOF
}

# ---- a kernel built elsewhere -----------------------------------------------------------
if [ -n "${KERNEL_IMAGE:-}" ]; then
    need_packages kernel guests
    [ -f "$KERNEL_IMAGE" ] || die "KERNEL_IMAGE=$KERNEL_IMAGE: no such file"
    [ -n "${MODULES_DIR:-}" ] || die "KERNEL_IMAGE needs MODULES_DIR: the folder 'make modules_install INSTALL_MOD_PATH=DIR' filled (or its lib/modules/<release>)"
    mods="$MODULES_DIR"
    [ -d "$mods/lib/modules" ] && mods="$(find "$mods/lib/modules" -mindepth 1 -maxdepth 1 -type d | head -n1)"
    [ -f "$mods/modules.dep" ] || [ -f "$mods/modules.order" ] \
        || die "MODULES_DIR=$MODULES_DIR: no lib/modules/<release>/modules.dep or modules.order in it (run modules_install into it)"
    release="$(basename "$mods")"
    # An s390 kernel image is not ELF; its modules are. Check the architecture on them,
    # and that the image is not some other architecture's ELF vmlinux or bzImage.
    case "$(head -c 4 "$KERNEL_IMAGE" | od -An -tx1 | tr -d ' \n')" in
        7f454c46) [ "$(elf_machine "$KERNEL_IMAGE")" = 22 ] \
                      || die "KERNEL_IMAGE=$KERNEL_IMAGE is an ELF file of another architecture (not s390)" ;;
    esac
    grep -q "HdrS" <(head -c 1024 "$KERNEL_IMAGE") && die "KERNEL_IMAGE=$KERNEL_IMAGE is an x86 bzImage: the guests are s390x (ARCH=s390)"
    for m in ism smc smc_diag; do
        ko="$(find "$mods" -name "$m.ko*" | head -n1)"
        if [ -n "$ko" ]; then
            mach="$(elf_machine "$ko")"
            [ "$mach" = 22 ] || die "$ko is not an s390x module (ELF machine $mach): MODULES_DIR must hold an s390 build's modules"
        elif ! grep -q "/$m.ko" "$mods/modules.builtin" 2>/dev/null; then
            die "$m is neither a module in $mods nor built in: the kernel needs CONFIG_ISM, CONFIG_SMC and CONFIG_SMC_DIAG (see guest-tests/kernel/ism.config)"
        fi
    done
    RESULT="$CACHE_DIR/kernel/custom-image-$(input_hash "$KERNEL_IMAGE" "$mods")"
    if [ ! -f "$RESULT/bzImage" ]; then
        tmp="$RESULT.tmp"; rm -rf "$tmp"; mkdir -p "$tmp/lib/modules"
        cp "$KERNEL_IMAGE" "$tmp/bzImage"
        cp -a "$mods" "$tmp/lib/modules/$release"
        rm -f "$tmp/lib/modules/$release/build" "$tmp/lib/modules/$release/source"
        echo "$release" >"$tmp/kernel.release"
        printf 'KERNEL=custom\nVARIANT=stock\nIMAGE=%s\nMODULES=%s\nRELEASE=%s\n' \
            "$(realpath "$KERNEL_IMAGE")" "$(realpath "$mods")" "$release" >"$tmp/build-info"
        rm -rf "$RESULT"; mv -T "$tmp" "$RESULT"
    fi
    publish_kernel "$RESULT" "$OUT" "custom (KERNEL_IMAGE $KERNEL_IMAGE)"
    exit 0
fi

# ---- your tree --------------------------------------------------------------------------
[ -n "${KERNEL_SRC:-}" ] || die "KERNEL=custom needs KERNEL_SRC=DIR (a kernel tree) or KERNEL_IMAGE=FILE with MODULES_DIR=DIR"
SRC="$(realpath "$KERNEL_SRC" 2>/dev/null)" && [ -f "$SRC/Makefile" ] \
    || die "KERNEL_SRC=$KERNEL_SRC is not a kernel tree (no Makefile)"
kv() { sed -n "s/^$1 *= *//p" "$SRC/Makefile" | head -n1; }
VERSION="$(kv VERSION).$(kv PATCHLEVEL).$(kv SUBLEVEL)"
[[ "$VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "KERNEL_SRC=$SRC: cannot read VERSION/PATCHLEVEL/SUBLEVEL from its Makefile"
version_ge "$VERSION" "$MIN_VERSION" || die "KERNEL_SRC=$SRC is Linux $VERSION: the suite needs $MIN_VERSION or later"
[ -d "$SRC/arch/s390" ] || die "KERNEL_SRC=$SRC has no arch/s390: the guests are s390x"
[ -f "$SRC/drivers/s390/net/ism_drv.c" ] || [ -d "$SRC/drivers/dibs" ] \
    || die "KERNEL_SRC=$SRC has no ISM driver (drivers/s390/net/ism_drv.c): nothing for the emulated device to bind"
[ -f "$SRC/net/smc/af_smc.c" ] || die "KERNEL_SRC=$SRC has no net/smc: no SMC-D stack to test"
# kbuild refuses to build out of tree what was also built in the tree.
for f in .config include/config arch/s390/include/generated; do
    [ -e "$SRC/$f" ] && die "KERNEL_SRC=$SRC has in-tree build output ($f): kbuild refuses an out-of-tree build of it. Save your .config, run 'make mrproper' there, and pass the saved file as KERNEL_CONFIG=FILE to start from it"
done
BASE=""
if [ -n "${KERNEL_CONFIG:-}" ] && [ "$KERNEL_CONFIG" != allno ]; then
    BASE="$(realpath "$KERNEL_CONFIG" 2>/dev/null)" && [ -f "$BASE" ] || die "KERNEL_CONFIG=$KERNEL_CONFIG: no such file"
    grep -q '^CONFIG_S390=y' "$BASE" || die "KERNEL_CONFIG=$KERNEL_CONFIG is not an s390 config (no CONFIG_S390=y): architecture mismatch"
fi

export ARCH=s390 CROSS_COMPILE=s390x-linux-gnu-
export KBUILD_BUILD_USER=ism-emu KBUILD_BUILD_HOST=ism-emu
need_packages kernel guests
kernel_fragments "$VERSION"

# The tree's state: what decides whether the cached kernel is still this tree's.
tree_state() {
    # Git only if the tree is a repository's top: a tree inside another repository
    # (e.g. under this project's build folder) is not what that repository tracks.
    if [ "$(git -C "$SRC" rev-parse --show-toplevel 2>/dev/null)" = "$SRC" ]; then
        echo "git $(git -C "$SRC" rev-parse HEAD)"
        git -C "$SRC" diff HEAD --binary | sha256sum
        git -C "$SRC" ls-files -z --others --exclude-standard | (cd "$SRC" && xargs -0r sha256sum)
    else
        # No history to compare with: every file's size and modification time.
        (cd "$SRC" && find . -type f -printf '%P %s %T@\n' | LC_ALL=C sort)
    fi
}
step "kernel tree $SRC (Linux $VERSION): reading its state"
STATE="$(tree_state | sha256sum | cut -c1-16)"
GCCVER="$(${CROSS_COMPILE}gcc --version | head -n1)"
HASH="$(input_hash "$STATE" "$GCCVER" "${BASE:-allno}" ${BASE:+"$BASE"} "${FRAGMENTS[@]}" \
    "$REPO_ROOT/guest-tests/build-kernel-tree.sh" "$REPO_ROOT/guest-tests/kernel-build.sh")"
RESULT="$CACHE_DIR/kernel/custom-$VERSION-$HASH"
publish() { publish_kernel "$RESULT" "$OUT" "custom ($SRC)"; }
if [ -f "$RESULT/bzImage" ]; then
    step "kernel of $SRC in this state is cached ($RESULT)"
    publish
    exit 0
fi

OBJ="$(custom_obj_dir "$SRC")"
mkdir -p "$OBJ"
exec 9>"$OBJ/../lock"
flock -w 3600 9 || die "timed out waiting for another build of $SRC"
echo "$SRC" >"$OBJ/../tree"
KMAKE=(nice make --no-print-directory -C "$SRC" O="$OBJ" -j2)
configure_kernel "$BASE"
t0=$SECONDS
build_kernel "$SRC (Linux $VERSION)"
collect_kernel "$RESULT" "KERNEL=custom" "VARIANT=stock" "SRC=$SRC" "STATE=$STATE" "VERSION=$VERSION"
step "kernel of $SRC: built and collected in $((SECONDS - t0)) s"
publish
