#!/usr/bin/env python3
"""The guest kernel's coverage of SMC-D, from the counters GCOV=1 guests hand over.

A GCOV=1 guest (guest-tests/kernel/gcov/, guest-tests/init/init) prints every .gcda file
of net/smc, the ism driver and dibs on its console at its end. This script

  collect --console LOG --name NAME --out DIR
      takes them off one console log into DIR/<stamp>-<NAME>/ (run-guest.sh calls it
      when COVERAGE_DIR is set);
  report --column LABEL=DIR[,DIR...] [--column ...] --build BUILD_DIR --out OUT
         [--reasons FILE] [--beyond LABEL]
      merges every guest of each column's folders (one kernel a column) with the cross toolchain's
      gcov, and writes, per column, OUT/<LABEL>/lcov.info, OUT/<LABEL>/summary.json and
      an HTML report (genhtml, OUT/<LABEL>/html); the first column's summary is also
      OUT/summary.json. Prints one table, a row per source file and a column per
      LABEL, then the totals (also as Markdown: OUT/table.md), and writes the first column's functions that no guest
      reached, each with its reason from FILE, to OUT/never-reached.md. With --beyond
      LABEL it also prints, per other column of the same kernel, how many lines of the
      ism driver and net/smc that column reached and LABEL did not (the lines only the
      faults reach, say), each column's list in OUT/<column>/beyond-LABEL.md.

docs/coverage.md says how to read it.
"""

import argparse
import fnmatch
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

GCOV = os.environ.get("GCOV_TOOL", "s390x-linux-gnu-gcov")
# What is reported: net/smc, the ism driver and dibs. GCOV=1 kernels profile all of
# drivers/s390/net, where the config may also build LCS, CTCM or IUCV drivers that
# SMC-D never runs: their files would only add rows of zeros.
PROFILED = ("net/smc/", "drivers/s390/net/ism", "drivers/dibs/")
# net/smc's files that only SMC-R runs: left out of the net/smc figure, as the issue asks.
SMCR_ONLY = ("net/smc/smc_ib.c", "net/smc/smc_wr.c", "net/smc/smc_llc.c")
HEX = re.compile(r"^[0-9a-f]+\s*$")


# ---- collect ---------------------------------------------------------------------------

def parse_console(text):
    """(release, {debugfs path: bytes}, lost paths) of the last GCOV block in a console
    log, or None when there is none (a guest killed before its end)."""
    found = None
    cur = None
    for raw in text.splitlines():
        line = raw.strip("\r")
        if line.startswith("ISMTEST: GCOV BEGIN "):
            cur = {"release": line.split(" ", 3)[3].strip(), "files": {}, "lost": [], "file": None}
        elif cur is None:
            continue
        elif line.startswith("ISMTEST: GCOV FILE "):
            _finish_file(cur)
            _, _, _, path, size = line.split(" ")
            cur["file"] = (path, int(size), [])
        elif line.startswith("ISMTEST: GCOV END"):
            _finish_file(cur)
            found = (cur["release"], cur["files"], cur["lost"])
            cur = None
        elif cur["file"] is not None and HEX.match(line):
            cur["file"][2].append(line.strip())
        # Anything else inside the block is a kernel message that came in between: a
        # file it cut fails its size check below and is counted as lost.
    return found


def _finish_file(cur):
    if cur["file"] is None:
        return
    path, size, hexlines = cur["file"]
    cur["file"] = None
    try:
        data = gzip.decompress(bytes.fromhex("".join(hexlines)))
    except (ValueError, OSError, EOFError):
        data = None
    if data is None or len(data) != size:
        cur["lost"].append(path)
    else:
        cur["files"][path] = data


def cmd_collect(args):
    with open(args.console, "rb") as f:
        text = f.read().decode("latin-1")
    got = parse_console(text)
    if got is None:
        print(f"coverage: {args.name}: no counters on its console (it did not reach its end)")
        return 0
    release, files, lost = got
    dest = os.path.join(args.out, f"{time.time_ns()}-{args.name}")
    for path, data in files.items():
        out = os.path.join(dest, "gcda", path.lstrip("/"))
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "wb") as f:
            f.write(data)
    os.makedirs(dest, exist_ok=True)
    with open(os.path.join(dest, "release"), "w") as f:
        f.write(release + "\n")
    note = f", {len(lost)} cut on the console and lost" if lost else ""
    print(f"coverage: {args.name}: {len(files)} counter files of {release}{note}")
    return 0


