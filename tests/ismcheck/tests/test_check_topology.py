#!/usr/bin/env python3
"""check_topology.py (make unit): the kernel's rules for which CHID a connection gets, and
a CHID case's run held to them from the wire, the guests and the host. The runs are
built here from the lines a 6.12 guest prints (smcchid's SMCDEV, /init's ISMDEV,
smctest's CONN), the CLC messages as net/smc/smc_clc.h lays them out and the emulators'
events; each check must pass on the run the kernel's code predicts and fail on every
way a run could differ from it."""

import json
import os
import pathlib
import struct
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
from ismcheck import check_e2e  # noqa: E402
from ismcheck import check_topology as ct  # noqa: E402
from ismcheck.tests.test_check_e2e import EYE_D, accept_confirm, pcap  # noqa: E402

A, B = 0x1234, 0x5678
F2, F3 = "0002:00:00.0", "0003:00:00.0"


def gid(chid, i):
    return (chid << 48) | (0x49534D << 16) | (i + 1)


def proposal_v2(entries):
    """A client's SMC-Dv2-only proposal (no PNET ID: no v1) offering (gid, chid) entries."""
    head = bytes(32) + struct.pack(">QHH", 0, 0, 28) + bytes(28)
    ext = struct.pack(">BBBBxxH", 0, len(entries), 0, 0x11, 32) + bytes(32) + b"SEID".ljust(32) + bytes(16)
    body = head + ext + b"".join(struct.pack(">QH", g, c) for g, c in entries) + EYE_D
    return EYE_D + bytes([1]) + struct.pack(">H", 8 + len(body)) + bytes([0x20 | 2 | (1 << 2)]) + body


def decline(diag):
    body = bytes(8) + struct.pack(">I", diag) + bytes(4) + EYE_D
    return EYE_D + bytes([4]) + struct.pack(">H", 8 + len(body)) + bytes([0x20]) + body


class Rules(unittest.TestCase):
    def test_offer_runs_against_the_registration_order(self):
        # smcd_register_dev puts each at the head: registered 0003 then 0002 -> 0002 first.
        self.assertEqual(ct.offer_order([F3, F2], {F2: A, F3: B}), [A, B])
        self.assertEqual(ct.offer_order([F2, F3], {F2: A, F3: B}), [B, A])

    def test_one_device_per_chid(self):
        self.assertEqual(ct.offer_order([F3, F2], {F2: A, F3: A}), [A])

    def test_server_takes_the_first_offered_chid_it_has(self):
        self.assertEqual(ct.server_choice([A, B], {A, B}), A)
        self.assertEqual(ct.server_choice([B, A], {A, B}), B)
        self.assertEqual(ct.server_choice([A, B], {B}), B)
        self.assertIsNone(ct.server_choice([A], {B}))

    def test_fallback_reasons(self):
        self.assertEqual(ct.expected_fallback("server"), (ct.DECL_NOSMCD2DEV, 0))
        self.assertEqual(ct.expected_fallback("client"), (ct.DECL_PEERDECL, ct.DECL_NOSMCD2DEV))

    def test_decline_reason_on_the_wire(self):
        self.assertEqual(check_e2e.clc_fields(decline(0x03030007))["diagnosis"], 0x03030007)

    def test_proposal_list(self):
        f = check_e2e.clc_fields(proposal_v2([(gid(A, 0), A), (gid(B, 0), B)]))
        self.assertEqual((f["typev1"], f["typev2"]), ("N", "D"))
        self.assertEqual(f["v2_gidchids"], [(gid(A, 0), A), (gid(B, 0), B)])


