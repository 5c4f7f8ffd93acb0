#!/usr/bin/env python3
"""Check stbtest.ko's PCISTB sweep (sweep=1) against the architecture's rule.

Reads a console log with the module's lines

    STBT: <function> SW as=<pcias> off=0x<offset> rc=<rc>,<rc>,...   (one per length)

and prints, for each function named on the command line, one line

    SWEEP <function> shapes=<n> mismatches=<m>

followed by up to 10 lines "  MISMATCH as=.. off=.. len=.. rc=.. want=.. (why)".

Usage: stb-sweep-rule.py CONSOLE_LOG FUNCTION:KIND [FUNCTION:KIND ...]
  KIND: ism (zpci ism=on, function group maxstbl 4096) or plain (the default group,
  maxstbl 128), both on pcistb-stub.py: BAR 0 16 MiB, BAR 2 and BAR 4 4 KiB, a 64-bit
  BAR each (1, 3 and 5 are not implemented); the MSI-X table (one entry, 16 bytes) at
  BAR 4 offset 0, the PBA (8 bytes) at BAR 4 offset 0x800.

What the guest sees (Linux's __zpci_store_block()): 0 for cc 0, -EIO (-5) for cc 1
(here: an address space that is no BAR, pcias 6-15, status 40), -ENXIO (-6) for a
program exception, specification (a shape the instruction does not allow) or operand
(no BAR there, or not inside it). The stub accepts every store in this sweep.

The rule: pcias > 5: cc 1. A function without ism=on takes QEMU's generic path: the
offset a multiple of 8, the length above 8, a multiple of 8, at most maxstbl, the
block inside one 4 KiB page of the offset (else specification); inside an implemented
BAR (else operand). An ISM function takes 1-4096 bytes at any offset, within one 4 KiB
page of the offset (else specification), inside an implemented BAR (else operand); a
store that touches the MSI-X table or the PBA, which QEMU emulates, takes the generic
path with the ISM group's maxstbl 4096.
"""
import re
import sys

LENS = [1, 8, 16, 128, 129, 136, 1024, 4095, 4096, 4097, 8191]
BARS = {0: 1 << 24, 2: 4096, 4: 4096}
MSIX = [(4, 0x0, 16), (4, 0x800, 8)]          # (bar, offset, size): table, PBA
OK, CC1, PGM = 0, -5, -6


def generic(maxstbl, bar, off, ln):
    if off % 8 or ln <= 8 or ln % 8 or ln > maxstbl or (off & 0xfff) + ln > 0x1000:
        return PGM, "specification (generic path)"
    if bar not in BARS or off + ln > BARS[bar]:
        return PGM, "operand (generic path: not inside a BAR)"
    return OK, "generic path"


def expect(kind, bar, off, ln):
    if bar > 5:
        return CC1, "not a BAR: cc 1"
    if kind == "plain":
        return generic(128, bar, off, ln)
    if ln == 0 or ln > 4096 or (off & 0xfff) + ln > 0x1000:
        return PGM, "specification (ISM)"
    if bar not in BARS or off + ln > BARS[bar]:
        return PGM, "operand (ISM: not inside a BAR)"
    if any(b == bar and off < o + s and o < off + ln for b, o, s in MSIX):
        return generic(4096, bar, off, ln)
    return OK, "ISM: one region write"


def main():
    log = open(sys.argv[1], errors="replace").read()
    bad_total = 0
    for spec in sys.argv[2:]:
        fn, kind = spec.rsplit(":", 1)
        shapes, bad = 0, []
        pat = r"STBT: %s SW as=(\d+) off=0x([0-9a-f]+) rc=([-0-9,]+)" % re.escape(fn)
        for m in re.finditer(pat, log):
            bar, off = int(m.group(1)), int(m.group(2), 16)
            rcs = [int(x) for x in m.group(3).split(",")]
            for ln, rc in zip(LENS, rcs):
                shapes += 1
                want, why = expect(kind, bar, off, ln)
                if rc != want:
                    bad.append(f"  MISMATCH as={bar} off=0x{off:x} len={ln} rc={rc} want={want} ({why})")
        print(f"SWEEP {fn} shapes={shapes} mismatches={len(bad)}")
        print("\n".join(bad[:10]))
        bad_total += len(bad)
    return 1 if bad_total else 0


if __name__ == "__main__":
    sys.exit(main())
