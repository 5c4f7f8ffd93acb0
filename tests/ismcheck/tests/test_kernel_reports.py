#!/usr/bin/env python3
"""kernel_reports.py (make unit): every kind of kernel report in a guest's console is
found, with its text, and a console without one (programs' lines, gcov dumps) has none."""

import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from ismcheck import kernel_reports  # noqa: E402

# A clean console: boot lines that look close (rcu:, lockdep's banner, kasan's start),
# the programs' lines and a GCOV=1 dump of hex between its markers.
CLEAN = """\
Linux version 6.12.117-debug (ism-emu@ism-emu) (s390x-linux-gnu-gcc (Debian 12.2.0-14) 12.2.0) #1 SMP\r
rcu: Hierarchical RCU implementation.\r
rcu: \tRCU restricting CPUs from NR_CPUS=16 to nr_cpu_ids=2.\r
Lock dependency validator: Copyright (c) 2006 Red Hat, Inc., Ingo Molnar\r
... MAX_LOCKDEP_SUBCLASSES:  8\r
kasan: KernelAddressSanitizer initialized\r
hung_task: a message that is not a report\r
ISMTEST: BOOT 6.12.117-debug\r
smctest[client]: seq: 2 connection(s) to 10.0.0.1:12401 (AF_SMC), WARNING: not a kernel line\r
CONN test=seq idx=0 side=client mode=SMCD state=ACTIVE INFO: task list BUG: none\r
SUMMARY test=seq side=client conns=2 smcd=2 fallback=0 notfound=0 failed=0 ok\r
FAULT: PHASE after rc=0\r
ISMTEST: GCOV BEGIN 6.12.117-gcov\r
ISMTEST: GCOV FILE /x/net/smc/smc_diag.gcda 1072\r
1f8b08000000000000034b4f4e49743232d27278beaa8f01081819c080276fd7ebb3e78de7391dd8bdc98e\r
BUG: this hex dump line is inside the gcov block and never a report\r
ISMTEST: GCOV END 19\r
ISMTEST: RESULT PASS\r
"""

WARN = """\
------------[ cut here ]------------\r
WARNING: CPU: 1 PID: 57 at net/smc/smc_core.c:1203 smc_conn_free+0x1a4/0x1b0 [smc]\r
Modules linked in: smc_diag smc ism dibs\r
CPU: 1 UID: 0 PID: 57 Comm: kworker/1:1 Not tainted 6.12.117-debug #1\r
Call Trace:\r
 [<000000000012abcd>] smc_conn_free+0x1a4/0x1b0 [smc]\r
---[ end trace 0000000000000000 ]---\r
"""

KASAN = """\
==================================================================\r
BUG: KASAN: slab-use-after-free in smcd_cdc_msg_send+0x5e/0x1f0 [smc]\r
Read of size 8 at addr 0000000012345678 by task smctest/88\r
\r
Call Trace:\r
 [<0000000000aaaaaa>] kasan_report+0xb0/0xf0\r
Allocated by task 80:\r
Freed by task 81:\r
==================================================================\r
"""

LOCKDEP = """\
\r
======================================================\r
WARNING: possible circular locking dependency detected\r
7.3.4-debug #1 Not tainted\r
------------------------------------------------------\r
kworker/0:2/40 is trying to acquire lock:\r
0000000001234567 (&smc->clcsock_release_lock){+.+.}-{3:3}, at: smc_connect_work+0x44/0x3a0 [smc]\r
"""

NONSTATIC = """\
INFO: trying to register non-static key.\r
The code is fine but needs lockdep annotation, or maybe\r
you didn't initialize this object before use?\r
turning off the locking correctness validator.\r
"""

SPINLOCK = "BUG: spinlock bad magic on CPU#0, swapper/0/1\r\n lock: 0x1234, .magic: 00000000, .owner: <none>/-1, .owner_cpu: 0\r\n"
SLEEP = "BUG: sleeping function called from invalid context at net/core/sock.c:3622\r\nin_atomic(): 1, irqs_disabled(): 0, non_block: 0, pid: 60, name: smctest\r\n"
HUNG = "INFO: task smctest:61 blocked for more than 60 seconds.\r\n      Not tainted 6.12.117-debug #1\r\n"
RCU = "rcu: INFO: rcu_sched self-detected stall on CPU\r\nrcu: \t1-....: (2100 ticks this GP)\r\n"
SOFTLOCKUP = "watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [smctest:70]\r\n"
OOPS = """\
Unable to handle kernel pointer dereference in virtual kernel address space\r
Failing address: 0000000000000000 TEID: 0000000000000483\r
Fault in home space mode while using kernel ASCE.\r
Oops: 0004 ilc:3 [#1] SMP\r
Modules linked in: smc_diag smc ism\r
Krnl PSW : 0704c00180000000 000003ff8012a4da (smc_conn_create+0x4da/0x9a8 [smc])\r
---[ end trace 0000000000000000 ]---\r
Kernel panic - not syncing: Fatal exception: panic_on_oops\r
"""
LOWADDR = "Low-address protection: 0004 ilc:3 [#1] SMP\r\nKrnl PSW : 0704c00180000000 000003ff8012a4da (smc_conn_create+0x4da/0x9a8 [smc])\r\n"
BUG_AT = """\
------------[ cut here ]------------\r
kernel BUG at net/smc/smc_core.c:900!\r
monitor event: 0040 ilc:2 [#1] SMP\r
---[ end trace 0000000000000000 ]---\r
"""


def find(text):
    return kernel_reports.find_reports(text.splitlines(keepends=True))


