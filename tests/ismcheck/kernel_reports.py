#!/usr/bin/env python3
"""The kernel's own bug reports in a guest's console: every one is a test failure.

  kernel_reports.py CONSOLE_LOG [--out FILE]

Prints one line per report found (its kind and first line), then each report's text
(from its first line to its end marker, at most MAX_LINES lines); --out writes the same
to FILE. Exits 1 if there is a report, 0 if there is none, 2 if the log cannot be read.

A report is what the kernel prints when one of its checks fires: WARN() ("WARNING: CPU:
... at FILE:LINE"), BUG() ("kernel BUG at"), an oops (s390: "Oops: 0004 ilc:3 [#1]"),
KASAN ("BUG: KASAN: ..."), lockdep and RCU-lockdep ("WARNING: possible circular locking
dependency detected", "WARNING: suspicious RCU usage", "INFO: trying to register
non-static key"), DEBUG_SPINLOCK ("BUG: spinlock bad magic"), DEBUG_ATOMIC_SLEEP ("BUG:
sleeping function called from invalid context"), the hung-task detector ("INFO: task X
blocked for more than N seconds"), the soft-lockup detector ("watchdog: BUG: soft
lockup") and RCU's stall detector ("rcu: INFO: rcu_sched self-detected stall"), and a
panic ("Kernel panic - not syncing"). Any kernel can print them (a stock one WARNs too);
VARIANT=debug turns on the detectors (guest-tests/kernel/patches/debug/).

The rest of a console is the guests' own output (ISMTEST, CONN, SUMMARY, smctest lines)
and, on GCOV=1 kernels, hex dumps between "ISMTEST: GCOV BEGIN" and "ISMTEST: GCOV END":
never read as a report. A report's first line is recognised at the start of a console
line (after an optional printk time stamp), or anywhere in a line for the markers no
program prints (a kernel line can land in the middle of a program's line on the console).
"""

import re
import sys

MAX_LINES = 80

# (kind, pattern) for a report's first line, tried in order; the first that matches names
# the kind. Anchored at the start of the (time-stamp-stripped) line.
STARTS = [
    ("KASAN", re.compile(r"BUG: KASAN: ")),
    ("soft lockup", re.compile(r"(?:watchdog: )?BUG: soft lockup")),
    ("BUG", re.compile(r"(?:\S+: )?BUG: ")),
    ("BUG", re.compile(r"kernel BUG at ")),
    ("WARN", re.compile(r"WARNING: CPU: \d+ PID: \d+ ")),
    ("lockdep", re.compile(r"WARNING: ")),
    ("hung task", re.compile(r"INFO: task \S.* blocked for more than \d+ seconds")),
    ("RCU stall", re.compile(r"rcu: INFO: \S+ (?:self-)?detected stalls?")),
    ("lockdep", re.compile(r"INFO: ")),
    ("oops", re.compile(r"Unable to handle kernel ")),
    ("oops", re.compile(r"[A-Za-z][A-Za-z -]*: [0-9a-f]{4} ilc:\d \[#\d+\]")),
    ("panic", re.compile(r"Kernel panic - not syncing")),
]
# Markers found anywhere in a line (a kernel line after a program's unterminated output).
ANYWHERE = [
    ("KASAN", re.compile(r"BUG: KASAN: ")),
    ("WARN", re.compile(r"-+\[ cut here \]-+")),
    ("WARN", re.compile(r"WARNING: CPU: \d+ PID: \d+ .* at ")),
    ("BUG", re.compile(r"kernel BUG at \S+:\d+!")),
    ("hung task", re.compile(r"INFO: task \S.* blocked for more than \d+ seconds")),
    ("soft lockup", re.compile(r"BUG: soft lockup - CPU#\d+ stuck")),
    ("panic", re.compile(r"Kernel panic - not syncing")),
]
# "------------[ cut here ]------------" opens a WARN or BUG; the line after it says which.
CUT_HERE = re.compile(r"-+\[ cut here \]-+\s*$")
# A report ends at "---[ end trace ... ]---" (WARN, BUG, oops) or "---[ end Kernel panic";
# KASAN's at its closing "=====" rule. The others end where their stack trace does, so
# they are cut at MAX_LINES or at the next line the guest's programs print.
END = re.compile(r"---\[ end (?:trace|Kernel panic)")
RULE = re.compile(r"^={20,}\s*$")
TIME = re.compile(r"^\[\s*\d+\.\d+\]\s?")
PROGRAM = re.compile(r"^(?:ISMTEST|CONN|SUMMARY|LAT|FAULT|SUITE|ERROR|smctest|smcsuite)\b")
GCOV_BEGIN = "ISMTEST: GCOV BEGIN"
GCOV_END = "ISMTEST: GCOV END"


