#!/usr/bin/env python3
"""Tests of scripts/experiment.py's report and check on runs written here, in the format
the guests and the emulator write (make unit). The real runs are checked by the same
`check` at the end of make experiment."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
EXP = os.path.join(HERE, "..", "..", "scripts", "experiment.py")
CONNS, ROUNDS = 4, 3


def console(side, mode="SMCD", trace="on", buf_us=(50, 60, 70, 80)):
    lines = ["ISMTEST: RUN smcexp", f"EXP: TRACE {'on clock=mono' if trace == 'on' else 'off reason=' + trace}",
             "EXP: START connlat-smc"]
    smcd = CONNS * ROUNDS if mode == "SMCD" else 0
    for r in range(1, ROUNDS + 1):
        if side == "client":
            us = [100.0 + 10 * i + r for i in range(CONNS)]
            lines.append(f"CONNLAT round={r} conns={CONNS} smcd={CONNS if mode == 'SMCD' else 0} "
                         f"fallback={0 if mode == 'SMCD' else CONNS} p50_us=1 p90_us=1 p99_us=1 mean_us=1 max_us=1")
            lines.append(f"CONNLAT_US round={r} first=0 us=" + ",".join(f"{v:.1f}" for v in us))
    status = "ok" if mode == "SMCD" else "FAIL first_error=conn 0 fell back to TCP"
    lines.append(f"SUMMARY test=connlat side={side} conns={CONNS * ROUNDS} smcd={smcd} {status}")
    lines.append(f"EXP: END connlat-smc rc={0 if mode == 'SMCD' else 1}")
    lines.append("EXP: TRACE lost=0")
    for r in range(1, ROUNDS + 1):
        for fn in ("smc_buf_create", "smc_conn_free"):
            lines.append(f"KTIME fn={fn} side={side} round={r} n={CONNS} fails=0 first=0 us="
                         + ",".join(str(v) for v in buf_us))
    lines.append("EXP: START connlat-tcp")
    if side == "client":
        lines.append(f"CONNLAT round=1 conns={CONNS} smcd=0 fallback=0 p50_us=1 p90_us=1 p99_us=1 mean_us=1 max_us=1")
        lines.append("CONNLAT_US round=1 first=0 us=20.0,21.0,22.0,23.0")
    lines.append(f"SUMMARY test=connlat side={side} conns={CONNS} smcd=0 ok")
    lines.append("EXP: END connlat-tcp rc=0")
    lines.append("ISMTEST: RESULT PASS" if mode == "SMCD" else "ISMTEST: RESULT FAIL")
    return "\r\n".join(lines) + "\r\n"


def events():
    ev = []
    t = 1_000_000
    for i in range(CONNS):
        tok = f"0x{i + 1:x}00000000"
        ev.append({"time_us": t, "function": "ism0", "gid": "0x1", "kind": "dmb_registered", "token": tok,
                   "rgid": "0x2", "iova": "0x1000", "len": 131104, "sba_idx": 0})
        for c in range(1, ROUNDS + 1):
            t += 1000
            ev.append({"time_us": t, "function": "ism0", "gid": "0x1", "kind": "conn_opened", "token": tok,
                       "rgid": "0x2", "conn": c})
            if c > 1:
                ev.append({"time_us": t, "function": "ism0", "gid": "0x1", "kind": "dmb_reused", "token": tok,
                           "conn": c, "clean": True, "stale_bytes": 0, "first_stale_offset": None})
            t += 1000
            ev.append({"time_us": t, "function": "ism0", "gid": "0x1", "kind": "conn_closed", "token": tok,
                       "conn": c, "how": "close", "bytes": 1})
            ev.append({"time_us": t + 300, "function": "ism0", "gid": "0x1", "kind": "dmb_zeroed", "token": tok,
                       "conn": c, "delay_ms": 0.3})
    return "\n".join(json.dumps(e) for e in ev) + "\n"


def write_run(root, kernel, variant, **kw):
    d = os.path.join(root, f"kernel-{kernel}-{variant}")
    os.makedirs(d)
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump({"kernel": kernel, "variant": variant, "conns": CONNS, "rounds": ROUNDS, "smp": 1}, f)
    for name, side in (("a", "server"), ("b", "client")):
        with open(os.path.join(d, f"{name}.console.log"), "w") as f:
            f.write(console(side, **kw.get(side, {})))
    with open(os.path.join(d, "events.jsonl"), "w") as f:
        f.write(events())
    return d


def run(*args):
    return subprocess.run([sys.executable, EXP, *args], capture_output=True, text=True)


class ExperimentResults(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        self.out = os.path.join(self.root, "results.json")

    def tearDown(self):
        self.tmp.cleanup()

    def report(self, *runs):
        r = run("report", self.out, *runs)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r

    def test_a_whole_run_passes_and_the_table_compares_the_zeroing_points(self):
        w = write_run(self.root, "6.12", "stock")
        wo = write_run(self.root, "6.12", "prezero", client={"buf_us": (500, 600, 700, 800)})
        r = self.report(w, wo)
        self.assertIn("w/o: 6.12-prezero", r.stdout)
        self.assertIn("w/: 6.12", r.stdout)
        with open(self.out) as f:
            res = json.load(f)
        k = {x["name"]: x for x in res["kernels"]}
        self.assertEqual(k["6.12"]["zeroing"], "release")
        self.assertEqual(k["6.12-prezero"]["zeroing"], "hand-out")
        # The first round is left out, as the seed did.
        self.assertEqual(k["6.12"]["connlat_us"]["kept"]["n"], CONNS * (ROUNDS - 1))
        self.assertEqual(k["6.12-prezero"]["smc_buf_create_us"]["client"]["mean"], 650)
        self.assertEqual(k["6.12"]["host"]["zero_delay_ms"]["p50"], 0.3)
        self.assertEqual(k["6.12"]["host"]["dmbs_registered"], CONNS)
        self.assertEqual(k["6.12"]["host"]["registered_to_first_move_ms"]["p50"], 1.0)
        c = run("check", self.out)
        self.assertEqual(c.returncode, 0, c.stderr)

    def test_a_fallback_connection_fails_the_check(self):
        w = write_run(self.root, "6.12", "stock")
        wo = write_run(self.root, "6.12", "prezero", server={"mode": "FALLBACK"})
        self.report(w, wo)
        c = run("check", self.out)
        self.assertEqual(c.returncode, 1)
        self.assertIn("6.12-prezero: server: 0/12 connections SMC-D", c.stderr)

    def test_a_kernel_without_tracing_fails_the_check(self):
        w = write_run(self.root, "6.12", "stock", client={"trace": "no_kprobe_events"})
        wo = write_run(self.root, "5.10", "stock")
        self.report(w, wo)
        c = run("check", self.out)
        self.assertEqual(c.returncode, 1)
        self.assertIn("kernel trace on the client: no_kprobe_events", c.stderr)

    def test_kernels_that_zero_at_the_same_point_are_no_comparison(self):
        self.report(write_run(self.root, "6.12", "stock"), write_run(self.root, "6.1", "stock"))
        c = run("check", self.out)
        self.assertEqual(c.returncode, 1)
        self.assertIn("do not differ in where they zero", c.stderr)

    def test_the_bench_part_is_required_when_asked_for(self):
        self.report(write_run(self.root, "6.12", "stock"), write_run(self.root, "6.12", "prezero"))
        c = run("check", self.out, "--need-bench")
        self.assertEqual(c.returncode, 1)
        self.assertIn("missing smcd_vs_tcp", c.stderr)


if __name__ == "__main__":
    unittest.main()
