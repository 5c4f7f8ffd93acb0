#!/usr/bin/env python3
"""Minimal vfio-user "ISM" stub for testing the QEMU patches, not the device.

Serves ONE client on a unix socket, exposes 1014:04ED with BAR 0 (16 MiB), BAR 2 (4 KiB
command area), BAR 4 (MSI-X table), plain MSI and MSI-X, and logs every BAR region
write as

    WRITE r<region> off=0x<offset> len=<n> post=<True|False> data=<hex bytes>

so a test can check that each PCISTB arrived as ONE write with the guest's bytes.
ISM commands (8-byte header store at BAR 2 offset 0) are answered with ret 0 and the
response length the Linux driver expects. Rejected with an error reply:
  - BAR 0 writes at offsets SF+0x800, +0x880, +0x900, +0x980 and +0xa00 (SF = 0x800000,
    the signal flag of an ISM data move, so the patched QEMU waits for them), with
    EINVAL, ENOENT, ERANGE, EOPNOTSUPP (= ENOTSUP) and EIO: to test the guest-visible
    condition code whatever the errno, also the errnos QEMU's own helpers use for their
    own outcomes;
  - with --reject-cmd N: the header store of command N (EINVAL, response ret 0xFFFF).
MSI-X has one vector: its table (16 bytes) at BAR 4 offset 0, its PBA (8 bytes) at BAR 4
offset 0x800; with --msix-split the PBA is at BAR 2 offset 0 instead, so that the table
is the only MSI-X structure in BAR 4 (as a vfio-pci function may have it).
A BAR 0 write at offset SF+0xa80 is answered as a short write (the reply's count is one
less than the write's).

A BAR 0 write at 0xb00 (no signal) is a data move that fails, as ism-emu fails one:
  - waited for (no No_reply flag): an error reply (EIO), its true result; nothing is
    kept, so the next signalling write lands;
  - posted (No_reply), which QEMU may only do when the stub announced the capability
    x_ism_posted_moves (--posted-moves): the failure is held for its "DMB" (the stub's
    DMB is the 4 KiB page of the offset without the signal flag) and every later
    signalling write into that DMB is answered with EIO without being executed. The
    stub has no DMB owner that could reset the buffer: a held failure lasts until the
    client disconnects.
A posted BAR write to a stub that did not announce x_ism_posted_moves is logged as
"POSTED WITHOUT x_ism_posted_moves" (for a control function without ism=on, whose
generic stores vfio-user posts anyway, that is expected).
The client's VERSION proposal is logged as "VERSION client <json>".
With --die-on OFFSET, a BAR 0 write at OFFSET makes the stub exit at once without a
reply: the server is gone.
With --stall-on OFFSET, a BAR 0 write at OFFSET makes the stub stop reading for
--stall-secs seconds (QEMU's queue of posted writes grows meanwhile), then go on, or
exit without reading any more with --die-after-stall; with --partial-request-fd as well,
it first sends the header of a DMA_READ request with a pipe as its descriptor, never its
body, and logs "PARTIAL REQUEST" with the pipe's inode and QEMU's pid.
With --slow-on OFFSET, the reply to a waited BAR 0 write at OFFSET comes --slow-secs
seconds late (after QEMU's x-msg-timeout, if that is shorter).
With --waited-channel, the stub announces the experimental capability x_waited_channel
and takes the second connection QEMU then hands it (VFIO_USER_X_WAITED_CHANNEL, logged
as "WAITED CHANNEL open"): it serves the main connection's messages first and replies
on the connection a request came on; a failure there closes that connection only. At
the end it logs "waited channel: N requests".
With --misbehave MODE, the stub misbehaves in its reply to a waited BAR 0 write at
SF+0xf00 (MIS_OFFSET), on whichever connection the request came (logged "MISBEHAVE"):
  hdr-stall      the reply's header, then nothing until QEMU has given up on it (it
                 closes the waited channel, or the next request comes on the main
                 connection) or for --stall-secs, then its body
  hdr-exit       the reply's header, then exit
  trickle        the reply's header, then its body one byte every --trickle-secs
                 (default 1); a failed send (QEMU closed the connection) ends it
  mid-body-exit  the header and half the body, then exit
  old-id         first a reply with the ID of the request answered before, then the
                 real reply
  huge-size      a reply header that declares a size of 0x7fffffff bytes, and no body
  late-error     no reply (QEMU's wait times out); the reply, an error (EIO), is sent
                 late: just before the reply to the next request that comes with the
                 same message ID (after QEMU's 16-bit IDs wrapped), logged "ALIAS".
                 A client that let a new request take the ID of one whose late reply
                 may still come would take that error for the new request's answer.
With --never-answer OFFSET, a waited BAR 0 write at OFFSET gets no reply at all (each
times out in QEMU); at the end the stub logs "never answered: N requests".
With --refuse-waited-channel, the stub announces x_waited_channel but answers
VFIO_USER_X_WAITED_CHANNEL with an error (EINVAL). With --unsolicited-caps, its VERSION
reply carries capabilities the client did not propose: x_waited_channel (whether or not
proposed) and an unknown "x_no_such_capability".
With --dma-read, a waited BAR 0 write at SF+0x1c00 (DMA_READ_OFFSET) of 16 bytes names
a buffer of the guest (its DMA address and length, big-endian): after the reply the stub
sends QEMU a VFIO_USER_DMA_READ of the whole buffer on the main connection and does not
read for --dma-read-wait seconds, so that QEMU's reply (larger than the socket's send
buffer) is written in part; then it reads the reply and logs "DMA_READ reply complete"
if it came whole, with the guest's pattern (stbtest's: byte i is (i * 7 + (i >> 12)) &
0xff), or "DMA_READ reply incomplete" / "DMA_READ reply wrong" otherwise.
The data of a write longer than 64 bytes is logged up to its 64th byte, then "...".
Exits when the client disconnects.

Usage: pcistb-stub.py SOCKET LOGFILE [--reject-cmd N] [--device-id 0xNNNN] [--die-on OFFSET]
                      [--max-xfer BYTES]   (max_data_xfer_size announced; default 1 MiB)
                      [--posted-moves]     (announce "x_ism_posted_moves": true)
                      [--stall-on OFFSET [--stall-secs S] [--die-after-stall [--partial-request-fd]]]
                      [--slow-on OFFSET [--slow-secs S]] [--waited-channel]
                      [--misbehave MODE [--trickle-secs S]] [--refuse-waited-channel]
                      [--unsolicited-caps] [--no-msix] [--msix-split]
                      [--dma-read [--dma-read-wait S]]
"""
import argparse, array, fcntl, json, os, select, socket, struct, termios, time

