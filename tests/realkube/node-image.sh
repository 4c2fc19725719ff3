#!/usr/bin/env bash
# kind's node image, made on this machine from Debian's packages and the Go module
# proxy only, in the tests' dockerd (tests/realkube/dockerd.sh), with kind's own builder:
#   1. the base image $RK_KIND_BASE_IMAGE (what docker.io/kindest/base holds): a
#      mmdebstrap root with the packages of kind's images/base/Dockerfile, Debian's
#      runc and CNI plugins, containerd 2 and crictl (build-kind-tools.sh), and kind's
#      images/base/files arranged as that Dockerfile's RUN steps do; four changes for
#      these machines, each commented below;
#   2. a Kubernetes release tarball (kubernetes/version, server/bin/{kubeadm,kubelet,
#      kubectl} and the control-plane image archives) from tests/e2e/build-kube.sh
#      --node's binaries, each image an mmdebstrap root plus one binary (no RUN step);
#   3. kind build node-image --type file TARBALL --base-image $RK_KIND_BASE_IMAGE
#      --image $RK_KIND_NODE_IMAGE.
# Preloaded in the node (kind counts them as built, so nothing is ever pulled):
# kubeadm's images (etcd, CoreDNS, pause) under the names kubeadm $KUBE_VERSION uses,
# kind's (kindnetd, local-path-provisioner and its helper), cert-manager's controller
# and cainjector, PostgreSQL, moto, MariaDB, plugin-barman-cloud's two images and
# CloudNativePG's operator (images.sh, barman.sh, cnpg.sh). The project's own
# images change with its sources: `kind load` (up.sh).
# What is not the real component, and why:
#   kindnetd   kind/kindnetd, a stand-in (sigs.k8s.io/kind/images/kindnetd and
#              github.com/aojea/kindnet are not served by the Go module proxy): it
#              writes kindnetd's CNI configuration for the node's podCIDR, which is
#              all kindnetd does on a one-node cluster
#   CoreDNS    $COREDNS_VERSION with the plugins of kubeadm's Corefile only
#              (coredns/main.go), tagged as the version kubeadm names
# The result is cached: it is remade when a version, this script or a file of
# tests/realkube/kind changes (the key is in $RK_CACHE/kind-node-image.key).
#
#   tests/realkube/node-image.sh     (root; dockerd running; cold ~8 min, cached 0 s)
set -euo pipefail
# shellcheck source=tests/realkube/lib.sh
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || rk_die "node-image.sh needs root (mmdebstrap, chroot)"
rk_docker version >/dev/null 2>&1 || rk_die "the tests' dockerd is not running (tests/realkube/dockerd.sh start)"
docker() { rk_docker "$@"; }
cache=${CNPGI_E2E_CACHE:-$HOME/.cache/cnpgi-e2e}
export PATH
PATH=$(rk_tools_path)
# shellcheck source=tests/lib/go-env.sh
source "$(dirname "$0")/../lib/go-env.sh"
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}

bin() { [ -x "$1" ] || rk_die "missing $1 (tests/e2e/build-kube.sh --node, tests/realkube/build-addons.sh, build-kind-tools.sh)"; echo "$1"; }
kbin() { bin "$cache/$1-$KUBE_VERSION/$1"; }
KUBEADM=$(kbin kubeadm)
CRICTL=$(bin "$cache/crictl-$CRICTL_VERSION/crictl")
CONTAINERD=$cache/containerd-$CONTAINERD_VERSION
bin "$CONTAINERD/containerd" >/dev/null
LPP=$(bin "$cache/local-path-provisioner-$LPP_VERSION/local-path-provisioner")
ETCD=$(bin "$cache/etcd-$ETCD_VERSION/etcd")
COREDNS=$(bin "$cache/coredns-kubeadm-$COREDNS_VERSION/coredns")
CM_CONTROLLER=$(bin "$cache/cert-manager-$CERT_MANAGER_VERSION/controller")
CM_CAINJECTOR=$(bin "$cache/cert-manager-$CERT_MANAGER_VERSION/cainjector")
bin "$cache/kind-$KIND_VERSION/kind" >/dev/null
cnpg_tar=$(rk_image_archive "$RK_CNPG_IMAGE")
preloaded=("$cnpg_tar" "$(rk_image_archive "$RK_POSTGRES_IMAGE")" "$(rk_image_archive "$RK_MOTO_IMAGE")" "$(rk_image_archive "$RK_MARIADB_IMAGE")"
  "$(rk_image_archive "$RK_BARMAN_IMAGE")" "$(rk_image_archive "$RK_BARMAN_SIDECAR_IMAGE")")
