#!/usr/bin/env bash
# The plugin's memory during a base backup (BENCHMARKS.md, "A sidecar's
# memory during a base backup"): what a sidecar running only the plugin
# holds while it streams PGDATA to the store.
#
# One PostgreSQL, PGDATA filled by `pgbench -i -s SCALE` (no load: the
# figure is the plugin's, not the noise of a workload); then, for each store
# (a local directory, S3 on moto on loopback, `s3-far`: the same moto
# S3_RTT_MS of round trip away through delay_proxy.py) and each plugin
# binary, a fresh plugin process takes one base backup
# (`cnpgi-operator backup`) while its memory is sampled every 20 ms:
#   idle      RssAnon + RssFile once it serves, before the backup;
#   peak      VmHWM at the end (the kernel's own high-water mark), and the
#             highest RssAnon (heap, stacks) and RssFile (the binary's
#             mapped code) sampled: a sidecar's memory is both.
#
# Usage: bench/backup_memory.sh [--smoke]
#   SCALE=100 STORES="local s3 s3-far" S3_RTT_MS=50 bench/backup_memory.sh
#   PLUGINS="before=/path/to/old/cnpgi-wal-archive after=target/release/cnpgi-wal-archive"
#     compares binaries in one run (default: target/release's, labelled "plugin")
#   LEVEL=N: the plugin's compressionLevel (its default when unset)
# --smoke: SCALE=1, target/debug, local and s3; CI runs it to prove the
#   harness, its figures mean nothing.
# Needs PostgreSQL's server binaries and pgbench, python3 with moto[server]
# and boto3, and cnpgi-operator beside the plugin.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
# shellcheck source=common.sh
source "$here/common.sh"
smoke=0
[ "${1:-}" = --smoke ] && smoke=1
scale="${SCALE:-100}"
stores="${STORES:-local s3 s3-far}"
rtt_ms="${S3_RTT_MS:-50}"
level="${LEVEL:-}"
bin="$root/target/release"
if [ "$smoke" = 1 ]; then
  scale=1 stores="local s3" bin="$root/target/debug"
fi
plugins="${PLUGINS:-plugin=$bin/cnpgi-wal-archive}"
check_level backup_memory.sh "$level"
pgbin="$(pg_config --bindir)"
PLUGIN_NAME=wal-archive.cnpgi.io
for tool in "$bin/cnpgi-operator" "$pgbin/pgbench"; do
  [ -x "$tool" ] || { echo "backup_memory.sh: $tool is missing (cargo build ${bin##*/} binaries of cnpgi-operator-cli)" >&2; exit 1; }
done

bench_workdir wal-backup-memory
labels=()
for entry in $plugins; do
  label="${entry%%=*}" path="${entry#*=}"
  if [ "$label" = "$entry" ] || [ ! -x "$path" ]; then echo "backup_memory.sh: PLUGINS wants LABEL=EXECUTABLE entries; '$entry' is not one" >&2; exit 2; fi
  install -m 755 "$path" "$work/plugin-$label"
  labels+=("$label")
done
install -m 755 "$bin/cnpgi-operator" "$work/"
mkd "$work/run"

start_moto bench
# s3-far: the same moto behind a proxy adding half of S3_RTT_MS each way.
start_far_s3 "$rtt_ms"

pgdata="$work/pg"
port="$(free_port)"
u "$pgbin/initdb" -D "$pgdata" -U postgres --auth=trust >"$work/initdb.log" 2>&1
cat >>"$pgdata/postgresql.conf" <<EOF
wal_level = replica
archive_mode = on
archive_command = '/bin/true'
max_wal_size = 8GB
EOF
u "$pgbin/pg_ctl" -D "$pgdata" -l "$work/pg.log" -w -o "-p $port -k $work/run -c listen_addresses=''" start >/dev/null
u "$pgbin/pgbench" -h "$work/run" -p "$port" -U postgres -i -s "$scale" -q postgres >/dev/null 2>&1
data_mib="$(du -sm --exclude=pg_wal "$pgdata" | cut -f1)"

