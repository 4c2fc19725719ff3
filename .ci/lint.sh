#!/usr/bin/env bash
# The static checks, in one lane: clippy, the crates' layering, shellcheck,
# ruff, go vet/test and gofmt, rustdoc. Run from the repository root:
#   .ci/lint.sh
# needs shellcheck (Debian), ruff (pip), Go and cargo with clippy.
#
# .ci/run starts it as the background job `lint`, beside `cargo test`: both
# are mostly one crate after another (each waits on the one it depends on),
# so each keeps one core busy and they finish together in about the time the
# longer one takes alone. Its own target directory (target/lint): cargo locks
# a target directory for a whole build, and clippy's and rustdoc's artifacts
# (metadata only) are of no use to the tests' build anyway.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}/lint"
started=$SECONDS
section() { echo "== $1 (at $((SECONDS - started)) s)"; }
# shellcheck source=tests/lib/go-env.sh
source tests/lib/go-env.sh

section "cargo clippy"
cargo clippy --workspace --all-targets --all-features -- -D warnings

section "layering: crate dependencies"
# The plugin SDK (any feature, tests included) must not pull in the operator
# stack, and the operator binary must not depend on the plugin SDK. tonic is
# pruned from the tree: its own `router` feature (which PluginServer's
# RoutesBuilder needs) uses axum internally, without axum's server.
layering_fail=0
for edges in normal normal,dev; do
  found=$(cargo tree -p cnpgi-pluginhelper --all-features -e "$edges" --prune tonic --prefix none \
    | grep -E '^(kube|kube-[a-z]+|axum|axum-server|prometheus-client|cnpgi-operator) ' | sort -u || true)
  if [ -n "$found" ]; then
    echo "FAIL: cnpgi-pluginhelper (--all-features, -e $edges) depends on:" "$found" >&2
    layering_fail=1
  fi
done
for crate in cnpgi-core cnpgi-client; do
  found=$(cargo tree -p "$crate" --all-features -e normal --prefix none \
    | grep -E '^(kube|kube-[a-z]+|axum|axum-server|prometheus-client|cnpgi-operator|cnpgi-pluginhelper) ' | sort -u || true)
  if [ -n "$found" ]; then
    echo "FAIL: $crate depends on:" "$found" >&2
    layering_fail=1
  fi
done
if cargo tree -p cnpgi-core -e normal --prefix none | grep -qE '^(hyper|h2|axum|socket2|mio) '; then
  echo "FAIL: cnpgi-core depends on a network stack (it must do no I/O)" >&2
  layering_fail=1
fi
# The plugin host library is for any operator: it must not depend on the
# Cluster operator nor the plugin SDK (its dev-dependencies may: its tests
# run a real plugin), and it names no Cluster-specific type (the Cluster
# CRD, cnpgi-core's Cluster view, the instance Pod template) and declares no
# public item named after the Cluster. The protocol's own names
# (MutateCluster, cluster_definition) are the wire's and allowed.
found=$(cargo tree -p cnpgi-host --all-features -e normal --prefix none \
  | grep -E '^(cnpgi-operator|cnpgi-operator-cli|cnpgi-pluginhelper|cnpgi-pluginhelper-derive) ' | sort -u || true)
if [ -n "$found" ]; then
  echo "FAIL: cnpgi-host depends on:" "$found" >&2
  layering_fail=1
fi
# A library leaves k8s-openapi's Kubernetes version to the final binary:
# enabling one would clash with the binary's choice.
for crate in cnpgi-host cnpgi-operator; do
  if cargo tree -p "$crate" --all-features -e normal,features --prefix none -i k8s-openapi \
    | grep -qE '^k8s-openapi feature "(latest|earliest|v1_[0-9]+)"'; then
    echo "FAIL: $crate enables a k8s-openapi version feature" >&2
    layering_fail=1
  fi
done
if grep -rnE '\bcrd::|cnpgi_operator|cluster::(Cluster|ClusterSpec|ClusterStatus|PluginConfiguration|PluginStatus|decode_cluster)\b|cnpgi_core::pod\b|\bpod::|pub (async )?(fn|struct|enum|type|trait|const|mod|use) [A-Za-z_]*(Cluster|cluster|CLUSTER)' crates/host/src; then
  echo "FAIL: cnpgi-host uses or declares Cluster-specific items (above)" >&2
  layering_fail=1
fi
if cargo tree -p cnpgi-operator-cli -e normal --prefix none | grep -qE '^cnpgi-pluginhelper '; then
  echo "FAIL: cnpgi-operator-cli depends on cnpgi-pluginhelper" >&2
  layering_fail=1
fi
# CONTRIBUTING.md's map of the tree names every workspace member, and only paths that exist.
python3 .ci/contributing_map.py || layering_fail=1
[ "$layering_fail" = 0 ]

section "shellcheck (every shell script), ruff (every Python script), go vet, go test and gofmt (the Go interop programs, the naming plugin)"
# .shellcheckrc makes `source` paths relative to each script.
git ls-files -z '*.sh' .ci/run .ci/measure | xargs -0 shellcheck -x
git ls-files -z '*.py' | xargs -0 ruff check --quiet
if ! command -v go >/dev/null 2>&1; then
  echo "Go >= 1.25 is required (go vet here; tests/interop and the e2e suites later)" >&2
  exit 1
fi
# Without cgo, as every build of these two modules (tests/lib/go-env.sh says why).
export CGO_ENABLED=0
(cd tests/interop && go vet ./...)
# The DatabaseTable example's naming plugin, on upstream's cnpg-i machinery.
(cd examples/database-table/plugins/naming && go vet ./... && go test ./...)
unformatted=$(gofmt -l tests/interop examples/database-table/plugins/naming tests/realkube/coredns)
[ -z "$unformatted" ] || { echo "FAIL: gofmt would change: $unformatted" >&2; exit 1; }

section "rustdoc without warnings"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
echo "lint: passed in $((SECONDS - started)) s"
