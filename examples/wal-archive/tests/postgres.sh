#!/usr/bin/env bash
# The PostgreSQL scenario of the wal-archive plugin, against a real
# PostgreSQL (Debian's packages; initdb/pg_ctl from `pg_config --bindir`):
#
#   1. archive: initdb, archive_mode=on with the plugin as archive_command
#      (one segment at a time; the S3 run 4 at once, --max-parallel 4),
#      rows, a backup through the plugin, more rows, a noted time, more rows,
#      WAL switches: every archived segment is in the store, identical to
#      pg_wal's, and pg_stat_archiver counts no failure;
#   2. restore: the backup into a new PGDATA through RestoreJobHooks, PITR to
#      the noted time (exactly the rows before it), then to the end (all rows);
#   3. faults: the plugin killed while archiving (PostgreSQL retries, nothing
#      lost, no torn object); the store unwritable (a clear error, then it
#      catches up) and its volume full (No space left on device, no torn
#      object, then it catches up) [local store only; the full volume as root:
#      a tmpfs of its own]; a segment archived again with other
#      content is refused; a segment missing at restore ends recovery there;
#   4. retention (keepBackups);
#   5. a damaged or unreachable archive never ends a recovery early: one byte
#      of a stored segment flipped, or the store down, with and without a
#      recovery target: PostgreSQL aborts the recovery (wal-restore exits
#      255), never promotes with rows missing, and once the store is
#      repaired, starting it again recovers every row;
#   6. a restore_command with a misspelt flag, or one run by a PostgreSQL
#      whose environment lacks the Cluster file (no --cluster, no
#      CNPGI_CLUSTER), stops the recovery (wal-restore exits 255 with one
#      line naming the mistake) instead of ending it after the base backup;
#      corrected, started again, it recovers every row [local store only].
#
# Usage: tests/postgres.sh [local|s3]   (s3: a moto S3 server on loopback)
# Needs: the binaries built by `cargo build -p cnpgi-wal-archive --bins --examples`,
# PostgreSQL's server binaries, python3 (and moto[server] for s3). As root it
# runs PostgreSQL and the plugin as the dedicated user cnpgi-wal (created if
# missing), as CloudNativePG runs both as one non-root user.
# KEEP_WORKDIR=1 keeps the work directory (logs, data, store).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
mode="${1:-local}"
case "$mode" in local | s3) ;; *) echo "usage: $0 [local|s3]" >&2; exit 2 ;; esac

PLUGIN_NAME=wal-archive.cnpgi.io
plugin_bin="${WAL_ARCHIVE_PLUGIN:-$root/target/debug/cnpgi-wal-archive}"
# The instance-side commands: cnpgi-operator's (CNPGI_INSTANCE_CLI picks
# another implementation of the same subcommands and flags).
instance_cli="${CNPGI_INSTANCE_CLI:-$root/target/debug/cnpgi-operator}"
pgbin="$(pg_config --bindir)"
for tool in "$plugin_bin" "$instance_cli" "$pgbin/initdb" "$pgbin/pg_ctl" "$pgbin/postgres"; do
  [ -x "$tool" ] || { echo "postgres.sh: $tool is missing (cargo build -p cnpgi-wal-archive --bins --examples; apt-get install postgresql)" >&2; exit 1; }
done
command -v psql >/dev/null || { echo "postgres.sh: psql is missing" >&2; exit 1; }

SUITE="postgres.sh ($mode)"
# shellcheck source=../../../tests/lib/checks.sh
source "$(dirname "$0")/../../../tests/lib/checks.sh"
# shellcheck source=../../../tests/lib/system-user.sh
source "$(dirname "$0")/../../../tests/lib/system-user.sh"

work="$(mktemp -d /tmp/wal-archive-pg.XXXXXX)"
chmod 755 "$work"
store_volume=""  # the local store's own tmpfs (as root)
pids=()          # plugin and S3 server processes
datadirs=()      # PostgreSQL data directories started
finished=0

# --- the user PostgreSQL and the plugin run as ---------------------------------------------------
as_user=()
if [ "$(id -u)" = 0 ]; then
  user=cnpgi-wal
  # (the local and s3 runs may start side by side: ensure_system_user locks)
  ensure_system_user "$user"
  chown "$user:" "$work"
  # setpriv execs (no intermediate process), so a recorded PID is the program's.
  as_user=(setpriv "--reuid=$(id -u "$user")" "--regid=$(id -g "$user")" --init-groups --)
  # The binaries may live where that user cannot read them: copy them in.
  install -m 755 "$plugin_bin" "$work/cnpgi-wal-archive"
  install -m 755 "$instance_cli" "$work/instance-cli"
  plugin_bin="$work/cnpgi-wal-archive"
  [ -z "${CNPGI_INSTANCE_CLI:-}" ] && instance_cli="$work/instance-cli"
fi
run() { "${as_user[@]}" env HOME="$work" "$@"; }

