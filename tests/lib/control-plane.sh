# shellcheck shell=bash
# A real Kubernetes control plane on loopback, for end-to-end tests: etcd,
# kube-apiserver and kube-controller-manager, built from the Go module proxy
# by tests/e2e/build-kube.sh (cached by version).
#
#   source tests/lib/control-plane.sh
#   cp_start WORKDIR [extra kube-apiserver flags...]   # exports KUBECONFIG
#   cp_spawn NAME LOGFILE command args...              # any other process to stop with it
#   cp_stop                                            # stops everything, newest first
#
# cp_start installs EXIT, INT and TERM traps that call cp_stop (and then the
# function named in CP_ON_EXIT, if set), so nothing is left running on any
# exit. Every PID is recorded in this (the parent) shell, never inside a
# command substitution. If E2E_KUBECONFIG is set, no control plane is started:
# KUBECONFIG is that file (for kind on GitHub runners), and CP_EXTERNAL=1.
#
# CP_CONTROLLERS: kube-controller-manager's --controllers (default
# garbagecollector,namespace,serviceaccount; the scale benchmark adds job).
#
# After cp_start: KUBECONFIG (admin, CN=admin O=system:masters), CP_SERVER
# (https://127.0.0.1:PORT), CP_CA (the cluster CA, which also signed the
# serving certificate), CP_ADMIN_CERT, CP_ADMIN_KEY, CP_DIR.

CP_LIB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=pki.sh
source "$CP_LIB_DIR/pki.sh"
CP_PIDS=()
CP_NAMES=()
# Read by callers: 1 when E2E_KUBECONFIG named the cluster.
# shellcheck disable=SC2034
CP_EXTERNAL=0

cp_log() { echo "control-plane: $*" >&2; }

# A free TCP port on 127.0.0.1 (the kernel picks it; the socket is closed
# again, so there is a small window in which another process could take it).
cp_free_port() {
  python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}

# cp_spawn NAME LOGFILE command args...: starts a background process whose
# output goes to LOGFILE (`-`: this shell's output), records its PID
# (CP_LAST_PID) for cp_stop.
cp_spawn() {
  local name="$1" log="$2"
  shift 2
  if [ "$log" = - ]; then
    "$@" &
  else
    "$@" >"$log" 2>&1 &
  fi
  CP_LAST_PID=$!
  CP_PIDS+=("$CP_LAST_PID")
  CP_NAMES+=("$name")
}

# cp_kill PID [SIGNAL]: stops one process started by cp_spawn and waits for
# it (SIGTERM, then SIGKILL after 10 s); it is no longer stopped by cp_stop.
cp_kill() {
  local pid="$1" signal="${2:-TERM}" i
  if kill -0 "$pid" 2>/dev/null; then
    kill "-$signal" "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      cp_log "process $pid did not stop on SIG$signal within 10 s; killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  wait "$pid" 2>/dev/null || true
  for i in "${!CP_PIDS[@]}"; do
    if [ "${CP_PIDS[$i]}" = "$pid" ]; then
      unset 'CP_PIDS[i]' 'CP_NAMES[i]'
    fi
  done
}

# Stops every process started through cp_spawn/cp_start, newest first.
cp_stop() {
  local i pids
  pids=("${!CP_PIDS[@]}")
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    cp_kill "${CP_PIDS[${pids[$i]}]}"
  done
  CP_PIDS=()
  CP_NAMES=()
}

_cp_on_exit() {
  local code=$?
  trap - EXIT INT TERM
  if [ -n "${CP_ON_EXIT:-}" ]; then
    "$CP_ON_EXIT" || true
  fi
  cp_stop
  exit "$code"
}

