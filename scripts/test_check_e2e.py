#!/usr/bin/env python3
"""check_e2e.py's dibs check and CLC count (make unit): a guest's /sys/class/dibs against
the host; each connection's CLC handshake counted once from a capture.

The inputs are what a run leaves: the guests' console lines (`ISMTEST: BOOTED`,
`ISMTEST: DIBS`), <guest>.function and the emulator's snapshot. The check must pass on
the values a 7.x guest really prints, fail on every wrong one, and be skipped (with its
reason) on a kernel without the dibs layer."""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_e2e  # noqa: E402

SNAPSHOT = {"chid": "0x1234", "dmbs": [], "functions": [
    {"name": "ism0", "gid": "0x12340049534d0001", "counters": {"moves_out": 0}},
    {"name": "ism1", "gid": "0x12340049534d0002", "counters": {"moves_out": 0}},
]}
# What a 7.2 guest on function ism0 printed (e2e two-7.2, guest a).
GOOD_A = "ISMTEST: DIBS ism2 gid=12340049-534d-0001-0000-000000000000 fabric_id=0x1234"
GOOD_B = "ISMTEST: DIBS ism2 gid=12340049-534d-0002-0000-000000000000 fabric_id=0x1234"


def guests(**consoles):
    """{guest: {function, dibs}} as guest_dibs reads them from a run folder."""
    with tempfile.TemporaryDirectory() as d:
        run = pathlib.Path(d)
        for guest, (function, lines) in consoles.items():
            (run / f"{guest}.console.log").write_text("\n".join(lines) + "\n")
            if function is not None:
                (run / f"{guest}.function").write_text(function + "\n")
        return check_e2e.guest_dibs(run)


class DibsCheck(unittest.TestCase):
    def test_gid_as_the_guest_prints_it(self):
        self.assertEqual(check_e2e.dibs_gid(0x12340049534D0001), "12340049-534d-0001-0000-000000000000")

    def test_both_guests_match(self):
        state, notes = check_e2e.check_dibs(
            "7.3.4", guests(a=("ism0", [GOOD_A]), b=("ism1", [GOOD_B])), SNAPSHOT)
        self.assertEqual(state, "ok", notes)
        self.assertEqual(len(notes), 2)

    def test_fails_on_a_wrong_expectation(self):
        cases = {
            "swapped functions": dict(a=("ism1", [GOOD_A]), b=("ism0", [GOOD_B])),
            "wrong gid": dict(a=("ism0", [GOOD_A.replace("0001-0000", "0003-0000")])),
            "gid bytes reversed": dict(a=("ism0", ["ISMTEST: DIBS ism2 gid=01004d53-4900-3412-0000-000000000000 fabric_id=0x1234"])),
            "wrong fabric": dict(a=("ism0", [GOOD_A.replace("0x1234", "0x4321")])),
            "empty fabric": dict(a=("ism0", [GOOD_A.replace("fabric_id=0x1234", "fabric_id=")])),
            "no dibs device": dict(a=("ism0", ["ISMTEST: BOOTED 7.3.4"])),
            "two dibs devices": dict(a=("ism0", [GOOD_A, GOOD_A.replace("ism2", "lo")])),
            "no function recorded": dict(a=(None, [GOOD_A])),
            "unknown function": dict(a=("ism7", [GOOD_A])),
            "no guest": {},
        }
        for what, consoles in cases.items():
            with self.subTest(what):
                state, notes = check_e2e.check_dibs("7.2.13", guests(**consoles), SNAPSHOT)
                self.assertEqual(state, "fail", notes)

    def test_fails_without_the_hosts_view(self):
        state, _ = check_e2e.check_dibs("7.2.13", guests(a=("ism0", [GOOD_A])), {"functions": [], "dmbs": []})
        self.assertEqual(state, "fail")

    def test_skipped_before_6_18(self):
        for release in ("5.10.223", "6.1.176", "6.12.117", "6.17.1"):
            with self.subTest(release):
                state, notes = check_e2e.check_dibs(release, guests(a=("ism0", ["ISMTEST: BOOTED x"])), SNAPSHOT)
                self.assertEqual(state, "skip")
                self.assertIn("no dibs layer", notes[0])

    def test_dibs_on_an_older_kernel_fails(self):
        state, _ = check_e2e.check_dibs("6.12.117", guests(a=("ism0", [GOOD_A])), SNAPSHOT)
        self.assertEqual(state, "fail")

    def test_6_18_needs_dibs(self):
        state, _ = check_e2e.check_dibs("6.18.1", guests(a=("ism0", [])), SNAPSHOT)
        self.assertEqual(state, "fail")


