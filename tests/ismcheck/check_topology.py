#!/usr/bin/env python3
"""One run of a `make topologies` case (tests/topology/topologies.sh), held to what the kernel's
code decides, in one line: the case, its verdict (as expected / NOT as expected), the SMC
version, the CHIDs offered and accepted, the mode and the decline reason if any.

  chid  the CHID cases (guest-tests/progs/smcchid: connections b->a to port 12345, then
        a->b to 12346), each guest with ISM functions of one or two emulators
        (RUN_DIR/<name>/: snapshot.json, events.jsonl). The verdict comes from
          the wire   (the guests' captures): what each proposal offered, in which order,
                     which CHID the accept named, or the decline and its reason;
          the guests (smctest's CONN lines, from the kernel's sock_diag): the mode, the
                     GID each side used, the fallback reasons; every byte checked;
          the host   (each emulator's events): which emulator's functions and DMBs carried
                     the connections, and that no other emulator registered a DMB.
        With --guest-line (the mixed-line cases: two guests of different kernel lines on
        one emulator) also the SMC release each side speaks and what it does to the CLC
        accept and confirm (mixed_release, clc_lengths).
  multi the multi case (guest-tests/progs/smcmulti): four guests, each with a function
        on both emulators, each serving and streaming to two others at once, all to port
        12350 (check_multi: every connection against the kernel's choice, on the wire of
        every capture, in the guests and in each emulator's DMBs).
  e2e   the v1 and vlan cases: tests/ismcheck/check_e2e.py's verdict (--status) on the run,
        summed up from the same capture and consoles.

The expected choice is computed from the guests' own ISM functions by the kernel's rules
(net/smc as of 6.12; the functions below name where each rule is), never from a run.
"""

import argparse
import json
import pathlib
import re
import sys

from ismcheck import check_e2e

# SMC_CLC_DECL_* (net/smc/smc_clc.h) the CHID cases can see.
DECL_NOSMCD2DEV = 0x03030007   # no SMC-Dv2 device found
DECL_PEERDECL = 0x05000000     # peer declined during handshake
DECL_NOSMCDEV = 0x03030000     # no SMC-D device found (5.10's decline for the same)
REASON_NAMES = {DECL_NOSMCD2DEV: "NOSMCD2DEV", DECL_NOSMCDEV: "NOSMCDEV", DECL_PEERDECL: "PEERDECL"}

# smcchid's phases: server port -> (client, server).
PHASES = {12345: ("b", "a"), 12346: ("a", "b")}

ISMDEV_RE = re.compile(r"^ISMTEST: ISMDEV (\S+) .*\bpchid=(0x[0-9a-fA-F]+)")
SMCDEV_RE = re.compile(r"^SMCDEV (\d+) (\S+)")
ADDR_RE = re.compile(r":(\d+)$")


def reason_name(code):
    return REASON_NAMES.get(code, f"{code:#010x}")


# ---- the kernel's rules --------------------------------------------------------------
def offer_order(registered, pchids):
    """The CHIDs a client offers for SMC-Dv2, in the proposal's order.

    net/smc/smc_ism.c smcd_register_dev puts each device without a PNET ID at the head of
    smcd_dev_list (list_add), so the list runs against the registration order (the
    guests set no PNET ID: none of the CHID cases' functions has one).
    net/smc/af_smc.c smc_find_ism_v2_device_clnt walks that list from its head and takes
    one device per CHID (smc_find_ism_v2_is_unique_chid); smc_clc.c smc_clc_send_proposal
    writes them into the SMC-Dv2 GID/CHID list in that order.
    registered: the PCI functions in the order smc registered them; pchids: {function: CHID}.
    """
    out = []
    for fn in reversed(registered):
        chid = pchids.get(fn)
        if chid is not None and chid not in out:
            out.append(chid)
    return out


def server_choice(offered, server_chids):
    """The CHID the server accepts, or None (it then declines with NOSMCD2DEV).

    net/smc/af_smc.c smc_find_ism_v2_device_serv checks the proposal's entries in order
    (smc_check_ism_v2_match: a local device on that CHID that can reach the GID; the
    emulator's functions on one CHID reach each other) and tries the matches in that order
    (smc_listen_ism_init on ism_dev[0] first): the first offered CHID the server has wins.
    With no match it stores SMC_CLC_DECL_NOSMCD2DEV; v1 is not offered (no PNET ID), so
    smc_listen_find_device returns that, and smc_listen_decline sends it.
    """
    return next((c for c in offered if c in server_chids), None)


# SMC_RELEASE (net/smc/smc.h) of each kernel line: 5.10.223 and 6.1.176 define it as 0;
# 6.12.117 and 7.3.4 as SMC_RELEASE_1 (SMC-Dv2.1, the first contact extension v2x).
# 7.2 has 7.3's net/smc but for three small fixes (scripts/config.sh).
SMC_RELEASE = {"5.10": 0, "6.1": 0, "6.12": 1, "7.2": 1, "7.3": 1}

# net/smc/smc_clc.c: SMCD_CLC_ACCEPT_CONFIRM_LEN_V2 (the trailer included), and the first
# contact extension a first contact adds before the trailer: struct
# smc_clc_first_contact_ext (4 + SMC_MAX_HOSTNAME_LEN 32) or, from release 1 on, struct
# smc_clc_first_contact_ext_v2x (16 more: reserved3, feature_mask, vendor_exp_options,
# reserved4).
SMCD_ACCEPT_V2_LEN = 78
FCE_LEN = {0: 36, 1: 52}


