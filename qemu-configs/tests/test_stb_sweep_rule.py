#!/usr/bin/env python3
"""stb-sweep-rule.py (make unit): the PCISTB, PCILG and PCISTG rule that pcistb-smoke.sh
holds stbtest.ko's sweeps to, for both MSI-X layouts of pcistb-stub.py, and above all at
offsets just below 2^64, where offset + length wraps in 64 bits (QEMU's bug: such an
access was dispatched to the MSI-X table)."""

import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
RULE = os.path.join(HERE, "stb-sweep-rule.py")
_spec = importlib.util.spec_from_file_location("stb_sweep_rule", RULE)
rule = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rule)

FN = "0002:00:00.0"
TOP = 1 << 64
OK, CC1, PGM = 0, -5, -6


def wrapping_inside(off, ln, base, size):
    """The old arithmetic: offset + length compared as a 64-bit sum, which wraps."""
    return off >= base and (off + ln) % TOP <= base + size


def line(insn, bar, off, rcs, fn=FN):
    return f"[    1.0] STBT: {fn} {insn} as={bar} off=0x{off:x} rc={','.join(map(str, rcs))}\n"


def run(log, *specs):
    """The report of check() for the log's text: {label: (shapes, mismatches)}, lines."""
    out, _ = rule.check(log, list(specs))
    counts = {}
    for s in out:
        if not s.startswith("  "):
            label, _, shapes, mism = s.split()
            counts[label] = (int(shapes.split("=")[1]), int(mism.split("=")[1]))
    return counts, out


class NearTwoToThe64(unittest.TestCase):
    """Accesses whose offset + length wraps: not inside any region, so operand (-6)."""

    def test_pcistg_4_bytes_at_2_64_minus_4_on_the_table_bar_is_operand(self):
        for kind in ("ism", "plain", "ism-split", "plain-split"):
            self.assertEqual(rule.expect_lgsg(kind, 4, TOP - 4, 4)[0], PGM, kind)

    def test_a_cc0_at_2_64_minus_4_on_bar_4_is_a_mismatch(self):
        # what the unfixed QEMU answered: PCILG/PCISTG of 4 bytes reached the MSI-X table
        for kind in ("ism", "plain-split"):
            log = line("LG", 4, TOP - 4, [PGM, PGM, OK, PGM]) + line("SG", 4, TOP - 4, [PGM, PGM, OK, PGM])
            counts, out = run(log, f"{FN}:{kind}")
            self.assertEqual(counts["LGSG"], (8, 2), out)
            self.assertIn("  MISMATCH LG as=4 off=0xfffffffffffffffc len=4 rc=0 want=-6", "\n".join(out))
            # the wrapping arithmetic took that access for one inside the table
            with mock.patch.object(rule, "inside", wrapping_inside):
                self.assertEqual(run(log, f"{FN}:{kind}")[0]["LGSG"], (8, 0))

    def test_the_fixed_answer_at_2_64_minus_4_matches(self):
        log = line("LG", 4, TOP - 4, [PGM] * 4) + line("SG", 4, TOP - 4, [PGM] * 4)
        self.assertEqual(run(log, f"{FN}:plain-split")[0]["LGSG"], (8, 0))

    def test_pcistb_16_bytes_at_2_64_minus_16_is_operand(self):
        # the generic path (plain) and an ISM store onto the table's BAR alike
        rcs = [rule.expect(kind, 4, TOP - 16, 16)[0] for kind in ("plain", "ism", "plain-split", "ism-split")]
        self.assertEqual(rcs, [PGM] * 4)
        ok_at_16 = [PGM, PGM, OK] + [PGM] * 8
        for kind in ("plain", "ism-split"):
            log = line("SW", 4, TOP - 16, ok_at_16)
            counts, out = run(log, f"{FN}:{kind}")
            self.assertEqual(counts["SWEEP"], (11, 1), out)
            self.assertIn("MISMATCH as=4 off=0xfffffffffffffff0 len=16 rc=0 want=-6", "\n".join(out))
            with mock.patch.object(rule, "inside", wrapping_inside):
                self.assertEqual(run(log, f"{FN}:{kind}")[0]["SWEEP"], (11, 0))

    def test_every_near_offset_is_operand_in_every_bar(self):
        for off in (TOP - 4, TOP - 8, TOP - 16, TOP - 128, TOP - 0x800):
            for bar in range(6):
                for kind in ("ism", "plain", "ism-split", "plain-split"):
                    for ln in rule.LENS:
                        self.assertEqual(rule.expect(kind, bar, off, ln)[0], PGM, (kind, bar, hex(off), ln))
                    for ln in rule.LGSG_LENS:
                        self.assertEqual(rule.expect_lgsg(kind, bar, off, ln)[0], PGM, (kind, bar, hex(off), ln))

    def test_no_bar_and_configuration_space_near_2_64(self):
        self.assertEqual(rule.expect_lgsg("ism", 6, TOP - 8, 8)[0], CC1)
        self.assertEqual(rule.expect("plain", 7, TOP - 16, 16)[0], CC1)
        # QEMU takes the configuration-space offset as 32 bits and finds it beyond the
        # space: cc 0, loads read all ones, stores are dropped
        self.assertEqual([rule.expect_lgsg("plain", 15, TOP - 4, ln)[0] for ln in rule.LGSG_LENS],
                         [OK, OK, OK, PGM])