# ---- report ----------------------------------------------------------------------------

def find_kernel(build, release):
    """The GCOV=1 kernel of that release among BUILD_DIR's published kernels, with the
    object and source paths its build recorded."""
    for name in sorted(os.listdir(build)):
        kdir = os.path.join(build, name)
        if not name.startswith("kernel-") or not os.path.isdir(os.path.join(kdir, "gcov")):
            continue
        try:
            rel = open(os.path.join(kdir, "kernel.release")).read().strip()
            info = dict(l.rstrip("\n").split("=", 1) for l in open(os.path.join(kdir, "build-info")) if "=" in l)
        except OSError:
            continue
        if rel == release and "GCOV_OBJ" in info:
            return kdir, info["GCOV_OBJ"], info["GCOV_SRC"]
    sys.exit(f"coverage: no GCOV=1 kernel of release {release} in {build} (make kernel GCOV=1 ...)")


class Counts:
    """Line and function counts of one column, summed over its guests."""

    def __init__(self):
        self.lines = {}      # file -> {line: count}
        self.funcs = {}      # file -> {(name, start line): count}
        self.func_lines = {}  # file -> {name: {line}}: where each function's lines are
        self.guests = 0

    def add_json(self, doc, src_prefix):
        for f in doc.get("files", []):
            rel = source_rel(f["file"], src_prefix)
            if rel is None:
                continue
            lines = self.lines.setdefault(rel, {})
            owned = self.func_lines.setdefault(rel, {})
            for l in f.get("lines", []):
                lines[l["line_number"]] = lines.get(l["line_number"], 0) + l["count"]
                if l.get("function_name"):
                    owned.setdefault(l["function_name"], set()).add(l["line_number"])
            funcs = self.funcs.setdefault(rel, {})
            for fn in f.get("functions", []):
                key = (fn.get("demangled_name") or fn["name"], fn["start_line"])
                funcs[key] = funcs.get(key, 0) + fn["execution_count"]

    def merge(self, other):
        """Adds another column's sums (the same kernel's lines) to this one."""
        for rel, lines in other.lines.items():
            mine = self.lines.setdefault(rel, {})
            for ln, c in lines.items():
                mine[ln] = mine.get(ln, 0) + c
        for rel, funcs in other.funcs.items():
            mine = self.funcs.setdefault(rel, {})
            for key, c in funcs.items():
                mine[key] = mine.get(key, 0) + c
        for rel, owned in other.func_lines.items():
            mine = self.func_lines.setdefault(rel, {})
            for name, lines in owned.items():
                mine.setdefault(name, set()).update(lines)
        self.guests += other.guests

    def hit_lines(self, rel):
        return {ln for ln, c in self.lines.get(rel, {}).items() if c > 0}

    def function_of(self, rel, line):
        for name, lines in self.func_lines.get(rel, {}).items():
            if line in lines:
                return name
        return None

    def figures(self, rel):
        lines = self.lines.get(rel, {})
        funcs = self.funcs.get(rel, {})
        return ([sum(1 for c in lines.values() if c > 0), len(lines)],
                [sum(1 for c in funcs.values() if c > 0), len(funcs)])


def source_rel(path, src_prefix):
    """PATH (as gcov names it) relative to the kernel tree, if it is a profiled file."""
    path = os.path.normpath(path)
    prefix = os.path.normpath(src_prefix) + os.sep
    rel = path[len(prefix):] if path.startswith(prefix) else None
    if rel is None:
        # A tree built in place or with a relative srctree: find the profiled folder.
        for p in PROFILED:
            i = path.find("/" + p)
            if i >= 0:
                rel = path[i + 1:]
                break
    if rel is None or not rel.startswith(PROFILED):
        return None
    return rel


