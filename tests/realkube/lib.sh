# shellcheck shell=bash
# shellcheck disable=SC2034  # the settings are used by the scripts that source this file
# Settings and helpers shared by tests/realkube/*.sh (sourced). Every setting
# can be overridden from the environment.

RK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RK_REPO="$(cd "$RK_DIR/../.." && pwd)"

RK_STATE=${RK_STATE:-/tmp/cnpgi-realkube}          # kubeconfig, host state to put back, logs
RK_CACHE=${RK_CACHE:-$HOME/.cache/cnpgi-realkube}  # mmdebstrap roots, image archives, dockerd's data root

# Where the images come from. 0 (default): built on this machine, which reaches
# no image registry (kind's node image, cert-manager's manifest, the Dockerfile's
# FROM images, PostgreSQL, moto, CloudNativePG). 1 (the GitHub workflow): from
# their registries through the machine's own Docker, as a user with internet
# gets them; the rest of the run is the same.
RK_UPSTREAM_IMAGES=${RK_UPSTREAM_IMAGES:-0}

# The dockerd of these tests (tests/realkube/dockerd.sh): Debian's docker.io
# with its own data root (images, BuildKit's cargo caches, kind's node), exec
# root and socket; its own bridge for `docker build` and user networks (kind's)
# from a pool nothing else uses; no iptables rules, no IP forwarding, no
# masquerade: nothing it runs reaches beyond this machine.
RK_DOCKER_ROOT=${RK_DOCKER_ROOT:-$RK_CACHE/docker}
RK_DOCKER_EXEC=${RK_DOCKER_EXEC:-/run/cnpgi-realkube-docker}
RK_DOCKER_BRIDGE=${RK_DOCKER_BRIDGE:-cnpgirk0}
RK_DOCKER_BRIDGE_CIDR=${RK_DOCKER_BRIDGE_CIDR:-10.212.0.1/24}
RK_DOCKER_POOL=${RK_DOCKER_POOL:-10.213.0.0/16}
# The client of the same release as that dockerd (a newer docker CLI without
# buildx refuses BuildKit builds against it); kind calls `docker` from PATH.
DOCKER_BIN=${DOCKER_BIN:-/usr/bin/docker}
if [ "$RK_UPSTREAM_IMAGES" = 0 ]; then
  export DOCKER_HOST="unix://$RK_DOCKER_EXEC/docker.sock"
else
  DOCKER_BIN=$(command -v docker || echo docker)   # the machine's Docker, which reaches the registries
fi
export DOCKER_BUILDKIT=1
# The kind cluster (tests/realkube/up.sh): `task local-kind-deploy` makes it
# from the node image tests/realkube/node-image.sh builds here.
KIND_CLUSTER=${KIND_CLUSTER:-cnpgi}
RK_KIND_BASE_IMAGE=${RK_KIND_BASE_IMAGE:-localhost/kind-base:bookworm}
RK_KIND_NODE_IMAGE=localhost/kind-node:v1.34.4
[ "$RK_UPSTREAM_IMAGES" = 0 ] || RK_KIND_NODE_IMAGE=""   # kind's own (Docker Hub)
RK_BIN=$RK_STATE/bin                               # docker (Debian's client) and kind, first in PATH
# The project's images: `task images` with these BINS and CARGO_PROFILE
# (images.sh builds the same, so the task's build is BuildKit's cache).
RK_IMAGE_TAG=${RK_IMAGE_TAG:-realkube}
RK_BINS=${RK_BINS:-cnpgi-operator cnpg-i-hello-world cnpgi-wal-archive database-table-operator database-table-postgres}
RK_CARGO_PROFILE=${RK_CARGO_PROFILE:-dev}
# A directory holding RK_BINS already compiled (the task's PREBUILT): the
# images copy them (the Dockerfile's BUILD=prebuilt) instead of compiling
# them. .ci/run sets it to the binaries its suites built; empty: compiled in
# the image build, as users build them.
RK_PREBUILT=${RK_PREBUILT:-}

KUBE_VERSION=${KUBE_VERSION:-v1.34.4}
COREDNS_VERSION=${COREDNS_VERSION:-v1.12.4}
# The cert-manager users install: Taskfile.yml's CERT_MANAGER_VERSION, one
# home for both. It is the newest release whose commands are in its main Go
# module: from v1.12 on, cmd/controller and cmd/cainjector are separate modules
# that the Go module proxy does not serve (only github.com/cert-manager/cert-manager).
CERT_MANAGER_VERSION=${CERT_MANAGER_VERSION:-$(sed -n 's/^  CERT_MANAGER_VERSION: *//p' "$RK_REPO/Taskfile.yml")}
[ -n "$CERT_MANAGER_VERSION" ] || { echo "tests/realkube/lib.sh: no CERT_MANAGER_VERSION in $RK_REPO/Taskfile.yml" >&2; exit 1; }
# kind and what its node image holds besides the Kubernetes binaries
# (tests/realkube/build-kind-tools.sh). kind v0.33.0 is the newest the Go
# module proxy serves; v0.29's `kind load` fails against containerd 2.3
# ("unknown containerd config version: 4").
KIND_VERSION=${KIND_VERSION:-v0.33.0}
CRICTL_VERSION=${CRICTL_VERSION:-v1.34.0}
CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.3.4}
LPP_VERSION=${LPP_VERSION:-v0.0.30}
DEBIAN_SUITE=${DEBIAN_SUITE:-bookworm}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