def mixed_release(client_line, server_line):
    """The SMC release a connection between two kernel lines runs at.

    The client's proposal carries its own SMC_RELEASE (smc_clc.c smc_clc_send_proposal:
    v2_ext->hdr.flag.release). A 6.12+ server caps it at its own (af_smc.c
    smc_listen_v2_check: release_nr = min(flag.release, SMC_RELEASE)) and writes that into
    the accept's first contact extension (smc_clc_fill_fce_v2x); a 5.10/6.1 server writes
    its SMC_RELEASE, 0, whatever the client sent (smc_clc.c smc_clc_fill_fce). A 6.12+
    client takes the accept's release (af_smc.c smc_connect_ism: release_nr = fce->release)
    and sends it back in its confirm. So: the smaller of the two.
    Every line speaks SMC-Dv2 (5.10 is the first) and none offers v1 here: a client offers
    SMC-Dv1 only for a device whose PNET ID matches its NIC's (af_smc.c
    smc_find_proposal_devices -> smc_find_ism_device; 5.10 smc_pnet.c
    smc_pnet_find_ism_by_pnetid returns when no PNET ID can be determined), and the guests
    set none; check_chid holds every proposal to "no v1" and every accept to v2.
    """
    return min(SMC_RELEASE[client_line], SMC_RELEASE[server_line])


def clc_lengths(release):
    """(first contact, other): the length of an SMC-Dv2 accept and confirm at that release.

    smc_clc.c smc_clc_send_confirm_accept: SMCD_CLC_ACCEPT_CONFIRM_LEN_V2, plus the first
    contact extension only when this connection starts a link group; for SMC-D at release
    0 the base extension (6.12+ smc_clc_fill_fce_v2x: "is_smcd && release_nr <
    SMC_RELEASE_1"; 5.10/6.1 have no other), at release 1 the v2x one. 114 and 130 bytes.
    """
    return SMCD_ACCEPT_V2_LEN + FCE_LEN[release], SMCD_ACCEPT_V2_LEN


# net/smc/smc_ism.h: loopback-ism's CHID (smc_ism_is_loopback); 0xFF00-0xFFFF are the
# Emulated-ISM devices' (__smc_ism_is_emulated).
LOOPBACK_CHID = 0xFFFF


def loopback_offer(ism_offer):
    """The CHID list of a 6.12 client with loopback-ism (CONFIG_SMC_LO) beside its ISM
    functions, as the proposal's entries carry it.

    smc_loopback.c smcd_lo_register_dev puts loopback-ism at the head of smcd_dev_list
    (list_add), and smc_ism.c smcd_register_dev keeps it there ("loopback-ism always at
    the very beginning": an ISM device without PNET ID goes right after it), so
    smc_find_ism_v2_device_clnt offers it first; smc_clc.c smc_clc_send_proposal gives an
    Emulated-ISM device two entries (GID and GID extension, the CHID repeated).

    Where the server looks at it: af_smc.c smc_find_ism_v2_device_serv ->
    smc_check_ism_v2_match finds its own loopback-ism on CHID 0xFFFF, but
    smc_ism_cantalk -> smc_loopback.c smc_lo_query_rgid accepts only its own GID (a
    128-bit uuid_gen per boot, smc_lo_generate_ids): from another guest no match, so the
    server goes on to the ISM CHIDs (server_choice over its ISM functions alone); to
    itself the match, first in the offer, so smc_listen_ism_init takes loopback-ism
    (check_self).
    """
    return [LOOPBACK_CHID, LOOPBACK_CHID] + ism_offer


SELF_PORT = 12347   # smcchid's self phase


def check_self(guests, emulators, conns, cross_smcd):
    """(errors, summary): each guest's connections to itself (smcchid self) on loopback-ism.

    The kernel's choice (loopback_offer): loopback-ism. In sock_diag (smc_diag.c
    __smc_diag_dump, struct smcd_diag_dmbinfo) the connection's own and peer GID are then
    the same 128-bit loopback GID, its extension nonzero (an ISM function's is 0: ism_drv.c
    smcd_get_local_gid), and no emulator function's GID; the host registers no DMB and
    opens no connection for it: the emulator's connections are exactly the other guest's
    (cross_smcd: the CONN lines of SMC-D connections between the guests, one conn_opened
    each). These connections never
    leave the guest's lo device, so there is no capture of them.
    """
    errors, per_guest = [], {}
    gids = {gid for emu in emulators.values() for gid in emu["gids"]}
    for name, g in sorted(guests.items()):
        mine = [c for c in g["conns"] if port_of(c.get("local" if c.get("side") == "server" else "peer")) == SELF_PORT]
        sums = {}
        for side in ("client", "server"):
            got = [c for c in mine if c.get("side") == side]
            if len(got) != conns:
                errors.append(f"self {name}: {len(got)} {side} CONN lines, expected {conns}")
            sums[side] = sorted((c.get("idx"), c.get("bytes"), c.get("checksum")) for c in got)
        ok = 0
        for c in mine:
            tag = f"self {name} {c.get('side')} conn {c.get('idx')}"
            if c.get("verify") != "ok":
                errors.append(f"{tag}: its bytes did not verify")
            if c.get("mode") != "SMCD":
                errors.append(f"{tag}: mode {c.get('mode')}, expected SMCD on loopback-ism")
                continue
            my, peer = int(c.get("my_gid", "0"), 16), int(c.get("peer_gid", "0"), 16)
            my_x, peer_x = int(c.get("my_gid_ext", "0"), 16), int(c.get("peer_gid_ext", "0"), 16)
            if "my_gid_ext" not in c:
                errors.append(f"{tag}: sock_diag gave no GID extension (a 6.8+ kernel does)")
            elif (my, my_x) != (peer, peer_x) or not my_x or my in gids:
                errors.append(f"{tag}: GID {my:#x}/{my_x:#x} peer {peer:#x}/{peer_x:#x}: not loopback-ism "
                              f"(own and peer the same 128-bit GID, no emulator's)")
            elif c.get("side") == "client":
                ok += 1   # connections, counted once
        if sums["client"] != sums["server"]:
            errors.append(f"self {name}: the client's connections {sums['client']} differ from the server's "
                          f"{sums['server']}")
        per_guest[name] = ok
    opened = sum(1 for emu in emulators.values() for e in emu["events"] if e.get("kind") == "conn_opened")
    if opened != cross_smcd:
        errors.append(f"the host opened {opened} connections, the guests made {cross_smcd} SMC-D connection "
                      f"ends between them: a connection to itself reached the emulator")
    summary = "self " + " ".join(f"{n} loopback x{k}" for n, k in sorted(per_guest.items()))
    return errors, summary