def run_gcov(guest_dir, kdir, gcov_obj, workdir):
    """gcov's JSON documents for one guest: its .gcda files beside the kernel's .gcno
    files (a .gcno without counters counts as never run)."""
    objroot = os.path.join(workdir, "obj")
    shutil.rmtree(workdir, ignore_errors=True)
    shutil.copytree(os.path.join(kdir, "gcov", "obj"), objroot)
    strip = gcov_obj.strip("/") + "/"
    gcda_root = os.path.join(guest_dir, "gcda")
    for root, _, files in os.walk(gcda_root):
        for name in files:
            path = os.path.relpath(os.path.join(root, name), gcda_root)
            if not path.startswith(strip):
                continue
            dest = os.path.join(objroot, path[len(strip):])
            if os.path.isdir(os.path.dirname(dest)):
                shutil.copy(os.path.join(root, name), dest)
    gcnos = []
    for root, _, files in os.walk(objroot):
        gcnos += [os.path.join(root, n) for n in files if n.endswith(".gcno")]
    out = os.path.join(workdir, "json")
    os.makedirs(out)
    docs = []
    # One gcov run per object: gcov names its output after the object's base name.
    for gcno in sorted(gcnos):
        r = subprocess.run([GCOV, "--json-format", "--object-directory", os.path.dirname(gcno), gcno],
                           cwd=out, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # Counters of another build of the same release would be dropped without a word
        # but this one: never let them pass as "not reached".
        if r.returncode != 0 or "stamp mismatch" in r.stderr or "version" in r.stderr:
            sys.exit(f"coverage: gcov could not read {guest_dir}'s counters for {os.path.basename(gcno)} "
                     f"against {kdir} (another build of the same release?):\n{r.stderr.strip()}")
        for name in os.listdir(out):
            with gzip.open(os.path.join(out, name)) as f:
                docs.append(json.load(f))
            os.remove(os.path.join(out, name))
    return docs


def column_counts(raw, build, tmp):
    counts = Counts()
    release = None
    kdir = src = None
    for guest in sorted(os.listdir(raw)):
        gdir = os.path.join(raw, guest)
        try:
            rel = open(os.path.join(gdir, "release")).read().strip()
        except OSError:
            continue
        if release is None:
            release = rel
            kdir, gcov_obj, src = find_kernel(build, rel)
        elif rel != release:
            sys.exit(f"coverage: {raw} mixes kernels {release} and {rel}: one column, one kernel")
        for doc in run_gcov(gdir, kdir, gcov_obj, os.path.join(tmp, "work")):
            counts.add_json(doc, src)
        counts.guests += 1
    if release is None:
        sys.exit(f"coverage: no guest's counters in {raw}")
    # Every profiled file, also those no guest's kernel ever ran a line of.
    for doc in run_gcov(os.path.join(tmp, "nothing"), kdir, gcov_obj, os.path.join(tmp, "work")):
        for f in doc.get("files", []):
            rel = source_rel(f["file"], src)
            if rel is not None and rel not in counts.lines:
                counts.add_json({"files": [f]}, src)
    return counts, release, kdir


def write_info(counts, path, srcdir):
    with open(path, "w") as out:
        out.write("TN:\n")
        for rel in sorted(counts.lines):
            out.write(f"SF:{os.path.join(srcdir, rel)}\n")
            funcs = counts.funcs.get(rel, {})
            for (name, start) in sorted(funcs, key=lambda k: k[1]):
                out.write(f"FN:{start},{name}\n")
            for (name, start), c in sorted(funcs.items(), key=lambda kv: kv[0][1]):
                out.write(f"FNDA:{c},{name}\n")
            (fh, ft) = counts.figures(rel)[1]
            out.write(f"FNF:{ft}\nFNH:{fh}\n")
            for ln, c in sorted(counts.lines[rel].items()):
                out.write(f"DA:{ln},{c}\n")
            (lh, lt) = counts.figures(rel)[0]
            out.write(f"LF:{lt}\nLH:{lh}\nend_of_record\n")


def summary(counts, release):
    files = {}
    for rel in sorted(counts.lines):
        lines, funcs = counts.figures(rel)
        files[rel] = {"lines": lines, "functions": funcs}
    return {"kernel": release, "guests": counts.guests, "files": files}


def group_total(summ, pick):
    hit = total = fhit = ftotal = 0
    for rel, f in summ["files"].items():
        if pick(rel):
            hit += f["lines"][0]; total += f["lines"][1]
            fhit += f["functions"][0]; ftotal += f["functions"][1]
    return [hit, total], [fhit, ftotal]


GROUPS = [
    ("ism driver", lambda r: r.startswith("drivers/s390/net/ism")),
    ("net/smc without smc_ib.c, smc_wr.c, smc_llc.c",
     lambda r: r.startswith("net/smc/") and r not in SMCR_ONLY),
    ("net/smc, all", lambda r: r.startswith("net/smc/")),
    ("dibs", lambda r: r.startswith("drivers/dibs/")),
]


def pct(pair):
    return f"{100.0 * pair[0] / pair[1]:.1f} %" if pair[1] else "-"


def cell(f):
    if f is None:
        return "-"
    (lh, lt), (fh, ft) = f["lines"], f["functions"]
    return f"{lh}/{lt} ({pct(f['lines'])}), fn {fh}/{ft}"


def load_reasons(path):
    rules = []
    if path and os.path.exists(path):
        for line in open(path):
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            pattern, reason = line.split("\t", 1) if "\t" in line else re.split(r"\s{2,}", line, 1)
            rules.append((pattern.strip(), reason.strip()))
    return rules


def reason_for(rules, rel, func):
    for pattern, reason in rules:
        fpat, _, npat = pattern.partition(":")
        if fnmatch.fnmatch(rel, fpat) and fnmatch.fnmatch(func, npat or "*"):
            return reason
    return None


def never_reached(counts, rules):
    rows = []
    for rel in sorted(counts.funcs):
        if rel in SMCR_ONLY or not (rel.startswith("net/smc/") or rel.startswith("drivers/s390/net/ism")
                                    or rel.startswith("drivers/dibs/")):
            continue
        for (name, start), c in sorted(counts.funcs[rel].items(), key=lambda kv: kv[0][1]):
            if c == 0:
                nlines = len(counts.func_lines.get(rel, {}).get(name, ()))
                rows.append((rel, name, start, reason_for(rules, rel, name), nlines))
    return rows


def smcr_lines(counts, rules, rel):
    """The lines of file rel that belong to functions the rules call SMC-R only."""
    out = set()
    for name, lines in counts.func_lines.get(rel, {}).items():
        if (reason_for(rules, rel, name) or "").startswith("SMC-R"):
            out |= lines
    return out


def smcr_only_lines(counts, rules, pick):
    """[hit, total]: the instrumented lines of the files pick chooses that belong to
    functions the rules call SMC-R only, reached or not (the roce column reaches some)."""
    hit = total = 0
    for rel in counts.func_lines:
        if not pick(rel):
            continue
        file_lines = counts.lines.get(rel, {})
        mine = smcr_lines(counts, rules, rel) & set(file_lines)
        total += len(mine)
        hit += sum(1 for ln in mine if file_lines[ln] > 0)
    return [hit, total]


def parse_columns(specs):
    """--column LABEL=DIR[,DIR...]: (label, [dirs]) in order."""
    columns = []
    for spec in specs:
        label, _, raws = spec.partition("=")
        dirs = [d for d in raws.split(",") if d]
        if not label or not dirs:
            sys.exit(f"coverage: --column wants LABEL=DIR[,DIR...], not {spec}")
        columns.append((label, dirs))
    return columns


def beyond(base, other, pick, other_build=False):
    """Lines of the files pick() takes that other reached and base did not: {rel: [line]}.
    Another build of the same source (other_build: the debug kernel) instruments lines
    base's does not (its debug checks and annotations): only lines base instruments
    count, or those would pass for lines base never reached."""
    out = {}
    for rel in sorted(other.lines):
        if pick(rel):
            extra = other.hit_lines(rel) - base.hit_lines(rel)
            if other_build:
                extra &= set(base.lines.get(rel, {}))
            extra = sorted(extra)
            if extra:
                out[rel] = extra
    return out


def write_beyond(counts, extra, path, title):
    with open(path, "w") as f:
        f.write(f"# {title}\n\n")
        for rel, lines in extra.items():
            by_fn = {}
            for ln in lines:
                by_fn.setdefault(counts.function_of(rel, ln) or "?", []).append(ln)
            for fn, lns in sorted(by_fn.items(), key=lambda kv: kv[1][0]):
                f.write(f"- `{rel}` `{fn}()`: {len(lns)} line{'s' if len(lns) != 1 else ''} "
                        f"({', '.join(map(str, lns))})\n")


def print_table(head, rows):
    """Columns padded to their widest cell, two spaces apart."""
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))