cleanup() {
  local code=$? dir pid
  for dir in "${datadirs[@]}"; do
    if [ -f "$dir/postmaster.pid" ]; then
      run "$pgbin/pg_ctl" -D "$dir" stop -m immediate -w -t 20 >/dev/null 2>&1 || true
      pid="$(head -n1 "$dir/postmaster.pid" 2>/dev/null || true)"
      if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; fi
    fi
  done
  for pid in "${pids[@]}"; do
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [ "$finished" != 1 ] || [ "$failed" != 0 ]; then
    checks_show_logs "$work"/*.log
  fi
  if [ -n "${KEEP_WORKDIR:-}" ]; then
    echo "postgres.sh: work directory kept: $work" >&2
  else
    if [ -n "$store_volume" ]; then umount "$store_volume" || echo "postgres.sh: cannot unmount $store_volume" >&2; fi
    rm -rf "$work"
  fi
  exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# --- the store ----------------------------------------------------------------------------------------
s3_env=()
if [ "$mode" = s3 ]; then
  python3 -c 'import moto.server, boto3' 2>/dev/null || die "moto[server] is missing (pip install 'moto[server]')"
  s3_port="$(free_port)"
  python3 -m moto.server -H 127.0.0.1 -p "$s3_port" >"$work/moto.log" 2>&1 &
  pids+=($!)
  for ((i = 0; i < 100; i++)); do
    curl -sf "http://127.0.0.1:$s3_port/" >/dev/null 2>&1 && break
    kill -0 "${pids[-1]}" 2>/dev/null || die "the moto S3 server exited: $(tail -n 5 "$work/moto.log")"
    sleep 0.1
  done
  export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION=us-east-1
  # shellcheck disable=SC2120 # no caller passes arguments today; the ones given go to the script
  s3() { python3 - "$s3_port" "$@"; }
  s3 <<'PY' || die "cannot create the bucket"
import sys, boto3
boto3.client("s3", endpoint_url=f"http://127.0.0.1:{sys.argv[1]}").create_bucket(Bucket="wal-archive")
PY
  destination="s3://wal-archive/ci"
  endpoint=", \"endpointURL\": \"http://127.0.0.1:$s3_port\""
  s3_env=(AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test)
else
  # As root, the store is on a volume of its own, a tmpfs of 512 MiB, so that
  # fault 3 b2 can fill it (a real "No space left on device").
  if [ "$(id -u)" = 0 ]; then
    mkdir "$work/store-volume"
    mount -t tmpfs -o size=512m,mode=0755 cnpgi-wal-store "$work/store-volume" || die "cannot mount a tmpfs on $work/store-volume"
    store_volume="$work/store-volume"
    chown "$user:" "$store_volume"
    destination="$store_volume/store"
  else
    destination="$work/store"
  fi
  endpoint=""
fi

# store_names SERVER: the WAL file names archived for SERVER, sorted.
store_names() {
  if [ "$mode" = s3 ]; then
    python3 - "$s3_port" "$1" <<'PY'
import sys, boto3
client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{sys.argv[1]}")
names = []
for page in client.get_paginator("list_objects_v2").paginate(Bucket="wal-archive", Prefix=f"ci/{sys.argv[2]}/wals/"):
    names += [o["Key"].rsplit("/", 1)[1][:-4] for o in page.get("Contents", [])]
print("\n".join(sorted(names)))
PY
  else
    [ -d "$destination/$1/wals" ] || return 0
    find "$destination/$1/wals" -name '*.zst' -printf '%f\n' | sed 's/\.zst$//' | sort
  fi
}

# store_backups SERVER: the ids of the completed backups of SERVER (with a manifest), sorted.
store_backups() {
  if [ "$mode" = s3 ]; then
    python3 - "$s3_port" "$1" <<'PY'
import sys, boto3
client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{sys.argv[1]}")
ids = []
for page in client.get_paginator("list_objects_v2").paginate(Bucket="wal-archive", Prefix=f"ci/{sys.argv[2]}/backups/"):
    ids += [o["Key"].split("/")[-2] for o in page.get("Contents", []) if o["Key"].endswith("/backup.json")]
print("\n".join(sorted(ids)))
PY
  else
    [ -d "$destination/$1/backups" ] || return 0
    find "$destination/$1/backups" -name backup.json -printf '%h\n' | xargs -r -n1 basename | sort
  fi
}

# --- the plugin -----------------------------------------------------------------------------------------
# start_plugin NAME SOCKET_DIR PGDATA: the plugin on SOCKET_DIR/<plugin name>.
declare -A plugin_pid
start_plugin() {
  local name=$1 dir=$2 pgdata=$3 i
  mkdir -p "$dir"
  chown --reference="$work" "$dir"
  # Not through run(): a function in the background is a subshell, whose PID
  # is not the plugin's.
  # No WAL_ARCHIVE_RESTORE_COMMAND: the plugin answers CloudNativePG's
  # `/controller/manager wal-restore …`, as in a Pod, and `restore` maps it
  # to the instance CLI with this Cluster file and socket directory.
  "${as_user[@]}" env HOME="$work" "${s3_env[@]}" PGDATA="$pgdata" \
    "$plugin_bin" plugin --plugin-path="$dir" >>"$work/plugin-$name.log" 2>&1 &
  plugin_pid[$name]=$!
  pids+=($!)
  for ((i = 0; i < 200; i++)); do
    python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' "$dir/$PLUGIN_NAME" 2>/dev/null && return 0
    kill -0 "${plugin_pid[$name]}" 2>/dev/null || die "the plugin ($name) exited: $(tail -n 5 "$work/plugin-$name.log")"
    sleep 0.05
  done
  die "the plugin ($name) did not listen within 10 s"
}
stop_plugin() { # NAME [SIGNAL]
  local pid=${plugin_pid[$1]}
  kill "-${2:-TERM}" "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# --- PostgreSQL -------------------------------------------------------------------------------------------
mkdir -p "$work/run"
chown --reference="$work" "$work/run"
# start_pg DIR PORT: starts the instance in DIR, waiting for it to accept connections.
start_pg() {
  datadirs+=("$1")
  run "$pgbin/pg_ctl" -D "$1" -l "$work/$(basename "$1").log" -w -t 120 \
    -o "-p $2 -k $work/run -c listen_addresses=''" start >/dev/null
}
stop_pg() { run "$pgbin/pg_ctl" -D "$1" stop -m fast -w -t 60 >/dev/null; }
sql() { # PORT SQL: the result, unaligned, no headers
  run psql -X -q -A -t -h "$work/run" -p "$1" -U postgres -d postgres -v ON_ERROR_STOP=1 -c "$2"
}

# cluster_json FILE NAME PARAMETERS-JSON [EXTRA-SPEC-JSON] [STATUS-JSON]
cluster_json() {
  local status='{}'
  [ -n "${5:-}" ] && status=$5
  cat >"$1" <<JSON
{"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
 "metadata": {"name": "$2", "namespace": "default", "uid": "$(python3 -c 'import uuid; print(uuid.uuid4())')"},
 "spec": {"instances": 1,
          "plugins": [{"name": "$PLUGIN_NAME", "isWALArchiver": true, "parameters": $3}]${4:+, $4}},
 "status": $status}
JSON
  chown --reference="$work" "$1"
}

params() { # SERVER [PORT]: the plugin parameters for the archive of SERVER (whose backups connect to PORT)
  echo "{\"destinationPath\": \"$destination\", \"serverName\": \"$1\"$endpoint${2:+, \"pgHost\": \"$work/run\", \"pgPort\": \"$2\"}}"
}

# result_field JSON FIELD: a field of the printed BackupResult, camelCase
# (backupId) or snake_case (backup_id), whichever the instance CLI prints.
result_field() {
  python3 -c '
import json, re, sys
d = json.loads(sys.argv[1])
camel = sys.argv[2]
snake = re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), camel)
print(d.get(camel, d.get(snake, "")))' "$1" "$2"
}

# =====================================================================================================
# The S3 run archives 4 segments at once (wal-archive --max-parallel), the
# local one one at a time, as PostgreSQL alone does.
max_parallel=1
[ "$mode" = s3 ] && max_parallel=4
echo "== 1. archive ($mode store, $max_parallel segment(s) at a time)"
port1="$(free_port)"
cluster1="$work/cluster-pg1.json"
cluster_json "$cluster1" pg1 "$(params pg1 "$port1")" "" '{"currentPrimary": "pg1-1", "targetPrimary": "pg1-1"}'
sockets1="$work/sockets-instance"
start_plugin instance "$sockets1" "$work/pg1"

run "$pgbin/initdb" -D "$work/pg1" -U postgres --auth=trust >"$work/initdb.log" 2>&1 || die "initdb failed: $(tail -n 5 "$work/initdb.log")"
cat >>"$work/pg1/postgresql.conf" <<EOF
wal_level = replica
archive_mode = on
archive_command = '$instance_cli wal-archive --cluster $cluster1 --plugin-dir $sockets1 --max-parallel $max_parallel %p'
max_wal_size = 256MB
EOF
start_pg "$work/pg1" "$port1"

sql "$port1" "CREATE TABLE t (id serial PRIMARY KEY, phase text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp(), pad text)"
sql "$port1" "INSERT INTO t (phase, pad) SELECT 'before-backup', repeat('x', 200) FROM generate_series(1, 5000)"

backup_json="$(run "$instance_cli" backup --cluster "$cluster1" --plugin-dir "$sockets1" --plugin "$PLUGIN_NAME" --backup-name first 2>"$work/backup.err")" ||
  die "the backup failed: $(cat "$work/backup.err")"
backup_id="$(result_field "$backup_json" backupId)"
check "backup $backup_id taken through the plugin (begin/end WAL $(result_field "$backup_json" beginWal) $(result_field "$backup_json" endWal))" \
  test -n "$backup_id"

sql "$port1" "INSERT INTO t (phase, pad) SELECT 'after-backup', repeat('y', 200) FROM generate_series(1, 5000)"
sql "$port1" "SELECT pg_switch_wal()" >/dev/null
sleep 1.2
target_time="$(sql "$port1" "SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")"
sleep 1.2
sql "$port1" "INSERT INTO t (phase, pad) SELECT 'after-target', repeat('z', 200) FROM generate_series(1, 5000)"
for _ in 1 2 3; do
  sql "$port1" "INSERT INTO t (phase, pad) SELECT 'after-target', repeat('w', 200) FROM generate_series(1, 1000)"
  sql "$port1" "SELECT pg_switch_wal()" >/dev/null
done
last_segment="$(sql "$port1" "SELECT pg_walfile_name(pg_current_wal_lsn())")"
sql "$port1" "SELECT pg_switch_wal()" >/dev/null
rows_before="$(sql "$port1" "SELECT count(*) FROM t WHERE at <= '$target_time'")"
rows_all="$(sql "$port1" "SELECT count(*) FROM t")"

# wait_archived PORT SEGMENT [SECONDS]: until pg_stat_archiver's last archived WAL reaches SEGMENT.
wait_archived() {
  local i
  for ((i = 0; i < ${3:-60} * 10; i++)); do
    [ "$(sql "$1" "SELECT coalesce(last_archived_wal, '') >= '$2' FROM pg_stat_archiver")" = t ] && return 0
    sleep 0.1
  done
  return 1
}
check "PostgreSQL archived through $last_segment" wait_archived "$port1" "$last_segment"
check "pg_stat_archiver: no failed archive_command ($(sql "$port1" "SELECT archived_count || ' archived, ' || failed_count || ' failed' FROM pg_stat_archiver"))" \
  test "$(sql "$port1" "SELECT failed_count FROM pg_stat_archiver")" = 0

# every_done_segment_is_stored PGDATA CLUSTER SOCKETS: each segment pg_wal marks
# archived (.done) is in the store, and restoring it gives pg_wal's bytes.
every_done_segment_is_stored() {
  local dir=$1 names count=0 missing=0 differ=0 f name
  names="$(store_names pg1)"
  mkdir -p "$work/cmp"
  chown --reference="$work" "$work/cmp"
  for f in "$dir"/pg_wal/archive_status/*.done; do
    name="$(basename "$f" .done)"
    [[ "$name" =~ ^[0-9A-F]{24}$ ]] || continue
    count=$((count + 1))
    if ! grep -qx "$name" <<<"$names"; then
      missing=$((missing + 1))
      echo "     $name: not in the store" >&2
      continue
    fi
    if ! run "$instance_cli" wal-restore --cluster "$2" --plugin-dir "$3" "$name" "$work/cmp/$name" 2>>"$work/cmp.log" ||
      ! cmp -s "$work/cmp/$name" "$dir/pg_wal/$name"; then
      # A checkpoint may recycle an archived segment meanwhile (renamed to a
      # future name, then its .done marker removed): nothing left to compare.
      if [ ! -e "$dir/pg_wal/$name" ]; then
        count=$((count - 1))
        rm -f "$work/cmp/$name"
        continue
      fi
      differ=$((differ + 1))
      echo "     $name: restored content differs from pg_wal's" >&2
    fi
    rm -f "$work/cmp/$name"
  done
  echo "     $count archived segment(s) in pg_wal compared with the store"
  [ "$count" -gt 0 ] && [ "$missing" = 0 ] && [ "$differ" = 0 ]
}
check "every segment pg_wal marks archived is in the store, byte for byte" \
  every_done_segment_is_stored "$work/pg1" "$cluster1" "$sockets1"
if [ "$max_parallel" -gt 1 ]; then
  # spool_markers: the markers of segments archived ahead and not yet asked for.
  spool_markers() { find "$work/cnpgi-wal-spool/pg1" -maxdepth 1 -type f 2>/dev/null | wc -l; }
  check "archived $max_parallel at a time: every marker of a segment archived ahead was used ($(spool_markers) left)" \
    test "$(spool_markers)" = 0
fi
check "the timeline's segments and the backup's .backup history file are archived" \
  grep -q '\.backup$' <<<"$(store_names pg1)"

# =====================================================================================================
echo "== 2. restore through RestoreJobHooks, point in time and to the end"
# restore_into NAME TARGET-JSON: a recovering cluster NAME, restored into
# $work/NAME by a plugin playing CloudNativePG's recovery Job sidecar.
restore_into() {
  local name=$1 target=$2 port cluster="$work/cluster-$1.json" sockets="$work/sockets-$1"
  cluster_json "$cluster" "$name" "$(params "$name")" \
    "\"bootstrap\": {\"recovery\": {\"source\": \"origin\", \"recoveryTarget\": $target}},
     \"externalClusters\": [{\"name\": \"origin\", \"plugin\": {\"name\": \"$PLUGIN_NAME\", \"parameters\": $(params pg1)}}]"
  start_plugin "$name" "$sockets" "$work/$name"
  run "$instance_cli" restore --cluster "$cluster" --plugin-dir "$sockets" --plugin "$PLUGIN_NAME" \
    --pgdata "$work/$name" 2>"$work/restore-$name.log" || { cat "$work/restore-$name.log" >&2; return 1; }
}
# recovered PORT: until the instance has finished recovery and promoted.
recovered() {
  local i
  for ((i = 0; i < 1200; i++)); do
    [ "$(sql "$1" "SELECT NOT pg_is_in_recovery()" 2>/dev/null)" = t ] && return 0
    sleep 0.1
  done
  return 1
}

port2="$(free_port)"
restore_into pitr "{\"targetTime\": \"$target_time\"}" || die "the restore failed"
start_pg "$work/pitr" "$port2"
check "PITR to $target_time: recovery finished and the instance promoted" recovered "$port2"
check "PITR: exactly the $rows_before rows written before the target time" \
  test "$(sql "$port2" "SELECT count(*) || ' ' || count(*) FILTER (WHERE phase = 'after-target') FROM t")" = "$rows_before 0"
check "PITR: backup $backup_id restored, recovery_target_time written as CloudNativePG writes it" \
  grep -qs "recovery_target_time = '$(date -u -d "$target_time" '+%Y-%m-%d %H:%M:%S')" "$work"/pitr/*.conf
stop_pg "$work/pitr"
stop_plugin pitr

port3="$(free_port)"
restore_into full '{}' || die "the restore failed"
start_pg "$work/full" "$port3"
check "recovery to the end of the archive: finished and promoted" recovered "$port3"
check "recovery to the end: all $rows_all rows" test "$(sql "$port3" "SELECT count(*) FROM t")" = "$rows_all"
stop_pg "$work/full"
stop_plugin full

restore_into refused '{}' >/dev/null 2>&1 || true
check "a restore into a non-empty PGDATA is refused" \
  bash -c "! ${as_user[*]} env HOME=$work $instance_cli restore --cluster $work/cluster-refused.json --plugin-dir $work/sockets-refused --plugin $PLUGIN_NAME --pgdata $work/refused 2>$work/refused.err && grep -q 'is not empty' $work/refused.err"
stop_plugin refused

# =====================================================================================================
echo "== 3. faults"
# a) The plugin killed while PostgreSQL archives.
for _ in 1 2 3 4 5 6; do
  sql "$port1" "INSERT INTO t (phase, pad) SELECT 'during-kill', repeat('k', 200) FROM generate_series(1, 2000); SELECT pg_switch_wal()" >/dev/null
done
stop_plugin instance KILL
sql "$port1" "INSERT INTO t (phase) VALUES ('after-kill'); SELECT pg_switch_wal()" >/dev/null
sleep 2
failed_before="$(sql "$port1" "SELECT failed_count FROM pg_stat_archiver")"
check "plugin killed: archive_command fails and PostgreSQL keeps the WAL ($failed_before failures so far)" test "$failed_before" -gt 0
start_plugin instance "$sockets1" "$work/pg1"
last_segment="$(sql "$port1" "SELECT pg_walfile_name(pg_current_wal_lsn())")"
sql "$port1" "SELECT pg_switch_wal()" >/dev/null
check "plugin restarted: PostgreSQL's retries archive everything through $last_segment" wait_archived "$port1" "$last_segment" 90
check "after the kill: every archived segment is stored whole and identical (no torn or duplicate object)" \
  every_done_segment_is_stored "$work/pg1" "$cluster1" "$sockets1"
check "after the kill: no name stored twice" test -z "$(store_names pg1 | uniq -d)"

# archive_failed_since COUNT: until pg_stat_archiver counts more failed
# archive_command runs than COUNT (10 s at most).
archive_failed_since() {
  local i
  for ((i = 0; i < 100; i++)); do
    [ "$(sql "$port1" "SELECT failed_count > $1 FROM pg_stat_archiver")" = t ] && return 0
    sleep 0.1
  done
  return 1
}

# b) The store unwritable (a local directory made read-only).
if [ "$mode" = local ]; then
  chmod -R a-w "$destination/pg1/wals"
  failed_before="$(sql "$port1" "SELECT failed_count FROM pg_stat_archiver")"
  sql "$port1" "INSERT INTO t (phase) VALUES ('read-only')"
  stuck="$(sql "$port1" "SELECT pg_walfile_name(pg_switch_wal())")"
  check "store unwritable: archive_command fails" archive_failed_since "$failed_before"
  check "store unwritable: the plugin says why (Permission denied, naming the store)" \
    grep -q "archive failed.*Permission denied" "$work/plugin-instance.log"
  chmod -R u+w "$destination/pg1/wals"
  check "store writable again: PostgreSQL catches up through $stuck" wait_archived "$port1" "$stuck" 90
fi

# b2) The store's volume full: a real ENOSPC on its tmpfs.
if [ -n "$store_volume" ]; then
  dd if=/dev/zero of="$store_volume/filler" bs=1M status=none 2>/dev/null || true
  failed_before="$(sql "$port1" "SELECT failed_count FROM pg_stat_archiver")"
  sql "$port1" "INSERT INTO t (phase, pad) SELECT 'volume-full', repeat('f', 200) FROM generate_series(1, 2000)" >/dev/null
  full="$(sql "$port1" "SELECT pg_walfile_name(pg_switch_wal())")"
  check "store's volume full: archive_command fails, PostgreSQL keeps $full" archive_failed_since "$failed_before"
  check "store's volume full: the plugin says why (No space left on device)" \
    grep -q "archive failed.*No space left on device" "$work/plugin-instance.log"
  # What a failed write leaves: nothing but whole objects (object_store's
  # staging files are named <key>#<n>).
  leftovers() { find "$destination" -type f ! -name '*.zst' ! -name backup.json; }
  check "store's volume full: no torn or staging object left ($(leftovers | head -n3 | tr '\n' ' '))" test -z "$(leftovers)"
  check "store's volume full: $full is not in the store" test ! -e "$destination/pg1/wals/${full:0:16}/$full.zst"
  rm -f "$store_volume/filler"
  check "space freed: PostgreSQL catches up through $full" wait_archived "$port1" "$full" 90
  check "after the volume was full: every archived segment is stored whole and identical" \
    every_done_segment_is_stored "$work/pg1" "$cluster1" "$sockets1"
else
  echo "skip store's volume full (a tmpfs of its own needs root)"
fi

# c) The same name with other content.
archived="$(store_names pg1 | grep -E '^[0-9A-F]{24}$' | head -n1)"
mkdir -p "$work/fake/pg_wal"
cp "$(find "$work/pg1/pg_wal" -maxdepth 1 -regextype egrep -regex '.*/[0-9A-F]{24}' | sort | head -n1)" "$work/fake/pg_wal/$archived" 2>/dev/null ||
  head -c 16777216 /dev/urandom >"$work/fake/pg_wal/$archived"
printf 'tampered' | dd of="$work/fake/pg_wal/$archived" bs=1 seek=4096 conv=notrunc status=none
chown -R --reference="$work" "$work/fake"
if (cd "$work/fake" && run "$instance_cli" wal-archive --cluster "$cluster1" --plugin-dir "$sockets1" "pg_wal/$archived") 2>"$work/conflict.err"; then
  fail "a segment archived again with other content is refused (it was accepted)"
else
  check "a segment archived again with other content is refused: $(head -c 160 "$work/conflict.err")" grep -q AlreadyExists "$work/conflict.err"
fi
run "$instance_cli" wal-restore --cluster "$cluster1" --plugin-dir "$sockets1" "$archived" "$work/fake/pg_wal/$archived" 2>/dev/null
check "the same name with the same content is accepted again (idempotent)" \
  bash -c "cd $work/fake && ${as_user[*]} env HOME=$work $instance_cli wal-archive --cluster $cluster1 --plugin-dir $sockets1 pg_wal/$archived"
check "restoring a name the archive lacks fails (NotFound)" \
  bash -c "! ${as_user[*]} env HOME=$work $instance_cli wal-restore --cluster $cluster1 --plugin-dir $sockets1 0000000900000000000000AA $work/fake/x 2>$work/missing.err && grep -q NotFound $work/missing.err"

# d) A segment missing at restore: recovery stops there and the instance promotes.
before_newest="$(store_names pg1 | grep -E '^[0-9A-F]{24}$' | tail -n2 | head -n1)"
if [ "$mode" = s3 ]; then
  python3 - "$s3_port" "ci/pg1/wals/${before_newest:0:16}/$before_newest.zst" <<'PY'
import sys, boto3
boto3.client("s3", endpoint_url=f"http://127.0.0.1:{sys.argv[1]}").delete_object(Bucket="wal-archive", Key=sys.argv[2])
PY
else
  rm "$destination/pg1/wals/${before_newest:0:16}/$before_newest.zst"
fi
port4="$(free_port)"
restore_into gap '{}' || die "the restore failed"
start_pg "$work/gap" "$port4"
check "segment $before_newest missing: recovery ends there and the instance promotes" recovered "$port4"
total_rows="$(sql "$port1" "SELECT count(*) FROM t")"
check "segment missing: the backup's rows are there, the later ones are not ($(sql "$port4" "SELECT count(*) FROM t") of $total_rows)" \
  test "$(sql "$port4" "SELECT count(*) >= 5000 AND count(*) < $total_rows FROM t")" = t
check "segment missing: the restore log shows PostgreSQL asked for it and got NotFound" \
  grep -q "$before_newest.*not in the archive\|not in the archive.*$before_newest\|wal=$before_newest.*not in the archive" "$work/plugin-gap.log"
stop_pg "$work/gap"
stop_plugin gap

# =====================================================================================================
echo "== 4. retention: keepBackups=1 after a second backup"
cluster_json "$work/cluster-pg1-keep1.json" pg1 \
  "$(params pg1 "$port1" | sed 's/}$/, "keepBackups": "1"}/')" "" '{"currentPrimary": "pg1-1", "targetPrimary": "pg1-1"}'
sleep 1 # backup ids are start times, to the second
second_json="$(run "$instance_cli" backup --cluster "$work/cluster-pg1-keep1.json" --plugin-dir "$sockets1" --plugin "$PLUGIN_NAME" --backup-name second 2>"$work/backup2.err")" ||
  die "the second backup failed: $(cat "$work/backup2.err")"
second_id="$(result_field "$second_json" backupId)"
second_begin="$(result_field "$second_json" beginWal)"
check "retention: only the newest backup ($second_id) is left" test "$(store_backups pg1)" = "$second_id"
older="$(store_names pg1 | grep -E '^[0-9A-F]{24}' | awk -v first="$second_begin" 'substr($0, 1, 24) < first' | wc -l)"
check "retention: no WAL before $second_begin (the kept backup's first segment) is left ($older)" test "$older" = 0
# Two statements: in one -c string they would share a transaction, whose
# commit would land after the switch.
sql "$port1" "INSERT INTO t (phase) VALUES ('after-second-backup')"
final_segment="$(sql "$port1" "SELECT pg_walfile_name(pg_switch_wal())")"
check "the segment holding the last row ($final_segment) is archived" wait_archived "$port1" "$final_segment" 60
port5="$(free_port)"
restore_into kept '{}' || die "the restore of the kept backup failed"
start_pg "$work/kept" "$port5"
kept_restores() {
  recovered "$port5" && [ "$(sql "$port5" "SELECT count(*) FILTER (WHERE phase = 'after-second-backup') FROM t")" = 1 ]
}
check "retention: the kept backup and its WAL still restore, to the last row" kept_restores
stop_pg "$work/kept"

# =====================================================================================================
echo "== 5. a damaged or unreachable archive never ends a recovery early"
batch_segments=()
# Each batch is followed by a few more segments, so that a recovery spends
# seconds past its consistency point: the store can then go down mid-way.
for batch in 1 2 3 4; do
  sql "$port1" "INSERT INTO t (phase, pad) SELECT 'batch-$batch', repeat('b', 200) FROM generate_series(1, 1000)"
  batch_segments+=("$(sql "$port1" "SELECT pg_walfile_name(pg_current_wal_lsn())")")
  sql "$port1" "SELECT pg_switch_wal()" >/dev/null
  for _ in 1 2 3 4 5; do
    sql "$port1" "INSERT INTO t (phase) VALUES ('batch-$batch-filler')"
    sql "$port1" "SELECT pg_switch_wal()" >/dev/null
  done
done
sleep 1.2
fault_target="$(sql "$port1" "SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")"
sleep 1.2
sql "$port1" "INSERT INTO t (phase, pad) SELECT 'after-fault-target', repeat('a', 200) FROM generate_series(1, 1000)"
rows_fault_target="$(sql "$port1" "SELECT count(*) FROM t WHERE at <= '$fault_target'")"
rows_fault_all="$(sql "$port1" "SELECT count(*) FROM t")"
final_segment="$(sql "$port1" "SELECT pg_walfile_name(pg_switch_wal())")"
check "the four batches and the rows after them are archived (through $final_segment)" wait_archived "$port1" "$final_segment" 60
damaged="${batch_segments[1]}"
damaged_key="pg1/wals/${damaged:0:16}/$damaged.zst"

# store_object get|put KEY FILE: a stored object copied out of, or into, the store.
store_object() {
  if [ "$mode" = s3 ]; then
    python3 - "$s3_port" "ci/$2" "$3" "$1" <<'PY'
import sys, boto3
client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{sys.argv[1]}")
if sys.argv[4] == "get":
    client.download_file("wal-archive", sys.argv[2], sys.argv[3])
else:
    client.upload_file(sys.argv[3], "wal-archive", sys.argv[2])
PY
  elif [ "$1" = get ]; then
    cp "$destination/$2" "$3"
  else
    cp "$3" "$destination/$2"
  fi
}
store_object get "$damaged_key" "$work/intact.zst"

# break_store FAULT CLUSTER / repair_store FAULT CLUSTER
break_store() {
  case "$1" in
    damaged) # one byte in the middle of the stored segment flipped
      cp "$work/intact.zst" "$work/damaged.zst"
      python3 - "$work/damaged.zst" <<'PY'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
data[len(data) // 2] ^= 0xFF
open(sys.argv[1], "wb").write(bytes(data))
PY
      store_object put "$damaged_key" "$work/damaged.zst" ;;
    down) # local: the store's directory gone (unmounted); S3: nothing listening at its endpoint
      if [ "$mode" = s3 ]; then
        cp "$2" "$2.up"
        sed -i "s#127.0.0.1:$s3_port#127.0.0.1:$(free_port)#g" "$2"
      else
        mv "$destination" "$destination.down"
      fi ;;
  esac
}
repair_store() {
  case "$1" in
    damaged) store_object put "$damaged_key" "$work/intact.zst" ;;
    down) if [ "$mode" = s3 ]; then cp "$2.up" "$2"; else mv "$destination.down" "$destination"; fi ;;
  esac
}

