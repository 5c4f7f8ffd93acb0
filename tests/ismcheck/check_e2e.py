#!/usr/bin/env python3
"""Checks one end-to-end run: what the guests report and what the host observed.

Reads the guests' console logs (smctest's CONN/SUMMARY lines, which come from the
guest kernel's own sock_diag answers), the emulator's snapshot and its event stream,
prints a table and exits 1 if anything is off.

What the guest kernel does with a released DMB is derived from the kernel the guest
reports (`ISMTEST: BOOTED <uname -r>`) and the variant it was built as:
  release  stock kernels from v5.17 on (commit 1c5526968e27 moved the memset to the
           release): every reuse was preceded by zeroing soon after the close, none stale;
  hand-out stock kernels before v5.17 (they zero a reused buffer when it is handed out
           again), and the prezero variant (the same, patched into a newer kernel):
           reuses are clean, zeroing is NOT seen soon after the close, but before the reuse;
  stale    the nozero variant: at least one reuse carried the previous connection's bytes.
The verdict the host's view supports is computed independently and must match.

The SMC-D version each connection negotiated is read from the CLC handshake on the
wire (the guests' TCP traffic, captured by QEMU's filter-dump into <guest>.net.pcap):
the version nibble of the CLC accept and confirm messages.

With --expect-clc (the topologies v1 and vlan) each handshake is also read whole: what
the proposal offered for v1 and v2, the version, GIDs, DMB tokens and CHID of the accept
and confirm, held to the kernel's code and to the DMBs the host saw registered; with
--vlan, the handshakes' 802.1Q tag and the functions' VLAN events too.

On kernels with the dibs layer (6.18 on) each guest's /sys/class/dibs (its /init prints
`ISMTEST: DIBS <name> gid=.. fabric_id=..`) must show the GID the emulator gave that
guest's function (<guest>.function names it) and the emulator's CHID; on older kernels
that check is skipped, saying why.
"""

import argparse
import ipaddress
import json
import pathlib
import re
import struct
import sys

# A zeroing seen within this time after the close counts as "at release" (see
# reuse_evidence). The suite's seq test pauses 1.5 s between connections, so zeroing at
# hand-out comes much later.
RELEASE_WINDOW_MS = 750.0

# The seed commit (release-time zeroing) is first in v5.17.
RELEASE_ZEROING_SINCE = (5, 17)

# The dibs layer (drivers/dibs, the ISM driver's class since 6.18). Each device in
# /sys/class/dibs has `gid` (the 16-byte uuid_t printed with %pUb; the ISM driver copies
# the device's 64-bit GID into its first 8 bytes, the rest stays zero) and `fabric_id`
# (0x%04x of the driver's get_fabric_id: the zPCI function's PCHID, i.e. the CHID).
DIBS_SINCE = (6, 18)
DIBS_RE = re.compile(r"^ISMTEST: DIBS (\S+) gid=(\S*) fabric_id=(\S*)")

SUMMARY_RE = re.compile(r"^SUMMARY (.*)$")
BOOTED_RE = re.compile(r"^ISMTEST: BOOTED (\S+)")
CONN_RE = re.compile(r"^CONN (.*)$")


def fields(text):
    out = {}
    for word in text.split():
        if "=" in word:
            k, v = word.split("=", 1)
            out[k] = v
    out["_ok"] = text.rstrip().endswith(" ok")
    return out


def guest_results(run_dir):
    rows, conns = [], []
    for log in sorted(run_dir.glob("*.console.log")):
        guest = log.name.split(".")[0]
        for line in log.read_text(errors="replace").splitlines():
            line = line.strip()
            m = SUMMARY_RE.match(line)
            if m:
                rows.append((guest, fields(m.group(1))))
            m = CONN_RE.match(line)
            if m:
                conns.append((guest, fields(m.group(1))))
    return rows, conns


def kernel_releases(run_dir):
    """{guest: release} from the guests' `ISMTEST: BOOTED` lines."""
    out = {}
    for log in sorted(run_dir.glob("*.console.log")):
        for line in log.read_text(errors="replace").splitlines():
            m = BOOTED_RE.match(line.strip())
            if m:
                out[log.name.split(".")[0]] = m.group(1)
                break
    return out


def release_tuple(release):
    m = re.match(r"(\d+)\.(\d+)", release)
    return (int(m.group(1)), int(m.group(2))) if m else None


def expected_zeroing(variant, release):
    """release | hand-out | stale: what this kernel does with a released DMB."""
    if variant == "nozero":
        return "stale"
    if variant == "prezero":
        return "hand-out"
    ver = release_tuple(release)
    if ver is None:
        raise ValueError(f"cannot read a kernel version from {release!r}")
    return "release" if ver >= RELEASE_ZEROING_SINCE else "hand-out"


# ---- the dibs devices against the host ------------------------------------------------
def dibs_gid(gid):
    """The host's 64-bit GID as the guest's /sys/class/dibs/*/gid shows it."""
    b = gid.to_bytes(8, "big") + bytes(8)
    return f"{b[:4].hex()}-{b[4:6].hex()}-{b[6:8].hex()}-{b[8:10].hex()}-{b[10:].hex()}"


def guest_dibs(run_dir):
    """{guest: {"function": name or None, "dibs": [(device, gid, fabric_id)]}} for every
    guest with a console log."""
    out = {}
    for log in sorted(run_dir.glob("*.console.log")):
        guest = log.name.split(".")[0]
        fn = run_dir / f"{guest}.function"
        devices = []
        for line in log.read_text(errors="replace").splitlines():
            m = DIBS_RE.match(line.strip())
            if m:
                devices.append(m.groups())
        out[guest] = {"function": fn.read_text().strip() if fn.exists() else None, "dibs": devices}
    return out


