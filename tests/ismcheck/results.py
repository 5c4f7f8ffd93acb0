#!/usr/bin/env python3
"""The end-to-end suite's results in the formats kernel CI and general CI read.

  results.py write --name NAME --out DIR RUN_DIR...
      One KTAP file (DIR/NAME.ktap) and one JUnit XML file (DIR/NAME.junit.xml) for the
      runs in RUN_DIRs: a test per run (a topology on a kernel, e.g. "two-6.12"), with a
      test point per check that run recorded in RUN_DIR/checks.jsonl (by the scripts'
      record_check and by check_e2e.py), diagnostics included. Also DIR/NAME.points.json,
      the same points as data, which `check` holds the parsed files to. A point recorded
      with "skip": REASON (a check that does not apply, e.g. dibs on a kernel without it)
      is a KTAP `# SKIP REASON` and a JUnit <skipped>, neither pass nor fail.

  results.py check --kunit KUNIT_PY --junitparser-python PY DIR
      Parses every DIR/*.ktap with the kernel's own KTAP parser (tools/testing/kunit's
      `kunit.py parse --json`) and every DIR/*.junit.xml with junitparser (run by the
      Python PY that has it), and fails unless both give back exactly the points of
      NAME.points.json: the same tests, in the same order, with the same results.

A run whose checks.jsonl is missing or empty is reported as one failed point ("recorded"):
a run that recorded nothing must not read as a pass.
"""

import argparse
import json
import pathlib
import subprocess
import sys
import xml.etree.ElementTree as ET


def safe_name(name):
    # KTAP test names end at '#' (the directive) and at the line's end.
    return " ".join(name.replace("#", "_").split()) or "unnamed"


def read_run(run_dir):
    """(suite name, [point]) for one run; a point is {name, ok, what, diag}."""
    points = []
    path = run_dir / "checks.jsonl"
    try:
        for line in path.read_text().splitlines():
            if line.strip():
                p = json.loads(line)
                points.append({"name": safe_name(p["name"]), "ok": bool(p["ok"]),
                               "what": p.get("what", ""), "diag": [str(d) for d in p.get("diag", [])],
                               "skip": " ".join(str(p["skip"]).split()) if p.get("skip") else None})
    except (OSError, ValueError, KeyError) as e:
        points = [{"name": "recorded", "ok": False, "what": "the run recorded its checks",
                   "diag": [f"cannot read {path}: {e}"]}]
    if not points:
        points = [{"name": "recorded", "ok": False, "what": "the run recorded its checks",
                   "diag": [f"{path} is empty: the run stopped before its first check"]}]
    seconds = None
    try:
        seconds = float((run_dir / "seconds").read_text())
    except (OSError, ValueError):
        pass
    return safe_name(run_dir.name), points, seconds


def ktap(name, runs):
    out = ["KTAP version 1", f"# ism-emu end-to-end: {name}", f"1..{len(runs)}"]
    for i, (suite, points, seconds) in enumerate(runs, 1):
        sub = "    "
        out += [f"{sub}KTAP version 1", f"{sub}# Subtest: {suite}", f"{sub}1..{len(points)}"]
        for j, p in enumerate(points, 1):
            for d in ([p["what"]] if p["what"] else []) + p["diag"]:
                for line in d.splitlines() or [""]:
                    out.append(f"{sub}# {p['name']}: {line}")
            skip = f" # SKIP {p['skip']}" if p["skip"] else ""
            out.append(f"{sub}{'ok' if p['ok'] else 'not ok'} {j} {p['name']}{skip}")
        skipped = sum(bool(p["skip"]) for p in points)
        passed = sum(p["ok"] and not p["skip"] for p in points)
        took = f" time:{seconds:.0f}s" if seconds is not None else ""
        out.append(f"{sub}# {suite}: pass:{passed} fail:{len(points) - passed - skipped} skip:{skipped} "
                   f"total:{len(points)}{took}")
        ok = all(p["ok"] for p in points)
        out.append(f"{'ok' if ok else 'not ok'} {i} {suite}")
    return "\n".join(out) + "\n"


def junit(name, runs):
    root = ET.Element("testsuites", name=f"ism-emu end-to-end: {name}")
    total = failures = 0
    for suite, points, seconds in runs:
        failed = sum(not p["ok"] for p in points)
        el = ET.SubElement(root, "testsuite", name=suite, tests=str(len(points)),
                           failures=str(failed), errors="0", skipped=str(sum(bool(p["skip"]) for p in points)),
                           time=f"{seconds or 0:.1f}")
        for p in points:
            case = ET.SubElement(el, "testcase", classname=f"{name}.{suite}", name=p["name"], time="0")
            text = "\n".join(([p["what"]] if p["what"] else []) + p["diag"])
            if not p["ok"]:
                failure = ET.SubElement(case, "failure", message=(p["diag"] or [p["what"]])[-1][:500], type="check")
                failure.text = text
            elif p["skip"]:
                ET.SubElement(case, "skipped", message=p["skip"][:500]).text = text
            elif text:
                ET.SubElement(case, "system-out").text = text
        total += len(points)
        failures += failed
    root.set("tests", str(total))
    root.set("failures", str(failures))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write(args):
    runs = [read_run(pathlib.Path(d)) for d in args.run_dirs]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.ktap").write_text(ktap(args.name, runs))
    (args.out / f"{args.name}.junit.xml").write_text(junit(args.name, runs))
    points = [{"suite": s, "points": [point_state(p) for p in pts]} for s, pts, _ in runs]
    (args.out / f"{args.name}.points.json").write_text(json.dumps(points, indent=1) + "\n")
    failed = sum(not p["ok"] for _, pts, _ in runs for p in pts)
    print(f"results: {args.out}/{args.name}.ktap and .junit.xml: {len(runs)} runs, "
          f"{sum(len(p) for _, p, _ in runs)} points, {failed} failed")
    # The failed points again, each on a line of its own: a CI log that keeps only its
    # tail (and a build directory removed after the run) still says what failed.
    for suite, pts, _ in runs:
        for p in pts:
            if not p["ok"]:
                print(f"  not ok: {suite}: {p['name']}: {failed_diag(p)}")
    return 0


