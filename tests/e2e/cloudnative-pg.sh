#!/usr/bin/env bash
# The real CloudNativePG operator (CNPG_VERSION, default v1.30.0; .ci/run also
# runs v1.29.0), built from the Go module proxy by
# tests/e2e/cnpg/build.sh, hosting plugins built with cnpgi-rs (the Rust
# hello-world) and with upstream's Go machinery (tests/interop/goplugin), on a
# real etcd + kube-apiserver + kube-controller-manager on loopback
# (tests/lib/control-plane.sh):
#
#   A. plugins as sidecars: Unix sockets in PLUGIN_SOCKET_DIR (also the
#      wal-archive plugin: advertised, its sidecar injected into the Pod);
#   B. plugins as remote services: Services in the operator's namespace
#      labelled cnpg.io/pluginName, with two kubernetes.io/tls Secrets
#      (cert-manager selfSigned style: two self-signed leaves), over mTLS.
#
# For each: the instance Pod CloudNativePG creates carries the plugin's
# patches; status.pluginStatus holds the plugin's metadata, capabilities and
# its SetStatusInCluster answer; a stopped plugin shows in the Cluster's phase
# and the Cluster recovers when it is back; over mTLS, a client certificate
# the plugin does not trust is refused by the plugin and reported by
# CloudNativePG.
#
# There is no scheduler and no kubelet: tests/e2e/cnpg/standin.py plays them
# (bootstrap Jobs complete, instance Pods Running and Ready on a loopback IP)
# and the instance manager's status endpoint (HTTPS under the Cluster's CA).
# CloudNativePG dials a remote plugin as <service name>:<port>; the operator
# runs in its own mount namespace with a private /etc/hosts that resolves the
# plugin Services' names to 127.0.0.1 (the machine's /etc/hosts is untouched).
#
# Usage: tests/e2e/cloudnative-pg.sh   (root for the mount namespace; Go >= 1.25,
#        cargo, openssl, python3, curl). KEEP_E2E_WORKDIR=1 keeps the logs.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cnpg_dir="$here/cnpg"

# This test plays the kubelet itself, so it needs its own control plane.
unset E2E_KUBECONFIG
# shellcheck source=../lib/control-plane.sh
source "$here/../lib/control-plane.sh"

work="$(mktemp -d)"
CNPG_VERSION="${CNPG_VERSION:-v1.30.0}"
export CNPG_VERSION
SUITE="cloudnative-pg e2e ($CNPG_VERSION)"
# shellcheck source=../lib/checks.sh
source "$here/../lib/checks.sh"
# shellcheck source=../lib/go-env.sh
source "$here/../lib/go-env.sh"
# The Go plugin of tests/interop without cgo, as every build of that module
# (tests/lib/go-env.sh says why; with cgo here, 146 more CPU s of a cold run).
export CGO_ENABLED=0