def check_dibs(release, guests, snapshot):
    """("ok" | "fail" | "skip", [message]): each guest's dibs device against the host's
    view (snapshot: ism-emu observe json, with "chid" and "functions": [{name, gid}]).
    Exactly one dibs device per guest (each has one ISM function and DIBS_LO is off), with
    its function's GID and the emulator's CHID as fabric_id."""
    ver = release_tuple(release)
    reported = {g: v["dibs"] for g, v in guests.items() if v["dibs"]}
    if ver is None:
        return "fail", [f"cannot read a kernel version from {release!r}"]
    if ver < DIBS_SINCE:
        if reported:
            return "fail", [f"kernel {release} predates the dibs layer ({DIBS_SINCE[0]}.{DIBS_SINCE[1]}) "
                            f"yet reported dibs devices: {reported}"]
        return "skip", [f"kernel {release} has no dibs layer (added in {DIBS_SINCE[0]}.{DIBS_SINCE[1]}): "
                        f"no /sys/class/dibs to compare with the host"]
    if not guests:
        return "fail", ["no guest console to read /sys/class/dibs from"]
    try:
        chid = int(snapshot["chid"], 16)
        host = {f["name"]: int(f["gid"], 16) for f in snapshot["functions"]}
    except (KeyError, TypeError, ValueError) as e:
        return "fail", [f"the emulator's snapshot has no CHID and function GIDs ({e})"]
    ok, notes = True, []
    for guest, v in sorted(guests.items()):
        fn, devices = v["function"], v["dibs"]
        if fn not in host:
            ok = False
            notes.append(f"{guest}: its function {fn!r} is not among the host's {sorted(host)}")
            continue
        if len(devices) != 1:
            ok = False
            notes.append(f"{guest}: {len(devices)} dibs device(s) in /sys/class/dibs, expected 1 "
                         f"(its function {fn}): {devices}")
            continue
        name, gid, fabric = devices[0]
        want_gid = dibs_gid(host[fn])
        try:
            fabric_val = int(fabric, 16)
        except ValueError:
            fabric_val = None
        if gid.lower() != want_gid:
            ok = False
            notes.append(f"{guest}: dibs {name} gid {gid}, the host gave {fn} GID {host[fn]:#018x} ({want_gid})")
        if fabric_val != chid:
            ok = False
            notes.append(f"{guest}: dibs {name} fabric_id {fabric or '(empty)'}, the host's CHID is {chid:#06x}")
        if gid.lower() == want_gid and fabric_val == chid:
            notes.append(f"{guest}: dibs {name} gid {gid} = {fn}'s GID {host[fn]:#018x}, fabric_id {fabric} = CHID")
    return ("ok" if ok else "fail"), notes


# ---- the CLC handshake on the wire ----------------------------------------------------
# CLC messages (net/smc/smc_clc.h) start with an eyecatcher ("SMCR" or "SMCD" in EBCDIC),
# a type byte (1 proposal, 2 accept, 3 confirm, 4 decline), a 16-bit length and a byte
# whose high nibble is the SMC version (the struct's bitfields are big-endian on s390).
CLC_EYECATCHERS = (b"\xe2\xd4\xc3\xd9", b"\xe2\xd4\xc3\xc4")
CLC_TYPES = {1: "proposal", 2: "accept", 3: "confirm", 4: "decline"}


def pcap_tcp_payloads(path, with_vlan=False):
    """Yields (src, sport, dst, dport, payload) for each IPv4 or IPv6 TCP segment with
    data (an IPv6 address in brackets, "[fd00::1]", so that "address:port" splits at its
    last colon), plus the frame's 802.1Q VLAN id (None: untagged) as a sixth item when
    with_vlan."""
    data = path.read_bytes()
    if len(data) < 24:
        return
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        end = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        end = ">"
    else:
        raise ValueError(f"{path}: not a pcap file")
    linktype = struct.unpack(end + "I", data[20:24])[0]
    if linktype != 1:
        raise ValueError(f"{path}: link type {linktype}, expected Ethernet")
    off = 24
    while off + 16 <= len(data):
        caplen = struct.unpack(end + "I", data[off + 8:off + 12])[0]
        frame = data[off + 16:off + 16 + caplen]
        off += 16 + caplen
        # A guest's VLAN interface tags its frames in software: the tag is on the wire.
        vlan, l3 = None, 14
        if frame[12:14] == b"\x81\x00" and len(frame) >= 18:
            vlan = struct.unpack(">H", frame[14:16])[0] & 0x0FFF
            l3 = 18
        ethertype, ip = frame[l3 - 2:l3], frame[l3:]
        if ethertype == b"\x08\x00" and len(ip) >= 20 and ip[0] >> 4 == 4 and ip[9] == 6:
            ihl = (ip[0] & 0x0F) * 4
            tcp = ip[ihl:struct.unpack(">H", ip[2:4])[0]]
            src = str(ipaddress.IPv4Address(ip[12:16]))
            dst = str(ipaddress.IPv4Address(ip[16:20]))
        elif ethertype == b"\x86\xdd" and len(ip) >= 40 and ip[0] >> 4 == 6 and ip[6] == 6:
            # TCP right after the fixed header: the guests' stacks add no extension header.
            tcp = ip[40:40 + struct.unpack(">H", ip[4:6])[0]]
            src = f"[{ipaddress.IPv6Address(ip[8:24])}]"
            dst = f"[{ipaddress.IPv6Address(ip[24:40])}]"
        else:
            continue
        if len(tcp) < 20:
            continue
        doff = (tcp[12] >> 4) * 4
        payload = tcp[doff:]
        if payload:
            sport, dport = struct.unpack(">HH", tcp[:4])
            yield (src, sport, dst, dport, payload) + ((vlan,) if with_vlan else ())


