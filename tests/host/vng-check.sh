#!/usr/bin/env bash
# virtme-ng (`vng`, PyPI virtme-ng, pinned below) booting an s390x kernel with the
# emulated ISM attached, non-interactively (`make vng-check`; docs/ci.md, "virtme-ng"):
#
#  1. virtme-ng from PyPI into a venv in the cache;
#  2. a kernel from a tree (KERNEL_SRC, default: a copy of the Debian 6.12 line's source)
#     with what a vng run needs (VNG_KCONFIG below, taken from `vng --kconfig`'s list)
#     on allnoconfig, plus the project's fragments (guest-tests/build-kernel-tree.sh);
#  3. an s390x root for `vng --root`: static busybox and bash, the kernel's modules,
#     the guest programs;
#  4. the emulator with one ISM function, then
#       vng --run ROOT/lib/modules/REL/vmlinuz --arch s390x --root ROOT --qemu QEMU
#           --exec '...' --qemu-opts '<shared memfd RAM, -cpu max, zpci + vfio-user-pci>'
#     which loads ism, smc and smc_diag in the guest, shows the ism driver bound to the
#     function and runs `smctest echo self` (SMC-D from the guest to itself through the
#     ISM function);
#  5. checks: vng's exit status, the guest's output (ISM bound, SUMMARY ... ok, every
#     connection SMC-D), the emulator's view (the function attached and moved data).
#
# vng exports its root and its guest tools to the guest over 9p (virtio-9p-ccw), or over
# virtio-fs with a virtiofsd on the host. QEMU must have one of them: VNG_QEMU names it
# (default the project's, build/qemu/bin/qemu-system-s390x); one without virtio-9p-ccw
# is refused up front with the reason (status 2).
#
# Environment: KERNEL_SRC (a kernel tree, 6.x; default the 6.12 line's Debian source,
# copied to VNG_DIR/tree); VNG_KERNEL_DIR (instead: a kernel built already, a folder like
# build/kernel-6.12: bzImage, .config, kernel.release, lib/modules/); VNG_QEMU; VNG_DIR
# (default build/vng-check); VNG_TIMEOUT (seconds for the guest run, default 600).
#
# Status (2026-11-30): passed with a QEMU built with --enable-virtfs --enable-attr (the
# options the project's QEMU has since) and VNG_KERNEL_DIR = the kernel this script
# configures (built elsewhere; the script's own cold build of a tree was not run to its
# end). See docs/ci.md.
# Exit status: 0 passed; 1 a check failed (or a build step); 2 the QEMU cannot do it
# (no virtio-9p-ccw, zpci or vfio-user-pci).
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
source "$REPO_ROOT/scripts/topology.sh"
no_arguments "$@"

# ---- The one place that names the virtme-ng version and the guest root's packages. -----
VNG_VERSION=1.42
BASH_STATIC_SUITE=trixie
BASH_STATIC_VER=5.2.37-2+b10
# What a vng run needs in the guest kernel, from the list `vng --kconfig` appends
# (`vng --kconfig --dry-run --arch s390x` prints it): the 9p root and guest tools,
# virtio-serial for --exec's I/O ports, overlayfs for the writable overlays vng puts on
# /etc, /usr, ..., ptys, and the watchdog vng adds to every s390x machine.
# Left out: debug info, virtio-fs (no virtiofsd in Debian 12), SCSI, vsock, and inotify
# (it turns on FSNOTIFY, which changes struct inode: every object would rebuild).
VNG_KCONFIG=(
    CONFIG_NETWORK_FILESYSTEMS=y CONFIG_NET_9P=y CONFIG_NET_9P_VIRTIO=y CONFIG_9P_FS=y
    CONFIG_VIRTIO_CONSOLE=y CONFIG_OVERLAY_FS=y CONFIG_UNIX98_PTYS=y
    CONFIG_WATCHDOG=y CONFIG_WATCHDOG_CORE=y CONFIG_DIAG288_WATCHDOG=y
)
# ------------------------------------------------------------------------------------------

