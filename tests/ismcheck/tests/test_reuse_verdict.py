#!/usr/bin/env python3
"""reuse_verdict.py (make unit): the host's verdict of recorded make faults and make
chaos runs, and what may and may not explain a stale reuse or a foreign CDC message."""

import json
import os
import pathlib
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from ismcheck import reuse_verdict  # noqa: E402

TESTDATA = pathlib.Path(__file__).resolve().parent / "testdata"
DATA = TESTDATA / "faults"


def events(name, under=DATA):
    with open(under / name, encoding="utf-8") as f:
        return [json.loads(l) for l in f if l.strip()]


def reused(conn, stale, first=0, token="0x1"):
    return {"kind": "dmb_reused", "function": "ism0", "token": token, "conn": conn,
            "clean": stale == 0, "stale_bytes": stale, "first_stale_offset": first if stale else None}


def late(after_zeroed, token="0x1", nbytes=0):
    return {"kind": "late_write", "function": "ism0", "token": token, "conn": 1,
            "moves": 1, "bytes": nbytes, "after_zeroed": after_zeroed}


class RecordedRuns(unittest.TestCase):
    def test_move_reject_stale_by_a_late_cdc_is_explained_only_when_allowed(self):
        lines = events("move-reject-stale-6.12.events.jsonl")
        verdict, _, explained, unexplained = reuse_verdict.judge(lines, set())
        self.assertEqual(verdict, "STALE")
        self.assertEqual(len(unexplained), 1)
        verdict, _, explained, unexplained = reuse_verdict.judge(lines, {"late-cdc"})
        self.assertEqual((verdict, len(explained), unexplained), ("STALE", 1, []))

    def test_a_late_cdc_that_crossed_the_zeroing_is_explained_by_the_zeroing_found_around_it(self):
        # fault/002 on 7.3.4 in CI (stop 59): the read before b's late CDC message found a's
        # zeroing under way, and no look found the DMB all zero. As recorded, the host had
        # no zeroing before the late write and the 6 stale bytes stayed unexplained.
        lines = events("move-reject-crossed-7.3.events.jsonl")
        verdict, _, explained, unexplained = reuse_verdict.judge(lines, {"late-cdc"})
        self.assertEqual((verdict, explained, len(unexplained)), ("STALE", [], 1))
        # The watch now reads past that message and finds the rest zero: the dmb_zeroed
        # line it gives at its next look (415.177741) explains the reuse, with late-cdc only.
        at = next(i for i, l in enumerate(lines) if l["kind"] == "late_write") + 1
        zeroed = {"time_us": 1796638415177741, "function": "ism0", "gid": "0x12340049534d0001",
                  "token": "0x100000000", "kind": "dmb_zeroed", "conn": 1, "delay_ms": 21.6,
                  "late_cdc_kept": True}
        lines = lines[:at] + [zeroed] + lines[at:]
        verdict, _, explained, unexplained = reuse_verdict.judge(lines, {"late-cdc"})
        self.assertEqual((verdict, len(explained), unexplained), ("STALE", 1, []))
        self.assertIn("6 stale bytes, a late CDC message", explained[0])
        self.assertEqual(len(reuse_verdict.judge(lines, set())[3]), 1)
        # More than a CDC message's bytes are not that message's.
        big = [dict(l, stale_bytes=33) if l["kind"] == "dmb_reused" and not l["clean"] else l
               for l in lines]
        self.assertEqual(len(reuse_verdict.judge(big, {"late-cdc"})[3]), 1)

    def test_late_data_that_crossed_the_zeroing_counts_what_the_watch_found_of_it(self):
        # fault/010 on 6.12.117 in CI (stop 60): a late chunk crossed a's zeroing. The
        # watch now finds the DMB zero but for the late writes and counts their data
        # nonzero bytes still there (the CDC message's 6 among them); the chunks after
        # that are late writes after the zeroing.
        zeroed = {"function": "ism0", "token": "0x1", "kind": "dmb_zeroed", "conn": 1,
                  "delay_ms": 30.0, "late_cdc_kept": True, "late_bytes_kept": 28006}
        before = [late(False, nbytes=4096) for _ in range(3)] + [zeroed, late(True, nbytes=4096)]
        for stale, ok in ((32102, True), (32103, False)):
            verdict, _, explained, unexplained = reuse_verdict.judge(
                before + [reused(2, stale)], {"late-cdc"})
            self.assertEqual((verdict, bool(explained), not unexplained), ("STALE", ok, ok), stale)
        self.assertIn("32102 bytes after the zeroing",
                      reuse_verdict.judge(before + [reused(2, 32102)], {"late-cdc"})[2][0])
        # Without the watch's count, as CI recorded it: unexplained.
        as_recorded = [l for l in before if l is not zeroed and l["after_zeroed"] is False]
        self.assertEqual(len(reuse_verdict.judge(as_recorded + [reused(2, 32615)], {"late-cdc"})[3]), 1)

    def test_late_write_is_crossed_by_an_old_connections_close(self):
        lines = events("late-write-6.12.events.jsonl")
        verdict, _, explained, unexplained = reuse_verdict.judge(lines, {"late-cdc"})
        self.assertEqual((verdict, unexplained), ("CROSSED", []))
        self.assertIn("old connection's close", explained[0])


    def test_late_data_and_close_in_a_live_dmb_is_crossed_and_explained_only_by_late_data(self):
        # make chaos CHAOS_ROUND=554400509 KERNEL=6.12 VARIANT=stock, the shrunk run's trace
        # replayed (device/tests/data/chaos-554400509-seq-6.12-stock.trace.jsonl.gz).
        lines = events("seq-554400509-6.12.events.jsonl", TESTDATA / "chaos")
        verdict, _, explained, unexplained = reuse_verdict.judge(lines, {"late-data"})
        self.assertEqual((verdict, len(explained), unexplained), ("CROSSED", 1, []))
        self.assertIn("known bug late-data", explained[0])
        verdict, _, explained, unexplained = reuse_verdict.judge(lines, set())
        self.assertEqual((verdict, explained, len(unexplained)), ("CROSSED", [], 1))