# The SMC type of each version a proposal offers (net/smc/smc_clc.h SMC_TYPE_*).
CLC_SMC_TYPES = {0: "R", 1: "D", 2: "N", 3: "B"}


def clc_fields(payload):
    """The fields of one CLC message (net/smc/smc_clc.h, big-endian) that say what was
    offered and accepted: every message has kind and version; a proposal the SMC types it
    offers for v1 and v2 (typev1, typev2: R, D, N or B), its SMC-Dv1 GID and CHID (zero
    when it offers no SMC-Dv1), its IPv4 prefix (v1 only), the SMC-Dv2 GID/CHID list,
    the number of user EIDs, whether it carries the system EID and the client's SMC
    release (struct smc_clc_v2_flag); an SMC-D accept or
    confirm the sender's GID, its DMB token, the link id and, in v2, the CHID, whether it
    is a first contact and then the SMC release of its first contact extension; a decline
    its reason (diagnosis); every message its length (the header's). None if the payload
    is no CLC message."""
    if len(payload) < 8 or payload[:4] not in CLC_EYECATCHERS or payload[4] not in CLC_TYPES:
        return None
    kind, b7 = CLC_TYPES[payload[4]], payload[7]
    out = {"kind": kind, "version": b7 >> 4, "length": struct.unpack(">H", payload[5:7])[0]}
    if kind == "proposal":
        # struct smc_clc_msg_proposal (40 bytes), then struct smc_clc_msg_smcd (40).
        out["typev1"] = CLC_SMC_TYPES[b7 & 3]
        out["typev2"] = CLC_SMC_TYPES[(b7 >> 2) & 3]
        if len(payload) >= 52:
            out["gid"], out["chid"], v2_off = struct.unpack(">QHH", payload[40:52])
            if out["typev1"] in ("D", "B") and len(payload) >= 88:
                # struct smc_clc_msg_proposal_prefix: the IPv4 subnet and its length, then
                # the count of struct smc_clc_ipv6_prefix (17 bytes each) that follow; an
                # IPv6 connection sends those, its IPv4 subnet zero (smc_clc_prfx_set).
                plen, cnt6 = payload[84], payload[87]
                if cnt6 and len(payload) >= 88 + 17 * cnt6:
                    p6 = [payload[88 + 17 * i:105 + 17 * i] for i in range(cnt6)]
                    out["prefix"] = " ".join(f"{ipaddress.IPv6Address(p[:16])}/{p[16]}" for p in p6)
                else:
                    out["prefix"] = f"{ipaddress.IPv4Address(payload[80:84])}/{plen}"
            out["v2_gidchids"] = []
            v2 = 52 + v2_off
            if v2_off and out["typev2"] in ("D", "B") and len(payload) >= v2 + 8:
                eid_cnt, gid_cnt, _, flag, smcd_off = struct.unpack(">BBBBxxH", payload[v2:v2 + 8])
                out["ueids"] = eid_cnt
                out["seid"] = bool(flag & 0x01)   # struct smc_clc_v2_flag: release:4, rsvd:3, seid:1
                out["release"] = flag >> 4
                # struct smc_clc_smcd_v2_extension: system EID (32), reserved (16), list.
                lst = v2 + 8 + smcd_off + 48
                for i in range(gid_cnt):
                    if len(payload) >= lst + 10 * (i + 1):
                        out["v2_gidchids"].append(struct.unpack(">QH", payload[lst + 10 * i:lst + 10 * i + 10]))
    elif kind == "decline" and len(payload) >= 20:
        # struct smc_clc_msg_decline: the header, the sender's id_for_peer (8), then the
        # reason, which the receiver keeps as its peer_diagnosis (smc_clc.c smc_clc_wait_msg).
        out["diagnosis"] = struct.unpack(">I", payload[16:20])[0]
    if kind in ("accept", "confirm"):
        # the eyecatcher says which of the two the handshake agreed on
        out["smc"] = "R" if payload[:4] == CLC_EYECATCHERS[0] else "D"
    if kind in ("accept", "confirm") and payload[:4] == CLC_EYECATCHERS[1] and len(payload) >= 32:
        # struct smcd_clc_msg_accept_confirm_common, then (v2) the CHID.
        out["gid"], out["token"] = struct.unpack(">QQ", payload[8:24])
        out["linkid"] = struct.unpack(">I", payload[28:32])[0]
        if out["version"] >= 2 and len(payload) >= 34:
            out["chid"] = struct.unpack(">H", payload[32:34])[0]
            # The header's typev2 (bits 3-2 of byte 7) has SMC_FIRST_CONTACT_MASK (0b10):
            # a new link group, so struct smc_clc_first_contact_ext follows the 74 bytes of
            # the v2 accept/confirm; its second byte is os_type:4, release:4.
            out["first_contact"] = bool(b7 & 0x08)
            if out["first_contact"] and len(payload) >= 76:
                out["fce_release"] = payload[75] & 0x0F
    return out


def clc_handshakes(run_dir):
    """{connection (client ip:port>server ip:port): {kind: clc_fields, "vlan": id or
    None}} from the first guest capture that has CLC messages (every guest sees the
    same handshakes). The key is the whole 4-tuple: a client port alone is not a
    connection, as the kernel may give two connections to different servers the same
    port (seen in a run: seq and concurrent each had a connection from 10.0.0.2:39832)."""
    for pcap in sorted(run_dir.glob("*.net.pcap")):
        conns = capture_handshakes(pcap)
        if conns:
            return conns
    return {}


def capture_handshakes(pcap):
    """clc_handshakes of one capture alone (make topologies' multi case reads every
    guest's)."""
    conns = {}
    for src, sport, dst, dport, payload, vlan in pcap_tcp_payloads(pcap, with_vlan=True):
        msg = clc_fields(payload)
        if msg is None:
            continue
        # The client is the side that sends the proposal and the confirm.
        if msg["kind"] in ("proposal", "confirm"):
            conn = f"{src}:{sport}>{dst}:{dport}"
        else:
            conn = f"{dst}:{dport}>{src}:{sport}"
        conns.setdefault(conn, {"vlan": vlan})[msg["kind"]] = msg
    return conns


