#!/usr/bin/env bash
# Smoke test of the QEMU patch series without the real emulator: one guest with
#   - an ISM function (zpci ism=on, 0002:00:00.0) served by pcistb-stub.py, which logs
#     every BAR write: the default, every store waited for; its stub announces
#     x_waited_channel, so the waited stores take QEMU's second connection,
#   - as a control, the same kind of vfio-user function WITHOUT ism=on (0003:00:00.0,
#     device id 0x04ee so the ism driver leaves it alone): it must keep stock behaviour,
#   - an ISM function with x-ism-post=on (0004:00:00.0) whose stub announces the
#     capability x_ism_posted_moves and holds a posted move's failure,
# and a tiny initramfs that
#   1. prints the functions' zPCI identity (pchid, pft) from sysfs,
#   2. loads stbtest.ko, which issues PCISTBs of odd shapes and prints their results,
#   3. loads the unmodified ism driver, whose probe stores commands with PCISTB,
# and checks what the guest saw and what the stubs received; then a guest whose server
# dies under it, the plugs QEMU must refuse, and a guest into which QMP hot-plugs servers
# QEMU refuses (nothing may be left behind). Then the series' own tests,
# as built with this QEMU: the qtest (ism/0012) and the functional test (ism/0013,
# which boots the project's stock kernel and initramfs against its in-process stub;
# pycotap from PyPI into a venv in the cache).
#
# Usage: qemu-configs/tests/pcistb-smoke.sh   (PCISTB_SMOKE_KEEP=1 keeps its logs;
#        STBTEST_KO=FILE: a test module built before, for the kernel of its vermagic)
# Needs: make qemu; make kernel (KERNEL=6.12 by default) and its kernel build tree for
#        the test module (KBUILD_DIR, default: the guest-tests kernel work tree named in
#        $BUILD_DIR/kernel-$KERNEL/build-info; the kernel booted is the built variant whose
#        release matches that tree); $BUILD_DIR/initramfs-$KERNEL.cpio.gz for busybox. Prints one line per check and "N passed, M failed"; exits 1 on failures,
#        2 when a prerequisite is missing.
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
no_arguments "$@"

HERE="$REPO_ROOT/qemu-configs/tests"
QEMU="${QEMU:-$BUILD_DIR/qemu/bin/qemu-system-s390x}"
missing() { printf 'pcistb-smoke: prerequisite missing: %s\n' "$*" >&2; exit 2; }

[ -x "$QEMU" ] || missing "QEMU ($QEMU): run make qemu"
[ -f "$BUILD_DIR/kernel-$KERNEL/build-info" ] || missing "guest kernel in $BUILD_DIR/kernel-$KERNEL: run make kernel"
PKGVER="$(sed -n 's/^PKGVER=//p' "$BUILD_DIR/kernel-$KERNEL/build-info")"
KBUILD_DIR="${KBUILD_DIR:-$CACHE_DIR/kernel/work/$PKGVER/obj}"
if [ -n "${STBTEST_KO:-}" ]; then
    # a test module built before: the shared kernel tree may hold another variant by now
    [ -f "$STBTEST_KO" ] || missing "STBTEST_KO=$STBTEST_KO"
    KREL="$(strings -a "$STBTEST_KO" | sed -n 's/^vermagic=\([^ ]*\) .*/\1/p' | head -1)"
else
    [ -f "$KBUILD_DIR/Module.symvers" ] || missing "kernel build tree $KBUILD_DIR (set KBUILD_DIR)"
    KREL="$(cat "$KBUILD_DIR/include/config/kernel.release" 2>/dev/null)"