class Run:
    """A CHID case's run folder: guest a (functions fa) and b (fb), each [(pci, chid, gid)]
    in uid order, smc's registration order the reverse of it (as 6.12 printed it). `pick`:
    the CHID each phase's connections ran on (None: fallback), as the run did it."""

    def __init__(self, d, fa, fb, pick, conns=2, offer=None, accept_chid=None, emu_of=None):
        self.d = pathlib.Path(d)
        frames = []
        emus = {"A": (A, []), "B": (B, [])}
        for fns in (fa, fb):
            for _, chid, g in fns:
                emus["A" if chid == A else "B"][1].append(g)
        for name, (chid, gids) in emus.items():
            (self.d / name).mkdir()
            fl = [{"name": f"ism{i}", "gid": f"{g:#018x}"} for i, g in enumerate(gids)]
            (self.d / name / "snapshot.json").write_text(json.dumps({"chid": f"{chid:#06x}", "functions": fl}))
            (self.d / name / "events.jsonl").write_text("")
        consoles = {"a": [], "b": []}
        for guest, fns in (("a", fa), ("b", fb)):
            consoles[guest] += [f"ISMTEST: ISMDEV {p} uid=0x2 fid=0x2 pchid={c:#06x} pft=0x05" for p, c, _ in fns]
            consoles[guest] += [f"SMCDEV {i + 1} {p}" for i, (p, _, _) in enumerate(reversed(fns))]
        ips = {"a": "10.0.0.1", "b": "10.0.0.2"}
        token = 0x100
        for port, (client, server) in sorted(ct.PHASES.items()):
            chid = pick[port]
            cf, sf = (fa, fb) if client == "a" else (fb, fa)
            offered = [(g, c) for _, c, g in cf] if offer is None else offer
            for i in range(conns):
                cport = 40000 + port + i
                c, s = ips[client], ips[server]
                frames.append((c, cport, s, port, proposal_v2(offered)))
                if chid is None:
                    frames.append((s, port, c, cport, decline(ct.DECL_NOSMCD2DEV)))
                    for side, g, lp, pp in (("client", client, f"{c}:{cport}", f"{s}:{port}"),
                                            ("server", server, f"{s}:{port}", f"{c}:{cport}")):
                        r, pd = ct.expected_fallback(side)
                        consoles[g].append(f"CONN test=seq idx={i} side={side} mode=FALLBACK state=ACTIVE local={lp} "
                                           f"peer={pp} reason={r:#010x} reason_name=X peer_diag={pd:#010x} "
                                           f"peer_diag_name=X inode=1 bytes=1 rounds=2 checksum=0x1 secs=0.1 verify=ok")
                    continue
                run_chid = chid if emu_of is None else emu_of
                cg = next(g for _, ch, g in cf if ch == run_chid)
                sg = next(g for _, ch, g in sf if ch == run_chid)
                emu = "A" if run_chid == A else "B"
                for side, g, lp, pp, mine in (("client", client, f"{c}:{cport}", f"{s}:{port}", cg),
                                              ("server", server, f"{s}:{port}", f"{c}:{cport}", sg)):
                    token += 1
                    fn = f"ism{emus[emu][1].index(mine)}"
                    with (self.d / emu / "events.jsonl").open("a") as ev:
                        ev.write(json.dumps({"kind": "dmb_registered", "function": fn, "token": f"{token:#x}"}) + "\n")
                        ev.write(json.dumps({"kind": "conn_opened", "function": fn, "token": f"{token:#x}"}) + "\n")
                    consoles[g].append(f"CONN test=seq idx={i} side={side} mode=SMCD state=ACTIVE local={lp} peer={pp} "
                                       f"token={token:#018x} peer_token=0x0 my_gid={mine:#018x} peer_gid=0x0 "
                                       f"bytes=1 rounds=2 checksum=0x1 secs=0.1 verify=ok")
                frames.append((s, port, c, cport, accept_confirm(2, 2, sg, token, chid=accept_chid or chid)))
                frames.append((c, cport, s, port, accept_confirm(3, 2, cg, token - 1, chid=chid)))
        for guest, lines in consoles.items():
            (self.d / f"{guest}.console.log").write_text("\n".join(lines + ["ISMTEST: RESULT PASS"]) + "\n")
        (self.d / "a.net.pcap").write_bytes(pcap(frames))

    def check(self):
        guests = {g: ct.read_guest(self.d / f"{g}.console.log") for g in ("a", "b")}
        emulators = {n: ct.read_emulator(self.d / n) for n in ("A", "B")}
        return ct.check_chid(guests, emulators, check_e2e.clc_handshakes(self.d), 2)


