#!/usr/bin/env python3
"""Check stbtest.ko's sweeps (sweep=1) against the architecture's rule.

Reads a console log with the module's lines

    STBT: <function> SW as=<pcias> off=0x<offset> rc=<rc>,<rc>,...   (PCISTB, one per length)
    STBT: <function> LG as=<pcias> off=0x<offset> rc=<rc>,<rc>,<rc>,<rc>   (PCILG, len 1,2,4,8)
    STBT: <function> SG as=<pcias> off=0x<offset> rc=<rc>,<rc>,<rc>,<rc>   (PCISTG, len 1,2,4,8)

and prints, for each function named on the command line, the lines

    SWEEP <function> shapes=<n> mismatches=<m>      (the PCISTBs)
    LGSG <function> shapes=<n> mismatches=<m>       (the PCILGs and PCISTGs)

each followed by up to 10 lines "  MISMATCH [LG |SG ]as=.. off=.. len=.. rc=.. want=.. (why)".

Usage: stb-sweep-rule.py CONSOLE_LOG FUNCTION:KIND [FUNCTION:KIND ...]
  KIND: ism (zpci ism=on, function group maxstbl 4096) or plain (the default group,
  maxstbl 128), both on pcistb-stub.py: BAR 0 16 MiB, BAR 2 and BAR 4 4 KiB, a 64-bit
  BAR each (1, 3 and 5 are not implemented); the MSI-X table (one entry, 16 bytes) at
  BAR 4 offset 0, the PBA (8 bytes) at BAR 4 offset 0x800. KIND ism-split or
  plain-split: a stub with --msix-split, whose PBA is at BAR 2 offset 0 instead (the
  table alone in BAR 4).

What the guest sees (Linux's __zpci_store_block(), __zpci_load(), __zpci_store()): 0 for
cc 0, -EIO (-5) for cc 1 (here: an address space that is no BAR, pcias 6-14, status 40),
-ENXIO (-6) for a program exception, specification (a shape the instruction does not
allow) or operand (no BAR there, or not inside it). The stub accepts every access in
these sweeps.

An access of LEN bytes at offset OFF lies inside a region [BASE, BASE + SIZE) only if
OFF >= BASE and OFF - BASE <= SIZE - LEN, in unbounded integers: QEMU compared the 64-bit
sum OFF + LEN, which wraps for an offset just below 2^64, with a subregion's end, and
dispatched such an access to the BAR's first-listed subregion (the MSI-X table).

The PCISTB rule: pcias > 5: cc 1. A function without ism=on takes QEMU's generic path:
the offset a multiple of 8, the length above 8, a multiple of 8, at most maxstbl, the
block inside one 4 KiB page of the offset (else specification); inside an implemented
BAR (else operand). An ISM function takes 1-4096 bytes at any offset, within one 4 KiB
page of the offset (else specification), inside an implemented BAR (else operand); a
store that touches the MSI-X table or the PBA, which QEMU emulates, takes the generic
path with the ISM group's maxstbl 4096.

The PCILG/PCISTG rule (QEMU's pcilg_service_call()/pcistg_service_call(), the same for
an ISM function): pcias 15 (configuration space): lengths 1, 2 and 4 that stay in the
word of the offset (else operand); cc 0 wherever the offset (beyond the configuration
space QEMU reads all ones and drops stores). pcias 6-14: cc 1. pcias 0-5: the length
1-8 and within the doubleword of the offset (else operand); an unimplemented BAR, or an
access not inside the BAR: operand. An access inside the MSI-X table goes to QEMU's
emulation of it, which takes 4 or 8 bytes, aligned (else operand); one inside the PBA to
the region vfio-user-pci lays over it (it forwards reads to the server and drops writes),
which takes 1-8 bytes, aligned; any other inside its BAR goes to the device, which takes
1-8 bytes, aligned (else operand).
"""
import re
import sys

LENS = [1, 8, 16, 128, 129, 136, 1024, 4095, 4096, 4097, 8191]
LGSG_LENS = [1, 2, 4, 8]
BARS = {0: 1 << 24, 2: 4096, 4: 4096}
# (bar, offset, size, the least PCILG/PCISTG length its region takes) of the MSI-X table
# (QEMU's msix_table_mmio_ops: 4 or 8 bytes) and the PBA (vfio-user-pci's region over
# it: any length), by the stub's layout
MSIX = {
    "": [(4, 0x0, 16, 4), (4, 0x800, 8, 1)],
    "split": [(4, 0x0, 16, 4), (2, 0x0, 8, 1)],
}
CONFIG_SPACE = 15
OK, CC1, PGM = 0, -5, -6


def inside(off, ln, base, size):
    """Whether [off, off + ln) lies inside [base, base + size), without overflow."""
    return off >= base and ln <= size and off - base <= size - ln