VNG_DIR="${VNG_DIR:-$BUILD_DIR/vng-check}"
VNG_QEMU="${VNG_QEMU:-$BUILD_DIR/qemu/bin/qemu-system-s390x}"
VNG_TIMEOUT="${VNG_TIMEOUT:-600}"
VNG_LINE=6.12
VENV="$CACHE_DIR/tools/virtme-ng-$VNG_VERSION"
ROOT="$VNG_DIR/root"
t_start=$SECONDS

need_packages vng

# ---- 1. virtme-ng ----------------------------------------------------------------------
if [ ! -f "$VENV/.ok" ] || [ "$("$VENV/bin/vng" --version 2>/dev/null)" != "virtme-ng $VNG_VERSION" ]; then
    step "installing virtme-ng $VNG_VERSION from PyPI into $VENV"
    rm -rf "$VENV"
    logged "python3 -m venv" /usr/bin/python3 -m venv "$VENV" || die "python3 -m venv failed"
    logged "pip install virtme-ng==$VNG_VERSION" timeout 600 "$VENV/bin/pip" install \
        --disable-pip-version-check "virtme-ng==$VNG_VERSION" \
        || die "could not install virtme-ng $VNG_VERSION from PyPI"
    touch "$VENV/.ok"
fi
step "$("$VENV/bin/vng" --version) in $VENV"

# ---- QEMU: vng's root needs virtio-9p --------------------------------------------------
[ -x "$VNG_QEMU" ] || die "no QEMU at $VNG_QEMU: run 'make qemu' (or set VNG_QEMU)"
devices="$("$VNG_QEMU" -M none -device help 2>&1)" || die "$VNG_QEMU -device help failed: $devices"
for d in vfio-user-pci zpci; do
    grep -q "\"$d\"" <<<"$devices" || { warn "$VNG_QEMU has no $d device: it cannot attach the emulated ISM (use the project's QEMU, make qemu)"; exit 2; }
done
if ! grep -q '"virtio-9p-ccw"' <<<"$devices"; then
    warn "$VNG_QEMU has no virtio-9p-ccw device: vng exports its root and guest tools to the guest over 9p (or virtio-fs: vhost-user-fs-ccw plus a virtiofsd on the host), and this QEMU was built without either (the project's has it since it is configured with --enable-virtfs: an older build?). vng would stop at: 'virtio-9p-ccw' is not a valid device model name. See docs/ci.md, \"virtme-ng\"."
    exit 2
fi

# ---- 2. the kernel ---------------------------------------------------------------------
# build_kernel: kout = the kernel of the tree (KERNEL_SRC, or a copy of the Debian line's
# source) configured as allnoconfig + VNG_KCONFIG + the project's fragments, built and
# cached like any KERNEL_SRC tree, in a build folder of its own (so build/kernel-custom,
# what `make e2e KERNEL_SRC=...` published, stays as it is).
build_kernel() {
    local tree src base t0
    if [ -n "${KERNEL_SRC:-}" ]; then
        tree="$(realpath "$KERNEL_SRC")"
    else
        tree="$VNG_DIR/tree"
        if [ ! -f "$tree/Makefile" ]; then
            src="$(debian_kernel_tree "$VNG_LINE")"
            step "copying the $VNG_LINE tree to $tree (kept for incremental builds)"
            rm -rf "$tree.tmp"; mkdir -p "$VNG_DIR"
            cp -a "$src" "$tree.tmp" && mv -T "$tree.tmp" "$tree"
        fi
    fi
    [ -f "$tree/Makefile" ] || die "KERNEL_SRC=$tree is not a kernel tree"
    need_packages kernel
    base="$VNG_DIR/vng-base.config"
    mkdir -p "$VNG_DIR/allno"
    step "kernel config: allnoconfig of $tree + vng's options (${#VNG_KCONFIG[@]}) + the project's fragments"
    make -s -C "$tree" O="$VNG_DIR/allno" ARCH=s390 CROSS_COMPILE=s390x-linux-gnu- allnoconfig >/dev/null \
        || die "make allnoconfig failed in $tree"
    { cat "$VNG_DIR/allno/.config"; echo "# virtme-ng (tests/host/vng-check.sh VNG_KCONFIG)"
      printf '%s\n' "${VNG_KCONFIG[@]}"; } >"$base"
    t0=$SECONDS
    BUILD_DIR="$VNG_DIR/kbuild" KERNEL=custom KERNEL_SRC="$tree" KERNEL_CONFIG="$base" \
        "$REPO_ROOT/guest-tests/build-kernel.sh"
    t_kernel=$((SECONDS - t0))
    kout="$VNG_DIR/kbuild/kernel-custom"
}
t_kernel=0
if [ -n "${VNG_KERNEL_DIR:-}" ]; then
    kout="$(realpath "$VNG_KERNEL_DIR")"
    [ -f "$kout/bzImage" ] && [ -f "$kout/kernel.release" ] && [ -f "$kout/.config" ] \
        || die "VNG_KERNEL_DIR=$VNG_KERNEL_DIR: no bzImage, kernel.release and .config in it"
    step "kernel: $kout (VNG_KERNEL_DIR), not built here"
