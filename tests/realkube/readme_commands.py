"""Holds the deployment guide's commands, and the README's, to what CI runs.

The sections "Quick start on kind", "Register the hello-world plugin with
CloudNativePG" and "Install on an existing cluster" of the book's deployment
guide (book/src/guides/deploy.md), and the README's command blocks, tell users
what to type; tests/realkube/up.sh and run.sh run the same tasks on kind in CI.
This fails, naming the line, when one of them names a task, a task variable, a
binary, an image or a kustomization that does not exist, a variable of the
quick start's table that up.sh does not set (so CI would never try it), or a
task that CI does not run.

    python3 tests/realkube/readme_commands.py      (from anywhere; exit 1 on a mismatch)
"""

import os
import re
import shlex
import sys

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GUIDE = "book/src/guides/deploy.md"
SECTIONS = ("Quick start on kind", "Register the hello-world plugin with CloudNativePG", "Install on an existing cluster")


def read(path):
    with open(os.path.join(REPO, path)) as f:
        return f.read()


def section(guide, title):
    """The text of the `## title` section, up to the next `## `."""
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", guide, re.S | re.M)
    if not m:
        raise SystemExit(f"{GUIDE}: no section '## {title}'")
    return m.group(1)


def commands(text):
    """The command lines of the section's ```sh blocks, comments and continuations joined."""
    out = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for raw in block.replace("\\\n", " ").splitlines():
            line = raw.split("  #")[0].strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def main():
    guide = read(GUIDE)
    readme = read("README.md")
    taskfile = yaml.safe_load(read("Taskfile.yml"))
    tasks = taskfile["tasks"]
    task_vars = set(taskfile["vars"])
    up = read("tests/realkube/up.sh")
    run = read("tests/realkube/run.sh")
    bins = set(re.findall(r'^name = "([^"]+)"', read("crates/operator-cli/Cargo.toml"), re.M))
    bins |= set(re.findall(r'^name = "([^"]+)"', read("examples/hello-world/Cargo.toml"), re.M))
    bins |= set(re.findall(r'^name = "([^"]+)"', read("examples/wal-archive/Cargo.toml"), re.M))
    kustomized = {
        "manifests/operator": "cnpgi-operator",
        "manifests/hello-world": "cnpg-i-hello-world",
    }
    problems = []
    ci_tasks = set(re.findall(r"^task_ ([a-z-]+)$", up, re.M)) | ({"manifest"} if "task manifest " in run else set())
    blocks = [(f"{GUIDE}, '{title}'", section(guide, title)) for title in SECTIONS]
    blocks.append(("README.md", readme))
    for place, text in blocks:
        for line in commands(text):
            where = f"{place}: `{line}`"
            for part in line.split("&&"):
                words = shlex.split(part.strip())
                if not words:
                    continue
                if words[0] == "task":
                    name = words[1]
                    if name not in tasks:
                        problems.append(f"{where}: no task {name} in Taskfile.yml")
                    if name not in ci_tasks:
                        problems.append(f"{where}: CI does not run `task {name}` (tests/realkube/up.sh, run.sh)")
                    for arg in words[2:]:
                        var = arg.split("=")[0]
                        if var not in task_vars:
                            problems.append(f"{where}: {var} is not a variable of Taskfile.yml")
                elif words[0] == "docker" and words[1] == "build":
                    for i, w in enumerate(words):
                        if w == "--build-arg" and words[i + 1].startswith("BIN="):
                            b = words[i + 1][4:]
                            if b not in bins:
                                problems.append(f"{where}: no binary {b} in the workspace")
                    if "ARG BIN=" not in read("Dockerfile"):
                        problems.append(f"{where}: the Dockerfile has no ARG BIN")
                elif words[0] == "cd" and words[1].startswith("manifests/"):
                    if not os.path.exists(os.path.join(REPO, words[1], "kustomization.yaml")):
                        problems.append(f"{where}: no kustomization in {words[1]}")
                elif words[0] == "kustomize" and words[1:4] == ["edit", "set", "image"]:
                    image = words[4].split("=")[0]
                    if image not in kustomized.values():
                        problems.append(f"{where}: no kustomization sets the image {image}")
    # Each variable of the quick start's table is one CI sets (else CI never tries it).
    table = section(guide, "Quick start on kind")
    for row in re.findall(r"^\| (`[A-Z_`, ]+`) \|", table, re.M):
        for var in re.findall(r"`([A-Z_]+)`", row):
            if var not in task_vars:
                problems.append(f"{GUIDE}, the quick start's table: {var} is not a variable of Taskfile.yml")
            elif f"{var}=" not in up:
                problems.append(f"{GUIDE}, the quick start's table: tests/realkube/up.sh never sets {var}")
    for p in problems:
        print(f"FAIL {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"ok   the deployment guide's sections ({', '.join(SECTIONS)}) and the README's commands match Taskfile.yml and what CI runs")


if __name__ == "__main__":
    main()
