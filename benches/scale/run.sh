#!/usr/bin/env bash
# The scale benchmark (issue 35, section 1; tables in BENCHMARKS.md): N
# Clusters with the hello-world plugin on a simulated cluster, under
# cnpgi-operator and under the real CloudNativePG hosting the same Rust
# plugin, with the same load driver.
#
# Each (operator, N) runs on a fresh control plane (tests/lib/control-plane.sh:
# etcd, kube-apiserver, kube-controller-manager with the job controller) with
# kwok (sigs.k8s.io/kwok, from the Go module proxy) playing the kubelet of one
# fake node: Pods get an IP and turn Running and Ready, Job Pods complete. The
# load driver (cnpgi-scale-load) plays the scheduler, binding each Pod to that
# node. It creates the Clusters through the API server, so that the operator's
# admission webhooks run, at most CONCURRENCY at once. Measured:
#   - each create's latency, against the same creates on a control plane with
#     the same CRD and no webhook (the floor, a control plane of its own);
#   - when every instance Pod <cluster>-1 exists with the plugin's labels;
#   - the operator's and the plugin's RSS and CPU seconds, during the load and
#     over REST seconds after it;
#   - the plugin's answered calls at rest (per second, p50/p99 handler time,
#     from its log) and the API server's requests during the load (its
#     apiserver_request_total).
# CloudNativePG on a fake cluster stops where it needs the instance manager:
# its status port on each Pod (<pod IP>:8000) answers nothing, so its Clusters
# never become healthy, and it keeps polling them.
#
# Usage: benches/scale/run.sh [--smoke] [--clusters "100 1000 5000"]
#          [--operators "cnpgi-operator cloudnative-pg"] [--concurrency 16]
#          [--rest-seconds 300] [--timeout-seconds 900] [--release] [--out FILE.jsonl]
#   --smoke     5 Clusters, 3 s of rest (CI: proves the harness runs; numbers meaningless)
#   --build-only  build (or find cached) kwok and CloudNativePG, then exit (CI's background job)
#   --release   measure target/release binaries (built here with
#               CARGO_PROFILE_RELEASE_LTO=false); default target/debug
#   --bin-dir D measure the binaries in D instead (nothing built), e.g. a copy
#               of an earlier commit's, for a before/after table
#   --label L   name the cnpgi-operator rows "cnpgi-operator (L)"
#   --webhooks-only  cnpgi-operator with --disable-controller: the creates'
#               latency through its webhooks alone, without the CPU its
#               reconciles take beside them (no Pods; rows "(webhooks only)")
#   --reconciler-only  cnpgi-operator with --disable-webhooks and no webhook
#               registered: the creates' latency with its reconciles running
#               beside them but no admission (rows "(reconciler only)"), the
#               floor under the same load
#   --timeout-seconds S  how long the driver waits for every instance Pod to
#               be patched (default 900); past it, the row says how many were
# Prints the table; the raw results (one JSON object per operator and N) go to
# FILE.jsonl (default: the work directory, kept). Needs root? No. Needs Go >=
# 1.25, cargo, python3 with PyYAML, openssl, curl.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

clusters="100 1000"
operators="cnpgi-operator cloudnative-pg"
concurrency=16
rest=300
profile=debug
out=""
bin_dir=""
label=""
smoke=0
build_only=0
webhooks_only=0
reconciler_only=0
timeout=900
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) smoke=1 clusters=5 rest=3 timeout=120 ;;
    --build-only) build_only=1 ;;
    --clusters) clusters=$2; shift ;;
    --operators) operators=$2; shift ;;
    --concurrency) concurrency=$2; shift ;;
    --rest-seconds) rest=$2; shift ;;
    --release) profile=release ;;
    --out) out=$2; shift ;;
    --bin-dir) bin_dir=$2; shift ;;
    --label) label=$2; shift ;;
    --webhooks-only) webhooks_only=1 ;;
    --reconciler-only) reconciler_only=1 ;;
    --timeout-seconds) timeout=$2; shift ;;
    *) echo "scale: unknown argument $1 (see the usage at the top of $0)" >&2; exit 2 ;;
  esac
  shift