BOTH_A = [(F2, A, gid(A, 0)), (F3, B, gid(B, 0))]
BOTH_B = [(F2, B, gid(B, 1)), (F3, A, gid(A, 1))]
ONE_B = [(F2, B, gid(B, 1))]


class ChidCases(unittest.TestCase):
    def run_case(self, fa, fb, pick, **kw):
        with tempfile.TemporaryDirectory() as d:
            return Run(d, fa, fb, pick, **kw).check()

    def test_both_each_client_first_chid(self):
        # b's list head is its uid 2 (B), a's is A: b->a on B, a->b on A.
        errors, phases = self.run_case(BOTH_A, BOTH_B, {12345: B, 12346: A})
        self.assertEqual(errors, [])
        self.assertEqual([p["want"] for p in phases], [B, A])
        line = ct.chid_line("chid-both", errors, phases, "h")
        self.assertIn("as expected: version v2; CHIDs offered b->a 0x5678,0x1234 a->b 0x1234,0x5678", line)

    def test_both_fails_on_the_other_chid(self):
        errors, _ = self.run_case(BOTH_A, BOTH_B, {12345: A, 12346: A})
        self.assertTrue(any("accepted CHID 0x1234, the kernel's choice is 0x5678" in e for e in errors), errors)
        self.assertTrue(any("ran on emulator A" in e for e in errors), errors)

    def test_fails_on_an_offer_in_another_order(self):
        errors, _ = self.run_case(BOTH_A, BOTH_B, {12345: B, 12346: A},
                                  offer=[(gid(A, 1), A), (gid(B, 1), B)])
        self.assertTrue(any("the proposal offered CHIDs 0x1234,0x5678, the kernel's order is" in e for e in errors), errors)

    def test_fails_when_the_host_saw_another_emulator(self):
        errors, _ = self.run_case(BOTH_A, BOTH_B, {12345: B, 12346: A}, emu_of=A)
        self.assertTrue(any("ran on emulator A (CHID 0x1234), expected CHID 0x5678" in e for e in errors), errors)

    def test_one_common_chid(self):
        errors, phases = self.run_case(BOTH_A, ONE_B, {12345: B, 12346: B})
        self.assertEqual(errors, [])
        self.assertEqual([p["offered"] for p in phases], [[B], [A, B]])
        # The emulator nobody chose must have seen nothing: A did not.

    def test_none_declines(self):
        errors, phases = self.run_case([(F2, A, gid(A, 0))], ONE_B, {12345: None, 12346: None})
        self.assertEqual(errors, [])
        line = ct.chid_line("chid-none", errors, phases, "h")
        self.assertIn("mode TCP 8; decline NOSMCD2DEV", line)

    def test_none_fails_if_a_connection_was_accepted(self):
        errors, _ = self.run_case([(F2, A, gid(A, 0))], [(F2, A, gid(A, 1))], {12345: A, 12346: A})
        self.assertEqual(errors, [])   # a common CHID: SMC-D is right ...
        errors, _ = self.run_case([(F2, A, gid(A, 0))], ONE_B, {12345: None, 12346: None}, conns=1)
        self.assertTrue(any("CLC handshakes on the wire" in e for e in errors), errors)   # ... 1 of 2 conns

    def test_bytes_that_differ_fail(self):
        with tempfile.TemporaryDirectory() as d:
            run = Run(d, BOTH_A, ONE_B, {12345: B, 12346: B})
            log = run.d / "b.console.log"
            log.write_text(log.read_text().replace("checksum=0x1", "checksum=0x2", 1))
            errors, _ = run.check()
        self.assertTrue(any("differ from the server's" in e for e in errors), errors)

    def test_an_unchosen_emulator_with_a_dmb_fails(self):
        with tempfile.TemporaryDirectory() as d:
            run = Run(d, BOTH_A, ONE_B, {12345: B, 12346: B})
            with (run.d / "A" / "events.jsonl").open("a") as ev:
                ev.write(json.dumps({"kind": "dmb_registered", "function": "ism0", "token": "0x9"}) + "\n")
            errors, _ = run.check()
        self.assertTrue(any("emulator A (CHID 0x1234, chosen by no connection)" in e for e in errors), errors)


