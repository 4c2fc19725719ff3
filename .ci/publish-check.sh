#!/usr/bin/env bash
# The crates that may be published, as `cargo publish` would upload them,
# without uploading: packaged, then type-checked together from their packages
# (none must be on crates.io first).
#
#   .ci/publish-check.sh        (the publish job of .ci/run; in target/publish-check,
#                               or CNPGI_PUBLISH_TARGET)
#
# What it finds early, on every run: a file left out of a package (a source,
# a .proto a build script reads), a dependency without a version, a manifest
# `cargo package` refuses, a feature a crate uses but only an unpublished
# member (an example, a test crate) enabled. Build scripts run; no code is
# generated. One `cargo check --workspace` of the packages, the published
# crates' features unified: each crate alone (`cargo check -p` per package,
# its own feature set) checked the dependencies once per feature set (tokio
# and k8s-openapi four times each): 444 CPU seconds of a cold .ci/run, against
# 201 for one check of them all (from an empty target directory). What only
# the per-crate check finds (a feature one published crate uses but only
# another one enables) is left to the release workflow's `cargo publish`,
# which verifies each crate alone with a full build before uploading it.
#
# The packages are unpacked into one workspace whose [patch.crates-io] points
# each crate at its unpacked package, with the repository's Cargo.lock (the
# versions CI tests, not the newest on crates.io). k8s-openapi leaves the
# Kubernetes version to the final binary; the libraries are checked without
# one here, so the version is chosen for them: 1.37, k8s-openapi 0.29's
# `latest`, which the binaries enable. --allow-dirty: a local run checks the
# working tree as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
# Its own target directory, whatever CARGO_TARGET_DIR says (.ci/run exports
# the workspace's): its check units (another CARGO_HOME, no debug
# information) share names with the workspace's and would be written over
# them. Absolute: cargo runs in two directories.
CARGO_TARGET_DIR=$(realpath -m "${CNPGI_PUBLISH_TARGET:-target/publish-check}")
export CARGO_TARGET_DIR
# The packages are workspaces of their own, without the workspace's
# [profile]: no debug information (which nobody reads here).
export CARGO_PROFILE_DEV_DEBUG=false
export K8S_OPENAPI_ENABLED_VERSION=1.37

# The publishable crates, in the workspace's order (dependencies first): their
# names, and their packages' names (NAME-VERSION: the .crate file and the
# directory it unpacks into).
names=() packages=()
while read -r name version; do
  names+=("$name") packages+=("$name-$version")
done < <(cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    if p["publish"] != []:
        print(p["name"], p["version"])')
[ "${#names[@]}" -gt 0 ] || { echo "publish-check: no publishable crate in the workspace" >&2; exit 1; }

package_dir="$CARGO_TARGET_DIR/package"
rm -f "$package_dir"/*.crate
cargo package --no-verify --allow-dirty "${names[@]/#/--package=}" ||
  { echo "publish-check: cargo package failed (above)" >&2; exit 1; }

ws="$CARGO_TARGET_DIR/unpacked"
rm -rf "$ws"
mkdir -p "$ws"
{
  echo '# The packages of .ci/publish-check.sh, checked together.'
  echo '[workspace]'
  echo 'resolver = "3"'
  echo 'members = ['
  printf '  "%s",\n' "${packages[@]}"
  echo ']'
  echo '[patch.crates-io]'
  for i in "${!names[@]}"; do echo "${names[i]} = { path = \"${packages[i]}\" }"; done
} >"$ws/Cargo.toml"
for package in "${packages[@]}"; do
  [ -s "$package_dir/$package.crate" ] || { echo "publish-check: cargo package wrote no $package_dir/$package.crate" >&2; exit 1; }
  tar -C "$ws" -xzf "$package_dir/$package.crate"
done
cp Cargo.lock "$ws/Cargo.lock"

echo "publish-check: ${packages[*]}, from their packages" >&2
(cd "$ws" && cargo check --quiet --workspace) ||
  { echo "publish-check: FAIL: the crates did not build from their packages (errors above; files a package leaves out: cargo package --list -p NAME)" >&2; exit 1; }
echo "publish-check: ${#names[@]} crates packaged and checked from their packages" >&2