finished=0
on_exit() {
  cp_stop
  if [ "$finished" != 1 ] || [ "$failed" != 0 ]; then
    checks_show_logs "$work"/logs/*.log
  fi
  if [ -n "${KEEP_E2E_WORKDIR:-}" ]; then
    echo "cloudnative-pg e2e: work directory kept: $work" >&2
  else
    rm -rf "$work"
  fi
}
# shellcheck disable=SC2034 # read by control-plane.sh's exit trap
CP_ON_EXIT=on_exit
cp_install_traps
mkdir -p "$work/logs"

# No __pycache__ in the source tree (standin.py and kubecli.py import kube.py).
export PYTHONDONTWRITEBYTECODE=1
kube() { python3 "$cnpg_dir/kubecli.py" "$@"; }
# apply FILE...: creates or replaces the objects, or stops the test saying why.
apply() {
  kube apply "$@" 2>"$work/apply.err" || die "cannot apply $*: $(cat "$work/apply.err")"
}

# --- build (cached) -----------------------------------------------------------
t0=$SECONDS
echo "== building"
# CNPGI_SKIP_CARGO_BUILD=1: use target/debug as it is (.ci/run built it).
if [ -z "${CNPGI_SKIP_CARGO_BUILD:-}" ]; then
  (cd "$root" && cargo build --quiet -p cnpg-i-hello-world -p cnpgi-wal-archive) || die "cargo build -p cnpg-i-hello-world -p cnpgi-wal-archive failed"
fi
hello="$root/target/debug/cnpg-i-hello-world"
walarchive="$root/target/debug/cnpgi-wal-archive"
(cd "$root/tests/interop" && go build -o "$work/goplugin" ./goplugin) || die "go build tests/interop/goplugin failed"
goplugin="$work/goplugin"
echo "   CloudNativePG $CNPG_VERSION"
cnpg_cache="$(bash "$cnpg_dir/build.sh")" || die "cannot build CloudNativePG (tests/e2e/cnpg/build.sh)"
manager="$cnpg_cache/manager"
echo "   built in $((SECONDS - t0)) s"

HELLO=cnpg-i-hello-world.cloudnative-pg.io
HELLO_VERSION="$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$root/examples/hello-world/Cargo.toml" | head -n1)"
if [ -z "$HELLO_VERSION" ]; then
  HELLO_VERSION="$(cd "$root" && cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"]=="cnpg-i-hello-world"))')"
fi
# As examples/hello-world/clusters/cluster-example-with-parameters.yaml.
HELLO_PARAMETERS='{"labels": "{\"first-label\": \"first-label-value\", \"second-label\": \"second-label-value\"}",
                   "annotations": "{\"first-annotation\": \"first-annotation-value\"}"}'
GOPLUGIN=cnpgi-go-plugin.example.com
WALARCHIVE=wal-archive.cnpgi.io
WALARCHIVE_IMAGE=cnpgi-wal-archive:e2e
OPERATOR_NS=cnpg-system

# --- the control plane ----------------------------------------------------------
echo "== control plane"
cp_start "$work/cp" || die "the control plane did not start"
export E2E_SERVER="$CP_SERVER" E2E_CA="$CP_CA" E2E_CERT="$CP_ADMIN_CERT" E2E_KEY="$CP_ADMIN_KEY"

crds=("$cnpg_cache"/crds/*.json)
kube apply "${crds[@]}" 2>"$work/logs/apply-crds.log" || die "cannot create CloudNativePG's CRDs: $(cat "$work/logs/apply-crds.log")"
kube wait-crds clusters.postgresql.cnpg.io backups.postgresql.cnpg.io poolers.postgresql.cnpg.io \
  scheduledbackups.postgresql.cnpg.io || die "CloudNativePG's CRDs were not established"
cat >"$work/namespaces.json" <<JSON
[{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "$OPERATOR_NS"}},
 {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "e2e-socket"}},
 {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "e2e-mtls"}}]
JSON
apply "$work/namespaces.json"

# CloudNativePG runs as its ServiceAccount, bound to the ClusterRole of its
# release (config/rbac), with a token from the TokenRequest API: every call it
# makes goes through the RBAC it ships with.
cat >"$work/serviceaccount.json" <<JSON
{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "cnpg-manager", "namespace": "$OPERATOR_NS"}}
JSON
kube apply "$work/serviceaccount.json" "$cnpg_cache/rbac/role.json" "$cnpg_cache/rbac/role_binding.json" \
  2>"$work/logs/apply-rbac.log" || die "cannot apply CloudNativePG's RBAC: $(cat "$work/logs/apply-rbac.log")"
token="$(kube token "$OPERATOR_NS" cnpg-manager)" || die "cannot get a token for $OPERATOR_NS/cnpg-manager"
cat >"$work/cnpg.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: "$CP_SERVER", certificate-authority: "$CP_CA"}}]
users: [{name: cnpg-manager, user: {token: "$token"}}]
contexts: [{name: e2e, context: {cluster: e2e, user: cnpg-manager}}]
current-context: e2e
EOF

# --- certificates -------------------------------------------------------------------
echo "== certificates"
mkdir -p "$work/pki" "$work/webhook"
# leaf NAME SUBJECT-ALT-NAME USAGE: a self-signed leaf, as cert-manager's selfSigned issuer makes.
leaf() { pki_leaf "$work/pki" "$1" "/CN=$1" "$2" "$3" || die "cannot make the certificate $1"; }
leaf hello-server "DNS:cnpg-i-hello-world" serverAuth
leaf hello-client "" clientAuth
leaf go-server "DNS:cnpgi-go-plugin" serverAuth
leaf go-client "" clientAuth
leaf intruder-client "" clientAuth
# CloudNativePG's webhook server needs a certificate to start; with
# WEBHOOK_CERT_DIR set it uses it as is instead of managing its own PKI. No
# webhook is registered: CloudNativePG (v1.29, v1.30) calls no plugin from its webhooks.
# (That server listens on every interface, on a free port: CloudNativePG has no
# flag for its address. Nothing connects to it.)
leaf webhook "IP:127.0.0.1" serverAuth
cp "$work/pki/webhook.crt" "$work/webhook/apiserver.crt"
cp "$work/pki/webhook.key" "$work/webhook/apiserver.key"

# --- helpers ---------------------------------------------------------------------------
wait_socket() { # PATH PID WHAT: until PATH accepts connections
  local i
  for ((i = 0; i < 200; i++)); do
    python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' "$1" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || die "$3 exited before listening on $1"
    sleep 0.05
  done
  die "$3 did not listen on $1 within 10 s"
}
wait_port() { # PORT PID WHAT
  local i
  for ((i = 0; i < 200; i++)); do
    (: >"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || die "$3 exited before listening on 127.0.0.1:$1"
    sleep 0.05
  done
  die "$3 did not listen on 127.0.0.1:$1 within 10 s"
}

# The operator's private /etc/hosts: the machine's, plus the plugin Services,
# by the names CloudNativePG dials: v1.29 `<service>:<port>`, v1.30
# `<service>.<namespace>.svc:<port>` (the TLS server name is the Service's
# name in both).
{
  cat /etc/hosts
  echo "127.0.0.1 cnpg-i-hello-world cnpgi-go-plugin"
  echo "127.0.0.1 cnpg-i-hello-world.$OPERATOR_NS.svc cnpgi-go-plugin.$OPERATOR_NS.svc"
} >"$work/hosts"
if unshare -m -- sh -c "mount --bind '$work/hosts' /etc/hosts" 2>"$work/logs/unshare.log"; then
  :
else
  die "cannot run the operator in a private mount namespace (unshare -m; needs root): $(cat "$work/logs/unshare.log")"
fi

# CloudNativePG finds the instance manager binaries it can hand to instance Pods
# as operator/manager_<arch> under its working directory (/ in its image); it
# refuses to reconcile a Cluster whose architecture has none. The instance
# manager reports the SHA-256 of its binary, which the operator compares.
STANDIN_ARCH="$(go env GOARCH)"
mkdir -p "$work/operator-root/operator"
ln -s "$manager" "$work/operator-root/operator/manager_$STANDIN_ARCH"
STANDIN_EXECUTABLE_HASH="$(sha256sum "$manager" | cut -d' ' -f1)"
export STANDIN_ARCH STANDIN_EXECUTABLE_HASH

operator_pid="" operator_log=""
# start_operator NAME SOCKET_DIR: the real CloudNativePG, as `manager controller`,
# as its ServiceAccount, leader election off, metrics on loopback, and the
# private /etc/hosts.
start_operator() {
  local name=$1 socket_dir=$2 metrics webhook_port
  metrics="$(cp_free_port)"
  webhook_port="$(cp_free_port)"
  # shellcheck disable=SC2016 # the sh -c script expands its own arguments
  cp_spawn "$name" "$work/logs/$name.log" env --chdir="$work/operator-root" \
    OPERATOR_NAMESPACE="$OPERATOR_NS" PLUGIN_SOCKET_DIR="$socket_dir" WEBHOOK_CERT_DIR="$work/webhook" \
    KUBECONFIG="$work/cnpg.kubeconfig" \
    unshare -m -- sh -c 'mount --bind "$1" /etc/hosts && shift && exec "$@"' sh "$work/hosts" \
    "$manager" controller --leader-elect=false --metrics-bind-address="127.0.0.1:$metrics" \
    --webhook-port="$webhook_port" --max-concurrent-reconciles=4
  operator_pid=$CP_LAST_PID
  operator_log="$work/logs/$name.log"
  local i
  for ((i = 0; i < 300; i++)); do
    kill -0 "$operator_pid" 2>/dev/null || die "CloudNativePG ($name) exited during start-up; see $name.log: $(tail -n 5 "$work/logs/$name.log")"
    curl -sf --max-time 1 "http://127.0.0.1:$metrics/metrics" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "CloudNativePG ($name) did not serve its metrics on 127.0.0.1:$metrics within 30 s"
}

# cluster_json NAMESPACE NAME PLUGIN PARAMETERS-JSON
cluster_json() {
  cat >"$work/$1-$2.json" <<JSON
{"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
 "metadata": {"name": "$2", "namespace": "$1"},
 "spec": {"instances": 1, "storage": {"size": "1Gi"},
          "plugins": [{"name": "$3", "parameters": $4}]}}
JSON
  echo "$work/$1-$2.json"
}

poke_n=0
# poke NAMESPACE CLUSTER: changes an annotation so that CloudNativePG reconciles now.
poke() {
  poke_n=$((poke_n + 1))
  python3 - "$1" "$2" "$poke_n" <<'PY'
import sys, os
sys.path.insert(0, os.environ["CNPG_DIR"])
from kubecli import Kube
ns, name, n = sys.argv[1:]
Kube.from_env().merge_patch(f"/apis/postgresql.cnpg.io/v1/namespaces/{ns}/clusters/{name}",
                            {"metadata": {"annotations": {"e2e.cnpgi.io/poke": n}}})
PY
}
export CNPG_DIR="$cnpg_dir"

# check WHAT -- kube wait ARGS...: one ok/FAIL line (with what --show printed).
# check_kube WHAT -- ARGS...: `kube wait ARGS` (a condition on an object, polled);
# ok with what it shows, or fail with what it last saw.
check_kube() {
  local what=$1 shown
  if ! selected "$what"; then
    skipped=$((skipped + 1))
    return 0
  fi
  shift 2
  if shown="$(kube wait "$@" 2>"$work/check.err")"; then
    ok "$what${shown:+ ($shown)}"
  else
    fail "$what"
    sed 's/^/     /' "$work/check.err"
  fi
}

HEALTHY="Cluster in healthy state"
PHASE_IS='o.get("status", {}).get("phase") == '
plugin_status() { # NAME: a Python expression for the pluginStatus entry of plugin NAME
  echo "next(p for p in o['status']['pluginStatus'] if p['name'] == '$1')"
}

# --- the stand-in for the kubelet and the instance manager ------------------------------
cp_spawn standin "$work/logs/standin.log" python3 -u "$cnpg_dir/standin.py" "$work/standin" e2e-socket e2e-mtls

# The calls a Rust plugin logged as answered (its middleware logs every call).
# called LABEL LOG METHOD...: one ok/FAIL line.
called() {
  local label=$1 log=$2 method n counts=() missing=()
  shift 2
  for method in "$@"; do
    n="$(grep -c "method=/[A-Za-z0-9_.]*/$method}: .*call succeeded" "$log" || true)"
    if [ "$n" -gt 0 ]; then counts+=("$method x$n"); else missing+=("$method"); fi
  done
  if [ "${#missing[@]}" = 0 ]; then
    local list
    list="$(printf '%s, ' "${counts[@]}")"
    ok "$label: the plugin's log shows CloudNativePG's calls answered (${list%, })"
  else
    fail "$label: the plugin's log ($(basename "$log")) shows no successful ${missing[*]}"
  fi
}