# memory PID: "RssAnon RssFile" of the process, in KiB.
memory() { awk '/^RssAnon/ {a = $2} /^RssFile/ {f = $2} END {print a + 0, f + 0}' "/proc/$1/status" 2>/dev/null || echo "0 0"; }
mib() { echo $((($1 + 512) / 1024)); }

echo "PGDATA: $data_mib MiB (pgbench -i -s $scale)${level:+; compressionLevel $level}."
echo "| store | plugin | idle: anon + code | peak during the backup (VmHWM) | peak anon / code | backup time |"
echo "|---|---|---|---|---|---|"
n=0
for store in $stores; do
  for label in "${labels[@]}"; do
    n=$((n + 1))
    rm -rf "$work/sockets"
    mkd "$work/sockets" "$work/store"
    case "$store" in
    local) destination="$work/store/$n" endpoint="" ;;
    s3) destination="s3://bench/$n" endpoint=", \"endpointURL\": \"http://127.0.0.1:$s3_port\"" ;;
    s3-far) destination="s3://bench/$n" endpoint=", \"endpointURL\": \"http://127.0.0.1:$far_port\"" ;;
    *) echo "backup_memory.sh: unknown store '$store' (local, s3, s3-far)" >&2; exit 2 ;;
    esac
    cat >"$work/cluster.json" <<JSON
{"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
 "metadata": {"name": "bench", "namespace": "default", "uid": "$(python3 -c 'import uuid; print(uuid.uuid4())')"},
 "spec": {"plugins": [{"name": "$PLUGIN_NAME", "isWALArchiver": true,
   "parameters": {"destinationPath": "$destination", "serverName": "bench", "pgHost": "$work/run", "pgPort": "$port"$endpoint${level:+, \"compressionLevel\": \"$level\"}}}]},
 "status": {"currentPrimary": "bench-1", "targetPrimary": "bench-1"}}
JSON
    chown --reference="$work" "$work/cluster.json"
    "${as_user[@]}" env HOME="$work" PGDATA="$pgdata" "$work/plugin-$label" plugin \
      --plugin-path="$work/sockets" --log-level=warn >>"$work/plugin.log" 2>&1 &
    plugin_pid=$!
    pids+=("$plugin_pid")
    for ((i = 0; i < 200; i++)); do [ -S "$work/sockets/$PLUGIN_NAME" ] && break; sleep 0.05; done
    [ -S "$work/sockets/$PLUGIN_NAME" ] || { echo "backup_memory.sh: the plugin $label did not serve: $(tail -5 "$work/plugin.log")" >&2; exit 1; }
    sleep 0.3
    read -r idle_anon idle_file < <(memory "$plugin_pid")
    # The sampler writes its running peaks; it ends with the plugin.
    (
      peak_anon=0 peak_file=0
      while kill -0 "$plugin_pid" 2>/dev/null; do
        read -r anon file < <(memory "$plugin_pid")
        ((anon > peak_anon)) && peak_anon=$anon
        ((file > peak_file)) && peak_file=$file
        echo "$peak_anon $peak_file" >"$work/peaks.tmp" && mv "$work/peaks.tmp" "$work/peaks"
        sleep 0.02
      done
    ) &
    sampler=$!
    pids+=("$sampler")
    t0="$(now)"
    u "$work/cnpgi-operator" backup --cluster "$work/cluster.json" --plugin-dir "$work/sockets" --plugin "$PLUGIN_NAME" >/dev/null 2>"$work/backup.err" ||
      { echo "backup_memory.sh: the backup through $label into $store failed: $(cat "$work/backup.err")" >&2; exit 1; }
    t1="$(now)"
    hwm="$(awk '/^VmHWM/ {print $2}' "/proc/$plugin_pid/status")"
    sleep 0.05
    kill "$plugin_pid" 2>/dev/null || true
    wait "$plugin_pid" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    read -r peak_anon peak_file <"$work/peaks"
    printf '| %s | %s | %s + %s MiB | %s MiB | %s / %s MiB | %s s |\n' "$store" "$label" \
      "$(mib "$idle_anon")" "$(mib "$idle_file")" "$(mib "$hwm")" "$(mib "$peak_anon")" "$(mib "$peak_file")" \
      "$(python3 -c "print(f'{$t1 - $t0:.1f}')")"
  done
done
