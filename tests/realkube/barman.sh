#!/usr/bin/env bash
# plugin-barman-cloud $BARMAN_PLUGIN_VERSION (lib.sh; CloudNativePG's own CNPG-I
# plugin for WAL archiving and backups to object stores) for the real
# CloudNativePG in kind, from the Go module proxy and PyPI, without any image
# registry:
#
#   barman.sh image     builds its two images as archives in $RK_CACHE/images,
#                       cached by version (a no-op when cached); prints their paths:
#     $RK_BARMAN_IMAGE          /manager only (`manager operator`: the Deployment
#                               in cnpg-system; upstream: ubi9-micro), users
#                               65532 and 10001
#     $RK_BARMAN_SIDECAR_IMAGE  Debian $DEBIAN_SUITE's python3 (the moto image's
#                               root) + the wheels of the release's pinned
#                               containers/sidecar-requirements.txt (barman
#                               3.19.1; psycopg2 -> psycopg2-binary, the same
#                               module without a C build), barman's console
#                               scripts in /usr/local/bin, /manager (the same
#                               binary: `manager instance`), user 26:26
#                               (upstream: distroless python3-debian13 + /venv)
#   barman.sh manifest  prints the release's kubernetes/ kustomization (CRD,
#                       RBAC, Deployment, Service, cert-manager Issuer and two
#                       Certificates, namespace cnpg-system) with both images
#                       set, imagePullPolicy IfNotPresent and --log-level=info
#
# The manager is built by build-go.sh (static, cached by version in
# ~/.cache/cnpgi-e2e). Each archive has a .key (the version, the requirements
# and this script): it is remade when that changes. With RK_UPSTREAM_IMAGES=1
# there is nothing to build (`image` prints nothing) and the manifest names
# the release's images.
set -euo pipefail
# shellcheck source=tests/realkube/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/lib/go-env.sh
source "$(dirname "$0")/../lib/go-env.sh"
module=github.com/cloudnative-pg/plugin-barman-cloud

# module_dir: the release's source in the Go module cache (downloaded once).
module_dir() {
  local dir
  dir=$(cd "${TMPDIR:-/tmp}" && go mod download -json "$module@$BARMAN_PLUGIN_VERSION" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])') ||
    rk_die "go mod download $module@$BARMAN_PLUGIN_VERSION failed"
  [ -d "$dir/kubernetes" ] || rk_die "no kubernetes/ in $dir"
  echo "$dir"
}

case "${1:-}" in
image)
  [ "$RK_UPSTREAM_IMAGES" = 0 ] || exit 0
  command -v go >/dev/null || rk_die "go is required to build $module@$BARMAN_PLUGIN_VERSION"
  plugin_tar=$(rk_image_archive "$RK_BARMAN_IMAGE")
  sidecar_tar=$(rk_image_archive "$RK_BARMAN_SIDECAR_IMAGE")
  key="$BARMAN_PLUGIN_VERSION $(sha256sum "$0" | cut -c1-16)"
  if [ -s "$plugin_tar" ] && [ -s "$sidecar_tar" ] && [ "$(cat "$plugin_tar.key" 2>/dev/null)" = "$key" ] &&
    [ "$(cat "$sidecar_tar.key" 2>/dev/null)" = "$key" ]; then
    echo "$plugin_tar"
    echo "$sidecar_tar"
    exit 0
  fi
  started=$(date +%s)
  mkdir -p "$RK_CACHE/images"
  src=$(module_dir)
  w=$(mktemp -d "${TMPDIR:-/tmp}/cnpgi-barman.XXXXXX")
  trap 'rm -rf "$w"' EXIT
  # --- the manager, static, as build-go.sh builds released modules
  bin=$(bash "$RK_DIR/build-go.sh" plugin-barman-cloud "$module" "$BARMAN_PLUGIN_VERSION" "$module/cmd/manager") ||
    rk_die "cannot build $module/cmd/manager@$BARMAN_PLUGIN_VERSION"
  # --- the plugin (operator side): /manager, CA certificates, nonroot users
  # (65532 the image's, 10001 the Deployment's runAsUser)
  d="$w/plugin"
  mkdir -p "$d/tmp" "$d/etc/ssl/certs"
  chmod 1777 "$d/tmp"
  install -m 0755 "$bin" "$d/manager"
  cp /etc/ssl/certs/ca-certificates.crt "$d/etc/ssl/certs/"
  printf 'root:x:0:0:root:/:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/:/sbin/nologin\nplugin:x:10001:10001:plugin:/:/sbin/nologin\n' >"$d/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\nplugin:x:10001:\n' >"$d/etc/group"
  python3 "$RK_DIR/mkimage.py" "$d" "$RK_BARMAN_IMAGE" "$plugin_tar.partial" --entrypoint /manager \
    --user 65532:65532 --workdir / >/dev/null || rk_die "cannot make $RK_BARMAN_IMAGE"
  mv "$plugin_tar.partial" "$plugin_tar"
  echo "$key" >"$plugin_tar.key"
  # --- the sidecar: Debian's python3 and the release's pinned wheels for it
  d="$w/sidecar"
  rk_unpack "$(rk_root python "ca-certificates,python3")" "$d"
  py=$(rk_root_python "$d")
  pyv=${py#python}
  # The release's pins without their hashes; psycopg2 (an sdist: a C build
  # against libpq-dev) as psycopg2-binary, the same module in a manylinux wheel.
  grep -E '^[a-z0-9]' "$src/containers/sidecar-requirements.txt" | sed -e 's/ *\\$//' \
    -e 's/^psycopg2==/psycopg2-binary==/' >"$w/requirements.txt"
  rk_wheels_for "$pyv" "$w/wheels" --no-deps -r "$w/requirements.txt" ||
    rk_die "pip download of plugin-barman-cloud's sidecar requirements for Python $pyv failed"
  python3 - "$w/wheels" "$d/usr/local/lib/$py/dist-packages" "$d/usr/local/bin" "/usr/bin/$py" <<'PY' || rk_die "cannot unpack the sidecar's wheels"
import configparser, pathlib, sys, zipfile
wheels, dest, bindir, python = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3]), sys.argv[4]
dest.mkdir(parents=True, exist_ok=True)
bindir.mkdir(parents=True, exist_ok=True)
for wheel in sorted(wheels.glob("*.whl")):
    zipfile.ZipFile(wheel).extractall(dest)