# The checks common to both transports. run_checks LABEL NAMESPACE
run_checks() {
  local label=$1 ns=$2 hs gs
  hs="$(plugin_status "$HELLO")"
  gs="$(plugin_status "$GOPLUGIN")"

  check_kube "$label: hello-world: instance Pod hello-1 has the plugin's labels, annotations and pauser sidecar (native, in initContainers)" -- \
    pod "$ns" hello-1 \
    "o['metadata']['labels'].get('first-label') == 'first-label-value' and o['metadata']['labels'].get('second-label') == 'second-label-value' and o['metadata']['annotations'].get('first-annotation') == 'first-annotation-value' and [c['name'] for c in o['spec']['containers']] == ['postgres'] and any(c['name'] == 'pauser' and c['image'] == 'registry.k8s.io/pause:3.10' and c.get('restartPolicy') == 'Always' for c in o['spec']['initContainers'])" \
    --timeout 90
  check_kube "$label: hello-world: status.pluginStatus has its name, version $HELLO_VERSION and capabilities" -- \
    cluster "$ns" hello \
    "($hs)['version'] == '$HELLO_VERSION' and set(($hs)['capabilities']) == {'TYPE_OPERATOR_SERVICE', 'TYPE_LIFECYCLE_SERVICE'} and set(($hs)['operatorCapabilities']) == {'TYPE_VALIDATE_CLUSTER_CREATE', 'TYPE_VALIDATE_CLUSTER_CHANGE', 'TYPE_MUTATE_CLUSTER', 'TYPE_SET_STATUS_IN_CLUSTER'}" \
    --timeout 30
  check_kube "$label: hello-world: Cluster healthy with the plugin's SetStatusInCluster answer in status.pluginStatus" -- \
    cluster "$ns" hello \
    "${PHASE_IS}'$HEALTHY' and json.loads(($hs)['status']) == {'enabled': True}" --timeout 90
  called "$label" "$hello_log" GetPluginMetadata GetPluginCapabilities GetCapabilities LifecycleHook SetStatusInCluster

  check_kube "$label: Go plugin: instance Pod go-1 is labelled go-plugin: red" -- \
    pod "$ns" go-1 "o['metadata']['labels'].get('go-plugin') == 'red'" --timeout 90
  check_kube "$label: Go plugin: status.pluginStatus has its name, version and capabilities" -- \
    cluster "$ns" go \
    "($gs)['version'] == '1.0.0' and set(($gs)['capabilities']) == {'TYPE_OPERATOR_SERVICE', 'TYPE_LIFECYCLE_SERVICE', 'TYPE_RECONCILER_HOOKS', 'TYPE_WAL_SERVICE', 'TYPE_BACKUP_SERVICE', 'TYPE_RESTORE_JOB', 'TYPE_POSTGRES', 'TYPE_METRICS'} and set(($gs)['walCapabilities']) == {'TYPE_ARCHIVE_WAL', 'TYPE_RESTORE_WAL'} and ($gs)['backupCapabilities'] == ['TYPE_BACKUP'] and ($gs)['restoreJobHookCapabilities'] == ['KIND_RESTORE']" \
    --timeout 30
  check_kube "$label: Go plugin: Cluster healthy" -- cluster "$ns" go "${PHASE_IS}'$HEALTHY'" --timeout 90
}

