#!/usr/bin/env bash
# Interoperability with the Go reference implementation, both directions:
#
# 0. proto/ compared, definition by definition, with the descriptors compiled
#    into upstream's Go stubs (every CNPG-I package): wire_compat.py.
# 1. Go client as CloudNativePG (upstream cnpg-i stubs, crypto/tls configured
#    like the operator) -> the Rust hello-world plugin, over mTLS, with
#    cert-manager-style self-signed certificates and with CA-issued ones.
# 2. cnpgi-operator (render, check-plugin, and the webhook/lifecycle code
#    paths in a Rust test) -> a Go plugin written on cnpg-i-machinery's
#    helpers, over a Unix socket and over mTLS (both certificate kinds).
# 3. Every sample of examples/hello-world/clusters rendered through the Rust
#    hello-world and through a Go hello-world on cnpg-i-machinery: same exit
#    codes, errors on the same fields, same Pods and status.
# 5. The instance commands (wal-archive, wal-restore, backup, restore,
#    metrics), check-plugin and render's EnrichConfiguration -> the Go
#    plugin's WAL, Backup, RestoreJobHooks, Postgres and Metrics services;
#    /metrics parsed by Prometheus' own text parser (expfmt).
# 6. A Go client set up like CloudNativePG's instance manager -> the Rust
#    plugin's instance services (tests/dir-plugin, on cnpgi-pluginhelper).
#
# Usage: tests/interop/run.sh   (from anywhere; needs Go >= 1.25, openssl, cargo)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="$(mktemp -d)"
# PIDs of the servers this script starts. Only the top-level shell may add to
# it: a command substitution runs in a subshell whose changes are lost.
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

SUITE=interop-go
# shellcheck source=../lib/checks.sh
source "$here/../lib/checks.sh"

# shellcheck source=../lib/go-env.sh
source "$here/../lib/go-env.sh"
# Without cgo, as every build of this module (tests/lib/go-env.sh says why).
export CGO_ENABLED=0

echo "== building"
# CNPGI_SKIP_CARGO_BUILD=1: use target/debug as it is (.ci/run built it).
if [ -z "${CNPGI_SKIP_CARGO_BUILD:-}" ]; then
  (cd "$root" && cargo build --quiet -p cnpgi-operator-cli -p cnpg-i-hello-world -p cnpgi-dir-plugin)
fi
(cd "$here" && go build -o "$work/goplugin" ./goplugin && go build -o "$work/gohello" ./gohello && go build -o "$work/goclient" ./goclient \
  && go build -o "$work/goinstance" ./goinstance)

echo "== 0. wire compatibility: proto/ against the descriptors compiled into upstream's Go stubs"
(cd "$here" && go run ./godescriptors "$work/upstream.bin")
if python3 "$here/wire_compat.py" "$work/upstream.bin" "$root/proto" >"$work/wire.txt"; then
  ok "proto/ is wire-identical to cnpg-i $(sed -n 's/.*cnpg-i \(v[0-9.]*\).*/\1/p' "$here/go.mod" | head -1): $(tail -1 "$work/wire.txt")"
else
  grep -v '^ok' "$work/wire.txt"; fail "proto/ differs from upstream CNPG-I on the wire (above)"
fi
# Its resolved path: `restore` writes its own (resolved) path into
# restore_command, and target/ may be a link (.ci/run's cached target).
operator="$(readlink -f "$root/target/debug/cnpgi-operator")"
hello="$root/target/debug/cnpg-i-hello-world"

echo "== certificates"
# shellcheck source=../lib/pki.sh
source "$here/../lib/pki.sh"
leaf() { # name subject-alt-name usage [ca-name]
  pki_leaf "$work" "$1" "/CN=$1" "$2" "$3" "${4:-}" 30 || die "cannot make the certificate $1"
}
# cert-manager selfSigned style: two self-signed leaves.
leaf ss-server "DNS:cnpg-i-hello-world" serverAuth
leaf ss-client "" clientAuth
# CA-issued leaves; only the leaves are given to the peers (pinned leaf trust).
pki_ca "$work" ca "/CN=interop-ca" 30 || die "cannot make the CA"
leaf ca-server "DNS:cnpg-i-hello-world" serverAuth ca
leaf ca-client "" clientAuth ca

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 1 200); do (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; return 1; }