def write_md_table(f, head, rows):
    f.write("| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n")
    for r in rows:
        f.write("| " + " | ".join(r) + " |\n")


def smcr_share(counts, extra, rules):
    """How many of the lines in extra ({file: {line}}) belong to SMC-R-only functions."""
    return sum(len(set(lines) & smcr_lines(counts, rules, rel)) for rel, lines in extra.items())


def print_beyond(args, by_label, files, rules=()):
    """What each other column of BASE's kernel reaches that BASE does not, per group:
    the lines only faults (or chaos) reach, and how many of those are in SMC-R-only
    functions (the roce column's are, mostly). Each column's list:
    OUT/<LABEL>/beyond-BASE.md."""
    if args.beyond not in by_label:
        sys.exit(f"coverage: --beyond {args.beyond}: no such column")
    base, release = by_label[args.beyond]
    groups = [(n, p) for n, p in GROUPS if any(p(r) for r in files) and n != "net/smc, all"]
    head = [f"lines beyond {args.beyond}"] + [n for n, _ in groups]
    rows = []
    for label, (counts, rel) in by_label.items():
        # Another build of the same source (the debug kernel's chaos) counts the same
        # source lines: compared by line, as the same kernel's columns are.
        other_build = label in (args.also_beyond or []) and rel.split("-")[0] == release.split("-")[0]
        if label == args.beyond or (rel != release and not other_build):
            continue
        row = [label]
        for _, pick in groups:
            extra = beyond(base, counts, pick, other_build)
            smcr = smcr_share(counts, extra, rules)
            row.append(f"+{sum(len(v) for v in extra.values())} lines in {len(extra)} files"
                       + (f" ({smcr} in SMC-R-only functions)" if smcr else ""))
        rows.append(row)
        every = beyond(base, counts, lambda r: any(p(r) for _, p in groups), other_build)
        write_beyond(counts, every, os.path.join(args.out, label, f"beyond-{args.beyond}.md"),
                     f"Lines {label} reached and {args.beyond} did not ({release})")
    if not rows:
        return
    print()
    print_table(head, rows)
    with open(os.path.join(args.out, "table.md"), "a") as f:
        f.write("\n")
        write_md_table(f, head, rows)