PLUGIN_FAILURE="Cluster cannot proceed to reconciliation due to an error while interacting with plugins"
# failed_with PATTERN: a Python expression: the Cluster's phase is the plugin
# failure and its phaseReason matches the regular expression PATTERN.
failed_with() {
  echo "o['status'].get('phase') == '$PLUGIN_FAILURE' and re.search(r'$1', o['status'].get('phaseReason', ''))"
}
REASON="o['status']['phaseReason']"

# stop_restart LABEL NAMESPACE CLUSTER PID-VARIABLE RESTART-FUNCTION REASON-PATTERN
stop_restart() {
  local label=$1 ns=$2 cluster=$3 pidvar=$4 restart=$5 pattern=$6
  cp_kill "${!pidvar}"
  poke "$ns" "$cluster"
  check_kube "$label: plugin stopped: the Cluster's phase reports the plugin failure" -- \
    cluster "$ns" "$cluster" "$(failed_with "$pattern")" --timeout 60 --show "$REASON"
  "$restart"
  poke "$ns" "$cluster"
  check_kube "$label: plugin restarted: the Cluster is healthy again" -- \
    cluster "$ns" "$cluster" "${PHASE_IS}'$HEALTHY'" --timeout 60
}

# ===== A. Unix sockets (PLUGIN_SOCKET_DIR) ==================================================
echo "== A. plugins on Unix sockets in PLUGIN_SOCKET_DIR"
sockets="$work/sockets"
mkdir -p "$sockets"
hello_pid="" go_pid="" hello_log="" go_log="" starts=0
# Each start of a plugin logs to a file of its own: next_log PREFIX sets
# new_log to PREFIX-N.log (not in a command substitution: it counts).
next_log() {
  starts=$((starts + 1))
  new_log="$work/logs/$1-$starts.log"
}
start_hello_socket() {
  next_log hello-socket
  hello_log=$new_log
  cp_spawn hello-socket "$hello_log" "$hello" plugin --plugin-path="$sockets"
  hello_pid=$CP_LAST_PID
  wait_socket "$sockets/$HELLO" "$hello_pid" "hello-world"
}
start_go_socket() {
  next_log go-socket
  go_log=$new_log
  cp_spawn go-socket "$go_log" "$goplugin" plugin --plugin-path="$sockets"
  go_pid=$CP_LAST_PID
  wait_socket "$sockets/$GOPLUGIN" "$go_pid" "the Go plugin"
}
start_hello_socket
start_go_socket
wal_log="$work/logs/wal-archive-socket.log"
cp_spawn wal-archive-socket "$wal_log" env SIDECAR_IMAGE="$WALARCHIVE_IMAGE" "$walarchive" plugin --plugin-path="$sockets"
wal_pid=$CP_LAST_PID
wait_socket "$sockets/$WALARCHIVE" "$wal_pid" "the wal-archive plugin"
start_operator cnpg-socket "$sockets"

