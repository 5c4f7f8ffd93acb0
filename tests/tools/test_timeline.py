#!/usr/bin/env python3
"""The timeline export against the trace-event format (make unit, under Debian's python3
with python3-jsonschema and python3-matplotlib: need_packages timeline).

The input is a real event stream: tests/tools/testdata/demo-events.jsonl, recorded by
`make demo` (`serve --events`). `ism-emu observe timeline --from` turns it into a
trace-event document, which must
- validate against scripts/trace-event.schema.json (the format's required fields per
  phase), and the schema must reject documents that break them;
- say what the events say: one slice per registration and connection at the times and
  with the bytes of their lines, one instant per zeroing and reuse verdict, slices that
  nest on each track, every track named, counters that add up;
- render to PNG and SVG with scripts/timeline.py.
ISM_EMU names the binary (default: target/debug/ism-emu, which cargo test builds)."""

import copy
import json
import os
import subprocess
import sys
import tempfile
import unittest
from collections import Counter, defaultdict

import jsonschema

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPTS = os.path.join(ROOT, "scripts")
FIXTURE = os.path.join(HERE, "testdata", "demo-events.jsonl")
SCHEMA = os.path.join(SCRIPTS, "trace-event.schema.json")
BIN = os.environ.get("ISM_EMU", os.path.join(ROOT, "target", "debug", "ism-emu"))


def no_duplicate_keys(pairs):
    keys = [k for k, _ in pairs]
    dup = [k for k, n in Counter(keys).items() if n > 1]
    if dup:
        raise ValueError(f"duplicate keys {dup}")
    return dict(pairs)


def export(events_path, out_dir):
    out = os.path.join(out_dir, "timeline.json")
    subprocess.run([BIN, "observe", "timeline", "--from", events_path, "--out", out],
                   check=True, capture_output=True, text=True)
    with open(out) as f:
        return json.load(f, object_pairs_hook=no_duplicate_keys), out


def semantic_errors(doc):
    """What a schema cannot see: names, nesting, order, counters."""
    errors = []
    events = doc["traceEvents"]
    named = {(e["name"], e["pid"], e["tid"]) for e in events if e["ph"] == "M"}
    drawn = [e for e in events if e["ph"] != "M"]
    first_drawn = next((i for i, e in enumerate(events) if e["ph"] != "M"), len(events))
    if any(e["ph"] == "M" for e in events[first_drawn:]):
        errors.append("metadata after drawn events")
    for e in drawn:
        if ("process_name", e["pid"], 0) not in named:
            errors.append(f"pid {e['pid']} has no process_name")
        if e["ph"] != "C" and ("thread_name", e["pid"], e["tid"]) not in named:
            errors.append(f"track {e['pid']}/{e['tid']} has no thread_name")
    if any(a["ts"] > b["ts"] for a, b in zip(drawn, drawn[1:])):
        errors.append("events not in time order")
    tracks = defaultdict(list)
    for e in drawn:
        if e["ph"] == "X":
            tracks[(e["pid"], e["tid"])].append(e)
    for key, slices in tracks.items():
        stack = []
        for e in sorted(slices, key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1] <= e["ts"] and stack[-1] != e["ts"] + e["dur"]:
                stack.pop()
            end = e["ts"] + e["dur"]
            if stack and end > stack[-1]:
                errors.append(f"track {key}: {e['name']} at {e['ts']} crosses the end of its parent")
            stack.append(end)
    for pid in {e["pid"] for e in drawn if e["ph"] == "C"}:
        samples = [e["args"]["connections"] for e in drawn
                   if e["ph"] == "C" and e["pid"] == pid and e["name"] == "open connections"]
        if any(v < 0 for v in samples):
            errors.append(f"pid {pid}: a negative number of open connections")
    return errors


