#!/usr/bin/env python3
"""Tests of scripts/bench_guests.py's parsers and verdict (make unit), on output captured
from a real `BENCH_BYTES=8M BENCH_REPEAT=1 BENCH_ROUNDS=100 make bench-guests` run
(tests/tools/testdata/bench-run: the client's console from stockbench's PARAM line on, the
watcher's phases.json and meta.json; 2026-12-03, kernel 6.12, 2 vCPUs, waited moves)."""

import contextlib
import copy
import io
import json
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import bench_guests as bg  # noqa: E402

RUN = os.path.join(HERE, "testdata", "bench-run")


def phase_lines(phase):
    return bg.console_results(os.path.join(RUN, "b.console.log"))[phase]["lines"]


def quiet_report(out, dirs):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        rc = bg.report(out, dirs)
    return rc, err.getvalue()


class Parsers(unittest.TestCase):
    def test_sockperf_tp(self):
        r = bg.parse_sockperf_tp(phase_lines("sockperf-tp-smc.1"), 65507)
        self.assertEqual(r["messages"], 401)
        self.assertEqual(r["secs"], 1.004)
        self.assertEqual(r["bytes"], 401 * 65507)
        self.assertAlmostEqual(r["mb_per_s"], 401 * 65507 / 1.004 / 1e6)
        self.assertEqual(r["sockperf_mbps"], 24.989)

    def test_sockperf_tp_that_could_not_connect_has_no_figures(self):
        # sockperf 3.7 exits 0 after this; the report must not take it for a result.
        lines = ["sockperf: \x1b[2;35m== version #3.7-no.git == \x1b[0m",
                 "sockperf: ERROR: Can`t connect socket (errno=111 Connection refused)",
                 "BENCH: END sockperf-tp-smc.1 rc=0"]
        self.assertNotIn("mb_per_s", bg.parse_sockperf_tp(lines, 65507))

    def test_sockperf_pp(self):
        r = bg.parse_sockperf_pp(phase_lines("sockperf-pp-smc"), 14)
        self.assertEqual(r["p50_us"], 442.604)
        self.assertEqual(r["p99_us"], 2103.430)
        self.assertEqual(r["avg_us"], 516.632)
        self.assertEqual(r["max_us"], 9324.624)
        self.assertEqual(r["bytes"], (r["sent"] + r["received"]) * 14)
        self.assertGreater(r["observations"], 0)

    def test_iperf3(self):
        r = bg.parse_iperf3(phase_lines("iperf3-tcp.1"))
        self.assertEqual(set(r) - {"mb_per_s", "bytes"}, {"sender", "receiver"})
        self.assertAlmostEqual(r["mb_per_s"], r["receiver"]["bits_per_s"] / 8e6)
        self.assertEqual(r["bytes"], r["sender"]["bytes"])
        self.assertGreater(r["receiver"]["secs"], 0.9)


class Report(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.run = os.path.join(self.tmp, "run")
        shutil.copytree(RUN, self.run)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def results(self):
        rc, err = quiet_report(os.path.join(self.tmp, "results.json"), [self.run])
        return rc, err, json.load(open(os.path.join(self.tmp, "results.json")))["runs"][0]

    def test_the_real_run_passes_and_its_smc_phases_went_through_the_device(self):
        rc, err, run = self.results()
        self.assertEqual(rc, 0, err)
        st = run["stock"]
        self.assertEqual(sorted(st), sorted(f"{t}-{v}" for t in ("sockperf-tp", "sockperf-pp", "iperf3")
                                            for v in ("smc", "ipproto", "tcp")))
        for name, row in st.items():
            if name.endswith("-tcp"):
                self.assertEqual(row["ism_share_min"], 0, name)
            else:
                self.assertGreaterEqual(row["ism_share_min"], bg.MIN_SHARE, name)
        self.assertIn("smc", run["stock_ratios"])
        self.assertIn("stream-smc", run["phases"])

    def test_a_pinned_run_is_named_so_in_every_table(self):
        meta_path = os.path.join(self.run, "meta.json")
        meta = json.load(open(meta_path))
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            bg.report(os.path.join(self.tmp, "r.json"), [self.run])
        self.assertNotIn("pinned", out.getvalue())
        meta["pins"] = "0 1"
        json.dump(meta, open(meta_path, "w"))
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            bg.report(os.path.join(self.tmp, "r.json"), [self.run])
        text = out.getvalue()
        rows = [line for line in text.splitlines() if line.startswith("2 vCPU")]
        self.assertTrue(rows)
        self.assertTrue(all(line.startswith("2 vCPU pinned") for line in rows), rows)
        self.assertIn("ism0 thread on host CPU(s) 0, guest b's and ism1's on 1", text)

    def test_an_smc_phase_the_device_did_not_carry_fails(self):
        phases = json.load(open(os.path.join(self.run, "phases.json")))
        for p in phases:
            if p["phase"] == "iperf3-smc.1":   # as if it had fallen back to TCP
                p["bytes"], p["moves"] = 0, 0
        json.dump(phases, open(os.path.join(self.run, "phases.json"), "w"))
        rc, err, _ = self.results()
        self.assertEqual(rc, 1)
        self.assertIn("iperf3-smc (not SMC-D", err)

    def test_a_missing_smc_phase_fails(self):
        path = os.path.join(self.run, "b.console.log")
        text = open(path).read()
        a = text.index("BENCH: START sockperf-pp-ipproto")
        b = text.index("BENCH: END sockperf-pp-ipproto")
        open(path, "w").write(text[:a] + text[text.index("\n", b) + 1:])
        rc, err, _ = self.results()
        self.assertEqual(rc, 1)
        self.assertIn("sockperf-pp-ipproto (missing)", err)

    def test_a_failed_tcp_reference_is_a_warning(self):
        path = os.path.join(self.run, "b.console.log")
        text = open(path).read().replace("BENCH: END iperf3-tcp.1 rc=0", "BENCH: END iperf3-tcp.1 rc=1")
        open(path, "w").write(text)
        rc, err, _ = self.results()
        self.assertEqual(rc, 0)
        self.assertIn("warning: TCP reference run(s) failed", err)

    def test_median_and_range_over_repeats(self):
        phases = json.load(open(os.path.join(self.run, "phases.json")))
        text = open(os.path.join(self.run, "b.console.log")).read()
        a = text.index("BENCH: START sockperf-tp-smc.1")
        b = text.index("\n", text.index("BENCH: END sockperf-tp-smc.1")) + 1
        seg = text[a:b]
        more = [seg.replace(".1", f".{i}").replace("Total of 401 messages", f"Total of {n} messages")
                for i, n in ((2, 300), (3, 500))]
        open(os.path.join(self.run, "b.console.log"), "w").write(text[:b] + "".join(more) + text[b:])
        p1 = next(p for p in phases if p["phase"] == "sockperf-tp-smc.1")
        for i in (2, 3):
            q = copy.deepcopy(p1)
            q["phase"] = f"sockperf-tp-smc.{i}"
            phases.append(q)
        json.dump(phases, open(os.path.join(self.run, "phases.json"), "w"))
        rc, err, run = self.results()
        row = run["stock"]["sockperf-tp-smc"]
        self.assertEqual(row["repeats"], 3)
        self.assertAlmostEqual(row["mb_per_s"], 401 * 65507 / 1.004 / 1e6)
        self.assertEqual(len(row["mb_per_s_all"]), 3)


if __name__ == "__main__":
    unittest.main()