class Reports(unittest.TestCase):
    def test_clean_console_has_no_report(self):
        self.assertEqual(find(CLEAN), [])

    def one(self, text, kind, first):
        reports = find(CLEAN.replace("ISMTEST: RESULT PASS\r\n", text + "ISMTEST: RESULT PASS\r\n"))
        self.assertEqual(len(reports), 1, reports)
        self.assertEqual(reports[0][0], kind)
        self.assertTrue(any(first in l for l in reports[0][1]), reports[0][1])
        return reports[0][1]

    def test_warn_whole_block_up_to_its_end(self):
        text = self.one(WARN, "WARN", "at net/smc/smc_core.c:1203")
        self.assertEqual(text[0], "------------[ cut here ]------------")
        self.assertTrue(text[-1].startswith("---[ end trace"))

    def test_in_the_kmsg_block_of_a_passing_guest(self):
        # guest-tests/init/init prints the kernel's warnings and worse at the end, as
        # `dmesg -r` gives them less the level prefix: each line with its time stamp
        stamped = "".join(f"[   41.{i:06d}] {l}\r\n" for i, l in enumerate(WARN.replace("\r", "").splitlines()))
        block = ("ISMTEST: KMSG BEGIN (the kernel's messages of level warning and worse)\r\n"
                 "[    2.000000] smc: adding smcd device 0002:00:00.0 with pnetid \r\n"
                 + stamped + "ISMTEST: KMSG END\r\n")
        text = self.one(block, "WARN", "at net/smc/smc_core.c:1203")
        self.assertTrue(text[-1].startswith("---[ end trace"))

    def test_kasan_between_its_rules(self):
        text = self.one(KASAN, "KASAN", "slab-use-after-free in smcd_cdc_msg_send")
        self.assertTrue(text[0].startswith("====="))
        self.assertIn("Freed by task 81:", text)
        self.assertTrue(text[-1].startswith("====="))

    def test_lockdep(self):
        text = self.one(LOCKDEP, "lockdep", "possible circular locking dependency")
        self.assertIn("kworker/0:2/40 is trying to acquire lock:", text)
        self.one(NONSTATIC, "lockdep", "trying to register non-static key")

    def test_debug_spinlock_and_atomic_sleep(self):
        self.one(SPINLOCK, "BUG", "spinlock bad magic")
        self.one(SLEEP, "BUG", "sleeping function called from invalid context")

    def test_hung_task_rcu_stall_soft_lockup(self):
        self.one(HUNG, "hung task", "blocked for more than 60 seconds")
        self.one(RCU, "RCU stall", "self-detected stall")
        self.one(SOFTLOCKUP, "soft lockup", "stuck for 22s")

    def test_oops_then_its_panic(self):
        reports = find(CLEAN + OOPS)
        self.assertEqual([k for k, _ in reports], ["oops", "panic"])
        self.assertEqual(reports[0][1][0], "Unable to handle kernel pointer dereference in virtual kernel address space")
        self.assertIn("Oops: 0004 ilc:3 [#1] SMP", reports[0][1])
        self.assertTrue(any("smc_conn_create" in l for l in reports[0][1]))
        self.assertEqual(reports[1][1], ["Kernel panic - not syncing: Fatal exception: panic_on_oops"])
        self.one(LOWADDR, "oops", "Low-address protection")

    def test_bug_at(self):
        self.one(BUG_AT, "BUG", "kernel BUG at net/smc/smc_core.c:900!")

    def test_report_in_the_middle_of_a_program_line(self):
        mixed = "SUMMARY test=seq side=client conns=2 ------------[ cut here ]------------\r\n" + WARN.split("\n", 1)[1]
        self.one(mixed, "WARN", "WARNING: CPU: 1 PID: 57")

    def test_time_stamps_are_stripped(self):
        self.one("[   12.345678] " + HUNG, "hung task", "INFO: task smctest:61")

    def test_every_report_of_a_console_in_order(self):
        reports = find(CLEAN + KASAN + LOCKDEP + WARN + HUNG)
        self.assertEqual([k for k, _ in reports], ["KASAN", "lockdep", "WARN", "hung task"])

    def test_a_report_is_cut_at_max_lines(self):
        long = "INFO: task smctest:61 blocked for more than 60 seconds.\n" + "  frame\n" * 500
        self.assertEqual(len(find(long)[0][1]), kernel_reports.MAX_LINES)

    def test_command_line_status_and_file(self):
        script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernel_reports.py")
        with tempfile.TemporaryDirectory() as d:
            log, out = os.path.join(d, "a.console.log"), os.path.join(d, "a.reports.txt")
            with open(log, "w") as f:
                f.write(CLEAN)
            r = subprocess.run([sys.executable, script, log, "--out", out], capture_output=True, text=True)
            self.assertEqual((r.returncode, r.stdout, os.path.exists(out)), (0, "", False))
            with open(log, "a") as f:
                f.write(KASAN)
            r = subprocess.run([sys.executable, script, log, "--out", out], capture_output=True, text=True)
            self.assertEqual(r.returncode, 1)
            self.assertTrue(r.stdout.startswith("1 kernel report(s)\n  KASAN: BUG: KASAN: slab-use-after-free"), r.stdout)
            with open(out) as f:
                self.assertEqual(f.read(), r.stdout)
            r = subprocess.run([sys.executable, script, os.path.join(d, "missing")], capture_output=True, text=True)
            self.assertEqual(r.returncode, 2)


if __name__ == "__main__":
    unittest.main()
