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

passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }

# The cnpg-i modules are served by the Go module proxy but not by its checksum
# database mirror here; go.sum pins their hashes instead.
export GONOSUMDB="github.com/cloudnative-pg"
export GOFLAGS="-mod=mod"

echo "== building"
(cd "$root" && cargo build --quiet -p cnpgi-operator-cli -p cnpg-i-hello-world)
(cd "$here" && go build -o "$work/goplugin" ./goplugin && go build -o "$work/gohello" ./gohello && go build -o "$work/goclient" ./goclient)

echo "== 0. wire compatibility: proto/ against the descriptors compiled into upstream's Go stubs"
(cd "$here" && go run ./godescriptors "$work/upstream.bin")
if python3 "$here/wire_compat.py" "$work/upstream.bin" "$root/proto" >"$work/wire.txt"; then
  ok "proto/ is wire-identical to cnpg-i $(sed -n 's/.*cnpg-i \(v[0-9.]*\).*/\1/p' "$here/go.mod" | head -1): $(tail -1 "$work/wire.txt")"
else
  grep -v '^ok' "$work/wire.txt"; fail "proto/ differs from upstream CNPG-I on the wire (above)"
fi
operator="$root/target/debug/cnpgi-operator"
hello="$root/target/debug/cnpg-i-hello-world"

echo "== certificates"
leaf() { # name subject-alt-name usage [ca-name]
  local name=$1 san=$2 usage=$3 ca=${4:-}
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/$name.key" \
    -subj "/CN=$name" -out "$work/$name.csr" 2>/dev/null
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=%s\n%s' \
    "$usage" "${san:+subjectAltName=$san}" > "$work/$name.ext"
  if [ -z "$ca" ]; then
    openssl x509 -req -in "$work/$name.csr" -signkey "$work/$name.key" -days 30 -extfile "$work/$name.ext" \
      -out "$work/$name.crt" 2>/dev/null
  else
    openssl x509 -req -in "$work/$name.csr" -CA "$work/$ca.crt" -CAkey "$work/$ca.key" -CAcreateserial -days 30 \
      -extfile "$work/$name.ext" -out "$work/$name.crt" 2>/dev/null
  fi
}
# cert-manager selfSigned style: two self-signed leaves.
leaf ss-server "DNS:cnpg-i-hello-world" serverAuth
leaf ss-client "" clientAuth
# CA-issued leaves; only the leaves are given to the peers (pinned leaf trust).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/ca.key" -out "$work/ca.crt" \
  -days 30 -subj "/CN=interop-ca" -addext "basicConstraints=critical,CA:TRUE" 2>/dev/null
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

# Runs render and check-plugin with the plugin flags "$@"; $1 names the transport.
drive() {
  local transport=$1; shift
  if "$operator" check-plugin "$@" >"$work/check.txt" 2>&1; then
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
if (cd "$root" && CNPGI_GO_PLUGIN="$work/goplugin" cargo test --quiet -p cnpgi-operator-cli --test go_plugin 2>&1 | tail -5); then
  ok "cnpgi-operator webhook + lifecycle -> Go plugin (crates/operator-cli/tests/go_plugin.rs)"
else
  fail "cnpgi-operator webhook + lifecycle -> Go plugin (crates/operator-cli/tests/go_plugin.rs)"
fi

echo "interop-go: $passed passed, $failed failed"
[ "$failed" = 0 ]
