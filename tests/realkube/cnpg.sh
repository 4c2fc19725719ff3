#!/usr/bin/env bash
# The real CloudNativePG $CNPG_VERSION (default v1.30.0) for the real-node
# scenarios, from the Go module proxy, without any image registry:
#
#   cnpg.sh image           builds its operator image from cmd/manager (static,
#                           through tests/e2e/cnpg/build.sh) as $RK_CNPG_IMAGE,
#                           cached by version; prints the image archive's path
#   cnpg.sh manifest IMAGE  prints its `config/default` (the release's own
#                           kustomization, from the module) built by kustomize
#                           with the operator image set to IMAGE
#
# The image holds what the release image holds for the operator's purposes:
# /manager, the same binary as /operator/manager_amd64 (the instance manager
# CloudNativePG copies into every instance Pod, chosen by architecture from
# the working directory /; without it every reconcile fails with `invalid
# architecture: amd64`), CA certificates and time zones, user 10001.
#
# config/default names the image `controller:latest` with `imagePullPolicy:
# Always`; the manifest sets IMAGE and IfNotPresent (a Pull here, or of an
# image loaded with `kind load`, would go to a registry), nothing else.
set -euo pipefail
# shellcheck source=tests/realkube/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/lib/go-env.sh
source "$(dirname "$0")/../lib/go-env.sh"
module=github.com/cloudnative-pg/cloudnative-pg

# module_dir: the release's source in the Go module cache (downloaded once).
module_dir() {
  local dir
  dir=$(cd "${TMPDIR:-/tmp}" && go mod download -json "$module@$CNPG_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])') ||
    rk_die "go mod download $module@$CNPG_VERSION failed"
  [ -d "$dir/config/default" ] || rk_die "no config/default in $dir"
  echo "$dir"
}

case "${1:-}" in
image)
  tar="$RK_CACHE/images/$(tr '/:' '__' <<<"$RK_CNPG_IMAGE").tar"
  if [ ! -s "$tar" ]; then
    started=$(date +%s)
    # The e2e suites' build of the same version (static, cached by version).
    cache=$(CNPG_VERSION=$CNPG_VERSION bash "$RK_REPO/tests/e2e/cnpg/build.sh") ||
      rk_die "cannot build CloudNativePG $CNPG_VERSION"
    if ldd "$cache/manager" >/dev/null 2>&1; then
      rk_die "$cache/manager is dynamically linked: remove $cache and retry"
    fi
    d=$(mktemp -d)
    mkdir -p "$d/operator" "$d/tmp" "$d/etc/ssl/certs" "$d/usr/share"
    chmod 1777 "$d/tmp"
    install -m 0755 "$cache/manager" "$d/manager"
    install -m 0755 "$cache/manager" "$d/operator/manager_amd64"
    cp /etc/ssl/certs/ca-certificates.crt "$d/etc/ssl/certs/"
    [ -d /usr/share/zoneinfo ] && cp -r /usr/share/zoneinfo "$d/usr/share/"
    printf 'root:x:0:0:root:/:/sbin/nologin\nnonroot:x:10001:10001:nonroot:/:/sbin/nologin\n' >"$d/etc/passwd"
    printf 'root:x:0:\nnonroot:x:10001:\n' >"$d/etc/group"
    mkdir -p "$RK_CACHE/images"
    python3 "$RK_DIR/mkimage.py" "$d" "$RK_CNPG_IMAGE" "$tar.partial" --entrypoint /manager --user 10001:10001 --workdir / >/dev/null ||
      { rm -rf "$d"; rk_die "cannot make the image $RK_CNPG_IMAGE"; }
    mv "$tar.partial" "$tar"
    rm -rf "$d"
    rk_log "$RK_CNPG_IMAGE made in $(( $(date +%s) - started )) s"
  fi
  echo "$tar"
  ;;
manifest)
  image=${2:?usage: cnpg.sh manifest IMAGE}
  command -v kustomize >/dev/null || rk_die "kustomize is required (go install sigs.k8s.io/kustomize/kustomize/v5@v5.6.0)"
  src=$(module_dir)
  d=$(mktemp -d)
  trap 'rm -rf "$d"' EXIT
  # The module cache is read-only: kustomize reads a copy.
  cp -r "$src/config" "$d/config"
  chmod -R u+w "$d"
  mkdir "$d/overlay"
  cat >"$d/overlay/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../config/default
images:
  - name: controller
    newName: ${image%:*}
    newTag: ${image##*:}
patches:
  - target: {group: apps, version: v1, kind: Deployment, name: cnpg-controller-manager}
    patch: |-
      - op: replace
        path: /spec/template/spec/containers/0/imagePullPolicy
        value: IfNotPresent
YAML
  kustomize build "$d/overlay" || rk_die "kustomize build of CloudNativePG's config/default failed"
  ;;
*)
  echo "usage: cnpg.sh image | cnpg.sh manifest IMAGE" >&2
  exit 2
  ;;
esac