def no_device_decline(server_line=None):
    """The reason a server of kernel line server_line declines with when no SMC-Dv2 device
    matches and v1 is not offered: NOSMCD2DEV (af_smc.c smc_find_ism_v2_device_serv stores
    it, smc_find_ism_store_rc, 6.1 on); 5.10 keeps no reason there, and
    smc_listen_find_device returns SMC_CLC_DECL_NOSMCDEV as the client offered no v1."""
    return DECL_NOSMCDEV if server_line == "5.10" else DECL_NOSMCD2DEV


def expected_fallback(side, server_line=None):
    """(reason, peer diagnosis) sock_diag shows for a connection the server declined.

    Server: smc_listen_work -> smc_listen_decline(rc = no_device_decline) ->
    smc_switch_to_fallback with that reason; it never received a decline, so its
    peer_diagnosis stays 0. Client: smc_clc.c smc_clc_wait_msg turns the decline into
    SMC_CLC_DECL_PEERDECL and keeps its reason as peer_diagnosis; af_smc.c
    smc_connect_decline_fallback falls back with PEERDECL.
    """
    why = no_device_decline(server_line)
    return (why, 0) if side == "server" else (DECL_PEERDECL, why)


# ---- what the run left ---------------------------------------------------------------
def read_guest(path):
    """{pchids, names, registered, conns, passed} from one guest's console. names: the CHID
    of each device by the name smc registered it under (7.x: the dibs device's, ism<uid>,
    whose fabric id is the CHID; before 7.x the PCI function's, as in pchids)."""
    g = {"pchids": {}, "names": {}, "registered": [], "conns": [], "passed": False}
    for line in path.read_text(errors="replace").splitlines():
        line = line.strip()
        m = ISMDEV_RE.match(line)
        if m:
            g["pchids"][m.group(1)] = int(m.group(2), 16)
            g["names"][m.group(1)] = int(m.group(2), 16)
        m = check_e2e.DIBS_RE.match(line)
        if m and m.group(3).startswith("0x"):
            g["names"][m.group(1)] = int(m.group(3), 16)
        m = SMCDEV_RE.match(line)
        if m:
            g["registered"].append(m.group(2))
        m = check_e2e.CONN_RE.match(line)
        if m:
            g["conns"].append(check_e2e.fields(m.group(1)))
        if line.startswith("ISMTEST: RESULT PASS"):
            g["passed"] = True
    return g


def read_emulator(d):
    """{chid, gids: {gid: function}, events} of one emulator's folder."""
    snap = json.loads((d / "snapshot.json").read_text())
    events = [json.loads(x) for x in (d / "events.jsonl").read_text().splitlines() if x.strip()]
    return {"chid": int(snap["chid"], 16),
            "gids": {int(f["gid"], 16): f["name"] for f in snap["functions"]},
            "dmbs": snap.get("dmbs", []),
            "moves": sum(int(f.get("counters", {}).get("moves_out", 0)) for f in snap["functions"]),
            "events": events}


def port_of(addr):
    m = ADDR_RE.search(addr or "")
    return int(m.group(1)) if m else None


def hexlist(chids):
    return ",".join(f"{c:#06x}" for c in chids) or "none"


