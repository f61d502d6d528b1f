"""``cdc-mirror mirror run``: wiring the consumer loop, an applier and the metrics endpoint."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Sequence

from cdc_platform.config import MirrorTarget, Settings, TableMirror
from cdc_platform.config_store import ConfigWatch, load_snapshot, watch_config
from cdc_platform.gc_tuning import tune_gc
from cdc_platform.observability import Probe, serve_observability
from mirror.applier import ChangeApplier
from mirror.consumer import MirrorConsumer
from mirror.metrics import MirrorMetrics
from mirror.plan import mirror_config
from simple_binlog.errors import CdcMirrorError, ConfigError

log = logging.getLogger(__name__)

TARGETS: tuple[MirrorTarget, ...] = ("redis", "warehouse", "kudu")


def build_applier(
    settings: Settings, target: MirrorTarget, tables: Sequence[TableMirror] | None = None
) -> ChangeApplier:
    """The target's applier for ``tables`` (default: the settings' tables of the target)."""
    if tables is None:
        tables = [t for t in settings.tables if target in t.targets]
    if target == "redis":
        from mirror.redis_applier import RedisApplier  # noqa: PLC0415

        return RedisApplier(settings.redis, settings.mirror, tables)
    if target == "warehouse":
        from mirror.warehouse import WarehouseApplier  # noqa: PLC0415

        return WarehouseApplier(settings.postgres, settings.mirror, tables)
    if target == "kudu":
        from cdc_platform.kudu import client_jars  # noqa: PLC0415
        from mirror.kudu import KuduApplier  # noqa: PLC0415 - starts a JVM

        return KuduApplier(settings.kudu, settings.mirror, tables, client_jars(settings))
    raise ConfigError(f"the mirror has no target {target!r} (choose redis, warehouse or kudu).")


def run_mirror(
    settings: Settings, target: MirrorTarget, instance: str | None, metrics_port: int
) -> None:
    if target not in TARGETS:
        raise ConfigError(f"the mirror has no target {target!r} (choose redis, warehouse or kudu).")
    watch = watch_config(settings)
    try:
        _run_watched(settings, watch, target, instance, metrics_port)
    finally:
        watch.close()


def _run_watched(
    settings: Settings,
    watch: ConfigWatch,
    target: MirrorTarget,
    instance: str | None,
    metrics_port: int,
) -> None:
    if instance is not None:
        watch.current.instance(instance)  # names the known instances if it is not one
    config = mirror_config(watch.current, target, instance)
    if not config.instances and settings.config_store.source == "file":
        where = f" of instance {instance!r}" if instance else ""
        raise ConfigError(
            f"no table mirror{where} targets {target!r}; add one under 'tables:' in the config."
        )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    metrics = MirrorMetrics(target)
    consumer: MirrorConsumer | None = None

    def ready() -> Probe:
        if consumer is None:
            return Probe(False, f"starting: connecting to the {target} target")
        return consumer.ready()

    server = (
        serve_observability(
            settings.mirror.metrics_host, metrics_port, metrics.registry, "mirror", ready
        )
        if metrics_port
        else None
    )
    metrics.config_version.set(config.version)
    try:
        applier = build_applier(settings, target, config.tables)
    except BaseException:
        if server is not None:
            server.close()
        raise
    try:
        consumer = MirrorConsumer(
            settings.kafka,
            settings.mirror,
            target,
            config.instances,
            config.router,
            applier,
            metrics,
            stop,
            config=watch,
            only_instance=instance,
        )
        tune_gc()  # after start-up: what it made moves out of the garbage collector's sight
        consumer.run()
    finally:
        applier.close()
        if server is not None:
            server.close()


def serve_backend(settings: Settings, host: str, port: int) -> None:
    """The mirror backend alone (the web admin can mount ``mirror.backend.mirror_router``)."""
    import uvicorn  # noqa: PLC0415
    from fastapi import FastAPI  # noqa: PLC0415

    from mirror.backend import MirrorBackend, mirror_router  # noqa: PLC0415

    app = FastAPI(title="cdc-mirror mirror backend")
    app.include_router(mirror_router(MirrorBackend(settings, load_snapshot(settings))))
    uvicorn.run(app, host=host, port=port, log_level="info")


def refresh_all_counts(settings: Settings) -> dict[str, int]:
    """The nightly job: refresh the daily counts of every table with a check column.

    Returns rows counted per table. One table's failure is logged and the others still run;
    the caller learns of it from the missing entry and the exit code.
    """
    from mirror.backend import MirrorBackend  # noqa: PLC0415

    config = load_snapshot(settings)  # the table mirrors, once, at start
    backend = MirrorBackend(settings, config)
    counted: dict[str, int] = {}
    for table in config.tables:
        if table.check_column is None:
            continue
        try:
            counted[table.name] = sum(backend.refresh_daily_counts(table.name).values())
        except CdcMirrorError as exc:
            log.error("daily counts of %s not refreshed: %s", table.name, exc)
    return counted
