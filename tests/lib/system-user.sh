# shellcheck shell=bash
# ensure_system_user NAME: the system user NAME (no home, no login shell),
# created unless it exists; fails naming it if it cannot be.
#
# Why a lock: suites that start side by side (the wal-archive suite's local and
# S3 runs, in .ci/run) both find the user missing on a new machine, and two
# useradd at once race on /etc/passwd: one fails, or finds the user half
# written, and that run's PostgreSQL and plugin then lack permissions.
ensure_system_user() {
  local name=$1
  (
    flock 9
    id "$name" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$name"
  ) 9>"${TMPDIR:-/tmp}/cnpgi-useradd.lock" || {
    echo "cannot create the system user $name (useradd --system $name)" >&2
    return 1
  }
}
