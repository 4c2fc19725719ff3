#!/usr/bin/env bash
# Builds the images the scenarios run, without any image registry, into the
# tests' dockerd (tests/realkube/dockerd.sh; started here when not running, and
# then stopped on exit), where `kind load docker-image` and the node image
# (tests/realkube/node-image.sh) find them:
#   cnpgi-operator:$TAG, cnpg-i-hello-world:$TAG, cnpgi-wal-archive:$TAG
#       ./Dockerfile, as `task images` builds them (the same build arguments, so
#       the task's own build in `task local-kind-deploy` is BuildKit's cache);
#       with RK_PREBUILT=DIR, from the binaries in DIR (BUILD=prebuilt)
#   $RK_POSTGRES_IMAGE   Debian's postgresql-15, user postgres = 26:26
#   $RK_MOTO_IMAGE       moto's S3 server on Debian's python3
#   $RK_MARIADB_IMAGE    Debian's mariadb-server, mysql = 999:999, the data
#                        directory made on first start (mariadb-entrypoint.sh)
#   $RK_BARMAN_IMAGE, $RK_BARMAN_SIDECAR_IMAGE  plugin-barman-cloud's (barman.sh)
# (the last five also as archives in $RK_CACHE/images), and the DatabaseTable
# example's images, each remade only when its key (its sources, its base) changes:
#   database-table-operator:$TAG, database-table-postgres:$TAG   ./Dockerfile
#   database-table-mariadb:$TAG  the Python MariaDB plugin: Debian's python3, its
#       requirements' wheels for that Python (no pip in the image), its files and
#       the CNPG-I and registration stubs generated here (grpcio-tools)
#   database-table-naming:$TAG   the Go naming plugin, `go build` here (static,
#       CGO_ENABLED=0) on the distroless stand-in below
#
# The Dockerfile's FROM images are made here from mmdebstrap roots of Debian
# $DEBIAN_SUITE (cached as tarballs under $RK_CACHE/roots), under the names the
# Dockerfile uses:
#   rust:<this machine's rustc X.Y>-bookworm  the root + gcc + this machine's
#       Rust toolchain + the workspace's dependencies (`cargo vendor --locked`)
#       as a source replacement, so `cargo build --locked` needs no network;
#       built with --build-arg RUST_VERSION=X.Y.
#   gcr.io/distroless/cc-debian12:nonroot  the root (glibc, CA certificates)
#       and the user nonroot 65532: a local stand-in for distroless, which
#       no registry here serves.
#
#   tests/realkube/images.sh             (root; cold ~10 min on 2 cores, warm ~1-3 min)
#   tests/realkube/images.sh --archives  only the archives of PostgreSQL, moto,
#       MariaDB and plugin-barman-cloud (no dockerd): what node-image.sh preloads. CI makes them first, so
#       that the node image is built beside the project's images, not after them.
set -euo pipefail
archives_only=0
case "${1:-}" in
"") ;;
--archives) archives_only=1 ;;
*) echo "usage: images.sh [--archives]" >&2; exit 2 ;;
esac
# shellcheck source=tests/realkube/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/lib/go-env.sh
source "$(dirname "$0")/../lib/go-env.sh"
[ "$(id -u)" = 0 ] || rk_die "images.sh needs root (mmdebstrap, dockerd)"
tools=("$DOCKER_BIN" python3)
[ "$RK_UPSTREAM_IMAGES" = 1 ] || tools+=(mmdebstrap dockerd cargo rustc)
for b in "${tools[@]}"; do
  command -v "$b" >/dev/null || rk_die "missing $b (apt-get install mmdebstrap docker.io; cargo and rustc from rustup)"