# ---- the CHID cases ------------------------------------------------------------------
def check_chid(guests, emulators, handshakes, conns_per_phase, loopback=False, lines=None):
    """(errors, summary): the run against the kernel's rules, phase by phase (loopback: both
    guests' kernels have loopback-ism, loopback_offer; lines: {guest: kernel line}, for the
    server's decline reason)."""
    lines = lines or {}
    errors, phases = [], []
    by_gid = {gid: (name, emu["chid"], fn) for name, emu in emulators.items() for gid, fn in emu["gids"].items()}
    chosen_anywhere = set()
    for port, (client, server) in sorted(PHASES.items()):
        where = f"{client}->{server}"
        cg, sg = guests.get(client), guests.get(server)
        if cg is None or sg is None:
            errors.append(f"{where}: no console of guest {client if cg is None else server}")
            continue
        if len(set(cg["pchids"].values())) == 1:
            # One CHID: the order cannot matter.
            offered = list(set(cg["pchids"].values()))
        else:
            if not cg["registered"]:
                errors.append(f"{where}: guest {client} printed no SMCDEV lines (smc's registration order)")
            offered = offer_order(cg["registered"], cg.get("names", cg["pchids"]))
        if loopback:
            offered = loopback_offer(offered)
        # The server's ISM functions only: its loopback-ism never reaches another guest.
        want = server_choice(offered, set(sg["pchids"].values()))
        if want is not None:
            chosen_anywhere.add(want)
        ph = {"where": where, "offered": offered, "want": want, "accepted": [], "declines": [], "modes": []}
        phases.append(ph)
        # The wire.
        hs = {c: m for c, m in handshakes.items() if port_of(c) == port}
        if len(hs) != conns_per_phase:
            errors.append(f"{where}: {len(hs)} CLC handshakes on the wire, {conns_per_phase} connections made")
        for conn, msgs in sorted(hs.items()):
            prop, acc, dec = msgs.get("proposal"), msgs.get("accept"), msgs.get("decline")
            got = [c for _, c in prop.get("v2_gidchids", [])] if prop else None
            if got != offered:
                errors.append(f"{conn}: the proposal offered CHIDs {hexlist(got or [])}, "
                              f"the kernel's order is {hexlist(offered)}")
            if prop and prop.get("typev1") not in ("N", None):
                errors.append(f"{conn}: the proposal offers SMC-Dv1 ({prop['typev1']}) without a PNET ID")
            if want is None:
                if acc:
                    errors.append(f"{conn}: accepted CHID {acc.get('chid', 0):#06x}, expected a decline")
                if not dec:
                    errors.append(f"{conn}: no decline on the wire")
                elif dec.get("diagnosis") != no_device_decline(lines.get(server)):
                    errors.append(f"{conn}: the decline says {reason_name(dec.get('diagnosis', 0))}, "
                                  f"expected {reason_name(no_device_decline(lines.get(server)))}")
                else:
                    ph["declines"].append(dec["diagnosis"])
            else:
                if not acc or acc.get("version") != 2:
                    errors.append(f"{conn}: no SMC-Dv2 accept on the wire ({sorted(k for k in msgs if k != 'vlan')})")
                    continue
                ph["accepted"].append(acc.get("chid"))
                if acc.get("chid") != want:
                    errors.append(f"{conn}: accepted CHID {acc.get('chid', 0):#06x}, the kernel's choice is {want:#06x}")
                if "confirm" not in msgs:
                    errors.append(f"{conn}: no confirm on the wire")
        # The guests and the host, connection by connection; each connection's bytes as
        # the receiver checked them (smctest's checksum) the same on both sides.
        sums = {}
        for side, g in (("client", cg), ("server", sg)):
            mine = [c for c in g["conns"] if port_of(c.get("peer" if side == "client" else "local")) == port]
            if len(mine) != conns_per_phase:
                errors.append(f"{where}: {len(mine)} CONN lines on {side} {client if side == 'client' else server}, "
                              f"expected {conns_per_phase}")
            sums[side] = sorted((c.get("idx"), c.get("bytes"), c.get("checksum")) for c in mine)
            for c in mine:
                tag = f"{where} {side} conn {c.get('idx')}"
                if c.get("verify") != "ok":
                    errors.append(f"{tag}: its bytes did not verify")
                ph["modes"].append(c.get("mode"))
                if want is None:
                    reason = int(c.get("reason", "0"), 16)
                    peer = int(c.get("peer_diag", "0"), 16)
                    if c.get("mode") != "FALLBACK" or (reason, peer) != expected_fallback(side, lines.get(server)):
                        wr, wp = expected_fallback(side, lines.get(server))
                        errors.append(f"{tag}: mode {c.get('mode')} reason {reason_name(reason)} peer_diag "
                                      f"{reason_name(peer)}, expected FALLBACK {reason_name(wr)} / {reason_name(wp)}")
                    continue
                if c.get("mode") != "SMCD":
                    errors.append(f"{tag}: mode {c.get('mode')}, expected SMCD")
                    continue
                gid, token = int(c.get("my_gid", "0"), 16), int(c.get("token", "0"), 16)
                owner = by_gid.get(gid)
                if owner is None:
                    errors.append(f"{tag}: GID {gid:#018x} is no emulator's")
                    continue
                emu, chid, fn = owner
                if chid != want:
                    errors.append(f"{tag}: ran on emulator {emu} (CHID {chid:#06x}), expected CHID {want:#06x}")
                ev = emulators[emu]["events"]
                reg = [e for e in ev if e.get("kind") == "dmb_registered" and e.get("function") == fn
                       and e.get("token") and int(e["token"], 16) == token]
                opened = [e for e in ev if e.get("kind") == "conn_opened"
                          and e.get("token") and int(e["token"], 16) == token]
                if not reg or not opened:
                    errors.append(f"{tag}: emulator {emu} saw {'no' if not reg else 'a'} registration of DMB "
                                  f"{token:#x} by {fn} and {'no' if not opened else 'a'} connection on it")
        if sums.get("client") != sums.get("server"):
            errors.append(f"{where}: the client's connections (idx, bytes, checksum) {sums.get('client')} "
                          f"differ from the server's {sums.get('server')}")
    # The host: an emulator no phase chose registered no DMB and moved nothing.
    for name, emu in sorted(emulators.items()):
        if emu["chid"] in chosen_anywhere:
            continue
        regs = [e for e in emu["events"] if e.get("kind") in ("dmb_registered", "conn_opened")]
        if regs or emu["moves"]:
            errors.append(f"emulator {name} (CHID {emu['chid']:#06x}, chosen by no connection): "
                          f"{len(regs)} DMB registrations/connections, {emu['moves']} moves")
    return errors, phases


