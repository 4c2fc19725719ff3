# shellcheck shell=bash
# Sourced by bench.sh, sustained.sh and backup_memory.sh: what they set up.
#
#   bench_workdir PREFIX   a work directory under /tmp that PostgreSQL's user
#                          owns and enters (as root: the user cnpgi-wal, made if
#                          missing, run through "${as_user[@]}"), removed on exit
#                          with the processes in pids and the PostgreSQL at
#                          $pgdata (stopped); sets work, pids, pgdata, as_user
#   start_moto BUCKET      moto's S3 on loopback with BUCKET; sets s3_port
#   start_far_s3 RTT_MS    the same moto behind delay_proxy.py, RTT_MS of round
#                          trip away (half each way); sets far_port
#   check_level SCRIPT LEVEL  exits (naming SCRIPT) unless LEVEL, the plugin's
#                          compressionLevel, is empty or a zstd level 1 to 19
#   u CMD...               CMD as PostgreSQL's user, HOME in the work directory
#   mkd DIR...             directories that user owns
#   free_port, now         a free loopback port; the time in seconds
#   wait_http PORT         until something answers HTTP on loopback PORT (10 s)
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

# wait_http PORT: until something answers HTTP on the loopback PORT (10 s at most).
wait_http() {
  local i
  for ((i = 0; i < 100; i++)); do curl -sf "http://127.0.0.1:$1/" >/dev/null 2>&1 && break; sleep 0.1; done
}

start_moto() {
  s3_port="$(free_port)"
  python3 -m moto.server -H 127.0.0.1 -p "$s3_port" >"$work/moto.log" 2>&1 &
  pids+=($!)
  wait_http "$s3_port"
  python3 -c "import boto3, sys; boto3.client('s3', endpoint_url=sys.argv[1]).create_bucket(Bucket=sys.argv[2])" \
    "http://127.0.0.1:$s3_port" "$1"
}

start_far_s3() {
  far_port="$(free_port)"
  python3 "$(dirname "${BASH_SOURCE[0]}")/delay_proxy.py" "$far_port" "$s3_port" "$(($1 / 2))" >"$work/proxy.log" 2>&1 &
  pids+=($!)
  wait_http "$far_port"
}

check_level() {
  case "$2" in
  '' | [1-9] | 1[0-9]) ;;
  *) echo "$1: LEVEL must be a zstd level from 1 to 19, not '$2'" >&2; exit 2 ;;
  esac
}
