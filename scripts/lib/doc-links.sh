#!/usr/bin/env bash
# Keeps the docs true: every relative link in README.md, CONTRIBUTING.md,
# CHANGELOG.md, docs/*.md and the crates' README.md files names a file that
# exists (and, with #anchor, a heading of it, slugged as GitHub does), and
# README.md stays a front page (at most 250 lines). The Rust blocks of these
# pages are compiled as doctests by examples/lib.rs, except the whole
# programs shown after an `<!-- include: PATH -->` line, which must equal
# PATH, a file the examples crate builds (doc-includes.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 - <<'PY'
import glob, os, re, sys

pages = ["README.md", "CONTRIBUTING.md", "CHANGELOG.md"] + sorted(glob.glob("docs/*.md")) \
    + sorted(glob.glob("crates/*/README.md"))
link = re.compile(r"\]\(([^)\s]+)\)")

def slugs(path):
    out, fence = set(), False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fence = not fence
        elif not fence and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            title = re.sub(r"[^\w\- ]", "", title)
            out.add(title.replace(" ", "-"))
    return out

problems = []
for page in pages:
    fence = False
    for n, line in enumerate(open(page, encoding="utf-8"), 1):
        if line.startswith("```"):
            fence = not fence
        if fence:
            continue
        for target in link.findall(line):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(os.path.dirname(page), path))
            if not os.path.exists(full):
                problems.append(f"{page}:{n}: {target}: no such file")
            elif anchor and full.endswith(".md") and anchor not in slugs(full):
                problems.append(f"{page}:{n}: {target}: no heading #{anchor} in {full}")
lines = sum(1 for _ in open("README.md", encoding="utf-8"))
if lines > 250:
    problems.append(f"README.md: {lines} lines; a front page has at most 250 (move detail to docs/)")
for p in problems:
    print(p)
sys.exit(1 if problems else 0)
PY
python3 scripts/lib/doc-includes.py check