def check_release(handshakes, lines):
    """(errors, summary): the mixed-line cases' CLC messages against mixed_release and
    clc_lengths, connection by connection in the capture's order. lines: {guest: line}.

    Only the run's first connection is a first contact: smc_core.c smc_conn_create reuses
    an SMC-D link group matched by device and peer GID alone (smcd_lgr_match; the role
    counts for SMC-R only), so the other direction's connections join the link group the
    first one made, and one without connections lives SMC_LGR_FREE_DELAY_SERV (600 s)
    after its last, longer than a run.
    """
    errors, releases, lengths = [], set(), {}
    for n, (conn, msgs) in enumerate(handshakes.items()):
        if port_of(conn) not in PHASES:
            continue
        client, server = PHASES[port_of(conn)]
        want = mixed_release(lines[client], lines[server])
        first_len, other_len = clc_lengths(want)
        prop = msgs.get("proposal")
        if prop and prop.get("release") != SMC_RELEASE[lines[client]]:
            errors.append(f"{conn}: the proposal of {client} ({lines[client]}) says release "
                          f"{prop.get('release')}, its SMC_RELEASE is {SMC_RELEASE[lines[client]]}")
        for kind in ("accept", "confirm"):
            m = msgs.get(kind)
            if not m or m.get("version") != 2:
                continue   # check_chid names what is missing
            first = m.get("first_contact", False)
            if first != (n == 0):
                errors.append(f"{conn}: the {kind} is {'a' if first else 'no'} first contact, "
                              f"expected {'one' if n == 0 else 'none'} (the run's connection {n + 1})")
            if first:
                releases.add(m.get("fce_release"))
                if m.get("fce_release") != want:
                    errors.append(f"{conn}: the {kind}'s first contact extension says release "
                                  f"{m.get('fce_release')}, expected {want} ({lines[client]} client, "
                                  f"{lines[server]} server)")
            want_len = first_len if first else other_len
            if m.get("length") != want_len:
                errors.append(f"{conn}: the {kind} is {m.get('length')} bytes, expected {want_len} "
                              f"(release {want}, {'a' if first else 'no'} first contact)")
            if kind == "accept":
                lengths[m.get("length")] = lengths.get(m.get("length"), 0) + 1
    if not releases:
        errors.append("no first contact on the wire")
    summary = (f"release {'/'.join(str(r) for r in sorted(releases, key=str)) or 'none'}; accept bytes "
               + " ".join(f"{n} x{c}" for n, c in sorted(lengths.items(), key=lambda kv: -(kv[0] or 0))))
    return errors, summary


def host_view(emulators):
    """"A 0x1234: 0 DMBs, 0 conns; B ...": each emulator's DMB registrations and connections."""
    out = []
    for name, emu in sorted(emulators.items()):
        n = {k: sum(1 for e in emu["events"] if e.get("kind") == k) for k in ("dmb_registered", "conn_opened")}
        out.append(f"{name} {emu['chid']:#06x} {n['dmb_registered']} DMBs {n['conn_opened']} conns")
    return ", ".join(out) or "no emulator"


def chid_line(case, errors, phases, host, clc=None):
    """The case's one line (clc: check_release's summary, the mixed-line cases)."""
    offered = " ".join(f"{p['where']} {hexlist(p['offered'])}" for p in phases)
    accepted, modes, declines = [], [], set()
    for p in phases:
        got = sorted(set(p["accepted"]))
        accepted.append(f"{p['where']} {hexlist(got) if got else 'none'}"
                        f"{' x' + str(len(p['accepted'])) if got else ''}")
        modes += p["modes"]
        declines |= set(p["declines"])
    version = "v2" if any(p["accepted"] for p in phases) else "-"
    mode = "/".join(f"{'SMC-D' if m == 'SMCD' else 'TCP' if m == 'FALLBACK' else m} {modes.count(m)}"
                    for m in sorted(set(modes), key=str)) or "none"
    decline = ",".join(reason_name(d) for d in sorted(declines)) or "none"
    return (f"{case:<10} {'as expected' if not errors else 'NOT as expected'}: version {version}; "
            f"{clc + '; ' if clc else ''}"
            f"CHIDs offered {offered}; accepted {' '.join(accepted)}; mode {mode}; decline {decline}; "
            f"host {host}")


# ---- the multi case ------------------------------------------------------------------
MULTI_PORT = 12350   # smcmulti's


def conn_key(c):
    """The wire's key (client ip:port>server ip:port) of one smctest CONN line."""
    return f"{c.get('local')}>{c.get('peer')}" if c.get("side") == "client" else f"{c.get('peer')}>{c.get('local')}"


def read_functions(path):
    """[(emulator, function)] of one guest, in its functions' order (guest_start's
    NAME.function: "A/ism0 B/ism0")."""
    try:
        words = path.read_text().split()
    except OSError:
        return []
    return [tuple(w.split("/", 1)) for w in words if "/" in w]


def busy_intervals(emu):
    """[(opened_us, closed_us)] of every connection the emulator saw on one of its DMBs
    (events conn_opened and conn_closed; a connection still open at the end: its last
    event's time)."""
    last = max((e.get("time_us", 0) for e in emu["events"]), default=0)
    open_, out = {}, []
    for e in emu["events"]:
        key = (e.get("function"), e.get("token"), e.get("conn"))
        if e.get("kind") == "conn_opened":
            open_[key] = e.get("time_us", 0)
        elif e.get("kind") == "conn_closed" and key in open_:
            out.append((open_.pop(key), e.get("time_us", 0)))
    return out + [(t, last) for t in open_.values()]


def overlap_us(a, b):
    """The longest time one connection of intervals a ran while one of b did (0: never)."""
    return max((min(x1, y1) - max(x0, y0) for x0, x1 in a for y0, y1 in b), default=0)


