#!/usr/bin/env python3
"""Prints the CI-time tables from two reports of .ci/measure.

    .ci/measure --cold --yes --report cold.txt
    .ci/measure --report warm.txt
    python3 .ci/timings-table.py cold.txt warm.txt             the book's table (book/src/testing.md)
    python3 .ci/timings-table.py --summary cold.txt warm.txt   the README's table (README.md, "CI time")

The book's table: the totals first, then one row per step of .ci/run and one
per background job, each with its seconds cold and warm. The README's: the
totals beside the limits the project keeps. Each ends with the line naming
the commits measured; paste it under its table.
"""

import re
import sys

# "step  722 s  1390 s CPU  cargo clippy"; reports before the CPU column lack it.
ROW = re.compile(r"(step|job|wait)\s+(\d+) s\s+(?:(\d+) s CPU\s+)?(.*)")


def load(path):
    """(header, total, {(kind, name): (seconds, CPU seconds or None)}) of one report, rows in order."""
    with open(path) as f:
        lines = f.read().splitlines()
    if len(lines) < 2 or not lines[0].startswith("# .ci/run"):
        sys.exit(f"timings-table.py: {path} is not a report of .ci/measure (--report FILE)")
    rows = {}
    for line in lines[2:]:
        m = ROW.match(line)
        if m and m.group(1) != "wait":
            cpu = int(m.group(3)) if m.group(3) else None
            name = re.sub(r" \(background(, from \d+ s)?\)$", "", m.group(4))
            rows[(m.group(1), name)] = (int(m.group(2)), cpu)
    total = re.search(r"total (.*)", lines[1])
    return lines[0].lstrip("# "), total.group(1) if total else "?", rows


# The project's limits for .ci/run (CI's own is 90 minutes).
LIMITS = ("60 min", "25 min")


def seconds(rows, key):
    """The wall time, and the CPU time (user + system) where the report has it."""
    if key not in rows:
        return ""
    wall, cpu = rows[key]
    return f"{wall} s" if cpu is None else f"{wall} s ({cpu} s CPU)"


def main():
    args = sys.argv[1:]
    summary = args[:1] == ["--summary"]
    if summary:
        args = args[1:]
    if len(args) != 2:
        sys.exit("usage: timings-table.py [--summary] COLD_REPORT WARM_REPORT")
    (cold_head, cold_total, cold), (warm_head, warm_total, warm) = load(args[0]), load(args[1])
    if summary:
        print("| `.ci/run` | cold (empty caches) | warm |")
        print("|---|---|---|")
        print(f"| **measured** | **{cold_total}** | **{warm_total}** |")
        print(f"| the project's limit | {LIMITS[0]} | {LIMITS[1]} |")
        print()
        print(f"Cold: {cold_head}. Warm: {warm_head}.")
        return
    keys = list(dict.fromkeys([*cold, *warm]))
    print("| | cold (empty caches) | warm |")
    print("|---|---|---|")
    print(f"| **`.ci/run`, total** | **{cold_total}** | **{warm_total}** |")
    for kind in ("step", "job"):
        if kind == "job":
            print("| *background jobs, beside the steps (builds at idle priority):* | | |")
        for key in (k for k in keys if k[0] == kind):
            label = key[1] if kind == "step" else f"`{key[1]}`"
            print(f"| {label} | {seconds(cold, key)} | {seconds(warm, key)} |")
    print()
    print(f"Cold: {cold_head}. Warm: {warm_head}.")


if __name__ == "__main__":
    main()