ap = argparse.ArgumentParser()
ap.add_argument("socket")
ap.add_argument("log")
ap.add_argument("--reject-cmd", type=lambda s: int(s, 0), default=None)
ap.add_argument("--max-xfer", type=lambda s: int(s, 0), default=1 << 20,
                help="max_data_xfer_size announced in the VERSION reply")
ap.add_argument("--die-on", type=lambda s: int(s, 0), default=None,
                help="exit at once, without a reply, on a BAR 0 write at this offset")
ap.add_argument("--posted-moves", action="store_true",
                help='announce the capability "x_ism_posted_moves": true (hold posted failures)')
ap.add_argument("--stall-on", type=lambda s: int(s, 0), default=None,
                help="stop reading for --stall-secs on a BAR 0 write at this offset")
ap.add_argument("--stall-secs", type=float, default=1.0)
ap.add_argument("--die-after-stall", action="store_true",
                help="exit after the stall instead of reading on")
ap.add_argument("--partial-request-fd", action="store_true",
                help="with --die-after-stall: first send a request's header with a pipe as "
                     "its descriptor, and never its body")
ap.add_argument("--slow-on", type=lambda s: int(s, 0), default=None,
                help="reply --slow-secs late to a waited BAR 0 write at this offset")
ap.add_argument("--slow-secs", type=float, default=3.0)
ap.add_argument("--waited-channel", action="store_true",
                help='announce "x_waited_channel": true and take the second connection')
