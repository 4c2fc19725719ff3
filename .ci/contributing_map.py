#!/usr/bin/env python3
"""Holds CONTRIBUTING.md's map of the tree ("## The tree") to the workspace.

Every workspace member of Cargo.toml is under a path the map names (a row's
path itself, a folder row `dir/` holding it, or `crates/x` for its
`crates/x-suffix` sibling named in the same row), and every path the map
names exists. Run by .ci/run's layering step.
"""

import os
import re
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def map_paths(text):
    section = text.split("## The tree", 1)[1].split("\n## ", 1)[0]
    paths = []
    for line in section.splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            paths += re.findall(r"`([^`]+)`", first)
    return paths


def main():
    with open(os.path.join(ROOT, "CONTRIBUTING.md")) as f:
        paths = map_paths(f.read())
    with open(os.path.join(ROOT, "Cargo.toml"), "rb") as f:
        members = tomllib.load(f)["workspace"]["members"]
    problems = []
    named = [p for p in paths if not p.startswith("-")]
    for member in members:
        if not any(member == p.rstrip("/") or member.startswith(p.rstrip("/") + "/") or member.startswith(p + "-") for p in named):
            problems.append(f"workspace member {member} is not in CONTRIBUTING.md's map (## The tree)")
    for p in named:
        if not os.path.exists(os.path.join(ROOT, p.split(" ")[0])):
            problems.append(f"CONTRIBUTING.md's map names {p}, which does not exist")
    for problem in problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    if not problems:
        print(f"CONTRIBUTING.md's map covers the {len(members)} workspace members; its {len(named)} paths exist")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
