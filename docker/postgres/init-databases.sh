#!/bin/bash
# The Hive metastore database, next to the warehouse database the image creates from
# POSTGRES_DB (cdc_warehouse), both owned by the stack's role as in the local stack
# (stack/health.py postgres_provision). The names are PostgresSettings' defaults.
#
# The official image runs /docker-entrypoint-initdb.d/* once, on the first start (empty data
# volume), against a temporary server on a socket. It sources this file when it is not
# executable, so it defines no functions and changes no shell options.

psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    --set=database=hive_metastore --set=owner="$POSTGRES_USER" <<'SQL'
SELECT format('CREATE DATABASE %I OWNER %I', :'database', :'owner')
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'database')\gexec
SQL
