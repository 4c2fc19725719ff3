#!/usr/bin/env bash
# Starts a real one-node Kubernetes on this machine, with no image registry:
#   containerd + runc (Debian) with the CRI plugin; a host-only bridge with the
#   Pod CIDR (CNI bridge + host-local + portmap from Debian); etcd,
#   kube-apiserver (on the bridge address, so Pods reach it through the
#   `kubernetes` Service), kube-controller-manager, kube-scheduler, kubelet
#   (cgroupfs; cgroup v1 accepted) and kube-proxy (iptables), all built from the
#   Go module proxy by tests/e2e/build-kube.sh --node; then the cluster add-ons:
#   CoreDNS behind the kube-dns Service, a default StorageClass `local` with
#   hostPath PersistentVolumes, and
#   cert-manager (controller and cainjector), both built from the Go module proxy.
#
#   tests/realkube/up.sh          # prints KUBECONFIG=... on stdout
#   tests/realkube/down.sh        # undoes all of it, failure included
#
# Needs root, one cluster at a time: refuses to start when a port it needs is
# taken or a previous state directory exists. On failure it runs down.sh.
# Every PID goes to $RK_STATE/pids; what it changed on the host (bridge,
# sysctls, /run/netns mount) to $RK_STATE/created and $RK_STATE/sysctl.orig.
set -euo pipefail
# shellcheck source=tests/realkube/lib.sh
source "$(dirname "$0")/lib.sh"
S=$RK_STATE
P=$S/pki

[ "$(id -u)" = 0 ] || rk_die "up.sh needs root (containerd, kubelet, bridge, iptables)"
for b in containerd runc ctr iptables ip conntrack openssl curl python3 gcc; do
  command -v "$b" >/dev/null || rk_die "missing $b (apt-get install containerd runc iptables iproute2 conntrack containernetworking-plugins openssl curl gcc)"
done
for plugin in bridge host-local portmap loopback; do
  [ -x "/usr/lib/cni/$plugin" ] || rk_die "missing /usr/lib/cni/$plugin (apt-get install containernetworking-plugins)"
done
[ -e "$S/pids" ] && rk_die "$S/pids exists: a cluster is running or was not stopped; run tests/realkube/down.sh"
if [ -S "$RK_RUN/containerd.sock" ] && ctr --address "$RK_RUN/containerd.sock" version >/dev/null 2>&1; then
  rk_die "a containerd already serves $RK_RUN/containerd.sock"
fi
# Every port must be free: an API server started on the etcd port of another
# test would silently share its data (and its kubelet would run the other's Pods).
for port in "$RK_ETCD_PORT" "$RK_ETCD_PEER_PORT" "$RK_API_PORT" 10248 10249 10250 10256 10257 10259; do
  if ss -Hltn "sport = :$port" | grep -q .; then rk_die "port $port is in use (set RK_ETCD_PORT/RK_ETCD_PEER_PORT/RK_API_PORT, or stop what holds it)"; fi
done
ip link show "$RK_BRIDGE" >/dev/null 2>&1 && rk_die "interface $RK_BRIDGE already exists (another cluster, or a failed down.sh)"
if ip route show | grep -v "dev $RK_BRIDGE" | grep -q "^${RK_POD_CIDR%/*}"; then rk_die "the Pod CIDR $RK_POD_CIDR is already routed"; fi

# --- binaries (cached by version; built on first use)
bins="$(bash "$RK_REPO/tests/e2e/build-kube.sh" --node)" || rk_die "cannot build the Kubernetes binaries"
bin() { grep "/$1\$" <<<"$bins"; }
ETCD=$(bin etcd); APISERVER=$(bin kube-apiserver); KCM=$(bin kube-controller-manager)
SCHEDULER=$(bin kube-scheduler); KUBELET=$(bin kubelet); KUBE_PROXY=$(bin kube-proxy)
mapfile -t addons < <(bash "$RK_DIR/build-addons.sh") || rk_die "cannot build the add-ons (CoreDNS, cert-manager)"
[ "${#addons[@]}" = 3 ] || rk_die "build-addons.sh printed ${#addons[@]} paths, not 3"
COREDNS=${addons[0]}
cm_bins=("${addons[@]:1}")
[ "${#cm_bins[@]}" = 2 ] || rk_die "cert-manager build printed ${#cm_bins[@]} paths, not 2"

