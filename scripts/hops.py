#!/usr/bin/env python3
"""Where a waited ISM store's time goes, hop by hop (scripts/hops.sh, docs/performance.md).

Reads what one run of scripts/hops.sh leaves in its folder:
- <guest>.trace: QEMU's simple-backend trace of that guest (the events named in
  scripts/hops.sh), CLOCK_MONOTONIC nanoseconds;
- hops/hops-*.csv: the emulator's hop log (device/src/transport/hops.rs), same clock.

and prints, per kind of store (data move, signalling move, other), when each
milestone of a waited store came, as the median time after QEMU's PCISTB helper began
(the step from the milestone before in brackets):

  QEMU: request written     guest memory read, message built, sendmsg returned
  device: header read       the device's serving thread woke and has the header
  device: body read         the rest of the message read
  device: served            the move done (lookup, checks, copy, SBA bit, interrupt)
  device: reply written     the reply's write returned
  QEMU: reply header read   by QEMU's vfio-user I/O thread (or, with the waiter reading
                            its own reply, by the vCPU thread)
  QEMU: waiter resumed      vfio_user_send_wait() done
  QEMU: instruction done    the condition code set

Medians of times after a common start, not medians of differences: on a busy host the
threads preempt each other (the device may have the header before QEMU's sendmsg
returns), and a difference of two events can then be negative.

and, for signalling moves, the interrupt's way from the device (its service done) to
the receiving QEMU's eventfd handler (vfio_msi_interrupt).

    hops.py report RUN_DIR
"""

import bisect
import csv
import glob
import os
import struct
import sys

HEADER_EVENT_ID = 0xFFFFFFFFFFFFFFFF
HEADER_MAGIC = 0xF2B177CB0AA429B4
DROPPED_EVENT_ID = 0xFFFFFFFFFFFFFFFE
TYPE_MAPPING = 0
TYPE_EVENT = 1
VALID = 1 << 63

# The events read, with their argument kinds as trace-events declares them
# ("s": a string, "n": a number).
EVENTS = {
    "s390_pci_ism_store": "nnnnn",         # fh, pcias, offset, len, post
    "s390_pci_ism_store_done": "nnn",      # fh, offset, cc
    "vfio_user_send_write": "nn",          # id, wrote
    "vfio_user_recv_hdr": "snnnn",         # sockname, id, cmd, size, flags
    "vfio_user_wait_done": "nn",           # id, ok
    "vfio_msi_interrupt": "snnn",          # name, index, addr, data
}
REGION_WRITE = 10         # vfio-user's command number
MOVE_SIGNAL = 1 << 23     # the signal flag in a data move's offset (ISM_CREATE_REQ)

# The milestones of a waited store, in the order they happen when nothing preempts
# anything: (label, key). Each is reported as its median time after the helper began.
MILESTONES = [
    ("QEMU: request written", "send"),
    ("device: header read", "header_ns"),
    ("device: body read", "body_ns"),
    ("device: served", "served_ns"),
    ("device: reply written", "sent_ns"),
    ("QEMU: reply header read", "recv"),
    ("QEMU: waiter resumed", "woken"),
    ("QEMU: instruction done", "done"),
]


def read_trace(path):
    """[(name, ns, args)] of the events in EVENTS, in file order; and the count of
    events QEMU dropped (its buffer full)."""
    data = open(path, "rb").read()
    if len(data) < 24:
        return [], 0
    eid, magic, version = struct.unpack_from("<QQQ", data, 0)
    if eid != HEADER_EVENT_ID or magic != HEADER_MAGIC or version != 4:
        raise ValueError(f"{path}: not a QEMU simple trace (version 4)")
    names, out, dropped, off = {}, [], 0, 24
    while off + 8 <= len(data):
        (kind,) = struct.unpack_from("<Q", data, off)
        off += 8
        if kind == TYPE_MAPPING:
            if off + 12 > len(data):
                break
            eid, n = struct.unpack_from("<QI", data, off)
            names[eid] = data[off + 12:off + 12 + n].decode()
            off += 12 + n
            continue
        if kind != TYPE_EVENT or off + 24 > len(data):
            break
        eid, ns, length, _pid = struct.unpack_from("<QQII", data, off)
        if length < 24 or off + length > len(data):
            break          # the last record, cut off by QEMU's exit
        body = data[off + 24:off + length]
        off += length
        # QEMU clears the valid bit before it writes a record out; the dropped-events
        # record is all ones but the last bit, so compare before masking.
        if eid == DROPPED_EVENT_ID:
            dropped += struct.unpack_from("<Q", body, 0)[0]
            continue
        eid &= ~VALID
        name = names.get(eid)
        kinds = EVENTS.get(name)
        if kinds is None:
            continue
        args, p = [], 0
        for k in kinds:
            if k == "s":
                (n,) = struct.unpack_from("<I", body, p)
                args.append(body[p + 4:p + 4 + n].decode(errors="replace"))
                p += 4 + n
            else:
                args.append(struct.unpack_from("<Q", body, p)[0])
                p += 8
        out.append((name, ns, args))
    return out, dropped