apply "$(cluster_json e2e-socket hello "$HELLO" "$HELLO_PARAMETERS")"
apply "$(cluster_json e2e-socket go "$GOPLUGIN" '{"color": "red"}')"

run_checks "unix socket" e2e-socket
stop_restart "unix socket: hello-world" e2e-socket hello hello_pid start_hello_socket "dial unix .*/$HELLO"
stop_restart "unix socket: Go plugin" e2e-socket go go_pid start_go_socket "dial unix .*/$GOPLUGIN"

# The wal-archive plugin (examples/wal-archive): advertised to CloudNativePG,
# and its sidecar injected into the instance Pod CloudNativePG creates.
cat >"$work/e2e-socket-wal.json" <<JSON
{"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
 "metadata": {"name": "wal", "namespace": "e2e-socket"},
 "spec": {"instances": 1, "storage": {"size": "1Gi"},
          "plugins": [{"name": "$WALARCHIVE", "isWALArchiver": true,
                       "parameters": {"destinationPath": "s3://backups/e2e", "s3CredentialsSecret": "wal-creds"}}]}}
JSON
apply "$work/e2e-socket-wal.json"
ws="$(plugin_status "$WALARCHIVE")"
check_kube "unix socket: wal-archive: status.pluginStatus lists its services (WAL, Backup, RestoreJob, Metrics, sidecar injection)" -- \
  cluster e2e-socket wal \
  "{'TYPE_OPERATOR_SERVICE', 'TYPE_LIFECYCLE_SERVICE', 'TYPE_WAL_SERVICE', 'TYPE_BACKUP_SERVICE', 'TYPE_RESTORE_JOB', 'TYPE_METRICS', 'TYPE_INSTANCE_SIDECAR_INJECTION'} == set(($ws)['capabilities'])" \
  --timeout 60