def versions_of(handshakes):
    """{connection: {"accept": v, "confirm": v, ...}}: the version nibble of each CLC
    message of each connection's handshake (as clc_handshakes gives them)."""
    return {conn: {k: m["version"] for k, m in msgs.items() if k != "vlan"}
            for conn, msgs in handshakes.items()}


def clc_versions(run_dir):
    """versions_of the run's handshakes (clc_handshakes)."""
    return versions_of(clc_handshakes(run_dir))


def version_label(conns):
    """"v2", "v1", or e.g. "v1:3 v2:47" when connections differ; "-" if none seen."""
    counts = {}
    for c in conns.values():
        v = c.get("confirm", c.get("accept"))
        key = f"v{v}" if v is not None else "declined"
        counts[key] = counts.get(key, 0) + 1
    if not counts:
        return "-"
    if len(counts) == 1:
        return next(iter(counts))
    return " ".join(f"{k}:{n}" for k, n in sorted(counts.items()))


def reuse_evidence(dmbs):
    """Classifies each reuse the observer remembers (its `recent` connections) by when the
    DMB became zero: "release" (zero within RELEASE_WINDOW_MS of the close, and idle
    longer than that before the next connection), "hand-out" (no zero within that window
    after the close, zero just before, or only at, the next connection), "stale" (the
    reuse carried old bytes) or "undecided" (the next connection came so soon after the
    close that both would look alike)."""
    out = {"release": 0, "hand-out": 0, "stale": 0, "undecided": 0}
    for d in dmbs:
        recent = d.get("recent", [])
        for prev, nxt in zip(recent, recent[1:]):
            if nxt.get("reuse_clean") is None or prev.get("closed_us") is None:
                continue
            if not nxt["reuse_clean"]:
                out["stale"] += 1
                continue
            gap_ms = (nxt["opened_us"] - prev["closed_us"]) / 1000.0
            zero_ms = prev.get("zeroed_after_ms")
            if zero_ms is not None and zero_ms <= RELEASE_WINDOW_MS:
                kind = "release" if gap_ms - zero_ms > RELEASE_WINDOW_MS else "undecided"
            elif gap_ms > RELEASE_WINDOW_MS:
                # Idle for longer than the window without being zeroed right after the
                # close, yet clean when reused: zeroed when handed out again.
                kind = "hand-out"
            else:
                kind = "undecided"
            out[kind] += 1
    return out


def observed_zeroing(evidence):
    """The verdict the host's view supports: stale, release, hand-out, mixed or none."""
    if evidence["stale"]:
        return "stale"
    rel, hand = evidence["release"], evidence["hand-out"]
    if rel and not hand:
        return "release"
    if hand and not rel:
        return "hand-out"
    return "mixed" if rel else "none"


def zeroing_mismatch(expected, verdict, evidence, unpaced):
    """Why the host's verdict on released DMBs contradicts the kernel's, or None.
    unpaced: the run's connections follow each other at once (the api topology), so
    no reuse can tell release from hand-out: a verdict of "none" with only undecided
    reuses is then no contradiction (stale reuses and late zeroing are checked apart)."""
    if expected == "?" or verdict == expected:
        return None
    if unpaced and verdict == "none" and evidence["undecided"] and not evidence["stale"]:
        return None
    # Unpaced, a connection may also take a DMB and leave it idle (a queued accept, the
    # api topology's backlog subtest): a hand-out kernel's zeroing then looks like one at
    # release (the other way round, a release kernel's DMB left unzeroed until the next
    # connection, is still a contradiction).
    if unpaced and expected == "hand-out" and verdict in ("release", "mixed"):
        return None
    return f"the host's view says {verdict}, the kernel should show {expected}"


# ---- what each connection negotiated, against the kernel's code and the host ----------
def handshakes_to(conns, ports, notes):
    """The complete handshakes (proposal, accept and confirm on the wire) to the server
    ports `ports`, as (conn, port, proposal, accept, confirm, the VLAN it crossed on),
    and whether all were: an incomplete one, or a port with none, is a line in notes and
    makes it False."""
    out, complete, seen = [], True, {port: 0 for port in ports}
    for conn, msgs in sorted(conns.items()):
        port = int(conn.rsplit(":", 1)[1])
        if port not in seen:
            continue
        seen[port] += 1
        prop, acc, conf = msgs.get("proposal"), msgs.get("accept"), msgs.get("confirm")
        if not prop or not acc or not conf:
            complete = False
            notes.append(f"{conn}: incomplete handshake on the wire: {sorted(k for k in msgs if k != 'vlan')}")
            continue
        out.append((conn, port, prop, acc, conf, msgs.get("vlan")))
    for port, n in seen.items():
        if not n:
            complete = False
            notes.append(f"no CLC handshake to port {port} on the wire")
    return out, complete


