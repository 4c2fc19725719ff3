#!/usr/bin/env bash
# Sustained WAL archiving under write load (BENCHMARKS.md, "WAL archiving
# under load"): how many segments a second PostgreSQL's archive_command gets
# through, for `cnpgi-operator wal-archive` one segment at a time and with
# --max-parallel, into a local directory and into S3 (moto on loopback), and
# (unless BARMAN=0) for barman-cloud-wal-archive (the program plugin-barman-cloud's
# sidecar and CloudNativePG's in-tree archiving run for each segment) into the
# same S3.
#
# Each row, on a fresh PGDATA (16 MiB segments):
#   1. archiving paused (archive_command = ''), `pgbench -i` writes a backlog
#      of at least BACKLOG segments, all `.ready`, then `sync`;
#   2. pgbench's TPC-B load starts (CLIENTS clients, default 2, until the end
#      of the row; CLIENTS=0: none, the archiver alone on the machine) and
#      archive_command is set (stores: a local directory, moto on loopback,
#      and `s3-far`, the same moto S3_RTT_MS (default 50) of round trip away
#      through bench/delay_proxy.py): the row's rate is BACKLOG segments over the
#      seconds until pg_stat_archiver counts them archived, with PostgreSQL
#      writing more WAL all along;
#   3. every request's time (archive_command's start to its exit, taken by a
#      bash wrapper with $EPOCHREALTIME, so the wrapper's own start is left
#      out): p50 and p99. With --max-parallel the requests for segments
#      archived ahead are answered from the spool, so the p50 drops while a
#      batch's first request waits for all of it;
#   4. CPU per segment of the backlog: the plugin's process, the archive_command
#      processes (their CPU, summed by the wrapper) and the whole machine's
#      (PostgreSQL and pgbench included);
#   5. the peak RSS of the plugin's process (VmHWM) while it archives the
#      backlog, and, the peak reset, during a base backup of the PGDATA
#      through it (`cnpgi-operator backup`), the load (if any) still running.
#
# Usage: bench/sustained.sh [--smoke]
#   BACKLOG=128 PARALLEL="1 8" STORES="local s3 s3-far" S3_RTT_MS=50 BARMAN=auto|1|0 bench/sustained.sh
#   CLIENTS=N: pgbench clients writing during each row (2; 0 for no load)
#   LEVEL=N: the plugin's compressionLevel (zstd; the plugin's default, 1, when unset)
#   PERF=DIR: records where the whole machine's CPU goes while each row's
#     backlog is archived (`perf record -a`, no call graphs) into
#     DIR/<store>-<at once>.data; `perf report -i FILE --sort comm,dso,sym`
#     then splits the plugin's and the archive_command processes' time by
#     function (build with CARGO_PROFILE_RELEASE_STRIP=none for their names)
# --smoke: a backlog of 4 segments, one row per store at --max-parallel 4 and
#   barman skipped; CI runs it on debug binaries to prove the harness, its
#   figures mean nothing.
# Binaries: target/release (cargo build --release -p cnpgi-wal-archive
#   -p cnpgi-operator-cli), or target/debug with --smoke. Needs PostgreSQL's
#   server binaries and pgbench, python3 with moto[server] and boto3; barman's
#   row installs barman[cloud] 3.19.1 into BARMAN_VENV (default
#   /var/cache/cnpgi-bench/barman-venv) with Debian's python3 (BARMAN=0: no row).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
# shellcheck source=common.sh
source "$here/common.sh"
smoke=0
[ "${1:-}" = --smoke ] && smoke=1
backlog="${BACKLOG:-128}"
parallel_list="${PARALLEL:-1 8}"
stores="${STORES:-local s3 s3-far}"
rtt_ms="${S3_RTT_MS:-50}"
barman="${BARMAN:-auto}"
level="${LEVEL:-}"
clients="${CLIENTS:-2}"
perf_dir="${PERF:-}"
if [ -n "$perf_dir" ]; then
  command -v perf >/dev/null || { echo "sustained.sh: PERF=$perf_dir needs perf (Debian's linux-perf)" >&2; exit 1; }
  mkdir -p "$perf_dir"
  perf_dir="$(cd "$perf_dir" && pwd)"