def check_multi(guests, emulators, captures, ips, streams, conns):
    """(errors, summary) of the multi case.

    guests: {name: read_guest, plus "functions": read_functions}; emulators: {name:
    read_emulator}; captures: {capture name: check_e2e.capture_handshakes}; ips: {guest:
    address}; streams: [(client, server)] the guests ran; conns: connections per stream.

    For every connection on the wire (port MULTI_PORT): its client and server from the
    addresses; the CHIDs the client offers (offer_order of its registration order, the
    kernel's smc_find_ism_v2_device_clnt) and the one the server must take (server_choice:
    af_smc.c smc_find_ism_v2_device_serv, the first offered CHID it has). Then
      the wire:   every capture that has the connection shows that offer and an SMC-Dv2
                  accept and confirm naming that CHID, both captures of its own two guests
                  have it; the accept's GID is the server's function on the emulator of
                  that CHID, the confirm's the client's (and the proposal's entry for it);
      the guests: both sides' CONN lines SMC-D with verified bytes, the same checksum, and
                  the GIDs and DMB tokens the CLC messages named;
      the host:   the DMB each side named (accept: the server's GID and token; confirm: the
                  client's) is in the snapshot of the emulator whose CHID the wire
                  accepted, owned by that function, its rgid the other side's GID; and no
                  DMB in any snapshot is left unexplained by a connection accepted on its
                  emulator's CHID (a DMB between two guests on the other emulator is one).
    Besides: each stream made `conns` connections, each emulator's DMBs counted two
    connections (one per side) for each connection on its CHID, and the two emulators
    carried connections at the same time (their events' open intervals overlap).
    """
    errors = []
    by_ip = {ip: name for name, ip in ips.items()}
    emu_of_chid = {emu["chid"]: name for name, emu in emulators.items()}
    # Which guest owns a GID, by the functions guest_start gave it.
    gid_owner = {}
    for g, v in guests.items():
        for emu_name, fn in v.get("functions", []):
            emu = emulators.get(emu_name)
            for gid, f in (emu or {}).get("gids", {}).items():
                if f == fn:
                    gid_owner[gid] = (g, emu_name, fn)
    # The wire: every capture's view of each connection to the case's port.
    seen = {}
    for cap, hs in sorted(captures.items()):
        for conn, msgs in hs.items():
            if port_of(conn) == MULTI_PORT:
                seen.setdefault(conn, {})[cap] = msgs
    guest_conns = {}
    for g, v in guests.items():
        for c in v["conns"]:
            guest_conns.setdefault(conn_key(c), {})[c.get("side")] = c
    explained, per_stream, offered_by, per_chid = set(), {}, {}, {}
    modes = []
    for conn, views in sorted(seen.items()):
        client = by_ip.get(conn.split(">")[0].rsplit(":", 1)[0])
        server = by_ip.get(conn.split(">")[1].rsplit(":", 1)[0])
        if client is None or server is None or (client, server) not in streams:
            errors.append(f"{conn}: no stream of the case ({client}->{server})")
            continue
        where = f"{client}->{server} {conn}"
        cg, sg = guests[client], guests[server]
        if not cg["registered"]:
            errors.append(f"{where}: guest {client} printed no SMCDEV lines (smc's registration order)")
        offered = offer_order(cg["registered"], cg.get("names", cg["pchids"]))
        offered_by[client] = offered
        want = server_choice(offered, set(sg["pchids"].values()))
        if want is None:
            errors.append(f"{where}: {server} has none of the CHIDs {hexlist(offered)} {client} offers")
            continue
        for g in (client, server):
            if g not in views:
                errors.append(f"{where}: not in {g}'s own capture")
        acc = conf = prop = None
        for cap, msgs in sorted(views.items()):
            p, a, c = msgs.get("proposal"), msgs.get("accept"), msgs.get("confirm")
            got = [ch for _, ch in p.get("v2_gidchids", [])] if p else None
            if p and got != offered:
                errors.append(f"{where} ({cap}'s capture): the proposal offered CHIDs {hexlist(got)}, "
                              f"the kernel's order is {hexlist(offered)}")
            if a and (a.get("version") != 2 or a.get("chid") != want):
                errors.append(f"{where} ({cap}'s capture): accept v{a.get('version')} CHID "
                              f"{a.get('chid', 0):#06x}, the kernel's choice is v2 {want:#06x}")
            if "decline" in msgs:
                errors.append(f"{where} ({cap}'s capture): a decline "
                              f"({reason_name(msgs['decline'].get('diagnosis', 0))})")
            for kind, m, have in (("proposal", p, prop), ("accept", a, acc), ("confirm", c, conf)):
                if m and have and {k: v for k, v in m.items() if k != "length"} != \
                        {k: v for k, v in have.items() if k != "length"}:
                    errors.append(f"{where}: the captures differ on the {kind}")
            prop, acc, conf = prop or p, acc or a, conf or c
        if not acc or not conf:
            errors.append(f"{where}: no {'accept' if not acc else 'confirm'} on the wire")
            continue
        per_chid.setdefault(acc.get("chid"), []).append(conn)
        per_stream.setdefault((client, server), []).append(bool(acc.get("first_contact")))
        emu_name = emu_of_chid.get(want)
        sgid, stok, cgid, ctok = acc.get("gid"), acc.get("token"), conf.get("gid"), conf.get("token")
        for side, g, gid in (("server", server, sgid), ("client", client, cgid)):
            owner = gid_owner.get(gid)
            if owner is None or owner[0] != g or owner[1] != emu_name:
                errors.append(f"{where}: the {side}'s CLC GID {gid or 0:#018x} is "
                              f"{'no function of the guests' if owner is None else f'{owner[0]} {owner[1]}/{owner[2]}'}"
                              f", expected {g}'s function on emulator {emu_name} (CHID {want:#06x})")
        if conf.get("chid") not in (None, want):
            errors.append(f"{where}: the confirm names CHID {conf.get('chid'):#06x}, the accept {want:#06x}")
        if prop and (cgid, want) not in [tuple(x) for x in prop.get("v2_gidchids", [])]:
            errors.append(f"{where}: the confirm's GID {cgid or 0:#018x} is not the proposal's for CHID {want:#06x}")
        # The guests.
        ends = guest_conns.get(conn, {})
        for side, gid, tok, pgid in (("client", cgid, ctok, sgid), ("server", sgid, stok, cgid)):
            c = ends.get(side)
            if c is None:
                errors.append(f"{where}: no CONN line of the {side}")
                continue
            modes.append(c.get("mode"))
            if c.get("verify") != "ok":
                errors.append(f"{where} {side}: its bytes did not verify")
            if c.get("mode") != "SMCD":
                errors.append(f"{where} {side}: mode {c.get('mode')} (reason {c.get('reason', '-')}), expected SMCD")
                continue
            got = (int(c.get("my_gid", "0"), 16), int(c.get("token", "0"), 16), int(c.get("peer_gid", "0"), 16))
            if got != (gid, tok, pgid):
                errors.append(f"{where} {side}: sock_diag says GID {got[0]:#x} DMB {got[1]:#x} peer {got[2]:#x}, "
                              f"the CLC named GID {gid or 0:#x} DMB {tok or 0:#x} peer {pgid or 0:#x}")
        if "client" in ends and "server" in ends and \
                (ends["client"].get("bytes"), ends["client"].get("checksum")) != \
                (ends["server"].get("bytes"), ends["server"].get("checksum")):
            errors.append(f"{where}: the client's bytes/checksum differ from the server's")
        # The host: each side's DMB on the chosen emulator.
        emu = emulators.get(emu_name)
        if emu is None:
            errors.append(f"{where}: no snapshot of emulator {emu_name} (CHID {want:#06x})")
            continue
        for side, gid, tok, rgid in (("server", sgid, stok, cgid), ("client", cgid, ctok, sgid)):
            d = [x for x in emu["dmbs"] if int(x.get("gid", "0"), 16) == gid and int(x.get("token", "0"), 16) == tok]
            if not d:
                errors.append(f"{where}: emulator {emu_name} has no DMB {tok or 0:#x} of the {side}'s GID {gid or 0:#x}")
                continue
            if int(d[0].get("rgid", "0"), 16) != rgid or d[0].get("function") != emu["gids"].get(gid):
                errors.append(f"{where}: the {side}'s DMB {tok:#x} on {emu_name} is {d[0].get('function')}'s "
                              f"with rgid {d[0].get('rgid')}, expected {emu['gids'].get(gid)}'s with {rgid or 0:#x}")
            explained.add((emu_name, gid, tok))
    for (client, server) in streams:
        got = per_stream.get((client, server), [])
        if len(got) != conns:
            errors.append(f"{client}->{server}: {len(got)} connections on the wire, the guests made {conns}")
        # smc_core.c smc_conn_create: a connection joins the link group of its device and
        # peer GID (smcd_lgr_match); each stream is alone on its pair of functions and
        # smcmulti makes its first connection alone, so exactly one first contact.
        firsts = sum(1 for f in got if f)
        if got and firsts != 1:
            errors.append(f"{client}->{server}: {firsts} first contacts among its {len(got)} accepts, expected 1")
    # The host: every DMB is one a connection accepted on its emulator's CHID named.
    for name, emu in sorted(emulators.items()):
        for d in emu["dmbs"]:
            gid, tok, rgid = int(d.get("gid", "0"), 16), int(d.get("token", "0"), 16), int(d.get("rgid", "0"), 16)
            if (name, gid, tok) in explained:
                continue
            own, peer = gid_owner.get(gid, ("?",)), gid_owner.get(rgid, ("?",))
            errors.append(f"DMB {tok:#x} on emulator {name} (CHID {emu['chid']:#06x}) of {own[0]} with peer "
                          f"{peer[0]}: no connection the wire accepted on that CHID named it (GID and token)")
        want = 2 * len(per_chid.get(emu["chid"], []))
        got = sum(int(d.get("connections", 0)) for d in emu["dmbs"])
        if got != want:
            errors.append(f"emulator {name} (CHID {emu['chid']:#06x}): its DMBs carried {got} connection ends, "
                          f"the wire accepted {want // 2} connections on it (two ends each)")
    names = sorted(emulators)
    both = overlap_us(busy_intervals(emulators[names[0]]), busy_intervals(emulators[names[1]])) \
        if len(names) == 2 else 0
    if both <= 0:
        errors.append("the emulators never carried connections at the same time")
    summary = {"offered": offered_by, "per_chid": per_chid, "modes": modes, "overlap_us": max(both, 0),
               "accepted": {}}
    for conn, views in seen.items():
        msgs = next(iter(views.values()))
        key = (by_ip.get(conn.split(">")[0].rsplit(":", 1)[0]), by_ip.get(conn.split(">")[1].rsplit(":", 1)[0]))
        summary["accepted"].setdefault(key, []).append((msgs.get("accept") or {}).get("chid"))
    return errors, summary


