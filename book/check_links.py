#!/usr/bin/env python3
"""Checks the relative links of README.md and of the book's pages (book/src).

Every link that is not to another site must name a file that exists, and its
#anchor, if any, a heading of that file (mdBook's and GitHub's heading ids:
lower case, spaces as dashes, other punctuation dropped). Every page of
book/src must be in SUMMARY.md (mdBook would not render it), and the book's
pages link only inside book/src (mdBook renders nothing else).

    python3 book/check_links.py      (from anywhere; exit 1 on a broken link)
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BOOK = os.path.join(ROOT, "book", "src")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def prose(text, code_spans=False):
    """The text outside fenced code blocks, and outside inline code spans unless code_spans."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line.replace("`", "") if code_spans else re.sub(r"`[^`]*`", "", line))
    return "\n".join(lines)


def heading_ids(path):
    """The ids of a markdown file's headings, as mdBook and GitHub make them."""
    ids, seen = set(), {}
    with open(path) as f:
        for line in prose(f.read(), code_spans=True).splitlines():
            m = re.match(r"^#{1,6} (.*)$", line)
            if not m:
                continue
            title = re.sub(r"<[^>]+>", "", m.group(1)).strip().lower()
            slug = "".join(c for c in title.replace(" ", "-") if c.isalnum() or c in "-_")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            ids.add(slug if n == 0 else f"{slug}-{n}")
    return ids


def markdown_files():
    files = [os.path.join(ROOT, "README.md")]
    for dirpath, _, names in os.walk(BOOK):
        files += [os.path.join(dirpath, n) for n in sorted(names) if n.endswith(".md")]
    return files


def main():
    problems = []
    files = markdown_files()
    for path in files:
        where = os.path.relpath(path, ROOT)
        with open(path) as f:
            text = prose(f.read())
        for target in LINK.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # another site (https:, mailto:)
            file_part, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            if not os.path.exists(resolved):
                problems.append(f"{where}: link to {target}: {os.path.relpath(resolved, ROOT)} does not exist")
                continue
            in_book = path.startswith(BOOK + os.sep)
            if in_book and not resolved.startswith(BOOK + os.sep):
                problems.append(f"{where}: link to {target}: outside book/src, which mdBook does not render")
            if anchor and resolved.endswith(".md") and anchor not in heading_ids(resolved):
                problems.append(f"{where}: link to {target}: {os.path.relpath(resolved, ROOT)} has no heading #{anchor}")
    with open(os.path.join(BOOK, "SUMMARY.md")) as f:
        listed = {os.path.normpath(os.path.join(BOOK, t)) for t in LINK.findall(f.read())}
    for path in files:
        if path.startswith(BOOK + os.sep) and not path.endswith("SUMMARY.md") and path not in listed:
            problems.append(f"{os.path.relpath(path, ROOT)} is not in book/src/SUMMARY.md")
    for problem in problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    if not problems:
        print(f"ok   the links of README.md and the book's {len(files) - 1} pages lead to files and headings that exist")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