# Starts a plugin serving mTLS with certificate set $2 (ss|ca) and sets $port.
# Call it directly, never as $(serve_tls ...), so that its PID is recorded.
serve_tls() {
  local binary=$1 set=$2
  port=$(free_port)
  "$binary" plugin --server-address="127.0.0.1:$port" --server-cert="$work/$set-server.crt" \
    --server-key="$work/$set-server.key" --client-cert="$work/$set-client.crt" >"$work/$(basename "$binary")-$set.log" 2>&1 &
  pids+=($!)
  wait_port "$port" || { echo "plugin $binary did not listen" >&2; cat "$work/$(basename "$binary")-$set.log" >&2; return 1; }
}

echo "== 1. Go client (as CloudNativePG) -> Rust hello-world"
for set in ss ca; do
  serve_tls "$hello" "$set"
  if "$work/goclient" -address "127.0.0.1:$port" -server-cert "$work/$set-server.crt" \
      -client-cert "$work/$set-client.crt" -client-key "$work/$set-client.key" \
      -server-name cnpg-i-hello-world -label "certificates: $set"; then
    ok "Go client -> Rust hello-world ($set certificates): every RPC"
  else
    fail "Go client -> Rust hello-world ($set certificates): see the FAIL lines above"
  fi
done

echo "== 2. cnpgi-operator -> Go plugin (cnpg-i-machinery)"
GO_PLUGIN=cnpgi-go-plugin.example.com
cat >"$work/cluster.yaml" <<YAML
apiVersion: postgresql.cnpg.io/v1
kind: Cluster
metadata:
  name: go-example
spec:
  instances: 2
  plugins:
  - name: $GO_PLUGIN
YAML
cat >"$work/wrong-color.yaml" <<YAML
apiVersion: postgresql.cnpg.io/v1
kind: Cluster
metadata:
  name: go-example
spec:
  instances: 1
  plugins:
  - name: $GO_PLUGIN
    parameters:
      color: green
YAML

sed 's/color: green/color: red/' "$work/wrong-color.yaml" >"$work/red.yaml"

# check-plugin's Cluster: the sample's, with the archive the plugin's
# Metrics/Collect needs.
mkdir -p "$work/check-archive"
cat >"$work/check-cluster.yaml" <<YAML
apiVersion: postgresql.cnpg.io/v1
kind: Cluster
metadata:
  name: go-example
  namespace: default
spec:
  instances: 1
  plugins:
  - name: $GO_PLUGIN
    parameters:
      archive: $work/check-archive
YAML

# Runs render and check-plugin with the plugin flags "$@"; $1 names the transport.
drive() {
  local transport=$1; shift
  if "$operator" check-plugin --cluster "$work/check-cluster.yaml" "$@" >"$work/check.txt" 2>&1; then
    ok "cnpgi-operator -> Go plugin ($transport): check-plugin passes"
  else
    cat "$work/check.txt"; fail "cnpgi-operator -> Go plugin ($transport): check-plugin (failed checks above)"
  fi
  if "$operator" render "$work/cluster.yaml" "$@" >"$work/render.yaml" 2>"$work/render.err" \
      && [ "$(grep -c 'go-plugin: blue' "$work/render.yaml")" = 2 ] \
      && grep -q 'color: blue' "$work/render.yaml"; then
    ok "cnpgi-operator -> Go plugin ($transport): render (MutateCluster default, Pod LifecycleHook label)"
  else
    cat "$work/render.err" "$work/render.yaml"; fail "cnpgi-operator -> Go plugin ($transport): render"
  fi
  # SetStatusInCluster: the Go plugin requires its status entry, as upstream's do.
  if grep -q 'status: .{"color":"blue"}' "$work/render.yaml"; then
    ok "cnpgi-operator -> Go plugin ($transport): status entry written before SetStatusInCluster"
  else
    cat "$work/render.yaml"; fail "cnpgi-operator -> Go plugin ($transport): SetStatusInCluster status"
  fi
  local code=0
  "$operator" render "$work/wrong-color.yaml" "$@" >/dev/null 2>"$work/invalid.err" || code=$?
  if [ "$code" = 1 ] && grep -q 'spec.plugins\[0\].parameters.color: Invalid value: "green": must be red or blue' "$work/invalid.err"; then
    ok "cnpgi-operator -> Go plugin ($transport): ValidateClusterCreate error (machinery's path) mapped to the field"
  else
    cat "$work/invalid.err"; fail "cnpgi-operator -> Go plugin ($transport): ValidateClusterCreate (exit $code)"
  fi
  code=0
  "$operator" render "$work/red.yaml" --old "$work/cluster.yaml" "$@" >/dev/null 2>"$work/change.err" || code=$?
  if [ "$code" = 1 ] && grep -q 'spec.plugins\[0\].parameters.color: Invalid value: "red": cannot be changed' "$work/change.err"; then
    ok "cnpgi-operator -> Go plugin ($transport): ValidateClusterChange error mapped to the field"
  else
    cat "$work/change.err"; fail "cnpgi-operator -> Go plugin ($transport): ValidateClusterChange (exit $code)"
  fi
}