def accept_fce(kind, gid_, token, release, first, chid=A):
    """An SMC-Dv2 accept or confirm as smc_clc_send_confirm_accept builds it: with the
    first contact flag and extension (base 36 bytes at release 0, v2x 52 at 1) or none."""
    msg = accept_confirm(kind, 2, gid_, token, chid=chid)
    if not first:
        return msg
    fce = bytes([0, 0x10 | release, 0, 0]) + b"host".ljust(32) + (bytes(16) if release else b"")
    body = msg[8:-4] + fce + EYE_D
    return msg[:4] + bytes([kind]) + struct.pack(">H", 8 + len(body)) + bytes([msg[7] | 0x08]) + body


def with_release(prop, release):
    """A proposal_v2 whose struct smc_clc_v2_flag says that release (seid set)."""
    b = bytearray(prop)
    b[52 + 28 + 3] = release << 4 | 1
    return bytes(b)


class Mixed(unittest.TestCase):
    def test_one_chid_needs_no_registration_order(self):
        # 7.x names its smc devices after the dibs device (ism<uid>), not the PCI function.
        with tempfile.TemporaryDirectory() as d:
            run = Run(d, [(F2, A, gid(A, 0))], [(F2, A, gid(A, 1))], {12345: A, 12346: A})
            for g in ("a", "b"):
                log = run.d / f"{g}.console.log"
                log.write_text(log.read_text().replace(f"SMCDEV 1 {F2}", "SMCDEV 1 ism2"))
            errors, phases = run.check()
        self.assertEqual(errors, [])
        self.assertEqual([p["offered"] for p in phases], [[A], [A]])

    def test_release_is_the_smaller(self):
        self.assertEqual(ct.mixed_release("5.10", "7.3"), 0)
        self.assertEqual(ct.mixed_release("7.3", "5.10"), 0)
        self.assertEqual(ct.mixed_release("6.12", "6.1"), 0)
        self.assertEqual(ct.mixed_release("6.12", "7.3"), 1)

    def test_lengths(self):
        self.assertEqual(ct.clc_lengths(0), (114, 78))
        self.assertEqual(ct.clc_lengths(1), (130, 78))

    def test_fields_of_a_first_contact(self):
        f = check_e2e.clc_fields(accept_fce(2, gid(A, 0), 5, 1, True))
        self.assertEqual((f["length"], f["first_contact"], f["fce_release"]), (130, True, 1))
        f = check_e2e.clc_fields(accept_fce(2, gid(A, 0), 5, 0, False))
        self.assertEqual((f["length"], f["first_contact"]), (78, False))
        self.assertEqual(check_e2e.clc_fields(with_release(proposal_v2([(gid(A, 0), A)]), 1))["release"], 1)

    def handshakes(self, lines, accept_release=None, accept_len_of=None, all_first=False, prop_release=None):
        """Three connections b->a, three a->b, as the kernels' code makes them: the first a
        first contact at mixed_release, the others not."""
        frames, ips = [], {"a": "10.0.0.1", "b": "10.0.0.2"}
        n = 0
        for port, (client, server) in sorted(ct.PHASES.items()):
            rel = ct.mixed_release(lines[client], lines[server]) if accept_release is None else accept_release
            for i in range(3):
                c, s, cport = ips[client], ips[server], 40000 + port + i
                first = n == 0 or all_first
                pr = ct.SMC_RELEASE[lines[client]] if prop_release is None else prop_release
                frames.append((c, cport, s, port, with_release(proposal_v2([(gid(A, 0), A)]), pr)))
                acc = accept_fce(2, gid(A, 1), 7, rel, first)
                if accept_len_of is not None and first:
                    acc = acc[:5] + struct.pack(">H", accept_len_of) + acc[7:]
                frames.append((s, port, c, cport, acc))
                frames.append((c, cport, s, port, accept_fce(3, gid(A, 0), 8, rel, first)))
                n += 1
        with tempfile.TemporaryDirectory() as d:
            (pathlib.Path(d) / "a.net.pcap").write_bytes(pcap(frames))
            return ct.check_release(check_e2e.clc_handshakes(pathlib.Path(d)), lines)

    def test_each_pair_as_the_code_says(self):
        for la, lb in (("5.10", "7.3"), ("7.3", "5.10"), ("6.1", "6.12"), ("6.12", "6.1")):
            errors, summary = self.handshakes({"a": la, "b": lb})
            self.assertEqual(errors, [], (la, lb))
            self.assertEqual(summary, "release 0; accept bytes 114 x1 78 x5")

    def test_same_line_6_12_is_130(self):
        errors, summary = self.handshakes({"a": "6.12", "b": "7.3"})
        self.assertEqual((errors, summary), ([], "release 1; accept bytes 130 x1 78 x5"))

    def test_a_server_that_kept_release_1_fails(self):
        # A 7.3 server answering a 5.10 client at its own release: 130 bytes, release 1.
        errors, _ = self.handshakes({"a": "7.3", "b": "5.10"}, accept_release=1)
        self.assertTrue(any("says release 1, expected 0" in e for e in errors), errors)
        self.assertTrue(any("is 130 bytes, expected 114" in e for e in errors), errors)

    def test_a_wrong_length_fails(self):
        errors, _ = self.handshakes({"a": "5.10", "b": "7.3"}, accept_len_of=130)
        self.assertTrue(any("the accept is 130 bytes, expected 114" in e for e in errors), errors)

    def test_a_second_first_contact_fails(self):
        errors, _ = self.handshakes({"a": "5.10", "b": "7.3"}, all_first=True)
        self.assertTrue(any("is a first contact, expected none" in e for e in errors), errors)

    def test_a_proposal_of_another_release_fails(self):
        errors, _ = self.handshakes({"a": "5.10", "b": "7.3"}, prop_release=1)
        self.assertTrue(any("the proposal of a (5.10) says release 1, its SMC_RELEASE is 0" in e
                            for e in errors), errors)


