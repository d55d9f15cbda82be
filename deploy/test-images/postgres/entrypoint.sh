#!/bin/sh
# Initialise an empty data directory from POSTGRES_* (as the official image does), then run
# the command as the postgres user.
set -eu
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
POSTGRES_USER=${POSTGRES_USER:-postgres}
POSTGRES_DB=${POSTGRES_DB:-$POSTGRES_USER}
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }

chown postgres:postgres "$PGDATA"
chmod 0700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    chown postgres "$pwfile"
    as_postgres initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust \
        --auth-host=scram-sha-256 --encoding=UTF8 -D "$PGDATA" >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    echo "listen_addresses = '*'" >>"$PGDATA/postgresql.auto.conf"
    if [ "$POSTGRES_DB" != postgres ]; then
        echo "CREATE DATABASE \"$POSTGRES_DB\";" \
            | as_postgres postgres --single -D "$PGDATA" postgres >/dev/null
    fi
    echo "entrypoint: initialised $PGDATA for user $POSTGRES_USER, database $POSTGRES_DB"
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups "$@"