# --- add-on images (cached by version)
mkdir -p "$RK_CACHE/images"
image_tar() { echo "$RK_CACHE/images/$(tr '/:' '__' <<<"$1").tar"; }
one_binary_image() { # IMAGE BINARY [mkimage options...]: a static binary, alone, as /NAME
  local image=$1 binary=$2 tar d
  shift 2
  tar=$(image_tar "$image")
  [ -s "$tar" ] && return 0
  d=$(mktemp -d)
  mkdir -p "$d/tmp" "$d/etc"
  chmod 1777 "$d/tmp"
  cp "$binary" "$d/"
  printf 'root:x:0:0:root:/:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/:/sbin/nologin\n' >"$d/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$d/etc/group"
  python3 "$RK_DIR/mkimage.py" "$d" "$image" "$tar" "$@" >/dev/null || { rm -rf "$d"; rk_die "cannot make the image $image"; }
  rm -rf "$d"
}
pause_tar=$(image_tar "$RK_PAUSE_IMAGE")
if [ ! -s "$pause_tar" ]; then
  d=$(mktemp -d)
  gcc -Os -static -o "$d/pause" "$RK_DIR/pause.c" || rk_die "cannot compile pause.c (gcc, libc6-dev)"
  strip "$d/pause"
  python3 "$RK_DIR/mkimage.py" "$d" "$RK_PAUSE_IMAGE" "$pause_tar" --entrypoint /pause --user 65535:65535 >/dev/null ||
    rk_die "cannot make the pause image"
  rm -rf "$d"
fi
one_binary_image "$RK_COREDNS_IMAGE" "$COREDNS" --entrypoint /coredns --user 65532:65532
one_binary_image "$RK_CM_CONTROLLER_IMAGE" "${cm_bins[0]}" --entrypoint /controller --user 65532:65532
one_binary_image "$RK_CM_CAINJECTOR_IMAGE" "${cm_bins[1]}" --entrypoint /cainjector --user 65532:65532

on_exit() {
  local code=$?
  if [ "$code" != 0 ]; then
    rk_log "up.sh failed (exit $code); stopping what was started"
    mkdir -p "$S.failed.$$"
    cp "$S"/*.log "$S.failed.$$/" 2>/dev/null || true
    bash "$RK_DIR/down.sh" >&2 || true
    rk_log "logs of the failed start kept in $S.failed.$$"
  fi
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir -p "$S" "$P" "$S/etcd" "$RK_RUN" "$RK_LIB/cni-conf" "$RK_LIB/containerd" "$RK_LIB/kubelet"
chmod 700 "$S" "$S/etcd"
: >"$S/pids"
: >"$S/created"
# spawn NAME LOG COMMAND...: starts COMMAND in its own session (so a signal to
# this script's group does not reach it before down.sh stops it in order) and
# records its PID.
spawn() {
  local name=$1 out=$2 pidfile
  shift 2
  pidfile=$(mktemp "$S/.pid.XXXXXX")
  # shellcheck disable=SC2016  # $$ and $@ are the inner shell's
  setsid sh -c 'echo $$ >"$0"; exec "$@"' "$pidfile" "$@" </dev/null >"$out" 2>&1 &
  for _ in $(seq 50); do [ -s "$pidfile" ] && break; sleep 0.1; done
  [ -s "$pidfile" ] || rk_die "$name did not start"
  echo "$name $(cat "$pidfile")" >>"$S/pids"
  rm -f "$pidfile"
}
alive() { kill -0 "$(rk_pid "$1")" 2>/dev/null || { tail -n 30 "$S/$1.log" >&2; rk_die "$1 exited; its log is above"; }; }

# --- network: a host-only bridge; nothing attached to a NIC, nothing masqueraded
ip link add "$RK_BRIDGE" type bridge
echo bridge >>"$S/created"
ip addr add "$RK_NODE_IP/${RK_POD_CIDR#*/}" dev "$RK_BRIDGE"
ip link set "$RK_BRIDGE" up
grep -q ' /run/netns ' /proc/mounts || echo netns-mount >>"$S/created"
modprobe br_netfilter 2>/dev/null || true
[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ] || rk_die "no br_netfilter (net.bridge.bridge-nf-call-iptables): Services cannot reach Pods on the bridge"
# Every sysctl this script, the kubelet (its kernel defaults) and kube-proxy
# may change, as it is now: down.sh puts each back and checks it.
for key in net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables \
  vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops \
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.conf.all.route_localnet \
  net.netfilter.nf_conntrack_max net.netfilter.nf_conntrack_tcp_timeout_established \
  net.netfilter.nf_conntrack_tcp_timeout_close_wait; do
  if [ -r "/proc/sys/${key//.//}" ]; then echo "$key $(cat "/proc/sys/${key//.//}")"; fi
done >"$S/sysctl.orig"
echo 1 >/proc/sys/net/ipv4/ip_forward                # Service DNAT towards a Pod on the bridge
echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables # Pod -> Service -> Pod on the same bridge
cat >"$RK_LIB/cni-conf/10-cnpgi-realkube.conflist" <<CNI
{"cniVersion": "0.4.0", "name": "cnpgi-realkube", "plugins": [
  {"type": "bridge", "bridge": "$RK_BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$RK_POD_CIDR", "gateway": "$RK_NODE_IP"}]],
            "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$RK_LIB/cni-ipam"}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
