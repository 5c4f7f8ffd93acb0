#!/usr/bin/env python3
"""guest_where.py (make unit): how a sampled address is named. A wrong name is worse than
a number: it sends whoever reads a hang's report to the wrong function."""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from ismcheck import guest_where  # noqa: E402

SYSTEM_MAP = """\
0000000000100000 T _stext
0000000000100100 T foo
0000000000100200 T bar
00000000006f9000 T _etext
0000000000a50000 T _etext_amode31
"""


def load(console_lines):
    with tempfile.TemporaryDirectory() as d:
        m, c = os.path.join(d, "System.map"), os.path.join(d, "console.log")
        with open(m, "w") as f:
            f.write(SYSTEM_MAP)
        with open(c, "w") as f:
            f.write("".join(line + "\n" for line in console_lines))
        return guest_where.load_symbols(m, c)


class Symbolize(unittest.TestCase):
    def name(self, console_lines, addr):
        addrs, names, ranges, _ = load(console_lines)
        return guest_where.symbolize(addrs, names, addr, ranges)

    def test_kernel_text_moved_by_kaslr(self):
        lines = ["ISMTEST: MODSYM 0000000012100000 T _stext"]
        self.assertEqual(self.name(lines, 0x12100210), "bar+0x10")
        self.assertTrue(load(lines)[3])

    def test_no_stext_line_no_kernel_names(self):
        # The address CI's hang showed: past the map's last text symbol. Without the
        # offset it must stay a number, not "_etext_amode31".
        self.assertEqual(self.name([], 0x12100210), "0x12100210")
        self.assertEqual(self.name([], 0x100210), "0x100210")
        self.assertFalse(load([])[3])

    def test_outside_text_is_a_number(self):
        lines = ["ISMTEST: MODSYM 0000000000100000 T _stext"]
        self.assertEqual(self.name(lines, 0x800000), "0x800000")
        self.assertEqual(self.name(lines, 0x1000), "0x1000")

    def test_module_line_names_the_module(self):
        lines = ["ISMTEST: MODSYM 0000000000100000 T _stext",
                 "ISMTEST: MODULE smc 0x000003ff80010000 335872",
                 "ISMTEST: MODULE ism 0x000003ff80000000 40960"]
        self.assertEqual(self.name(lines, 0x3ff80010040), "[smc]+0x40")
        self.assertEqual(self.name(lines, 0x3ff80000000 + 40960), "0x3ff8000a000")

    def test_module_symbols_win_over_the_module_line(self):
        lines = ["ISMTEST: MODSYM 0000000000100000 T _stext",
                 "ISMTEST: MODULE ism 0x000003ff80000000 40960",
                 "ISMTEST: MODSYM 000003ff80000100 t ism_handle_irq [ism]"]
        self.assertEqual(self.name(lines, 0x3ff80000104), "ism_handle_irq[ism]+0x4")


if __name__ == "__main__":
    unittest.main()