ap.add_argument("--misbehave", choices=["hdr-stall", "hdr-exit", "trickle", "mid-body-exit",
                                        "old-id", "huge-size", "late-error"], default=None,
                help="misbehave in the reply to a waited BAR 0 write at SF+0xf00")
ap.add_argument("--trickle-secs", type=float, default=1.0)
ap.add_argument("--refuse-waited-channel", action="store_true",
                help="announce x_waited_channel, then refuse VFIO_USER_X_WAITED_CHANNEL")
ap.add_argument("--unsolicited-caps", action="store_true",
                help="answer VERSION with capabilities the client did not propose")
ap.add_argument("--never-answer", type=lambda s: int(s, 0), default=None,
                help="never reply to a waited BAR 0 write at this offset (each times out)")
ap.add_argument("--no-msix", action="store_true",
                help="no MSI-X capability (s390x requires one: QEMU must refuse the plug)")
ap.add_argument("--msix-split", action="store_true",
                help="the MSI-X PBA at BAR 2 offset 0, not at BAR 4 offset 0x800 (the table "
                     "stays at BAR 4 offset 0, alone in its BAR)")
ap.add_argument("--dma-read", action="store_true",
                help="answer a write at SF+0x1c00 with a DMA_READ of the buffer it names")
ap.add_argument("--dma-read-wait", type=float, default=1.0,
                help="seconds before the stub reads the DMA_READ's reply")
ap.add_argument("--device-id", type=lambda s: int(s, 0), default=0x04ED,
                help="PCI device id (another id keeps the ism driver off the function)")
args = ap.parse_args()
logf = open(args.log, "a", buffering=1)


def log(*a):
    print(*a, file=logf)


HDR = struct.Struct("<HHIII")   # id, command, size, flags, error
REPLY, NO_REPLY, ERROR = 0x1, 0x10, 0x20
EINVAL, EOPNOTSUPP = 22, 95
# BAR 0 offsets answered with an error reply, and the errno of each
SF = 0x800000
REJECT_BAR0 = {SF | 0x800: EINVAL, SF | 0x880: 2, SF | 0x900: 34, SF | 0x980: EOPNOTSUPP,
               SF | 0xa00: 5}
SHORT_BAR0_OFFSET = SF | 0xa80
HELD_BAR0_OFFSET = 0xb00
MIS_OFFSET = SF | 0xf00
DMA_READ_OFFSET = SF | 0x1c00
DMA_READ = 11
prev_mid = None                                       # ID of the request answered before
withheld = None                                       # late-error: (ID, cmd) of the withheld reply
max_gap = 0                                           # late-error: messages seen since it
held = {}                                             # DMB -> errno of a held failure
never_answered = 0                                    # --never-answer: requests left so
BAR_SIZES = {0: 1 << 24, 2: 4096, 4: 4096}
CONFIG_REGION = 7
# response lengths of the ISM commands that have a payload (others: 8)
RESP_LEN = {0x03: 16, 0x08: 200, 0x0A: 16}

cfg = bytearray(256)
struct.pack_into("<HH", cfg, 0, 0x1014, args.device_id)
struct.pack_into("<H", cfg, 6, 0x10)                  # status: capability list
cfg[9:12] = bytes([0x00, 0x80, 0x02])                 # class: network, other
for bar in BAR_SIZES:
    struct.pack_into("<I", cfg, 0x10 + 4 * bar, 0x4)  # 64-bit memory BAR