SIDECAR="next(c for c in o['spec'].get('initContainers', []) if c['name'] == 'plugin-wal-archive')"
POSTGRES="next(c for c in o['spec']['containers'] if c['name'] == 'postgres')"
check_kube "unix socket: wal-archive: instance Pod wal-1 carries its native sidecar (image, restartPolicy Always, restricted, /plugins and PGDATA shared, credentials from the Secret)" -- \
  pod e2e-socket wal-1 \
  "($SIDECAR)['image'] == '$WALARCHIVE_IMAGE' and ($SIDECAR)['restartPolicy'] == 'Always' and ($SIDECAR)['securityContext']['runAsNonRoot'] and ($SIDECAR)['securityContext']['allowPrivilegeEscalation'] is False and ($SIDECAR)['securityContext']['capabilities']['drop'] == ['ALL'] and {'/plugins', '/var/lib/postgresql/data', '/controller'} <= {m['mountPath'] for m in ($SIDECAR)['volumeMounts']} and '/plugins' in {m['mountPath'] for m in ($POSTGRES)['volumeMounts']} and any(e['name'] == 'AWS_ACCESS_KEY_ID' and e['valueFrom']['secretKeyRef']['name'] == 'wal-creds' for e in ($SIDECAR)['env'])" \
  --timeout 90