else
    build_kernel
fi
rel="$(cat "$kout/kernel.release")"
for o in "${VNG_KCONFIG[@]}"; do
    grep -qx "$o" "$kout/.config" || warn "kernel $rel: $o is not in its .config (a vng run may fail)"
done

# ---- 3. the guest root -----------------------------------------------------------------
need_packages initramfs
deb_of() {   # deb_of SUITE PKG VERSION: the s390x .deb in the cache, downloaded once
    local dir="$CACHE_DIR/vng/debs" f
    f="$dir/${2}_${3#*:}_s390x.deb"
    if [ ! -f "$f" ]; then
        rm -rf "$dir/dl"
        papt_download "$1" s390x "$2" "$3" "$dir/dl" "tests/host/vng-check.sh" >&2
        mv "$dir"/dl/"${2}"_*_s390x.deb "$f"; rm -rf "$dir/dl"
    fi
    printf '%s\n' "$f"
}
# busybox: the version the initramfs uses (guest-tests/build-initramfs.sh names it)
bb_suite="$(sed -n 's/^BUSYBOX_SUITE=//p' "$REPO_ROOT/guest-tests/build-initramfs.sh")"
bb_ver="$(sed -n 's/^BUSYBOX_VER=//p' "$REPO_ROOT/guest-tests/build-initramfs.sh")"
bb_deb="$(deb_of "$bb_suite" busybox-static "$bb_ver")"
bash_deb="$(deb_of "$BASH_STATIC_SUITE" bash-static "$BASH_STATIC_VER")"
step "guest programs (guest-tests/progs)"
make -s -C "$REPO_ROOT/guest-tests/progs" OUT="$BUILD_DIR/guest-progs" >&2 || die "guest-tests/progs failed to build"

step "guest root $ROOT: busybox $bb_ver, bash-static $BASH_STATIC_VER, modules of $rel, smctest"
rm -rf "$ROOT" "$VNG_DIR/x"
mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,run,tmp,root,etc,home,opt,srv,var,lib/modules} "$VNG_DIR/x"
dpkg-deb -x "$bb_deb" "$VNG_DIR/x/bb"
dpkg-deb -x "$bash_deb" "$VNG_DIR/x/bash"
install -m 755 "$(find "$VNG_DIR/x/bb" -path '*bin/busybox' -type f | head -n1)" "$ROOT/bin/busybox"
install -m 755 "$(find "$VNG_DIR/x/bash" -path '*bin/bash-static' -type f | head -n1)" "$ROOT/bin/bash"
rm -rf "$VNG_DIR/x"
# A link for every busybox applet: the names are stored in the binary, NUL-separated and
# sorted, from "[" on (the s390x binary does not run on the host to ask it).
python3 - "$ROOT/bin/busybox" <<'EOF' >"$VNG_DIR/applets"
import sys
data = open(sys.argv[1], "rb").read()
i = data.find(b"[\0[[\0")
assert i >= 0, "no applet table in busybox"
names = data[i:data.index(b"\0\0", i)].split(b"\0")
print("\n".join(n.decode() for n in names))
EOF
while read -r a; do
    case "$a" in busybox|bash|'['|'[[') continue ;; esac
    [ -e "$ROOT/bin/$a" ] || ln -s busybox "$ROOT/bin/$a"