cfg[0x34] = 0x40
cfg[0x40:0x42] = bytes([0x05, 0x50])                  # MSI, next 0x50
struct.pack_into("<H", cfg, 0x42, 0x80)               # 64-bit, 1 vector
cfg[0x50:0x52] = bytes([0x11, 0x00])                  # MSI-X, last
struct.pack_into("<HII", cfg, 0x52, 0, 4, 0x800 | 4)  # 1 entry; table BAR4+0, PBA BAR4+0x800
if args.msix_split:
    struct.pack_into("<I", cfg, 0x58, 0 | 2)          # PBA BAR2+0
if args.no_msix:
    cfg[0x41] = 0x00                                  # MSI is the last capability
    cfg[0x50:0x5a] = bytes(10)
cmdbuf = bytearray(4096)

srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    os.unlink(args.socket)
except FileNotFoundError:
    pass
srv.bind(args.socket)
srv.listen(1)
conn, _ = srv.accept()
log("client connected")


posted_now = False      # whether the message being served came with No_reply
waited = None          # the second connection of x_waited_channel, once open
waited_requests = 0
fds_in = []             # descriptors that came with the message being read


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        data, anc, _, _ = sock.recvmsg(n - len(buf), socket.CMSG_SPACE(16 * 4))
        for lvl, typ, d in anc:                       # DMA_MAP fds: not needed here
            if lvl == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(d[: len(d) - len(d) % 4])
                fds_in.extend(fds)
        if not data:
            raise EOFError
        buf += data
    return buf


def reply(mid, cmd, body=b"", err=0):
    global prev_mid
    flags = REPLY | (ERROR if err else 0)
    src.sendall(HDR.pack(mid, cmd, HDR.size + len(body), flags, err) + body)
    prev_mid = mid