def foreign(conn_state, late_moves=None):
    line = {"kind": "foreign_cdc", "function": "ism0", "token": "0x1", "conn": 2,
            "expected": 0, "seen": 4176, "conn_state": conn_state}
    if late_moves is not None:
        line.update(found="continuation", late_moves=late_moves, late_bytes=4176 if late_moves else 0)
    return line


class Rules(unittest.TestCase):
    def test_late_data_needs_a_close_without_abort_and_data_before_it(self):
        self.assertEqual(reuse_verdict.judge([foreign(0x40, 3)], {"late-data"})[3], [])
        for line in (foreign(0x40), foreign(0x40, 0), foreign(0x60, 3), foreign(0x20, 3), foreign(0, 3)):
            verdict, _, _, unexplained = reuse_verdict.judge([line], {"late-data"})
            self.assertEqual((verdict, len(unexplained)), ("CROSSED", 1), line)

    def test_late_data_explains_no_stale_reuse(self):
        lines = [late(True, nbytes=4096), reused(2, 7)]
        self.assertEqual(len(reuse_verdict.judge(lines, {"late-data"})[3]), 1)

    def test_clean_and_no_reuse(self):
        self.assertEqual(reuse_verdict.judge([reused(2, 0)], set())[0], "CLEAN")
        self.assertEqual(reuse_verdict.judge([], set())[0], "no reuse")

    def test_a_late_write_before_zeroing_explains_nothing(self):
        _, _, _, unexplained = reuse_verdict.judge([late(False), reused(2, 7)], {"late-cdc"})
        self.assertEqual(len(unexplained), 1)

    def test_stale_bytes_past_the_cdc_area_are_not_a_late_cdc(self):
        for stale, first in ((33, 0), (7, 32)):
            _, _, _, unexplained = reuse_verdict.judge([late(True), reused(2, stale, first)], {"late-cdc"})
            self.assertEqual(len(unexplained), 1, (stale, first))

    def test_late_data_explains_no_more_stale_bytes_than_it_carried(self):
        # CI's late-write on 7.3, 2026-12-04: the aborted sender's next 4 KiB chunk landed
        # after the zeroing (3 moves, 4096 bytes), 4090 of them nonzero.
        for stale, first in ((4090, 0), (4096, 100)):
            _, _, explained, unexplained = reuse_verdict.judge(
                [late(True, nbytes=4096), reused(2, stale, first)], {"late-cdc"})
            self.assertEqual((len(explained), unexplained), (1, []), (stale, first))
            self.assertIn("late writes (4096 bytes", explained[0])
        for lines in ([late(True, nbytes=4096), reused(2, 4097)],
                      [late(False, nbytes=4096), reused(2, 4090)],
                      [late(True, nbytes=4096, token="0x2"), reused(2, 4090)]):
            self.assertEqual(len(reuse_verdict.judge(lines, {"late-cdc"})[3]), 1, lines)
            self.assertEqual(len(reuse_verdict.judge(lines, set())[3]), 1, lines)

    def test_late_writes_after_the_zeroing_add_up(self):
        # make faults' late-data on stock 6.12 (2026-12-06): the sender's 4 KiB chunks,
        # each a late_write line of its own, land in the zeroed DMB one after another; the
        # next connection finds far more stale bytes than any one of them carried.
        lines = events("late-data-6.12.events.jsonl")
        verdict, _, explained, unexplained = reuse_verdict.judge(lines, {"late-cdc"})
        self.assertEqual(unexplained, [])
        self.assertEqual(verdict, "STALE")
        self.assertIn("late writes (16384 bytes after the zeroing)", explained[0])
        self.assertEqual(len(reuse_verdict.judge(lines, set())[3]), 1)

    def test_a_late_cdc_after_late_data_keeps_the_data_counted(self):
        # move-reject's one unexplained verdict (6.12 stock, issue 51): 2656 stale bytes.
        # The sender's late data, then its late CDC message (0 data bytes): the checker
        # kept only the last late write's bytes, 0, and could not explain the data.
        lines = [late(True, nbytes=2656), late(True), reused(2, 2656)]
        _, _, explained, unexplained = reuse_verdict.judge(lines, {"late-cdc"})
        self.assertEqual((len(explained), unexplained), (1, []))
        self.assertIn("late writes (2656 bytes after the zeroing)", explained[0])
        # more stale bytes than all of them carried, or writes before the zeroing: no
        for lines in ([late(True, nbytes=2000), late(True, nbytes=600), reused(2, 2656)],
                      [late(False, nbytes=2656), late(True), reused(2, 2656)]):
            self.assertEqual(len(reuse_verdict.judge(lines, {"late-cdc"})[3]), 1, lines)

    def test_a_reuse_takes_the_late_writes_before_it_only(self):
        # what the old connection wrote before the DMB's reuse says nothing of the reuse
        # after the next zeroing
        lines = [late(True, nbytes=4096), reused(2, 4000), late(True), reused(3, 4000)]
        _, _, explained, unexplained = reuse_verdict.judge(lines, {"late-cdc"})
        self.assertEqual((len(explained), len(unexplained)), (1, 1))

    def test_a_late_write_into_another_dmb_explains_nothing(self):
        lines = [late(True, token="0x2"), reused(2, 7, token="0x1")]
        self.assertEqual(len(reuse_verdict.judge(lines, {"late-cdc"})[3]), 1)

    def test_a_foreign_cdc_without_close_flags_is_not_explained(self):
        line = {"kind": "foreign_cdc", "function": "ism0", "token": "0x1", "conn": 2,
                "expected": 64, "seen": 9, "conn_state": 0}
        verdict, _, _, unexplained = reuse_verdict.judge([line], {"late-cdc"})
        self.assertEqual((verdict, len(unexplained)), ("CROSSED", 1))

    def test_an_unchecked_reuse_is_never_explained(self):
        line = dict(reused(2, 0), clean=None, unknown="over budget")
        verdict, _, _, unexplained = reuse_verdict.judge([line], {"late-cdc"})
        self.assertEqual((verdict, len(unexplained)), ("UNKNOWN", 1))

    def test_exit_status(self):
        path = DATA / "late-write-6.12.events.jsonl"
        self.assertEqual(reuse_verdict.main([str(path), "--allow", "late-cdc"]), 0)
        self.assertEqual(reuse_verdict.main([str(path)]), 1)
        self.assertEqual(reuse_verdict.main([str(DATA / "missing.jsonl")]), 2)
        crossed = TESTDATA / "chaos" / "seq-554400509-6.12.events.jsonl"
        self.assertEqual(reuse_verdict.main([str(crossed), "--allow", "late-data"]), 0)
        self.assertEqual(reuse_verdict.main([str(crossed), "--allow", "late-cdc", "--allow", "late-data"]), 0)


if __name__ == "__main__":
    unittest.main()