CNI

# --- containerd with the CRI plugin
cat >"$S/containerd.toml" <<TOML
version = 2
root = "$RK_LIB/containerd"
state = "$RK_RUN/containerd"
[grpc]
  address = "$RK_RUN/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$RK_PAUSE_IMAGE"
  # Root here lacks CAP_SYS_RESOURCE: runc cannot set a sandbox's oom_score_adj
  # to -998 and every Pod fails with "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$RK_LIB/cni-conf"
TOML
spawn containerd "$S/containerd.log" containerd --config "$S/containerd.toml"
for _ in $(seq 100); do ctr --address "$RK_RUN/containerd.sock" version >/dev/null 2>&1 && break; alive containerd; sleep 0.2; done
for image in "$RK_PAUSE_IMAGE" "$RK_COREDNS_IMAGE" "$RK_CM_CONTROLLER_IMAGE" "$RK_CM_CAINJECTOR_IMAGE"; do
  rk_import "$(image_tar "$image")"
done

# --- certificates: one CA; the API server serves 127.0.0.1, the bridge address and the Service IP
openssl req -x509 -newkey rsa:2048 -nodes -days 7 -keyout "$P/ca.key" -out "$P/ca.crt" -subj "/CN=cnpgi-realkube-ca" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null ||
  rk_die "openssl: cannot make the cluster CA"
sign() { # NAME SUBJECT EXTENSIONS
  printf '%b' "$3" >"$P/$1.ext"
  if ! openssl req -newkey rsa:2048 -nodes -keyout "$P/$1.key" -out "$P/$1.csr" -subj "$2" 2>/dev/null ||
    ! openssl x509 -req -in "$P/$1.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial -days 7 \
      -extfile "$P/$1.ext" -out "$P/$1.crt" 2>/dev/null; then
    rk_die "openssl: cannot make the certificate $1 ($2)"
  fi
}
client_ext="basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n"
sign apiserver "/CN=kube-apiserver" "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,IP:$RK_NODE_IP,IP:$RK_SVC_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n"
sign admin "/O=system:masters/CN=admin" "$client_ext"
# Each component with its own identity, so RBAC and Node authorization are the real ones.
sign kcm "/CN=system:kube-controller-manager" "$client_ext"
sign scheduler "/CN=system:kube-scheduler" "$client_ext"
sign kubelet "/O=system:nodes/CN=system:node:$RK_NODE_NAME" "$client_ext"
sign kube-proxy "/CN=system:kube-proxy" "$client_ext"
sign apiserver-kubelet-client "/O=kubeadm:cluster-admins/CN=kube-apiserver-kubelet-client" "$client_ext"
if ! openssl genrsa -out "$P/sa.key" 2048 2>/dev/null || ! openssl rsa -in "$P/sa.key" -pubout -out "$P/sa.pub" 2>/dev/null; then
  rk_die "openssl: cannot make the ServiceAccount key"