def misbehave(mid, cmd, body):
    """The reply to the write at MIS_OFFSET, as --misbehave says."""
    mode = args.misbehave
    hdr = HDR.pack(mid, cmd, HDR.size + len(body), REPLY, 0)
    log(f"MISBEHAVE {mode} (id 0x{mid:x}, on the {'waited' if src is waited else 'main'} connection)")
    if mode == "old-id":
        old = prev_mid if prev_mid is not None else (mid - 1) & 0xffff
        log(f"  a reply with the old ID 0x{old:x} first")
        src.sendall(HDR.pack(old, cmd, HDR.size + len(body), REPLY, 0) + body)
        reply(mid, cmd, body)
        return
    if mode == "late-error":
        global withheld
        withheld = (mid, cmd)
        log("  reply withheld, to be sent late as an error")
        return
    if mode == "huge-size":
        src.sendall(HDR.pack(mid, cmd, 0x7fffffff, REPLY, 0))
        return
    src.sendall(hdr)
    if mode == "hdr-exit":
        log("  DYING after the header")
        os._exit(0)
    if mode == "mid-body-exit":
        src.sendall(body[:len(body) // 2])
        log("  DYING in the middle of the body")
        os._exit(0)
    if mode == "hdr-stall":
        # The stall ends when QEMU has given up on this reply (on the waited channel
        # it closes the channel; on the main connection the guest's next request comes)
        # or after --stall-secs. A fixed stall left the next request, answered only
        # after it, the difference of two timers (its own timeout less the stall's
        # excess over the first one's): 1 s, which a loaded host could eat.
        t0 = time.monotonic()
        ready = select.select([src], [], [], args.stall_secs)[0]
        why = ("QEMU closed the waited channel" if src is waited else "the next request came") \
            if ready else "no sign from QEMU"
        log(f"  the body after {time.monotonic() - t0:.2f} s ({why})")
        src.sendall(body)
        return
    for i in range(len(body)):                        # trickle
        time.sleep(args.trickle_secs)
        src.sendall(body[i:i + 1])
    log("  trickled the whole body")


def dma_read(iova, length):
    """A DMA_READ of the guest's buffer, read back only after --dma-read-wait seconds."""
    mid = 0x7777
    conn.sendall(HDR.pack(mid, DMA_READ, HDR.size + 16, 0, 0) + struct.pack("<QQ", iova, length))
    log(f"DMA_READ sent: 0x{length:x} bytes at 0x{iova:x}; not reading for {args.dma_read_wait} s")
    time.sleep(args.dma_read_wait)
    want = HDR.size + 16 + length
    got = bytearray()
    conn.settimeout(3.0)
    try:
        while len(got) < want:
            # bytes only: a descriptor would belong to a DMA_MAP, which cannot come here
            data = conn.recv(min(want - len(got), 1 << 16))
            if not data:
                break
            got += data
    except socket.timeout:
        pass
    conn.settimeout(None)
    if len(got) >= HDR.size and HDR.unpack_from(got)[3] & ERROR:
        log(f"DMA_READ answered with an error: errno {HDR.unpack_from(got)[4]}")
        return
    if len(got) < want:
        log(f"DMA_READ reply incomplete: {len(got)} of {want} bytes within 3 s")
        return
    rmid, cmd, size, flags, err = HDR.unpack_from(got)
    pattern = bytes((i * 7 + (i >> 12)) & 0xff for i in range(length))
    # QEMU 10.2 puts the data at byte 12 of the payload, not at 16 as the spec's table
    # says (its VFIOUserDMARW has a 4-byte count; the 4 bytes after the data are zero)
    data = bytes(got[HDR.size + 12:HDR.size + 12 + length])
    if (rmid, cmd, size, flags & (REPLY | ERROR), err) != (mid, DMA_READ, want, REPLY, 0) \
            or data != pattern:
        same = "the guest's pattern" if data == pattern else \
            f"not the guest's pattern (first difference at byte {next(i for i, (a, b) in enumerate(zip(data, pattern)) if a != b)}: {data[:16].hex()}...)"
        log(f"DMA_READ reply wrong: id 0x{rmid:x} cmd {cmd} size {size} flags 0x{flags:x} "
            f"error {err}, data {same}")
        return
    log(f"DMA_READ reply complete: {size} bytes, the guest's pattern")


def partial_request():
    """A DMA_READ request's header with a pipe's write end as its descriptor, and no
    body: QEMU holds the half-received request, and the descriptor with it, until the
    device is unplugged. The log names the pipe and QEMU's pid, so that the test can look
    for the descriptor in /proc after the unplug."""
    r, w = os.pipe()
    ino = os.fstat(w).st_ino
    pid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
    conn.sendmsg([HDR.pack(0x6666, DMA_READ, HDR.size + 16, 0, 0)],
                 [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [w]))])
    os.close(w)
    os.close(r)
    # Exit only once QEMU has read the header: a header read after the end of the stream
    # would be failed at once, its descriptor closed, and the half-received request never
    # held. SIOCOUTQ: the bytes QEMU has not read yet.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and \
            struct.unpack("i", fcntl.ioctl(conn, termios.TIOCOUTQ, b"\0" * 4))[0] > 0:
        time.sleep(0.01)
    time.sleep(0.2)
    log(f"PARTIAL REQUEST: header only, with pipe:[{ino}], sent to QEMU pid {pid}")


def close_waited(why):
    global waited
    log(f"WAITED CHANNEL closed ({why})")
    waited.close()
    waited = None


def dmb(off):
    """The stub's "DMB" of a BAR 0 offset: its 4 KiB page, without the signal flag."""
    return (off & ~SF) >> 12


