# shellcheck shell=bash
# Sourced by bench.sh and sustained.sh: what both benchmarks set up.
#
#   bench_workdir PREFIX   a work directory under /tmp that PostgreSQL's user
#                          owns and enters (as root: the user cnpgi-wal, made if
#                          missing, run through "${as_user[@]}"), removed on exit
#                          with the processes in pids and the PostgreSQL at
#                          $pgdata (stopped); sets work, pids, pgdata, as_user
#   start_moto BUCKET      moto's S3 on loopback with BUCKET; sets s3_port
#   u CMD...               CMD as PostgreSQL's user, HOME in the work directory
#   mkd DIR...             directories that user owns
#   free_port, now         a free loopback port; the time in seconds
#
# moto takes any credentials: the test ones are exported for every process.
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION=us-east-1
# shellcheck source=../../../tests/lib/system-user.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../../tests/lib/system-user.sh"

bench_workdir() {
  work="$(mktemp -d "/tmp/$1.XXXXXX")"
  chmod 755 "$work"
  # PostgreSQL's tools run as its user, who may not enter the caller's directory.
  cd "$work" || exit 1
  pids=()
  pgdata=""
  trap bench_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  as_user=()
  if [ "$(id -u)" = 0 ]; then
    local user=cnpgi-wal
    ensure_system_user "$user"
    chown "$user:" "$work"
    as_user=(setpriv "--reuid=$(id -u "$user")" "--regid=$(id -g "$user")" --init-groups --)
  fi
}

bench_cleanup() {
  local code=$? pid
  if [ -n "$pgdata" ] && [ -f "$pgdata/postmaster.pid" ]; then
    "${as_user[@]}" "$(pg_config --bindir)/pg_ctl" -D "$pgdata" stop -m immediate -w >/dev/null 2>&1 || true
  fi
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
  exit "$code"
}

u() { "${as_user[@]}" env HOME="$work" "$@"; }
mkd() { mkdir -p "$@"; chown --reference="$work" "$@"; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }

start_moto() {
  local i
  s3_port="$(free_port)"
  python3 -m moto.server -H 127.0.0.1 -p "$s3_port" >"$work/moto.log" 2>&1 &
  pids+=($!)
  for ((i = 0; i < 100; i++)); do curl -sf "http://127.0.0.1:$s3_port/" >/dev/null 2>&1 && break; sleep 0.1; done
  python3 -c "import boto3, sys; boto3.client('s3', endpoint_url=sys.argv[1]).create_bucket(Bucket=sys.argv[2])" \
    "http://127.0.0.1:$s3_port" "$1"
}
