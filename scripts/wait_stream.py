#!/usr/bin/env python3
"""Waits until the emulator shows a stream in flight: an open DMB that received more
than --min-bytes. Exits 0 when it does, 1 after --timeout seconds.

Usage: wait_stream.py EMU_BIN CONTROL_SOCKET [--min-bytes N] [--timeout S]
"""

import argparse
import json
import subprocess
import sys
import time


def stream_open(emu, control, min_bytes):
    try:
        out = subprocess.run([emu, "observe", "--control", control, "json"],
                             capture_output=True, timeout=10, check=True).stdout
        dmbs = json.loads(out)["dmbs"]
    except (subprocess.SubprocessError, ValueError, KeyError):
        return False
    return any(d["state"] == "open" and int(d["bytes"]) > min_bytes for d in dmbs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("emu")
    ap.add_argument("control")
    ap.add_argument("--min-bytes", type=int, default=1 << 20)
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if stream_open(args.emu, args.control, args.min_bytes):
            return 0
        time.sleep(0.5)
    return 1


if __name__ == "__main__":
    sys.exit(main())
