#!/usr/bin/env python3
"""hops.py (make unit): QEMU's simple trace read back, a waited store's events put
together, and the emulator's hop log joined to them by message id and time."""

import os
import pathlib
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import hops  # noqa: E402

IDS = {name: i for i, name in enumerate(hops.EVENTS)}


def trace(events, dropped=0):
    """A simple-trace file (version 4) with the mapping records and EVENTS:
    [(name, ns, args)], args as hops.EVENTS types them."""
    out = struct.pack("<QQQ", hops.HEADER_EVENT_ID, hops.HEADER_MAGIC, 4)
    for name, i in IDS.items():
        out += struct.pack("<QQI", hops.TYPE_MAPPING, i, len(name)) + name.encode()
    for name, ns, args in events:
        body = b""
        for kind, a in zip(hops.EVENTS[name], args):
            body += struct.pack("<I", len(a)) + a.encode() if kind == "s" else struct.pack("<Q", a)
        out += struct.pack("<QQQII", hops.TYPE_EVENT, IDS[name] | hops.VALID, ns, 24 + len(body), 1) + body
    if dropped:
        out += struct.pack("<QQQIIQ", hops.TYPE_EVENT, hops.DROPPED_EVENT_ID, 0, 32, 1, dropped)
    return out


# One waited data move (id 7), times in ns; the I/O thread reads the reply's header.
STORE = [
    ("s390_pci_ism_store", 1_000, [0x100, 0, 0x1000, 4096, 0]),
    ("vfio_user_send_write", 4_000, [7, 4160]),
    ("vfio_user_recv_hdr", 12_000, ["unix:/x", 7, 10, 32, 1]),
    ("vfio_user_wait_done", 15_000, [7, 1]),
    ("s390_pci_ism_store_done", 16_000, [0x100, 0x1000, 0]),
]


class Hops(unittest.TestCase):
    def test_a_trace_reads_back_with_its_drops(self):
        with tempfile.TemporaryDirectory() as d:
            p = pathlib.Path(d) / "a.trace"
            p.write_bytes(trace(STORE, dropped=3))
            events, dropped = hops.read_trace(str(p))
        self.assertEqual([e[0] for e in events], [e[0] for e in STORE])
        self.assertEqual(events[2][2], ["unix:/x", 7, 10, 32, 1])
        self.assertEqual(dropped, 3)

    def test_a_store_is_put_together_and_joined_to_the_device_row(self):
        stores = hops.stores(STORE)
        self.assertEqual(len(stores), 1)
        s = stores[0]
        self.assertEqual((s["kind"], s["id"], s["recv"], s["woken"], s["done"]), ("data move", 7, 12_000, 15_000, 16_000))
        # The device had the header before QEMU's sendmsg returned: still its row.
        row = {"id": 7, "command": hops.REGION_WRITE, "header_ns": 3_500, "body_ns": 5_000,
               "served_ns": 6_000, "sent_ns": 8_000}
        other = dict(row, id=8, header_ns=3_600)
        hops.join(stores, {"c0": [other, row]})
        self.assertEqual((s["header_ns"], s["sent_ns"]), (3_500, 8_000))

    def test_a_posted_store_is_left_out(self):
        posted = [("s390_pci_ism_store", 1_000, [0x100, 0, 0x1000, 4096, 1])] + STORE[1:]
        self.assertEqual(hops.stores(posted), [])


if __name__ == "__main__":
    unittest.main()