class Inside(unittest.TestCase):
    def test_inside_without_overflow(self):
        self.assertTrue(rule.inside(0, 16, 0, 16))
        self.assertTrue(rule.inside(8, 8, 0, 16))
        self.assertFalse(rule.inside(9, 8, 0, 16))
        self.assertFalse(rule.inside(TOP - 4, 4, 0, 16))
        self.assertFalse(rule.inside(TOP - 16, 16, 0, 4096))
        self.assertFalse(rule.inside(0, 32, 0, 16))
        self.assertFalse(rule.inside(0x7f8, 8, 0x800, 8))


class LoadStoreRule(unittest.TestCase):
    """PCILG and PCISTG at sane offsets, lengths 1, 2, 4, 8."""

    def rcs(self, kind, bar, off):
        return [rule.expect_lgsg(kind, bar, off, ln)[0] for ln in rule.LGSG_LENS]

    def test_the_msix_table_takes_4_or_8_bytes(self):
        for kind in ("ism", "plain", "ism-split", "plain-split"):
            self.assertEqual(self.rcs(kind, 4, 0x0), [PGM, PGM, OK, OK], kind)
            self.assertEqual(self.rcs(kind, 4, 0x8), [PGM, PGM, OK, OK], kind)

    def test_the_pba_where_the_layout_puts_it(self):
        # vfio-user-pci's region over the PBA takes any length (reads go to the server)
        self.assertEqual(self.rcs("ism", 4, 0x800), [OK] * 4)
        self.assertEqual(rule.expect_lgsg("ism", 4, 0x801, 1)[0], OK)
        self.assertEqual(rule.expect_lgsg("ism", 4, 0x802, 4)[0], PGM)   # unaligned
        self.assertEqual(self.rcs("plain", 2, 0x0), [OK] * 4)
        self.assertEqual(self.rcs("ism-split", 2, 0x0), [OK] * 4)
        self.assertEqual(self.rcs("plain-split", 4, 0x800), [OK] * 4)
        self.assertEqual(self.rcs("plain-split", 2, 0x8), [OK] * 4)

    def test_the_device_bars(self):
        self.assertEqual(self.rcs("ism", 0, 0x1000), [OK] * 4)
        self.assertEqual(self.rcs("ism", 2, 0xff8), [OK] * 4)
        self.assertEqual(self.rcs("ism", 2, 0x1000), [PGM] * 4)     # beyond the 4 KiB BAR
        self.assertEqual(self.rcs("plain", 4, 0x1000), [PGM] * 4)
        for bar in (1, 3, 5):
            self.assertEqual(self.rcs("plain", bar, 0x0), [PGM] * 4)

    def test_length_within_the_doubleword(self):
        self.assertEqual(rule.expect_lgsg("plain", 0, 0x4, 8)[0], PGM)
        self.assertEqual(rule.expect_lgsg("plain", 0, 0x4, 4)[0], OK)
        self.assertEqual(rule.expect_lgsg("plain", 0, 0x2, 4)[0], PGM)   # unaligned

    def test_no_bar_and_configuration_space(self):
        self.assertEqual(self.rcs("ism", 6, 0x0), [CC1] * 4)
        self.assertEqual(self.rcs("ism", 7, 0x800), [CC1] * 4)
        self.assertEqual(self.rcs("ism", 15, 0x0), [OK, OK, OK, PGM])
        self.assertEqual(self.rcs("plain", 15, 0x1000), [OK, OK, OK, PGM])
        self.assertEqual(rule.expect_lgsg("plain", 15, 0x2, 4)[0], PGM)   # crosses the word