fi
check_level sustained.sh "$level"
[[ $clients =~ ^[0-9]+$ ]] || { echo "sustained.sh: CLIENTS must be a number of pgbench clients (0 for no load), not '$clients'" >&2; exit 2; }
bin="$root/target/release"
if [ "$smoke" = 1 ]; then
  backlog=4 parallel_list=4 barman=0 bin="$root/target/debug"
fi
pgbin="$(pg_config --bindir)"
PLUGIN_NAME=wal-archive.cnpgi.io
for tool in "$bin/cnpgi-wal-archive" "$bin/cnpgi-operator" "$pgbin/pgbench"; do
  [ -x "$tool" ] || { echo "sustained.sh: $tool is missing (cargo build ${bin##*/} binaries of cnpgi-wal-archive and cnpgi-operator-cli)" >&2; exit 1; }
done
# barman-cloud in a virtual environment of Debian's python3 that PostgreSQL's
# user can run (a pyenv under /root is out of its reach), made once.
barman_venv="${BARMAN_VENV:-/var/cache/cnpgi-bench/barman-venv}"
if [ "$barman" != 0 ] && [ ! -x "$barman_venv/bin/barman-cloud-wal-archive" ]; then
  mkdir -p "$(dirname "$barman_venv")"
  if ! { /usr/bin/python3 -m venv "$barman_venv" && "$barman_venv/bin/pip" install -q --disable-pip-version-check 'barman[cloud]==3.19.1'; } >&2; then
    [ "$barman" = auto ] || { echo "sustained.sh: cannot install barman[cloud] into $barman_venv" >&2; exit 1; }
    echo "sustained.sh: barman[cloud] could not be installed; its row is skipped" >&2
    barman=0
  fi
fi
[ "$barman" = auto ] && barman=1

bench_workdir wal-sustained
install -m 755 "$bin/cnpgi-wal-archive" "$bin/cnpgi-operator" "$work/"
sql() { u "$pgbin/psql" -X -q -A -t -h "$work/run" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 -c "$1"; }
mkd "$work/run"

start_moto bench
# s3-far: the same moto behind a proxy adding half of S3_RTT_MS each way.
start_far_s3 "$rtt_ms"

# The wrapper PostgreSQL runs as archive_command (timed LOG COMMAND...): one
# line per request appended to LOG, "microseconds exit-status file ticks": the
# command's own time, and its CPU time (user + system, in clock ticks: this
# shell's reaped children's, fields 16 and 17 of /proc/$$/stat).
cat >"$work/timed" <<'EOF'
#!/bin/bash
log=$1
shift
start=$EPOCHREALTIME
"$@"
status=$?
end=$EPOCHREALTIME
read -r -a stat </proc/$$/stat
echo "$(( ${end/./} - ${start/./} )) $status ${!#} $(( stat[15] + stat[16] ))" >>"$log"
exit $status
EOF
chmod 755 "$work/timed"

# machine_ticks: the CPU time every core spent busy so far (user, nice, system,
# irq, softirq, steal; /proc/stat), in clock ticks.
machine_ticks() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }
# process_ticks PID: the process's CPU time so far (user + system), in clock ticks.
process_ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }

# row LABEL STORE KIND PARALLEL: one measured row (see the header).
row() {
  local label=$1 store=$2 kind=$3 parallel=$4 destination endpoint="" cluster="$work/cluster.json" plugin_pid="" command s3_url
  pgdata="$work/pg"
  rm -rf "$pgdata" "$work/sockets" "$work/store" "$work/cnpgi-wal-spool" "$work/requests"
  mkd "$work/sockets" "$work/store"
  : >"$work/requests"; chown --reference="$work" "$work/requests"
  case "$store" in
  local) destination="$work/store" s3_url="" ;;
  s3 | s3-far)
    s3_url="http://127.0.0.1:$s3_port"
    [ "$store" = s3-far ] && s3_url="http://127.0.0.1:$far_port"
    destination="s3://bench/${label// /-}-$store-$parallel"
    endpoint=", \"endpointURL\": \"$s3_url\""
    ;;
  esac
  port="$(free_port)"
  cat >"$cluster" <<JSON
{"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
 "metadata": {"name": "bench", "namespace": "default", "uid": "$(python3 -c 'import uuid; print(uuid.uuid4())')"},
 "spec": {"plugins": [{"name": "$PLUGIN_NAME", "isWALArchiver": true,
   "parameters": {"destinationPath": "$destination", "serverName": "bench", "pgHost": "$work/run", "pgPort": "$port"$endpoint${level:+, \"compressionLevel\": \"$level\"}}}]},
 "status": {"currentPrimary": "bench-1", "targetPrimary": "bench-1"}}
JSON
  chown --reference="$work" "$cluster"
  if [ "$kind" = cnpgi ]; then
    "${as_user[@]}" env HOME="$work" PGDATA="$pgdata" "$work/cnpgi-wal-archive" plugin \
      --plugin-path="$work/sockets" --log-level=warn >>"$work/plugin.log" 2>&1 &
    plugin_pid=$!
    pids+=("$plugin_pid")
    for ((i = 0; i < 200; i++)); do [ -S "$work/sockets/$PLUGIN_NAME" ] && break; sleep 0.05; done
    command="$work/cnpgi-operator wal-archive --cluster $cluster --plugin-dir $work/sockets --max-parallel $parallel %p"
  else
    command="$barman_venv/bin/barman-cloud-wal-archive --endpoint-url $s3_url $destination bench %p"
  fi
  u "$pgbin/initdb" -D "$pgdata" -U postgres --auth=trust >"$work/initdb.log" 2>&1
  cat >>"$pgdata/postgresql.conf" <<EOF
wal_level = replica
archive_mode = on
archive_command = ''
max_wal_size = 8GB
checkpoint_timeout = 30min
EOF
  u "$pgbin/pg_ctl" -D "$pgdata" -l "$work/pg.log" -w -o "-p $port -k $work/run -c listen_addresses=''" start >/dev/null
  # 1. the backlog (pgbench -i writes at least 2 segments per 3 scale units).
  local scale=$((backlog * 3 / 2 + 4)) ready
  u "$pgbin/pgbench" -h "$work/run" -p "$port" -U postgres -i -s "$scale" -q postgres >/dev/null 2>&1
  sql "SELECT pg_switch_wal()" >/dev/null
  ready="$(find "$pgdata/pg_wal/archive_status" -name '*.ready' | wc -l)"
  [ "$ready" -ge "$backlog" ] || { echo "sustained.sh: pgbench -i -s $scale left $ready ready segments, fewer than $backlog" >&2; exit 1; }
  # The backlog and the table on disk before the clock starts: otherwise the
  # writeback of pgbench -i's 2.7 GiB falls into the timed window, more in
  # one row than in another (rows of the same binary moved by a third).
  sync
  # 2. load, then archiving on.
  local load=""
  if [ "$clients" -gt 0 ]; then
    u "$pgbin/pgbench" -h "$work/run" -p "$port" -U postgres -c "$clients" -j "$clients" -T 3600 -n postgres >/dev/null 2>&1 &
    load=$!
  fi
  local t0 t1 archived=0 failed
  sql "ALTER SYSTEM SET archive_command = '$work/timed $work/requests $command'" >/dev/null
  sql "SELECT pg_reload_conf()" >/dev/null
  local perf_pid=""
  if [ -n "$perf_dir" ] && [ "$kind" = cnpgi ]; then
    perf record -a -F 999 -o "$perf_dir/$store-$parallel.data" >"$work/perf.log" 2>&1 &
    perf_pid=$!
    # Stopped by the cleanup too if the row fails before its end: a
    # whole-machine recording must not outlive the script.
    pids+=("$perf_pid")
  fi
  t0="$(now)"
  local cpu0 plugin_cpu0=0
  cpu0="$(machine_ticks)"
  [ -z "$plugin_pid" ] || plugin_cpu0="$(process_ticks "$plugin_pid")"
  for ((i = 0; i < 36000; i++)); do
    archived="$(sql "SELECT archived_count FROM pg_stat_archiver")"
    [ "$archived" -ge "$ready" ] && break
    sleep 0.1
  done
  t1="$(now)"
  if [ -n "$perf_pid" ]; then kill -INT "$perf_pid"; wait "$perf_pid" || true; fi
  local machine_cpu plugin_cpu=""
  machine_cpu=$(( $(machine_ticks) - cpu0 ))
  [ -z "$plugin_pid" ] || plugin_cpu=$(( $(process_ticks "$plugin_pid") - plugin_cpu0 ))
  failed="$(sql "SELECT failed_count FROM pg_stat_archiver")"
  # 5. the plugin's peak RSS while archiving; then, the peak reset
  # (clear_refs 5), during a base backup through it.
  local rss_archive="" rss_backup="" backup_s=""
  if [ "$kind" = cnpgi ]; then
    local b0 b1
    rss_archive="$(awk '/VmHWM/ {printf "%.0f MiB", $2 / 1024}' "/proc/$plugin_pid/status")"
    echo 5 >"/proc/$plugin_pid/clear_refs"
    b0="$(now)"
    u "$work/cnpgi-operator" backup --cluster "$cluster" --plugin-dir "$work/sockets" --plugin "$PLUGIN_NAME" >/dev/null 2>"$work/backup.err" ||
      { echo "sustained.sh: the backup failed: $(cat "$work/backup.err")" >&2; exit 1; }
    b1="$(now)"
    backup_s="$(python3 -c "print(f'{$b1 - $b0:.1f}')")"
    rss_backup="$(awk '/VmHWM/ {printf "%.0f MiB", $2 / 1024}' "/proc/$plugin_pid/status")"
  fi
  if [ -n "$load" ]; then kill "$load" 2>/dev/null || true; wait "$load" 2>/dev/null || true; fi
  local data_mib
  data_mib="$(du -sm --exclude=pg_wal "$pgdata" | cut -f1)"
  u "$pgbin/pg_ctl" -D "$pgdata" stop -m fast -w >/dev/null
  if [ -n "$plugin_pid" ]; then kill "$plugin_pid" 2>/dev/null || true; wait "$plugin_pid" 2>/dev/null || true; fi
  python3 - "$work/requests" "$ready" "$t0" "$t1" "$failed" "$label" "$store" "$parallel" "$rss_archive" "$rss_backup" "$backup_s" "$data_mib" \
    "$machine_cpu" "$plugin_cpu" "$(getconf CLK_TCK)" <<'PY'
import sys
(log, ready, t0, t1, failed, label, store, parallel, rss_archive, rss_backup, backup_s, data_mib,
 machine_cpu, plugin_cpu, tick) = sys.argv[1:]
lines = [line.split() for line in open(log) if line.strip()]
times = sorted(int(fields[0]) / 1e6 for fields in lines)
seconds = float(t1) - float(t0)
# CPU per segment of the backlog, in ms: the plugin's process, the
# archive_command processes (all requests of the window), the whole machine.
tick_ms = 1000 / int(tick)
command_cpu = sum(int(fields[3]) for fields in lines if len(fields) > 3) * tick_ms
def per_segment(ms):
    return f"{ms / int(ready):.0f}"
cpu = (f"{per_segment(int(plugin_cpu) * tick_ms) if plugin_cpu else '-'} / {per_segment(command_cpu)} / "
       f"{per_segment(int(machine_cpu) * tick_ms)}")
def q(p):
    return times[min(len(times) - 1, int(p * len(times)))] * 1000 if times else float("nan")
memory = (f"{rss_archive} | {rss_backup} ({data_mib} MiB in {backup_s} s)" if rss_archive
          else "not measured | not measured")
print(f"| {label} | {store} | {parallel} | {ready} in {seconds:.1f} s | {int(ready) / seconds:.1f} | "
      f"{q(0.5):.0f} / {q(0.99):.0f} ms | {cpu} | {failed} | {memory} |")
PY
}

[ -z "$level" ] || echo "The plugin's compressionLevel: $level."
under="under pgbench -c $clients"
[ "$clients" -gt 0 ] || under="no load"
echo "| archive_command | store | at once | backlog archived ($under) | segments/s | p50 / p99 per request | CPU ms per segment: plugin / archive_command / machine | failed | plugin peak RSS, archiving | plugin peak RSS, base backup |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for store in $stores; do
  for parallel in $parallel_list; do
    row "cnpgi-operator wal-archive" "$store" cnpgi "$parallel"
  done
  if [ "$barman" = 1 ] && [ "$store" != local ]; then
    row "barman-cloud-wal-archive" "$store" barman 1
  fi
done