def multi_line(case, errors, summary, emulators):
    """The multi case's one line."""
    offered = " ".join(f"{g} {hexlist(o)}" for g, o in sorted(summary["offered"].items()))
    accepted = " ".join(f"{c}>{s} {hexlist(sorted(set(x for x in v if x is not None)))} x{len(v)}"
                        for (c, s), v in sorted(summary["accepted"].items(), key=lambda kv: str(kv[0])))
    modes = summary["modes"]
    mode = "/".join(f"{'SMC-D' if m == 'SMCD' else 'TCP' if m == 'FALLBACK' else m} {modes.count(m)}"
                    for m in sorted(set(modes), key=str)) or "none"
    host = ", ".join(f"{n} {e['chid']:#06x} {len(e['dmbs'])} DMBs "
                     f"{sum(int(d.get('connections', 0)) for d in e['dmbs'])} conn ends"
                     for n, e in sorted(emulators.items()))
    return (f"{case:<10} {'as expected' if not errors else 'NOT as expected'}: version v2; "
            f"CHIDs offered {offered}; accepted {accepted}; mode {mode} (connection ends); decline none; "
            f"host {host}; both CHIDs at once {summary['overlap_us'] / 1e6:.1f} s")


# ---- the v1 and vlan cases (check_e2e.py decided) -------------------------------------
def e2e_line(case, ok, handshakes, guests):
    versions = sorted({f"{port_of(c)}:v{m['accept']['version']}" for c, m in handshakes.items() if "accept" in m})
    offered, accepted = set(), set()
    for m in handshakes.values():
        p = m.get("proposal")
        if p:
            if p.get("chid"):
                offered.add(p["chid"])
            offered |= {c for _, c in p.get("v2_gidchids", [])}
        if "accept" in m and m["accept"].get("chid"):
            accepted.add(m["accept"]["chid"])
    modes = [c.get("mode") for g in guests.values() for c in g["conns"]]
    mode = "/".join(f"{'SMC-D' if m == 'SMCD' else m} {modes.count(m)}" for m in sorted(set(modes), key=str))
    declines = sorted({m["decline"].get("diagnosis", 0) for m in handshakes.values() if "decline" in m})
    return (f"{case:<10} {'as expected' if ok else 'NOT as expected'}: version {' '.join(versions) or '-'}; "
            f"CHIDs offered {hexlist(sorted(offered))}; accepted {hexlist(sorted(accepted))} (v2); "
            f"mode {mode or 'none'}; decline {','.join(reason_name(d) for d in declines) or 'none'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kind", choices=("chid", "multi", "e2e"))
    ap.add_argument("--case", required=True)
    ap.add_argument("--run-dir", required=True, type=pathlib.Path)
    ap.add_argument("--emulator", action="append", default=[], metavar="NAME",
                    help="chid: an emulator's folder RUN_DIR/NAME (repeat)")
    ap.add_argument("--conns", type=int, default=3, help="chid: connections per phase (smcchid's)")
    ap.add_argument("--loopback", action="store_true",
                    help="chid: both guests have loopback-ism and ran smcchid's self phase")
    ap.add_argument("--guest-line", action="append", default=[], metavar="GUEST=LINE",
                    help="chid: the kernel line of guest GUEST (both guests: the mixed-line checks)")
    ap.add_argument("--guest", action="append", default=[], metavar="NAME=IP",
                    help="multi: a guest and its address (repeat)")
    ap.add_argument("--stream", action="append", default=[], metavar="CLIENT>SERVER",
                    help="multi: a guest streamed to another (repeat); --conns connections each")
    ap.add_argument("--status", type=int, default=0, help="e2e: check_e2e.py's exit status")
    ap.add_argument("--line", type=pathlib.Path, help="also write the one line here")
    ap.add_argument("--kernel-line", help="chid: both guests' kernel line (5.10 declines no-device with NOSMCDEV)")
    args = ap.parse_args()
    guests = {log.name.split(".")[0]: read_guest(log) for log in sorted(args.run_dir.glob("*.console.log"))}
    try:
        handshakes = check_e2e.clc_handshakes(args.run_dir)
    except (OSError, ValueError) as e:
        handshakes, capture_error = {}, f"cannot read the capture: {e}"
    else:
        capture_error = None
    if args.kind == "multi":
        return main_multi(args, guests)
    if args.kind == "e2e":
        ok = args.status == 0 and capture_error is None
        line, errors = e2e_line(args.case, ok, handshakes, guests), [capture_error] if capture_error else []
    else:
        emulators, errors = {}, [capture_error] if capture_error else []
        for name in args.emulator:
            try:
                emulators[name] = read_emulator(args.run_dir / name)
            except (OSError, ValueError, KeyError) as e:
                errors.append(f"emulator {name}: {e}")
        for g, v in sorted(guests.items()):
            if not v["passed"]:
                errors.append(f"guest {g}: its program did not pass (ISMTEST: RESULT)")
        lines = dict(x.split("=", 1) for x in args.guest_line)
        kernel_lines = lines or ({g: args.kernel_line for pair in PHASES.values() for g in pair}
                                 if args.kernel_line else {})
        more, phases = check_chid(guests, emulators, handshakes, args.conns, args.loopback, kernel_lines)
        errors += more
        clc = None
        if args.loopback:
            cross = sum(1 for g in guests.values() for c in g["conns"]
                        if c.get("mode") == "SMCD" and port_of(c.get("local" if c.get("side") == "server"
                                                                      else "peer")) in PHASES)
            more, clc = check_self(guests, emulators, args.conns, cross)
            errors += more
        if lines:
            if set(lines) != {g for pair in PHASES.values() for g in pair} or \
                    not set(lines.values()) <= set(SMC_RELEASE):
                ap.error(f"--guest-line: give a and b, each one of {', '.join(SMC_RELEASE)}")
            more, clc = check_release(handshakes, lines)
            errors += more
            clc = f"lines a {lines['a']} b {lines['b']}; {clc}"
        line = chid_line(args.case, errors, phases, host_view(emulators), clc)
    print(line)
    for e in errors:
        print(f"  {args.case}: {e}")
    if args.line:
        args.line.write_text(line + "\n")
    return 0 if not errors and (args.kind == "chid" or args.status == 0) else 1


