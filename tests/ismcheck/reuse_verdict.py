#!/usr/bin/env python3
"""The host's reuse verdict of one run, from its event stream, with named exceptions.

Usage: tests/ismcheck/reuse_verdict.py EVENTS.jsonl [--allow late-cdc] [--allow late-data]

Prints one line, "host: VERDICT ..." and what explains each exception, and exits 0 when
the verdict is CLEAN or no reuse, or every stale reuse and foreign CDC message is
explained by an allowed exception; 1 otherwise (an unexplained STALE or CROSSED, or an
UNKNOWN: an unchecked reuse is never clean); 2 on a usage error.

Exceptions (each a known kernel bug, docs/known-bugs.md):
  late-cdc  an aborted connection's peer writes after the owner released the DMB: a
            last CDC message, and data it was still sending ("An aborted connection's
            last CDC message"). It explains a stale reuse when the old connection
            wrote into the DMB after the owner had zeroed it (late writes the host saw
            after the zeroing, before the reuse; or a zeroing found done but for late
            writes, which so came in behind it: `late_cdc_kept`, and their nonzero
            bytes still there, `late_bytes_kept`) and those writes carried at least as
            many bytes, together, as were found stale (every stale byte can be one of
            them; a late CDC message alone: at most 32 bytes from offset 0); and a
            foreign CDC message that carries the abort or closed flag (an old
            connection's close).
  late-data a connection that closed with data it could not send sends it later,
            with a CDC message that still carries its close, into the peer's DMB that
            a new connection took ("data a connection still had to send after its
            close lands in the peer's reused DMB", section 9). It explains a foreign
            CDC message with the closed flag and without the abort flag that came
            after data moves of its own (`late_moves` > 0: the observer found it when
            the connection it had closed wrote on). Nothing else.
"""
import argparse
import json
import sys

CDC_LEN = 32
PEER_CONN_ABORT, PEER_CONN_CLOSED = 0x20, 0x40
CLOSING = PEER_CONN_ABORT | PEER_CONN_CLOSED
EXCEPTIONS = ("late-cdc", "late-data")


def late_data(line):
    """Whether a foreign_cdc line is section 9's evidence: a close, no abort, after data."""
    state = line.get("conn_state", 0)
    return bool(state & PEER_CONN_CLOSED and not state & PEER_CONN_ABORT
                and int(line.get("late_moves") or 0) > 0)


def judge(lines, allowed):
    """(verdict, explained, unexplained): counts and texts for one run's events."""
    # token -> the data bytes of every late write after the DMB's zeroing, until its next
    # reuse (present: at least one such write, if only a CDC message of 0 data bytes):
    # what that reuse may hold of them. Each
    # late_write line is one batch of moves, and a connection that sends on after its
    # peer's abort writes several (a chunk at a time, then its CDC message, 0 data bytes):
    # the bytes add up, the last batch alone says nothing of the ones before it.
    late_after_zero = {}
    reuses = stale = unchecked = crossed = 0
    explained, unexplained = [], []
    for line in lines:
        kind, token = line.get("kind"), line.get("token")
        where = f"{line.get('function')} DMB {token}"
        if kind == "late_write":
            if line.get("after_zeroed"):
                late_after_zero[token] = late_after_zero.get(token, 0) + int(line.get("bytes") or 0)
        elif kind == "dmb_zeroed" and (line.get("late_cdc_kept") or line.get("late_bytes_kept")):
            # The zeroing and late writes crossed: what the watch found of them (their
            # nonzero bytes, the CDC message's among them) is in the DMB after it.
            late_after_zero[token] = late_after_zero.get(token, 0) + int(line.get("late_bytes_kept") or 0)
        elif kind == "dmb_reused":
            reuses += 1
            # what the old connection wrote after the zeroing, up to this reuse
            late_bytes = late_after_zero.pop(token, None)
            after_zero = late_bytes is not None
            if line.get("clean") is None:
                unchecked += 1
                unexplained.append(f"{where} conn {line.get('conn')}: unchecked ({line.get('unknown')})")
            elif line.get("clean") is False:
                stale += 1
                what = f"{where} conn {line.get('conn')}: {line.get('stale_bytes')} stale bytes"
                n = line.get("stale_bytes", 0)
                in_cdc_area = line.get("first_stale_offset") == 0 and n <= CDC_LEN
                if "late-cdc" in allowed and after_zero and (in_cdc_area or n <= late_bytes):
                    why = ("a late CDC message" if in_cdc_area
                           else f"the old connection's late writes ({late_bytes} bytes after the zeroing)")
                    explained.append(f"{what}, {why} (known bug late-cdc)")
                else:
                    unexplained.append(what)
        elif kind == "foreign_cdc":
            crossed += 1
            what = (f"{where} conn {line.get('conn')}: foreign CDC message "
                    f"(cursor {line.get('seen')}, the connection's {line.get('expected')}, "
                    f"flags {line.get('conn_state', 0):#04x})")
            if "late-data" in allowed and late_data(line):
                explained.append(f"{what}, an old connection's late data and close "
                                 f"({line.get('late_moves')} moves, {line.get('late_bytes')} bytes; "
                                 f"known bug late-data)")
            elif "late-cdc" in allowed and line.get("conn_state", 0) & CLOSING:
                explained.append(f"{what}, an old connection's close (known bug late-cdc)")
            else:
                unexplained.append(what)
    if crossed:
        verdict = "CROSSED"
    elif stale:
        verdict = "STALE"
    elif unchecked:
        verdict = "UNKNOWN"
    elif reuses:
        verdict = "CLEAN"
    else:
        verdict = "no reuse"
    return verdict, reuses, explained, unexplained


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("events")
    ap.add_argument("--allow", action="append", default=[], choices=EXCEPTIONS)
    args = ap.parse_args(argv)
    try:
        with open(args.events, encoding="utf-8") as f:
            lines = [json.loads(l) for l in f if l.strip()]
    except (OSError, ValueError) as e:
        print(f"reuse_verdict: {args.events}: {e}", file=sys.stderr)
        return 2
    verdict, reuses, explained, unexplained = judge(lines, set(args.allow))
    text = f"host: {verdict} ({reuses} reuses)"
    if explained:
        text += "; explained: " + "; ".join(explained)
    if unexplained:
        text += "; NOT EXPLAINED: " + "; ".join(unexplained)
    print(text)
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
