#!/usr/bin/env bash
# The DatabaseTable example end to end (examples/database-table): its operator,
# on cnpgi-host, with two CNPG-I plugins in one socket directory, against a
# real kube-apiserver (tests/lib/control-plane.sh) and a real PostgreSQL 15:
#
#   postgres.tables.example.cnpgi.io  the PostgreSQL implementation (Rust,
#       examples/database-table-postgres): maps the agnostic column types,
#       validates and defaults at admission, creates, partitions (its
#       PostgreSqlDatabaseTable reference) and alters the table, reports the
#       partitions, drops the table on deletion with deletionPolicy Delete;
#       the server app-db is overridden to this PostgreSQL
#       (--server-override app-db=127.0.0.1:PORT), its credentials in the
#       Secret app-db-app as CloudNativePG writes them;
#   naming.tables.example.cnpgi.io    a policy (Go, on upstream's cnpg-i and
#       cnpg-i-machinery, plugins/naming, built here with go build): refuses
#       reserved words as names.
#
# The seed's table prefers mariadb.tables.example.cnpgi.io, which is not
# installed: the operator chooses the PostgreSQL implementation and says why.
# Everything is started as users would: the operator and the PostgreSQL
# plugin with their own flags, each under its ServiceAccount's token and the
# RBAC of manifests/ (nothing more), the CRDs from --print-crd, its admission
# webhooks registered over HTTPS, and PostgreSQL with password
# authentication on 127.0.0.1. The checks (admission, the implementation
# choice, references and partitions, the partition report and /metrics,
# changes, deletion, a plugin stopped and restarted) are e2e.py's, run in
# phases between which this script stops or starts a plugin; every process
# is started here and stopped by its PID on any exit. Prints one line per
# check, then `DatabaseTable e2e: N passed, M failed`.
#
# Usage: examples/database-table/tests/e2e.sh
#   CNPGI_SKIP_CARGO_BUILD=1  use the target directory's debug binaries as they are
#                           (CARGO_TARGET_DIR, else target/)
#   KEEP_E2E_WORKDIR=1      keep the work directory (logs, data) even on success
#   CHECKS=REGEX            only the checks whose names match (tests/lib/checks.py)
# Needs: Go >= 1.25 (first run: tests/e2e/build-kube.sh), cargo, openssl,
# curl, python3 with PyYAML, grpcio and grpcio-tools (installed if missing), Debian's
# PostgreSQL 15 server (initdb and postgres under `pg_config --bindir`). As
# root, PostgreSQL runs as the dedicated user cnpgi-dbt (created if missing).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"

# The API server calls the operator's webhooks on this machine's loopback:
# this test needs its own control plane.
unset E2E_KUBECONFIG
# shellcheck source=../../../tests/lib/control-plane.sh
source "$root/tests/lib/control-plane.sh"
SUITE="DatabaseTable e2e"
# shellcheck source=../../../tests/lib/checks.sh
source "$root/tests/lib/checks.sh"
# shellcheck source=../../../tests/lib/system-user.sh
source "$root/tests/lib/system-user.sh"
# shellcheck source=../../../tests/lib/go-env.sh
source "$root/tests/lib/go-env.sh"

# Every process started here carries CNPGI_CI_RUN (.ci/run's, or one of its
# own when run alone): .ci/leftovers.py finds any still alive at the end.
if [ -z "${CNPGI_CI_RUN:-}" ]; then
  CNPGI_CI_RUN="dbt-e2e-$$-$(date +%s%N)"
  export CNPGI_CI_RUN
fi
# No __pycache__ in the source tree (e2e.py imports kube.py and checks.py).
export PYTHONDONTWRITEBYTECODE=1

pgbin="$(pg_config --bindir 2>/dev/null || true)"
for tool in openssl curl python3 "$pgbin/initdb" "$pgbin/postgres" "$pgbin/psql"; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is missing (Debian: apt-get install postgresql openssl curl python3)"
done
if ! python3 -c 'import yaml' 2>/dev/null; then
  python3 -m pip install -q --disable-pip-version-check -r "$root/tests/e2e/requirements.txt" ||
    python3 -m pip install -q --disable-pip-version-check --user --break-system-packages -r "$root/tests/e2e/requirements.txt" ||
    die "cannot install PyYAML (tests/e2e/requirements.txt)"
fi
command -v go >/dev/null 2>&1 || die "Go >= 1.25 is required: the naming plugin (plugins/naming) is built with go build"