# Images that no Dockerfile of this project builds (mkimage.py, node-image.sh).
# The pause image keeps its upstream name: the hello-world plugin's sidecar names it.
RK_PAUSE_IMAGE=registry.k8s.io/pause:3.10
RK_CM_CONTROLLER_IMAGE=localhost/cert-manager-controller:$CERT_MANAGER_VERSION
RK_CM_CAINJECTOR_IMAGE=localhost/cert-manager-cainjector:$CERT_MANAGER_VERSION
# The real CloudNativePG (tests/realkube/cnpg.sh), its operator image built here,
# and the S3 store of the wal-archive scenario: moto's server.
CNPG_VERSION=${CNPG_VERSION:-v1.30.0}
MOTO_VERSION=${MOTO_VERSION:-5.2.1}
# plugin-barman-cloud (tests/realkube/barman.sh), the CNPG-I WAL archiving plugin
# of CloudNativePG's project, beside wal-archive on the same CloudNativePG and
# moto: v0.14.0 is the newest built against CloudNativePG v1.30.0 whose module
# builds from the Go module proxy (v0.15.0's dependencies are refused), with
# barman 3.19.1 in its sidecar.
BARMAN_PLUGIN_VERSION=${BARMAN_PLUGIN_VERSION:-v0.14.0}
# The DatabaseTable scenario's MariaDB server: Debian's mariadb-server (10.11 in
# bookworm), with the official image's environment (MARIADB_DATABASE, _USER, _PASSWORD).
MARIADB_VERSION=${MARIADB_VERSION:-10.11}
if [ "$RK_UPSTREAM_IMAGES" = 1 ]; then   # the same software, from its registries
  RK_POSTGRES_IMAGE=${RK_POSTGRES_IMAGE:-ghcr.io/cloudnative-pg/postgresql:15}
  RK_CNPG_IMAGE=${RK_CNPG_IMAGE:-ghcr.io/cloudnative-pg/cloudnative-pg:${CNPG_VERSION#v}}
  RK_MOTO_IMAGE=${RK_MOTO_IMAGE:-motoserver/moto:$MOTO_VERSION}
  RK_MARIADB_IMAGE=${RK_MARIADB_IMAGE:-docker.io/library/mariadb:$MARIADB_VERSION}
  RK_BARMAN_IMAGE=${RK_BARMAN_IMAGE:-ghcr.io/cloudnative-pg/plugin-barman-cloud:$BARMAN_PLUGIN_VERSION}
  RK_BARMAN_SIDECAR_IMAGE=${RK_BARMAN_SIDECAR_IMAGE:-ghcr.io/cloudnative-pg/plugin-barman-cloud-sidecar:$BARMAN_PLUGIN_VERSION}
fi
RK_POSTGRES_IMAGE=${RK_POSTGRES_IMAGE:-localhost/postgresql:15}
RK_CNPG_IMAGE=${RK_CNPG_IMAGE:-localhost/cloudnative-pg:$CNPG_VERSION}
RK_MOTO_IMAGE=${RK_MOTO_IMAGE:-localhost/moto:$MOTO_VERSION}
RK_MARIADB_IMAGE=${RK_MARIADB_IMAGE:-localhost/mariadb:$MARIADB_VERSION}
RK_BARMAN_IMAGE=${RK_BARMAN_IMAGE:-localhost/plugin-barman-cloud:$BARMAN_PLUGIN_VERSION}
RK_BARMAN_SIDECAR_IMAGE=${RK_BARMAN_SIDECAR_IMAGE:-localhost/plugin-barman-cloud-sidecar:$BARMAN_PLUGIN_VERSION}
# The DatabaseTable example's images (images.sh): the operator and the PostgreSQL
# plugin from ./Dockerfile, the MariaDB plugin (Python) and the naming plugin (Go)
# made here; tagged RK_IMAGE_TAG and loaded into the cluster with `kind load` (up.sh).
RK_DBT_IMAGES="database-table-operator database-table-postgres database-table-mariadb database-table-naming"

rk_log() { echo "realkube: $*" >&2; }
rk_die() { rk_log "$*"; exit 1; }

# The kind cluster's admin kubeconfig (kept out of the user's ~/.kube/config),
# and kubectl of the cluster's version.
RK_KUBECONFIG="$RK_STATE/kubeconfig"
rk_kubectl_bin() {
  local built=${CNPGI_E2E_CACHE:-$HOME/.cache/cnpgi-e2e}/kubectl-$KUBE_VERSION/kubectl
  if [ -x "$built" ] || [ "$RK_UPSTREAM_IMAGES" = 0 ]; then echo "$built"; else command -v kubectl; fi
}
rk_kubectl() { "$(rk_kubectl_bin)" --kubeconfig "$RK_KUBECONFIG" "$@"; }

# rk_docker ARGS...: the docker client of the tests' dockerd.
rk_docker() { "$DOCKER_BIN" "$@"; }
# rk_tools_path: PATH with the kind, docker and kubectl the scripts use first
# (those built here; with RK_UPSTREAM_IMAGES=1, the machine's own).
rk_tools_path() {
  local kind=${CNPGI_E2E_CACHE:-$HOME/.cache/cnpgi-e2e}/kind-$KIND_VERSION/kind
  mkdir -p "$RK_BIN"
  ln -sf "$(rk_kubectl_bin)" "$RK_BIN/kubectl"
  if [ "$RK_UPSTREAM_IMAGES" = 0 ]; then
    ln -sf "$DOCKER_BIN" "$RK_BIN/docker"
    ln -sf "$kind" "$RK_BIN/kind"
  fi
  echo "$RK_BIN:$PATH"
}

# rk_image_archive IMAGE: where an image made without Docker is cached as an archive.
rk_image_archive() { echo "$RK_CACHE/images/$(tr '/:' '__' <<<"$1").tar"; }

# rk_root NAME PACKAGES: a minbase root of Debian $DEBIAN_SUITE with PACKAGES,
# made by mmdebstrap, as a tarball cached under $RK_CACHE/roots (key: the
# suite, the packages and the tool); prints its path. images.sh and
# node-image.sh share the roots and may ask for one at once (CI runs them side
# by side): the first makes it under a lock, the other waits and takes it.
# mmdebstrap, not debootstrap: apt's parallel downloads and dpkg's
# --force-unsafe-io halve the time and the CPU (bookworm's mariadb-server
# root: 21 s and 22 CPU s against 45 s and 49 CPU s idle; 32 s against 61 s
# beside a cargo build). It downloads from Debian's mirror: 20 minutes at most.
# A subshell: its trap removes an unfinished root whatever happens.
rk_root() (
  local name=$1 packages=$2 key tar dir
  key=$(printf '%s %s mmdebstrap' "$DEBIAN_SUITE" "$packages" | sha256sum | cut -c1-12)
  tar="$RK_CACHE/roots/$DEBIAN_SUITE-$name-$key.tar"
  mkdir -p "$RK_CACHE/roots"
  exec 9>"$tar.lock"
  flock 9 || rk_die "cannot lock $tar.lock"
  if [ ! -s "$tar" ]; then
    dir=$(mktemp -d "${TMPDIR:-/tmp}/cnpgi-root-$name.XXXXXX")
    trap 'rm -rf "$dir"' EXIT
    rk_log "mmdebstrap $DEBIAN_SUITE ($name: $packages) from $DEBIAN_MIRROR"
    timeout 1200 mmdebstrap --variant=minbase --include="$packages" --mode=root --format=tar \
      --dpkgopt=force-unsafe-io "$DEBIAN_SUITE" "$dir/root.tar" "$DEBIAN_MIRROR" >"$dir/log" 2>&1 ||
      { tail -n 20 "$dir/log" >&2; rk_die "mmdebstrap of $name failed or took over 20 minutes (log above)"; }
    mv "$dir/root.tar" "$tar"
  fi
  echo "$tar"
)
# rk_unpack TAR DIR: a root's tarball unpacked into DIR, owners kept.
rk_unpack() { mkdir -p "$2" && tar -C "$2" --numeric-owner -xf "$1"; }

# rk_root_python DIR: the python3.N of the root unpacked in DIR (the name of
# its /usr/lib/python3.N), for wheels made for that Python.
rk_root_python() {
  local dir py=
  for dir in "$1"/usr/lib/python3.*; do
    [[ $(basename "$dir") =~ ^python3\.[0-9]+$ ]] && py=$(basename "$dir")
  done
  [ -n "$py" ] || rk_die "the python root in $1 has no /usr/lib/python3.N"
  echo "$py"
}

# rk_wheels_for VERSION DEST PIP-ARGS...: binary wheels for CPython VERSION
# (3.N) on x86-64 Linux into DEST (pip download; the images have no pip).
rk_wheels_for() {
  local version=$1 dest=$2
  shift 2
  python3 -m pip download -q --disable-pip-version-check --only-binary=:all: --python-version "$version" \
    --implementation cp --abi "cp${version/./}" --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 --platform any -d "$dest" "$@" >&2
}

# rk_unpack_wheels WHEELS DEST: every wheel in WHEELS unpacked into DEST (a
# wheel is a zip of what site-packages holds).
rk_unpack_wheels() {
  python3 - "$1" "$2" <<'PY'
import pathlib, sys, zipfile
wheels, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
dest.mkdir(parents=True, exist_ok=True)
for wheel in sorted(wheels.glob("*.whl")):
    zipfile.ZipFile(wheel).extractall(dest)
PY
}
