#!/usr/bin/env python3
"""check_e2e.py's dibs check, CLC count and CLC negotiation (make unit): a guest's
/sys/class/dibs against the host; each connection's CLC handshake counted once from a
capture; what a handshake offered and agreed on, against the kernel's code and the host.

The inputs are what a run leaves: the guests' console lines (`ISMTEST: BOOTED`,
`ISMTEST: DIBS`), <guest>.function and the emulator's snapshot. The check must pass on
the values a 7.x guest really prints, fail on every wrong one, and be skipped (with its
reason) on a kernel without the dibs layer."""

import ipaddress
import json
import os
import pathlib
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
from ismcheck import check_e2e  # noqa: E402

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

    def test_unpaced_hand_out_kernel_may_look_like_release(self):
        # 5.10's api run: a queued accept took a DMB (zeroed at hand-out) and left it idle.
        ev = dict(self.EV, release=1)
        self.assertIsNone(check_e2e.zeroing_mismatch("hand-out", "release", ev, True))
        self.assertIsNotNone(check_e2e.zeroing_mismatch("hand-out", "release", ev, False))
        self.assertIsNotNone(check_e2e.zeroing_mismatch("hand-out", "stale", dict(ev, stale=1), True))


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
        subprocess.run([sys.executable, os.path.join(os.path.dirname(HERE), "check_e2e.py"), "--run-dir", str(run),
                        "--checks", str(run / "checks.jsonl")], capture_output=True, text=True)
        points = {p["name"]: p for p in map(json.loads, (run / "checks.jsonl").read_text().splitlines())}
        out = pathlib.Path(d) / "out"
        subprocess.run([sys.executable, os.path.join(os.path.dirname(HERE), "results.py"), "write", "--name", "t",
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


def pcap(frames, vlan=None):
    """A little-endian Ethernet pcap of IPv4/TCP or IPv6/TCP frames (by the addresses)
    given as (src, sport, dst, dport, payload), tagged with 802.1Q VLAN `vlan` if given."""
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    for src, sport, dst, dport, payload in frames:
        tcp = struct.pack(">HHIIBBHHH", sport, dport, 0, 0, 5 << 4, 0x18, 65535, 0, 0) + payload
        s, d = ipaddress.ip_address(src), ipaddress.ip_address(dst)
        if s.version == 6:
            ip, ethertype = struct.pack(">IHBB", 6 << 28, len(tcp), 6, 64) + s.packed + d.packed, b"\x86\xdd"
        else:
            ip, ethertype = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0, 0, 64, 6, 0,
                                        s.packed, d.packed), b"\x08\x00"
        tag = b"" if vlan is None else b"\x81\x00" + struct.pack(">H", 0x2000 | vlan)
        frame = b"\x02" * 12 + tag + ethertype + ip + tcp
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



# ---- whole CLC messages, laid out as net/smc/smc_clc.h has them (big-endian) ----------
EYE_D = b"\xe2\xd4\xc3\xc4"
GID_A, GID_B = 0x12340049534D0001, 0x12340049534D0002


def proposal(gid, v1=True, v2=True, ueids=(), seid=True, chid=0x1234, prefix6=()):
    """A Linux client's proposal: SMC-Dv1 (its GID/CHID and the IPv4 prefix 10.0.0.0/24,
    or, over IPv6, a zero subnet and the prefixes `prefix6`) if v1, the v2 extension
    (UEIDs, the SEID flag, no extra GID/CHID entries) if v2."""
    smcd_types = (1 if v1 else 2) | ((1 if v2 else 2) << 2)
    body = bytes(30) + struct.pack(">H", 40 if v1 else 0)
    v2_off = 28 + (8 + 17 * len(prefix6) if v1 else 0) if v2 else 0
    body += struct.pack(">QHH", gid if v1 else 0, chid if v1 else 0, v2_off) + bytes(28)
    if v1 and prefix6:
        body += bytes([0, 0, 0, 0, 0, 0, 0, len(prefix6)])
        for p in map(ipaddress.IPv6Network, prefix6):
            body += p.network_address.packed + bytes([p.prefixlen])
    elif v1:
        body += bytes([10, 0, 0, 0, 24, 0, 0, 0])
    if v2:
        body += struct.pack(">BBBBxxH", len(ueids), 0, 0, 0x10 | int(seid), 32 + 32 * len(ueids)) + bytes(32)
        body += b"".join(u.ljust(32).encode() for u in ueids)
        body += b"SEID".ljust(32) + bytes(16)
    body += EYE_D
    return EYE_D + bytes([1]) + struct.pack(">H", 8 + len(body)) + bytes([0x20 | smcd_types]) + body


def accept_confirm(kind, version, gid, token, chid=0x1234):
    """An SMC-D accept (2) or confirm (3): GID, DMB token, link id; the CHID in v2."""
    body = struct.pack(">QQBBHI", gid, token, 0, 0x10, 0, 0x0A0B0C0D)
    body += (struct.pack(">H", chid) + bytes(32 + 8)) if version == 2 else bytes(12)
    body += EYE_D
    return EYE_D + bytes([kind]) + struct.pack(">H", 8 + len(body)) + bytes([version << 4 | 0x01]) + body


NEG_SNAPSHOT = {"chid": "0x1234", "dmbs": [], "functions": [
    {"name": "ism0", "gid": f"{GID_A:#018x}"}, {"name": "ism1", "gid": f"{GID_B:#018x}"}]}


def host_events(*dmbs):
    """The event stream of a run in which each (function, token) registered a DMB that
    carried a connection."""
    out = []
    for fn, token in dmbs:
        out.append({"kind": "dmb_registered", "function": fn, "token": hex(token)})
        out.append({"kind": "conn_opened", "function": fn, "token": hex(token)})
    return out



EYE_R = b"\xe2\xd4\xc3\xd9"


class ClcSmcType(unittest.TestCase):
    """SMC-D beside SMC-R (the topology roce): what each handshake offered in v2 and what
    accept and confirm agreed on, read from the eyecatchers and the header's types."""

    @staticmethod
    def conns(offer_bits, eye, port=12360, version=2):
        prop = bytearray(proposal(GID_B, v1=False))
        prop[7] = (prop[7] & 0xF3) | (offer_bits << 2)   # typev2: 0 R, 1 D, 3 B
        acc = bytearray(accept_confirm(2, version, GID_A, 0x100000000))
        conf = bytearray(accept_confirm(3, version, GID_B, 0x200000000))
        acc[:4] = conf[:4] = eye
        msgs = {k: check_e2e.clc_fields(bytes(m)) for k, m in
                (("proposal", prop), ("accept", acc), ("confirm", conf))}
        return {f"10.0.0.2:40000>10.0.0.1:{port}": dict(msgs, vlan=None)}

    def test_the_eyecatcher_names_the_type(self):
        self.assertEqual(check_e2e.clc_fields(accept_confirm(2, 2, GID_A, 1))["smc"], "D")
        acc = bytearray(accept_confirm(2, 2, GID_A, 1))
        acc[:4] = EYE_R
        self.assertEqual(check_e2e.clc_fields(bytes(acc))["smc"], "R")

    def test_both_offered_smcd_agreed(self):
        ok, notes = check_e2e.check_smc_type(self.conns(3, EYE_D), {12360: ("B", "D2")})
        self.assertTrue(ok, notes)

    def test_each_wrong_fact_fails(self):
        for conns, why in ((self.conns(1, EYE_D), "only SMC-D offered"),
                           (self.conns(3, EYE_R), "SMC-R agreed"),
                           (self.conns(3, EYE_D, version=1), "version 1"),
                           (self.conns(3, EYE_D, port=12361), "no handshake to the port")):
            with self.subTest(why=why):
                self.assertFalse(check_e2e.check_smc_type(conns, {12360: ("B", "D2")})[0])

    def test_smcr_alone(self):
        self.assertTrue(check_e2e.check_smc_type(self.conns(0, EYE_R, port=12361), {12361: ("R", "R2")})[0])


class ClcNegotiation(unittest.TestCase):
    """What a handshake offered and agreed on, read from the wire and held to the kernel's
    code (the topologies v1 and vlan) and to the host's DMBs."""

    def handshakes(self, version, port=12345, vlan=None, prop=None, acc_gid=GID_A, c="10.0.0.2", s="10.0.0.1"):
        frames = [(c, 40000, s, port, prop or proposal(GID_B)),
                  (s, port, c, 40000, accept_confirm(2, version, acc_gid, 0x100000000)),
                  (c, 40000, s, port, accept_confirm(3, version, GID_B, 0x200000000))]
        with tempfile.TemporaryDirectory() as d:
            (pathlib.Path(d) / "a.net.pcap").write_bytes(pcap(frames, vlan))
            return check_e2e.clc_handshakes(pathlib.Path(d))

    EVENTS = host_events(("ism0", 0x100000000), ("ism1", 0x200000000))

    def test_fields_of_a_v1_and_v2_proposal(self):
        m = check_e2e.clc_fields(proposal(GID_B, ueids=("ISMEMU-CLIENT",), seid=False))
        self.assertEqual((m["kind"], m["version"], m["typev1"], m["typev2"]), ("proposal", 2, "D", "D"))
        self.assertEqual((m["gid"], m["chid"], m["prefix"]), (GID_B, 0x1234, "10.0.0.0/24"))
        self.assertEqual((m["ueids"], m["seid"], m["v2_gidchids"]), (1, False, []))

    def test_fields_of_an_ipv6_proposal(self):
        m = check_e2e.clc_fields(proposal(GID_B, prefix6=("fd00::/64", "fd01:2::/48")))
        self.assertEqual((m["typev1"], m["typev2"], m["prefix"]), ("D", "D", "fd00::/64 fd01:2::/48"))
        self.assertEqual((m["ueids"], m["seid"]), (0, True))   # the v2 extension after them

    def test_ipv6_handshake_on_the_wire(self):
        conns = self.handshakes(1, port=12347, c="fd00::2", s="fd00::1", prop=proposal(GID_B, prefix6=("fd00::/64",)))
        self.assertEqual(list(conns), ["[fd00::2]:40000>[fd00::1]:12347"])
        ok, notes = check_e2e.check_negotiation(conns, {12347: 1}, None, NEG_SNAPSHOT, self.EVENTS)
        self.assertTrue(ok, notes)
        self.assertIn("prefix fd00::/64", notes[0])

    def test_v1_prefix_must_hold_the_client(self):
        cases = {
            "IPv6 prefix of another net": self.handshakes(1, port=12347, c="fd00::2", s="fd00::1",
                                                          prop=proposal(GID_B, prefix6=("fd01::/64",))),
            "IPv4 subnet over IPv6": self.handshakes(1, port=12347, c="fd00::2", s="fd00::1"),
            "IPv4 subnet of another net": self.handshakes(1, port=12347, c="10.1.0.2", s="10.1.0.1"),
        }
        for what, conns in cases.items():
            with self.subTest(what):
                ok, notes = check_e2e.check_negotiation(conns, {12347: 1}, None, NEG_SNAPSHOT, self.EVENTS)
                self.assertFalse(ok, notes)
                self.assertIn("does not hold the client's address", " ".join(notes))

    def test_fields_of_a_v2_only_proposal(self):
        m = check_e2e.clc_fields(proposal(GID_B, v1=False))
        self.assertEqual((m["typev1"], m["typev2"], m["gid"], m["chid"]), ("N", "D", 0, 0))
        self.assertNotIn("prefix", m)
        self.assertTrue(m["seid"])

    def test_fields_of_accepts(self):
        v1 = check_e2e.clc_fields(accept_confirm(2, 1, GID_A, 0x100000000))
        self.assertEqual((v1["kind"], v1["version"], v1["gid"], v1["token"]), ("accept", 1, GID_A, 0x100000000))
        self.assertNotIn("chid", v1)
        v2 = check_e2e.clc_fields(accept_confirm(3, 2, GID_B, 0x200000000, chid=0x4321))
        self.assertEqual((v2["kind"], v2["chid"], v2["linkid"]), ("confirm", 0x4321, 0x0A0B0C0D))
        self.assertIsNone(check_e2e.clc_fields(b"GET / HTTP/1.1\r\n"))

    def test_expected_versions_pass(self):
        for version in (1, 2):
            with self.subTest(version=version):
                ok, notes = check_e2e.check_negotiation(
                    self.handshakes(version), {12345: version}, None, NEG_SNAPSHOT, self.EVENTS)
                self.assertTrue(ok, notes)
                self.assertIn(f"accept v{version}", notes[0])

    def test_vlan_tag_is_read_and_held(self):
        conns = self.handshakes(1, vlan=39)
        self.assertEqual(next(iter(conns.values()))["vlan"], 39)
        self.assertTrue(check_e2e.check_negotiation(conns, {12345: 1}, 39, NEG_SNAPSHOT, self.EVENTS)[0])
        self.assertFalse(check_e2e.check_negotiation(conns, {12345: 1}, 40, NEG_SNAPSHOT, self.EVENTS)[0])
        untagged = self.handshakes(1)
        self.assertFalse(check_e2e.check_negotiation(untagged, {12345: 1}, 39, NEG_SNAPSHOT, self.EVENTS)[0])

    def test_fails_on_each_wrong_fact(self):
        cases = {
            "other version": (self.handshakes(2), {12345: 1}, self.EVENTS, NEG_SNAPSHOT),
            "no v1 offered": (self.handshakes(2, prop=proposal(GID_B, v1=False)), {12345: 2}, self.EVENTS, NEG_SNAPSHOT),
            "no v2 offered": (self.handshakes(1, prop=proposal(GID_B, v2=False)), {12345: 1}, self.EVENTS, NEG_SNAPSHOT),
            "no handshake to the port": (self.handshakes(1), {12346: 1}, self.EVENTS, NEG_SNAPSHOT),
            "DMB of the other function": (self.handshakes(1), {12345: 1},
                                          host_events(("ism1", 0x100000000), ("ism1", 0x200000000)), NEG_SNAPSHOT),
            "DMB never registered": (self.handshakes(1), {12345: 1}, host_events(("ism1", 0x200000000)), NEG_SNAPSHOT),
            "DMB carried nothing": (self.handshakes(1), {12345: 1},
                                    [e for e in self.EVENTS if e["kind"] != "conn_opened" or e["function"] != "ism0"],
                                    NEG_SNAPSHOT),
            "unknown GID": (self.handshakes(1, acc_gid=0x99), {12345: 1}, self.EVENTS, NEG_SNAPSHOT),
            "other CHID": (self.handshakes(2), {12345: 2}, self.EVENTS, dict(NEG_SNAPSHOT, chid="0x4321")),
            "no snapshot": (self.handshakes(1), {12345: 1}, self.EVENTS, {}),
        }
        for what, (conns, expect, events, snap) in cases.items():
            with self.subTest(what):
                ok, notes = check_e2e.check_negotiation(conns, expect, None, snap, events)
                self.assertFalse(ok, notes)


class VlanEvents(unittest.TestCase):
    def ev(self, fn, kind, vlan=39):
        return {"function": fn, "kind": kind, "vlan_id": vlan}

    def test_added_then_deleted_on_each_function(self):
        events = [self.ev("ism0", "vlan_added", 0x1FFF), self.ev("ism0", "vlan_added"),
                  self.ev("ism1", "vlan_added"), self.ev("ism1", "vlan_deleted"), self.ev("ism0", "vlan_deleted")]
        ok, notes = check_e2e.check_vlan_events(39, events, {"ism0", "ism1"})
        self.assertTrue(ok, notes)

    def test_fails_without_release_or_registration(self):
        cases = {
            "never released": [self.ev("ism0", "vlan_added"), self.ev("ism1", "vlan_added"),
                               self.ev("ism1", "vlan_deleted")],
            "only the reserved id": [self.ev(f, "vlan_added", 0x1FFF) for f in ("ism0", "ism1")],
            "released first": [self.ev(f, k) for f in ("ism0", "ism1") for k in ("vlan_deleted", "vlan_added")],
        }
        for what, events in cases.items():
            with self.subTest(what):
                self.assertFalse(check_e2e.check_vlan_events(39, events, {"ism0", "ism1"})[0])

    def test_a_v2_only_server_registers_none(self):
        # 5.10, both phases v2: only the client's function registers the VLAN.
        events = [self.ev("ism1", "vlan_added"), self.ev("ism1", "vlan_deleted")]
        ok, notes = check_e2e.check_vlan_events(39, events, {"ism0", "ism1"}, {"ism0"})
        self.assertTrue(ok, notes)
        events += [self.ev("ism0", "vlan_added"), self.ev("ism0", "vlan_deleted")]
        self.assertFalse(check_e2e.check_vlan_events(39, events, {"ism0", "ism1"}, {"ism0"})[0])
        self.assertFalse(check_e2e.check_vlan_events(39, events[:2], {"ism0", "ism1"})[0])


if __name__ == "__main__":
    unittest.main()