def cmd_report(args):
    columns = parse_columns(args.column)
    os.makedirs(args.out, exist_ok=True)
    rules = load_reasons(args.reasons)
    summaries = []
    first_counts = None
    by_label = {}
    with tempfile.TemporaryDirectory() as tmp:
        per_dir = {}
        for label, dirs in columns:
            counts = Counts()
            release = kdir = None
            for raw in dirs:
                if raw not in per_dir:
                    per_dir[raw] = column_counts(raw, args.build, tmp)
                c, rel, kd = per_dir[raw]
                if release is not None and rel != release:
                    sys.exit(f"coverage: column {label} mixes kernels {release} and {rel}: one column, one kernel")
                release, kdir = rel, kd
                counts.merge(c)
            by_label[label] = (counts, release)
            cdir = os.path.join(args.out, label)
            os.makedirs(cdir, exist_ok=True)
            info = os.path.join(cdir, "lcov.info")
            write_info(counts, info, os.path.join(kdir, "gcov", "src"))
            summ = summary(counts, release)
            summ["column"] = label
            with open(os.path.join(cdir, "summary.json"), "w") as f:
                json.dump(summ, f, indent=1)
            if args.html:
                shutil.rmtree(os.path.join(cdir, "html"), ignore_errors=True)
                r = subprocess.run(["genhtml", "--quiet", "--function-coverage", "--legend",
                                    "--title", f"{label}: {release}", "--prefix",
                                    os.path.join(kdir, "gcov", "src"), "--output-directory",
                                    os.path.join(cdir, "html"), info],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                if r.returncode != 0:
                    print(r.stdout, file=sys.stderr)
                    sys.exit(f"coverage: genhtml failed for {label}")
            summaries.append(summ)
            if first_counts is None:
                first_counts = counts
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summaries[0], f, indent=1)

    # The table: a row per file, a column per LABEL.
    files = sorted(set().union(*(s["files"] for s in summaries)))
    head = ["file"] + [f"{s['column']} ({s['kernel']}, {s['guests']} guests)" for s in summaries]
    rows = [[rel] + [cell(s["files"].get(rel)) for s in summaries] for rel in files]
    for name, pick in GROUPS:
        if not any(pick(r) for r in files):
            continue
        tot = []
        for s in summaries:
            lines, funcs = group_total(s, pick)
            tot.append(f"{lines[0]}/{lines[1]} ({pct(lines)}), fn {funcs[0]}/{funcs[1]}")
        rows.append([f"= {name}"] + tot)
    print_table(head, rows)
    # The same table in Markdown, for docs/coverage.md.
    with open(os.path.join(args.out, "table.md"), "w") as f:
        write_md_table(f, head, [[f"**{r[0][2:]}**" if r[0].startswith("= ") else f"`{r[0]}`"] + r[1:]
                                 for r in rows])

    if args.beyond:
        print_beyond(args, by_label, files, rules)

    rows = never_reached(first_counts, rules)
    with open(os.path.join(args.out, "never-reached.md"), "w") as f:
        for rel, name, start, reason, nlines in rows:
            f.write(f"- `{rel}` `{name}()` (line {start}, {nlines} lines): {reason or 'NO REASON YET'}\n")
    unexplained = [r for r in rows if r[3] is None]
    by_reason = {}
    for r in rows:
        key = (r[3] or "NO REASON YET").split(":")[0]
        n, lines = by_reason.get(key, (0, 0))
        by_reason[key] = (n + 1, lines + r[4])
    print(f"\nnever reached ({summaries[0]['column']}): {len(rows)} functions in net/smc (but the "
          f"SMC-R-only files), the ism driver and dibs, by reason (functions, their lines): "
          + ", ".join(f"{k}: {n}, {l}" for k, (n, l) in sorted(by_reason.items()))
          + f" ({os.path.join(args.out, 'never-reached.md')})")
    # The share of the lines SMC-D can run at all: the SMC-R-only functions outside the
    # three SMC-R files left out, reached (the roce column: SMC-R over soft-RoCE) or not.
    lines, _ = group_total(summaries[0], GROUPS[1][1])
    if lines[1]:
        smcr = smcr_only_lines(first_counts, rules, GROUPS[1][1])
        print(f"net/smc (but the SMC-R-only files): {pct(lines)} of {lines[1]} lines; {smcr[1]} of them "
              f"belong to SMC-R-only functions ({smcr[0]} reached), so without them "
              f"{pct([lines[0] - smcr[0], lines[1] - smcr[1]])} ({lines[0] - smcr[0]}/{lines[1] - smcr[1]})")
    for rel, name, start, _, _ in unexplained[:20]:
        print(f"  no reason yet: {rel} {name}() line {start}")
    if len(unexplained) > 20:
        print(f"  ... and {len(unexplained) - 20} more")
    print(f"report: {os.path.join(args.out, summaries[0]['column'], 'html', 'index.html')}"
          if args.html else "")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="take a GCOV=1 guest's counters off its console log")
    c.add_argument("--console", required=True)
    c.add_argument("--name", required=True)
    c.add_argument("--out", required=True)
    r = sub.add_parser("report", help="merge, print the table, write summary.json and the HTML report")
    r.add_argument("--column", action="append", required=True, metavar="LABEL=DIR")
    r.add_argument("--build", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--reasons")
    r.add_argument("--beyond", metavar="LABEL",
                   help="print what each other column of LABEL's kernel reaches beyond LABEL")
    r.add_argument("--also-beyond", action="append", metavar="LABEL",
                   help="a column of another build of the same source (a debug kernel) to compare too")
    r.add_argument("--no-html", dest="html", action="store_false")
    args = ap.parse_args()
    return cmd_collect(args) if args.cmd == "collect" else cmd_report(args)


if __name__ == "__main__":
    sys.exit(main())
