#!/usr/bin/env bash
# Builds what kind needs besides the Kubernetes binaries of tests/e2e/build-kube.sh
# --node, from the Go module proxy, cached by version beside them
# ($CNPGI_E2E_CACHE or $HOME/.cache/cnpgi-e2e, <name>-<version>/<command>):
#   kind                    sigs.k8s.io/kind $KIND_VERSION (go install)
#   crictl                  sigs.k8s.io/cri-tools $CRICTL_VERSION (kind's base image ships it)
#   containerd, ctr, containerd-shim-runc-v2
#                           github.com/containerd/containerd/v2 $CONTAINERD_VERSION, static:
#                           the node's runtime. Debian's containerd 1.6 will not do: `kind
#                           build node-image` runs `ctr info` and `ctr images import
#                           --label`, which ctr 1.6 lacks.
#   local-path-provisioner  github.com/rancher/local-path-provisioner $LPP_VERSION: kind's
#                           default StorageClass `standard`
# cri-tools, containerd and the provisioner are built inside a copy of their own
# module (their go.mod's replace directives apply only there). Nothing is built
# when the cache has it. Prints nothing on success.
#
#   tests/realkube/build-kind-tools.sh     (cold: ~15 min on 2 cores; cached: 0 s)
set -euo pipefail
# shellcheck source=tests/realkube/lib.sh
source "$(dirname "$0")/lib.sh"
command -v go >/dev/null 2>&1 || rk_die "Go >= 1.26 is required (containerd $CONTAINERD_VERSION needs it)"
# shellcheck source=tests/lib/go-env.sh
source "$(dirname "$0")/../lib/go-env.sh"
export CGO_ENABLED=0
cache=${CNPGI_E2E_CACHE:-$HOME/.cache/cnpgi-e2e}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# timed NAME COMMAND...: runs COMMAND with its output in a log, shown on failure
timed() {
  local name=$1 started=$SECONDS
  shift
  rk_log "building $name"
  "$@" >"$scratch/$name.log" 2>&1 || { tail -n 30 "$scratch/$name.log" >&2; rk_die "building $name failed"; }
  rk_log "$name built in $(( SECONDS - started )) s"
}
# module_copy MODULE VERSION DIR: a writable copy of the module's source in DIR
module_copy() {
  local src
  src=$(go mod download -json "$1@$2" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$src" ] || return 1
  cp -r "$src" "$3" && chmod -R u+w "$3"
}
# install_out DIR DEST: moves every file of DIR into DEST, atomically each
install_out() {
  local f
  mkdir -p "$2"
  for f in "$1"/*; do mv "$f" "$2/$(basename "$f").tmp" && mv "$2/$(basename "$f").tmp" "$2/$(basename "$f")"; done
}

kind_dir=$cache/kind-$KIND_VERSION
if [ ! -x "$kind_dir/kind" ]; then
  build_kind() { GOBIN="$scratch/kind-out" go install "sigs.k8s.io/kind@$KIND_VERSION" && install_out "$scratch/kind-out" "$kind_dir"; }
  timed "kind-$KIND_VERSION" build_kind
fi

crictl_dir=$cache/crictl-$CRICTL_VERSION
if [ ! -x "$crictl_dir/crictl" ]; then
  build_crictl() {
    module_copy sigs.k8s.io/cri-tools "$CRICTL_VERSION" "$scratch/cri-tools" &&
      (cd "$scratch/cri-tools" && go build -trimpath -ldflags "-s -w" -o "$scratch/crictl-out/" ./cmd/crictl) &&
      install_out "$scratch/crictl-out" "$crictl_dir"
  }
  timed "crictl-$CRICTL_VERSION" build_crictl
fi

containerd_dir=$cache/containerd-$CONTAINERD_VERSION
if [ ! -x "$containerd_dir/containerd" ] || [ ! -x "$containerd_dir/ctr" ] || [ ! -x "$containerd_dir/containerd-shim-runc-v2" ]; then
  build_containerd() {
    local pkg=github.com/containerd/containerd/v2
    local ld="-s -w -X $pkg/version.Version=$CONTAINERD_VERSION -X $pkg/version.Package=$pkg"
    module_copy "$pkg" "$CONTAINERD_VERSION" "$scratch/containerd" &&
      (cd "$scratch/containerd" &&
        go build -trimpath -tags "urfave_cli_no_docs no_btrfs no_devmapper no_zfs osusergo netgo static_build" \
          -ldflags "$ld" -o "$scratch/containerd-out/" ./cmd/containerd ./cmd/ctr &&
        go build -trimpath -tags "urfave_cli_no_docs no_grpc" -ldflags "$ld" -o "$scratch/containerd-out/" \
          ./cmd/containerd-shim-runc-v2) &&
      install_out "$scratch/containerd-out" "$containerd_dir"
  }
  timed "containerd-$CONTAINERD_VERSION" build_containerd
fi

lpp_dir=$cache/local-path-provisioner-$LPP_VERSION
if [ ! -x "$lpp_dir/local-path-provisioner" ]; then
  build_lpp() {
    module_copy github.com/rancher/local-path-provisioner "$LPP_VERSION" "$scratch/lpp" &&
      (cd "$scratch/lpp" && go build -trimpath -ldflags "-s -w" -o "$scratch/lpp-out/local-path-provisioner" .) &&
      install_out "$scratch/lpp-out" "$lpp_dir"
  }
  timed "local-path-provisioner-$LPP_VERSION" build_lpp
fi