# fault_recovery FAULT TARGET-JSON EXPECTED-ROWS: restore, break the store,
# start PostgreSQL (it must stop, not promote), repair, start it again.
fault_recovery() {
  local fault=$1 target=$2 expected=$3 name port i
  name="fault-$fault-$([ "$target" = '{}' ] && echo end || echo pitr)"
  port="$(free_port)"
  restore_into "$name" "$target" || die "the restore ($name) failed"
  # The damage is there from the start; the store goes down once the
  # recovery is consistent, when ending it early would lose rows silently.
  [ "$fault" = damaged ] && break_store "$fault" "$work/cluster-$name.json"
  datadirs+=("$work/$name")
  run "$pgbin/pg_ctl" -D "$work/$name" -l "$work/$name.log" -W \
    -o "-p $port -k $work/run -c listen_addresses=''" start >/dev/null 2>&1
  if [ "$fault" = down ]; then
    for ((i = 0; i < 1200; i++)); do
      grep -q 'consistent recovery state reached' "$work/$name.log" 2>/dev/null && break
      sleep 0.02
    done
    break_store "$fault" "$work/cluster-$name.json"
    check "$name: the store went down mid-recovery, past its consistency point ($(grep -c 'restored log file' "$work/$name.log") files restored before)" \
      grep -q 'consistent recovery state reached' "$work/$name.log"
  fi
  # PostgreSQL either stops or, wrongly, ends recovery and serves.
  for ((i = 0; i < 1200; i++)); do
    grep -q 'database system is shut down' "$work/$name.log" 2>/dev/null && break
    [ "$(sql "$port" "SELECT NOT pg_is_in_recovery()" 2>/dev/null)" = t ] && break
    sleep 0.1
  done
  for ((i = 0; i < 100; i++)); do [ -f "$work/$name/postmaster.pid" ] || break; sleep 0.1; done
  if [ -f "$work/$name/postmaster.pid" ]; then
    fail "$name: PostgreSQL ended recovery through a $fault archive ($(sql "$port" "SELECT count(*) FROM t" 2>/dev/null) rows of $expected)"
    stop_pg "$work/$name" || true
    repair_store "$fault" "$work/cluster-$name.json"
    stop_plugin "$name"
    return
  fi
  check "$name: the $fault archive aborts the recovery (restore_command exited 255)" \
    grep -q 'could not restore file .* from archive: child process exited with exit code 255' "$work/$name.log"
  check "$name: nothing promoted (recovery.signal kept, no new timeline)" \
    bash -c "[ -f '$work/$name/recovery.signal' ] && ! ls '$work/$name/pg_wal' | grep -q '^00000002'"
  if [ "$fault" = damaged ]; then
    check "$name: the log names the segment, the plugin and its DataLoss answer" \
      grep -q "wal-restore $damaged not restored: plugin $PLUGIN_NAME: DataLoss" "$work/$name.log"
  else
    check "$name: the log names the plugin, its Unavailable answer and the retries" \
      grep -q "plugin $PLUGIN_NAME: Unavailable.*after 4 attempts (recovery aborted" "$work/$name.log"
  fi
  repair_store "$fault" "$work/cluster-$name.json"
  start_pg "$work/$name" "$port"
  check "$name: once repaired, started again, the recovery finishes and promotes" recovered "$port"
  check "$name: every row is there ($expected)" test "$(sql "$port" "SELECT count(*) FROM t")" = "$expected"
  stop_pg "$work/$name"
  stop_plugin "$name"
}
fault_recovery damaged '{}' "$rows_fault_all"
fault_recovery damaged "{\"targetTime\": \"$fault_target\"}" "$rows_fault_target"
fault_recovery down '{}' "$rows_fault_all"
fault_recovery down "{\"targetTime\": \"$fault_target\"}" "$rows_fault_target"

