#!/usr/bin/env bash
# Builds the tutorial's plugin as a reader would: the files the tutorial shows
# (book/src/tutorial/first-plugin.md, each block after a
# `<!-- tutorial-file: PATH -->` line) written into a new directory outside
# the repository, then `cargo build`, `cargo test`, `--help`, and the
# Cluster of the next chapter (book/src/tutorial/run-locally.md) rendered and
# checked through it by this checkout's cnpgi-operator.
#
#   bash book/check-tutorial.sh        (from anywhere; exit 1 on a failure;
#                                       needs cargo and python3 with PyYAML)
#
# The tutorial's Cargo.toml takes the SDK from the project's git repository
# (`repository` in the workspace's Cargo.toml); here those dependencies are
# rewritten into path dependencies on this checkout, so what is checked is
# this tree, and the workspace's Cargo.lock is copied in, so that the versions
# are the ones the workspace tested. The build uses the workspace's target
# directory (CARGO_TARGET_DIR if set, as .ci/run sets it) and its dev
# profile settings, so the dependencies the workspace built are reused where
# their features match.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
chapter="$repo/book/src/tutorial/first-plugin.md"
local_chapter="$repo/book/src/tutorial/run-locally.md"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
case "$CARGO_TARGET_DIR" in /*) ;; *) CARGO_TARGET_DIR="$repo/$CARGO_TARGET_DIR" ;; esac

work=$(mktemp -d "${TMPDIR:-/tmp}/cnpgi-tutorial.XXXXXX")
trap 'rm -rf "$work"' EXIT
case "$work/" in "$repo"/*) echo "FAIL: $work is inside the repository" >&2; exit 1 ;; esac
plugin="$work/labels-plugin"
mkdir -p "$plugin"

# extract FILE: writes each block of FILE marked `<!-- tutorial-file: PATH -->`
# to $plugin/PATH, and prints the paths written.
extract() {
  awk -v dir="$plugin" '
    /^<!-- tutorial-file: [^ ]+ -->$/ { path = $3; next }
    path != "" && !open && /^```/ {
      open = 1; file = dir "/" path; parent = file; sub(/\/[^\/]*$/, "", parent)
      system("mkdir -p \"" parent "\""); printf "" > file; next
    }
    open && /^```$/ { close(file); print path; open = 0; path = ""; next }
    open { print > file }
  ' "$1"
}
written=$(extract "$chapter")
for expected in Cargo.toml src/main.rs; do
  if ! grep -qx "$expected" <<<"$written"; then
    echo "FAIL: $chapter has no block marked <!-- tutorial-file: $expected -->" >&2
    exit 1
  fi
done
cluster_file=$(extract "$local_chapter")
if [ "$cluster_file" != cluster.yaml ]; then
  echo "FAIL: $local_chapter must mark one block, <!-- tutorial-file: cluster.yaml --> (found: $cluster_file)" >&2
  exit 1
fi

# The tutorial names the project's repository: its git dependencies become
# path dependencies on this checkout. (A [patch] of the git source would not
# do: cargo still fetches the source it patches, and CI reaches no git host.)
url=$(sed -n 's/^repository = "\(.*\)"$/\1/p' "$repo/Cargo.toml")
cargo metadata --manifest-path "$repo/Cargo.toml" --no-deps --format-version 1 >"$work/metadata.json"
python3 - "$plugin/Cargo.toml" "$url" "$work/metadata.json" <<'PY'
import json
import os
import re
import sys

manifest, url, metadata = sys.argv[1:]
with open(metadata) as f:
    paths = {p["name"]: os.path.dirname(p["manifest_path"]) for p in json.load(f)["packages"]}
with open(manifest) as f:
    text = f.read()
pattern = re.compile(r'^([A-Za-z0-9_-]+) = \{ git = "' + re.escape(url) + r'"[^}]*\}$', re.M)
names = pattern.findall(text)
if not names:
    sys.exit(f"FAIL: the tutorial's Cargo.toml takes no crate from {url} (the workspace's repository)")
for name in names:
    if name not in paths:
        sys.exit(f"FAIL: the tutorial's Cargo.toml names {name}, which is not a crate of the workspace")
text = pattern.sub(lambda m: f"{m.group(1)} = {{ path = {json.dumps(paths[m.group(1)])} }}", text)
with open(manifest, "w") as f:
    f.write(text)
print("the tutorial's", ", ".join(names), "taken from this checkout")
PY
cp "$repo/Cargo.lock" "$plugin/Cargo.lock"

# The workspace's dev profile (Cargo.toml's [profile.dev*]), so that the
# dependencies it compiled match and are reused.
profile=(--config 'profile.dev.debug="line-tables-only"' --config 'profile.dev.package."*".debug=false'
  --config 'profile.dev.package.zstd-sys.opt-level=3' --config 'profile.dev.package.sha2.opt-level=3')

cd "$plugin"
echo "== cargo build (in $plugin, target $CARGO_TARGET_DIR)"
cargo build "${profile[@]}"
echo "== cargo test"
cargo test "${profile[@]}"
bin="$CARGO_TARGET_DIR/debug/labels-plugin"
echo "== labels-plugin --help"
help=$("$bin" --help)
echo "$help"
grep -q "labels.example.com" <<<"$help" || { echo "FAIL: --help does not name the plugin" >&2; exit 1; }

# The next chapter's render, with this checkout's cnpgi-operator.
operator="$CARGO_TARGET_DIR/debug/cnpgi-operator"
if [ ! -x "$operator" ]; then
  (cd "$repo" && cargo build -p cnpgi-operator-cli --bin cnpgi-operator)
fi
echo "== cnpgi-operator render cluster.yaml --plugin-exec labels-plugin"
rendered=$("$operator" render "$plugin/cluster.yaml" --plugin-exec "$bin")
echo "$rendered"
python3 - "$rendered" <<'EOF'
import sys

import yaml

docs = [d for d in yaml.safe_load_all(sys.argv[1]) if d]
pods = [d for d in docs if d.get("kind") == "Pod"]
if not pods:
    sys.exit("FAIL: render printed no Pod")
for pod in pods:
    labels = pod["metadata"].get("labels", {})
    if labels.get("team") != "db":
        sys.exit(f"FAIL: Pod {pod['metadata']['name']} lacks the plugin's label team=db: {labels}")
print(f"ok   the tutorial's plugin built outside the repository; {len(pods)} Pods rendered with its label")
EOF
echo "== cnpgi-operator check-plugin --plugin-exec labels-plugin"
"$operator" check-plugin --plugin-exec "$bin"
