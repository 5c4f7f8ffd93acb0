#!/usr/bin/env python3
"""Checks one end-to-end run: what the guests report and what the host observed.

Reads the guests' console logs (smctest's CONN/SUMMARY lines, which come from the
guest kernel's own sock_diag answers), the emulator's snapshot and its event stream,
prints a table and exits 1 if anything is off.

Expectations per guest-kernel variant, for DMBs that were reused:
  stock    every reuse was preceded by zeroing soon after the close (zeroed at
           release, kernel commit 1c5526968e27) and no reuse was stale;
  prezero  reuses are clean, but zeroing is NOT seen soon after the close (the
           kernel zeroes when it hands the buffer out again, pre-v5.17);
  nozero   at least one reuse carried stale bytes from the previous connection.
"""

import argparse
import json
import pathlib
import re
import sys

# A zeroing seen within this time after the close counts as "at release". The suite's
# seq test pauses 1.5 s between connections, so zeroing at hand-out comes much later.
RELEASE_WINDOW_MS = 750.0

SUMMARY_RE = re.compile(r"^SUMMARY (.*)$")
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", required=True, type=pathlib.Path)
    ap.add_argument("--variant", default="stock")
    args = ap.parse_args()
    errors = []

    rows, conns = guest_results(args.run_dir)
    print(f"{'guest':<6} {'test':<11} {'side':<7} {'conns':>5} {'smcd':>5} {'fallback':>8} {'bytes':>12} {'checksum':<20} result")
    for guest, f in rows:
        print(f"{guest:<6} {f.get('test','?'):<11} {f.get('side','?'):<7} {f.get('conns','?'):>5} {f.get('smcd','?'):>5} "
              f"{f.get('fallback','?'):>8} {f.get('bytes','?'):>12} {f.get('checksum','-'):<20} {'ok' if f['_ok'] else 'FAIL'}")
        if not f["_ok"]:
            errors.append(f"{guest}: {f.get('test')} {f.get('side')} failed: {f.get('first_error', '')}")
        elif f.get("side") != "self" and (f.get("smcd") != f.get("conns") or f.get("fallback") != "0"):
            errors.append(f"{guest}: {f.get('test')}: not every connection used SMC-D")
    if not rows:
        errors.append("no SUMMARY lines in any guest console")
    non_smcd = [c for _, c in conns if c.get("mode") != "SMCD"]
    if non_smcd:
        errors.append(f"{len(non_smcd)} connection(s) reported a mode other than SMCD")
    # Checksums of a stream must agree between the sending and the receiving side.
    by_test = {}
    for guest, f in rows:
        if f.get("side") in ("client", "server") and f["_ok"]:
            by_test.setdefault(f.get("test"), set()).add(f.get("checksum"))
    for test, sums in by_test.items():
        if len(sums) != 1:
            errors.append(f"{test}: client and server checksums differ: {sorted(sums)}")

    snap_path = args.run_dir / "snapshot.json"
    try:
        snap = json.loads(snap_path.read_text())
    except (OSError, ValueError) as e:
        errors.append(f"no emulator snapshot ({e})")
        snap = {"functions": [], "dmbs": []}
    moves = sum(f["counters"]["moves_out"] for f in snap["functions"])
    if moves == 0:
        errors.append("the emulator saw no data moves")
    dmbs = snap["dmbs"]
    if not dmbs:
        errors.append("the emulator saw no DMB registrations")

    events = []
    try:
        for line in (args.run_dir / "events.jsonl").read_text().splitlines():
            events.append(json.loads(line))
    except (OSError, ValueError) as e:
        errors.append(f"event stream unreadable: {e}")
    kinds = {e["kind"] for e in events}
    for needed in ("dmb_registered", "conn_opened", "conn_closed"):
        if needed not in kinds:
            errors.append(f"no {needed} event in the stream")

    reuses = sum(d["reuses"] for d in dmbs)
    stale = sum(d["stale_reuses"] for d in dmbs)
    # zero_delays_ms is a histogram: counts[i] delays <= le_ms[i] (and > le_ms[i-1]).
    def within(hist, ms):
        return sum(n for le, n in zip(hist["le_ms"], hist["counts"]) if le <= ms)
    if dmbs and RELEASE_WINDOW_MS not in dmbs[0]["zero_delays_ms"]["le_ms"]:
        errors.append(f"zero_delays_ms has no bucket bound at {RELEASE_WINDOW_MS} ms")
    hists = [d["zero_delays_ms"] for d in dmbs]
    zeroings = sum(h["count"] for h in hists)
    at_release = sum(within(h, RELEASE_WINDOW_MS) for h in hists)
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
        errors.append(f"{unchecked} reuse(s) not checked (DMB unreadable or over the read budget)")
    if args.variant == "stock":
        if stale:
            errors.append(f"stock kernel: {stale} stale reuse(s)")
        for d in dmbs:
            hist = d["zero_delays_ms"]
            late = hist["count"] - within(hist, RELEASE_WINDOW_MS)
            if d["reuses"] and d["zeroed_after_close"] < d["reuses"]:
                errors.append(f"stock kernel: DMB {d['token']} reused {d['reuses']}x but zeroed after close only {d['zeroed_after_close']}x")
            if late:
                errors.append(f"stock kernel: DMB {d['token']} zeroed late after close {late}x (max {hist['max_ms']:.1f} ms)")
    elif args.variant == "prezero":
        if reuses == 0:
            errors.append("prezero kernel: no reuse seen")
        if stale:
            errors.append(f"prezero kernel: {stale} stale reuse(s); expected zeroing at hand-out")
        if at_release:
            errors.append(f"prezero kernel: {at_release} zeroing(s) right after close; expected none at release")
    elif args.variant == "nozero":
        if stale == 0:
            errors.append("nozero kernel: no stale reuse detected")
    print(f"variant {args.variant}: " + ("as expected" if not errors else "NOT as expected"))
    for e in errors:
        print(f"  error: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
