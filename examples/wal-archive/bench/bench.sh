#!/usr/bin/env bash
# Throughput of the wal-archive plugin (BENCHMARKS.md, "WAL archive plugin"):
#
#   * archive: real 16 MiB WAL segments (from `pgbench -i`), each through one
#     `cnpgi-operator wal-archive` process as PostgreSQL's archive_command runs
#     it (process start, gRPC over the Unix socket, read, SHA-256, zstd,
#     conditional put), into a local directory and into S3 (moto on loopback);
#   * WAL restore: the same segments back through `wal-restore` (get, zstd,
#     SHA-256 check, write + fsync + rename);
#   * backup restore: a base backup of the pgbench PGDATA restored through
#     RestoreJobHooks into an empty directory;
#   * beside `cp` of the same files (and `cp` + `sync` where the plugin syncs).
#
# Usage: bench/bench.sh [SEGMENTS]   (default 32; release binaries:
#   cargo build --release -p cnpgi-wal-archive -p cnpgi-operator-cli)
# Needs PostgreSQL's server binaries and pgbench, python3 with moto[server].
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
segments="${1:-32}"
release="$root/target/release"
pgbin="$(pg_config --bindir)"
PLUGIN_NAME=wal-archive.cnpgi.io
for tool in "$release/cnpgi-wal-archive" "$release/cnpgi-operator" "$pgbin/pgbench"; do
  [ -x "$tool" ] || { echo "bench.sh: $tool is missing" >&2; exit 1; }
done

# shellcheck source=common.sh
source "$here/common.sh"
bench_workdir wal-archive-bench
pgdata="$work/pg"
install -m 755 "$release/cnpgi-wal-archive" "$release/cnpgi-operator" "$work/"
cli="$work/cnpgi-operator"
# rate COUNT BYTES SECONDS: "N/s | MiB/s"
rate() { python3 -c "import sys; n, b, s = map(float, sys.argv[1:]); print(f'{n / s:.1f} | {b / s / 1048576:.0f}')" "$@"; }

# --- WAL from pgbench --------------------------------------------------------------------------------
mkd "$work/run" "$work/segments"
u "$pgbin/initdb" -D "$pgdata" -U postgres --auth=trust >/dev/null
cat >>"$pgdata/postgresql.conf" <<EOF
archive_mode = on
archive_command = 'cp %p $work/segments/%f'
max_wal_size = 4GB
EOF
port="$(free_port)"
u "$pgbin/pg_ctl" -D "$pgdata" -l "$work/pg.log" -w -o "-p $port -k $work/run -c listen_addresses=''" start >/dev/null
scale=$((segments * 3 / 2 + 4))
u "$pgbin/pgbench" -h "$work/run" -p "$port" -U postgres -i -s "$scale" -q postgres >/dev/null 2>&1
u "$pgbin/psql" -X -q -h "$work/run" -p "$port" -U postgres -d postgres -c "SELECT pg_switch_wal()" >/dev/null
for ((i = 0; i < 600; i++)); do
  [ "$(find "$work/segments" -regextype egrep -regex '.*/[0-9A-F]{24}' | wc -l)" -ge "$segments" ] && break
  sleep 0.1
done
mkd "$work/input"
find "$work/segments" -regextype egrep -regex '.*/[0-9A-F]{24}' | sort | head -n "$segments" | xargs -I{} mv {} "$work/input/"
count="$(find "$work/input" -mindepth 1 -maxdepth 1 | wc -l)"
bytes="$(du -sb "$work/input" | cut -f1)"
[ "$count" = "$segments" ] || { echo "bench.sh: pgbench made only $count segments" >&2; exit 1; }

# --- the plugin and the stores -------------------------------------------------------------------------
start_moto bench
mkd "$work/sockets" "$work/store"
# Not through u(): a function in the background is a subshell, whose PID is
# not the plugin's.
"${as_user[@]}" env HOME="$work" PGDATA="$work/restored" \
  "$work/cnpgi-wal-archive" plugin --plugin-path="$work/sockets" --log-level=warn >"$work/plugin.log" 2>&1 &
