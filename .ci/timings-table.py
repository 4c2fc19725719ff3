#!/usr/bin/env python3
"""Prints the README's CI-time table from two reports of .ci/measure.

    .ci/measure --cold --yes --report cold.txt
    .ci/measure --report warm.txt
    python3 .ci/timings-table.py cold.txt warm.txt

The totals first, then one row per step of .ci/run and one per background
job, each with its seconds cold and warm.
"""

import re
import sys

ROW = re.compile(r"(step|job|wait)\s+(\d+) s\s+(.*)")


def load(path):
    """(header, total, {(kind, name): seconds}) of one report, rows in order."""
    with open(path) as f:
        lines = f.read().splitlines()
    if len(lines) < 2 or not lines[0].startswith("# .ci/run"):
        sys.exit(f"timings-table.py: {path} is not a report of .ci/measure (--report FILE)")
    rows = {}
    for line in lines[2:]:
        m = ROW.match(line)
        if m and m.group(1) != "wait":
            rows[(m.group(1), m.group(3).removesuffix(" (background)"))] = int(m.group(2))
    total = re.search(r"total (.*)", lines[1])
    return lines[0].lstrip("# "), total.group(1) if total else "?", rows


def seconds(rows, key):
    return f"{rows[key]} s" if key in rows else ""


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: timings-table.py COLD_REPORT WARM_REPORT")
    (cold_head, cold_total, cold), (warm_head, warm_total, warm) = load(sys.argv[1]), load(sys.argv[2])
    keys = list(dict.fromkeys([*cold, *warm]))
    print("| | cold (empty caches) | warm |")
    print("|---|---|---|")
    print(f"| **`.ci/run`, total** | **{cold_total}** | **{warm_total}** |")
    for kind in ("step", "job"):
        if kind == "job":
            print("| *background jobs, at idle priority beside the steps:* | | |")
        for key in (k for k in keys if k[0] == kind):
            label = key[1] if kind == "step" else f"`{key[1]}`"
            print(f"| {label} | {seconds(cold, key)} | {seconds(warm, key)} |")
    print()
    print(f"Cold: {cold_head}. Warm: {warm_head}.")


if __name__ == "__main__":
    main()
