#!/usr/bin/env python3
"""Turns cargo-mutants' surviving mutants into planted-bug patches.

Usage: mutant_patches.py MUTANTS_OUT TSV OUT_DIR

MUTANTS_OUT is a cargo-mutants output directory (its outcomes.json and
diff/); TSV lists mutants by the name cargo-mutants gives them, each with
the check that should kill it (scripts/planted.sh's catch syntax). Each
listed mutant becomes OUT_DIR/mNN.patch with that check in its header, so
`scripts/planted.sh --dir OUT_DIR` applies each to a scratch copy and runs
its check. Prints the patch names; fails on a mutant the output lacks.
"""
import json
import pathlib
import sys


def git_diff(path, diff):
    """cargo-mutants' diff (`--- FILE` / `+++ DESCRIPTION`) as git apply takes it."""
    lines = diff.splitlines()
    body = [l for l in lines if not l.startswith(("--- ", "+++ "))]
    return "\n".join([f"--- a/{path}", f"+++ b/{path}", *body]) + "\n"


def main(out, tsv, dest):
    outcomes = json.loads((pathlib.Path(out) / "outcomes.json").read_text())["outcomes"]
    by_name = {}
    for o in outcomes:
        mutant = o["scenario"].get("Mutant") if isinstance(o["scenario"], dict) else None
        if mutant:
            by_name[mutant["name"]] = (mutant["file"], o["diff_path"])
    dest = pathlib.Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("m*.patch"):
        old.unlink()
    rows = [l for l in pathlib.Path(tsv).read_text().splitlines() if l and not l.startswith("#")]
    for i, row in enumerate(rows, 1):
        name, check = row.split("\t")
        if name not in by_name:
            sys.exit(f"{name}: not in {out}/outcomes.json")
        path, diff_path = by_name[name]
        diff = (pathlib.Path(out) / diff_path).read_text()
        patch = dest / f"m{i:02}.patch"
        patch.write_text(f"# breaks: {name}\n# catch: {check}\n" + git_diff(path, diff))
        print(patch.stem)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