done
[ "$webhooks_only$reconciler_only" != 11 ] || { echo "scale: --webhooks-only and --reconciler-only exclude each other" >&2; exit 2; }

# Its own control planes, never a cluster named by E2E_KUBECONFIG.
unset E2E_KUBECONFIG
export CP_CONTROLLERS=garbagecollector,namespace,serviceaccount,job
# shellcheck source=../../tests/lib/control-plane.sh
source "$root/tests/lib/control-plane.sh"
export PYTHONDONTWRITEBYTECODE=1

die() { echo "scale: $*" >&2; exit 1; }
work="$(mktemp -d "${TMPDIR:-/tmp}/cnpgi-scale.XXXXXX")"
out="${out:-$work/results.jsonl}"
: >"$out"
on_exit() {
  if [ -d "$work" ]; then
    echo "scale: logs and results in $work" >&2
  fi
}
# shellcheck disable=SC2034 # read by control-plane.sh's exit trap
CP_ON_EXIT=on_exit
cp_install_traps

# --- builds (cached) ------------------------------------------------------------
# shellcheck source=../../tests/lib/go-env.sh
source "$root/tests/lib/go-env.sh"
cache="${CNPGI_E2E_CACHE:-$HOME/.cache/cnpgi-e2e}"
KWOK_VERSION=v0.8.0
kwok="$cache/kwok-$KWOK_VERSION/kwok"
if [ ! -x "$kwok" ]; then
  echo "== building kwok $KWOK_VERSION" >&2
  mkdir -p "$cache/kwok-$KWOK_VERSION"
  GOBIN="$cache/kwok-$KWOK_VERSION/.build" go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" ||
    die "cannot build kwok $KWOK_VERSION (go install sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION)"
  mv "$cache/kwok-$KWOK_VERSION/.build/kwok" "$kwok"
fi
kwok_src="$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')" ||
  die "cannot find kwok's module source (go mod download sigs.k8s.io/kwok@$KWOK_VERSION)"
# kwok's own stages: nodes Ready at once, Pods Running and Ready, Job Pods completed.
stages="$work/kwok-stages.yaml"
for f in node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml pod/general/pod-create.yaml \
  pod/general/pod-init-container-running.yaml pod/general/pod-init-container-completed.yaml \
  pod/general/pod-ready.yaml pod/general/pod-complete.yaml pod/general/pod-delete.yaml; do
  cat "$kwok_src/kustomize/stage/$f"
  echo "---"
done >"$stages"

case " $operators " in
  *" cloudnative-pg "*)
    CNPG_VERSION="${CNPG_VERSION:-v1.30.0}"
    export CNPG_VERSION
    cnpg_cache="$(bash "$root/tests/e2e/cnpg/build.sh")" || die "cannot build CloudNativePG (tests/e2e/cnpg/build.sh)"
    cnpg_src="$(go mod download -json "github.com/cloudnative-pg/cloudnative-pg@$CNPG_VERSION" |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')" || die "cannot find CloudNativePG's module source"
    ;;
esac
if [ "$build_only" = 1 ]; then
  rm -rf "$work"
  exit 0
fi

if [ -z "${CNPGI_SKIP_CARGO_BUILD:-}" ] && [ -z "$bin_dir" ]; then
  flags=(--quiet -p cnpgi-operator-cli -p cnpg-i-hello-world -p cnpgi-bench)
  if [ "$profile" = release ]; then
    flags+=(--release)
    export CARGO_PROFILE_RELEASE_LTO="${CARGO_PROFILE_RELEASE_LTO:-false}"
  fi
  (cd "$root" && cargo build "${flags[@]}") || die "cargo build ${flags[*]} failed"
fi
bin="${bin_dir:-$root/target/$profile}"
for b in cnpgi-operator cnpg-i-hello-world cnpgi-scale-load; do
  [ -x "$bin/$b" ] || die "$bin/$b is missing: cargo build -p cnpgi-operator-cli -p cnpg-i-hello-world -p cnpgi-bench${profile/debug/}"
