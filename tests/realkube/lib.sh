# shellcheck shell=bash
# shellcheck disable=SC2034  # the settings are used by the scripts that source this file
# Settings and helpers shared by tests/realkube/*.sh (sourced). Every setting
# can be overridden from the environment.

RK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RK_REPO="$(cd "$RK_DIR/../.." && pwd)"

RK_STATE=${RK_STATE:-/tmp/cnpgi-realkube}          # certificates, etcd, logs, kubeconfig, pids
RK_RUN=${RK_RUN:-/run/cnpgi-realkube}              # containerd socket and state, kubelet runtime files
RK_LIB=${RK_LIB:-/var/lib/cnpgi-realkube}          # containerd root (image store), kubelet root, CNI
RK_CACHE=${RK_CACHE:-$HOME/.cache/cnpgi-realkube}  # debootstrap roots and images, by version
RK_BRIDGE=${RK_BRIDGE:-cnpgirk0}                   # the Pods' bridge; attached to no NIC
RK_POD_CIDR=${RK_POD_CIDR:-10.244.0.0/24}
RK_NODE_IP=${RK_NODE_IP:-10.244.0.1}               # the bridge's address: node IP and API server address
RK_SVC_CIDR=${RK_SVC_CIDR:-10.96.0.0/16}
RK_SVC_IP=${RK_SVC_IP:-10.96.0.1}                  # the `kubernetes` Service
RK_DNS_IP=${RK_DNS_IP:-10.96.0.10}                 # the kube-dns Service (CoreDNS)
RK_ETCD_PORT=${RK_ETCD_PORT:-32379}
RK_ETCD_PEER_PORT=${RK_ETCD_PEER_PORT:-32380}
RK_API_PORT=${RK_API_PORT:-36443}
RK_NODE_NAME=${RK_NODE_NAME:-cnpgi-realkube}

KUBE_VERSION=${KUBE_VERSION:-v1.34.4}
COREDNS_VERSION=${COREDNS_VERSION:-v1.12.4}
# The newest cert-manager release whose commands are in its main Go module:
# from v1.12 on, cmd/controller and cmd/cainjector are separate modules that
# are not published on the Go module proxy (only github.com/cert-manager/cert-manager is).
CERT_MANAGER_VERSION=${CERT_MANAGER_VERSION:-v1.11.5}
DEBIAN_SUITE=${DEBIAN_SUITE:-bookworm}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

# Images that no Dockerfile of this project builds (tests/realkube/mkimage.py).
# The pause image keeps its upstream name: the hello-world plugin's sidecar
# names it, and it is also the Pods' sandbox image.
RK_PAUSE_IMAGE=registry.k8s.io/pause:3.10
RK_COREDNS_IMAGE=localhost/coredns:$COREDNS_VERSION
RK_CM_CONTROLLER_IMAGE=localhost/cert-manager-controller:$CERT_MANAGER_VERSION
RK_CM_CAINJECTOR_IMAGE=localhost/cert-manager-cainjector:$CERT_MANAGER_VERSION
RK_POSTGRES_IMAGE=${RK_POSTGRES_IMAGE:-localhost/postgresql:15}
# The real CloudNativePG (tests/realkube/cnpg.sh), its operator image built here.
CNPG_VERSION=${CNPG_VERSION:-v1.30.0}
RK_CNPG_IMAGE=${RK_CNPG_IMAGE:-localhost/cloudnative-pg:$CNPG_VERSION}
# The S3 store of the wal-archive scenario: moto's server (tests/realkube/moto.sh).
MOTO_VERSION=${MOTO_VERSION:-5.2.1}
RK_MOTO_IMAGE=${RK_MOTO_IMAGE:-localhost/moto:$MOTO_VERSION}

rk_log() { echo "realkube: $*" >&2; }
rk_die() { rk_log "$*"; exit 1; }

# The node's containerd, in the k8s.io namespace the kubelet uses.
rk_ctr() { ctr --address "$RK_RUN/containerd.sock" -n k8s.io "$@"; }

# The admin kubeconfig of the running node, and kubectl built with the node.
RK_KUBECONFIG="$RK_STATE/kubeconfig"
rk_kubectl_bin() { echo "${CNPGI_E2E_CACHE:-$HOME/.cache/cnpgi-e2e}/kubectl-$KUBE_VERSION/kubectl"; }
rk_kubectl() { "$(rk_kubectl_bin)" --kubeconfig "$RK_KUBECONFIG" "$@"; }

# rk_pid NAME: the PID up.sh recorded for NAME.
rk_pid() { awk -v n="$1" '$1 == n {print $2}' "$RK_STATE/pids" 2>/dev/null; }

# rk_ours PID: true when PID is alive and its command line names one of our
# directories (a PID reused by an unrelated process is never signalled).
rk_ours() {
  [ -n "$1" ] && [ -r "/proc/$1/cmdline" ] &&
    tr '\0' ' ' <"/proc/$1/cmdline" | grep -qE -- "$RK_STATE/|$RK_RUN/|$RK_LIB/"
}

# rk_import TAR...: loads image archives into the node's containerd.
rk_import() {
  local tar
  for tar in "$@"; do
    [ -s "$tar" ] || rk_die "image archive $tar is missing"
    rk_ctr images import "$tar" >/dev/null ||
      rk_die "containerd could not import $tar"
  done
}