done <"$VNG_DIR/applets"
ln -s ../../bin/busybox "$ROOT/usr/bin/env"   # virtme-init starts with #!/usr/bin/env bash
ln -s busybox "$ROOT/bin/["
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$ROOT/etc/passwd"
printf 'root:x:0:\ntty:x:5:\n' >"$ROOT/etc/group"
: >"$ROOT/etc/fstab"
: >"$ROOT/etc/shadow"; mkdir -p "$ROOT/etc/lvm"   # virtme-init bind-mounts over both
# virtme-init finds --exec's I/O ports as /dev/virtio-ports/NAME, links that udev makes.
# This root has no udev: a stand-in "udevd" makes those links (and udevadm does nothing).
cat >"$ROOT/sbin/udevd" <<'EOF'
#!/bin/sh
# Stand-in for udevd (tests/host/vng-check.sh): /dev/virtio-ports/NAME -> /dev/vportXpY.
mkdir -p /dev/virtio-ports
i=0
while [ $i -lt 50 ]; do
    n=0
    for p in /sys/class/virtio-ports/*; do
        [ -r "$p/name" ] || continue
        name="$(cat "$p/name")"
        [ -n "$name" ] || continue
        ln -sfn "../${p##*/}" "/dev/virtio-ports/$name"
        n=$((n + 1))
    done
    [ $n -ge 6 ] && break
    sleep 0.1; i=$((i + 1))
done
EOF
printf '#!/bin/sh\nexit 0\n' >"$ROOT/sbin/udevadm"
chmod 755 "$ROOT/sbin/udevd" "$ROOT/sbin/udevadm"
cp -a "$kout/lib/modules/$rel" "$ROOT/lib/modules/"
# The image inside the root, at lib/modules/REL/vmlinuz: vng reads an s390x kernel's
# version from that path (`file` cannot), and then uses the root's modules for it.
cp "$kout/bzImage" "$ROOT/lib/modules/$rel/vmlinuz"
install -m 755 "$BUILD_DIR/guest-progs/smctest" "$ROOT/usr/bin/smctest"

# ---- 4. the emulator and the vng run ---------------------------------------------------
[ -x "$EMU_BIN" ] || die "no emulator at $EMU_BIN: run 'make emulator'"
topo_init "$VNG_DIR/run"
emu_start 1
sock="$RUN_DIR/ism0.sock"
case "$sock" in *[\ \'\"\\,]*) die "the socket path $sock must not contain spaces, quotes, backslashes or commas" ;; esac

# In the guest (vng --exec runs it with bash as root, output on vng's stdout).
guest_cmd='modprobe ism && modprobe smc && modprobe smc_diag || exit 10
for d in /sys/bus/pci/drivers/ism/*:*; do
    [ -e "$d" ] && echo "VNG: ISM bound ${d##*/} pft=$(cat "$d/pft")"