fi
kubeconfig() { # FILE CERT-NAME
  cat >"$1" <<KC
apiVersion: v1
kind: Config
clusters: [{name: cnpgi-realkube, cluster: {server: "https://$RK_NODE_IP:$RK_API_PORT", certificate-authority-data: $(base64 -w0 <"$P/ca.crt")}}]
users: [{name: $2, user: {client-certificate-data: $(base64 -w0 <"$P/$2.crt"), client-key-data: $(base64 -w0 <"$P/$2.key")}}]
contexts: [{name: cnpgi-realkube, context: {cluster: cnpgi-realkube, user: $2, namespace: default}}]
current-context: cnpgi-realkube
KC
  chmod 600 "$1"
}
for who in admin kcm scheduler kubelet kube-proxy; do kubeconfig "$S/$who.kubeconfig" "$who"; done
cp "$S/admin.kubeconfig" "$RK_KUBECONFIG"

# --- control plane
spawn etcd "$S/etcd.log" "$ETCD" --name cnpgi-realkube --data-dir "$S/etcd" \
  --listen-client-urls "http://127.0.0.1:$RK_ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$RK_ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$RK_ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$RK_ETCD_PEER_PORT" \
  --initial-cluster "cnpgi-realkube=http://127.0.0.1:$RK_ETCD_PEER_PORT" --initial-cluster-state new \
  --unsafe-no-fsync --log-level warn
for i in $(seq 100); do
  alive etcd
  curl -sf --max-time 2 "http://127.0.0.1:$RK_ETCD_PORT/health" >/dev/null 2>&1 && break
  [ "$i" = 100 ] && rk_die "etcd not healthy after 30 s (log: $S/etcd.log)"
  sleep 0.3
done
spawn kube-apiserver "$S/kube-apiserver.log" "$APISERVER" \
  --etcd-servers "http://127.0.0.1:$RK_ETCD_PORT" \
  --bind-address "$RK_NODE_IP" --advertise-address "$RK_NODE_IP" --secure-port "$RK_API_PORT" \
  --tls-cert-file "$P/apiserver.crt" --tls-private-key-file "$P/apiserver.key" --client-ca-file "$P/ca.crt" \
  --kubelet-client-certificate "$P/apiserver-kubelet-client.crt" --kubelet-client-key "$P/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority "$P/ca.crt" --kubelet-preferred-address-types InternalIP \
  --service-account-key-file "$P/sa.pub" --service-account-signing-key-file "$P/sa.key" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
  --service-cluster-ip-range "$RK_SVC_CIDR" --profiling=false --allow-privileged=false
started=$(date +%s)
until rk_kubectl get --raw /readyz >/dev/null 2>&1; do
  alive kube-apiserver
  [ $(( $(date +%s) - started )) -lt 120 ] || rk_die "kube-apiserver not ready after 120 s (log: $S/kube-apiserver.log)"
  sleep 1
done
# The API server's kubelet client (for logs and exec) and the cluster-admins group of kubeadm
rk_kubectl create clusterrolebinding cnpgi-realkube-apiserver-kubelet --clusterrole system:kubelet-api-admin \
  --user kube-apiserver-kubelet-client >/dev/null
spawn kube-controller-manager "$S/kube-controller-manager.log" "$KCM" \
  --kubeconfig "$S/kcm.kubeconfig" --authentication-kubeconfig "$S/kcm.kubeconfig" --authorization-kubeconfig "$S/kcm.kubeconfig" \
  --leader-elect=false --secure-port 10257 --bind-address 127.0.0.1 --use-service-account-credentials=true \
  --service-account-private-key-file "$P/sa.key" --root-ca-file "$P/ca.crt" \
  --cluster-signing-cert-file "$P/ca.crt" --cluster-signing-key-file "$P/ca.key" \
  --allocate-node-cidrs=false --controllers='*,-nodeipam,-cloud-node-lifecycle' --profiling=false
spawn kube-scheduler "$S/kube-scheduler.log" "$SCHEDULER" --kubeconfig "$S/scheduler.kubeconfig" \
  --authentication-kubeconfig "$S/scheduler.kubeconfig" --authorization-kubeconfig "$S/scheduler.kubeconfig" \
  --leader-elect=false --secure-port 10259 --bind-address 127.0.0.1 --profiling=false