def read_events(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class Export(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.doc, cls.path = export(FIXTURE, cls.tmp.name)
        with open(SCHEMA) as f:
            cls.schema = json.load(f)
        jsonschema.Draft202012Validator.check_schema(cls.schema)
        cls.validator = jsonschema.Draft202012Validator(cls.schema)
        cls.events = read_events(FIXTURE)
        cls.origin = cls.doc["otherData"]["origin_time_us"]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def drawn(self, name=None, ph=None):
        return [e for e in self.doc["traceEvents"]
                if e["ph"] != "M" and (name is None or e["name"] == name) and (ph is None or e["ph"] == ph)]

    def kinds(self, kind):
        return [e for e in self.events if e["kind"] == kind]

    def test_the_export_validates_against_the_schema(self):
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in self.validator.iter_errors(self.doc)]
        self.assertEqual(errors, [])
        self.assertEqual(self.doc["displayTimeUnit"], "ms")

    def test_the_schema_rejects_what_the_format_forbids(self):
        def broken(change):
            doc = copy.deepcopy(self.doc)
            change(doc["traceEvents"])
            return list(self.validator.iter_errors(doc))

        def first(ph):
            return lambda evs: next(i for i, e in enumerate(evs) if e["ph"] == ph)

        cases = {
            "X without dur": lambda evs: evs[first("X")(evs)].pop("dur"),
            "negative ts": lambda evs: evs[first("X")(evs)].update(ts=-1),
            "instant scope": lambda evs: evs[first("i")(evs)].update(s="x"),
            "instant with dur": lambda evs: evs[first("i")(evs)].update(dur=3),
            "counter with text": lambda evs: evs[first("C")(evs)]["args"].update(x="high"),
            "unknown phase": lambda evs: evs[first("X")(evs)].update(ph="Q"),
            "no pid": lambda evs: evs[first("i")(evs)].pop("pid"),
            "metadata without name": lambda evs: evs[first("M")(evs)]["args"].clear(),
            "fractional tid": lambda evs: evs[first("X")(evs)].update(tid=1.5),
        }
        for what, change in cases.items():
            with self.subTest(what):
                self.assertNotEqual(broken(change), [], f"the schema accepted: {what}")

    def test_slices_nest_tracks_are_named_events_are_ordered(self):
        self.assertEqual(semantic_errors(self.doc), [])

    def test_the_semantic_check_can_fail(self):
        doc = copy.deepcopy(self.doc)
        conn = next(e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"].startswith("conn "))
        reg = next(e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"] == "registered"
                   and (e["pid"], e["tid"]) == (conn["pid"], conn["tid"]))
        conn["dur"] = reg["ts"] + reg["dur"] - conn["ts"] + 10
        self.assertTrue(any("crosses" in m for m in semantic_errors(doc)))
        doc["traceEvents"] = [e for e in doc["traceEvents"] if e["name"] != "thread_name"]
        self.assertTrue(any("thread_name" in m for m in semantic_errors(doc)))

    def test_every_line_is_read(self):
        self.assertGreater(len(self.events), 10, "the fixture is a real run, not a stub")
        self.assertEqual(self.doc["otherData"]["events_read"], len(self.events))
        self.assertEqual(self.doc["otherData"]["events_skipped"], {})
        self.assertEqual(self.origin, min(e["time_us"] for e in self.events))

    def test_one_slice_per_registration_and_connection_at_their_times(self):
        regs = self.kinds("dmb_registered")
        self.assertEqual(len(self.drawn("registered", "X")), len(regs))
        got = sorted((e["args"]["token"], e["ts"]) for e in self.drawn("registered", "X"))
        self.assertEqual(got, sorted((e["token"], e["time_us"] - self.origin) for e in regs))
        opened = {(e["function"], e["token"], e["conn"]): e["time_us"] for e in self.kinds("conn_opened")}
        closed = {(e["function"], e["token"], e["conn"]): e for e in self.kinds("conn_closed")}
        conns = [e for e in self.drawn(ph="X") if e["name"].startswith("conn ")]
        self.assertEqual(len(conns), len(opened))
        self.assertGreater(len(conns), 0)
        tracks = self.track_tokens()
        for e in conns:
            function, token = tracks[(e["pid"], e["tid"])]
            key = (function, token, e["args"]["conn"])
            self.assertEqual(e["ts"], opened[key] - self.origin, key)
            if key in closed:
                self.assertEqual(e["ts"] + e["dur"], closed[key]["time_us"] - self.origin, key)
                self.assertEqual(e["args"]["bytes"], closed[key]["bytes"], key)
                self.assertEqual(e["args"]["how"], closed[key]["how"], key)
                if e["dur"] > 0:
                    self.assertAlmostEqual(e["args"]["mean_MB_per_s"], e["args"]["bytes"] / e["dur"], places=6)

    def track_tokens(self):
        """(pid, tid) -> (function, token), from the metadata and the registered slices."""
        functions = {e["pid"]: e["args"]["name"].split(" ")[0] for e in self.doc["traceEvents"]
                     if e["name"] == "process_name"}
        return {(e["pid"], e["tid"]): (functions[e["pid"]], e["args"]["name"].split(" ")[1])
                for e in self.doc["traceEvents"] if e["name"] == "thread_name" and e["tid"] != 0}

    def test_one_instant_per_zeroing_and_reuse_verdict(self):
        self.assertEqual(len(self.drawn("zeroed", "i")), len(self.kinds("dmb_zeroed")))
        self.assertEqual(len(self.drawn("not zeroed", "i")), len(self.kinds("dmb_not_zeroed")))
        reuses = [e for e in self.drawn(ph="i") if e["name"].startswith("reuse ")]
        self.assertEqual(len(reuses), len(self.kinds("dmb_reused")))
        verdict = {True: "reuse clean", False: "reuse STALE", None: "reuse unchecked"}
        self.assertEqual(Counter(e["name"] for e in reuses),
                         Counter(verdict[e["clean"]] for e in self.kinds("dmb_reused")))
        self.assertTrue(all(e["s"] == "t" for e in reuses))

    def test_the_counters_add_up(self):
        for pid in {e["pid"] for e in self.drawn(ph="C")}:
            samples = [e for e in self.drawn("open connections", "C") if e["pid"] == pid]
            rates = [e for e in self.drawn("data into DMBs", "C") if e["pid"] == pid]
            self.assertEqual([e["ts"] for e in samples], [e["ts"] for e in rates])
            self.assertEqual(samples[-1]["args"]["connections"], 0, "every connection ends")
            self.assertAlmostEqual(rates[-1]["args"]["MB/s"], 0.0)
            self.assertTrue(all(e["args"]["MB/s"] >= 0 for e in rates))

    def test_a_fault_line_becomes_an_instant(self):
        fault = dict(self.kinds("conn_opened")[0], kind="fault_injected", fault="move_fails")
        fault.pop("conn"), fault.pop("rgid")
        path = os.path.join(self.tmp.name, "with-fault.jsonl")
        with open(FIXTURE) as f, open(path, "w") as out:
            out.write(f.read() + json.dumps(fault) + "\n")
        doc, _ = export(path, self.tmp.name)
        self.assertEqual(list(self.validator.iter_errors(doc)), [])
        faults = [e for e in doc["traceEvents"] if e["name"] == "fault injected"]
        self.assertEqual([(e["ph"], e["s"], e["args"]["fault"]) for e in faults], [("i", "t", "move_fails")])

    def test_a_bad_line_fails_the_export_naming_its_line(self):
        path = os.path.join(self.tmp.name, "bad.jsonl")
        with open(FIXTURE) as f, open(path, "w") as out:
            out.write(f.readline() + '{"time_us": 1, "kind": "conn_opened"\n')
        run = subprocess.run([BIN, "observe", "timeline", "--from", path, "--out", path + ".json"],
                             capture_output=True, text=True)
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("line 2", run.stderr)

    def test_the_picture_renders(self):
        png = os.path.join(self.tmp.name, "timeline.png")
        svg = os.path.join(self.tmp.name, "timeline.svg")
        subprocess.run([sys.executable, os.path.join(SCRIPTS, "timeline.py"), self.path, "--out", png, "--out", svg],
                       check=True, capture_output=True)
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        with open(svg) as f:
            self.assertIn("<svg", f.read(2000))


if __name__ == "__main__":
    if not os.access(BIN, os.X_OK):
        sys.exit(f"{BIN} is missing: run cargo build (or set ISM_EMU)")
    unittest.main()