drive "Unix socket" --plugin-exec "$work/goplugin"
for set in ss ca; do
  serve_tls "$work/goplugin" "$set"
  drive "mTLS, $set certificates" --plugin "$GO_PLUGIN=https://127.0.0.1:$port" \
    --client-cert "$work/$set-client.crt" --client-key "$work/$set-client.key" \
    --server-ca "$work/$set-server.crt" --server-name cnpg-i-hello-world
done

echo "== 3. hello-world's samples: the Rust hello-world and a Go one on cnpg-i-machinery, side by side"
samples="$root/examples/hello-world/clusters"
fields() { grep -o '^\* [^:]*' "$1" | sort; }
for sample in cluster-example cluster-example-with-parameters cluster-example-with-mistake cluster-example-labels-changed; do
  extra=()
  [ "$sample" = cluster-example-labels-changed ] && extra=(--old "$samples/cluster-example-with-parameters.yaml")
  rust_code=0 go_code=0
  "$operator" render "$samples/$sample.yaml" "${extra[@]}" --plugin-exec "$hello" >"$work/rust.yaml" 2>"$work/rust.err" || rust_code=$?
  "$operator" render "$samples/$sample.yaml" "${extra[@]}" --plugin-exec "$work/gohello" >"$work/go.yaml" 2>"$work/go.err" || go_code=$?
  if [ "$rust_code" != "$go_code" ]; then
    cat "$work/rust.err" "$work/go.err"; fail "$sample: render exits $rust_code with the Rust hello-world, $go_code with the Go one"
  elif [ "$rust_code" = 0 ]; then
    if python3 "$here/compare_render.py" "$work/rust.yaml" "$work/go.yaml"; then
      ok "$sample: both exit 0 with the same spec, status, Pod labels, annotations and sidecar"
    else
      fail "$sample: the Rust and Go hello-worlds render different Clusters or Pods (above)"
    fi
  elif [ "$rust_code" = 1 ] && [ -n "$(fields "$work/rust.err")" ] && [ "$(fields "$work/rust.err")" = "$(fields "$work/go.err")" ]; then
    ok "$sample: both exit 1 on $(fields "$work/rust.err" | tr '\n' ' ')"
  else
    cat "$work/rust.err" "$work/go.err"; fail "$sample: both exit $rust_code, errors on different fields"
  fi
done

echo "== 4. cnpgi-operator webhook and reconciler paths -> Go plugin"
# --workspace, not -p cnpgi-operator-cli: the test is the same, and the
# workspace's feature resolution reuses the build CI (and `cargo test`) made
# instead of rebuilding ten crates and cnpgi-operator in target/debug.
if (cd "$root" && CNPGI_GO_PLUGIN="$work/goplugin" cargo test --quiet --workspace --test go_plugin 2>&1 | tail -5); then
  ok "cnpgi-operator webhook + lifecycle -> Go plugin (crates/operator-cli/tests/go_plugin.rs)"
else
  fail "cnpgi-operator webhook + lifecycle -> Go plugin (crates/operator-cli/tests/go_plugin.rs)"
fi

echo "== 5. instance commands, check-plugin and EnrichConfiguration -> the Go plugin's instance services"
inst="$work/instance"
mkdir -p "$inst/sockets" "$inst/archive" "$inst/pgdata/pg_wal"
echo 17 >"$inst/pgdata/PG_VERSION"
instance_cluster() { # pgdata: the Cluster of the instance, the plugin's PGDATA set to $1
  cat <<YAML
apiVersion: postgresql.cnpg.io/v1
kind: Cluster
metadata:
  name: go-example
  namespace: default
  uid: 3b0f6c1e-8a2d-4c5e-9f70-1d2e3f4a5b6c
status:
  currentPrimary: go-example-1
spec:
  instances: 1
  postgresql:
    parameters:
      max_connections: "50"
  plugins:
  - name: $GO_PLUGIN
    isWALArchiver: true
    parameters:
      color: red
      archive: $inst/archive
      pgdata: $1
YAML
}
instance_cluster "$inst/pgdata" >"$inst/cluster.yaml"
"$work/goplugin" plugin --plugin-path "$inst/sockets" >"$work/goplugin-instance.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 200); do [ -S "$inst/sockets/$GO_PLUGIN" ] && break; sleep 0.05; done
# As PostgreSQL runs them: in PGDATA, the Cluster and sockets from the environment.
instance() { (cd "$inst/pgdata" && CNPGI_CLUSTER="$inst/cluster.yaml" CNPGI_PLUGIN_DIR="$inst/sockets" "$operator" "$@"); }