# barman's console scripts, as pip would write them (barman-cloud-wal-archive, ...)
for ep in dest.glob("barman-*.dist-info/entry_points.txt"):
    cp = configparser.ConfigParser()
    cp.read(ep)
    for name, target in cp["console_scripts"].items() if "console_scripts" in cp else ():
        mod, func = target.split(":")
        script = bindir / name
        script.write_text(f"#!{python}\nimport sys\nfrom {mod} import {func}\nsys.exit({func}())\n")
        script.chmod(0o755)
PY
  [ -x "$d/usr/local/bin/barman-cloud-wal-archive" ] || rk_die "no barman-cloud-wal-archive among barman's console scripts"
  # Bytecode now, by the root's own python (the root filesystem is read-only in the Pod).
  chroot "$d" "/usr/bin/$py" -m compileall -q -j0 "/usr/local/lib/$py/dist-packages" >/dev/null 2>&1 || true
  chmod -R a+rX "$d/usr/local"
  install -m 0755 "$bin" "$d/manager"
  grep -q '^postgres:' "$d/etc/passwd" || echo "postgres:x:26:26:PostgreSQL:/var/lib/postgresql:/usr/sbin/nologin" >>"$d/etc/passwd"
  grep -q '^postgres:' "$d/etc/group" || echo "postgres:x:26:" >>"$d/etc/group"
  python3 "$RK_DIR/mkimage.py" "$d" "$RK_BARMAN_SIDECAR_IMAGE" "$sidecar_tar.partial" --entrypoint /manager \
    --user 26:26 --workdir / --env LANG=C.UTF-8 --env PYTHONDONTWRITEBYTECODE=1 >/dev/null ||
    rk_die "cannot make $RK_BARMAN_SIDECAR_IMAGE"
  mv "$sidecar_tar.partial" "$sidecar_tar"
  echo "$key" >"$sidecar_tar.key"
  rk_log "$RK_BARMAN_IMAGE and $RK_BARMAN_SIDECAR_IMAGE built in $(( $(date +%s) - started )) s"
  echo "$plugin_tar"
  echo "$sidecar_tar"
  ;;
manifest)
  command -v kustomize >/dev/null || rk_die "kustomize is required"
  src=$(module_dir)
  d=$(mktemp -d "${TMPDIR:-/tmp}/cnpgi-barman-manifest.XXXXXX")
  trap 'rm -rf "$d"' EXIT
  cp -r "$src/kubernetes" "$src/config" "$d/"
  chmod -R u+w "$d"
  mkdir "$d/overlay"
  # The release's kustomization (its testing image and SIDECAR_IMAGE Secret)
  # with our images, IfNotPresent (no pull here), and info in place of debug
  # (a log line per WAL segment at debug: not what users run).
  cat >"$d/overlay/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../kubernetes
images:
  - name: ghcr.io/cloudnative-pg/plugin-barman-cloud-testing
    newName: ${RK_BARMAN_IMAGE%:*}
    newTag: ${RK_BARMAN_IMAGE##*:}
secretGenerator:
  - name: plugin-barman-cloud
    namespace: cnpg-system
    behavior: replace
    literals:
      - SIDECAR_IMAGE=$RK_BARMAN_SIDECAR_IMAGE
patches:
  - target: {group: apps, version: v1, kind: Deployment, name: barman-cloud}
    patch: |-
      - op: add
        path: /spec/template/spec/containers/0/imagePullPolicy
        value: IfNotPresent
      - op: test
        path: /spec/template/spec/containers/0/args/6
        value: --log-level=debug
      - op: replace
        path: /spec/template/spec/containers/0/args/6
        value: --log-level=info
YAML
  kustomize build "$d/overlay" || rk_die "kustomize build of plugin-barman-cloud's kubernetes/ failed"
  ;;
*)
  echo "usage: barman.sh image | barman.sh manifest" >&2
  exit 2
  ;;
esac
