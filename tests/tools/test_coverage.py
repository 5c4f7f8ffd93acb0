#!/usr/bin/env python3
"""scripts/coverage.py: what it takes off a console, and how it sums and reports."""

import argparse
import contextlib
import gzip
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import coverage  # noqa: E402


def block(files, release="6.12.117-gcov", noise=None):
    out = [f"ISMTEST: GCOV BEGIN {release}"]
    for path, data in files.items():
        out.append(f"ISMTEST: GCOV FILE {path} {len(data)}")
        hexed = gzip.compress(data).hex()
        chunks = [hexed[i:i + 120] for i in range(0, len(hexed), 120)]
        if noise and path in noise:
            chunks.insert(1, noise[path])
        # busybox hexdump pads a short last line with spaces
        chunks[-1] += "   "
        out += chunks
    out.append(f"ISMTEST: GCOV END {len(files)}")
    return "\r\n".join(["ISMTEST: BOOTED x", "SUMMARY ok"] + out + ["ISMTEST: RESULT PASS"])


class ParseConsole(unittest.TestCase):
    def test_files_come_back_byte_for_byte(self):
        files = {"/a/obj/net/smc/af_smc.gcda": os.urandom(3000), "/a/obj/net/smc/smc_cdc.gcda": b"\0" * 9}
        release, got, lost = coverage.parse_console(block(files))
        self.assertEqual(release, "6.12.117-gcov")
        self.assertEqual(got, files)
        self.assertEqual(lost, [])

    def test_a_kernel_line_in_between_loses_only_that_file(self):
        files = {"/o/net/smc/a.gcda": os.urandom(2000), "/o/net/smc/b.gcda": os.urandom(2000)}
        # A kernel message between two lines of a file: skipped, the file is whole.
        _, got, lost = coverage.parse_console(block(files, noise={"/o/net/smc/a.gcda": "[  12.3] smc: oops"}))
        self.assertEqual(got, files)
        self.assertEqual(lost, [])
        # One that looks like data: that file alone is lost.
        _, got, lost = coverage.parse_console(block(files, noise={"/o/net/smc/a.gcda": "deadbeef"}))
        self.assertEqual(lost, ["/o/net/smc/a.gcda"])
        self.assertEqual(list(got), ["/o/net/smc/b.gcda"])

    def test_no_block_is_none(self):
        self.assertIsNone(coverage.parse_console("ISMTEST: BOOTED x\nISMTEST: RESULT PASS\n"))

    def test_collect_writes_the_tree(self):
        files = {"/k/obj/net/smc/af_smc.gcda": b"xyz"}
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "a.console.log")
            with open(log, "w") as f:
                f.write(block(files))
            args = type("A", (), {"console": log, "name": "a", "out": os.path.join(d, "raw")})
            self.assertEqual(coverage.cmd_collect(args), 0)
            (guest,) = os.listdir(os.path.join(d, "raw"))
            g = os.path.join(d, "raw", guest)
            with open(os.path.join(g, "release")) as f:
                self.assertEqual(f.read(), "6.12.117-gcov\n")
            with open(os.path.join(g, "gcda/k/obj/net/smc/af_smc.gcda"), "rb") as f:
                self.assertEqual(f.read(), b"xyz")


