#!/bin/sh
# The entrypoint of the MariaDB image tests/realkube/images.sh makes from
# Debian's mariadb-server: runs mariadbd in the foreground as the user the
# container runs as (mysql, 999:999; never root), listening on 3306.
#   * On first start (no $DATADIR/mysql), mariadb-install-db initialises the
#     data directory (an empty volume; the image has none of its own).
#   * Every start, the database MARIADB_DATABASE and the user MARIADB_USER
#     with MARIADB_PASSWORD (the environment of the official mariadb image)
#     are created if missing, the password set, and the user given every
#     privilege on that database: mariadbd's --init-file, run as the server's
#     own superuser before it accepts clients, so nobody sees a half-made user.
# DATADIR (default /var/lib/mysql) and RUNDIR (default /run/mysqld, for the
# socket and the init file) must be writable: volumes when the root file
# system is read-only.
set -eu
DATADIR=${DATADIR:-/var/lib/mysql}
RUNDIR=${RUNDIR:-/run/mysqld}
for v in MARIADB_DATABASE MARIADB_USER MARIADB_PASSWORD; do
  eval "value=\${$v:-}"
  if [ -z "$value" ]; then
    echo "mariadb-entrypoint: $v is not set (the database, user and password to create)" >&2
    exit 1
  fi
done
case "$MARIADB_DATABASE$MARIADB_USER" in
  *[!A-Za-z0-9_]*) echo "mariadb-entrypoint: MARIADB_DATABASE and MARIADB_USER must be [A-Za-z0-9_]" >&2; exit 1 ;;
esac
mkdir -p "$RUNDIR"
if [ ! -d "$DATADIR/mysql" ]; then
  echo "mariadb-entrypoint: initialising $DATADIR" >&2
  mariadb-install-db --datadir="$DATADIR" --auth-root-authentication-method=socket \
    --skip-test-db --skip-name-resolve >"$RUNDIR/install-db.log" 2>&1 ||
    { cat "$RUNDIR/install-db.log" >&2; echo "mariadb-entrypoint: mariadb-install-db failed" >&2; exit 1; }
fi
# SQL string literal: ' doubled, \ escaped.
password=$(printf '%s' "$MARIADB_PASSWORD" | sed -e 's/\\/\\\\/g' -e "s/'/''/g")
umask 077
cat >"$RUNDIR/init.sql" <<SQL
CREATE DATABASE IF NOT EXISTS \`$MARIADB_DATABASE\`;
CREATE USER IF NOT EXISTS '$MARIADB_USER'@'%' IDENTIFIED BY '$password';
ALTER USER '$MARIADB_USER'@'%' IDENTIFIED BY '$password';
GRANT ALL PRIVILEGES ON \`$MARIADB_DATABASE\`.* TO '$MARIADB_USER'@'%';
SQL
exec mariadbd --datadir="$DATADIR" --socket="$RUNDIR/mysqld.sock" --pid-file="$RUNDIR/mysqld.pid" \
  --bind-address=0.0.0.0 --port=3306 --skip-name-resolve --init-file="$RUNDIR/init.sql" "$@"
