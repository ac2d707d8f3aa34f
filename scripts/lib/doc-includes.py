#!/usr/bin/env python3
"""Keeps the programs shown on the pages equal to the files that compile.

A page line `<!-- include: PATH -->` (PATH relative to the repository root)
is followed by a fenced block that must hold PATH's text exactly, so that
what a reader copies is what the test command builds and runs.

    doc-includes.py check    fails naming every block that differs
    doc-includes.py update   rewrites those blocks from their files
"""
import glob
import os
import re
import sys

os.chdir(os.path.join(os.path.dirname(__file__), "..", ".."))
MARK = re.compile(r"^<!-- include: (\S+) -->$")


def blocks(lines):
    """(path, first, end): lines[first:end] is the block's body."""
    for n, line in enumerate(lines):
        m = MARK.match(line.rstrip("\n"))
        if not m:
            continue
        if n + 1 >= len(lines) or not lines[n + 1].startswith("```"):
            raise SystemExit(f"include of {m[1]} is not followed by a fenced block")
        end = n + 2
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        yield m[1], n + 2, end


def main(mode):
    pages = ["README.md"] + sorted(glob.glob("docs/*.md")) + sorted(glob.glob("crates/*/README.md"))
    stale = []
    for page in pages:
        lines = open(page, encoding="utf-8").readlines()
        for path, first, end in reversed(list(blocks(lines))):
            want = open(path, encoding="utf-8").read().splitlines(keepends=True)
            if lines[first:end] != want:
                stale.append(f"{page}: the block after 'include: {path}' differs from the file")
                lines[first:end] = want
        if mode == "update":
            open(page, "w", encoding="utf-8").writelines(lines)
    if mode == "check" and stale:
        print("\n".join(stale))
        print("run: python3 scripts/lib/doc-includes.py update")
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("check", "update"):
        raise SystemExit(__doc__)
    sys.exit(main(sys.argv[1]))