def check_negotiation(conns, expect, vlan, snapshot, events):
    """(ok, notes): each handshake to a server port in `expect` ({port: SMC-D version})
    against what the kernel's code decides there (docs/testing.md, topologies v1 and
    vlan): the client proposed SMC-D for v1 and for v2 with its own function's GID; the
    server accepted, and the client confirmed, the expected version; a v2 accept names
    the emulator's CHID; the accept's and the confirm's DMB tokens are DMBs the host saw
    registered by the function whose GID the message names, and carrying a connection;
    with `vlan`, the handshake crossed the wire tagged with that VLAN id."""
    notes = []
    try:
        chid = int(snapshot["chid"], 16)
        by_gid = {int(f["gid"], 16): f["name"] for f in snapshot["functions"]}
    except (KeyError, TypeError, ValueError) as e:
        return False, [f"the emulator's snapshot has no CHID and function GIDs ({e})"]
    registered = {}   # token -> function that registered it
    used = set()      # tokens a connection was opened on
    for e in events:
        tok = int(e["token"], 16) if e.get("token") else None
        if e.get("kind") == "dmb_registered":
            registered[tok] = e.get("function")
        elif e.get("kind") == "conn_opened":
            used.add(tok)
    handshakes, ok = handshakes_to(conns, expect, notes)
    for conn, port, prop, acc, conf, on_vlan in handshakes:
        want, bad = expect[port], []
        if (prop["typev1"], prop["typev2"]) not in (("D", "D"), ("B", "B"), ("D", "B"), ("B", "D")):
            bad.append(f"proposal offers v1 {prop['typev1']} v2 {prop['typev2']}, expected SMC-D in both")
        if by_gid.get(prop.get("gid")) is None:
            bad.append(f"the proposal's SMC-Dv1 GID {prop.get('gid', 0):#018x} is no function's")
        # A v1 offer carries the client's subnet (or IPv6 prefixes): the client's address
        # is in one of them.
        client = ipaddress.ip_address(conn.split(">")[0].rsplit(":", 1)[0].strip("[]"))
        nets = [ipaddress.ip_network(p, strict=False) for p in prop.get("prefix", "").split()]
        if prop["typev1"] in ("D", "B") and not any(client in n for n in nets):
            bad.append(f"the v1 proposal's prefix {prop.get('prefix', 'none')!r} does not hold the client's address {client}")
        for m in (acc, conf):
            if m["version"] != want:
                bad.append(f"{m['kind']} is v{m['version']}, expected v{want}")
            fn = by_gid.get(m.get("gid"))
            if fn is None:
                bad.append(f"{m['kind']} names GID {m.get('gid', 0):#018x}, no function's")
            elif registered.get(m.get("token")) != fn:
                bad.append(f"{m['kind']}'s DMB {m.get('token', 0):#x} was not registered by {fn} "
                           f"(the host saw it from {registered.get(m.get('token'))})")
            elif m.get("token") not in used:
                bad.append(f"{m['kind']}'s DMB {m['token']:#x} of {fn} carried no connection")
        if conf.get("gid") != prop.get("gid"):
            bad.append("the confirm's GID is not the one the client proposed")
        if acc.get("gid") == conf.get("gid"):
            bad.append("accept and confirm name the same GID")
        if want >= 2 and acc.get("chid") != chid:
            bad.append(f"the v2 accept names CHID {acc.get('chid', 0):#06x}, the emulator's is {chid:#06x}")
        if vlan is not None and on_vlan != vlan:
            bad.append(f"the handshake crossed the wire on VLAN {on_vlan}, expected {vlan}")
        if bad:
            ok = False
            notes += [f"{conn}: {b}" for b in bad]
        else:
            chids = f" CHID {acc['chid']:#06x}" if want >= 2 else ""
            notes.append(f"{conn}{f' vlan {vlan}' if vlan is not None else ''}: proposal v1 {prop['typev1']} "
                         f"v2 {prop['typev2']} (GID {prop['gid']:#018x}{', prefix ' + prop['prefix'] if 'prefix' in prop else ''}"
                         f"{', ' + str(prop.get('ueids', 0)) + ' UEID(s), SEID ' + ('on' if prop.get('seid') else 'off') if 'ueids' in prop else ''}); "
                         f"accept v{acc['version']}{chids} by {by_gid[acc['gid']]} DMB {acc['token']:#x}, "
                         f"confirm by {by_gid[conf['gid']]} DMB {conf['token']:#x}")
    return ok, notes


def check_vlan_events(vlan, events, functions, silent=()):
    """(ok, notes): every function in `functions` registered VLAN `vlan` with the device
    (a vlan_added event) and released it again afterwards (vlan_deleted); each function in
    `silent` registered no VLAN at all (a server that accepted only v2: its listen path
    returns with the v2 device before it reads the VLAN, af_smc.c smc_listen_find_device)."""
    ok, notes = True, []

    def kinds_of(fn):
        return [e["kind"] for e in events if e.get("function") == fn and e.get("vlan_id") == vlan
                and e.get("kind") in ("vlan_added", "vlan_deleted")]

    for fn in sorted(silent):
        kinds = kinds_of(fn)
        if kinds:
            ok = False
            notes.append(f"{fn}: VLAN events {kinds}, expected none (it served SMC-Dv2 only)")
        else:
            notes.append(f"{fn}: no VLAN events (it served SMC-Dv2 only)")
    for fn in sorted(set(functions) - set(silent)):
        kinds = kinds_of(fn)
        if kinds[:1] == ["vlan_added"] and kinds[-1:] == ["vlan_deleted"]:
            notes.append(f"{fn}: VLAN {vlan} {' then '.join(kinds)}")
        else:
            ok = False
            notes.append(f"{fn}: VLAN {vlan} events {kinds or 'none'}, expected vlan_added ... vlan_deleted")
    return ok, notes