for tar in "${preloaded[@]}"; do
  [ -s "$tar" ] || rk_die "missing $tar (tests/realkube/images.sh, barman.sh image, cnpg.sh image)"
done

key=$(
  echo "$KIND_VERSION $KUBE_VERSION $ETCD_VERSION $COREDNS_VERSION $CRICTL_VERSION $CONTAINERD_VERSION $LPP_VERSION $CERT_MANAGER_VERSION $DEBIAN_SUITE"
  sha256sum "$0" "$RK_DIR"/kind/* "${preloaded[@]}" | cut -c1-64
)
key=$(sha256sum <<<"$key" | cut -c1-16)
if [ "$(cat "$RK_CACHE/kind-node-image.key" 2>/dev/null)" = "$key" ] && docker image inspect "$RK_KIND_NODE_IMAGE" >/dev/null 2>&1; then
  exit 0
fi
started=$(date +%s)
w=$(mktemp -d "${TMPDIR:-/tmp}/cnpgi-node-image.XXXXXX")
trap 'rm -rf "$w"' EXIT
kind_dir=$(cd "$w" && go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
files=$kind_dir/images/base/files
[ -f "$files/usr/local/bin/entrypoint" ] || rk_die "no images/base/files in sigs.k8s.io/kind@$KIND_VERSION"

# --- 1. the base image
# kind's package list minus nfs-common, open-iscsi and fuse-overlayfs (storage tests and
# rootless only), plus what kind builds from GitHub sources (runc, CNI plugins)
d=$w/base
rk_unpack "$(rk_root node systemd,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,e2fsprogs,bash,ca-certificates,curl,jq,procps,runc,containernetworking-plugins)" "$d"
install -m 0755 "$files"/usr/local/bin/* "$d/usr/local/bin/"
mkdir -p "$d/kind" "$d/LICENSES" "$d/etc/containerd" "$d/etc/default" "$d/etc/sysctl.d" "$d/etc/systemd/system/kubelet.service.d"
cp -r "$files/kind/." "$d/kind/"
find "$d/kind" -type f -exec chmod 0644 {} + && chmod 0755 "$d/kind" "$d/kind/bin" "$d"/kind/bin/*
install -m 0644 "$files"/LICENSES/* "$d/LICENSES/"
install -m 0644 "$files"/etc/crictl.yaml "$d/etc/"
install -m 0644 "$files"/etc/containerd/* "$d/etc/containerd/"
install -m 0644 "$files"/etc/default/* "$d/etc/default/"
install -m 0644 "$files"/etc/sysctl.d/* "$d/etc/sysctl.d/"
install -m 0644 "$files"/etc/systemd/system/*.service "$files"/etc/systemd/system/*.slice "$d/etc/systemd/system/"
install -m 0644 "$files"/etc/systemd/system/kubelet.service.d/* "$d/etc/systemd/system/kubelet.service.d/"
find "$d/lib/systemd/system/sysinit.target.wants/" -name "systemd-tmpfiles-setup.service" -delete
rm -f "$d"/lib/systemd/system/multi-user.target.wants/* "$d"/etc/systemd/system/*.wants/* \
  "$d"/lib/systemd/system/local-fs.target.wants/* "$d"/lib/systemd/system/sockets.target.wants/*udev* \
  "$d"/lib/systemd/system/sockets.target.wants/*initctl* "$d"/lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >>"$d/etc/systemd/journald.conf"
[ -e "$d/sbin/init" ] || ln -s /usr/lib/systemd/systemd "$d/sbin/init"
chroot "$d" systemctl enable kubelet.service containerd.service undo-mount-hacks.service >/dev/null 2>&1
chroot "$d" systemctl mask systemd-binfmt.service >/dev/null 2>&1
mkdir -p "$d/etc/kubernetes/manifests" "$d/opt/cni/bin"
install -m 0755 "$CONTAINERD/containerd" "$CONTAINERD/ctr" "$CONTAINERD/containerd-shim-runc-v2" "$CRICTL" "$d/usr/local/bin/"
for p in host-local loopback ptp portmap bridge; do cp "$d/usr/lib/cni/$p" "$d/opt/cni/bin/$p"; done
chroot "$d" ctr oci spec |
  jq '.hooks.createContainer[.hooks.createContainer| length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' |
  jq 'del(.process.rlimits)' >"$d/etc/containerd/cri-base.json"
# Changes for these machines:
# 1. root lacks CAP_SYS_RESOURCE: runc cannot set a sandbox's oom_score_adj to -998 and
#    every Pod fails ("can't get final child's PID from pipe: EOF"); kind sets this only
#    for rootless nodes.
sed -i 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' "$d/etc/containerd/config.toml"
grep -q 'restrict_oom_score_adj = true' "$d/etc/containerd/config.toml" || rk_die "cannot set restrict_oom_score_adj in kind's containerd config"
# 2. no containerd-fuse-overlayfs (rootless only): drop its proxy plugin
sed -i '/^\[proxy_plugins\]/,/^  address = /d' "$d/etc/containerd/config.toml"
# 3. kubeadm's preflight needs net.ipv4.ip_forward=1 in the node; the dockerd runs with
#    --ip-forward=false and the host keeps 0: set in the node's own network namespace.
echo "net.ipv4.ip_forward=1" >"$d/etc/sysctl.d/99-ip-forward.conf"
# 4. the node is privileged: systemd-sysctl would write Debian's defaults of global
#    kernel settings (kernel.pid_max, fs.protected_*) into the host's kernel. Only kind's
#    /etc/sysctl.d files (per network namespace) and ours are kept.
rm -f "$d"/usr/lib/sysctl.d/*.conf "$d"/lib/sysctl.d/*.conf
tar -C "$d" --numeric-owner -c . | docker import - "$RK_KIND_BASE_IMAGE-rootfs" >/dev/null ||
  rk_die "docker import of $RK_KIND_BASE_IMAGE-rootfs failed"
rm -rf "$d"
# kind's Dockerfile's image settings (docker import --change refuses STOPSIGNAL)
mkdir -p "$w/base-ctx"
printf 'FROM %s\nENV container=docker\nSTOPSIGNAL SIGRTMIN+3\nENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]\n' \
  "$RK_KIND_BASE_IMAGE-rootfs" >"$w/base-ctx/Dockerfile"
docker build -q -t "$RK_KIND_BASE_IMAGE" "$w/base-ctx" >/dev/null || rk_die "docker build of $RK_KIND_BASE_IMAGE failed"

# --- 2. the images and the release tarball
const() { sed -n "s/^const $1 = \"\(.*\)\"\$/\1/p" "$kind_dir/pkg/build/nodeimage/$2"; }
KINDNETD_IMAGE=$(const kindnetdImage const_cni.go)
LPP_IMAGE=$(const storageProvisionerImage const_storage.go)
LPH_IMAGE=$(const storageHelperImage const_storage.go)
SANDBOX_IMAGE=$(sed -n 's/^ *sandbox_image = "\(.*\)"$/\1/p' "$files/etc/containerd/config.toml")
if [ -z "$KINDNETD_IMAGE" ] || [ -z "$LPP_IMAGE" ] || [ -z "$LPH_IMAGE" ] || [ -z "$SANDBOX_IMAGE" ]; then
  rk_die "cannot read the image names of sigs.k8s.io/kind@$KIND_VERSION"
fi
mapfile -t kubeadm_images < <("$KUBEADM" config images list --kubernetes-version "$KUBE_VERSION")
img() { printf '%s\n' "${kubeadm_images[@]}" | grep -E "/$1:" | head -n1; }
ETCD_IMAGE=$(img etcd); COREDNS_IMAGE=$(img coredns); PAUSE_IMAGE=$(img pause)
if [ -z "$ETCD_IMAGE" ] || [ -z "$COREDNS_IMAGE" ] || [ -z "$PAUSE_IMAGE" ]; then
  rk_die "kubeadm config images list gave no etcd, coredns or pause: ${kubeadm_images[*]}"
fi

base_tar=$(rk_root base ca-certificates)
net_tar=$(rk_root net ca-certificates,iptables,conntrack,curl,jq)
docker import - localhost/cnpgi-kind-root:base <"$base_tar" >/dev/null
rk_unpack "$net_tar" "$w/net"
# kube-proxy and the kindnetd stand-in: iptables as upstream's kube-proxy image picks it
install -m 0755 "$RK_DIR/kind/iptables-wrapper" "$w/net/usr/sbin/iptables-wrapper"
for c in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
  ln -sf /usr/sbin/iptables-wrapper "$w/net/etc/alternatives/$c"
done
tar -C "$w/net" --numeric-owner -c . | docker import - localhost/cnpgi-kind-root:net >/dev/null
rm -rf "$w/net"
# image NAME FROM FILE LINE...: FILE (a path, or -) copied into the context, then the lines
image() {
  local name=$1 from=$2 file=$3 ctx
  shift 3
  ctx=$w/ctx-$(tr '/:' '__' <<<"$name")
  mkdir -p "$ctx"
  [ "$file" = - ] || cp "$file" "$ctx/"
  { echo "FROM $from"; printf '%s\n' "$@"; } >"$ctx/Dockerfile"
  docker build -q -t "$name" "$ctx" >/dev/null || rk_die "docker build of $name failed"
}
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  image "registry.k8s.io/$c:$KUBE_VERSION" localhost/cnpgi-kind-root:base "$(kbin "$c")" "COPY $c /usr/local/bin/$c"
done
image "registry.k8s.io/kube-proxy:$KUBE_VERSION" localhost/cnpgi-kind-root:net "$(kbin kube-proxy)" "COPY kube-proxy /usr/local/bin/kube-proxy"
image "$ETCD_IMAGE" localhost/cnpgi-kind-root:base "$ETCD" "COPY etcd /usr/local/bin/etcd"
image "$COREDNS_IMAGE" localhost/cnpgi-kind-root:base "$COREDNS" "COPY coredns /coredns" 'ENTRYPOINT ["/coredns"]'
gcc -Os -static -o "$w/pause" "$RK_DIR/pause.c" || rk_die "cannot compile pause.c (gcc, libc6-dev)"
strip "$w/pause"
image "$PAUSE_IMAGE" scratch "$w/pause" "COPY pause /pause" "USER 65535:65535" 'ENTRYPOINT ["/pause"]'
docker tag "$PAUSE_IMAGE" "$SANDBOX_IMAGE"
docker tag "$PAUSE_IMAGE" "$RK_PAUSE_IMAGE"
image "$KINDNETD_IMAGE" localhost/cnpgi-kind-root:net "$RK_DIR/kind/kindnetd" "COPY kindnetd /bin/kindnetd" 'CMD ["/bin/kindnetd"]'
image "$LPP_IMAGE" localhost/cnpgi-kind-root:base "$LPP" "COPY local-path-provisioner /usr/local/bin/local-path-provisioner" \
  'ENTRYPOINT ["/usr/local/bin/local-path-provisioner"]'
image "$LPH_IMAGE" localhost/cnpgi-kind-root:base - "LABEL org.opencontainers.image.title=local-path-helper"
image "$RK_CM_CONTROLLER_IMAGE" localhost/cnpgi-kind-root:base "$CM_CONTROLLER" "COPY controller /controller" \
  "USER 65532:65532" 'ENTRYPOINT ["/controller"]'
image "$RK_CM_CAINJECTOR_IMAGE" localhost/cnpgi-kind-root:base "$CM_CAINJECTOR" "COPY cainjector /cainjector" \
  "USER 65532:65532" 'ENTRYPOINT ["/cainjector"]'
for tar in "${preloaded[@]}"; do
  docker load -q -i "$tar" >/dev/null || rk_die "docker load -i $tar failed"
done

k=$w/tgz/kubernetes
mkdir -p "$k/server/bin"
echo "$KUBE_VERSION" >"$k/version"
cp "$KUBEADM" "$(kbin kubelet)" "$(kbin kubectl)" "$k/server/bin/"
# Every preloaded image rides in kube-apiserver.tar, behind a `repositories` member:
# `kind build node-image` otherwise counts only an archive's first image as built and
# pulls the others (kind/archive-repositories-first.py).
docker save -o "$w/all.tar" "registry.k8s.io/kube-apiserver:$KUBE_VERSION" "$ETCD_IMAGE" "$COREDNS_IMAGE" \
  "$PAUSE_IMAGE" "$SANDBOX_IMAGE" "$RK_PAUSE_IMAGE" "$KINDNETD_IMAGE" "$LPP_IMAGE" "$LPH_IMAGE" \
  "$RK_CM_CONTROLLER_IMAGE" "$RK_CM_CAINJECTOR_IMAGE" "$RK_CNPG_IMAGE" "$RK_POSTGRES_IMAGE" "$RK_MOTO_IMAGE" "$RK_MARIADB_IMAGE" \
  "$RK_BARMAN_IMAGE" "$RK_BARMAN_SIDECAR_IMAGE" ||
  rk_die "docker save of the node's images failed"
python3 "$RK_DIR/kind/archive-repositories-first.py" "$w/all.tar" "$k/server/bin/kube-apiserver.tar" >/dev/null ||
  rk_die "cannot rewrite the images' archive for kind"
rm -f "$w/all.tar"
for c in kube-controller-manager kube-scheduler kube-proxy; do
  docker save -o "$k/server/bin/$c.tar" "registry.k8s.io/$c:$KUBE_VERSION" || rk_die "docker save of $c failed"
done
# Gzip without compression (stored blocks): kind reads only a gzipped tarball,
# and unpacks it a minute later. gzip -6 of its 3.4 GB of image archives held a
# core for over 100 s on the kind chain's critical path (24 MB/s here); stored,
# a few seconds.
tar -C "$w/tgz" -c kubernetes | python3 -c '
import gzip, shutil, sys
with gzip.GzipFile(sys.argv[1], "wb", compresslevel=0, mtime=0) as out:
    shutil.copyfileobj(sys.stdin.buffer, out, 1 << 20)' "$w/kubernetes-server-linux-amd64.tar.gz" ||
  rk_die "cannot write the Kubernetes release tarball for kind"
rm -rf "$w/tgz"

# --- 3. kind's builder
# TMPDIR: kind extracts the archive into a k8s-tar-extract-* directory of the
# temporary directory and never removes it (2.4 GB a build, which filled the
# disk of a machine that built the image a few times); in $w, the trap does.
TMPDIR="$w" kind build node-image --type file "$w/kubernetes-server-linux-amd64.tar.gz" \
  --base-image "$RK_KIND_BASE_IMAGE" --image "$RK_KIND_NODE_IMAGE" >"$w/kind-build.log" 2>&1 ||
  { tail -n 30 "$w/kind-build.log" >&2; rk_die "kind build node-image failed"; }
echo "$key" >"$RK_CACHE/kind-node-image.key"
rk_log "$RK_KIND_NODE_IMAGE built in $(( $(date +%s) - started )) s"