def region_write(reg, off, data):
    """Returns 0 or an errno for the reply."""
    if reg == CONFIG_REGION:
        if not (0x10 <= off < 0x28 or 0x30 <= off < 0x34):   # BARs/ROM: QEMU emulates them
            cfg[off:off + len(data)] = data
        return 0
    shown = data.hex() if len(data) <= 64 else data[:64].hex() + "..."
    posted = posted_now
    log(f"WRITE r{reg} off=0x{off:x} len={len(data)} post={posted} data={shown}")
    if reg == 0 and off == args.die_on:
        log("  DYING (the server goes away)")
        os._exit(0)
    if reg == 0 and off == args.stall_on:
        log(f"  STALLING {args.stall_secs} s")
        time.sleep(args.stall_secs)
        if args.die_after_stall:
            if args.partial_request_fd:
                partial_request()
            log("  DYING after the stall (the server goes away)")
            os._exit(0)
    if reg == 0 and off == args.slow_on and not posted:
        log(f"  SLOW: replying in {args.slow_secs} s")
        time.sleep(args.slow_secs)
    if reg == 0 and off in REJECT_BAR0:
        log(f"  REJECTED (BAR 0 offset 0x{off:x}, errno {REJECT_BAR0[off]})")
        return REJECT_BAR0[off]
    if posted and not args.posted_moves:
        log("  POSTED WITHOUT x_ism_posted_moves")
    if reg == 0 and off == HELD_BAR0_OFFSET:
        if not posted:
            log("  REJECTED (waited data move, errno 5: its true result, nothing held)")
            return 5
        if args.posted_moves:
            held[dmb(off)] = 5
            log(f"  HELD (posted data move failed: DMB 0x{dmb(off):x}'s signals fail from now on)")
        return 0
    if reg == 0 and off & SF and dmb(off) in held:
        log(f"  REPORTED HELD (errno {held[dmb(off)]}, DMB 0x{dmb(off):x}; not executed)")
        return held[dmb(off)]
    if reg != 2:
        return 0
    cmdbuf[off:off + len(data)] = data
    if off == 0 and len(data) == 8:                   # request header: execute
        code, _, length = struct.unpack(">IHH", data)
        if code == args.reject_cmd:
            struct.pack_into(">IHH", cmdbuf, 0, code, 0xFFFF, 8)
            log(f"  CMD 0x{code:x} REJECTED")
            return EINVAL
        rlen = RESP_LEN.get(code, 8)
        cmdbuf[0:rlen] = bytes(rlen)
        struct.pack_into(">IHH", cmdbuf, 0, code, 0, rlen)
        if code == 0x03:
            struct.pack_into(">Q", cmdbuf, 8, 0x1122334455667788)   # READ_GID
        log(f"  CMD 0x{code:x} len={length} -> ret 0, response {rlen} bytes")
    return 0


def serve_one():
    """Reads one message from `src` and answers it there."""
    global waited, waited_requests
    fds_in.clear()
    mid, cmd, size, flags, _ = HDR.unpack(recv_exact(src, HDR.size))
    body = recv_exact(src, size - HDR.size) if size > HDR.size else b""
    fds = list(fds_in)
    posted = bool(flags & NO_REPLY)
    global withheld, max_gap
    if withheld is not None:
        max_gap += 1
        if mid == withheld[0]:
            log(f"ALIAS: request 0x{mid:x} ({'posted' if posted else 'waited'}) has the ID of the "
                f"withheld reply, which goes first, {max_gap} messages later")
            reply(withheld[0], withheld[1], err=5)
            withheld = None
    if src is waited:
        waited_requests += 1
    if cmd == 0x7f00 and src is conn and args.waited_channel and waited is None \
            and len(fds) == 1 and not args.refuse_waited_channel:                        # X_WAITED_CHANNEL
        waited = socket.socket(fileno=fds.pop())
        log("WAITED CHANNEL open")
        reply(mid, cmd)
    if cmd == 0x7f00:
        log(f"X_WAITED_CHANNEL requested ({len(fds)} fd)")
    for fd in fds:                                    # DMA_MAP's and others: not needed
        os.close(fd)
    if cmd == 0x7f00:
        if waited is None or src is waited:
            log("X_WAITED_CHANNEL refused")
            reply(mid, cmd, err=EINVAL)
    else:
        serve_command(mid, cmd, posted, body)


