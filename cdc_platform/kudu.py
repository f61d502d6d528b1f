"""The Kudu adapter: the JVM that runs Kudu's Java client inside this process (JPype), the
client made from the ``kudu`` settings, and Kudu's errors in the product's terms.

There is one JVM per process and its classpath is fixed when it starts, so every Kudu user
(the mirror's applier, the row-for-row check, validation) starts it here, with the same
options and the whole jar folder (``client_jars``: ``kudu.client_jars``, else the stack's).
A Java exception of the client becomes a ``ServiceUnavailableError`` naming the masters and
the work (``kudu_errors``); ``java_reason`` is its message on one line.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cdc_platform.config import KuduSettings, Settings
from simple_binlog.errors import ConfigError, ServiceUnavailableError

CLIENT_JAR = "kudu-client-*.jar"
# The client's RowResult getter of each column type (``org.apache.kudu.Type``'s names).
GETTERS = {
    "INT8": "getByte",
    "INT16": "getShort",
    "INT32": "getInt",
    "INT64": "getLong",
    "UNIXTIME_MICROS": "getLong",
    "DECIMAL": "getDecimal",
    "FLOAT": "getFloat",
    "DOUBLE": "getDouble",
    "DATE": "getDate",
    "STRING": "getString",
    "BINARY": "getBinaryCopy",
    "BOOL": "getBoolean",
}


def client_jars(settings: Settings) -> Path:
    """The folder of the Kudu Java client's jars: ``kudu.client_jars``, else the stack's."""
    return (settings.kudu.client_jars or settings.stack.home / "jars" / "kudu").resolve()


def start_jvm(jars: Path, heap: str, needs: Sequence[str] = ()) -> None:
    """The JVM with every jar of ``jars`` on its classpath, started once per process (later
    calls find it running and do nothing). ``needs``: jar patterns besides the Kudu client's
    that must be in ``jars`` (say which in the ConfigError). -Xrs leaves SIGTERM and SIGINT
    to Python, so a process stops on them as it would without a JVM."""
    import jpype  # noqa: PLC0415 - only Kudu users load the JVM
    import jpype.imports  # noqa: PLC0415 - enables 'from org.apache … import'

    if jpype.isJVMStarted():
        return
    missing = [pattern for pattern in (CLIENT_JAR, *needs) if not any(jars.glob(pattern))]
    if missing:
        raise ConfigError(
            f"no {' and no '.join(missing)} in {jars}; run 'cdc-mirror stack up kudu-master' "
            "once, or set kudu.client_jars."
        )
    jpype.startJVM(
        f"-Xmx{heap}",
        "-Xrs",
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        classpath=[str(jars / "*")],
        convertStrings=False,
    )


def masters(settings: KuduSettings) -> str:
    return ",".join(settings.masters)


def connect(settings: KuduSettings) -> Any:
    """A ``KuduClient`` of ``kudu.masters`` with ``kudu.operation_timeout_s`` (the JVM must
    be started). The client connects lazily: its first call says whether Kudu is there."""
    from org.apache.kudu.client import KuduClient  # noqa: PLC0415

    timeout_ms = int(settings.operation_timeout_s * 1000)
    return (
        KuduClient.KuduClientBuilder(masters(settings))
        .defaultAdminOperationTimeoutMs(timeout_ms)
        .defaultOperationTimeoutMs(timeout_ms)
        .build()
    )


def java_reason(exc: BaseException) -> str:
    """The Java exception's message on one line (the client's status text)."""
    message = getattr(exc, "getMessage", None)
    text = str(message()) if callable(message) else str(exc)
    return " ".join(text.split())[:300]


@contextmanager
def kudu_errors(doing: str, where: str) -> Iterator[None]:
    """The boundary: a Java exception inside becomes ``ServiceUnavailableError`` ("Kudu at
    <masters> failed <doing> (<reason>)")."""
    import jpype  # noqa: PLC0415

    try:
        yield
    except jpype.JException as exc:
        raise ServiceUnavailableError(
            f"Kudu at {where} failed {doing} ({java_reason(exc)})."
        ) from None