LO = ct.LOOPBACK_CHID


def self_conn(side, i, gid_, ext, ip="10.0.0.1", mode="SMCD", checksum="0x1"):
    """A smctest CONN line's fields of a connection to itself (port 12347)."""
    lp, pp = (f"{ip}:12347", f"{ip}:5000{i}") if side == "server" else (f"{ip}:5000{i}", f"{ip}:12347")
    return {"test": "seq", "idx": str(i), "side": side, "mode": mode, "local": lp, "peer": pp,
            "my_gid": f"{gid_:#018x}", "peer_gid": f"{gid_:#018x}", "my_gid_ext": f"{ext:#018x}",
            "peer_gid_ext": f"{ext:#018x}", "bytes": "1", "checksum": checksum, "verify": "ok"}


class Loopback(unittest.TestCase):
    def test_offer_puts_loopback_first_twice(self):
        self.assertEqual(ct.loopback_offer([A]), [LO, LO, A])
        # The server's own loopback-ism never reaches the other guest: the ISM CHID.
        self.assertEqual(ct.server_choice(ct.loopback_offer([A]), {A}), A)

    def cross(self, offer_lo=True):
        with tempfile.TemporaryDirectory() as d:
            offer = ([(0x1111, LO), (0x2222, LO)] if offer_lo else []) + [(gid(A, 0), A)]
            run = Run(d, [(F2, A, gid(A, 0))], [(F2, A, gid(A, 1))], {12345: A, 12346: A}, offer=offer)
            guests = {g: ct.read_guest(run.d / f"{g}.console.log") for g in ("a", "b")}
            emulators = {n: ct.read_emulator(run.d / n) for n in ("A", "B")}
            return ct.check_chid(guests, emulators, check_e2e.clc_handshakes(run.d), 2, loopback=True)

    def test_cross_takes_ism_after_offering_loopback(self):
        errors, phases = self.cross()
        self.assertEqual(errors, [])
        self.assertEqual([(p["offered"], p["want"]) for p in phases], [([LO, LO, A], A)] * 2)

    def test_cross_without_loopback_in_the_offer_fails(self):
        errors, _ = self.cross(offer_lo=False)
        self.assertTrue(any("the kernel's order is 0xffff,0xffff,0x1234" in e for e in errors), errors)

    def self_run(self, conns=None, opened=4):
        emus = {"A": {"chid": A, "gids": {gid(A, 0): "ism0", gid(A, 1): "ism1"}, "moves": 0,
                      "events": [{"kind": "conn_opened"}] * opened}}
        if conns is None:
            conns = {"a": [self_conn(s, i, 0xAA, 0xA1) for s in ("client", "server") for i in range(2)],
                     "b": [self_conn(s, i, 0xBB, 0xB1, ip="10.0.0.2") for s in ("client", "server") for i in range(2)]}
        guests = {g: {"conns": c} for g, c in conns.items()}
        return ct.check_self(guests, emus, 2, 4)

    def test_self_on_loopback(self):
        errors, summary = self.self_run()
        self.assertEqual(errors, [])
        self.assertEqual(summary, "self a loopback x2 b loopback x2")

    def test_self_on_the_ism_function_fails(self):
        c = [self_conn(s, i, gid(A, 0), 0) for s in ("client", "server") for i in range(2)]
        errors, _ = self.self_run({"a": c}, opened=8)
        self.assertTrue(any("not loopback-ism" in e for e in errors), errors)
        self.assertTrue(any("the host opened 8 connections" in e for e in errors), errors)

    def test_self_fallback_or_missing_fails(self):
        c = [self_conn(s, i, 0xAA, 0xA1, mode="FALLBACK") for s in ("client", "server") for i in range(2)]
        errors, _ = self.self_run({"a": c, "b": []})
        self.assertTrue(any("expected SMCD on loopback-ism" in e for e in errors), errors)
        self.assertTrue(any("self b: 0 client CONN lines, expected 2" in e for e in errors), errors)

    def test_self_bytes_that_differ_fail(self):
        c = [self_conn(s, i, 0xAA, 0xA1, checksum="0x2" if s == "server" and i == 1 else "0x1")
             for s in ("client", "server") for i in range(2)]
        errors, _ = self.self_run({"a": c})
        self.assertTrue(any("differ from the server's" in e for e in errors), errors)


