#!/usr/bin/env python3
"""Checks the links of the project's Markdown files (make lint, make readme-check).

Every link must stay inside the repository and point at something that exists:
- no absolute file path (`/home/...`, `file:`): a reader's checkout has none of it;
- no relative path that leaves the repository (`../shared/...` from the top);
- the file or folder named must exist, and a `#anchor` into a Markdown file must be one
  of its headings (as GitHub makes them: lower case, punctuation dropped, spaces to
  hyphens, `-1`, `-2` for repeats) or an explicit `id`/`name` anchor.
Web links (http, https, mailto) are allowed in the docs and refused in the files given
with --strict (README.md: the front door links only into the repository).

Usage: tests/ismcheck/check_links.py [--strict FILE]... [FILE...]
  With no FILE: README.md strictly, and every other *.md of the repository.
Exit status: 0 when every link is good, 1 when one is not (each printed as
FILE:LINE: what), 2 on a usage error.
"""

import argparse
import os
import re
import sys
import unicodedata

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Folders that hold no documentation of the project (build output, caches, checkouts).
SKIP_DIRS = {".git", "target", "build", "node_modules"}
WEB_SCHEMES = ("http://", "https://", "mailto:")

FENCE = re.compile(r"^ {0,3}(```|~~~)")
# [text](target "title") and ![alt](target); the target may be <in angle brackets>.
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
AUTOLINK = re.compile(r"<((?:https?|mailto|file):[^>\s]+)>")
HTML_LINK = re.compile(r"""<(?:a|img)\s[^>]*?(?:href|src)\s*=\s*["']([^"']+)["']""", re.I)
HTML_ANCHOR = re.compile(r"""<[a-z]+\s[^>]*?(?:id|name)\s*=\s*["']([^"']+)["']""", re.I)
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.*?)\1")


def outside_fences(text):
    """(line number, line) of the lines outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            continue
        yield number, line


def prose_lines(text):
    """The lines outside fenced code blocks, their code spans blanked."""
    for number, line in outside_fences(text):
        yield number, CODE_SPAN.sub(lambda s: " " * len(s.group(0)), line)


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = CODE_SPAN.sub(lambda s: s.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)   # a link: its text
    text = re.sub(r"<[^>]+>", "", text)                      # inline HTML
    text = text.replace("*", "").replace("~", "")
    out = []
    for ch in text.lower():
        if ch in " -_" or ch.isalnum() or unicodedata.category(ch).startswith("M"):
            out.append("-" if ch == " " else ch)
    return "".join(out)


_ANCHORS = {}


def anchors(path):
    """The anchors a Markdown file offers (read once per file)."""
    cache = _ANCHORS
    if path not in cache:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        found, seen = set(), {}
        for _, line in outside_fences(text):
            h = HEADING.match(line)
            if h:
                base = slug(h.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
            found.update(a for a in HTML_ANCHOR.findall(line))
        cache[path] = found
    return cache[path]


def links(text):
    """(line number, target) of every link outside code."""
    for number, line in prose_lines(text):
        for pattern in (INLINE, REFDEF, AUTOLINK, HTML_LINK):
            for m in pattern.finditer(line):
                target = m.group(1)
                if target.startswith("<") and target.endswith(">"):
                    target = target[1:-1]
                yield number, target


def problems(path, strict, root=REPO_ROOT):
    """What is wrong with each link of the Markdown file at path: (line, message)."""
    root = os.path.realpath(root)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    here = os.path.dirname(os.path.realpath(path))
    for number, target in links(text):
        if not target:
            yield number, "an empty link"
            continue
        if target.lower().startswith(WEB_SCHEMES):
            if strict:
                yield number, f"{target}: a web link (this file links only into the repository)"
            continue
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
            yield number, f"{target}: not a file of the repository"
            continue
        file_part, _, anchor = target.partition("#")
        if file_part.startswith("/") or file_part.startswith("~"):
            yield number, f"{target}: an absolute path (readers' checkouts have no such file)"
            continue
        resolved = os.path.realpath(os.path.join(here, file_part)) if file_part else os.path.realpath(path)
        if resolved != root and not resolved.startswith(root + os.sep):
            yield number, f"{target}: outside the repository"
            continue
        if not os.path.exists(resolved):
            yield number, f"{target}: no such file"
            continue
        if anchor and resolved.endswith(".md") and os.path.isfile(resolved):
            if anchor not in anchors(resolved):
                yield number, f"{target}: no heading or anchor '#{anchor}' in {os.path.relpath(resolved, root)}"


def markdown_files(root=REPO_ROOT):
    for top, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(files):
            if name.endswith(".md"):
                yield os.path.join(top, name)


def main(argv):
    parser = argparse.ArgumentParser(
        description="Check that Markdown links stay in the repository and point at what exists.",
        epilog="With no FILE: README.md strictly (no web links), every other *.md of the repository.")
    parser.add_argument("--strict", action="append", default=[], metavar="FILE",
                        help="a file that may not link to the web either (repeatable)")
    parser.add_argument("files", nargs="*", metavar="FILE")
    args = parser.parse_args(argv)
    readme = os.path.join(REPO_ROOT, "README.md")
    if not args.files and not args.strict:
        files = [(readme, True)] + [(f, False) for f in markdown_files() if f != readme]
    else:
        files = [(f, True) for f in args.strict] + [(f, False) for f in args.files]
    bad = 0
    for path, strict in files:
        if not os.path.isfile(path):
            print(f"check_links.py: {path}: no such file", file=sys.stderr)
            return 2
        for number, message in problems(path, strict):
            print(f"{os.path.relpath(path)}:{number}: {message}")
            bad += 1
    if bad:
        print(f"check_links.py: {bad} bad link(s) in {len(files)} file(s)", file=sys.stderr)
        return 1
    print(f"check_links.py: every link of {len(files)} Markdown file(s) stays in the repository and resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