called "unix socket: wal-archive" "$wal_log" GetPluginMetadata GetPluginCapabilities LifecycleHook

cp_kill "$operator_pid"
cp_kill "$hello_pid"
cp_kill "$go_pid"
cp_kill "$wal_pid"

# ===== B. Services with mTLS ==============================================================
echo "== B. plugins behind labelled Services, mTLS"
hello_port="$(cp_free_port)"
go_port="$(cp_free_port)"
start_hello_tls() {
  next_log hello-tls
  hello_log=$new_log
  cp_spawn hello-tls "$hello_log" "$hello" plugin --server-address="127.0.0.1:$hello_port" \
    --server-cert="$work/pki/hello-server.crt" --server-key="$work/pki/hello-server.key" \
    --client-cert="$work/pki/hello-client.crt"
  hello_pid=$CP_LAST_PID
  wait_port "$hello_port" "$hello_pid" "hello-world"
}
start_go_tls() {
  next_log go-tls
  go_log=$new_log
  cp_spawn go-tls "$go_log" env GRPC_GO_LOG_SEVERITY_LEVEL=info GRPC_GO_LOG_VERBOSITY_LEVEL=2 \
    "$goplugin" plugin --server-address="127.0.0.1:$go_port" \
    --server-cert="$work/pki/go-server.crt" --server-key="$work/pki/go-server.key" \
    --client-cert="$work/pki/go-client.crt"
  go_pid=$CP_LAST_PID
  wait_port "$go_port" "$go_pid" "the Go plugin"
}
start_hello_tls
start_go_tls

# tls_secret NAME CERT-BASENAME: a kubernetes.io/tls Secret in the operator's namespace.
tls_secret() {
  python3 - "$OPERATOR_NS" "$1" "$work/pki/$2.crt" "$work/pki/$2.key" >"$work/secret-$1.json" <<'PY'
import base64, json, sys
ns, name, crt, key = sys.argv[1:]
b64 = lambda p: base64.b64encode(open(p, "rb").read()).decode()
print(json.dumps({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                  "metadata": {"name": name, "namespace": ns},
                  "data": {"tls.crt": b64(crt), "tls.key": b64(key), "ca.crt": b64(crt)}}))
PY
  apply "$work/secret-$1.json"
}
# plugin_service NAME PLUGIN PORT SERVER-SECRET CLIENT-SECRET
plugin_service() {
  cat >"$work/service-$1.json" <<JSON
{"apiVersion": "v1", "kind": "Service",
 "metadata": {"name": "$1", "namespace": "$OPERATOR_NS",
              "labels": {"cnpg.io/pluginName": "$2"},
              "annotations": {"cnpg.io/pluginPort": "$3", "cnpg.io/pluginServerSecret": "$4",
                              "cnpg.io/pluginClientSecret": "$5"}},
 "spec": {"selector": {"app": "$1"}, "ports": [{"port": $3, "targetPort": $3, "protocol": "TCP"}]}}
JSON
  apply "$work/service-$1.json"
}
tls_secret hello-server-tls hello-server
tls_secret hello-client-tls hello-client
tls_secret go-server-tls go-server
tls_secret go-client-tls go-client
plugin_service cnpg-i-hello-world "$HELLO" "$hello_port" hello-server-tls hello-client-tls
plugin_service cnpgi-go-plugin "$GOPLUGIN" "$go_port" go-server-tls go-client-tls

# No sockets this time: every plugin comes from a Service.
mkdir -p "$work/no-sockets"
start_operator cnpg-mtls "$work/no-sockets"

apply "$(cluster_json e2e-mtls hello "$HELLO" "$HELLO_PARAMETERS")"
apply "$(cluster_json e2e-mtls go "$GOPLUGIN" '{"color": "red"}')"