def serve_command(mid, cmd, posted, body):
    global posted_now, never_answered
    posted_now = posted
    if cmd == 1:                                      # VERSION
        log("VERSION client " + body[4:].rstrip(b"\0").decode(errors="replace"))
        mine = {"max_msg_fds": 8, "max_data_xfer_size": args.max_xfer}
        if args.posted_moves:
            mine["x_ism_posted_moves"] = True
        if args.waited_channel or args.refuse_waited_channel or args.unsolicited_caps:
            mine["x_waited_channel"] = True
        if args.unsolicited_caps:
            mine["x_no_such_capability"] = True
        caps = json.dumps({"capabilities": mine}).encode()
        reply(mid, cmd, struct.pack("<HH", 0, 0) + caps + b"\0")
    elif cmd == 4:                                    # DEVICE_GET_INFO: PCI|RESET, 9 regions, 5 irqs
        reply(mid, cmd, struct.pack("<IIII", 16, 3, 9, 5))
    elif cmd == 5:                                    # DEVICE_GET_REGION_INFO
        _, _, idx = struct.unpack_from("<III", body)
        size_, fl = (BAR_SIZES[idx], 3) if idx in BAR_SIZES else \
            ((256, 3) if idx == CONFIG_REGION else (0, 0))
        reply(mid, cmd, struct.pack("<IIIIQQ", 32, fl, idx, 0, size_, 0))
    elif cmd == 7:                                    # DEVICE_GET_IRQ_INFO: INTx, MSI, MSI-X
        _, _, idx, _ = struct.unpack_from("<IIII", body)
        reply(mid, cmd, struct.pack("<IIII", 16, 1 | (8 if idx else 0), idx,
                                    1 if idx <= 2 else 0))
    elif cmd == 3:                                    # DMA_UNMAP
        reply(mid, cmd, body)
    elif cmd in (2, 8, 13):                           # DMA_MAP, SET_IRQS, RESET
        if not posted:
            reply(mid, cmd)
    elif cmd == 9:                                    # REGION_READ
        off, reg, cnt = struct.unpack_from("<QII", body)
        src = cfg if reg == CONFIG_REGION else cmdbuf if reg == 2 else b""
        data = bytes(src[off:off + cnt]).ljust(cnt, b"\0")
        reply(mid, cmd, struct.pack("<QII", off, reg, cnt) + data)
    elif cmd == 10:                                   # REGION_WRITE
        off, reg, cnt = struct.unpack_from("<QII", body)
        err = region_write(reg, off, body[16:16 + cnt])
        if not posted:
            if reg == 0 and off == args.never_answer:
                never_answered += 1
            elif reg == 0 and off == MIS_OFFSET and args.misbehave:
                misbehave(mid, cmd, struct.pack("<QII", off, reg, cnt))
            elif err:
                reply(mid, cmd, err=err)
            else:
                short = reg == 0 and off == SHORT_BAR0_OFFSET and cnt > 0
                reply(mid, cmd, struct.pack("<QII", off, reg, cnt - 1 if short else cnt))
            if reg == 0 and off == DMA_READ_OFFSET and args.dma_read and cnt == 16:
                dma_read(*struct.unpack(">QQ", body[16:32]))
    else:
        log(f"unsupported command {cmd}")
        if not posted:
            reply(mid, cmd, err=EOPNOTSUPP)


while True:
    # The main connection first: a request on the waited one never passes a message
    # QEMU sent before it.
    src = conn
    if waited is not None:
        ready, _, _ = select.select([conn, waited], [], [])
        if conn not in ready:
            src = waited
    try:
        serve_one()
    except (EOFError, ConnectionResetError, BrokenPipeError) as e:
        if src is waited:
            close_waited(type(e).__name__)
            continue
        log("client gone")
        break
if args.waited_channel:
    log(f"waited channel: {waited_requests} requests")
if args.never_answer is not None:
    log(f"never answered: {never_answered} requests")
if withheld is not None:
    log(f"withheld reply 0x{withheld[0]:x} never sent: no request took its ID in {max_gap} messages")