# =====================================================================================================
if [ "$mode" = local ]; then # the store plays no part in it
  echo "== 6. a misspelt restore_command, or no Cluster file in PostgreSQL's environment, never ends a recovery"
  # Every row is archived: section 5 waited for the segment of the last one.
  rows_usage="$(sql "$port1" "SELECT count(*) FROM t")"
  port6="$(free_port)"
  restore_into usage '{}' || die "the restore (usage) failed"
  cp "$work/usage/postgresql.auto.conf" "$work/usage.auto.conf"
  # usage_fault TAG WHAT RESTORE-COMMAND SAYS: PostgreSQL, started with
  # RESTORE-COMMAND (set after the restore's own) and without CNPGI_CLUSTER,
  # must stop rather than promote, with SAYS in its log.
  usage_fault() {
    local what=$2 command=$3 says=$4 log="$work/usage-$1.log" i
    cp "$work/usage.auto.conf" "$work/usage/postgresql.auto.conf"
    echo "restore_command = '$command'" >>"$work/usage/postgresql.auto.conf"
    datadirs+=("$work/usage")
    run env -u CNPGI_CLUSTER "$pgbin/pg_ctl" -D "$work/usage" -l "$log" -W \
      -o "-p $port6 -k $work/run -c listen_addresses=''" start >/dev/null 2>&1
    for ((i = 0; i < 600; i++)); do
      grep -q 'database system is shut down' "$log" 2>/dev/null && break
      [ "$(sql "$port6" "SELECT NOT pg_is_in_recovery()" 2>/dev/null)" = t ] && break
      sleep 0.1
    done
    for ((i = 0; i < 100; i++)); do [ -f "$work/usage/postmaster.pid" ] || break; sleep 0.1; done
    if [ -f "$work/usage/postmaster.pid" ]; then
      fail "$what: PostgreSQL ended the recovery ($(sql "$port6" "SELECT count(*) FROM t" 2>/dev/null) rows of $rows_usage)"
      stop_pg "$work/usage" || true
      return
    fi
    check "$what: PostgreSQL stops (restore_command exited 255)" \
      grep -q 'could not restore file .* from archive: child process exited with exit code 255' "$log"
    check "$what: its log names the mistake ($says)" grep -qF "$says" "$log"
    check "$what: nothing promoted (recovery.signal kept, no new timeline)" \
      bash -c "[ -f '$work/usage/recovery.signal' ] && ! ls '$work/usage/pg_wal' | grep -q '^00000002'"
  }
  usage_fault flag "a misspelt flag in restore_command" \
    "$instance_cli wal-restore --clutser $work/cluster-usage.json --plugin-dir $work/sockets-usage %f %p" \
    "wal-restore: unexpected argument '--clutser' found (did you mean '--cluster'?"
  usage_fault env "no Cluster file in PostgreSQL's environment" \
    "$instance_cli wal-restore --plugin-dir $work/sockets-usage %f %p" \
    "wal-restore: no --cluster <FILE> and no CNPGI_CLUSTER in the environment"
  cp "$work/usage.auto.conf" "$work/usage/postgresql.auto.conf"
  start_pg "$work/usage" "$port6"
  check "restore_command corrected, started again: the recovery finishes and promotes" recovered "$port6"
  check "restore_command corrected: every row is there ($rows_usage)" \
    test "$(sql "$port6" "SELECT count(*) FROM t")" = "$rows_usage"
  stop_pg "$work/usage"
  stop_plugin usage
fi

stop_pg "$work/pg1"
finished=1
checks_summary
