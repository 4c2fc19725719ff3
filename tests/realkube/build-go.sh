#!/usr/bin/env bash
# Builds commands of a released Go module from the Go module proxy and caches
# them by version, beside the Kubernetes binaries of tests/e2e/build-kube.sh:
#   $CACHE/<name>-<version>/<command>     (CACHE: $CNPGI_E2E_CACHE or $HOME/.cache/cnpgi-e2e)
#
#   build-go.sh NAME MODULE VERSION PACKAGE...
#   build-go.sh --main FILE NAME MODULE VERSION COMMAND
#   e.g. build-go.sh cert-manager github.com/cert-manager/cert-manager v1.11.5 \
#          github.com/cert-manager/cert-manager/cmd/controller
# A scratch module requires MODULE@VERSION and builds each PACKAGE (static,
# CGO_ENABLED=0, so the binary runs in any image); with --main, FILE (a main
# package of ours, using MODULE) is the scratch module's own main, built as
# COMMAND. Nothing is built when the cache has every command. Prints the
# commands' paths, one per line.
set -euo pipefail
main_file=""
if [ "${1:-}" = --main ]; then
  main_file=$(realpath "${2:?--main needs a FILE}")
  shift 2
fi
[ $# -ge 4 ] || { echo "usage: build-go.sh [--main FILE] NAME MODULE VERSION PACKAGE..." >&2; exit 2; }
name="$1" module="$2" version="$3"
shift 3
if [ -n "$main_file" ] && [ $# != 1 ]; then
  echo "build-go.sh: --main builds one COMMAND, not: $*" >&2
  exit 2
fi
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
    if [ -n "$main_file" ]; then
      cp "$main_file" main.go
      go mod tidy
      go build -ldflags "-s -w" -o "$scratch/out/$(basename "$1")" .
    else
      {
        printf '//go:build tools\n\npackage tools\n\nimport (\n'
        for pkg in "$@"; do printf '\t_ "%s"\n' "$pkg"; done
        printf ')\n'
      } >tools.go
      go mod tidy
      go build -ldflags "-s -w" -o "$scratch/out/" "$@"
    fi
  ) >&2 || { echo "build-go.sh: building $* from $module@$version failed (log above)" >&2; exit 1; }
  mkdir -p "$dest"
  for pkg in "$@"; do
    mv "$scratch/out/$(basename "$pkg")" "$dest/$(basename "$pkg").tmp"
    mv "$dest/$(basename "$pkg").tmp" "$dest/$(basename "$pkg")"
  done
  echo "build-go.sh: $name $version built in $(( $(date +%s) - started )) s" >&2
fi
for pkg in "$@"; do echo "$dest/$(basename "$pkg")"; done