done
TAG=${RK_IMAGE_TAG:-realkube}
mkdir -p "$RK_CACHE/roots" "$RK_CACHE/images"
work=$(mktemp -d "${TMPDIR:-/tmp}/cnpgi-realkube-images.XXXXXX")
started_dockerd=0
cleanup() {
  local code=$?
  rm -rf "$work"
  if [ "$started_dockerd" = 1 ]; then bash "$RK_DIR/dockerd.sh" stop || code=1; fi
  [ "$code" = 0 ] || rk_log "images.sh failed (exit $code)"
  exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM


# debian_images: PostgreSQL's and moto's images, as archives (pg_tar, moto_tar)
debian_images() {
# --- PostgreSQL 15 from Debian: postgres is 26:26 (CloudNativePG's uid, the
# instance Pods' runAsUser), no cluster of the package's own.
pg_tar="$RK_CACHE/images/$(tr '/:' '__' <<<"$RK_POSTGRES_IMAGE").tar"
if [ ! -s "$pg_tar" ]; then
  d="$work/postgresql"
  rk_unpack "$(rk_root postgresql "ca-certificates,postgresql-15")" "$d"
  old_uid=$(awk -F: '$1 == "postgres" {print $3}' "$d/etc/passwd")
  old_gid=$(awk -F: '$1 == "postgres" {print $3}' "$d/etc/group")
  if [ -z "$old_uid" ] || [ -z "$old_gid" ]; then rk_die "the postgresql-15 root has no postgres user"; fi
  sed -i "s/^postgres:x:$old_uid:$old_gid:/postgres:x:26:26:/" "$d/etc/passwd"
  sed -i "s/^postgres:x:$old_gid:/postgres:x:26:/" "$d/etc/group"
  find "$d" -xdev -uid "$old_uid" -exec chown -h 26 {} +
  find "$d" -xdev -gid "$old_gid" -exec chgrp -h 26 {} +
  rm -rf "$d/var/lib/postgresql/15" "$d/etc/postgresql/15"   # the package's own cluster
  python3 "$RK_DIR/mkimage.py" "$d" "$RK_POSTGRES_IMAGE" "$pg_tar" --user 26:26 \
    --env PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 >/dev/null || rk_die "cannot write the image $RK_POSTGRES_IMAGE"
  rm -rf "$d"
fi

# --- moto's S3 server (the wal-archive scenario's bucket), from PyPI's wheels
# for Debian's python3, unpacked into its dist-packages (no pip in the image)
moto_tar="$RK_CACHE/images/$(tr '/:' '__' <<<"$RK_MOTO_IMAGE").tar"
if [ ! -s "$moto_tar" ]; then
  d="$work/moto"
  rk_unpack "$(rk_root python "ca-certificates,python3")" "$d"
  py=$(rk_root_python "$d")
  rk_wheels_for "${py#python}" "$work/wheels" "moto[server]==$MOTO_VERSION" ||
    rk_die "pip download of moto[server]==$MOTO_VERSION failed"
  rk_unpack_wheels "$work/wheels" "$d/usr/local/lib/$py/dist-packages" || rk_die "cannot unpack moto's wheels"
  chmod -R a+rX "$d/usr/local/lib/$py"
  echo "moto:x:65532:65532:moto:/tmp:/usr/sbin/nologin" >>"$d/etc/passwd"
  echo "moto:x:65532:" >>"$d/etc/group"
  printf '#!/bin/sh\nexec python3 -m moto.server -H 0.0.0.0 -p 5000 "$@"\n' >"$d/usr/local/bin/moto-server"
  chmod 0755 "$d/usr/local/bin/moto-server"
  python3 "$RK_DIR/mkimage.py" "$d" "$RK_MOTO_IMAGE" "$moto_tar" --user 65532:65532 --workdir /tmp \
    --entrypoint /usr/local/bin/moto-server >/dev/null || rk_die "cannot write the image $RK_MOTO_IMAGE"
  rm -rf "$d" "$work/wheels"
fi

# --- MariaDB from Debian's mariadb-server (the DatabaseTable scenario's second
# server): mysql is 999:999 (the official image's), no data directory of the
# package's own; mariadb-entrypoint.sh makes it on first start and the database
# and user of MARIADB_DATABASE/_USER/_PASSWORD, then runs mariadbd on 3306.
mariadb_tar=$(rk_image_archive "$RK_MARIADB_IMAGE")
started=$(date +%s)   # the root's mmdebstrap included, when it is not cached
mariadb_root=$(rk_root mariadb "ca-certificates,mariadb-server")
mariadb_key="$(basename "$mariadb_root" .tar) $(sha256sum "$RK_DIR/mariadb-entrypoint.sh" | cut -c1-16)"
if [ ! -s "$mariadb_tar" ] || [ "$(cat "$mariadb_tar.key" 2>/dev/null)" != "$mariadb_key" ]; then
  d="$work/mariadb"
  rk_unpack "$mariadb_root" "$d"
  old_uid=$(awk -F: '$1 == "mysql" {print $3}' "$d/etc/passwd")
  old_gid=$(awk -F: '$1 == "mysql" {print $3}' "$d/etc/group")
  if [ -z "$old_uid" ] || [ -z "$old_gid" ]; then rk_die "the mariadb-server root has no mysql user"; fi
  sed -i "s/^mysql:x:$old_uid:$old_gid:/mysql:x:999:999:/" "$d/etc/passwd"
  sed -i "s/^mysql:x:$old_gid:/mysql:x:999:/" "$d/etc/group"
  find "$d" -xdev -uid "$old_uid" -exec chown -h 999 {} +
  find "$d" -xdev -gid "$old_gid" -exec chgrp -h 999 {} +
  rm -rf "$d/var/lib/mysql" "$d/run/mysqld"   # the package's own data directory
  mkdir -p "$d/var/lib/mysql" "$d/run/mysqld"
  chown 999:999 "$d/var/lib/mysql" "$d/run/mysqld"
  install -m 0755 "$RK_DIR/mariadb-entrypoint.sh" "$d/usr/local/bin/mariadb-entrypoint"
  python3 "$RK_DIR/mkimage.py" "$d" "$RK_MARIADB_IMAGE" "$mariadb_tar" --user 999:999 --workdir /var/lib/mysql \
    --env LANG=C.UTF-8 --entrypoint /usr/local/bin/mariadb-entrypoint >/dev/null || rk_die "cannot write the image $RK_MARIADB_IMAGE"
  echo "$mariadb_key" >"$mariadb_tar.key"
  rm -rf "$d"
  rk_log "$RK_MARIADB_IMAGE built in $(( $(date +%s) - started )) s"
fi

# --- plugin-barman-cloud's plugin and sidecar (barman.sh: its manager from the
# Go module proxy; the sidecar on moto's python root with the release's wheels)
mapfile -t barman_tars < <(bash "$RK_DIR/barman.sh" image)
[ "${#barman_tars[@]}" = 2 ] || rk_die "tests/realkube/barman.sh image did not make plugin-barman-cloud's two images"
}
[ "$RK_UPSTREAM_IMAGES" = 1 ] || debian_images
[ "$archives_only" = 0 ] || exit 0

# --- the tests' dockerd
if ! rk_docker version >/dev/null 2>&1; then
  bash "$RK_DIR/dockerd.sh" start || rk_die "cannot start the tests' dockerd"
  started_dockerd=1
fi
docker() { rk_docker "$@"; }
if [ "$RK_UPSTREAM_IMAGES" = 0 ]; then
  for tar in "$pg_tar" "$moto_tar" "$mariadb_tar" "${barman_tars[@]}"; do
    docker load -q -i "$tar" >/dev/null || rk_die "docker load -i $tar failed"
  done
fi
# image_key IMAGE: the key it was made with (a label), or nothing
image_key() { docker image inspect -f '{{ index .Config.Labels "cnpgi.realkube.key" }}' "$1" 2>/dev/null || true; }

build_args=()
# local_bases: the Dockerfile's FROM images, made here (no registry serves them)
local_bases() {
# --- the runtime stage's base
runtime=gcr.io/distroless/cc-debian12:nonroot
runtime_root=$(rk_root base "ca-certificates")
runtime_key=$(basename "$runtime_root" .tar)
if [ "$(image_key "$runtime")" != "$runtime_key" ]; then
  d="$work/runtime"
  rk_unpack "$runtime_root" "$d"
  echo "nonroot:x:65532:65532:nonroot:/home/nonroot:/usr/sbin/nologin" >>"$d/etc/passwd"
  echo "nonroot:x:65532:" >>"$d/etc/group"
  mkdir -p "$d/home/nonroot" && chown 65532:65532 "$d/home/nonroot"
  tar -C "$d" --numeric-owner -c . | docker import --change "USER 65532:65532" \
    --change "LABEL cnpgi.realkube.key=$runtime_key" - "$runtime" >/dev/null || rk_die "docker import of $runtime failed"
  rm -rf "$d"
fi

# --- the build stage's base: this machine's Rust toolchain and the vendored
# dependencies (not for prebuilt binaries: BuildKit skips that stage)
rust_version=$(rustc --version | awk '{print $2}')
rust_minor=${rust_version%.*}
[ -z "$RK_PREBUILT" ] || return 0
toolchain=$(dirname "$(dirname "$(rustup which rustc 2>/dev/null || command -v rustc)")")
[ -x "$toolchain/bin/cargo" ] || rk_die "no cargo beside rustc in $toolchain"
builder="rust:$rust_minor-bookworm"
build_root=$(rk_root build "ca-certificates,gcc,libc6-dev")
builder_key="$(basename "$build_root" .tar)-rust-$rust_version-lock-$(sha256sum "$RK_REPO/Cargo.lock" | cut -c1-12)"
if [ "$(image_key "$builder")" != "$builder_key" ]; then
  d="$work/builder"
  rk_unpack "$build_root" "$d"
  mkdir -p "$d/usr/local/rust" "$d/usr/local/cargo/bin"
  cp -a "$toolchain/bin" "$toolchain/lib" "$toolchain/libexec" "$d/usr/local/rust/" 2>/dev/null ||
    cp -a "$toolchain/bin" "$toolchain/lib" "$d/usr/local/rust/"
  (cd "$RK_REPO" && cargo vendor --locked --versioned-dirs "$d/usr/local/cargo-vendor" >"$work/vendor.log" 2>&1) ||
    rk_die "cargo vendor --locked failed (the dependencies of Cargo.lock must be downloadable once)"
  cat >"$d/usr/local/cargo/config.toml" <<'TOML'
# Offline builds: every dependency of the workspace's Cargo.lock is vendored here.
[source.crates-io]
replace-with = "vendored-sources"
[source.vendored-sources]
directory = "/usr/local/cargo-vendor"
TOML
  tar -C "$d" --numeric-owner -c . | docker import \
    --change "ENV PATH=/usr/local/cargo/bin:/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    --change "ENV CARGO_HOME=/usr/local/cargo" --change "ENV RUST_VERSION=$rust_version" \
    --change "LABEL cnpgi.realkube.key=$builder_key" - "$builder" >/dev/null || rk_die "docker import of $builder failed"
  rm -rf "$d"
fi
}
if [ "$RK_UPSTREAM_IMAGES" = 0 ]; then
  local_bases
  build_args=(--build-arg "RUST_VERSION=$rust_minor")
fi
if [ -n "$RK_PREBUILT" ]; then
  # The binaries given, staged as the task does it (its checks included).
  (cd "$RK_REPO" && task prebuilt PREBUILT="$RK_PREBUILT" BINS="$RK_BINS") || rk_die "task prebuilt PREBUILT=$RK_PREBUILT failed"
  build_args+=(--build-arg BUILD=prebuilt)
fi
# --- the project's images, from its Dockerfile with the arguments of `task
# images` (RK_BINS and RK_CARGO_PROFILE are the task's BINS and CARGO_PROFILE):
# the build stage compiles the five binaries at once and does not depend on
# BIN, so the first build compiles and the others reuse its layer, as does the
# task's own build later. The tests build the `dev` profile (users' default is
# release, whose thin LTO and single codegen unit cost minutes on 2 cores).
for bin in cnpgi-operator cnpg-i-hello-world cnpgi-wal-archive database-table-operator database-table-postgres; do
  started=$(date +%s)
  rk_log "docker build --build-arg BIN=$bin -t $bin:$TAG ."
  docker build --build-arg "BINS=$RK_BINS" --build-arg "CARGO_PROFILE=$RK_CARGO_PROFILE" \
    "${build_args[@]}" --build-arg "BIN=$bin" -t "$bin:$TAG" "$RK_REPO" \
    >"$work/build-$bin.log" 2>&1 || { tail -n 40 "$work/build-$bin.log" >&2; rk_die "docker build of $bin failed"; }
  rk_log "$bin:$TAG built in $(( $(date +%s) - started )) s"
done

# --- the DatabaseTable example's plugins in Python and Go, each remade only when
# its key changes (its files, its base image, the tools that build it)
# build_image NAME KEY CONTEXT LINE...: docker build of CONTEXT with the Dockerfile
# "FROM ..." LINE..., labelled with KEY (no RUN step: nothing runs in the build)
build_image() {
  local name=$1 key=$2 ctx=$3
  shift 3
  { printf '%s\n' "$@"; echo "LABEL cnpgi.realkube.key=$key"; } >"$ctx/Dockerfile"
  docker build -q -t "$name" "$ctx" >/dev/null || rk_die "docker build of $name failed (context $ctx)"
}
# tree_key DIR...: a key of the files under DIR... (their paths and contents)
# and of this script (how they are built)
tree_key() {
  { (cd "$RK_REPO" && find "$@" -type f ! -path '*/__pycache__/*' ! -path '*/cnpgi_stubs/*' -print0 | LC_ALL=C sort -z |
    xargs -0 sha256sum); sha256sum "$RK_DIR/images.sh"; } | sha256sum | cut -c1-16
}

# The naming plugin (Go, upstream's cnpg-i module): a static binary built here,
# on the runtime base above (the distroless stand-in; with RK_UPSTREAM_IMAGES=1
# the real one).
naming_dir=examples/database-table/plugins/naming
command -v go >/dev/null || rk_die "go is required to build the naming plugin ($naming_dir)"
naming_key="$(tree_key "$naming_dir")-$(go env GOVERSION)-$(image_key gcr.io/distroless/cc-debian12:nonroot)"
if [ "$(image_key "database-table-naming:$TAG")" != "$naming_key" ]; then
  started=$(date +%s)
  ctx="$work/naming"
  mkdir -p "$ctx"
  mains=$(cd "$RK_REPO/$naming_dir" && go list -f '{{if eq .Name "main"}}{{.ImportPath}}{{end}}' ./...) ||
    rk_die "go list in $naming_dir failed"
  [ "$(wc -w <<<"$mains")" = 1 ] || rk_die "$naming_dir has not exactly one main package: ${mains:-none}"
  (cd "$RK_REPO/$naming_dir" && CGO_ENABLED=0 \
    go build -ldflags="-s -w" -o "$ctx/naming" "$mains") >"$work/build-naming.log" 2>&1 ||
    { tail -n 30 "$work/build-naming.log" >&2; rk_die "go build of the naming plugin ($naming_dir) failed"; }
  build_image "database-table-naming:$TAG" "$naming_key" "$ctx" "FROM gcr.io/distroless/cc-debian12:nonroot" \
    "COPY naming /usr/local/bin/naming" "USER 65532:65532" 'ENTRYPOINT ["/usr/local/bin/naming"]'
  rk_log "database-table-naming:$TAG built in $(( $(date +%s) - started )) s"
fi

# The MariaDB plugin (Python, grpcio and PyMySQL): its requirements' wheels for
# the image's Python unpacked under /opt/database-table-mariadb/lib (no pip in the
# image), its files, and the protocol stubs generated here by its stubs.py with
# those same wheels (grpcio-tools): CNPGI_STUBS_DIR. Python 3.11: bookworm's.
mariadb_dir=examples/database-table/plugins/mariadb
py_version=3.11
if [ "$RK_UPSTREAM_IMAGES" = 1 ]; then
  py_base=python:$py_version-slim-bookworm
else
  py_base=localhost/cnpgi-python:$DEBIAN_SUITE
  py_root=$(rk_root python "ca-certificates,python3")
  py_root_key=$(basename "$py_root" .tar)
  if [ "$(image_key "$py_base")" != "$py_root_key" ]; then
    d="$work/python-root"
    rk_unpack "$py_root" "$d"
    [ -x "$d/usr/bin/python$py_version" ] || rk_die "the python root has no python$py_version"
    echo "nonroot:x:65532:65532:nonroot:/home/nonroot:/usr/sbin/nologin" >>"$d/etc/passwd"
    echo "nonroot:x:65532:" >>"$d/etc/group"
    mkdir -p "$d/home/nonroot" && chown 65532:65532 "$d/home/nonroot"
    tar -C "$d" --numeric-owner -c . | docker import --change "USER 65532:65532" \
      --change "LABEL cnpgi.realkube.key=$py_root_key" - "$py_base" >/dev/null || rk_die "docker import of $py_base failed"
    rm -rf "$d"
  fi
fi
[ -f "$RK_REPO/$mariadb_dir/requirements.txt" ] || rk_die "no $mariadb_dir/requirements.txt"
mariadb_plugin_key="$(tree_key "$mariadb_dir" proto)-$(image_key "$py_base" || echo "$py_base")"
if [ "$(image_key "database-table-mariadb:$TAG")" != "$mariadb_plugin_key" ]; then
  started=$(date +%s)
  ctx="$work/mariadb-plugin"
  mkdir -p "$ctx/lib" "$ctx/plugin"
  rk_wheels_for "$py_version" "$work/mariadb-wheels" -r "$RK_REPO/$mariadb_dir/requirements.txt" ||
    rk_die "pip download of $mariadb_dir/requirements.txt for Python $py_version failed"
  rk_unpack_wheels "$work/mariadb-wheels" "$ctx/lib" || rk_die "cannot unpack the MariaDB plugin's wheels"
  (cd "$RK_REPO/$mariadb_dir" && find . -type f \( -name '*.py' -o -name 'requirements.txt' \) ! -path '*/cnpgi_stubs/*' \
    ! -path '*/__pycache__/*' ! -path './tests/*' -print0 | xargs -0 cp --parents -t "$ctx/plugin") ||
    rk_die "cannot copy $mariadb_dir"
  # The stubs, by the requirements' grpcio-tools (for this machine's python3,
  # whatever its version: the generated modules are plain Python, for the
  # image's protobuf of the same requirements).
  python3 -m pip download -q --disable-pip-version-check --only-binary=:all: -d "$work/stub-wheels" \
    -r "$RK_REPO/$mariadb_dir/requirements.txt" >&2 || rk_die "pip download of $mariadb_dir/requirements.txt for this machine failed"
  rk_unpack_wheels "$work/stub-wheels" "$work/stub-tools" || rk_die "cannot unpack grpcio-tools' wheels"
  PYTHONPATH="$work/stub-tools" python3 "$ctx/plugin/stubs.py" "$ctx/stubs" --proto "$RK_REPO/proto" >&2 ||
    rk_die "stubs.py could not generate the MariaDB plugin's stubs"
  find "$ctx" -name __pycache__ -prune -exec rm -rf {} +
  chmod -R a+rX "$ctx"
  build_image "database-table-mariadb:$TAG" "$mariadb_plugin_key" "$ctx" "FROM $py_base" \
    "COPY lib /opt/database-table-mariadb/lib" "COPY plugin /opt/database-table-mariadb/plugin" \
    "COPY stubs /opt/database-table-mariadb/stubs" \
    "ENV PYTHONPATH=/opt/database-table-mariadb/lib CNPGI_STUBS_DIR=/opt/database-table-mariadb/stubs PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1" \
    "USER 65532:65532" "WORKDIR /tmp" 'ENTRYPOINT ["python3", "/opt/database-table-mariadb/plugin/mariadb.py"]'
  rk_log "database-table-mariadb:$TAG built in $(( $(date +%s) - started )) s"
fi
