#!/usr/bin/env bash
# Builds the real CloudNativePG operator (cmd/manager) from the Go module proxy
# and caches it with its CRDs, keyed by version:
#   $CACHE/cnpg-<version>-static/manager       the operator binary
#   $CACHE/cnpg-<version>-static/crds/*.json   config/crd/bases of that release, as JSON
#   $CACHE/cnpg-<version>-static/rbac/*.json   its ClusterRole and ClusterRoleBinding (config/rbac)
# The binary is static (CGO_ENABLED=0, as the release's own image): the same
# build serves the e2e suites, which run it as a process, and the real-node
# scenarios, which put it in an image with no libc (tests/realkube/cnpg.sh).
# where CACHE is $CNPGI_E2E_CACHE or $HOME/.cache/cnpgi-e2e. Builds only when
# missing (cold: a few minutes on 2 cores). Prints the cache directory.
#
# Usage: tests/e2e/cnpg/build.sh     (needs Go >= 1.25; CNPG_VERSION, default v1.30.0)
set -euo pipefail
version="${CNPG_VERSION:-v1.30.0}"
cache="${CNPGI_E2E_CACHE:-$HOME/.cache/cnpgi-e2e}/cnpg-$version-static"
if [ -x "$cache/manager" ] && [ -s "$cache/crds/postgresql.cnpg.io_clusters.json" ] && [ -s "$cache/rbac/role.json" ]; then
  echo "$cache"
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  echo "cnpg/build.sh: Go >= 1.25 is required to build CloudNativePG" >&2
  exit 1
fi

# shellcheck source=../../lib/go-env.sh
source "$(dirname "$0")/../../lib/go-env.sh"
export CGO_ENABLED=0
module=github.com/cloudnative-pg/cloudnative-pg

scratch="$(mktemp -d)"
# Each build fills a directory of its own, renamed into place at the end, so
# that two runs building at once cannot mix their files.
mkdir -p "$(dirname "$cache")"
tmp="$(mktemp -d "$cache.tmp.XXXXXX")"
trap 'rm -rf "$scratch" "$tmp"' EXIT
echo "cnpg/build.sh: building CloudNativePG $version (cold: a few minutes)" >&2
# A scratch module requiring the release. The release's go.mod has no replace
# directives, so minimal version selection gives its own dependency versions.
cat >"$scratch/go.mod" <<MOD
module cnpgi-e2e/cnpg-build

go 1.25.0

require $module $version
MOD
cat >"$scratch/tools.go" <<'GO'
//go:build tools

package tools

import _ "github.com/cloudnative-pg/cloudnative-pg/cmd/manager"
GO
# The CRDs and RBAC are YAML; the tests read JSON (no YAML parser needed there).
mkdir -p "$scratch/crd2json"
cat >"$scratch/crd2json/main.go" <<'GO'
// crd2json converts each YAML file named on the command line to DIR/<name>.json.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

func main() {
	dir := os.Args[1]
	for _, in := range os.Args[2:] {
		data, err := os.ReadFile(in)
		if err == nil {
			data, err = yaml.YAMLToJSON(data)
		}
		if err == nil {
			out := filepath.Join(dir, strings.TrimSuffix(filepath.Base(in), ".yaml")+".json")
			err = os.WriteFile(out, data, 0o644)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "crd2json: %s: %v\n", in, err)
			os.Exit(1)
		}
	}
}
GO
(
  cd "$scratch"
  go mod tidy
  src="$(go list -m -f '{{.Dir}}' "$module")"
  if [ -z "$src" ] || [ ! -d "$src/config/crd/bases" ]; then
    echo "cnpg/build.sh: no config/crd/bases in $module@$version" >&2
    exit 1
  fi
  mkdir -p "$tmp/crds" "$tmp/rbac"
  go run ./crd2json "$tmp/crds" "$src"/config/crd/bases/*.yaml
  go run ./crd2json "$tmp/rbac" "$src"/config/rbac/role.yaml "$src"/config/rbac/role_binding.yaml
  go build -trimpath -o "$tmp/manager" \
    -ldflags "-s -w -X $module/pkg/versions.buildVersion=${version#v} -X $module/pkg/versions.buildCommit=go-module-proxy" \
    "$module/cmd/manager"
) >&2
chmod 755 "$tmp"
# A complete cache that another run renamed into place first wins (rename
# onto a non-empty directory fails); an incomplete one is replaced.
if ! [ -s "$cache/crds/postgresql.cnpg.io_clusters.json" ]; then
  rm -rf "$cache"
fi
mv -T "$tmp" "$cache" 2>/dev/null || true
echo "$cache"