def failed_diag(p):
    """A failed point's diagnostics on one line, cut to 300 characters."""
    text = " | ".join(" ".join(d.split()) for d in ([p["what"]] if p["what"] else []) + p["diag"])
    return text[:300] + ("..." if len(text) > 300 else "")


def point_state(p):
    """[name, ok] of a point as points.json has it; [name, "skip"] for a skipped one."""
    return [p["name"], "skip" if p["skip"] else p["ok"]]


# Read back by the Python that has junitparser: [{suite, points: [[name, ok or "skip"]]}].
JUNIT_READER = """
import json, sys
from junitparser import JUnitXml, Failure, Error, Skipped
xml = JUnitXml.fromfile(sys.argv[1])
out = []
for suite in xml:
    pts = []
    for case in suite:
        bad = any(isinstance(r, (Failure, Error)) for r in case.result)
        skip = any(isinstance(r, Skipped) for r in case.result)
        pts.append([case.name, "skip" if skip and not bad else not bad])
    out.append({"suite": suite.name, "points": pts, "tests": suite.tests, "failures": suite.failures})
print(json.dumps(out))
"""


def ktap_points(group):
    """[{suite, points}] from kunit.py's JSON: one sub-group per run."""
    out = []
    for g in group.get("sub_groups", []):
        out.append({"suite": g["name"],
                    "points": [[c["name"], "skip" if c["status"] == "SKIP" else c["status"] == "PASS"]
                               for c in g["test_cases"]]})
    return out


def check(args):
    problems = []
    files = sorted(args.dir.glob("*.points.json"))
    if not files:
        problems.append(f"no results in {args.dir}")
    for expect_path in files:
        name = expect_path.name[: -len(".points.json")]
        before = len(problems)
        expect = json.loads(expect_path.read_text())
        ktap_path = args.dir / f"{name}.ktap"
        parsed = subprocess.run([sys.executable, str(args.kunit), "parse", "--json=stdout", str(ktap_path)],
                                capture_output=True, text=True)
        # kunit.py prints its summary, then the JSON from the first "{" at a line start.
        text = parsed.stdout
        start = text.find("\n{")
        try:
            got = ktap_points(json.loads(text[start + 1:] if start >= 0 else text))
        except ValueError as e:
            problems.append(f"{ktap_path}: kunit.py parse gave no JSON ({e}); stderr: {parsed.stderr[-300:]}")
            got = None
        if got is not None and got != expect:
            problems.append(f"{ktap_path}: the kernel's KTAP parser reads {got}, the run recorded {expect}")
        junit_path = args.dir / f"{name}.junit.xml"
        read = subprocess.run([str(args.junitparser_python), "-c", JUNIT_READER, str(junit_path)],
                              capture_output=True, text=True)
        if read.returncode != 0:
            problems.append(f"{junit_path}: junitparser failed: {read.stderr[-300:]}")
            continue
        suites = json.loads(read.stdout)
        got = [{"suite": s["suite"], "points": s["points"]} for s in suites]
        if got != expect:
            problems.append(f"{junit_path}: junitparser reads {got}, the run recorded {expect}")
        for s in suites:
            want_fail = sum(ok is False for _, ok in s["points"])
            if s["tests"] != len(s["points"]) or s["failures"] != want_fail:
                problems.append(f"{junit_path}: suite {s['suite']} counts tests={s['tests']} "
                                f"failures={s['failures']}, its cases say {len(s['points'])}/{want_fail}")
        failed = sum(ok is False for s in expect for _, ok in s["points"])
        total = sum(len(s["points"]) for s in expect)
        if len(problems) == before:
            print(f"results-check: {name}: {len(expect)} runs, {total} points ({failed} failed): "
                  f"KTAP (kunit.py) and JUnit (junitparser) agree with the run")
    for p in problems:
        print(f"results-check: {p}", file=sys.stderr)
    return 1 if problems else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("--name", required=True)
    w.add_argument("--out", required=True, type=pathlib.Path)
    w.add_argument("run_dirs", nargs="+")
    c = sub.add_parser("check")
    c.add_argument("--kunit", required=True, type=pathlib.Path)
    c.add_argument("--junitparser-python", required=True, type=pathlib.Path)
    c.add_argument("dir", type=pathlib.Path)
    args = ap.parse_args()
    return write(args) if args.cmd == "write" else check(args)


if __name__ == "__main__":
    sys.exit(main())