pids+=($!)
for ((i = 0; i < 100; i++)); do [ -S "$work/sockets/$PLUGIN_NAME" ] && break; sleep 0.05; done

cluster() { # FILE PARAMETERS [ORIGIN-PARAMETERS]: its own archive, and the one it recovers from
  cat >"$1" <<JSON
{"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster", "metadata": {"name": "bench", "namespace": "default", "uid": "$(python3 -c 'import uuid; print(uuid.uuid4())')"},
 "spec": {"plugins": [{"name": "$PLUGIN_NAME", "isWALArchiver": true, "parameters": $2}],
          "bootstrap": {"recovery": {"source": "origin"}},
          "externalClusters": [{"name": "origin", "plugin": {"name": "$PLUGIN_NAME", "parameters": ${3:-$2}}}]},
 "status": {"currentPrimary": "bench-1"}}
JSON
  chown --reference="$work" "$1"
}
pg="\"pgHost\": \"$work/run\", \"pgPort\": \"$port\", \"serverName\": \"origin\""
local_store="\"destinationPath\": \"$work/store\""
s3_store="\"destinationPath\": \"s3://bench/b\", \"endpointURL\": \"http://127.0.0.1:$s3_port\""
cluster "$work/local.json" "{$local_store, $pg}"
cluster "$work/s3.json" "{$s3_store, $pg}"
# A restore must start a new archive (the restore job refuses a non-empty one):
# the restored cluster archives as "restored", recovering from "origin".
cluster "$work/local-restore.json" "{$local_store, \"serverName\": \"restored\"}" "{$local_store, $pg}"
cluster "$work/s3-restore.json" "{$s3_store, \"serverName\": \"restored\"}" "{$s3_store, $pg}"

