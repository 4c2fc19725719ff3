#!/usr/bin/env bash
# Builds commands of a released Go module from the Go module proxy and caches
# them by version, beside the Kubernetes binaries of tests/e2e/build-kube.sh:
#   $CACHE/<name>-<version>/<command>     (CACHE: $CNPGI_E2E_CACHE or $HOME/.cache/cnpgi-e2e)
#
#   build-go.sh NAME MODULE VERSION PACKAGE...
#   e.g. build-go.sh coredns github.com/coredns/coredns v1.12.4 github.com/coredns/coredns
# A scratch module requires MODULE@VERSION and builds each PACKAGE (static,
# CGO_ENABLED=0, so the binary runs in any image); nothing is built when the
# cache has every command. Prints the commands' paths, one per line.
set -euo pipefail
[ $# -ge 4 ] || { echo "usage: build-go.sh NAME MODULE VERSION PACKAGE..." >&2; exit 2; }
name="$1" module="$2" version="$3"
shift 3
cache="${CNPGI_E2E_CACHE:-$HOME/.cache/cnpgi-e2e}"
dest="$cache/$name-$version"
# shellcheck source=../lib/go-env.sh
source "$(dirname "$0")/../lib/go-env.sh"
export CGO_ENABLED=0
command -v go >/dev/null 2>&1 || { echo "build-go.sh: Go is required to build $module@$version" >&2; exit 1; }

missing=0
for pkg in "$@"; do [ -x "$dest/$(basename "$pkg")" ] || missing=1; done
if [ "$missing" = 1 ]; then
  scratch="$(mktemp -d)"
  trap 'rm -rf "$scratch"' EXIT
  echo "build-go.sh: building $* from $module@$version" >&2
  started=$(date +%s)
  (
    cd "$scratch"
    printf 'module cnpgi-e2e/%s-build\n\ngo 1.24.0\n\nrequire %s %s\n' "$name" "$module" "$version" >go.mod
    {
      printf '//go:build tools\n\npackage tools\n\nimport (\n'
      for pkg in "$@"; do printf '\t_ "%s"\n' "$pkg"; done
      printf ')\n'
    } >tools.go
    go mod tidy
    go build -trimpath -ldflags "-s -w" -o "$scratch/out/" "$@"
  ) >&2 || { echo "build-go.sh: building $* from $module@$version failed (log above)" >&2; exit 1; }
  mkdir -p "$dest"
  for pkg in "$@"; do
    mv "$scratch/out/$(basename "$pkg")" "$dest/$(basename "$pkg").tmp"
    mv "$dest/$(basename "$pkg").tmp" "$dest/$(basename "$pkg")"
  done
  echo "build-go.sh: $name $version built in $(( $(date +%s) - started )) s" >&2
fi
for pkg in "$@"; do echo "$dest/$(basename "$pkg")"; done