def overlaps(off, ln, base, size):
    return off < base + size and base < off + ln


def parse_kind(kind):
    """'ism', 'plain', 'ism-split' or 'plain-split' -> (ism?, the MSI-X layout)."""
    base, _, layout = kind.partition("-")
    if base not in ("ism", "plain") or layout not in MSIX:
        raise ValueError(f"unknown KIND {kind!r}: ism, plain, ism-split or plain-split")
    return base == "ism", MSIX[layout]


def generic(maxstbl, bar, off, ln):
    if off % 8 or ln <= 8 or ln % 8 or ln > maxstbl or (off & 0xfff) + ln > 0x1000:
        return PGM, "specification (generic path)"
    if bar not in BARS or not inside(off, ln, 0, BARS[bar]):
        return PGM, "operand (generic path: not inside a BAR)"
    return OK, "generic path"


def expect(kind, bar, off, ln):
    """What a PCISTB of ln bytes at off into address space bar gives."""
    ism, msix = parse_kind(kind)
    if bar > 5:
        return CC1, "not a BAR: cc 1"
    if not ism:
        return generic(128, bar, off, ln)
    if ln == 0 or ln > 4096 or (off & 0xfff) + ln > 0x1000:
        return PGM, "specification (ISM)"
    if bar not in BARS or not inside(off, ln, 0, BARS[bar]):
        return PGM, "operand (ISM: not inside a BAR)"
    if any(b == bar and overlaps(off, ln, o, s) for b, o, s, _ in msix):
        return generic(4096, bar, off, ln)
    return OK, "ISM: one region write"


def expect_lgsg(kind, bar, off, ln):
    """What a PCILG or PCISTG of ln bytes at off into address space bar gives."""
    _, msix = parse_kind(kind)
    if bar == CONFIG_SPACE:
        if ln not in (1, 2, 4) or ln > 4 - (off & 3):
            return PGM, "operand (configuration space: length or word crossed)"
        return OK, "configuration space"
    if bar > 5:
        return CC1, "not a BAR: cc 1"
    if ln == 0 or ln > 8 - (off & 7):
        return PGM, "operand (length, or crosses a doubleword)"
    if bar not in BARS:
        return PGM, "operand (BAR not implemented)"
    for b, o, s, least in msix:
        if b == bar and inside(off, ln, o, s):
            if ln < least or (off - o) % ln:
                return PGM, f"operand (the MSI-X structure takes {least}-8 aligned bytes)"
            return OK, "MSI-X emulation"
    if not inside(off, ln, 0, BARS[bar]):
        return PGM, "operand (not inside the BAR)"
    if off % ln:
        return PGM, "operand (unaligned)"
    return OK, "the device"


def check(log, specs):
    """The report's lines for the functions of specs (['FUNCTION:KIND', ...]) in the
    console log's text, and the number of mismatches."""
    out, bad_total = [], 0
    for spec in specs:
        fn, kind = spec.rsplit(":", 1)
        parse_kind(kind)
        for label, insns, lens, rule in (("SWEEP", "SW", LENS, expect),
                                         ("LGSG", "LG|SG", LGSG_LENS, expect_lgsg)):
            shapes, bad = 0, []
            pat = r"STBT: %s (%s) as=(\d+) off=0x([0-9a-f]+) rc=([-0-9,]+)" % (re.escape(fn), insns)
            for m in re.finditer(pat, log):
                insn, bar, off = m.group(1), int(m.group(2)), int(m.group(3), 16)
                rcs = [int(x) for x in m.group(4).split(",") if x]
                if len(rcs) != len(lens):
                    bad.append(f"  MISMATCH {m.group(0)}: {len(rcs)} rcs, not {len(lens)}")
                for ln, rc in zip(lens, rcs):
                    shapes += 1
                    want, why = rule(kind, bar, off, ln)
                    if rc != want:
                        what = "" if insn == "SW" else insn + " "
                        bad.append(f"  MISMATCH {what}as={bar} off=0x{off:x} len={ln} rc={rc} "
                                   f"want={want} ({why})")
            out.append(f"{label} {fn} shapes={shapes} mismatches={len(bad)}")
            out.extend(bad[:10])
            bad_total += len(bad)
    return out, bad_total


def main(argv):
    if len(argv) < 3:
        print(next(p for p in __doc__.split("\n\n") if p.startswith("Usage:")), file=sys.stderr)
        return 2
    log = open(argv[1], errors="replace").read()
    try:
        out, bad_total = check(log, argv[2:])
    except ValueError as e:
        print(f"stb-sweep-rule: {e}", file=sys.stderr)
        return 2
    print("\n".join(out))
    return 1 if bad_total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