class Multi:
    """A multi case's run, as check_multi reads it: guest a with functions A/ism0 (uid 2)
    and B/ism0, guest c with B/ism1 (uid 2) and A/ism1, smc's registration order the
    reverse of the uids (as 6.12 printed it); streams a->c and c->a, `conns` connections
    each, the first a first contact. The kernel's choice: a offers A first and c has it,
    c offers B first. `wire`: {stream: CHID} the accept names instead; `host`: {stream:
    emulator} whose functions carry its DMBs instead; `mode`: a side's mode instead of
    SMCD; `overlap`: whether the emulators' connections overlap in time."""

    IPS = {"a": "10.0.0.1", "c": "10.0.0.3"}
    FNS = {"a": [("A", "ism0"), ("B", "ism0")], "c": [("B", "ism1"), ("A", "ism1")]}
    STREAMS = [("a", "c"), ("c", "a")]

    def __init__(self, conns=2, wire=None, host=None, mode=None, overlap=True, firsts=1):
        wire, host = wire or {}, host or {}
        chids = {"A": A, "B": B}
        self.emulators = {n: {"chid": chids[n], "gids": {gid(chids[n], i): f"ism{i}" for i in range(2)},
                              "dmbs": [], "events": []} for n in ("A", "B")}
        self.guests = {}
        for g, fns in self.FNS.items():
            pcis = {F2: chids[fns[0][0]], F3: chids[fns[1][0]]}
            self.guests[g] = {"pchids": pcis, "registered": [F3, F2], "conns": [], "passed": True,
                              "functions": fns}
        self.captures = {"a": {}, "c": {}}
        t = {"A": 0, "B": 5}   # the emulators' first connection opens at t (s)
        for k, (client, server) in enumerate(self.STREAMS):
            want = {"a": A, "c": B}[client]
            chid = wire.get((client, server), want)
            emu = host.get((client, server), "A" if chid == A else "B")
            cgid, sgid = (gid(chids[emu], int(dict(self.FNS[g])[emu][3:])) for g in (client, server))
            wgid = {g: gid(chid, int(dict(self.FNS[g])["A" if chid == A else "B"][3:])) for g in (client, server)}
            ctok, stok = 0x1000 * (k + 1), 0x1000 * (k + 1) + 1
            offer = [(gid(chids[e], int(f[3:])), chids[e]) for e, f in self.FNS[client]]
            for i in range(conns):
                key = f"{self.IPS[client]}:{40000 + 10 * k + i}>{self.IPS[server]}:{ct.MULTI_PORT}"
                acc = check_e2e.clc_fields(accept_confirm(2, 2, wgid[server], stok, chid=chid))
                acc["first_contact"] = i < firsts
                conf = check_e2e.clc_fields(accept_confirm(3, 2, wgid[client], ctok, chid=chid))
                msgs = {"vlan": None, "proposal": check_e2e.clc_fields(proposal_v2(offer)), "accept": acc,
                        "confirm": conf}
                for cap in self.captures.values():
                    cap[key] = msgs
                lc, ls = key.split(">")
                for side, g, local, peer, my, tok, pg in (("client", client, lc, ls, wgid[client], ctok, wgid[server]),
                                                          ("server", server, ls, lc, wgid[server], stok, wgid[client])):
                    self.guests[g]["conns"].append({
                        "side": side, "local": local, "peer": peer, "mode": (mode or {}).get((key, side), "SMCD"),
                        "verify": "ok", "my_gid": hex(my), "token": hex(tok), "peer_gid": hex(pg),
                        "bytes": "100", "checksum": "0x1"})
            for g_, tok, rg in ((cgid, ctok, sgid), (sgid, stok, cgid)):
                fn = self.emulators[emu]["gids"][g_]
                self.emulators[emu]["dmbs"].append({"function": fn, "gid": hex(g_), "token": hex(tok),
                                                    "rgid": hex(rg), "connections": conns})
                start = t[emu] if overlap else 100 * k
                self.emulators[emu]["events"] += [
                    {"kind": "conn_opened", "function": fn, "token": hex(tok), "conn": 1, "time_us": start * 10**6},
                    {"kind": "conn_closed", "function": fn, "token": hex(tok), "conn": 1,
                     "time_us": (start + 10) * 10**6}]

    def check(self):
        return ct.check_multi(self.guests, self.emulators, self.captures, self.IPS, self.STREAMS, 2)


