#!/bin/bash
# The collector's user and the admin user, as the local stack provisions them
# (stack/health.py mariadb_provision), but at '%': clients connect from other containers and,
# through the published port, from the host.
#
# The official image runs /docker-entrypoint-initdb.d/* once, on the temporary server of the
# first start (empty data volume). A shell script rather than init.sql because the passwords
# come from the environment (CDC_MYSQL_PASSWORD, CDC_MYSQL_ADMIN_PASSWORD; see
# docker-compose.yml). The entrypoint sources this file when it is not executable, so it
# defines no functions and changes no shell options. A missing variable or a failed statement
# ends the initialisation, run or sourced.

: "${MARIADB_ROOT_PASSWORD:?MARIADB_ROOT_PASSWORD is not set}"
: "${CDC_MYSQL_PASSWORD:?CDC_MYSQL_PASSWORD is not set}"
: "${CDC_MYSQL_ADMIN_PASSWORD:?CDC_MYSQL_ADMIN_PASSWORD is not set}"

# SQL string literals: backslashes doubled, then single quotes backslash-escaped.
cdc_password=${CDC_MYSQL_PASSWORD//\\/\\\\}
cdc_password=${cdc_password//\'/\\\'}
cdc_admin_password=${CDC_MYSQL_ADMIN_PASSWORD//\\/\\\\}
cdc_admin_password=${cdc_admin_password//\'/\\\'}

# MYSQL_PWD rather than -p keeps the root password off the process list.
MYSQL_PWD="$MARIADB_ROOT_PASSWORD" mariadb --protocol=socket -uroot <<SQL
-- Set-up, not data: keep these statements out of the binlog the collector reads.
SET SESSION sql_log_bin = 0;
-- The escaping above relies on backslash escapes being on.
SET SESSION sql_mode = REPLACE(@@SESSION.sql_mode, 'NO_BACKSLASH_ESCAPES', '');

CREATE USER IF NOT EXISTS 'cdc'@'%' IDENTIFIED BY '${cdc_password}';
ALTER USER 'cdc'@'%' IDENTIFIED BY '${cdc_password}';
-- REPLICATION CLIENT is BINLOG MONITOR on MariaDB 10.5+; PROCESS lets history replay see the
-- server's load; SELECT reads schemas and replays rows.
GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT, PROCESS ON *.* TO 'cdc'@'%';

CREATE USER IF NOT EXISTS 'cdc_admin'@'%' IDENTIFIED BY '${cdc_admin_password}';
ALTER USER 'cdc_admin'@'%' IDENTIFIED BY '${cdc_admin_password}';
GRANT ALL PRIVILEGES ON *.* TO 'cdc_admin'@'%' WITH GRANT OPTION;
SQL