run_checks "mTLS" e2e-mtls
stop_restart "mTLS: hello-world" e2e-mtls hello hello_pid start_hello_tls "127\.0\.0\.1:$hello_port.*connection refused"
stop_restart "mTLS: Go plugin" e2e-mtls go go_pid start_go_tls "127\.0\.0\.1:$go_port.*connection refused"

# A client certificate the plugin does not trust: the operator's client Secret
# is replaced; CloudNativePG re-registers the plugin with it (it watches the
# Secrets), the plugin refuses the handshake, the Cluster reports the error.
# How many times CloudNativePG's plugin controller registered plugin NAME.
registrations() {
  grep -c "\"msg\":\"Registered plugin\".*\"pluginName\":\"$1\"" "$operator_log" || true
}
# replace_client_secret LABEL PLUGIN SECRET CERT-BASENAME: rewrites the client
# Secret and waits until CloudNativePG has registered the plugin again with it.
replace_client_secret() {
  local label=$1 plugin=$2 secret=$3 cert=$4 before i
  before="$(registrations "$plugin")"
  tls_secret "$secret" "$cert"
  for ((i = 0; i < 150; i++)); do
    if [ "$(registrations "$plugin")" -gt "$before" ]; then
      ok "$label: Secret $secret now holds $cert.crt: CloudNativePG registered the plugin again"
      return 0
    fi
    sleep 0.2
  done
  fail "$label: Secret $secret now holds $cert.crt: CloudNativePG did not register the plugin again within 30 s"
}

# wrong_client LABEL NAMESPACE CLUSTER PLUGIN SECRET GOOD-CERT LOG-FILE REFUSAL-PATTERN
wrong_client() {
  local label=$1 ns=$2 cluster=$3 plugin=$4 secret=$5 good=$6 log=$7 pattern=$8 from
  # Only what the plugin logs from now on counts.
  from=$(($(wc -l <"$log") + 1))
  replace_client_secret "$label" "$plugin" "$secret" intruder-client
  poke "$ns" "$cluster"
  check_kube "$label: client certificate not trusted by the plugin: the Cluster's phase reports the plugin failure" -- \
    cluster "$ns" "$cluster" "$(failed_with "tls|certificate")" --timeout 60 --show "$REASON"
  # The plugin logs the refusal after it has sent its alert, so CloudNativePG
  # may report the failure first: give the line a few seconds to appear.
  local i logged=""
  for ((i = 0; i < 50; i++)); do
    if tail -n "+$from" "$log" | grep -Eq "$pattern"; then
      logged=1
      break
    fi
    sleep 0.2
  done
  if [ -n "$logged" ]; then
    ok "$label: the plugin refused the handshake (its log: $(tail -n "+$from" "$log" | grep -Eo "$pattern" | head -n1))"
  else
    fail "$label: the plugin's log shows no refused handshake within 10 s (/$pattern/ in $(basename "$log") from line $from)"
  fi
  replace_client_secret "$label" "$plugin" "$secret" "$good"
  poke "$ns" "$cluster"
  check_kube "$label: trusted client certificate back: the Cluster is healthy again" -- \
    cluster "$ns" "$cluster" "${PHASE_IS}'$HEALTHY'" --timeout 60
}
# The Rust plugin receives the untrusted certificate and rejects it. Go's
# crypto/tls server names the CAs it accepts in its certificate request, so
# CloudNativePG's Go client, holding no matching certificate, sends none.
wrong_client "mTLS: hello-world" e2e-mtls hello "$HELLO" hello-client-tls hello-client "$hello_log" \
  "TLS handshake refused.*invalid peer certificate: UnknownIssuer"
wrong_client "mTLS: Go plugin" e2e-mtls go "$GOPLUGIN" go-client-tls go-client "$go_log" \
  "ServerHandshake.*failed: tls: client didn't provide a certificate"

cp_kill "$operator_pid"
if grep -h "forbidden" "$work"/logs/cnpg-*.log >"$work/forbidden.txt"; then
  fail "CloudNativePG's RBAC refused some of its calls: $(head -c 600 "$work/forbidden.txt")"
else
  ok "no call of CloudNativePG (as system:serviceaccount:$OPERATOR_NS:cnpg-manager) was refused by RBAC"
fi

echo "   total $((SECONDS - t0)) s"
finished=1
checks_summary