class MultiCase(unittest.TestCase):
    def test_each_client_takes_its_first_chid(self):
        run = Multi()
        errors, summary = run.check()
        self.assertEqual(errors, [])
        self.assertEqual(summary["offered"], {"a": [A, B], "c": [B, A]})
        self.assertEqual(sorted(summary["per_chid"]), [A, B])
        line = ct.multi_line("multi", errors, summary, run.emulators)
        self.assertIn("multi      as expected: version v2; CHIDs offered a 0x1234,0x5678 c 0x5678,0x1234; "
                      "accepted a>c 0x1234 x2 c>a 0x5678 x2; mode SMC-D 8", line)
        self.assertIn("both CHIDs at once 5.0 s", line)

    def test_dmbs_on_the_wrong_chid_fail(self):
        # The wire accepted A for a->c, the host carried its DMBs on B's functions.
        errors, _ = Multi(host={("a", "c"): "B"}).check()
        self.assertTrue(any("emulator A has no DMB 0x1001 of the server's GID" in e for e in errors), errors)
        self.assertTrue(any("on emulator B (CHID 0x5678) of a with peer c: no connection the wire accepted"
                            in e for e in errors), errors)
        self.assertTrue(any("emulator B (CHID 0x5678): its DMBs carried 8 connection ends, the wire accepted 2"
                            in e for e in errors), errors)

    def test_an_accept_on_the_other_chid_fails(self):
        errors, _ = Multi(wire={("a", "c"): B}).check()
        self.assertTrue(any("accept v2 CHID 0x5678, the kernel's choice is v2 0x1234" in e for e in errors), errors)

    def test_a_fallback_fails(self):
        key = f"10.0.0.3:40011>10.0.0.1:{ct.MULTI_PORT}"
        errors, _ = Multi(mode={(key, "server"): "FALLBACK"}).check()
        self.assertTrue(any("server: mode FALLBACK" in e and "expected SMCD" in e for e in errors), errors)

    def test_streams_one_after_the_other_fail(self):
        errors, _ = Multi(overlap=False).check()
        self.assertIn("the emulators never carried connections at the same time", errors)

    def test_a_second_first_contact_fails(self):
        errors, _ = Multi(firsts=2).check()
        self.assertTrue(any("a->c: 2 first contacts among its 2 accepts, expected 1" in e for e in errors), errors)

    def test_a_missing_connection_fails(self):
        run = Multi()
        for cap in run.captures.values():
            del cap[next(iter(cap))]
        errors, _ = run.check()
        self.assertTrue(any("a->c: 1 connections on the wire, the guests made 2" in e for e in errors), errors)

    def test_a_capture_that_differs_fails(self):
        run = Multi()
        key = next(iter(run.captures["c"]))
        run.captures["c"][key] = dict(run.captures["c"][key], accept=dict(run.captures["c"][key]["accept"], chid=B))
        errors, _ = run.check()
        self.assertTrue(any("(c's capture): accept v2 CHID 0x5678" in e for e in errors), errors)