if "$operator" check-plugin --plugin-dir "$inst/sockets" --cluster "$inst/cluster.yaml" >"$work/check-instance.txt" 2>&1; then
  ok "check-plugin -> Go plugin: every advertised service ($(tail -1 "$work/check-instance.txt" | sed 's/^ *//'))"
else
  cat "$work/check-instance.txt"; fail "check-plugin -> Go plugin's instance services (failed checks above)"
fi
segment=000000010000000000000003
# A 1 MiB segment (initdb --wal-segsize 1) with the long page header
# PostgreSQL writes: the instance command refuses anything else under a
# segment's name.
python3 - "$inst/pgdata/pg_wal/$segment" <<'PY'
import os, struct, sys
size = 1 << 20
header = struct.pack("<HHIQII", 0xD110, 0x0006, 1, 0, 0, 0)[:24].ljust(24, b"\0")
header += struct.pack("<QII", 7, size, 8192)
open(sys.argv[1], "wb").write(header + os.urandom(size - len(header)))
PY
if instance wal-archive "pg_wal/$segment" 2>"$work/archive.err" && cmp -s "$inst/pgdata/pg_wal/$segment" "$inst/archive/$segment" \
    && instance wal-archive "pg_wal/$segment" 2>>"$work/archive.err"; then
  ok "wal-archive -> Go plugin: WAL.Archive of %p made absolute; the same file again succeeds"
else
  cat "$work/archive.err"; fail "wal-archive -> Go plugin"
fi
cp "$inst/pgdata/pg_wal/$segment" "$work/segment.bak"
# The same segment with one byte changed past its header: a whole segment,
# with other content.
cp "$work/segment.bak" "$inst/pgdata/pg_wal/$segment"
printf 'X' | dd of="$inst/pgdata/pg_wal/$segment" bs=1 seek=4096 conv=notrunc status=none
cmp -s "$inst/pgdata/pg_wal/$segment" "$work/segment.bak" && printf 'Y' | dd of="$inst/pgdata/pg_wal/$segment" bs=1 seek=4096 conv=notrunc status=none
code=0; instance wal-archive "pg_wal/$segment" 2>"$work/archive.err" || code=$?
if [ "$code" = 1 ] && grep -q "plugin $GO_PLUGIN: WAL/Archive failed: AlreadyExists" "$work/archive.err"; then
  ok "wal-archive -> Go plugin: other content under an archived name exits 1: $(cat "$work/archive.err")"
else
  cat "$work/archive.err"; fail "wal-archive -> Go plugin: a conflicting file (exit $code)"
fi
cp "$work/segment.bak" "$inst/pgdata/pg_wal/$segment"
code=0; instance wal-restore 00000002.history pg_wal/RECOVERYHISTORY 2>"$work/restore.err" || code=$?
if instance wal-restore "$segment" pg_wal/RECOVERYXLOG && cmp -s "$inst/pgdata/pg_wal/RECOVERYXLOG" "$work/segment.bak" \
    && [ "$code" = 1 ] && grep -q NotFound "$work/restore.err" && [ ! -e "$inst/pgdata/pg_wal/RECOVERYHISTORY" ]; then
  ok "wal-restore -> Go plugin: WAL.Restore writes the file; a missing one exits 1 (NotFound)"
else
  cat "$work/restore.err"; fail "wal-restore -> Go plugin (missing file: exit $code)"
fi
if instance backup --plugin-name "$GO_PLUGIN" --backup-name interop --parameter origin=interop >"$work/backup.json" 2>"$work/backup.err" \
    && python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["backupId"]=="interop" and r["metadata"]["writer"]=="go", r' "$work/backup.json" \
    && [ -f "$inst/archive/base/interop/PG_VERSION" ]; then
  ok "backup -> Go plugin: Backup.Backup with the Backup object (phase started); its BackupResult as JSON"