work="$(mktemp -d "${TMPDIR:-/tmp}/cnpgi-dbt-e2e.XXXXXX")"
chmod 755 "$work"
mkdir -p "$work/logs" "$work/sockets" "$work/pki" "$work/webhook"
finished=0
pg_pid="" postgres_plugin_pid=""
on_exit() {
  # PostgreSQL first, with a fast shutdown (cp_stop would ask for a smart one).
  [ -z "$pg_pid" ] || cp_kill "$pg_pid" INT
  cp_stop
  [ "$finished" = 1 ] || echo "$SUITE: stopped early, after $passed passed, $failed failed" >&2
  if [ "$finished" != 1 ] || [ "$failed" != 0 ]; then
    checks_show_logs "$work"/logs/*.log
  fi
  if [ -n "${KEEP_E2E_WORKDIR:-}" ] || [ "$finished" != 1 ] || [ "$failed" != 0 ]; then
    echo "$SUITE: work directory kept: $work" >&2
  else
    rm -rf "$work"
  fi
}
# shellcheck disable=SC2034 # read by control-plane.sh's exit trap
CP_ON_EXIT=on_exit
cp_install_traps

# --- build ------------------------------------------------------------------------------------
t0=$SECONDS
if [ -z "${CNPGI_SKIP_CARGO_BUILD:-${E2E_SKIP_CARGO_BUILD:-}}" ]; then
  echo "== building"
  (cd "$root" && cargo build -q -p cnpgi-example-database-table -p cnpgi-example-database-table-postgres) ||
    die "cargo build -p cnpgi-example-database-table -p cnpgi-example-database-table-postgres failed"
fi
target="${CARGO_TARGET_DIR:-$root/target}/debug"
operator_bin="$target/database-table-operator"
postgres_plugin_bin="$target/database-table-postgres"
# The Go naming plugin, static, into the work directory.
naming_plugin_bin="$work/naming"
(cd "$here/../plugins/naming" && CGO_ENABLED=0 go build -o "$naming_plugin_bin" .) ||
  die "go build of examples/database-table/plugins/naming failed"
for bin in "$operator_bin" "$postgres_plugin_bin"; do
  [ -x "$bin" ] || die "$bin is missing (cargo build -p cnpgi-example-database-table -p cnpgi-example-database-table-postgres)"
done
POSTGRES_PLUGIN=postgres.tables.example.cnpgi.io
NAMING_PLUGIN=naming.tables.example.cnpgi.io

# wait_for WHAT PID SECONDS COMMAND...: until COMMAND succeeds, or stops the
# suite when PID exits first or SECONDS pass.
wait_for() {
  local what=$1 pid=$2 seconds=$3 i
  shift 3
  for ((i = 0; i < seconds * 10; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || die "$what: the process exited"
    sleep 0.1
  done
  die "$what: not within $seconds s"
}
accepts_unix() { python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' "$1"; }
accepts_tcp() { (: >"/dev/tcp/127.0.0.1/$1"); }

# --- PostgreSQL 15 ----------------------------------------------------------------------------
echo "== PostgreSQL"
# initdb refuses root: as root, PostgreSQL runs as a dedicated user.
# setpriv execs (no intermediate process), so a recorded PID is the program's.
as_user=()
if [ "$(id -u)" = 0 ]; then
  user=cnpgi-dbt
  ensure_system_user "$user"
  as_user=(setpriv "--reuid=$(id -u "$user")" "--regid=$(id -g "$user")" --init-groups --)
fi
mkdir -p "$work/pgdata" "$work/run"
[ "${#as_user[@]}" = 0 ] || chown "$user:" "$work/pgdata" "$work/run"
pg_run() { "${as_user[@]}" env HOME="$work/run" "$@"; }
pg_run "$pgbin/initdb" -D "$work/pgdata" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
  >"$work/logs/initdb.log" 2>&1 || die "initdb failed: $(tail -n 5 "$work/logs/initdb.log")"
pg_port="$(cp_free_port)"
cp_spawn postgres "$work/logs/postgres.log" "${as_user[@]}" env HOME="$work/run" "$pgbin/postgres" -D "$work/pgdata" \
  -p "$pg_port" -k "$work/run" -c listen_addresses=127.0.0.1
pg_pid=$CP_LAST_PID
# The checks' psql: the superuser, over the Unix socket, in the database app.
cat >"$work/psql" <<EOF
#!/bin/sh
exec ${as_user[*]} env HOME="$work/run" "$pgbin/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h "$work/run" -p "$pg_port" -U postgres "\$@"
EOF
chmod 755 "$work/psql"
wait_for "PostgreSQL on port $pg_port" "$pg_pid" 60 "$work/psql" -d postgres -c 'SELECT 1'
pg_password="$(openssl rand -hex 16)"
"$work/psql" -d postgres -c "CREATE ROLE app LOGIN PASSWORD '$pg_password'" -c "CREATE DATABASE app OWNER app" \
  >/dev/null || die "cannot create the role and the database app"
PGPASSWORD="$pg_password" "$pgbin/psql" -X -q -A -t -h 127.0.0.1 -p "$pg_port" -U app -d app -c 'SELECT 1' >/dev/null 2>&1 ||
  die "the role app cannot log in with its password over TCP on 127.0.0.1:$pg_port"

# --- the control plane, the webhook certificate -------------------------------------------------
echo "== control plane"
cp_start "$work/cp" || die "the control plane did not start"
export E2E_SERVER="$CP_SERVER" E2E_CA="$CP_CA" E2E_CERT="$CP_ADMIN_CERT" E2E_KEY="$CP_ADMIN_KEY"
pki_ca "$work/pki" webhook-ca "/CN=database-table-webhook-ca" || die "cannot make the webhook CA"
pki_leaf "$work/pki" webhook "/CN=database-table-operator" "IP:127.0.0.1,DNS:localhost" serverAuth webhook-ca ||
  die "cannot make the webhook certificate"
cp "$work/pki/webhook.crt" "$work/webhook/tls.crt"
cp "$work/pki/webhook.key" "$work/webhook/tls.key"
"$operator_bin" --print-crd >"$work/crd.yaml" || die "database-table-operator --print-crd failed"
webhook_port="$(cp_free_port)"
metrics_port="$(cp_free_port)"
# How long a deleted table waits for its plugins' cleanup (the operator's
# --cleanup-deadline; the plugin-stopped phase waits it out once).
cleanup_deadline=20

# phase NAME: e2e.py's checks of phase NAME; they count in this suite's. In
# the background, recorded by cp_spawn: a signal to this script is handled at
# once, and the exit trap stops the checks too.
phase() {
  local rc=0
  : >"$work/results"
  cp_spawn "e2e.py $1" - python3 "$here/e2e.py" "$1" --results "$work/results" --workdir "$work" --crd "$work/crd.yaml" \
    --webhook-url "https://127.0.0.1:$webhook_port" --webhook-ca "$work/pki/webhook-ca.crt" \
    --pg-password "$pg_password" --metrics-port "$metrics_port" --cleanup-deadline "$cleanup_deadline"
  wait "$CP_LAST_PID" || rc=$?
  cp_kill "$CP_LAST_PID" # gone already: only forgotten by cp_stop
  passed=$((passed + $(grep -c '^ok' "$work/results" || true)))
  failed=$((failed + $(grep -c '^FAIL' "$work/results" || true)))
  skipped=$((skipped + $(grep -c '^skipped' "$work/results" || true)))
  if [ "$rc" != 0 ] && ! grep -q '^FAIL' "$work/results"; then
    fail "e2e.py $1 exited $rc"
  fi
}

# The Kubernetes objects users would apply: the namespace, the server's
# credentials Secret, the CRDs, the webhook configurations, the RBAC.
phase setup
[ "$failed" = 0 ] || die "the set-up failed (above)"

# --- the plugins, then the operator --------------------------------------------------------------
echo "== plugins and operator"
starts=0
start_postgres_plugin() {
  starts=$((starts + 1))
  cp_spawn postgres-plugin "$work/logs/postgres-plugin-$starts.log" \
    env KUBECONFIG="$work/database-table-postgres.kubeconfig" "$postgres_plugin_bin" plugin --plugin-path "$work/sockets" \
    --server-override "app-db=127.0.0.1:$pg_port" --metrics-address "127.0.0.1:$metrics_port"
  postgres_plugin_pid=$CP_LAST_PID
  wait_for "$POSTGRES_PLUGIN listening" "$postgres_plugin_pid" 20 accepts_unix "$work/sockets/$POSTGRES_PLUGIN"
}
start_postgres_plugin
cp_spawn naming-plugin "$work/logs/naming-plugin.log" "$naming_plugin_bin" plugin --plugin-path "$work/sockets" --log-format text
wait_for "$NAMING_PLUGIN listening" "$CP_LAST_PID" 30 accepts_unix "$work/sockets/$NAMING_PLUGIN"
cp_spawn operator "$work/logs/operator.log" env KUBECONFIG="$work/database-table-operator.kubeconfig" \
  "$operator_bin" --namespace database-table-system --plugin-dir "$work/sockets" \
  --webhook-cert-dir "$work/webhook" --webhook-address "127.0.0.1:$webhook_port" --cleanup-deadline "${cleanup_deadline}s"
# It serves its webhooks once plugin discovery's first pass is done.
wait_for "the operator's webhooks on 127.0.0.1:$webhook_port" "$CP_LAST_PID" 60 accepts_tcp "$webhook_port"

# --- the checks ----------------------------------------------------------------------------------
echo "== checks"
phase main
echo "== $POSTGRES_PLUGIN stopped (SIGTERM)"
cp_kill "$postgres_plugin_pid"
phase plugin-stopped
echo "== $POSTGRES_PLUGIN started again"
start_postgres_plugin
phase plugin-restarted

# --- nothing left behind ----------------------------------------------------------------------
cp_kill "$pg_pid" INT
pg_pid=""
cp_stop
check "everything stopped: no process started by this run is alive (.ci/leftovers.py)" \
  python3 "$root/.ci/leftovers.py" "$SUITE" $$ "$PPID"
check "everything stopped: the Go plugin removed its socket" test ! -e "$work/sockets/$NAMING_PLUGIN"
echo "   took $((SECONDS - t0)) s"
finished=1
checks_summary
