#!/usr/bin/env python3
"""Waits until the emulator shows a stream in flight: an open DMB that received more
than --min-bytes. Exits 0 when it does, 1 after --timeout seconds.

With --function NAME (e.g. ism1), waits instead until that function has moved more than
--min-bytes out since this script started: the stream of one guest, while other guests'
streams fill DMBs of their own (their bytes would satisfy the DMB test at once).

Usage: wait_stream.py EMU_BIN CONTROL_SOCKET [--min-bytes N] [--timeout S] [--function NAME]
"""

import argparse
import json
import subprocess
import sys
import time


def snapshot(emu, control):
    try:
        out = subprocess.run([emu, "observe", "--control", control, "json"],
                             capture_output=True, timeout=10, check=True).stdout
        return json.loads(out)
    except (subprocess.SubprocessError, ValueError):
        return None


def stream_open(snap, min_bytes):
    try:
        return any(d["state"] == "open" and int(d["bytes"]) > min_bytes for d in snap["dmbs"])
    except (KeyError, TypeError, ValueError):
        return False


def bytes_out(snap, function):
    try:
        return next(int(f["counters"]["bytes_out"]) for f in snap["functions"] if f["name"] == function)
    except (KeyError, TypeError, ValueError, StopIteration):
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("emu")
    ap.add_argument("control")
    ap.add_argument("--min-bytes", type=int, default=1 << 20)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--function")
    args = ap.parse_args()
    deadline = time.monotonic() + args.timeout
    base = None
    while time.monotonic() < deadline:
        snap = snapshot(args.emu, args.control)
        if snap is not None:
            if args.function is None:
                if stream_open(snap, args.min_bytes):
                    return 0
            else:
                now = bytes_out(snap, args.function)
                if base is None:
                    base = now
                elif now is not None and now - base > args.min_bytes:
                    return 0
        time.sleep(0.5)
    return 1


if __name__ == "__main__":
    sys.exit(main())