class Counting(unittest.TestCase):
    def doc(self, count, fcount):
        return {"files": [
            {"file": "/w/src/net/smc/af_smc.c",
             "lines": [{"line_number": 10, "count": count}, {"line_number": 11, "count": 0}],
             "functions": [{"name": "smc_connect", "start_line": 9, "execution_count": fcount}]},
            {"file": "/w/src/include/linux/list.h",
             "lines": [{"line_number": 1, "count": 5}], "functions": []},
        ]}

    def test_guests_sum_and_only_profiled_files_count(self):
        c = coverage.Counts()
        c.add_json(self.doc(0, 0), "/w/src")
        self.assertEqual(c.figures("net/smc/af_smc.c"), ([0, 2], [0, 1]))
        c.add_json(self.doc(3, 1), "/w/src")
        self.assertEqual(c.figures("net/smc/af_smc.c"), ([1, 2], [1, 1]))
        self.assertEqual(list(c.lines), ["net/smc/af_smc.c"])

    def test_never_reached_leaves_out_smcr_files_and_names_reasons(self):
        c = coverage.Counts()
        c.funcs = {"net/smc/smc_ib.c": {("smc_ib_x", 1): 0},
                   "net/smc/smc_core.c": {("smcr_lgr_y", 5): 0, ("smc_conn_create", 9): 4,
                                          ("smc_vlan_z", 20): 0}}
        rules = [("net/smc/*:smcr_*", "SMC-R only"), ("*:*vlan*", "topology: VLAN")]
        c.func_lines = {"net/smc/smc_core.c": {"smcr_lgr_y": {5, 6, 7}}}
        self.assertEqual(coverage.never_reached(c, rules),
                         [("net/smc/smc_core.c", "smcr_lgr_y", 5, "SMC-R only", 3),
                          ("net/smc/smc_core.c", "smc_vlan_z", 20, "topology: VLAN", 0)])

    def test_smcr_only_lines_count_reached_and_unreached_alike(self):
        c = coverage.Counts()
        c.lines = {"net/smc/smc_core.c": {5: 2, 6: 0, 7: 1, 9: 4, 10: 0},
                   "net/smc/smc_ib.c": {1: 3}}
        c.func_lines = {"net/smc/smc_core.c": {"smcr_lgr_y": {5, 6, 7, 8}, "smc_conn_create": {9, 10}},
                        "net/smc/smc_ib.c": {"smcr_ib_x": {1}}}
        rules = [("net/smc/*:smcr_*", "SMC-R only")]
        pick = coverage.GROUPS[1][1]
        # line 8 is no instrumented line; smc_ib.c is not in the set
        self.assertEqual(coverage.smcr_only_lines(c, rules, pick), [2, 3])

    def doc_lines(self, counts, fn_lines=(10, 11, 12)):
        return {"files": [{"file": "/w/src/net/smc/smc_rx.c",
                           "lines": [{"line_number": ln, "count": c, "function_name": "smc_rx_splice"}
                                     for ln, c in zip(fn_lines, counts)],
                           "functions": [{"name": "smc_rx_splice", "start_line": 9,
                                          "execution_count": int(any(counts))}]}]}

    def test_merged_columns_sum_and_beyond_names_the_new_lines(self):
        suites, faults = coverage.Counts(), coverage.Counts()
        suites.add_json(self.doc_lines([1, 0, 0]), "/w/src")
        suites.guests = 2
        faults.add_json(self.doc_lines([0, 4, 0]), "/w/src")
        faults.guests = 1
        both = coverage.Counts()
        both.merge(suites)
        both.merge(faults)
        self.assertEqual(both.figures("net/smc/smc_rx.c"), ([2, 3], [1, 1]))
        self.assertEqual(both.guests, 3)
        # merging never changes the columns merged
        self.assertEqual(suites.figures("net/smc/smc_rx.c"), ([1, 3], [1, 1]))
        smc = lambda r: r.startswith("net/smc/")  # noqa: E731
        self.assertEqual(coverage.beyond(suites, faults, smc), {"net/smc/smc_rx.c": [11]})
        self.assertEqual(coverage.beyond(suites, both, smc), {"net/smc/smc_rx.c": [11]})
        self.assertEqual(coverage.beyond(both, suites, smc), {})
        self.assertEqual(coverage.beyond(suites, faults, lambda r: r.startswith("drivers/")), {})
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "beyond.md")
            coverage.write_beyond(faults, coverage.beyond(suites, faults, smc), path, "t")
            with open(path) as f:
                self.assertIn("- `net/smc/smc_rx.c` `smc_rx_splice()`: 1 line (11)", f.read())

    def test_another_build_counts_only_lines_the_base_instruments(self):
        suites, debug = coverage.Counts(), coverage.Counts()
        suites.add_json(self.doc_lines([1, 0, 0], fn_lines=(10, 11, 12)), "/w/src")
        # the debug build instruments line 13 too (a debug check): not a line beyond
        debug.add_json(self.doc_lines([1, 0, 2, 5], fn_lines=(10, 11, 12, 13)), "/w/src")
        pick = coverage.GROUPS[1][1]
        self.assertEqual(coverage.beyond(suites, debug, pick, other_build=True), {"net/smc/smc_rx.c": [12]})
        self.assertEqual(coverage.beyond(suites, debug, pick), {"net/smc/smc_rx.c": [12, 13]})

    def test_beyond_compares_another_build_of_the_same_source_only_when_named(self):
        suites, debug, loop = coverage.Counts(), coverage.Counts(), coverage.Counts()
        suites.add_json(self.doc_lines([1, 0, 0]), "/w/src")
        debug.add_json(self.doc_lines([1, 0, 2]), "/w/src")
        loop.add_json(self.doc_lines([1, 3, 0]), "/w/src")
        by_label = {"suites": (suites, "6.12.117-gcov"), "chaos-debug": (debug, "6.12.117-debug-gcov"),
                    "loopback-ism": (loop, "6.12.117-loopback-gcov")}
        files = ["net/smc/smc_rx.c"]
        with tempfile.TemporaryDirectory() as d:
            args = argparse.Namespace(beyond="suites", also_beyond=["chaos-debug"], out=d)
            for label in by_label:  # cmd_report makes each column's folder
                os.makedirs(os.path.join(d, label))
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                coverage.print_beyond(args, by_label, files)
            # the debug build's line 12, by line; the loopback build, not named, not compared
            self.assertIn("chaos-debug", out.getvalue())
            self.assertNotIn("loopback-ism", out.getvalue())
            with open(os.path.join(d, "chaos-debug", "beyond-suites.md")) as f:
                self.assertIn("(12)", f.read())
            # another source (another line's kernel) is never compared, even when named
            by_label["chaos-debug"] = (debug, "6.1.176-debug-gcov")
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                coverage.print_beyond(args, by_label, files)
            self.assertNotIn("chaos-debug", out.getvalue())

    def test_column_specs(self):
        self.assertEqual(coverage.parse_columns(["all=a,b", "a=a"]), [("all", ["a", "b"]), ("a", ["a"])])
        with self.assertRaises(SystemExit):
            coverage.parse_columns(["all="])


if __name__ == "__main__":
    unittest.main()