# The run's test points, in report order (tests/ismcheck/results.py turns them into KTAP and
# JUnit): each fails with the messages given to `fail`.
CHECKS = {
    "guest_kernel": "every guest booted and reported the same kernel",
    "guest_programs_passed": "every guest test program passed (its own byte checks included)",
    "every_connection_smcd": "every connection ran SMC-D, per the guest kernel's sock_diag",
    "checksums_agree": "sender and receiver checksums of each stream agree",
    "emulator_saw_traffic": "the emulator saw DMB registrations and data moves",
    "event_stream": "the event stream has registrations, connection opens and closes",
    "reuses_checked": "the observer checked every DMB reuse",
    "observer_zeroing": "the host's view of released DMBs matches what the kernel does",
    "clc_on_wire": "each connection's CLC handshake is on the wire",
    "dibs_matches_host": "each guest's /sys/class/dibs shows its function's GID and the CHID (6.18+)",
    # Only with --expect-clc / --vlan (the topologies v1 and vlan):
    "clc_negotiated": "each connection offered SMC-Dv1 and v2 and agreed on the version the kernel's code decides, "
                      "on DMBs the host saw registered by the functions the CLC messages name",
    "vlan_on_device": "each function registered the VLAN with the device and released it",
    # Only with --smcr-conns / --expect-smc (the topology roce):
    "every_connection_smcr": "the connections smctest --smcr ran were SMC-R (sock_diag), as many as expected",
    "clc_smc_type": "each handshake offered SMC-D and/or SMC-R and agreed on the one the kernel's code decides "
                    "(the wire)",
}
def check_smc_type(conns, expect):
    """(ok, lines): each handshake to a port of expect ({port: (offer, accept)}) offered
    that SMC type in v2 and agreed on that type and version in accept and confirm; each
    port saw at least one."""
    notes = []
    handshakes, ok = handshakes_to(conns, expect, notes)
    for conn, port, prop, acc, conf, _ in handshakes:
        offer, agreed = expect[port]
        got = [f"{m['smc']}{m['version']}" for m in (acc, conf)]
        good = prop["typev2"] == offer and got == [agreed, agreed]
        ok &= good
        notes.append(f"{conn}: proposal v2 {prop['typev2']} (expected {offer}), accept {got[0]}, confirm {got[1]} "
                     f"(expected {agreed}){'' if good else ': NOT as expected'}")
    return ok, notes