# --- kubelet (cgroupfs; this machine's cgroup v1 allowed) and kube-proxy (iptables)
printf 'nameserver %s\n' "$RK_NODE_IP" >"$S/resolv.conf"  # Pods of dnsPolicy Default: no upstream resolver
cat >"$S/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$RK_RUN/containerd.sock
address: $RK_NODE_IP
port: 10250
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
tlsCertFile: $P/kubelet-serving.crt
tlsPrivateKeyFile: $P/kubelet-serving.key
authentication: {anonymous: {enabled: false}, webhook: {enabled: true}, x509: {clientCAFile: $P/ca.crt}}
authorization: {mode: Webhook}
clusterDNS: [$RK_DNS_IP]
clusterDomain: cluster.local
resolvConf: $S/resolv.conf
podLogsDir: $RK_LIB/pod-logs
staticPodPath: ""
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
YAML
sign kubelet-serving "/O=system:nodes/CN=system:node:$RK_NODE_NAME" "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:$RK_NODE_IP,DNS:$RK_NODE_NAME\n"
spawn kubelet "$S/kubelet.log" "$KUBELET" --kubeconfig "$S/kubelet.kubeconfig" --config "$S/kubelet.yaml" \
  --root-dir "$RK_LIB/kubelet" --node-ip "$RK_NODE_IP" --hostname-override "$RK_NODE_NAME" --v=1
# The conntrack settings and route_localnet (localhost NodePorts) left as they are.
spawn kube-proxy "$S/kube-proxy.log" "$KUBE_PROXY" --kubeconfig "$S/kube-proxy.kubeconfig" --proxy-mode iptables \
  --cluster-cidr "$RK_POD_CIDR" --hostname-override "$RK_NODE_NAME" \
  --conntrack-max-per-core 0 --conntrack-min 0 --conntrack-tcp-timeout-established 0s \
  --conntrack-tcp-timeout-close-wait 0s --iptables-localhost-nodeports=false \
  --metrics-bind-address 127.0.0.1:10249 --healthz-bind-address 127.0.0.1:10256
started=$(date +%s)
until rk_kubectl get node "$RK_NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -q True; do
  alive kubelet
  alive kube-proxy
  [ $(( $(date +%s) - started )) -lt 120 ] || rk_die "node $RK_NODE_NAME not Ready after 120 s (log: $S/kubelet.log)"
  sleep 1
done
rk_log "node $RK_NODE_NAME Ready after $(( $(date +%s) - started )) s"

# --- add-ons: CoreDNS, the `local` StorageClass, cert-manager
sed -e "s|@COREDNS_IMAGE@|$RK_COREDNS_IMAGE|g" -e "s|@DNS_IP@|$RK_DNS_IP|g" "$RK_DIR/addons/coredns.yaml" |
  rk_kubectl apply -f - >/dev/null || rk_die "cannot apply tests/realkube/addons/coredns.yaml"
bash "$RK_DIR/cert-manager.sh" install || rk_die "cannot install cert-manager"
# Storage for CloudNativePG's PVCs: the default StorageClass `local` (no
# provisioner, as kind's `standard` is the default there) and RK_PVS hostPath
# PersistentVolumes, directories under $RK_LIB/pv (removed by down.sh). Mode
# 0777: a hostPath volume gets no fsGroup, and the instances run as uid 26.
{
  cat <<YAML
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: Immediate
reclaimPolicy: Retain
YAML
  for i in $(seq "${RK_PVS:-16}"); do
    mkdir -p "$RK_LIB/pv/pv$i" && chmod 0777 "$RK_LIB/pv/pv$i"
    cat <<YAML
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: realkube-pv$i}
spec:
  storageClassName: local
  capacity: {storage: 4Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {path: $RK_LIB/pv/pv$i, type: Directory}
YAML
  done
} | rk_kubectl apply -f - >/dev/null || rk_die "cannot create the StorageClass and PersistentVolumes"
rk_kubectl -n kube-system rollout status deployment/coredns --timeout=120s >&2 ||
  rk_die "CoreDNS did not become available (kubectl -n kube-system describe pods -l k8s-app=kube-dns)"
rk_log "cluster up: KUBECONFIG=$RK_KUBECONFIG"
echo "KUBECONFIG=$RK_KUBECONFIG"