def stores(events):
    """Waited ISM stores of one QEMU, each a dict of times (ns) and its kind. Under the
    BQL a guest's stores do not overlap, so their events come in order: store, send,
    (the reply's header on the I/O thread), woken, done."""
    out, cur, recv = [], None, {}
    for name, ns, args in events:
        if name == "s390_pci_ism_store":
            pcias, offset, post = args[1], args[2], args[4]
            if pcias == 0:
                kind = "signalling move" if offset & MOVE_SIGNAL else "data move"
            else:
                kind = "other store"
            cur = None if post else {"kind": kind, "store": ns}
        elif cur is None:
            if name == "vfio_user_recv_hdr":
                recv[args[1]] = ns
            continue
        elif name == "vfio_user_send_write" and "send" not in cur:
            cur["send"], cur["id"] = ns, args[0]
        elif name == "vfio_user_recv_hdr" and args[1] == cur.get("id"):
            cur["recv"] = ns
        elif name == "vfio_user_wait_done" and args[0] == cur.get("id"):
            cur["woken"] = ns
        elif name == "s390_pci_ism_store_done":
            cur["done"] = ns
            out.append(cur)
            cur = None
    return out


def device_rows(run_dir):
    """{connection file: [row]} of the emulator's hop log, region writes only."""
    out = {}
    for path in sorted(glob.glob(os.path.join(run_dir, "hops", "hops-*.csv"))):
        with open(path) as f:
            rows = [{k: int(v) for k, v in r.items()} for r in csv.DictReader(f)]
        out[path] = [r for r in rows if r["command"] == REGION_WRITE]
    return out


def join(guest_stores, conns):
    """Adds the device's times to each store: the row of the same message id whose
    header came closest after the send (the connection is the one most stores match)."""
    best, best_hits = None, -1
    for path, rows in conns.items():
        index = {}
        for r in rows:
            index.setdefault(r["id"], []).append(r)
        hits = 0
        for s in guest_stores[:200]:
            cands = index.get(s.get("id"), [])
            if any(abs(r["header_ns"] - s["send"]) < 50_000_000 for r in cands):
                hits += 1
        if hits > best_hits:
            best, best_hits = index, hits
    if best is None:
        return
    starts = {i: [r["header_ns"] for r in rs] for i, rs in best.items()}
    for s in guest_stores:
        if "send" not in s:
            continue
        rs, hs = best.get(s["id"], []), starts.get(s["id"], [])
        # The header is read after the send's sendmsg began: at most a little before
        # QEMU's trace record of it, which is taken when sendmsg returned.
        i = bisect.bisect_left(hs, s["send"] - 1_000_000)
        if i < len(rs) and rs[i]["header_ns"] - s["send"] < 50_000_000:
            s.update({k: rs[i][k] for k in ("header_ns", "body_ns", "served_ns", "sent_ns")})


def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))] if v else None


def report(run_dir):
    traces = sorted(glob.glob(os.path.join(run_dir, "*.trace")))
    if not traces:
        sys.exit(f"hops.py: no *.trace in {run_dir}")
    conns = device_rows(run_dir)
    per_guest, all_stores, dropped = {}, [], 0
    for t in traces:
        events, d = read_trace(t)
        dropped += d
        g = os.path.basename(t)[:-len(".trace")]
        ss = stores(events)
        join(ss, conns)
        per_guest[g] = (events, ss)
        all_stores += ss
    kinds = ["data move", "signalling move", "other store"]
    print(f"waited ISM stores: {len(all_stores)} in {len(traces)} guest(s); QEMU dropped {dropped} trace records")
    print("median time after QEMU's PCISTB helper began (us), and the step from the line above")
    print(f"{'milestone':26}" + "".join(f"{k:>24}" for k in kinds))
    prev = {k: 0.0 for k in kinds}
    for label, key in MILESTONES:
        cells = []
        for k in kinds:
            d = [(s[key] - s["store"]) / 1000 for s in all_stores if s["kind"] == k and key in s]
            if d:
                m = pct(d, .5)
                cells.append(f"{m:7.1f} (+{m - prev[k]:5.1f}) n={len(d)}")
                prev[k] = m
            else:
                cells.append("-")
        print(f"{label:26}" + "".join(f"{c:>24}" for c in cells))
    whole = {k: [(s["done"] - s["store"]) / 1000 for s in all_stores if s["kind"] == k and "done" in s] for k in kinds}
    print(f"{'whole store p90':26}" + "".join(f"{(f'{pct(v, .9):.1f}' if v else '-'):>24}" for v in whole.values()))
    # The interrupt: a signalling move's service done -> the other guest's eventfd handler.
    irq = []
    guests = list(per_guest)
    for g in guests:
        others = [e for h in guests if h != g for e in per_guest[h][0] if e[0] == "vfio_msi_interrupt"]
        times = sorted(ns for _, ns, _ in others)
        for s in per_guest[g][1]:
            if s["kind"] == "signalling move" and "served_ns" in s:
                i = bisect.bisect_left(times, s["served_ns"] - 200_000)
                if i < len(times) and times[i] - s["served_ns"] < 10_000_000:
                    irq.append((times[i] - s["served_ns"]) / 1000)
    if irq:
        print(f"{'interrupt: device -> receiving QEMU (eventfd handler)':54} p50 {pct(irq, .5):.1f} us  p90 {pct(irq, .9):.1f} us  (n={len(irq)})")
    return 0


def main(argv):
    if len(argv) == 3 and argv[1] == "report":
        return report(argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