class StoreBlockRule(unittest.TestCase):
    """PCISTB: the rule the sweep held QEMU to before the near-2^64 offsets."""

    def test_ism_onto_the_table_takes_the_generic_path(self):
        self.assertEqual(rule.expect("ism", 4, 0x0, 16)[0], OK)
        self.assertEqual(rule.expect("ism", 4, 0x0, 1)[0], PGM)
        self.assertEqual(rule.expect("ism", 4, 0x3, 16)[0], PGM)

    def test_ism_onto_the_pba_where_the_layout_puts_it(self):
        self.assertEqual(rule.expect("ism", 2, 0x0, 1)[0], OK)          # the device
        self.assertEqual(rule.expect("ism-split", 2, 0x0, 1)[0], PGM)   # generic: len <= 8
        self.assertEqual(rule.expect("ism-split", 4, 0x800, 1)[0], OK)
        self.assertEqual(rule.expect("ism", 4, 0x804, 1)[0], PGM)

    def test_plain_generic_path(self):
        self.assertEqual(rule.expect("plain", 0, 0x0, 128)[0], OK)
        self.assertEqual(rule.expect("plain", 0, 0x0, 136)[0], PGM)     # > maxstbl 128
        self.assertEqual(rule.expect("plain", 0, 0xff8, 16)[0], PGM)    # crosses 4K
        self.assertEqual(rule.expect("plain", 0, 0x1000000, 16)[0], PGM)
        self.assertEqual(rule.expect("plain", 15, 0x0, 16)[0], CC1)


class Report(unittest.TestCase):
    def test_counts_per_function_and_kind(self):
        good = line("SW", 6, 0, [CC1] * 11) + line("LG", 15, 0, [OK, OK, OK, PGM]) \
            + line("SW", 2, 0, [PGM, PGM, OK, OK, PGM, OK, OK, PGM, OK, PGM, PGM])
        other = line("SW", 4, 0, [OK] * 11, fn="0003:00:00.0")
        counts, out = run(good + other, f"{FN}:ism-split")
        self.assertEqual(counts, {"SWEEP": (22, 0), "LGSG": (4, 0)}, out)
        # the same PCISTB line is wrong for the default layout (no PBA in BAR 2 there:
        # an ISM store of 1, 8, 129 or 4095 bytes at offset 0 goes to the device)
        counts, out = run(good, f"{FN}:ism")
        self.assertEqual(counts["SWEEP"], (22, 4), out)

    def test_a_line_with_too_few_rcs_is_a_mismatch(self):
        counts, out = run(line("LG", 6, 0, [CC1] * 3), f"{FN}:plain")
        self.assertEqual(counts["LGSG"], (3, 1), out)

    def test_unknown_kind(self):
        with self.assertRaises(ValueError):
            rule.check("", [f"{FN}:isms"])


class Command(unittest.TestCase):
    def run_rule(self, log, *specs):
        with tempfile.NamedTemporaryFile("w", suffix=".log") as f:
            f.write(log)
            f.flush()
            return subprocess.run([sys.executable, RULE, f.name, *specs],
                                  capture_output=True, text=True)

    def test_exit_status_and_output(self):
        bad = line("LG", 4, TOP - 4, [PGM, PGM, OK, PGM])
        p = self.run_rule(bad, f"{FN}:plain-split")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn(f"SWEEP {FN} shapes=0 mismatches=0", p.stdout)
        self.assertIn(f"LGSG {FN} shapes=4 mismatches=1", p.stdout)
        self.assertIn("MISMATCH LG as=4 off=0xfffffffffffffffc len=4 rc=0 want=-6", p.stdout)
        good = line("LG", 4, TOP - 4, [PGM] * 4)
        p = self.run_rule(good, f"{FN}:plain-split")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn(f"LGSG {FN} shapes=4 mismatches=0", p.stdout)

    def test_unknown_kind_and_no_functions(self):
        self.assertEqual(self.run_rule("", f"{FN}:nope").returncode, 2)
        self.assertEqual(self.run_rule("").returncode, 2)


if __name__ == "__main__":
    unittest.main()