class NoDeviceDecline(unittest.TestCase):
    """No common CHID, no v1: 6.1 on decline NOSMCD2DEV, 5.10 NOSMCDEV (it keeps no
    reason for the v2 search: smc_listen_find_device)."""

    def test_by_server_line(self):
        self.assertEqual(ct.no_device_decline("6.12"), ct.DECL_NOSMCD2DEV)
        self.assertEqual(ct.no_device_decline(None), ct.DECL_NOSMCD2DEV)
        self.assertEqual(ct.no_device_decline("5.10"), ct.DECL_NOSMCDEV)
        self.assertEqual(ct.expected_fallback("client", "5.10"),
                         (ct.DECL_PEERDECL, ct.DECL_NOSMCDEV))
        self.assertEqual(ct.expected_fallback("server", "6.1"), (ct.DECL_NOSMCD2DEV, 0))


if __name__ == "__main__":
    unittest.main()


class DibsNames(unittest.TestCase):
    """7.x registers its SMC-D devices under the dibs device's name (ism<uid>): the
    console's DIBS lines give each one's CHID (fabric id), so the offer order holds."""

    def test_offer_order_by_dibs_name(self):
        d = pathlib.Path(tempfile.mkdtemp())
        (d / "b.console.log").write_text(
            "ISMTEST: ISMDEV 0002:00:00.0 uid=0x2 fid=0x00000002 pchid=0x5678 pft=0x05\n"
            "ISMTEST: ISMDEV 0003:00:00.0 uid=0x3 fid=0x00000003 pchid=0x1234 pft=0x05\n"
            "ISMTEST: DIBS ism2 gid=56780049-534d-0001-0000-000000000000 fabric_id=0x5678\n"
            "ISMTEST: DIBS ism3 gid=12340049-534d-0001-0000-000000000000 fabric_id=0x1234\n"
            "SMCDEV 1 ism3\nSMCDEV 2 ism2\n")
        g = ct.read_guest(d / "b.console.log")
        self.assertEqual(ct.offer_order(g["registered"], g["names"]), [B, A])