echo "| operation ($count segments of 16 MiB, $((bytes / 1048576)) MiB) | segments/s | MiB/s |"
echo "|---|---|---|"
mkd "$work/cp-out"
t0="$(now)"; cp "$work"/input/* "$work/cp-out/"; t1="$(now)"
echo "| \`cp\` of the segments (page cache, no sync) | $(rate "$count" "$bytes" "$(python3 -c "print($t1 - $t0)")") |"
rm -rf "$work/cp-out"; mkd "$work/cp-out"
t0="$(now)"; cp "$work"/input/* "$work/cp-out/"; sync "$work"/cp-out/*; t1="$(now)"
echo "| \`cp\` + \`sync\` of the segments | $(rate "$count" "$bytes" "$(python3 -c "print($t1 - $t0)")") |"

mkd "$work/pgdata-wal/pg_wal"
cp "$work"/input/* "$work/pgdata-wal/pg_wal/"
chown -R --reference="$work" "$work/pgdata-wal"
for store in local s3; do
  t0="$(now)"
  for f in "$work"/pgdata-wal/pg_wal/*; do
    (cd "$work/pgdata-wal" && u "$cli" wal-archive --cluster "$work/$store.json" --plugin-dir "$work/sockets" "pg_wal/$(basename "$f")")
  done
  t1="$(now)"
  echo "| archive through the plugin, $store store (one \`wal-archive\` process per segment) | $(rate "$count" "$bytes" "$(python3 -c "print($t1 - $t0)")") |"
done
stored="$(du -sb "$work/store/origin/wals" | cut -f1)" # before the random segments below
for store in local s3; do
  mkd "$work/out-$store"
  t0="$(now)"
  for f in "$work"/input/*; do
    u "$cli" wal-restore --cluster "$work/$store.json" --plugin-dir "$work/sockets" "$(basename "$f")" "$work/out-$store/$(basename "$f")"
  done
  t1="$(now)"
  cmp -s <(cat "$work"/input/*) <(cat "$work"/out-"$store"/*) || { echo "bench.sh: restored WAL differs" >&2; exit 1; }
  echo "| WAL restore through the plugin, $store store (fsync + rename each) | $(rate "$count" "$bytes" "$(python3 -c "print($t1 - $t0)")") |"
done
# Incompressible segments (random bytes): zstd's worst case.
mkd "$work/random/pg_wal" "$work/out-random"
# A real segment's long page header (40 bytes: wal-archive refuses a file
# named like a segment without one), then random bytes.
first_segment="$(find "$work/input" -mindepth 1 -maxdepth 1 | sort | head -n 1)"
for ((i = 0; i < count / 2; i++)); do
  { head -c 40 "$first_segment"; head -c $((16777216 - 40)) /dev/urandom; } >"$work/random/pg_wal/$(printf '00000009000000000000%04X' "$i")"
done
chown -R --reference="$work" "$work/random"
random_count=$((count / 2))
random_bytes=$((random_count * 16777216))
t0="$(now)"
for f in "$work"/random/pg_wal/*; do
  (cd "$work/random" && u "$cli" wal-archive --cluster "$work/local.json" --plugin-dir "$work/sockets" "pg_wal/$(basename "$f")")
done
t1="$(now)"
echo "| archive, local store, $random_count incompressible (random) segments | $(rate "$random_count" "$random_bytes" "$(python3 -c "print($t1 - $t0)")") |"
t0="$(now)"
for f in "$work"/random/pg_wal/*; do
  u "$cli" wal-restore --cluster "$work/local.json" --plugin-dir "$work/sockets" "$(basename "$f")" "$work/out-random/$(basename "$f")"
done
t1="$(now)"
echo "| WAL restore, local store, the incompressible segments | $(rate "$random_count" "$random_bytes" "$(python3 -c "print($t1 - $t0)")") |"
echo
echo "zstd level 3 stored the pgbench WAL in $((stored / 1048576)) MiB ($(python3 -c "print(f'{$stored / $bytes * 100:.0f}')") % of the segments)."
echo

# --- base backup restore ----------------------------------------------------------------------------------
data_bytes="$(du -sb --exclude=pg_wal "$pgdata" | cut -f1)"
echo "| base backup of the pgbench PGDATA ($((data_bytes / 1048576)) MiB without pg_wal) | seconds | MiB/s |"
echo "|---|---|---|"
t0="$(now)"; cp -a "$pgdata" "$work/cp-pgdata"; t1="$(now)"
s="$(python3 -c "print($t1 - $t0)")"
echo "| \`cp -a\` of PGDATA (page cache, no sync) | $(printf '%.2f' "$s") | $(python3 -c "print(f'{$data_bytes / $s / 1048576:.0f}')") |"
rm -rf "$work/cp-pgdata"
t0="$(now)"; cp -a "$pgdata" "$work/cp-pgdata"; sync -f "$work/cp-pgdata"; t1="$(now)"
s="$(python3 -c "print($t1 - $t0)")"
echo "| \`cp -a\` of PGDATA (+ sync) | $(printf '%.2f' "$s") | $(python3 -c "print(f'{$data_bytes / $s / 1048576:.0f}')") |"
rm -rf "$work/cp-pgdata"
for store in local s3; do
  t0="$(now)"
  u "$cli" backup --cluster "$work/$store.json" --plugin-dir "$work/sockets" --plugin "$PLUGIN_NAME" >/dev/null
  t1="$(now)"
  s="$(python3 -c "print($t1 - $t0)")"
  echo "| backup through the plugin, $store store (checkpoint, stream, WAL archived) | $(printf '%.2f' "$s") | $(python3 -c "print(f'{$data_bytes / $s / 1048576:.0f}')") |"
  rm -rf "$work/restored"
  t0="$(now)"
  u "$cli" restore --cluster "$work/$store-restore.json" --plugin-dir "$work/sockets" --plugin "$PLUGIN_NAME" --pgdata "$work/restored" 2>/dev/null
  t1="$(now)"
  s="$(python3 -c "print($t1 - $t0)")"
  echo "| restore through RestoreJobHooks, $store store | $(printf '%.2f' "$s") | $(python3 -c "print(f'{$data_bytes / $s / 1048576:.0f}')") |"
done
