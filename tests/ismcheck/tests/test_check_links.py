#!/usr/bin/env python3
"""check_links.py (make unit): each kind of bad link fails the check and good ones pass
(make lint runs the check itself on the repository's Markdown)."""

import contextlib
import io
import os
import pathlib
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from ismcheck import check_links  # noqa: E402


class Links(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = pathlib.Path(self.tmp.name) / "repo"
        (self.root / "docs").mkdir(parents=True)
        (self.root / "docs" / "faults.md").write_text(
            "# Fault injection\n\n## What the kernel does: `make faults`\n\n"
            "### A failed data move (a finding about net/smc, 6.12)\n\n## Grammar\n\n## Grammar\n\n"
            '<a id="held"></a>\n\n```\n# not a heading\n```\n', encoding="utf-8")
        (self.root / "docs" / "images").mkdir()
        (self.root / "docs" / "images" / "t.png").write_bytes(b"")
        (pathlib.Path(self.tmp.name) / "shared.md").write_text("# x\n", encoding="utf-8")

    def tearDown(self):
        self.tmp.cleanup()

    def check(self, text, strict=False, name="README.md"):
        path = self.root / name
        path.write_text(text, encoding="utf-8")
        return [m for _, m in check_links.problems(str(path), strict, root=str(self.root))]

    def test_good_links_pass(self):
        text = ("See [faults](docs/faults.md), [the grammar](docs/faults.md#grammar), "
                "[again](docs/faults.md#grammar-1), [held](docs/faults.md#held),\n"
                "[the finding](docs/faults.md#a-failed-data-move-a-finding-about-netsmc-612), "
                "[make faults](docs/faults.md#what-the-kernel-does-make-faults), [docs](docs/),\n"
                "![a plot](docs/images/t.png), [top](#top)\n\n## Top\n\n"
                "`[not a link](../outside.md)`\n\n```\n[not a link](/etc/passwd)\n```\n")
        self.assertEqual(self.check(text, strict=True), [])

    def test_a_link_leaving_the_repository_fails(self):
        got = self.check("[the reference](../shared.md)\n")
        self.assertEqual(len(got), 1)
        self.assertIn("outside the repository", got[0])
        got = self.check("[ref](../../shared.md)\n", name="docs/x.md")
        self.assertIn("outside the repository", got[0])

    def test_an_absolute_path_fails(self):
        for target in ("/work/shared/reference/ism.md", "~/notes.md", "file:///etc/hosts"):
            got = self.check(f"[ref]({target})\n")
            self.assertEqual(len(got), 1, target)

    def test_a_missing_file_fails(self):
        got = self.check("[gone](docs/moved.md)\n")
        self.assertEqual(len(got), 1)
        self.assertIn("no such file", got[0])
        got = self.check("[gone]: docs/moved.md\n")
        self.assertIn("no such file", got[0])

    def test_a_missing_anchor_fails(self):
        for target in ("docs/faults.md#grammar-2", "docs/faults.md#not-a-heading", "#nowhere"):
            got = self.check(f"[x]({target})\n")
            self.assertEqual(len(got), 1, target)
            self.assertIn("no heading or anchor", got[0])

    def test_web_links_fail_only_where_strict(self):
        text = "[spec](https://example.org/vfio-user.rst) and <https://example.org>\n"
        self.assertEqual(self.check(text, strict=False), [])
        self.assertEqual(len(self.check(text, strict=True)), 2)

    def test_the_command_fails_on_a_bad_link_and_says_where(self):
        bad = self.root / "docs" / "bad.md"
        bad.write_text("# Bad\n\nfine line\n[ref](/work/shared/reference/x.md)\n", encoding="utf-8")
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            rc = check_links.main([str(bad)])
        self.assertEqual(rc, 1)
        self.assertIn("bad.md:4: /work/shared/reference/x.md: an absolute path", out.getvalue())


if __name__ == "__main__":
    unittest.main()