class ZeroingVerdict(unittest.TestCase):
    """--unpaced (the api topology): back-to-back connections leave every reuse
    undecided; that alone is no contradiction, anything else still is."""

    EV = {"release": 0, "hand-out": 0, "stale": 0, "undecided": 5}

    def test_undecided_only_when_unpaced(self):
        self.assertIsNone(check_e2e.zeroing_mismatch("release", "none", self.EV, True))
        self.assertIn("says none", check_e2e.zeroing_mismatch("release", "none", self.EV, False))

    def test_unpaced_still_catches_the_wrong_verdict(self):
        self.assertIsNotNone(check_e2e.zeroing_mismatch("release", "hand-out", dict(self.EV, **{"hand-out": 1}), True))
        self.assertIsNotNone(check_e2e.zeroing_mismatch("release", "stale", dict(self.EV, stale=1), True))
        self.assertIsNone(check_e2e.zeroing_mismatch("release", "release", self.EV, False))


class Points(unittest.TestCase):
    """The check as a test point: a skip carries its reason into checks.jsonl, and
    results.py makes it a KTAP SKIP and a JUnit <skipped>, not a pass."""

    def run_check(self, release, console):
        d = tempfile.mkdtemp()
        run = pathlib.Path(d) / "two-x"
        run.mkdir()
        (run / "a.console.log").write_text(f"ISMTEST: BOOTED {release}\n{console}\n")
        (run / "a.function").write_text("ism0\n")
        (run / "snapshot.json").write_text(json.dumps(SNAPSHOT))
        subprocess.run([sys.executable, os.path.join(HERE, "check_e2e.py"), "--run-dir", str(run),
                        "--checks", str(run / "checks.jsonl")], capture_output=True, text=True)
        points = {p["name"]: p for p in map(json.loads, (run / "checks.jsonl").read_text().splitlines())}
        out = pathlib.Path(d) / "out"
        subprocess.run([sys.executable, os.path.join(HERE, "results.py"), "write", "--name", "t",
                        "--out", str(out), str(run)], check=True, capture_output=True)
        return points["dibs_matches_host"], (out / "t.ktap").read_text(), (out / "t.junit.xml").read_text()

    def test_skip_is_reported_as_skip(self):
        point, ktap, junit = self.run_check("6.12.117", "")
        self.assertIn("no dibs layer", point["skip"])
        self.assertRegex(ktap, r"\n    ok \d+ dibs_matches_host # SKIP kernel 6\.12\.117 has no dibs layer")
        self.assertIn('<skipped message="kernel 6.12.117 has no dibs layer', junit)

    def test_match_and_mismatch(self):
        point, ktap, _ = self.run_check("7.3.4", GOOD_A)
        self.assertTrue(point["ok"])
        self.assertNotIn("skip", point)
        self.assertRegex(ktap, r"\n    ok \d+ dibs_matches_host\n")
        point, ktap, _ = self.run_check("7.3.4", GOOD_B)
        self.assertFalse(point["ok"])
        self.assertRegex(ktap, r"\n    not ok \d+ dibs_matches_host\n")


def pcap(frames):
    """A little-endian Ethernet pcap of IPv4/TCP frames given as (src, sport, dst, dport,
    payload)."""
    import struct
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    for src, sport, dst, dport, payload in frames:
        tcp = struct.pack(">HHIIBBHHH", sport, dport, 0, 0, 5 << 4, 0x18, 65535, 0, 0) + payload
        ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0, 0, 64, 6, 0,
                         bytes(map(int, src.split("."))), bytes(map(int, dst.split("."))))
        frame = b"\x02" * 12 + b"\x08\x00" + ip + tcp
        out += struct.pack("<IIII", 0, 0, len(frame), len(frame)) + frame
    return out


def clc(kind, version=2):
    """A CLC message's first bytes: SMCD eyecatcher, type, length, version nibble."""
    return b"\xe2\xd4\xc3\xc4" + bytes([kind, 0, 48, version << 4]) + bytes(40)


class ClcOnWire(unittest.TestCase):
    """Each connection's handshake counted once, by its 4-tuple."""

    def count(self, frames):
        with tempfile.TemporaryDirectory() as d:
            (pathlib.Path(d) / "a.net.pcap").write_bytes(pcap(frames))
            return check_e2e.clc_versions(pathlib.Path(d))

    def handshake(self, cport, sport):
        c, s = "10.0.0.2", "10.0.0.1"
        return [(c, cport, s, sport, clc(1)), (s, sport, c, cport, clc(2)), (c, cport, s, sport, clc(3))]

    def test_one_client_port_to_two_servers_is_two_connections(self):
        # As a run had it: seq (to 12347) and concurrent (to 12348) from the same port.
        conns = self.count(self.handshake(39832, 12347) + self.handshake(39832, 12348))
        self.assertEqual(len(conns), 2)
        self.assertEqual(check_e2e.version_label(conns), "v2")

    def test_a_handshake_is_one_connection(self):
        conns = self.count(self.handshake(40000, 12345))
        self.assertEqual(conns, {"10.0.0.2:40000>10.0.0.1:12345": {"proposal": 2, "accept": 2, "confirm": 2}})


if __name__ == "__main__":
    unittest.main()
