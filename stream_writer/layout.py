"""Where a row goes in the raw layer. Pure logic, no Spark.

A row of a physical table goes to the Iceberg table of its logical table (from the shard
rules: ``ordercenter_07.orderinfo_42`` → ``ordercenter_orderinfo``), partition ``dt`` = the
calendar day of ``executeTime`` in the configured time zone (``stream_writer.time_zone``, UTC
by default; midnight for readiness is taken in the same zone). Iceberg names and sizes the
data files (``write.target-file-size-bytes``); each row keeps its Kafka topic, partition and
offset in columns of its own, so the source of any row is a query away.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from cdc_platform.lake import DEAD_LETTER_TABLE
from simple_binlog.errors import ConfigError
from simple_binlog.routing import ShardRouter


def logical_table(router: ShardRouter, schema: str, table: str) -> str:
    """The logical table a physical table's rows are written to (ConfigError if unroutable)."""
    name = router.route(schema, table).name
    if name == DEAD_LETTER_TABLE:
        raise ConfigError(
            f"shard routing maps {schema}.{table} to {DEAD_LETTER_TABLE!r}, the name of the "
            "stream writer's dead-letter table; change the shard rules."
        )
    return name


def day_of(execute_time_ms: int, zone: ZoneInfo) -> str:
    """``dt`` of an executeTime (epoch milliseconds) in ``zone``."""
    return datetime.fromtimestamp(execute_time_ms / 1000, zone).strftime("%Y-%m-%d")


def next_midnight_ms(dt: str, zone: ZoneInfo) -> int:
    """Epoch milliseconds of the midnight that ends day ``dt`` in ``zone`` (DST-aware)."""
    following = date.fromisoformat(dt) + timedelta(days=1)
    midnight = datetime(following.year, following.month, following.day, tzinfo=zone)
    return int(midnight.timestamp() * 1000)