else
  cat "$work/backup.err" "$work/backup.json"; fail "backup -> Go plugin"
fi
instance_cluster "$inst/restored" >"$inst/restore.yaml"
if CNPGI_CLUSTER="$inst/restore.yaml" CNPGI_PLUGIN_DIR="$inst/sockets" "$operator" restore --plugin-name "$GO_PLUGIN" \
      --pgdata "$inst/restored" >"$work/restore.env" 2>"$work/restore.err" \
    && grep -qx "GO_PLUGIN_BACKUP=interop" "$work/restore.env" && [ -f "$inst/restored/PG_VERSION" ] \
    && [ -f "$inst/restored/recovery.signal" ] && grep -qx "archive_command = 'false'" "$inst/restored/postgresql.auto.conf" \
    && grep -qx "restore_command = '$operator wal-restore --cluster $inst/restore.yaml --plugin-dir $inst/sockets %f %p'" "$inst/restored/postgresql.auto.conf"; then
  ok "restore -> Go plugin: RestoreJobHooks.Restore fills PGDATA; restore_config (its /controller/manager wal-restore mapped to cnpgi-operator's), archive_command = 'false', recovery.signal written; envs printed"
else
  cat "$work/restore.err" "$work/restore.env"; fail "restore -> Go plugin"
fi
if "$operator" render "$inst/cluster.yaml" --plugin-dir "$inst/sockets" >"$work/render-instance.yaml" 2>"$work/render-instance.err" \
    && grep -q 'cnpgi.io/postgresqlConfiguration: .{"go_plugin.color":"red","max_connections":"50"}' "$work/render-instance.yaml"; then
  ok "render -> Go plugin: EnrichConfiguration's complete map on the Pod (cnpgi.io/postgresqlConfiguration)"
else
  cat "$work/render-instance.err"; grep -n postgresqlConfiguration "$work/render-instance.yaml"; fail "render -> Go plugin: EnrichConfiguration"
fi
metrics_port=$(free_port)
CNPGI_CLUSTER="$inst/cluster.yaml" CNPGI_PLUGIN_DIR="$inst/sockets" "$operator" metrics --address "127.0.0.1:$metrics_port" \
  >"$work/metrics.log" 2>&1 &
pids+=($!)
if wait_port "$metrics_port" && "$work/goinstance" -scrape "http://127.0.0.1:$metrics_port/metrics" -label "cnpgi-operator metrics" \
    -expect cnpgi_go_plugin_archived_wal_files,cnpgi_go_plugin_archive_calls_total,cnpg_collector_last_collection_error,cnpg_collector_collection_errors_total; then
  ok "metrics -> Go plugin: Define and Collect on each scrape; /metrics parsed by Prometheus' text parser"
else
  cat "$work/metrics.log"; fail "metrics -> Go plugin (FAIL lines above)"
fi

echo "== 6. Go client (as CloudNativePG's instance manager) -> the Rust plugin's instance services"
rust="$work/rust-instance"
mkdir -p "$rust/sockets" "$rust/archive" "$rust/pgdata/pg_wal"
echo 17 >"$rust/pgdata/PG_VERSION"
"$root/target/debug/cnpgi-dir-plugin" plugin --plugin-path "$rust/sockets" >"$work/dir-plugin.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 200); do [ -S "$rust/sockets/cnpgi-dir-plugin.example.com" ] && break; sleep 0.05; done
printf '{"apiVersion":"postgresql.cnpg.io/v1","kind":"Cluster","metadata":{"name":"pg","namespace":"default"},"spec":{"plugins":[{"name":"cnpgi-dir-plugin.example.com","parameters":{"archive":"%s","pgdata":"%s","enrich":"wal_level=logical"}}]}}' \
  "$rust/archive" "$rust/pgdata" >"$rust/cluster.json"
if "$work/goinstance" -socket "$rust/sockets/cnpgi-dir-plugin.example.com" -name cnpgi-dir-plugin.example.com \
    -cluster "$rust/cluster.json" -archive "$rust/archive" -pgdata "$rust/pgdata" -label "Rust dir-plugin"; then
  ok "Go client -> Rust plugin: WAL, Backup, RestoreJobHooks, Postgres and Metrics, as CloudNativePG calls them"
else
  fail "Go client -> Rust plugin's instance services (FAIL lines above)"
fi

checks_summary