done
ls -d /sys/bus/pci/drivers/ism/*:* >/dev/null 2>&1 || exit 11
echo "VNG: kernel $(uname -r) $(uname -m)"
smctest echo self --host=127.0.0.1 --port=12345 --rounds=100'
# What --qemu-opts adds to vng's QEMU command line. vng hands this string to a shell,
# so the JSON device (vfio-user-pci takes its socket only in that form) is single-quoted.
qemu_opts="-object memory-backend-memfd,id=ismmem,size=1G,share=on -machine memory-backend=ismmem"
qemu_opts+=" -cpu max -global vfio-user-pci.x-waited-channel=on -device zpci,uid=2,fid=2,target=ism2,ism=on,pchid=$CHID"
qemu_opts+=" -device '{\"driver\":\"vfio-user-pci\",\"id\":\"ism2\",\"socket\":{\"type\":\"unix\",\"path\":\"$sock\"}}'"
vng_cmd=(vng --run "$ROOT/lib/modules/$rel/vmlinuz" --arch s390x --root "$ROOT"
    --qemu "$VNG_QEMU" --force-9p --memory 1G --cpus 2 --verbose
    --exec "$guest_cmd" "--qemu-opts=$qemu_opts")
printf '%q ' "${vng_cmd[@]}" >"$RUN_DIR/vng.cmd"; echo >>"$RUN_DIR/vng.cmd"
step "vng run (timeout ${VNG_TIMEOUT}s): guest output $RUN_DIR/vng.out, console $RUN_DIR/vng.console.log"
t0=$SECONDS
set +e
PATH="$VENV/bin:$PATH" timeout --kill-after=10 "$VNG_TIMEOUT" "${vng_cmd[@]}" \
    </dev/null >"$RUN_DIR/vng.out" 2>"$RUN_DIR/vng.console.log"
vng_rc=$?
set -e
t_run=$((SECONDS - t0))
observe json >"$RUN_DIR/snapshot.json" 2>>"$RUN_DIR/emulator.log" || true
observe summary >"$RUN_DIR/summary.txt" 2>&1 || true

# ---- 5. checks -------------------------------------------------------------------------
fails=0
check() {   # check NAME STATUS WHAT
    if [ "$2" = 0 ]; then step "ok   $1: $3"; else warn "FAIL $1: $3"; fails=$((fails + 1)); fi
}
check vng_exit "$vng_rc" "vng exited with status $vng_rc (the --exec command's)"
grep -q '^VNG: ISM bound ' "$RUN_DIR/vng.out" && st=0 || st=1
check ism_bound $st "$(grep -m1 '^VNG: ISM bound' "$RUN_DIR/vng.out" || echo 'the ism driver bound no function')"
grep -q '^SUMMARY test=echo side=self .* ok$' "$RUN_DIR/vng.out" && st=0 || st=1
check smcd_echo_self $st \
    "$(grep -m1 '^SUMMARY test=echo side=self' "$RUN_DIR/vng.out" || echo 'no SUMMARY line from smctest')"
st=0
grep -q '^CONN .* mode=SMCD ' "$RUN_DIR/vng.out" || st=1
! grep '^CONN ' "$RUN_DIR/vng.out" | grep -qv ' mode=SMCD ' || st=1
check every_conn_smcd $st "$(grep -c '^CONN .* mode=SMCD ' "$RUN_DIR/vng.out") connection line(s), all mode=SMCD"
python3 - "$RUN_DIR/snapshot.json" <<'EOF' && st=0 || st=1
import json, sys
snap = json.load(open(sys.argv[1]))
funcs = snap.get("functions") or []
moved = sum(f["counters"]["moves_out"] + f["counters"]["moves_in"] for f in funcs)
sys.exit(0 if funcs and moved > 0 else 1)
EOF
check emulator_traffic $st "the emulator saw the function attach and move data ($RUN_DIR/summary.txt)"
if [ "$fails" -ne 0 ]; then
    { echo "--- guest output ($RUN_DIR/vng.out):"; tail -n 20 "$RUN_DIR/vng.out"
      echo "--- console ($RUN_DIR/vng.console.log):"; tail -n 30 "$RUN_DIR/vng.console.log"; } >&2
    die "vng-check: $fails check(s) failed; vng's command line: $RUN_DIR/vng.cmd"
fi
cat "$RUN_DIR/summary.txt"
step "vng-check: passed (virtme-ng $VNG_VERSION, kernel $rel); kernel step ${t_kernel} s, vng run ${t_run} s, total $((SECONDS - t_start)) s"
