#!/bin/sh
# The entrypoint of scripts/images' postgres image: the interface of the official postgres
# image that the chart's bundled database uses (POSTGRES_USER, POSTGRES_PASSWORD,
# POSTGRES_DB, PGDATA). An empty data directory is initialised once, with password
# (SCRAM) logins over TCP and trust on the pod-local socket only.
set -eu
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
: "${PGDATA:=/var/lib/postgresql/data}"
if [ -z "${POSTGRES_PASSWORD:-}" ]; then
  echo "crucible-postgres: POSTGRES_PASSWORD is empty; refusing to start a database without one" >&2
  exit 1
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  mkdir -p "$PGDATA"
  chmod 700 "$PGDATA"
  pwfile="$(mktemp)"
  printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  initdb --pgdata="$PGDATA" --username="$POSTGRES_USER" --pwfile="$pwfile" --encoding=UTF8 \
    --no-locale --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  if [ "$POSTGRES_DB" != postgres ]; then
    pg_ctl --pgdata="$PGDATA" --options="-c listen_addresses=''" --wait --silent start
    createdb --username="$POSTGRES_USER" "$POSTGRES_DB"
    pg_ctl --pgdata="$PGDATA" --mode=fast --wait --silent stop
  fi
  echo "crucible-postgres: initialised $PGDATA (database $POSTGRES_DB, owner $POSTGRES_USER)" >&2
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