cp_install_traps() {
  trap _cp_on_exit EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# Waits until URL answers 200 to the admin client (up to $2 seconds).
_cp_wait_ready() {
  local url="$1" timeout="$2" pid="$3" what="$4" i
  for ((i = 0; i < timeout * 5; i++)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      cp_log "$what exited during start-up; its log:"
      tail -n 30 "$CP_DIR/$what.log" >&2
      return 1
    fi
    if curl -sf --max-time 2 --cacert "$CP_CA" --cert "$CP_ADMIN_CERT" --key "$CP_ADMIN_KEY" "$url" >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.2
  done
  cp_log "$what not ready at $url after ${timeout}s; its log:"
  tail -n 30 "$CP_DIR/$what.log" >&2
  return 1
}

# cp_start WORKDIR [extra kube-apiserver flags...]
cp_start() {
  local workdir="$1"
  shift
  cp_install_traps
  if [ -n "${E2E_KUBECONFIG:-}" ]; then
    # shellcheck disable=SC2034
    CP_EXTERNAL=1
    export KUBECONFIG="$E2E_KUBECONFIG"
    cp_log "using the cluster of E2E_KUBECONFIG=$E2E_KUBECONFIG (no control plane started)"
    return 0
  fi
  local bins etcd apiserver kcm
  # Not in a command substitution of anything that starts processes: the
  # build script only builds, and prints the paths of the cached binaries.
  bins="$(bash "$CP_LIB_DIR/../e2e/build-kube.sh")" || { cp_log "cannot build the control plane binaries"; return 1; }
  etcd="$(sed -n 1p <<<"$bins")"
  apiserver="$(sed -n 2p <<<"$bins")"
  kcm="$(sed -n 3p <<<"$bins")"

  CP_DIR="$workdir"
  mkdir -p "$CP_DIR/pki" "$CP_DIR/etcd-data"
  chmod 700 "$CP_DIR/etcd-data"
  local pki="$CP_DIR/pki"
  CP_CA="$pki/ca.crt"
  pki_ca "$pki" ca "/CN=cnpgi-e2e-ca" || return 1
  pki_leaf "$pki" apiserver "/CN=kube-apiserver" "IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc" \
    serverAuth ca || return 1
  pki_leaf "$pki" admin "/O=system:masters/CN=admin" "" clientAuth ca || return 1
  pki_leaf "$pki" kcm "/O=system:masters/CN=system:kube-controller-manager" "" clientAuth ca || return 1
  pki_signing_key "$pki" sa || return 1
  CP_ADMIN_CERT="$pki/admin.crt"
  CP_ADMIN_KEY="$pki/admin.key"

  local etcd_port etcd_peer_port api_port kcm_port attempt
  etcd_port="$(cp_free_port)"
  etcd_peer_port="$(cp_free_port)"
  api_port="$(cp_free_port)"
  CP_SERVER="https://127.0.0.1:$api_port"

  cp_spawn etcd "$CP_DIR/etcd.log" "$etcd" --name=e2e --data-dir="$CP_DIR/etcd-data" \
    --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
    --listen-peer-urls="http://127.0.0.1:$etcd_peer_port" --initial-advertise-peer-urls="http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster="e2e=http://127.0.0.1:$etcd_peer_port" --unsafe-no-fsync --log-level=warn
  local etcd_pid=$CP_LAST_PID

  local i
  for ((i = 0; i < 100; i++)); do
    kill -0 "$etcd_pid" 2>/dev/null || { cp_log "etcd exited; its log:"; tail -n 30 "$CP_DIR/etcd.log" >&2; return 1; }
    curl -sf --max-time 2 "http://127.0.0.1:$etcd_port/health" >/dev/null 2>&1 && break
    sleep 0.1
  done

  cp_spawn kube-apiserver "$CP_DIR/kube-apiserver.log" "$apiserver" \
    --etcd-servers="http://127.0.0.1:$etcd_port" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$api_port" \
    --cert-dir="$CP_DIR/apiserver-certs" \
    --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
    --client-ca-file="$CP_CA" \
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc \
    --authorization-mode=RBAC \
    --service-cluster-ip-range=10.96.0.0/16 \
    --endpoint-reconciler-type=none \
    --profiling=false \
    "$@"
  local api_pid=$CP_LAST_PID

  export KUBECONFIG="$CP_DIR/admin.kubeconfig"
  _cp_kubeconfig "$KUBECONFIG" "$pki/admin.crt" "$pki/admin.key"
  _cp_kubeconfig "$CP_DIR/kcm.kubeconfig" "$pki/kcm.crt" "$pki/kcm.key"
  _cp_wait_ready "$CP_SERVER/readyz" 60 "$api_pid" kube-apiserver || return 1

  # Its port is picked only now, and again if it is taken before it binds it:
  # a free port is one of the kernel's ephemeral ports, which the API server's
  # own connections (to etcd, ...) also draw from while it starts. A warm
  # .ci/run lost one so ("bind: address already in use").
  for attempt in 1 2 3; do
    kcm_port="$(cp_free_port)"
    cp_spawn kube-controller-manager "$CP_DIR/kube-controller-manager.log" "$kcm" \
      --kubeconfig="$CP_DIR/kcm.kubeconfig" \
      --authentication-kubeconfig="$CP_DIR/kcm.kubeconfig" --authorization-kubeconfig="$CP_DIR/kcm.kubeconfig" \
      --controllers="${CP_CONTROLLERS:-garbagecollector,namespace,serviceaccount}" \
      --bind-address=127.0.0.1 --secure-port="$kcm_port" \
      --cert-dir="$CP_DIR/kcm-certs" \
      --leader-elect=false --use-service-account-credentials=false --profiling=false
    local kcm_pid=$CP_LAST_PID
    # Ready when the serviceaccount controller made the `default` ServiceAccount.
    if _cp_wait_ready "$CP_SERVER/api/v1/namespaces/default/serviceaccounts/default" 60 "$kcm_pid" kube-controller-manager; then
      break
    fi
    if [ "$attempt" -lt 3 ] && ! kill -0 "$kcm_pid" 2>/dev/null &&
      grep -q "address already in use" "$CP_DIR/kube-controller-manager.log"; then
      cp_log "kube-controller-manager's port $kcm_port was taken before it bound it; another port"
      continue
    fi
    return 1
  done
  cp_log "ready at $CP_SERVER (logs and certificates in $CP_DIR)"
}

_cp_kubeconfig() {
  local file="$1" cert="$2" key="$3"
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: e2e
    cluster:
      server: $CP_SERVER
      certificate-authority: $CP_CA
users:
  - name: user
    user:
      client-certificate: $cert
      client-key: $key
contexts:
  - name: e2e
    context:
      cluster: e2e
      user: user
current-context: e2e
EOF
}