done
scale() { python3 "$here/scale.py" "$@"; }
HELLO=cnpg-i-hello-world.cloudnative-pg.io
PARAMETERS='{"labels": "{\"first-label\": \"first-label-value\"}", "annotations": "{\"first-annotation\": \"first-annotation-value\"}"}'
PATCHED=first-label=first-label-value
NODE="kwok-node-0"

# wait_until WHAT SECONDS PID COMMAND...: polls COMMAND until it succeeds.
wait_until() {
  local what=$1 seconds=$2 pid=$3 i
  shift 3
  for ((i = 0; i < seconds * 10; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || die "$what: the process exited; see its log in $work"
    sleep 0.1
  done
  die "$what: not within $seconds s; see the logs in $work"
}

# control_plane DIR: a fresh control plane, its admin credentials exported for scale.py.
control_plane() {
  cp_start "$1" >/dev/null || die "the control plane did not start (logs in $1)"
  export E2E_SERVER="$CP_SERVER" E2E_CA="$CP_CA" E2E_CERT="$CP_ADMIN_CERT" E2E_KEY="$CP_ADMIN_KEY"
}

# crd_files OPERATOR: the CRDs the operator serves.
crd_files() {
  case "$1" in
    cnpgi-operator)
      "$bin/cnpgi-operator" crd >"$work/cnpgi-crd.yaml" || die "cnpgi-operator crd failed"
      echo "$work/cnpgi-crd.yaml"
      ;;
    # All of them: CloudNativePG does not start without its other kinds.
    cloudnative-pg) echo "$cnpg_cache"/crds/*.json ;;
  esac
}

# spec_of OPERATOR: the Clusters' spec, the same plugin and parameters.
spec_of() {
  case "$1" in
    cnpgi-operator) echo "{\"instances\": 1, \"plugins\": [{\"name\": \"$HELLO\", \"parameters\": $PARAMETERS}]}" ;;
    cloudnative-pg) echo "{\"instances\": 1, \"storage\": {\"size\": \"1Gi\"}, \"plugins\": [{\"name\": \"$HELLO\", \"parameters\": $PARAMETERS}]}" ;;
  esac
}

group_of() {
  case "$1" in
    cnpgi-operator) echo cnpgi.io ;;
    cloudnative-pg) echo postgresql.cnpg.io ;;
  esac
}

# load ARGS...: the driver, against the admin credentials.
load() {
  KUBECONFIG="$KUBECONFIG" "$bin/cnpgi-scale-load" --concurrency "$concurrency" "$@"
}

# warm_up: one create in a namespace of its own before the measured ones, so
# that neither run's first creates pay for the API server's first use of the
# CRD or the first connection to a webhook.
warm_up() {
  scale namespace warm-up || die "cannot create the namespace warm-up"
  load --group "$group" --namespace warm-up --prefix warm-up --clusters 1 --spec "$spec" >/dev/null ||
    die "the warm-up create failed"
  sleep 1
}

operator_pid="" plugin_pid="" operator_flags=() metrics_url=""
webhooks=webhooks
if [ "$webhooks_only" = 1 ]; then
  operator_flags=(--disable-controller)
elif [ "$reconciler_only" = 1 ]; then
  operator_flags=(--disable-webhooks)
  webhooks=no-webhooks
fi
# start_operator OPERATOR DIR: the plugin on a socket, then the operator hosting it.
start_operator() {
  local operator=$1 dir=$2 webhook metrics health kubeconfig
  mkdir -p "$dir/sockets"
  cp_spawn hello-world "$dir/hello-world.log" env RUST_LOG="info,cnpgi_pluginhelper::middleware=debug" \
    "$bin/cnpg-i-hello-world" plugin --plugin-path="$dir/sockets"
  plugin_pid=$CP_LAST_PID
  wait_until "the hello-world plugin's socket" 20 "$plugin_pid" test -S "$dir/sockets/$HELLO"
  webhook="$(cp_free_port)"
  metrics="$(cp_free_port)"
  metrics_url="http://127.0.0.1:$metrics/metrics"
  case "$operator" in
    cnpgi-operator)
      kubeconfig="$(scale cnpgi-operator "$dir" "$webhook" "$webhooks")" || die "cannot set up cnpgi-operator's RBAC and webhooks"
      health="$(cp_free_port)"
      cp_spawn cnpgi-operator "$dir/operator.log" env KUBECONFIG="$kubeconfig" RUST_LOG=info \
        "$bin/cnpgi-operator" run --namespace=cnpgi-system --plugin-dir="$dir/sockets" \
        --webhook-address="127.0.0.1:$webhook" --webhook-cert-dir="$dir/webhook" \
        --metrics-bind-address="127.0.0.1:$metrics" --health-probe-bind-address="127.0.0.1:$health" "${operator_flags[@]}"
      operator_pid=$CP_LAST_PID
      wait_until "cnpgi-operator ready with the plugin (cnpgi_plugin_ready 1)" 60 "$operator_pid" \
        sh -c "curl -sf --max-time 1 http://127.0.0.1:$metrics/metrics | grep -q '^cnpgi_plugin_ready{.*} 1'"
      ;;
    cloudnative-pg)
      kubeconfig="$(scale cloudnative-pg "$dir" "$webhook" "$cnpg_cache" "$cnpg_src")" ||
        die "cannot set up CloudNativePG's RBAC and webhooks"
      # CloudNativePG refuses Clusters of an architecture it has no instance
      # manager binary for (operator/manager_<arch> in its working directory).
      mkdir -p "$dir/operator-root/operator"
      ln -sf "$cnpg_cache/manager" "$dir/operator-root/operator/manager_$(go env GOARCH)"
      cp_spawn cloudnative-pg "$dir/operator.log" env --chdir="$dir/operator-root" \
        OPERATOR_NAMESPACE=cnpg-system PLUGIN_SOCKET_DIR="$dir/sockets" WEBHOOK_CERT_DIR="$dir/webhook" \
        KUBECONFIG="$kubeconfig" \
        "$cnpg_cache/manager" controller --leader-elect=false --metrics-bind-address="127.0.0.1:$metrics" \
        --webhook-port="$webhook"
      operator_pid=$CP_LAST_PID
      wait_until "CloudNativePG serving its metrics" 60 "$operator_pid" curl -sf --max-time 1 "http://127.0.0.1:$metrics/metrics"
      wait_until "CloudNativePG's webhook server" 60 "$operator_pid" bash -c ": >/dev/tcp/127.0.0.1/$webhook"
      ;;
  esac
}

now() { date +%s.%N; }

# run_one OPERATOR N: the floor, then the measured run; appends one JSON line to $out.
run_one() {
  local operator=$1 n=$2 dir="$work/$1-$2" crds spec group
  mkdir -p "$dir"
  echo "== $operator, $n Clusters" >&2
  spec="$(spec_of "$operator")"
  group="$(group_of "$operator")"

  # The floor: the same creates, the same CRD, no webhook, nothing running.
  control_plane "$dir/floor"
  read -r -a crds <<<"$(crd_files "$operator")"
  scale crd "${crds[@]}" >/dev/null || die "cannot create the CRD"
  scale namespace scale || die "cannot create the namespace"
  warm_up
  load --group "$group" --namespace scale --clusters "$n" --spec "$spec" >"$dir/floor.json" ||
    die "the floor's creates failed: $(cat "$dir/floor.json")"
  cp_stop

  control_plane "$dir/cp"
  scale crd "${crds[@]}" >/dev/null || die "cannot create the CRD"
  scale namespace scale || die "cannot create the namespace"
  scale node "$NODE" || die "cannot create the node"
  cp_spawn kwok "$dir/kwok.log" "$kwok" --kubeconfig="$KUBECONFIG" --config="$stages" \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --cidr=10.64.0.0/14 --node-ip=10.63.0.1
  local kwok_pid=$CP_LAST_PID
  wait_until "kwok marks node $NODE Ready" 60 "$kwok_pid" python3 - "$NODE" <<'PY'
import os, sys
sys.path.insert(0, os.path.join(os.environ["ROOT"], "tests", "lib"))
from kube import Kube
node = Kube.from_env().get(f"/api/v1/nodes/{sys.argv[1]}")
sys.exit(0 if any(c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", [])) else 1)
PY
  start_operator "$operator" "$dir"
  warm_up

  local t0 t1 t2 start during after api0 api1 api2 handlers0 handlers1 ended rc=0 wait_pods=()
  if [ "$webhooks_only" = 0 ] || [ "$operator" != cnpgi-operator ]; then
    wait_pods=(--node "$NODE" --patched-label "$PATCHED")
  fi
  start="$(scale proc "$operator_pid" "$plugin_pid")"
  api0="$(scale apiserver-requests)"
  handlers0="$(scale webhook-handlers "$metrics_url")"
  t0="$(now)"
  load --group "$group" --namespace scale --clusters "$n" --spec "$spec" "${wait_pods[@]}" \
    --timeout-seconds "$timeout" >"$dir/driver.json" || rc=$?
  t1="$(now)"
  during="$(scale proc "$operator_pid" "$plugin_pid")"
  api1="$(scale apiserver-requests)"
  handlers1="$(scale webhook-handlers "$metrics_url")"
  [ "$rc" = 0 ] || die "the load driver failed ($rc); see $dir"
  sleep "$rest"
  t2="$(now)"
  after="$(scale proc "$operator_pid" "$plugin_pid")"
  api2="$(scale apiserver-requests)"
  ended="$(scale summary scale "$group")"
  local subject=$operator
  if [ "$webhooks_only" = 1 ] && [ "$operator" = cnpgi-operator ]; then
    subject="$operator (webhooks only${label:+, $label})"
  elif [ "$reconciler_only" = 1 ] && [ "$operator" = cnpgi-operator ]; then
    subject="$operator (reconciler only${label:+, $label})"
  elif [ -n "$label" ] && [ "$operator" = cnpgi-operator ]; then
    subject="$operator ($label)"
  fi
  python3 - "$subject" "$n" "$operator_pid" "$plugin_pid" "$dir/floor.json" "$dir/driver.json" "$start" "$during" "$after" \
    "$api0" "$api1" "$api2" "$handlers0" "$handlers1" "$ended" "$(scale plugin-calls "$dir/hello-world.log" "$t0" "$t1")" \
    "$(scale plugin-calls "$dir/hello-world.log" "$t1" "$t2")" "$rest" >>"$out" <<'PY'
import json, sys
(subject, n, op, pl, floor, driver, start, during, after, api0, api1, api2, handlers0, handlers1, ended, load_calls, rest_calls, rest) = sys.argv[1:]
start, during, after = json.loads(start), json.loads(during), json.loads(after)
api0, api1, api2 = json.loads(api0), json.loads(api1), json.loads(api2)
def delta(a, b):
    return {k: v - a.get(k, 0) for k, v in b.items() if v - a.get(k, 0) > 0}
print(json.dumps({
    "subject": subject, "clusters": int(n), "rest_seconds": float(rest),
    "floor": json.load(open(floor)), "driver": json.load(open(driver)),
    "operator": {"start": start[op], "during": during[op], "rest": after[op]},
    "plugin": {"start": start[pl], "during": during[pl], "rest": after[pl]},
    "api_requests": delta(api0, api1), "api_requests_rest": delta(api1, api2),
    "webhook_handlers": delta(json.loads(handlers0), json.loads(handlers1)),
    "ended": json.loads(ended), "load_calls": json.loads(load_calls), "rest_calls": json.loads(rest_calls),
}))
PY
  cp_stop
}
export ROOT="$root"

for n in $clusters; do
  for operator in $operators; do
    run_one "$operator" "$n"
  done
done
echo "Machine: $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1); ${bin_dir:+the binaries in }${bin_dir:-$profile build}"
scale table "$out"
if [ "$smoke" = 1 ]; then
  # The harness ran end to end: every Cluster created, every instance Pod patched.
  python3 - "$out" <<'PY' || die "smoke: not every Cluster was created and its Pod patched; see $work"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    assert r["driver"]["failed"] == 0 and r["floor"]["failed"] == 0, r
    assert r["driver"]["patched"]["outcome"] == "all", r
PY
  rm -rf "$work"
fi