fi
# The build tree holds whichever variant was built last. A debug variant (KASAN and the
# other detectors: make chaos, the coverage's chaos-debug) is no kernel for this test:
# its guests run several times slower, past the queue checks' timing (found 2026-12-07,
# after a debug build: the queue guest timed out). The stock kernel is then built into
# the tree again: its cached result is set aside for the build, which caches the same
# kernel anew (from a debug tree: 272 s on two cores, 2026-12-07). (build-kernel.sh is
# left alone: its text is part of every kernel's cache key.)
if [ -z "${STBTEST_KO:-}" ] && grep -q '^CONFIG_KASAN=y' "$KBUILD_DIR/.config" 2>/dev/null; then
    step "the kernel tree was last built for a debug variant ($KREL): building the stock kernel into it again"
    # (published first, so that the link names this checkout's stock kernel: cached, seconds)
    KERNEL="$KERNEL" VARIANT=stock GCOV=0 "$REPO_ROOT/guest-tests/build-kernel.sh" >&2 \
        || die "the stock kernel of $KERNEL did not build"
    stock="$(readlink -f "$BUILD_DIR/kernel-$KERNEL")"
    [ -f "$stock/bzImage" ] && [[ "$stock" == "$CACHE_DIR"/kernel/* ]] \
        || missing "the stock kernel's cache entry ($BUILD_DIR/kernel-$KERNEL -> $stock)"
    rm -rf "$stock.aside"; mv -T "$stock" "$stock.aside"
    if KERNEL="$KERNEL" VARIANT=stock GCOV=0 "$REPO_ROOT/guest-tests/build-kernel.sh" >&2; then
        rm -rf "$stock.aside"
    else
        [ -e "$stock" ] || mv -T "$stock.aside" "$stock"
        die "building the stock kernel into $KBUILD_DIR failed"
    fi
    KREL="$(cat "$KBUILD_DIR/include/config/kernel.release" 2>/dev/null)"
fi
# The other variants differ only in net/smc, which stbtest.ko does not touch, so use the
# kernel that matches the tree.
find_kout() {
    KOUT=""
    local d
    for d in "$BUILD_DIR/kernel-$KERNEL" "$BUILD_DIR/kernel-$KERNEL"-*; do
        [ -f "$d/bzImage" ] && [ "$(cat "$d/kernel.release" 2>/dev/null)" = "$KREL" ] && { KOUT="$d"; return 0; }
    done
    return 1
}
if ! find_kout; then
    # The tree was last built for another variant than the ones published in this
    # BUILD_DIR (a fresh clone shares the cache): publish that variant (cached: seconds).
    # build-kernel.sh names a release <upstream version>[-<VARIANT>][-gcov].
    tree_variant="${KREL#"${PKGVER%-*}"}"
    tree_gcov=0
    case "$tree_variant" in *-gcov) tree_gcov=1; tree_variant="${tree_variant%-gcov}" ;; esac
    tree_variant="${tree_variant#-}"
    tree_variant="${tree_variant:-stock}"
    if [[ " $VARIANTS " == *" $tree_variant "* ]]; then
        KERNEL="$KERNEL" VARIANT="$tree_variant" GCOV="$tree_gcov" "$REPO_ROOT/guest-tests/build-kernel.sh" >&2 || true
    else
        # A variant this checkout does not know (an experiment built into the shared
        # tree and never landed, or one removed since) cannot be built from here: its
        # kernel is taken from the cache, where its build left it.
        # (the newest such build: the tree's last)
        cached=""
        for d in "$CACHE_DIR/kernel/$PKGVER-$tree_variant-"*; do
            [ -f "$d/bzImage" ] && [ "$(cat "$d/kernel.release" 2>/dev/null)" = "$KREL" ] || continue
            [ -z "$cached" ] || [ "$d/bzImage" -nt "$cached/bzImage" ] && cached="$d"
        done
        if [ -n "$cached" ]; then
            step "the kernel tree was last built for '$tree_variant', which this checkout does not know: its kernel from $cached"
            ln -sfn "$cached" "$BUILD_DIR/kernel-$KERNEL-$tree_variant"
        fi
    fi
    find_kout || true
fi
[ -n "$KOUT" ] || missing "a built kernel of release '$KREL' (the release of $KBUILD_DIR) in $BUILD_DIR/kernel-$KERNEL* or the cache (building a variant again, e.g. make kernel KERNEL=$KERNEL VARIANT=stock after removing its cache entry, builds the tree for it)"
ISM_KO="$(find "$KOUT/lib/modules/$KREL" -name 'ism.ko*' | head -1)"
[ -n "$ISM_KO" ] || missing "ism.ko in $KOUT/lib/modules/$KREL"
[ -f "$BUILD_DIR/initramfs-$KERNEL.cpio.gz" ] || missing "$BUILD_DIR/initramfs-$KERNEL.cpio.gz (for busybox): run make initramfs"
need_packages qemu-smoke

WORK="$(mktemp -d /tmp/pcistb-smoke.XXXXXX)"
# A QEMU built with ASan and UBSan (make qemu-asan: QEMU=build/qemu-asan/bin/...) writes
# each report into $WORK/san/, which must stay empty. ASan stops QEMU at its first
# report; UBSan goes on, so that every report is seen. Not LeakSanitizer: QEMU leaves
# much to the exit, on purpose, and its report would be all of that.
mkdir -p "$WORK/san"
export ASAN_OPTIONS="log_path=$WORK/san/asan:detect_leaks=0:print_legend=0"
export UBSAN_OPTIONS="log_path=$WORK/san/ubsan:print_stacktrace=1:halt_on_error=0"
sanitized=0
grep -qa __asan_init "$QEMU" && sanitized=1
stub_pid=""
# shellcheck disable=SC2086
cleanup() {
    [ -z "$stub_pid" ] || kill $stub_pid 2>/dev/null || true
    if [ -n "${PCISTB_SMOKE_KEEP:-}" ]; then echo "pcistb-smoke: logs kept in $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
# end_stubs: the stubs of a guest that ran end by themselves once QEMU has gone (they read
# on to the end of the connection); one that QEMU never reached (QEMU refused to start)
# waits in accept() for good. Up to 5 s for the first, then the rest are ended.
end_stubs() {
    local p i alive
    for i in $(seq 50); do
        alive=""
        for p in $stub_pid; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ -n "$alive" ] || break
        sleep 0.1
    done
    kill_stubs
}
# kill_stubs: ends the stubs at once and reaps them.
kill_stubs() {
    # shellcheck disable=SC2086
    kill $stub_pid 2>/dev/null || true
    # shellcheck disable=SC2086
    wait $stub_pid 2>/dev/null || true
    stub_pid=""
}

cp -r "$HERE/stbtest" "$WORK/mod"
if [ -n "${STBTEST_KO:-}" ]; then
    step "stbtest.ko from $STBTEST_KO (release $KREL)"
    cp "$STBTEST_KO" "$WORK/mod/stbtest.ko"
else
    step "building stbtest.ko against $KBUILD_DIR"
    timeout 300 nice make -s -C "$KBUILD_DIR" M="$WORK/mod" ARCH=s390 CROSS_COMPILE=s390x-linux-gnu- modules \
        >"$WORK/mod.log" 2>&1 || { cat "$WORK/mod.log" >&2; die "building stbtest.ko failed"; }
fi

step "building the test initramfs"
mkdir -p "$WORK/ir/bin" "$WORK/ir/proc" "$WORK/ir/sys" "$WORK/ir/dev"
(cd "$WORK/ir" && zcat "$BUILD_DIR/initramfs-$KERNEL.cpio.gz" | cpio -i --quiet bin/busybox) \
    || die "no bin/busybox in $BUILD_DIR/initramfs-$KERNEL.cpio.gz"
cp "$WORK/mod/stbtest.ko" "$WORK/ir/"
decompress_ko "$ISM_KO" "$WORK/ir/ism.ko"
cat >"$WORK/ir/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
dmesg -n 1
for d in /sys/bus/pci/devices/*; do
    echo "SMOKE: PCI $(basename "$d") vendor=$(cat "$d/vendor") device=$(cat "$d/device") pchid=$(cat "$d/pchid") pft=$(cat "$d/pft")"
done
insmod /stbtest.ko dmaread_uid=2
dmesg | grep 'STBT:' | sed 's/^\[[^]]*\] /SMOKE: /'
insmod /ism.ko
sleep 1
for d in /sys/bus/pci/drivers/ism/0*; do [ -e "$d" ] && echo "SMOKE: ism bound $(basename "$d")"; done
echo "SMOKE: END"
poweroff -f
EOF
chmod +x "$WORK/ir/init"
(cd "$WORK/ir" && find . | cpio -o -H newc --quiet | gzip -1) >"$WORK/initrd.cpio.gz"

step "starting the stub and the guest"
python3 "$HERE/pcistb-stub.py" "$WORK/ism.sock" "$WORK/stub.log" --waited-channel --dma-read &
stub_pid=$!
python3 "$HERE/pcistb-stub.py" "$WORK/plain.sock" "$WORK/plain.log" --device-id 0x04ee &
stub_pid="$stub_pid $!"
python3 "$HERE/pcistb-stub.py" "$WORK/post.sock" "$WORK/post.log" --posted-moves &
stub_pid="$stub_pid $!"
for s in ism plain post; do
    wait_for_socket "$WORK/$s.sock" 5 || die "the stub did not create $WORK/$s.sock"
done
rc=0
QEMU="$QEMU" "$REPO_ROOT/qemu-configs/run-guest.sh" --name pcistb-smoke -k "$KOUT/bzImage" \
    -i "$WORK/initrd.cpio.gz" --ism "$WORK/ism.sock" --chid "$CHID" --timeout 120 \
    --log "$WORK/console.log" -- \
    -device zpci,uid=3,fid=3,target=plain3 \
    -device "{\"driver\":\"vfio-user-pci\",\"id\":\"plain3\",\"socket\":{\"type\":\"unix\",\"path\":\"$WORK/plain.sock\"}}" \
    -device "zpci,uid=4,fid=4,target=post4,ism=on,pchid=$CHID,x-ism-post=on" \
    -device "{\"driver\":\"vfio-user-pci\",\"id\":\"post4\",\"x-ism-posted-moves\":true,\"socket\":{\"type\":\"unix\",\"path\":\"$WORK/post.sock\"}}" \
    >/dev/null 2>"$WORK/run.err" || rc=$?
end_stubs

# The server goes away under a guest that keeps storing: the waited store it exits on
# must fail when the connection ends, not at QEMU's 5 s message timeout (vfio-user-fixes/0006), every
# store after that must fail (cc 1), waited or posted (x-ism-post=on, to a stub that
# announces x_ism_posted_moves), and QEMU must say so once, not once per store
# (vfio-user-fixes/0001).
sed 's|^insmod /stbtest.ko dmaread_uid=2$|insmod /stbtest.ko dead=1|; /ism.ko/d; /ism bound/d' "$WORK/ir/init" >"$WORK/init.dead"
install -m 755 "$WORK/init.dead" "$WORK/ir/init"
(cd "$WORK/ir" && find . | cpio -o -H newc --quiet | gzip -1) >"$WORK/initrd-dead.cpio.gz"
python3 "$HERE/pcistb-stub.py" "$WORK/dead.sock" "$WORK/dead.log" --die-on 0x800c00 --posted-moves \
    --waited-channel &
stub_pid=$!
wait_for_socket "$WORK/dead.sock" 5 || die "the stub did not create $WORK/dead.sock"
dead_rc=0
QEMU="$QEMU" "$REPO_ROOT/qemu-configs/run-guest.sh" --name pcistb-dead -k "$KOUT/bzImage" \
    -i "$WORK/initrd-dead.cpio.gz" --ism "$WORK/dead.sock" --chid "$CHID" --timeout 120 --x-ism-post on \
    --log "$WORK/dead.console.log" >/dev/null 2>"$WORK/dead.err" || dead_rc=$?
end_stubs

# ism=on on anything but vfio-user-pci (here an emulated virtio-net function) must stop
# QEMU at start-up with a clear error, before any guest runs.
refuse_rc=0
timeout 30 "$QEMU" -machine s390-ccw-virtio -accel tcg -nodefaults -nographic -S \
    -device zpci,uid=5,fid=5,target=n5,ism=on,pchid=0xff10 \
    -device virtio-net-pci,id=n5,romfile= >"$WORK/refuse.out" 2>&1 || refuse_rc=$?

# A server that cannot take a 4 KiB write in one access cannot serve ISM's stores: QEMU
# must refuse to plug it.
python3 "$HERE/pcistb-stub.py" "$WORK/small.sock" "$WORK/small.log" --max-xfer 2048 &
stub_pid=$!
wait_for_socket "$WORK/small.sock" 5 || die "the stub did not create $WORK/small.sock"
small_rc=0
timeout 30 "$QEMU" -machine s390-ccw-virtio -accel tcg -nodefaults -nographic -S \
    -device zpci,uid=6,fid=6,target=small6,ism=on,pchid=0x1234 \
    -device "{\"driver\":\"vfio-user-pci\",\"id\":\"small6\",\"socket\":{\"type\":\"unix\",\"path\":\"$WORK/small.sock\"}}" \
    >"$WORK/small.out" 2>&1 || small_rc=$?
kill_stubs

# x-ism-post=on for a server whose x_ism_posted_moves was not asked for: QEMU must refuse
# to plug the function, naming the capability, since only the server could keep the
# failure of a posted move, and the client proposes the capability only for a device with
# x-ism-posted-moves=on (ism/0008: ISM semantics stay out of other devices' VERSION). The
# stub announces it unasked. (A server that does not announce it at all: uid 7 of the
# hotplug guest below.)
python3 "$HERE/pcistb-stub.py" "$WORK/nocap.sock" "$WORK/nocap.log" --posted-moves &
stub_pid=$!
wait_for_socket "$WORK/nocap.sock" 5 || die "the stub did not create $WORK/nocap.sock"
nocap_rc=0
timeout 30 "$QEMU" -machine s390-ccw-virtio -accel tcg -nodefaults -nographic -S \
    -device zpci,uid=7,fid=7,target=nocap7,ism=on,pchid=0x1234,x-ism-post=on \
    -device "{\"driver\":\"vfio-user-pci\",\"id\":\"nocap7\",\"socket\":{\"type\":\"unix\",\"path\":\"$WORK/nocap.sock\"}}" \
    >"$WORK/nocap.out" 2>&1 || nocap_rc=$?
kill_stubs

# A plug QEMU refuses must leave nothing behind. Before the guest starts (-S), QMP
# device_add hot-plugs into zpci devices from the command line: a server too small for
# 4 KiB stores (uid 6) and, for x-ism-post=on, one without x_ism_posted_moves (uid 7),
# both refused, and a good server (uid 8). The guest then lists its PCI functions from
# CLP LIST PCI at boot: 0008 must be there, 0006 and 0007 not. (A refusal made after the
# PCI device was attached left a disabled zPCI function pointing to the device qdev then
# freed, and CLP LIST read its entry from freed memory. A refused vfio-user-pci also needs
# vfio-user-fixes/0005, or its finalize aborts QEMU.) A server without MSI-X (uid 9) is refused after
# the attach; QMP then unplugs uid 9's zPCI device, which must go as any other.
sed '/insmod/d; /STBT:/d' "$WORK/ir/init" >"$WORK/init.hp"
install -m 755 "$WORK/init.hp" "$WORK/ir/init"
(cd "$WORK/ir" && find . | cpio -o -H newc --quiet | gzip -1) >"$WORK/initrd-hp.cpio.gz"
python3 "$HERE/pcistb-stub.py" "$WORK/hp6.sock" "$WORK/hp6.log" --max-xfer 2048 &
stub_pid=$!
python3 "$HERE/pcistb-stub.py" "$WORK/hp7.sock" "$WORK/hp7.log" &
stub_pid="$stub_pid $!"
python3 "$HERE/pcistb-stub.py" "$WORK/hp8.sock" "$WORK/hp8.log" &
stub_pid="$stub_pid $!"
python3 "$HERE/pcistb-stub.py" "$WORK/hp9.sock" "$WORK/hp9.log" --no-msix &
stub_pid="$stub_pid $!"
for s in hp6 hp7 hp8 hp9; do
    wait_for_socket "$WORK/$s.sock" 5 || die "the stub did not create $WORK/$s.sock"
done
hp_add() {   # hp_add ID: the QMP device_add of vfio-user-pci ID on $WORK/ID.sock
    printf '{"execute":"device_add","arguments":{"driver":"vfio-user-pci","id":"%s","socket":{"type":"unix","path":"%s"}}}' "$1" "$WORK/$1.sock"
}
QEMU="$QEMU" "$REPO_ROOT/qemu-configs/run-guest.sh" --name pcistb-hotplug -k "$KOUT/bzImage" \
    -i "$WORK/initrd-hp.cpio.gz" --chid "$CHID" --timeout 60 --log "$WORK/hp.console.log" -- \
    -S -qmp "unix:$WORK/hp.qmp,server=on,wait=off" \
    -device "zpci,uid=6,fid=6,target=hp6,ism=on,pchid=$CHID" \
    -device "zpci,uid=7,fid=7,target=hp7,ism=on,pchid=$CHID,x-ism-post=on" \
    -device "zpci,uid=8,fid=8,target=hp8,ism=on,pchid=$CHID" \
    -device "zpci,id=zp9,uid=9,fid=9,target=hp9,ism=on,pchid=$CHID" \
    >/dev/null 2>"$WORK/hp.err" &
hp_pid=$!
python3 "$HERE/qmp.py" "$WORK/hp.qmp" "$(hp_add hp6)" "$(hp_add hp7)" "$(hp_add hp9)" "$(hp_add hp8)" \
    '{"execute":"device_del","arguments":{"id":"zp9"}}' '{"wait-event":"DEVICE_DELETED","timeout":10}' \
    '{"execute":"cont"}' \
    >"$WORK/hp.qmp.out" 2>&1 || true
hp_rc=0
wait $hp_pid || hp_rc=$?
kill_stubs

# The vfio-user client's queue (vfio-user-fixes/0006-0010, ism/0011): two ISM functions
# with x-ism-post=on, message timeout 2 s, whose stubs stop reading for 1 s at the first
# of 1500 posted 4 KiB data moves. Function 2's stub then goes on, and answers a waited
# store 3 s late; function 3's stub exits. The posted backlog must be bounded (past it a write waits:
# the flood takes the stall's time, and some of its writes arrive waited); the late
# reply must leave the stream in step (the next store gets through); and once function
# 3's server is gone with writes still queued, every store fails at once. A control
# function (uid 4, no ism=on), whose stub stalls the same way, gets its flood as 1500
# stores of 128 bytes, 24000 posted 8-byte writes (the generic path): the bound is the
# ISM server's only (its writer may hold the BQL while another kind of server needs QEMU
# to serve its DMA before it answers), so none of them waits.
cat >"$WORK/ir/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
dmesg -n 1
insmod /stbtest.ko queue=1
dmesg | grep 'STBT:' | sed 's/^\[[^]]*\] /SMOKE: /'
echo 0 >/sys/bus/pci/slots/00000003/power; echo "SMOKE: slot 3 off rc=$?"
echo "SMOKE: END"
poweroff -f
INIT
chmod +x "$WORK/ir/init"
(cd "$WORK/ir" && find . | cpio -o -H newc --quiet | gzip -1) >"$WORK/initrd-queue.cpio.gz"
python3 "$HERE/pcistb-stub.py" "$WORK/q2.sock" "$WORK/q2.log" --posted-moves --stall-on 0 \
    --slow-on 0x800d00 &
stub_pid=$!
python3 "$HERE/pcistb-stub.py" "$WORK/q3.sock" "$WORK/q3.log" --posted-moves --stall-on 0 --die-after-stall \
    --partial-request-fd --waited-channel &
stub_pid="$stub_pid $!"
python3 "$HERE/pcistb-stub.py" "$WORK/q4.sock" "$WORK/q4.log" --device-id 0x04ee --stall-on 0 &
stub_pid="$stub_pid $!"
for s in q2 q3 q4; do
    wait_for_socket "$WORK/$s.sock" 5 || die "the stub did not create $WORK/$s.sock"
done
# The guest then turns off function 3, whose server went away with writes queued (its
# hotplug slot: Linux disables it and gives it back, standby), and when the guest has
# powered off, QEMU (-no-shutdown) unplugs it (QMP device_del) and quits. Function 3's
# stub, before it went away, sent the header of a request with a pipe as its descriptor
# and never the body: between the unplug and the quit, that descriptor must no longer be
# open in QEMU (/proc/PID/fd; the half-received request kept it until QEMU exited). The sanitizer
# build runs this QEMU with LeakSanitizer: no allocation of hw/vfio-user may be left
# unreachable at exit. (The queued writes' buffers leaked at unplug, and before that a
# dead server's queue was kept until unplug.) Full stacks for this run only
# (fast_unwind_on_malloc=0): glib has no frame pointers, and the fast unwinder stops in
# g_malloc0().
queue_rc=0
queue_san=(env)
if [ "$sanitized" = 1 ]; then
    mkdir -p "$WORK/leak"
    queue_san=(env "ASAN_OPTIONS=log_path=$WORK/leak/asan:detect_leaks=1:fast_unwind_on_malloc=0:print_legend=0" LSAN_OPTIONS=exitcode=0)
fi
"${queue_san[@]}" QEMU="$QEMU" "$REPO_ROOT/qemu-configs/run-guest.sh" --name pcistb-queue -k "$KOUT/bzImage" \
    -i "$WORK/initrd-queue.cpio.gz" --chid "$CHID" --timeout 120 --log "$WORK/queue.console.log" -- \
    -no-shutdown -qmp "unix:$WORK/queue.qmp,server=on,wait=off" \
    -device "zpci,uid=2,fid=2,target=q2,ism=on,pchid=$CHID,x-ism-post=on" \
    -device "{\"driver\":\"vfio-user-pci\",\"id\":\"q2\",\"x-msg-timeout\":2000,\"x-ism-posted-moves\":true,\"socket\":{\"type\":\"unix\",\"path\":\"$WORK/q2.sock\"}}" \
    -device "zpci,uid=3,fid=3,target=q3,ism=on,pchid=$CHID,x-ism-post=on" \
    -device "{\"driver\":\"vfio-user-pci\",\"id\":\"q3\",\"x-msg-timeout\":2000,\"x-ism-posted-moves\":true,\"socket\":{\"type\":\"unix\",\"path\":\"$WORK/q3.sock\"}}" \
    -device zpci,uid=4,fid=4,target=q4 \
    -device "{\"driver\":\"vfio-user-pci\",\"id\":\"q4\",\"x-msg-timeout\":2000,\"socket\":{\"type\":\"unix\",\"path\":\"$WORK/q4.sock\"}}" \
    >/dev/null 2>"$WORK/queue.err" &
queue_pid=$!
python3 "$HERE/qmp.py" "$WORK/queue.qmp" '{"wait-event":"SHUTDOWN","timeout":110}' \
    '{"execute":"device_del","arguments":{"id":"q3"}}' \
    '{"wait-event":"DEVICE_DELETED","timeout":10}' >"$WORK/queue.qmp.out" 2>&1 || true
partial="$(sed -n 's/^PARTIAL REQUEST: header only, with \(pipe:\[[0-9]*\]\), sent to QEMU pid \([0-9]*\)$/\2 \1/p' "$WORK/q3.log")"
if [ -n "$partial" ]; then
    read -r qpid qpipe <<<"$partial"
    held=0
    for f in /proc/"$qpid"/fd/*; do
        [ "$(readlink "$f" 2>/dev/null)" = "$qpipe" ] && held=1
    done
    [ -d "/proc/$qpid" ] || held=gone
    echo "$qpipe $held" >"$WORK/queue.partial"
fi
python3 "$HERE/qmp.py" "$WORK/queue.qmp" '{"execute":"quit"}' >>"$WORK/queue.qmp.out" 2>&1 || true
wait $queue_pid || queue_rc=$?
if [ "$sanitized" = 1 ]; then
    # what is not a leak report counts with the other sanitizer reports
    for f in "$WORK"/leak/*; do
        [ -f "$f" ] && grep -q 'ERROR: AddressSanitizer' "$f" && cp "$f" "$WORK/san/"
    done
    # One line per leak allocated through hw/vfio-user while the device ran (messages and
    # their buffers). Not what its creation allocated (a stack through realize or a
    # property setter): stock 10.2 leaks 183 bytes of that per unplugged vfio-user-pci
    # (its socket address and a name string), which is not this check's concern.
    python3 - "$WORK"/leak/* >"$WORK/leak.vfio-user" <<'PY'
import re, sys
for path in sys.argv[1:]:
    try:
        text = open(path, errors="replace").read()
    except OSError:
        continue
    for block in re.split(r"\n(?=(?:Direct|Indirect) leak of )", text):
        if re.match(r"(Direct|Indirect) leak of ", block) and " in vfio_user_" in block \
                and not re.search(r" in (device_set_realized|object_property_set)\b", block):
            print(block.splitlines()[0], "|", " ".join(re.findall(r" in (vfio_user_\w+)", block)[:3]))
PY
fi
kill_stubs

# The sweeps (stbtest.ko sweep=1): PCISTB of every shape, then PCILG and PCISTG of 1, 2,
# 4 and 8 bytes, against every address space of an ISM function and of a control
# function, at offsets in and beyond the BARs and just below 2^64 (where offset + length
# wraps in 64 bits); each answer must be the architecture's (stb-sweep-rule.py) and QEMU
# must live. Stores of more than 128 bytes onto the MSI-X table or the PBA of an ISM
# function take the generic path, whose 128-byte buffer they overflowed; one into a BAR
# the function does not implement made the generic path dereference a NULL region; an
# access at an offset just below 2^64 matched the BAR's first-listed subregion (the
# MSI-X table) and was dispatched to it, before the table (pcistb-bounds). Twice: on
# stubs with the default MSI-X layout (table and PBA in BAR 4), and with --msix-split
# (the PBA in BAR 2, the table alone in BAR 4, the layout of the bug's report).
sed 's|^insmod /stbtest.ko queue=1$|insmod /stbtest.ko sweep=1|; /slots\/00000003/d' "$WORK/ir/init" >"$WORK/init.sweep"
install -m 755 "$WORK/init.sweep" "$WORK/ir/init"
(cd "$WORK/ir" && find . | cpio -o -H newc --quiet | gzip -1) >"$WORK/initrd-sweep.cpio.gz"
# run_sweep NAME LAYOUT [STUB-OPTION...]: a sweep guest with an ISM function (uid 2) and a
# control function (uid 3), each on a stub started with the STUB-OPTIONs; its console log
# $WORK/NAME.console.log, the rule's verdict $WORK/NAME.rule, for stubs whose MSI-X
# layout is LAYOUT ("" or "-split", a suffix of stb-sweep-rule.py's KIND). Returns
# run-guest.sh's status (0: the guest powered off, QEMU exited normally).
run_sweep() {
    local name="$1" layout="$2" rc=0
    shift 2
    python3 "$HERE/pcistb-stub.py" "$WORK/$name-ism.sock" "$WORK/$name-ism.log" --waited-channel "$@" &
    stub_pid=$!
    python3 "$HERE/pcistb-stub.py" "$WORK/$name-plain.sock" "$WORK/$name-plain.log" --device-id 0x04ee "$@" &
    stub_pid="$stub_pid $!"
    for s in ism plain; do
        wait_for_socket "$WORK/$name-$s.sock" 5 || die "the stub did not create $WORK/$name-$s.sock"
    done
    QEMU="$QEMU" "$REPO_ROOT/qemu-configs/run-guest.sh" --name "pcistb-$name" -k "$KOUT/bzImage" \
        -i "$WORK/initrd-sweep.cpio.gz" --ism "$WORK/$name-ism.sock" --chid "$CHID" --timeout 120 \
        --log "$WORK/$name.console.log" -- \
        -device zpci,uid=3,fid=3,target=swp3 \
        -device "{\"driver\":\"vfio-user-pci\",\"id\":\"swp3\",\"socket\":{\"type\":\"unix\",\"path\":\"$WORK/$name-plain.sock\"}}" \
        >/dev/null 2>"$WORK/$name.err" || rc=$?
    kill_stubs
    python3 "$HERE/stb-sweep-rule.py" "$WORK/$name.console.log" "0002:00:00.0:ism$layout" \
        "0003:00:00.0:plain$layout" >"$WORK/$name.rule" 2>&1 || true
    return "$rc"
}
sweep_rc=0
run_sweep sweep "" || sweep_rc=$?
split_rc=0
run_sweep sweep-split -split --msix-split || split_rc=$?

# Misbehaving servers: eight ISM functions (uid 2-9, x-msg-timeout 2 s), each on a stub
# that misbehaves in its reply to the guest's waited store at SF+0xf00 (pcistb-stub.py
# --misbehave), on the main connection (m) or on x_waited_channel's (w). After it the
# guest stores once more. QEMU must live, each wait must end within the timeout (at
# once when the server is gone), the store must get cc 1 (-EIO) unless the reply was
# good, and each failure must be reported once. A reply with the ID of a request answered
# before (uid 8) is a protocol error: the connection ends and the store fails.
# Two more (uid 10, 11) behave in their replies but not in the VERSION exchange: one
# announces x_waited_channel and then refuses VFIO_USER_X_WAITED_CHANNEL (the device must
# plug all the same and use the main connection), one announces capabilities QEMU did
# not propose, to a QEMU told x-waited-channel=off (it must not open the channel).
# The last (uid 12, x-ism-post=on) never answers the store at SF+0xf00 in time: it
# sends that reply, an error, only when a later request comes with the same message ID
# (stbtest's alias_uid: 68000 more stores, posted then waited, so QEMU's 16-bit IDs
# wrap); QEMU must not give that ID to a new request while the late reply may come.
# Uid 14 does the same with x_waited_channel open (b: behind a backlog): its stub stalls
# 1 s on a posted store, and the 200 posted 4 KiB moves after it stay queued in QEMU, so
# that the store it answers late leaves on the main connection; the 5000 waited stores
# of the wrap then take the waited channel, and must keep clear of that ID too (each
# request takes its ID from the one helper, whichever connection it goes on).
# One more (uid 13, x-msg-timeout 200 ms) never answers 70 stores, each followed by one it
# answers (stbtest's unanswered_uid): a server that still answers is not gone, however
# many of its requests timed out over the device's life (vfio-user-fixes/0010 takes a server for gone
# after 64 timeouts in a row only).
MIS_MODES="2:hdr-stall:m 3:hdr-exit:m 4:trickle:m 5:trickle:w 6:mid-body-exit:m 7:hdr-stall:w 8:old-id:m 9:huge-size:m 10:refuse-waited-channel:- 11:unsolicited-caps:- 12:late-error:m 13:unanswered:m 14:late-error:b"
sed 's|^insmod /stbtest.ko sweep=1$|insmod /stbtest.ko mis=1 alias_uid=12 alias_wc_uid=14 unanswered_uid=13|' "$WORK/ir/init" >"$WORK/init.mis"
install -m 755 "$WORK/init.mis" "$WORK/ir/init"
(cd "$WORK/ir" && find . | cpio -o -H newc --quiet | gzip -1) >"$WORK/initrd-mis.cpio.gz"
mis_devs=()
for e in $MIS_MODES; do
    IFS=: read -r u mode ch <<<"$e"
    stub_opts=(--misbehave "$mode" --stall-secs 3) dev_props="" zpci_post="" timeout=2000
    [ "$ch" = w ] && stub_opts+=(--waited-channel)
    [ "$ch" = b ] && stub_opts+=(--waited-channel --stall-on 0 --stall-secs 1)
    [ "$mode" = late-error ] && stub_opts+=(--posted-moves) && zpci_post=",x-ism-post=on" \
        && dev_props='"x-ism-posted-moves":true,'
    case "$mode" in
        refuse-waited-channel) stub_opts=(--refuse-waited-channel) ;;
        unsolicited-caps) stub_opts=(--unsolicited-caps) dev_props='"x-waited-channel":false,' ;;
        unanswered) stub_opts=(--never-answer 0x801d00) timeout=200 ;;
    esac
    python3 "$HERE/pcistb-stub.py" "$WORK/m$u.sock" "$WORK/m$u.log" "${stub_opts[@]}" &
    stub_pid="$stub_pid $!"
    mis_devs+=(-device "zpci,uid=$u,fid=$u,target=m$u,ism=on,pchid=$CHID$zpci_post"
               -device "{\"driver\":\"vfio-user-pci\",\"id\":\"m$u\",\"x-msg-timeout\":$timeout,$dev_props\"socket\":{\"type\":\"unix\",\"path\":\"$WORK/m$u.sock\"}}")
done
for e in $MIS_MODES; do
    wait_for_socket "$WORK/m${e%%:*}.sock" 5 || die "the stub did not create $WORK/m${e%%:*}.sock"
done
mis_rc=0
QEMU="$QEMU" "$REPO_ROOT/qemu-configs/run-guest.sh" --name pcistb-mis -k "$KOUT/bzImage" \
    -i "$WORK/initrd-mis.cpio.gz" --chid "$CHID" --timeout 120 --log "$WORK/mis.console.log" -- \
    "${mis_devs[@]}" >/dev/null 2>"$WORK/mis.err" || mis_rc=$?
end_stubs

# The ISM series' own qtest (ism/0012), built with this QEMU: the zpci properties' realize
# and plug errors over QMP.
QTEST_BIN="$(dirname "$QEMU")/../libexec/ism-emu/s390x-zpci-ism-test"
qtest_rc=0
if [ -x "$QTEST_BIN" ]; then
    QTEST_QEMU_BINARY="$QEMU" timeout 120 "$QTEST_BIN" --tap -k >"$WORK/qtest.out" 2>&1 || qtest_rc=$?
else
    echo "no qtest at $QTEST_BIN" >"$WORK/qtest.out"; qtest_rc=127
fi

# The ISM series' functional test (ism/0013), in QEMU's functional-test framework, which
# needs pycotap from PyPI (a venv in the cache). It boots the project's stock kernel and
# initramfs with a shell on the console; its own vfio-user stub runs in the test process.
FUNC_DIR="$(dirname "$QEMU")/../libexec/ism-emu/functional"
PYCOTAP_VERSION=1.3.1
func_venv="$CACHE_DIR/tools/pycotap-$PYCOTAP_VERSION"
func_rc=0
if [ ! -f "$FUNC_DIR/s390x/test_ism_vfio_user.py" ]; then
    echo "no functional test in $FUNC_DIR" >"$WORK/functional.out"; func_rc=127
elif [ ! -f "$BUILD_DIR/kernel-$KERNEL/bzImage" ]; then
    echo "no $BUILD_DIR/kernel-$KERNEL/bzImage" >"$WORK/functional.out"; func_rc=127
else
    if ! "$func_venv/bin/python" -c 'import pycotap' 2>/dev/null; then
        step "pycotap $PYCOTAP_VERSION into $func_venv (for QEMU's functional tests)"
        rm -rf "$func_venv"
        logged "python3 -m venv" python3 -m venv "$func_venv"
        logged "pip install pycotap" timeout 300 "$func_venv/bin/pip" install \
            --disable-pip-version-check "pycotap==$PYCOTAP_VERSION"
    fi
    mkdir -p "$WORK/functional"
    (cd "$WORK/functional" && QEMU_TEST_QEMU_BINARY="$QEMU" QEMU_BUILD_ROOT="$WORK/functional" \
        QEMU_TEST_ISM_KERNEL="$BUILD_DIR/kernel-$KERNEL/bzImage" \
        QEMU_TEST_ISM_INITRD="$BUILD_DIR/initramfs-$KERNEL.cpio.gz" \
        QEMU_TEST_ISM_APPEND="ismtest.mods=none ismtest.shell=1" \
        PYTHONPATH="$FUNC_DIR/python:$FUNC_DIR" \
        timeout 300 "$func_venv/bin/python" "$FUNC_DIR/s390x/test_ism_vfio_user.py") \
        >"$WORK/functional.out" 2>&1 || func_rc=$?
fi

pass=0 fail=0
check() {   # check DESCRIPTION FILE FIXED-STRING
    if grep -qF -- "$3" "$2"; then echo "ok - $1"; pass=$((pass + 1))
    else
        echo "not ok - $1 (no '$3' in $(basename "$2"))"; fail=$((fail + 1))
        # what the file has instead: the lines that start as the expected one (its first
        # two words, e.g. "STBT: 0007:00:00.0"), as TAP diagnostics (a rare failure's logs
        # are gone after the run)
        local head; head="$(echo "$3" | awk '{print $1, $2}')"
        { grep -F -- "$head" "$2" || true; } | tail -n 10 | sed 's/^/#   /'
    fi
}
check_re() {   # check_re DESCRIPTION FILE EXTENDED-REGEX
    if grep -qE -- "$3" "$2"; then echo "ok - $1"; pass=$((pass + 1))
    else echo "not ok - $1 (no line matching '$3' in $(basename "$2"))"; fail=$((fail + 1)); fi
}
check_absent() {
    if grep -qF -- "$3" "$2"; then echo "not ok - $1 (found '$3')"; fail=$((fail + 1))
    else echo "ok - $1"; pass=$((pass + 1)); fi
}
C="$WORK/console.log" S="$WORK/stub.log" P="$WORK/plain.log" SQ="$WORK/post.log"
F=0002:00:00.0 N=0003:00:00.0 Q=0004:00:00.0
if [ "$refuse_rc" -ne 0 ] && [ "$refuse_rc" -ne 124 ]; then echo "ok - ism=on on virtio-net-pci: QEMU refuses to start"; pass=$((pass + 1))
else echo "not ok - ism=on on virtio-net-pci: QEMU exit status $refuse_rc"; fail=$((fail + 1)); fi
check "... saying why" "$WORK/refuse.out" "ism=on requires a vfio-user-pci target, not virtio-net-pci"
check "pchid 0xff10 (Linux's virtual ISM range): a warning, not the error" "$WORK/refuse.out" "warning: zpci pchid 0xff10: Linux reserves 0xff00-0xffff"
if [ "$small_rc" -ne 0 ] && [ "$small_rc" -ne 124 ]; then echo "ok - ISM on a server taking 2048-byte writes: QEMU refuses to start"; pass=$((pass + 1))
else echo "not ok - ISM on a server taking 2048-byte writes: QEMU exit status $small_rc"; fail=$((fail + 1)); fi
check "... saying why" "$WORK/small.out" "zpci small6: an ISM function needs writes of 4096 bytes, its device takes at most 2048"
if [ "$nocap_rc" -ne 0 ] && [ "$nocap_rc" -ne 124 ]; then echo "ok - x-ism-post=on on a server without x_ism_posted_moves: QEMU refuses to start"; pass=$((pass + 1))
else echo "not ok - x-ism-post=on on a server without x_ism_posted_moves: QEMU exit status $nocap_rc"; fail=$((fail + 1)); fi
check "... naming the capability" "$WORK/nocap.out" "zpci nocap7: x-ism-post=on requires a vfio-user server that announces the capability x_ism_posted_moves"
check "... and the property that proposes it" "$WORK/nocap.out" "(proposed by vfio-user-pci with x-ism-posted-moves=on)"
check_absent "... whose VERSION did not propose it" "$WORK/nocap.log" '"x_ism_posted_moves"'
# the capability is device-scoped: proposed by ISM functions (x-ism-posted-moves=on), not
# by the control function
check "VERSION: the ISM function with x-ism-posted-moves=on proposes x_ism_posted_moves" "$SQ" '"x_ism_posted_moves": true'
check "VERSION: the ISM function of run-guest.sh proposes it" "$S" '"x_ism_posted_moves": true'
check_absent "VERSION: the control function does not propose it" "$P" '"x_ism_posted_moves"' 
if [ "$rc" = 0 ]; then echo "ok - guest ran and powered off"; pass=$((pass + 1))
else echo "not ok - guest run failed (rc=$rc)"; cat "$WORK/run.err"; fail=$((fail + 1)); fi
# the ISM function (ism=on)
check "ISM: CLP reports pchid and PFT 5" "$C" "PCI $F vendor=0x1014 device=0x04ed pchid=$CHID pft=0x05"
check_re "ISM: its function group has maxstbl 4096" "$C" "STBT: $F pfgid=0x[0-9a-f]+ maxstbl=4096"
check_absent "ISM: ... not the default group's" "$C" "STBT: $F pfgid=0xff "
check_re "ISM: QEMU proposes x_waited_channel" "$S" '"x_waited_channel": ?true'
check "ISM: ... and opens the second connection when the server agrees" "$S" "WAITED CHANNEL open"
check_re "ISM: ... where its waited stores went" "$S" "^waited channel: [1-9][0-9]* requests"
check_absent "ISM: ... and not to a server that did not agree (control function)" "$SQ" "WAITED CHANNEL"
# QEMU's reply to the stub's DMA_READ of 512 KiB is larger than the socket's send buffer
# and the stub does not read for 1 s: the write takes part of it, and the rest must follow
# (vfio-user-fixes/0003; before it the rest was never written).
check "ISM: a reply the socket took only part of is finished (512 KiB DMA_READ)" "$S" "DMA_READ reply complete"
check "ISM: ... and the stores around it get through" "$C" "STBT: $F DMAREAD rc=0 after rc=0"
check "ISM: 5 bytes at BAR offset 37 from a page-crossing buffer: cc 0" "$C" "STBT: $F A len5 off37 src+4093 (crosses page) rc=0"
check "ISM: ... arrive as one write with the guest's bytes, waited (the default)" "$S" "WRITE r0 off=0x25 len=5 post=False data=fdfeff0001"
check "ISM: 4096 bytes from a misaligned buffer: cc 0" "$C" "STBT: $F B len4096 off0x1000 src+3 rc=0"
check "ISM: ... arrive as one 4096-byte write" "$S" "WRITE r0 off=0x1000 len=4096 post=False data=030405060708090a"
check "ISM: 1 byte: one write" "$S" "WRITE r0 off=0x2fff len=1 post=False data=01"
check "ISM: crossing a 4K boundary of the PCI offset: program exception (-ENXIO)" "$C" "STBT: $F D len8 off0x3ffc (crosses 4K of PCI offset) rc=-6"
check_absent "ISM: ... and nothing sent" "$S" "off=0x3ffc"
check "ISM: 4097 bytes: program exception (-ENXIO)" "$C" "STBT: $F E len4097 off0x5000 rc=-6"
check "ISM: store the device rejects: cc 1 (-EIO) in the guest" "$C" "STBT: $F F len16 offSF+0x800 (device rejects) rc=-5"
check "ISM: ... after one waited write (signal) in guest byte order" "$S" "WRITE r0 off=0x800800 len=16 post=False data=08090a0b0c0d0e0f1011121314151617"
# Whatever errno the device answers (also those QEMU's helpers use for their own outcomes:
# ENOENT, ERANGE, ENOTSUP): cc 1, and the store reached the device exactly once.
for e in F2:0x880:ENOENT F3:0x900:ERANGE F4:0x980:ENOTSUP F5:0xa00:EIO; do
    IFS=: read -r case off errno <<<"$e"
    check "ISM: device answers $errno: cc 1 (-EIO) in the guest" "$C" "STBT: $F $case len16 offSF+$off (device: $errno) rc=-5"
    n="$(grep -c "^WRITE r0 off=0x800${off#0x} " "$S" || true)"
    if [ "$n" = 1 ]; then echo "ok - ISM: ... the store reached the device once"; pass=$((pass + 1))
    else echo "not ok - ISM: ... the store reached the device $n times, not once (stub log: off=0x800${off#0x})"; fail=$((fail + 1)); fi
done
# QEMU 10.2's vfio-user client does not look at the count in a REGION_WRITE reply (it
# returns the count it sent), so a short write cannot be seen here: cc 0.
check "ISM: device answers a short write: the client reports it whole (cc 0)" "$C" "STBT: $F F6 len16 offSF+0xa80 (device: short write) rc=0"
check "ISM: outside the BAR: program exception (-ENXIO)" "$C" "STBT: $F G len8 off0x1200000 (beyond 16M BAR) rc=-6"
# The default (x-ism-post=off): every store is waited for and gets the device's true
# result. A data move the device rejects fails at once (cc 1), nothing is held for it,
# and the next valid signalling store into the same target lands (cc 0).
check "ISM: a data move the device rejects (no signal): cc 1 (-EIO) at once" "$C" "STBT: $F H len16 off0xb00 (device rejects, no signal) rc=-5"
check "ISM: ... sent waited" "$S" "WRITE r0 off=0xb00 len=16 post=False"
check "ISM: the next valid signalling store into the same target: cc 0" "$C" "STBT: $F H2 len16 offSF+0xb80 (next signal) rc=0"
check "ISM: the signalling store after it: cc 0" "$C" "STBT: $F H3 len16 offSF+0xb80 (the signal after) rc=0"
n="$(grep -c '^WRITE r0 off=0x800b80 len=16 post=False ' "$S" || true)"
if [ "$n" = 2 ]; then echo "ok - ISM: ... both reached the stub, waited"; pass=$((pass + 1))
else echo "not ok - ISM: ... $n of the 2 signalling stores reached the stub waited"; fail=$((fail + 1)); fi
check_absent "ISM: ... and the stub held no failure" "$S" "HELD"
check_absent "ISM: no store posted (x-ism-post=off)" "$S" "post=True"
check "ISM: QEMU proposes x_ism_posted_moves in its VERSION request" "$S" '"x_ism_posted_moves": true'
check "ISM: driver's REG_SBA header as one big-endian 8-byte write" "$S" "WRITE r2 off=0x0 len=8 post=False data=0000000100000010"
check "ISM: driver's REG_IEQ payload as one 16-byte write" "$S" "WRITE r2 off=0x8 len=16 post=False"
check "ISM: driver probed (bound)" "$C" "SMOKE: ism bound $F"
# x-ism-post=on (ism/0009), on a stub that announced x_ism_posted_moves: data moves
# without the signal are posted; a posted move's failure is held by the stub and fails
# every later signalling store into that DMB (cc 1), not only the next one.
check "posted: the function plugs (its server announced x_ism_posted_moves)" "$C" "PCI $Q vendor=0x1014 device=0x04ed pchid=$CHID pft=0x05"
check_absent "posted: ... without QEMU's \"spurious capabilities\" warning" "$WORK/run.err" "spurious capabilities"
check "posted: 5 bytes without the signal: one posted write" "$SQ" "WRITE r0 off=0x25 len=5 post=True data=fdfeff0001"
check "posted: 4096 bytes: one posted write" "$SQ" "WRITE r0 off=0x1000 len=4096 post=True data=030405060708090a"
check "posted: a signalling store the device rejects: cc 1" "$C" "STBT: $Q F len16 offSF+0x800 (device rejects) rc=-5"
check "posted: ... waited" "$SQ" "WRITE r0 off=0x800800 len=16 post=False"
check "posted: a rejected data move without the signal: cc 0" "$C" "STBT: $Q H len16 off0xb00 (device rejects, no signal) rc=0"
check "posted: ... sent posted, its failure held" "$SQ" "WRITE r0 off=0xb00 len=16 post=True"
check "posted: the next signalling store into that DMB: the held failure, cc 1 (-EIO)" "$C" "STBT: $Q H2 len16 offSF+0xb80 (next signal) rc=-5"
check "posted: ... and the one after it: cc 1 (held until the DMB is reset)" "$C" "STBT: $Q H3 len16 offSF+0xb80 (the signal after) rc=-5"
n="$(grep -c 'REPORTED HELD' "$SQ" || true)"
if [ "$n" = 2 ]; then echo "ok - posted: ... both answered by the stub with the held failure"; pass=$((pass + 1))
else echo "not ok - posted: the stub answered $n signalling stores with the held failure, not 2"; fail=$((fail + 1)); fi
check "posted: command headers still waited" "$SQ" "WRITE r2 off=0x0 len=8 post=False data=0000000100000010"
check "posted: driver probed (bound)" "$C" "SMOKE: ism bound $Q"
# the control function (no ism=on): stock behaviour
check "control: CLP reports pchid 0, PFT 0" "$C" "PCI $N vendor=0x1014 device=0x04ee pchid=0x0000 pft=0x00"
check "control: the default function group, maxstbl 128" "$C" "STBT: $N pfgid=0xff maxstbl=128"
check "control: 5 bytes: specification exception as before" "$C" "STBT: $N A len5 off37 src+4093 (crosses page) rc=-6"
check "control: 4096 bytes (> maxstbl 128): specification exception as before" "$C" "STBT: $N B len4096 off0x1000 src+3 rc=-6"
check "control: 16 aligned bytes: accepted as before" "$C" "STBT: $N F len16 offSF+0x800 (device rejects) rc=0"
check "control: ... as two 8-byte writes as before" "$P" "WRITE r0 off=0x800808 len=8"
# pcistb-byte-order: the generic path's doublewords in the guest's byte order on any host
check_re "control: ... each in the guest's byte order" "$P" "^WRITE r0 off=0x800800 len=8 post=[A-Za-z]+ data=08090a0b0c0d0e0f$"
check_re "control: ... the second one too" "$P" "^WRITE r0 off=0x800808 len=8 post=[A-Za-z]+ data=1011121314151617$"
# refused hot plugs leave nothing behind
check "hotplug: a server too small for 4 KiB stores: device_add refused, saying why" "$WORK/hp.qmp.out" \
    "error device_add: zpci hp6: an ISM function needs writes of 4096 bytes, its device takes at most 2048"
check "hotplug: x-ism-post=on, a server without x_ism_posted_moves: refused, naming it" "$WORK/hp.qmp.out" \
    "error device_add: zpci hp7: x-ism-post=on requires a vfio-user server that announces the capability x_ism_posted_moves"
check "hotplug: a good server: plugged" "$WORK/hp.qmp.out" "ok device_add"
if [ "$hp_rc" = 0 ]; then echo "ok - hotplug: the guest ran and powered off"; pass=$((pass + 1))
else echo "not ok - hotplug: guest run failed (rc=$hp_rc)"; tail -n 5 "$WORK/hp.err"; fail=$((fail + 1)); fi
check "hotplug: the guest's CLP LIST has the plugged function" "$WORK/hp.console.log" "SMOKE: PCI 0008:00:00.0 vendor=0x1014 device=0x04ed pchid=$CHID pft=0x05"
check_absent "hotplug: ... not the one refused for its transfer size" "$WORK/hp.console.log" "SMOKE: PCI 0006:"
check_absent "hotplug: ... nor the one refused for the capability" "$WORK/hp.console.log" "SMOKE: PCI 0007:"
check "hotplug: a server without MSI-X: refused (s390x requires MSI-X)" "$WORK/hp.qmp.out" \
    "error device_add: MSI-X support is mandatory in the S390 architecture"
check_absent "hotplug: ... and not in the guest's CLP LIST (the refusal came after the attach)" "$WORK/hp.console.log" "SMOKE: PCI 0009:"
# the refusal undid the plug (ism/0007): its zPCI device then unplugs like any other
# (it looked at the IOMMU the refusal had cleared: QEMU crashed)
check "hotplug: ... and its zPCI device unplugs afterwards (QMP device_del)" "$WORK/hp.qmp.out" "event DEVICE_DELETED"
# the vfio-user client's queue
QC="$WORK/queue.console.log" F2=0002:00:00.0 F3=0003:00:00.0
if [ "$queue_rc" = 0 ]; then echo "ok - queue: the guest ran and powered off"; pass=$((pass + 1))
else echo "not ok - queue: guest run failed (rc=$queue_rc)"; tail -n 5 "$WORK/queue.err"; fail=$((fail + 1)); fi
check "queue: the unplug of function 3 (its server gone with writes queued) completes" "$WORK/queue.qmp.out" "event DEVICE_DELETED"
check "queue: function 3's server sent half a request, with a descriptor, before it went away" "$WORK/q3.log" "PARTIAL REQUEST: header only"
read -r qpipe held <"$WORK/queue.partial" 2>/dev/null || held=unknown
if [ "$held" = 0 ]; then echo "ok - queue: ... the unplug closed its descriptor ($qpipe no longer open in QEMU)"; pass=$((pass + 1))
else echo "not ok - queue: the half-received request's descriptor after the unplug: ${qpipe:-?} held=$held (1: still open in QEMU)"; fail=$((fail + 1)); fi
if [ "$sanitized" = 1 ]; then
    n="$(grep -c . "$WORK/leak.vfio-user" || true)"
    if [ "$n" = 0 ] && grep -qs 'LeakSanitizer' "$WORK"/leak/*; then
        echo "ok - queue: LeakSanitizer: nothing of hw/vfio-user leaked after the unplug"; pass=$((pass + 1))
    else echo "not ok - queue: LeakSanitizer: $n leaks allocated through hw/vfio-user (or LeakSanitizer did not run)"
        head -n 5 "$WORK/leak.vfio-user"; fail=$((fail + 1)); fi
fi
ms_of() {   # ms_of CASE: the ms= of function 2's QUEUE line for CASE, or -1
    sed -n "s/.*STBT: $F2 QUEUE $1 .*ms=\([0-9]*\).*/\1/p" "$QC" | head -1 | grep . || echo -1
}
check "queue: 1500 posted 4 KiB moves into a stalled server: none fails" "$QC" "STBT: $F2 QUEUE flood n=1500 len=4096 failed=0 "
n="$(ms_of flood)"
if [ "$n" -ge 700 ]; then echo "ok - queue: ... the guest waits for the stalled server (${n} ms): the backlog is bounded"; pass=$((pass + 1))
else echo "not ok - queue: the flood took ${n} ms, not the 1 s stall: posted writes piled up without bound"; fail=$((fail + 1)); fi
n="$(grep -c '^WRITE r0 off=0x[0-9a-f]* len=4096 post=False' "$WORK/q2.log" || true)"
if [ "$n" -ge 1 ]; then echo "ok - queue: ... past the bound a posted write waits ($n arrived waited)"; pass=$((pass + 1))
else echo "not ok - queue: no write of the flood arrived waited"; fail=$((fail + 1)); fi
n="$(grep -c '^WRITE r0 off=0x[0-9a-f]* len=4096 ' "$WORK/q2.log" || true)"
if [ "$n" = 1500 ]; then echo "ok - queue: ... and all 1500 reached the server"; pass=$((pass + 1))
else echo "not ok - queue: $n of the 1500 flood writes reached the server"; fail=$((fail + 1)); fi
check "queue: control function: 1500 stores of 128 bytes into a stalled server: none fails" "$QC" \
    "STBT: 0004:00:00.0 QUEUE flood n=1500 len=128 failed=0 "
n="$(grep -c '^WRITE r0 off=0x[0-9a-f]* len=[0-9]* post=False' "$WORK/q4.log" || true)"
if [ "$n" = 0 ]; then echo "ok - queue: control function: no write waits for the backlog (the bound is the ISM server's)"; pass=$((pass + 1))
else echo "not ok - queue: control function: $n of its posted writes waited for the backlog"; fail=$((fail + 1)); fi
# (QEMU quits before the stub has read the whole flood: the guest's time tells instead)
n="$(sed -n 's/.*STBT: 0004:00:00.0 QUEUE flood n=1500 len=128 failed=[0-9]* ms=\([0-9]*\).*/\1/p' "$QC" | head -1)"
if [ -n "$n" ] && [ "$n" -lt 700 ]; then echo "ok - queue: control function: ... the guest did not wait for the stalled server (${n} ms; it stalls 1 s)"; pass=$((pass + 1))
else echo "not ok - queue: control function: the flood took '${n:-?}' ms: its writer waited for the stalled server"; fail=$((fail + 1)); fi
check "queue: a waited store answered after QEMU's 2 s timeout: cc 1 (-EIO)" "$QC" "STBT: $F2 QUEUE slow rc=-5 "
check "queue: the store after it gets through: the late reply was drained (cc 0)" "$QC" "STBT: $F2 QUEUE after-slow rc=0"
check "queue: ... and reached the server" "$WORK/q2.log" "WRITE r0 off=0x800d80 len=16 post=False"
check "queue: 20 more stores: none fails" "$QC" "STBT: $F2 QUEUE last20 failed=0 "
check "queue: server gone with writes still queued: the 20 stores after it all fail" "$QC" "STBT: $F3 QUEUE last20 failed=20 "
n="$(sed -n "s/.*STBT: $F3 QUEUE last20 failed=[0-9]* ms=\([0-9]*\).*/\1/p" "$QC" | head -1)"
if [ -n "$n" ] && [ "$n" -lt 1000 ]; then echo "ok - queue: ... at once (${n} ms for 20), none waits for a timeout"; pass=$((pass + 1))
else echo "not ok - queue: the 20 stores after the server went away took ${n:-?} ms"; fail=$((fail + 1)); fi
# the sweeps: PCISTB (15 offsets x 9 address spaces x 11 lengths), PCILG and PCISTG (10
# offsets x 9 address spaces x 4 lengths each), on both MSI-X layouts
for run in "sweep:sweep:$sweep_rc" "sweep-split:sweep, MSI-X split (PBA in BAR 2, the table alone in BAR 4):$split_rc"; do
    IFS=: read -r name what rc_ <<<"$run"
    if [ "$rc_" = 0 ]; then echo "ok - $what: the guest ran and powered off (QEMU lived)"; pass=$((pass + 1))
    else echo "not ok - $what: guest run failed (rc=$rc_)"; tail -n 5 "$WORK/$name.err"; fail=$((fail + 1)); fi
    for fk in 0002:00:00.0:ISM 0003:00:00.0:control; do
        check "$what: ${fk##*:}: 1485 PCISTBs" "$WORK/$name.console.log" "STBT: ${fk%:*} SWEEP done stores=1485"
        check "$what: ${fk##*:}: every PCISTB's answer as the architecture's rule" "$WORK/$name.rule" "SWEEP ${fk%:*} shapes=1485 mismatches=0"
        check "$what: ${fk##*:}: 360 PCILGs and 360 PCISTGs" "$WORK/$name.console.log" "STBT: ${fk%:*} LGSG done loads=360 stores=360"
        check "$what: ${fk##*:}: every PCILG's and PCISTG's answer as the rule" "$WORK/$name.rule" "LGSG ${fk%:*} shapes=720 mismatches=0"
    done
    grep MISMATCH "$WORK/$name.rule" | head -10 || true
done
# misbehaving servers
MC="$WORK/mis.console.log" MQ="$WORK/mis.qemu.log"
if [ "$mis_rc" = 0 ]; then echo "ok - misbehaving servers: the guest ran and powered off (QEMU lived)"; pass=$((pass + 1))
else echo "not ok - misbehaving servers: guest run failed (rc=$mis_rc)"; tail -n 5 "$WORK/mis.err"; fail=$((fail + 1)); fi
# uid:what:store rc:most ms the vCPU may wait:rc of the store after it ("-": either)
for e in "2:reply header, then a stall (main connection):-5:3000:0" \
         "3:reply header, then exit:-5:1000:-5" \
         "4:reply header, then a byte a second (main connection):-5:3000:-" \
         "5:reply header, then a byte a second (waited channel):-5:3000:-" \
         "6:exit in the middle of the body:-5:1000:-5" \
         "7:reply header, then a stall (waited channel):-5:3000:0" \
         "8:a reply with an old ID first (a protocol error):-5:1000:-5" \
         "9:a reply declaring 2 GiB:-5:1000:-5" \
         "10:VFIO_USER_X_WAITED_CHANNEL refused:0:1000:0" \
         "11:unsolicited capabilities:0:1000:0" \
         "12:no reply in time, then a late error reply:-5:3000:0" \
         "13:70 stores never answered, each followed by one it answers:0:1000:0" \
         "14:no reply in time behind a backlog (waited channel open), then a late error reply:-5:3000:0"; do
    IFS=: read -r u what want_rc max_ms after_rc <<<"$e"
    fn="$(printf '%04x:00:00.0' "$u")"
    line="$(grep -F "STBT: $fn MIS store " "$MC" | head -1 || true)"
    rc_="$(sed -n 's/.* rc=\([-0-9]*\) .*/\1/p' <<<"$line")" ms_="$(sed -n 's/.* ms=\([0-9]*\).*/\1/p' <<<"$line")"
    if [ "$rc_" = "$want_rc" ] && [ -n "$ms_" ] && [ "$ms_" -le "$max_ms" ]; then
        echo "ok - misbehaving server, $what: rc $rc_ after ${ms_} ms (at most $max_ms)"; pass=$((pass + 1))
    else echo "not ok - misbehaving server, $what: rc '${rc_:-?}' after '${ms_:-?}' ms, not rc $want_rc within $max_ms ms"; fail=$((fail + 1)); fi
    if [ "$after_rc" != - ]; then
        check "misbehaving server, $what: the store after it: rc $after_rc" "$MC" "STBT: $fn MIS after rc=$after_rc "
    fi
    if [ "$want_rc" != 0 ]; then
        n="$(grep -cF "Further failed accesses to vfio-user:$WORK/m$u.sock " "$MQ" || true)"
        if [ "$n" = 1 ]; then echo "ok - misbehaving server, $what: reported once"; pass=$((pass + 1))
        else echo "not ok - misbehaving server, $what: $n 'Further failed accesses' lines, not 1"; fail=$((fail + 1)); fi
    fi
done
check "misbehaving server, old ID: the stub sent the old reply first" "$WORK/m8.log" "a reply with the old ID"
# a reply to no request the server still owes (it answered that ID before) is a protocol
# error, as in stock QEMU; only the reply to a request that timed out is read and dropped
# (uid 12)
check "misbehaving server, old ID: QEMU takes it for a protocol error" "$MQ" "unexpected reply"
# one report per failing server; uid 13's every other store reaches its server, which
# ends the quiet period (vfio-user-fixes/0001), so each of its 70 timeouts is reported
n="$(grep -cE 'vfio_user_device_io_region_(write|read):' "$MQ" || true)"
n13="$(grep -cF "Further failed accesses to vfio-user:$WORK/m13.sock " "$MQ" || true)"
if [ "$((n - n13))" -le 10 ]; then echo "ok - misbehaving servers: $((n - n13)) failed-access lines for the 10 other functions with failed stores"; pass=$((pass + 1))
else echo "not ok - misbehaving servers: $((n - n13)) failed-access lines for the 10 other functions with failed stores"; fail=$((fail + 1)); fi
if [ "$n13" = 70 ]; then echo "ok - unanswered: each of the 70 timeouts reported (a reply came between them)"; pass=$((pass + 1))
else echo "not ok - unanswered: $n13 reports of its timeouts, not 70"; fail=$((fail + 1)); fi
check "late reply: 68000 stores after it, none fails (no newer request took its ID)" "$MC" \
    "STBT: 000c:00:00.0 ALIAS posted=63000 failed=0 waited=5000 failed=0 "
check_re "late reply: ... QEMU's IDs wrapped, and no request came with the late reply's ID" "$WORK/m12.log" \
    "^withheld reply 0x[0-9a-f]+ never sent: no request took its ID in (6553[6-9]|655[4-9][0-9]|65[6-9][0-9]{2}|6[6-9][0-9]{3}|[7-9][0-9]{4}|[0-9]{6,}) messages"
check "late reply, waited channel open: 201 posted stores into the stalled stub, none fails" "$MC" \
    "STBT: 000e:00:00.0 BACKLOG n=201 failed=0"
check_re "late reply, waited channel open: ... the late store left on the main connection" "$WORK/m14.log" \
    "^MISBEHAVE late-error \\(id 0x[0-9a-f]+, on the main connection\\)"
check "late reply, waited channel open: 68000 stores after it, none fails" "$MC" \
    "STBT: 000e:00:00.0 ALIAS posted=63000 failed=0 waited=5000 failed=0 "
n="$(sed -n 's/^waited channel: \([0-9]*\) requests.*/\1/p' "$WORK/m14.log" | head -1)"
if [ "${n:-0}" -ge 4000 ]; then echo "ok - late reply, waited channel open: ... its waited stores took the waited channel ($n requests)"; pass=$((pass + 1))
else echo "not ok - late reply, waited channel open: ${n:-no} requests on the waited channel, not the 5000 waited stores"; fail=$((fail + 1)); fi
check_absent "late reply, waited channel open: ... and no request came with the late reply's ID" "$WORK/m14.log" "ALIAS:"
check_re "late reply, waited channel open: ... though QEMU's IDs wrapped" "$WORK/m14.log" \
    "^withheld reply 0x[0-9a-f]+ never sent: no request took its ID in (6553[6-9]|655[4-9][0-9]|65[6-9][0-9]{2}|6[6-9][0-9]{3}|[7-9][0-9]{4}|[0-9]{6,}) messages"
check "unanswered: 70 stores timed out, and the 70 the server answered all succeeded" "$MC" \
    "STBT: 000d:00:00.0 UNANSWERED n=70 timedout=70 answered_failed=0"
check "unanswered: ... the stub left 70 requests unanswered" "$WORK/m13.log" "never answered: 70 requests"
check_absent "unanswered: ... QEMU did not take the server for gone" "$MQ" "requests unanswered"
check_absent "unanswered: ... nor for a server that left them in a row" "$MQ" "in a row unanswered"
check "x_waited_channel refused: the stub refused it" "$WORK/m10.log" "X_WAITED_CHANNEL refused"
check "x_waited_channel refused: QEMU warns and takes the main connection" "$MQ" "the server refused the waited channel"
check_absent "x-waited-channel=off: QEMU does not propose x_waited_channel" "$WORK/m11.log" '"x_waited_channel"'
check_absent "x-waited-channel=off: ... nor opens it when the server announces it unasked" "$WORK/m11.log" "X_WAITED_CHANNEL requested"
# the series' qtest
if [ "$qtest_rc" = 0 ]; then echo "ok - qtest s390x-zpci-ism-test: passed"; pass=$((pass + 1))
else echo "not ok - qtest s390x-zpci-ism-test: status $qtest_rc"; tail -n 20 "$WORK/qtest.out"; fail=$((fail + 1)); fi
for t in needs-pchid pchid-needs-ism refuses-other-targets virtual-range-pchid plain-function-unchanged properties; do
    check_re "qtest: $t" "$WORK/qtest.out" "^ok [0-9]+ /s390x/zpci/ism/$t\$"
done
# the series' functional test: it passes, and was not skipped
if [ "$func_rc" = 0 ]; then echo "ok - functional test_ism_vfio_user: passed"; pass=$((pass + 1))
else echo "not ok - functional test_ism_vfio_user: status $func_rc"; tail -n 20 "$WORK/functional.out"; fail=$((fail + 1)); fi
check_re "functional: the ISM driver probed over vfio-user, checked from both sides" "$WORK/functional.out" \
    "^ok 1 test_ism_vfio_user\.S390IsmVfioUser\.test_ism_driver_probe\$"
# a server that goes away (vfio-user patch)
D="$WORK/dead.console.log" DQ="$WORK/dead.qemu.log"
if [ "$dead_rc" = 0 ]; then echo "ok - dead server: the guest ran on and powered off"; pass=$((pass + 1))
else echo "not ok - dead server: guest run failed (rc=$dead_rc)"; cat "$WORK/dead.err"; fail=$((fail + 1)); fi
check "dead server: the store it died on fails (cc 1)" "$D" "STBT: $F DEAD first rc=-5"
n="$(sed -n "s/.*STBT: $F DEAD first rc=[-0-9]* ms=\([0-9]*\).*/\1/p" "$D" | head -1)"
if [ -n "$n" ] && [ "$n" -lt 2000 ]; then echo "ok - dead server: ... when the connection ends (${n} ms), not at the 5 s message timeout"; pass=$((pass + 1))
else echo "not ok - dead server: the store in flight when the server died took ${n:-?} ms (the message timeout is 5000)"; fail=$((fail + 1)); fi
check "dead server: the 20 stores after it, waited and posted, all fail" "$D" "STBT: $F DEAD after=20 failed=20"
n_lines="$(grep -cE 'vfio_user_device_io_region_(write|read):' "$DQ" 2>/dev/null || true)"
if [ "${n_lines:-0}" -eq 1 ]; then echo "ok - dead server: QEMU reports the failed accesses once"; pass=$((pass + 1))
else echo "not ok - dead server: QEMU printed ${n_lines:-0} lines for the failed accesses, not 1"; fail=$((fail + 1)); fi
check "dead server: ... saying that more go unreported" "$DQ" "Further failed accesses to"
check "dead server: ... with the stores on the waited channel (x_waited_channel)" "$WORK/dead.log" "WAITED CHANNEL open"
if [ "$sanitized" = 1 ]; then
    # A log that holds only ASan's warning about QEMU's coroutines (makecontext and
    # swapcontext: "may produce false positives") is no report.
    mapfile -t san_reports < <(grep -lE 'ERROR: AddressSanitizer|runtime error:|SUMMARY: ' "$WORK"/san/* 2>/dev/null || true)
    if [ "${#san_reports[@]}" = 0 ]; then
        echo "ok - sanitizer build: no ASan or UBSan report ($(find "$WORK/san" -type f | wc -l) QEMU runs logged only ASan's coroutine warning)"; pass=$((pass + 1))
    else echo "not ok - sanitizer build: ${#san_reports[@]} reports"; head -n 40 "${san_reports[@]}"; fail=$((fail + 1)); fi
fi
echo "$pass passed, $fail failed"
if [ "$fail" -ne 0 ]; then
    echo "--- console:"; grep -E 'SMOKE|STBT' "$C" | tail -30
    echo "--- stub logs:"; cut -c1-160 "$S" "$P" "$SQ" | tail -60
    exit 1
fi