def clean(line):
    return TIME.sub("", line.rstrip("\r\n").replace("\r", ""))


def first_line_kind(line):
    """The kind of report LINE starts, or None."""
    for kind, pat in STARTS:
        if pat.match(line):
            return kind
    for kind, pat in ANYWHERE:
        if pat.search(line):
            return kind
    return None


def find_reports(lines):
    """[(kind, [text line])] for the reports in a console's LINES, in order."""
    reports = []
    in_gcov = False
    i = 0
    lines = [clean(l) for l in lines]
    while i < len(lines):
        line = lines[i]
        if line.startswith(GCOV_BEGIN):
            in_gcov = True
        elif line.startswith(GCOV_END):
            in_gcov = False
        if in_gcov or PROGRAM.match(line) and not any(p.search(line) for _, p in ANYWHERE):
            i += 1
            continue
        kind = first_line_kind(line)
        if kind is None:
            i += 1
            continue
        if CUT_HERE.search(line) and i + 1 < len(lines):
            kind = first_line_kind(lines[i + 1]) or kind
            if kind == "lockdep":   # "WARNING:" after a cut-here line is WARN()'s own
                kind = "WARN"
        text = [line]
        # A banner rule just before (KASAN's and lockdep's "=====") belongs to the report.
        if i > 0 and RULE.match(lines[i - 1]):
            text.insert(0, lines[i - 1])
        j = i + 1
        while j < len(lines) and len(text) < MAX_LINES:
            nxt = lines[j]
            if nxt.startswith(GCOV_BEGIN) or PROGRAM.match(nxt):
                break
            # The next report ends this one, unless it is this report's own header going
            # on: an s390 oops ("Unable to handle ...", then "Oops: 0004 ilc:3 [#1]"),
            # a BUG() ("kernel BUG at ...!", then "monitor event: 0040 ilc:2 [#1]").
            nxt_kind = first_line_kind(nxt)
            if nxt_kind is not None and not (nxt_kind in (kind, "oops") and len(text) <= 4):
                break
            text.append(nxt)
            j += 1
            if END.search(nxt):
                break
            if kind == "KASAN" and RULE.match(nxt):
                break
        reports.append((kind, text))
        i = j
    return reports


def render(reports):
    out = [f"{len(reports)} kernel report(s)"]
    out += [f"  {kind}: {text[1] if RULE.match(text[0]) and len(text) > 1 else text[0]}"
            for kind, text in reports]
    for n, (kind, text) in enumerate(reports, 1):
        out.append(f"--- report {n} ({kind}) ---")
        out += text
    return "\n".join(out) + "\n"


def main(argv):
    args = argv[1:]
    out = None
    if len(args) == 3 and args[1] == "--out":
        out = args[2]
        args = args[:1]
    if len(args) != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        with open(args[0], errors="replace") as f:
            reports = find_reports(f.readlines())
    except OSError as e:
        print(f"kernel_reports.py: cannot read {args[0]}: {e}", file=sys.stderr)
        return 2
    if not reports:
        return 0
    text = render(reports)
    sys.stdout.write(text)
    if out:
        with open(out, "w") as f:
            f.write(text)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
