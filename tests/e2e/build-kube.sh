#!/usr/bin/env bash
# Builds etcd, kube-apiserver and kube-controller-manager from the Go module
# proxy and caches them, keyed by version (built only when missing):
#   $CACHE/etcd-<version>/etcd
#   $CACHE/kube-apiserver-<version>/kube-apiserver
#   $CACHE/kube-controller-manager-<version>/kube-controller-manager
# where CACHE is $CNPGI_E2E_CACHE or $HOME/.cache/cnpgi-e2e.
#
# Usage: tests/e2e/build-kube.sh [--node]   (needs Go >= 1.25; cold: ~6.5 min on 2 cores)
# --node also builds, in the same way and the same cache, what a real node
# needs (tests/realkube's kind node): kube-scheduler, kubelet, kube-proxy, kubectl and kubeadm
#   $CACHE/<command>-<version>/<command>              (cold: ~5 min more)
# Versions: KUBE_VERSION (default v1.34.4), ETCD_VERSION (default v3.6.16).
# Prints the binaries' paths on stdout, one per line (etcd, kube-apiserver,
# kube-controller-manager, then with --node kube-scheduler, kubelet, kube-proxy, kubectl, kubeadm).
set -euo pipefail

kube_version="${KUBE_VERSION:-v1.34.4}"
etcd_version="${ETCD_VERSION:-v3.6.16}"
cache="${CNPGI_E2E_CACHE:-$HOME/.cache/cnpgi-e2e}"
# The staging modules (k8s.io/api, client-go, ...) of release v1.X.Y are v0.X.Y.
staging_version="v0.${kube_version#v1.}"

node=0
case "${1:-}" in
  "") ;;
  --node) node=1 ;;
  *) echo "build-kube.sh: unknown argument $1 (only --node)" >&2; exit 2 ;;
esac

# shellcheck source=../lib/go-env.sh
source "$(dirname "$0")/../lib/go-env.sh"

etcd_bin="$cache/etcd-$etcd_version/etcd"
apiserver_bin="$cache/kube-apiserver-$kube_version/kube-apiserver"
kcm_bin="$cache/kube-controller-manager-$kube_version/kube-controller-manager"

if ! command -v go >/dev/null 2>&1; then
  echo "build-kube.sh: Go >= 1.25 is required to build etcd and kube-apiserver" >&2
  exit 1
fi

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

# Moves a freshly built binary into its cache directory atomically, so an
# interrupted build never leaves a half-written binary behind.
install_bin() {
  local built="$1" dest="$2"
  mkdir -p "$(dirname "$dest")"
  mv "$built" "$dest.tmp"
  mv "$dest.tmp" "$dest"
}

if [ ! -x "$etcd_bin" ]; then
  echo "build-kube.sh: building etcd $etcd_version (cold: ~75 s)" >&2
  mkdir -p "$scratch/etcd"
  cat > "$scratch/etcd/go.mod" <<MOD
module cnpgi-e2e/etcd-build

go 1.24.0

require go.etcd.io/etcd/server/v3 $etcd_version
MOD
  cat > "$scratch/etcd/tools.go" <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
  (
    cd "$scratch/etcd"
    go mod tidy
    go build -trimpath -o "$scratch/etcd/etcd" \
      -ldflags "-s -w" go.etcd.io/etcd/server/v3
  ) >&2 || { echo "build-kube.sh: building etcd $etcd_version failed" >&2; exit 1; }
  install_bin "$scratch/etcd/etcd" "$etcd_bin"
fi

# build_kube COMMAND...: builds k8s.io/kubernetes/cmd/COMMAND for each one
# into $CACHE/COMMAND-$kube_version/COMMAND.
build_kube() {
  local dir="$scratch/kube-$1" cmd
  mkdir -p "$dir"
  echo "build-kube.sh: building $* $kube_version" >&2
  (
    cd "$dir"
    # k8s.io/kubernetes replaces its staging modules with ./staging/src/...;
    # a dependent module must replace each of them with its released version.
    gomod="$(go mod download -json "k8s.io/kubernetes@$kube_version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
    [ -s "$gomod" ] || { echo "build-kube.sh: no go.mod for k8s.io/kubernetes@$kube_version" >&2; exit 1; }
    staging="$(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/src/.*#\1#p' "$gomod")"
    [ -n "$staging" ] || { echo "build-kube.sh: no staging replaces in $gomod" >&2; exit 1; }
    {
      printf 'module cnpgi-e2e/kube-build\n\ngo 1.24.0\n\ngodebug default=go1.24\n\n'
      printf 'require k8s.io/kubernetes %s\n\n' "$kube_version"
      for m in $staging; do printf 'replace %s => %s %s\n' "$m" "$m" "$staging_version"; done
    } > go.mod
    {
      printf '//go:build tools\n\npackage tools\n\nimport (\n'
      for cmd in "$@"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$cmd"; done
      printf ')\n'
    } > tools.go
    go mod tidy
    minor="${kube_version#v1.}"; minor="${minor%%.*}"
    v=k8s.io/component-base/version
    pkgs=()
    for cmd in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$cmd"); done
    go build -trimpath -o "$dir/out/" \
      -ldflags "-s -w -X $v.gitVersion=$kube_version -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean" \
      "${pkgs[@]}"
  ) >&2 || { echo "build-kube.sh: building $* $kube_version failed" >&2; exit 1; }
  for cmd in "$@"; do install_bin "$dir/out/$cmd" "$cache/$cmd-$kube_version/$cmd"; done
}

# One `go build` for every missing command: they share most packages, and
# one link step each is all a second command costs.
commands=(kube-apiserver kube-controller-manager)
if [ "$node" = 1 ]; then commands+=(kube-scheduler kubelet kube-proxy kubectl kubeadm); fi
missing=()
node_bins=()
for cmd in "${commands[@]}"; do
  [ -x "$cache/$cmd-$kube_version/$cmd" ] || missing+=("$cmd")
  case "$cmd" in kube-apiserver | kube-controller-manager) ;; *) node_bins+=("$cache/$cmd-$kube_version/$cmd") ;; esac
done
if [ "${#missing[@]}" -gt 0 ]; then
  build_kube "${missing[@]}"   # cold: ~5.5 min for the two control-plane commands, ~2 min more with the node's
fi

printf '%s\n' "$etcd_bin" "$apiserver_bin" "$kcm_bin" "${node_bins[@]}"
