#!/usr/bin/env python3
"""Prints the kernel matrix from tests/ismcheck/check_e2e.py's result files.

Arguments: LINE=STATUS=RESULT_JSON ..., one per kernel line (STATUS: e2e.sh's exit
status). Exits 1 unless every line passed. The dibs column: the guests' /sys/class/dibs
matched the host's GIDs and CHID (ok), did not (FAIL), or the kernel has no dibs layer
(n/a: before 6.18).
"""

import json
import sys

# check_e2e.py's dibs check: the guests' /sys/class/dibs against the host (6.18+).
DIBS = {"ok": "ok", "fail": "FAIL", "skip": "n/a"}


def main(argv):
    head = ("line", "kernel", "SMC-D ver", "conns", "SMC-D", "fallback", "reuses", "zeroing", "expected", "median ms",
            "dibs", "result")
    rows, failed = [], []
    for arg in argv:
        line, status, path = arg.split("=", 2)
        try:
            with open(path) as f:
                r = json.load(f)
        except (OSError, ValueError):
            r = {}
        ok = status == "0" and r.get("ok", False)
        if not ok:
            failed.append(line)
        med = r.get("median_zero_ms")
        rows.append((
            line, r.get("release", "?"), r.get("smcd_version", "?"), str(r.get("conns", "?")),
            str(r.get("smcd", "?")), str(r.get("fallback", "?")), str(r.get("reuses", "?")), r.get("verdict", "?"),
            r.get("expected", "?"), f"{med:.1f}" if isinstance(med, (int, float)) else "-",
            DIBS.get(r.get("dibs"), "?"), "ok" if ok else "FAIL",
        ))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    print()
    print(fmt.format(*head).rstrip())
    for r in rows:
        print(fmt.format(*r).rstrip())
    print()
    if failed:
        print(f"matrix: {len(rows)} line(s), failed: {' '.join(failed)}")
        return 1
    print(f"matrix: {len(rows)} line(s), all as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
