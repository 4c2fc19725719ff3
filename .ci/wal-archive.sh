#!/usr/bin/env bash
# The wal-archive plugin against a real PostgreSQL, as one CI job: its
# scenario on the local store and on S3 (moto) side by side, check-plugin on
# its binary, then the smoke runs of its two benchmarks (sustained archiving,
# a sidecar's memory during a base backup).
#   .ci/wal-archive.sh
# needs the binaries of `cargo build --workspace --bins --examples` in
# target/debug, Debian's PostgreSQL and moto[server] (.ci/run installs both).
#
# .ci/run starts it as the background job `wal-archive` once the binaries
# are built: about five minutes that mostly wait on PostgreSQL (about 90 CPU
# seconds), which as a step made every later step wait too.
set -euo pipefail
cd "$(dirname "$0")/.."
export WAL_ARCHIVE_REQUIRE_S3=1

# Each store's scenario has its own ports, directories and PostgreSQL
# instances; each report is printed when it ends, so the two do not interleave.
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
bash examples/wal-archive/tests/postgres.sh local >"$logs/local.log" 2>&1 &
local_pid=$!
bash examples/wal-archive/tests/postgres.sh s3 >"$logs/s3.log" 2>&1 &
s3_pid=$!
rc=0
wait "$local_pid" || rc=1
cat "$logs/local.log"
wait "$s3_pid" || rc=1
cat "$logs/s3.log"
[ "$rc" = 0 ] || { echo "FAIL: the wal-archive scenario failed on a store (its report above)" >&2; exit 1; }

echo "== cnpgi-operator check-plugin --plugin-exec cnpgi-wal-archive"
./target/debug/cnpgi-operator check-plugin --plugin-exec ./target/debug/cnpgi-wal-archive

# WAL archiving under load: a real PostgreSQL, pgbench, a 4-segment backlog,
# --max-parallel 4 into a directory and into S3 (moto); proves the harness
# runs (numbers not meaningful).
echo "== examples/wal-archive/bench/sustained.sh --smoke"
bash examples/wal-archive/bench/sustained.sh --smoke >"$logs/sustained.log" 2>&1 ||
  { cat "$logs/sustained.log"; echo "FAIL: sustained.sh --smoke (its output above)" >&2; exit 1; }
echo "sustained.sh --smoke: passed"

# A sidecar's memory during a base backup: a fresh plugin, one backup of a
# small PGDATA into a directory and into S3 (moto); proves the harness runs.
echo "== examples/wal-archive/bench/backup_memory.sh --smoke"
bash examples/wal-archive/bench/backup_memory.sh --smoke >"$logs/backup_memory.log" 2>&1 ||
  { cat "$logs/backup_memory.log"; echo "FAIL: backup_memory.sh --smoke (its output above)" >&2; exit 1; }
echo "backup_memory.sh --smoke: passed"