def main_multi(args, guests):
    errors, emulators, captures = [], {}, {}
    for name in args.emulator:
        try:
            emulators[name] = read_emulator(args.run_dir / name)
        except (OSError, ValueError, KeyError) as e:
            errors.append(f"emulator {name}: {e}")
    for g, v in guests.items():
        v["functions"] = read_functions(args.run_dir / f"{g}.function")
        if not v["passed"]:
            errors.append(f"guest {g}: its program did not pass (ISMTEST: RESULT)")
    for pcap in sorted(args.run_dir.glob("*.net.pcap")):
        try:
            captures[pcap.name.split(".")[0]] = check_e2e.capture_handshakes(pcap)
        except (OSError, ValueError) as e:
            errors.append(f"cannot read the capture {pcap.name}: {e}")
    ips = dict(x.split("=", 1) for x in args.guest)
    streams = [tuple(x.split(">", 1)) for x in args.stream]
    if len(emulators) != 2:
        errors.append(f"{len(emulators)} emulators' snapshots, the case has 2")
        line = f"{args.case:<10} NOT as expected: no verdict"
    else:
        more, summary = check_multi(guests, emulators, captures, ips, streams, args.conns)
        errors += more
        line = multi_line(args.case, errors, summary, emulators)
    print(line)
    for e in errors:
        print(f"  {args.case}: {e}")
    if args.line:
        args.line.write_text(line + "\n")
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