OPTIONAL_CHECKS = {"clc_negotiated": "expect_clc", "vlan_on_device": "vlan", "every_connection_smcr": "smcr_conns",
                   "clc_smc_type": "expect_smc"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", required=True, type=pathlib.Path)
    ap.add_argument("--variant", default="stock")
    ap.add_argument("--result", type=pathlib.Path,
                    help="also write the run's key figures as JSON here (for `make matrix`)")
    ap.add_argument("--unpaced", action="store_true",
                    help="connections come back to back (api topology): undecided reuses are no contradiction")
    ap.add_argument("--checks", type=pathlib.Path,
                    help="append the run's test points here, one JSON object a line")
    ap.add_argument("--expect-clc", action="append", default=[], metavar="PORT=VERSION",
                    help="the SMC-D version connections to server port PORT must agree on (with the "
                         "v1 and v2 offer, the GIDs and DMBs checked against the host: check_negotiation)")
    ap.add_argument("--smcr-conns", type=int, default=0, metavar="N",
                    help="exactly N CONN lines (over all guests and sides) are SMC-R, from smctest --smcr "
                         "runs (the roce topology); every other connection must be SMC-D")
    ap.add_argument("--expect-smc", action="append", default=[], metavar="PORT=OFFER/ACCEPT",
                    help="connections to server port PORT: the proposal's v2 offer (D, R or B: both) and "
                         "what accept and confirm agreed on (D2, R2: SMC-D or SMC-R, version 2)")
    ap.add_argument("--vlan", type=int,
                    help="the handshakes must cross the wire on this VLAN, and every function must "
                         "register it with the device and release it")
    args = ap.parse_args()
    try:
        expect_clc = {int(p): int(v) for p, v in (x.split("=", 1) for x in args.expect_clc)}
    except ValueError:
        ap.error("--expect-clc takes PORT=VERSION")
    try:
        expect_smc = {int(p): tuple(v.split("/")) for p, v in (x.split("=", 1) for x in args.expect_smc)}
        assert all(len(v) == 2 and v[0] in "DRB" and len(v[1]) == 2 and v[1][0] in "DR" for v in expect_smc.values())
    except (ValueError, AssertionError):
        ap.error("--expect-smc takes PORT=OFFER/ACCEPT, e.g. 12360=B/D2")
    errors = []
    failed = {name: [] for name in CHECKS}
    notes = {name: [] for name in CHECKS}

    def fail(check, message):
        errors.append(message)
        failed[check].append(message)

    releases = kernel_releases(args.run_dir)
    if not releases:
        fail("guest_kernel", "no guest reported its kernel (ISMTEST: BOOTED)")
    elif len(set(releases.values())) != 1:
        fail("guest_kernel", f"the guests run different kernels: {releases}")
    release = next(iter(releases.values()), "?")
    try:
        expected = expected_zeroing(args.variant, release)
    except ValueError as e:
        fail("guest_kernel", str(e))
        expected = "?"

    rows, conns = guest_results(args.run_dir)
    print(f"{'guest':<6} {'test':<11} {'side':<7} {'conns':>5} {'smcd':>5} {'fallback':>8} {'bytes':>12} {'checksum':<20} result")
    for guest, f in rows:
        print(f"{guest:<6} {f.get('test','?'):<11} {f.get('side','?'):<7} {f.get('conns','?'):>5} {f.get('smcd','?'):>5} "
              f"{f.get('fallback','?'):>8} {f.get('bytes','?'):>12} {f.get('checksum','-'):<20} {'ok' if f['_ok'] else 'FAIL'}")
        if not f["_ok"]:
            fail("guest_programs_passed", f"{guest}: {f.get('test')} {f.get('side')} failed: {f.get('first_error', '')}")
        elif "smcr" in f:
            # smctest --smcr: every connection of this run must be SMC-R
            if f.get("smcr") != f.get("conns") or f.get("fallback") != "0":
                fail("every_connection_smcr", f"{guest}: {f.get('test')}: not every connection used SMC-R")
        elif f.get("side") != "self" and (f.get("smcd") != f.get("conns") or f.get("fallback") != "0"):
            fail("every_connection_smcd", f"{guest}: {f.get('test')}: not every connection used SMC-D")
    if not rows:
        fail("guest_programs_passed", "no SUMMARY lines in any guest console")
    smcr = [c for _, c in conns if c.get("mode") == "SMCR"]
    if len(smcr) != args.smcr_conns:
        fail("every_connection_smcr" if args.smcr_conns else "every_connection_smcd",
             f"{len(smcr)} connection(s) reported SMCR, expected {args.smcr_conns}")
    elif smcr:
        notes["every_connection_smcr"].append(f"{len(smcr)} connections SMC-R (CONN lines of both sides), as expected")
    non_smcd = [c for _, c in conns if c.get("mode") not in ("SMCD", "SMCR")]
    if non_smcd:
        fail("every_connection_smcd", f"{len(non_smcd)} connection(s) reported a mode other than SMCD")
    # Checksums of a stream must agree between the sending and the receiving side.
    by_test = {}
    for guest, f in rows:
        if f.get("side") in ("client", "server") and f["_ok"]:
            by_test.setdefault(f.get("test"), set()).add(f.get("checksum"))
    for test, sums in by_test.items():
        if len(sums) != 1:
            fail("checksums_agree", f"{test}: client and server checksums differ: {sorted(sums)}")

    snap_path = args.run_dir / "snapshot.json"
    try:
        snap = json.loads(snap_path.read_text())
    except (OSError, ValueError) as e:
        fail("emulator_saw_traffic", f"no emulator snapshot ({e})")
        snap = {"functions": [], "dmbs": []}
    moves = sum(f["counters"]["moves_out"] for f in snap["functions"])
    if moves == 0:
        fail("emulator_saw_traffic", "the emulator saw no data moves")
    dmbs = snap["dmbs"]
    if not dmbs:
        fail("emulator_saw_traffic", "the emulator saw no DMB registrations")

    events = []
    try:
        for line in (args.run_dir / "events.jsonl").read_text().splitlines():
            events.append(json.loads(line))
    except (OSError, ValueError) as e:
        fail("event_stream", f"event stream unreadable: {e}")
    kinds = {e["kind"] for e in events}
    for needed in ("dmb_registered", "conn_opened", "conn_closed"):
        if needed not in kinds:
            fail("event_stream", f"no {needed} event in the stream")

    reuses = sum(d["reuses"] for d in dmbs)
    stale = sum(d["stale_reuses"] for d in dmbs)
    # zero_delays_ms is a histogram: counts[i] delays <= le_ms[i] (and > le_ms[i-1]).
    def within(hist, ms):
        return sum(n for le, n in zip(hist["le_ms"], hist["counts"]) if le <= ms)
    if dmbs and RELEASE_WINDOW_MS not in dmbs[0]["zero_delays_ms"]["le_ms"]:
        fail("observer_zeroing", f"zero_delays_ms has no bucket bound at {RELEASE_WINDOW_MS} ms")
    hists = [d["zero_delays_ms"] for d in dmbs]
    zeroings = sum(h["count"] for h in hists)
    at_release = sum(within(h, RELEASE_WINDOW_MS) for h in hists)
    evidence = reuse_evidence(dmbs)
    # Exact delays of the connections the observer remembers (the histogram only has
    # buckets): for the median in the matrix table.
    recent_delays = sorted(c["zeroed_after_ms"] for d in dmbs for c in d.get("recent", [])
                           if c.get("zeroed_after_ms") is not None)
    conns_seen = sum(d["connections"] for d in dmbs)
    print()
    print(f"host view: {len(dmbs)} DMBs, {conns_seen} connections, {reuses} reuses ({stale} stale), "
          f"{zeroings} zeroings after close, {at_release} within {RELEASE_WINDOW_MS:.0f} ms")
    if zeroings:
        bounds = hists[0]["le_ms"]
        totals = [sum(h["counts"][i] for h in hists) for i in range(len(bounds))]
        buckets = "  ".join(f"<={le:g}:{n}" for le, n in zip(bounds, totals) if n)
        over = sum(h["over"] for h in hists)
        worst = max(h["max_ms"] for h in hists if h["max_ms"] is not None)
        print(f"zeroing delay after close (ms): {buckets}{f'  over:{over}' if over else ''}  max {worst:.1f}")

    unchecked = sum(d.get("unchecked_reuses", 0) for d in dmbs)
    if unchecked:
        fail("reuses_checked", f"{unchecked} reuse(s) not checked (DMB unreadable or over the read budget)")
    verdict = observed_zeroing(evidence)
    print(f"reuses by when the DMB became zero: {evidence['release']} at release, "
          f"{evidence['hand-out']} at hand-out, {evidence['stale']} stale, {evidence['undecided']} undecided "
          f"(next connection within {RELEASE_WINDOW_MS:.0f} ms of the close)")
    if expected == "release":
        if stale:
            fail("observer_zeroing", f"kernel {release} zeroes at release: {stale} stale reuse(s)")
        if reuses == 0:
            fail("observer_zeroing", f"kernel {release}: no reuse seen")
        for d in dmbs:
            hist = d["zero_delays_ms"]
            late = hist["count"] - within(hist, RELEASE_WINDOW_MS)
            # Back to back (--unpaced), a DMB can be handed out again before the host has
            # read it as zero: only a stale reuse or a late zeroing says something then.
            if d["reuses"] and d["zeroed_after_close"] < d["reuses"] and not args.unpaced:
                fail("observer_zeroing", f"kernel {release} zeroes at release: DMB {d['token']} reused {d['reuses']}x but zeroed after close only {d['zeroed_after_close']}x")
            if late:
                fail("observer_zeroing", f"kernel {release} zeroes at release: DMB {d['token']} zeroed late after close {late}x (max {hist['max_ms']:.1f} ms)")
    elif expected == "hand-out":
        if reuses == 0:
            fail("observer_zeroing", f"kernel {release}: no reuse seen")
        if stale:
            fail("observer_zeroing", f"kernel {release} zeroes at hand-out: {stale} stale reuse(s)")
        if evidence["release"] and not args.unpaced:
            fail("observer_zeroing", f"kernel {release} zeroes at hand-out: {evidence['release']} reuse(s) zeroed right after the close "
                          f"and idle until the next connection; expected none at release")
        # Back to back (--unpaced) no reuse can show it (5.10's api run: every one undecided).
        if not evidence["hand-out"] and not args.unpaced:
            fail("observer_zeroing", f"kernel {release} zeroes at hand-out: no reuse shows it (every next connection came too soon?)")
    elif expected == "stale":
        if stale == 0:
            fail("observer_zeroing", f"kernel {release} ({args.variant}): no stale reuse detected")
    mismatch = zeroing_mismatch(expected, verdict, evidence, args.unpaced)
    if mismatch and not errors:
        fail("observer_zeroing", f"{mismatch} (kernel {release}, {args.variant})")
    elif args.unpaced and verdict != expected:
        notes["observer_zeroing"].append("connections back to back: release or hand-out not decidable, "
                                         "only stale reuses and late zeroing checked")

    try:
        handshakes = clc_handshakes(args.run_dir)
    except (OSError, ValueError) as e:
        fail("clc_on_wire", f"cannot read the network capture: {e}")
        handshakes = {}
    clc = versions_of(handshakes)
    version = version_label(clc)
    smcd_conns = sum(int(f.get("smcd", 0)) for _, f in rows if f.get("side") == "client")
    fallbacks = sum(int(f.get("fallback", 0)) for _, f in rows if f.get("side") == "client")
    client_conns = sum(int(f.get("conns", 0)) for _, f in rows if f.get("side") == "client")
    # Two guests: every connection's handshake crossed the captured link (a guest that
    # talks to itself does it over its own interface, which no capture sees).
    two_guests = len({guest for guest, _ in rows}) >= 2
    if two_guests and client_conns and list(args.run_dir.glob("*.net.pcap")) and len(clc) < client_conns:
        fail("clc_on_wire", f"{len(clc)} CLC handshake(s) on the wire for {client_conns} connection(s)")
    def outcome(check, label, ok, lines):
        """Prints a check's lines; they are its notes if it passed, its failures if not."""
        for n in lines:
            print(f"{label}: {n}")
            if ok:
                notes[check].append(n)
            else:
                fail(check, n)

    if expect_clc:
        outcome("clc_negotiated", "clc", *check_negotiation(handshakes, expect_clc, args.vlan, snap, events))
    if expect_smc:
        outcome("clc_smc_type", "clc", *check_smc_type(handshakes, expect_smc))
    if args.vlan is not None:
        guests = guest_dibs(args.run_dir)
        functions = {g["function"] for g in guests.values() if g["function"]}
        # Guest a serves (tests: run_v1); with no v1 phase its function reads no VLAN.
        server = guests.get("a", {}).get("function")
        silent = {server} if server and 1 not in expect_clc.values() else set()
        outcome("vlan_on_device", "vlan", *check_vlan_events(args.vlan, events, functions, silent))
    dibs, dibs_notes = check_dibs(release, guest_dibs(args.run_dir), snap)
    for n in dibs_notes:
        print(f"dibs: {n}")
    if dibs == "fail":
        for n in dibs_notes:
            fail("dibs_matches_host", n)
    elif dibs == "ok":
        notes["dibs_matches_host"] += dibs_notes
    skipped = {"dibs_matches_host": dibs_notes[0]} if dibs == "skip" else {}
    print(f"guest kernel {release} ({args.variant}): zeroing expected: {expected}, host's view: {verdict}; "
          f"SMC-D version on the wire: {version} ({len(clc)} CLC handshakes)")
    if args.result:
        median = recent_delays[len(recent_delays) // 2] if recent_delays else None
        args.result.write_text(json.dumps({
            "release": release, "variant": args.variant, "expected": expected, "verdict": verdict,
            "smcd_version": version, "clc_handshakes": len(clc), "conns": client_conns,
            "smcd": smcd_conns, "fallback": fallbacks, "reuses": reuses, "stale": stale,
            "zeroings": zeroings, "median_zero_ms": median, "dibs": dibs, "ok": not errors,
            "errors": errors,
        }, indent=1) + "\n")
    notes["observer_zeroing"].append(
        f"kernel {release} ({args.variant}): expected {expected}, host's view {verdict}; reuses {reuses}, "
        f"stale {stale}; at release {evidence['release']}, at hand-out {evidence['hand-out']}, "
        f"undecided {evidence['undecided']}")
    notes["every_connection_smcd"].append(
        f"{smcd_conns} of {client_conns} client connections SMC-D, {fallbacks} fallback; "
        f"SMC-D version on the wire {version}")
    notes["emulator_saw_traffic"].append(f"{len(dmbs)} DMBs, {moves} moves")
    if args.checks:
        with args.checks.open("a") as out:
            for name, what in CHECKS.items():
                if name in OPTIONAL_CHECKS and getattr(args, OPTIONAL_CHECKS[name]) in (None, [], 0):
                    continue   # not asked for in this run
                point = {"name": name, "ok": not failed[name], "what": what,
                         "diag": notes[name] + failed[name]}
                if name in skipped:   # the check does not apply to this kernel: why
                    point["skip"] = skipped[name]
                out.write(json.dumps(point) + "\n")
    print(f"variant {args.variant}: " + ("as expected" if not errors else "NOT as expected"))
    for e in errors:
        print(f"  error: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
