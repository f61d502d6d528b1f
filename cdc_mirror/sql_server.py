"""``cdc-mirror sql-server``: Spark's Thrift server (HiveServer2 protocol) over the lake.

Downstream users query the Hive snapshots and the raw change layer the way they query Hive:
with a HiveServer2 client (beeline, PyHive, JDBC ``jdbc:hive2://host:port/default``). The
server runs in a Spark session built like every other job of cdc-mirror
(``simple_binlog.spark.build_session``): the same metastore, lake and jars, so it sees each
partition as soon as the stream writer or the merge publishes it.

It listens on loopback by default and asks for no password (HiveServer2's ``NONE``
authentication): bind it to another address only behind a network boundary that does the
authentication, as the operator's guide says.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading

from simple_binlog.config import Settings
from simple_binlog.errors import CdcMirrorError, ConfigError

log = logging.getLogger(__name__)

THRIFT_SERVER = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"


def thrift_conf(host: str, port: int) -> dict[str, str]:
    """Pure: the Spark settings that place the HiveServer2 endpoint."""
    return {
        # HiveServer2 reads its settings from the session's Hadoop configuration.
        "spark.hadoop.hive.server2.thrift.bind.host": host,
        "spark.hadoop.hive.server2.thrift.port": str(port),
        "spark.hadoop.hive.server2.transport.mode": "binary",
        "spark.hadoop.hive.server2.authentication": "NONE",
        # Queries run as the server's user: there is no Hadoop cluster to impersonate on.
        "spark.hadoop.hive.server2.enable.doAs": "false",
        "spark.ui.showConsoleProgress": "false",
    }


def _check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ConfigError(
                f"the SQL server cannot listen on {host}:{port} ({exc.strerror}); "
                "pick another --port."
            ) from None


def _listening(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        return probe.connect_ex((host, port)) == 0


def run_sql_server(
    settings: Settings, host: str, port: int, started_timeout_s: float = 180.0
) -> None:
    """Serve until SIGTERM/SIGINT."""
    _check_port_free(host, port)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    from simple_binlog.spark import build_session  # noqa: PLC0415 - starts a JVM

    spark = build_session(settings, "cdc-mirror-sql-server", thrift_conf(host, port))
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        server_class = getattr(jvm, THRIFT_SERVER)
        # startWithSparkSession(session, exitOnError=false): a failure is raised here, not a
        # System.exit of the JVM under Python.
        server = server_class.startWithSparkSession(spark._jsparkSession, False)
        waited = 0.0
        while not _listening(host, port):
            if stop.wait(0.5):
                break
            waited += 0.5
            if waited > started_timeout_s:
                raise CdcMirrorError(
                    f"Spark's Thrift server did not listen on {host}:{port} within "
                    f"{started_timeout_s:.0f} s; see the log above."
                )
        if not stop.is_set():
            log.info("SQL server ready: beeline -u jdbc:hive2://%s:%d/default", host, port)
        stop.wait()
        log.info("stopping the SQL server")
        server.stop()
    finally:
        spark.stop()
