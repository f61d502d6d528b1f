"""The Spark side of a batch: ``DataFrame -> DataFrame`` functions, no I/O of their own.

``parse`` turns Kafka records into SimpleBinlog rows plus an ``error`` column that follows
``simple_binlog.message.from_json``'s checks (required fields, types, version, positive
offset, known eventType/source, row images are objects), computed by Spark from a schema so
the JVM parses the JSON, not Python. A row with an error is dead-lettered, never dropped.

The JSON is parsed by one of two JVM functions giving the same struct: the writer jar's
``SimpleBinlogParse`` (``stack/jvm/writer``; one pass over the bytes, cutting object-valued
fields out as they came) when the session has registered it, else Spark's ``from_json`` with
``MESSAGE_SCHEMA`` (the reference; it decodes to chars and rebuilds each object's text, about
a third of the writer's CPU). The contract checks that follow are the same for both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from cdc_platform.lake import DEAD_LETTER_TABLE, ROW_COLUMNS
from simple_binlog.control import CONTROL_KEY_PREFIX, HEARTBEAT_KEY
from simple_binlog.message import FORMAT_VERSION, EventType, Source
from simple_binlog.routing import ShardRule

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_CORRUPT = "_corrupt_record"
# Row images, column types and the position stay JSON text (Spark keeps an object's raw JSON
# when the schema says string): lossless, and the merge job decodes them with the contract.
MESSAGE_SCHEMA = StructType(
    [
        StructField("version", LongType()),
        StructField("binlogOffset", LongType()),
        StructField("executeTime", LongType()),
        StructField("eventType", StringType()),
        StructField("schemaName", StringType()),
        StructField("tableName", StringType()),
        StructField("source", StringType()),
        StructField("primaryKeys", ArrayType(StringType())),
        StructField("columnTypes", StringType()),
        StructField("content", StringType()),
        StructField("beforeContent", StringType()),
        StructField("position", StringType()),
        StructField(_CORRUPT, StringType()),
    ]
)
# The writer jar's parse (io.cdcmirror.spark.SimpleBinlogParse), once registered in a session.
JVM_PARSE_CLASS = "io.cdcmirror.spark.SimpleBinlogParse"
JVM_PARSE_FUNCTION = "cdc_parse_simple_binlog"
REQUIRED = (
    "version",
    "binlogOffset",
    "executeTime",
    "eventType",
    "schemaName",
    "tableName",
    "source",
    "content",
)


def at_or_after(floors: Mapping[tuple[str, int], int]) -> Column | None:
    """True for a row at or above its partition's floor offset (``floors``: (topic, partition)
    → first offset still needed; other partitions are all needed); None without floors."""
    below: Column | None = None
    for (topic, partition), offset in sorted(floors.items()):
        mine = (
            (F.col("kafkaTopic") == topic)
            & (F.col("kafkaPartition") == partition)
            & (F.col("kafkaOffset") < offset)
        )
        below = mine if below is None else below | mine
    return None if below is None else ~below


def day_column(epoch_ms: Column, zone: str) -> Column:
    """``yyyy-MM-dd`` of epoch milliseconds in ``zone`` (the session time zone is UTC)."""
    return F.date_format(F.from_utc_timestamp(F.timestamp_millis(epoch_ms), zone), "yyyy-MM-dd")


def _is_object(column: Column) -> Column:
    return F.ltrim(column).startswith("{")


def error_column(m: str = "m") -> Column:
    """The first contract violation of the parsed struct ``m``, or NULL for a valid message."""

    def field(name: str) -> Column:
        return F.col(f"{m}.{name}")

    checks: list[tuple[Column, Column]] = [
        (F.col("value").isNull(), F.lit("the Kafka message has no value.")),
        (
            field(_CORRUPT).isNotNull(),
            F.lit(
                "a SimpleBinlog message must be a JSON object with fields of the contract's "
                "types (invalid JSON or a field of the wrong type)."
            ),
        ),
    ]
    checks += [
        (
            field(name).isNull(),
            F.lit(f"SimpleBinlog message lacks the required field '{name}'."),
        )
        for name in REQUIRED
    ]
    checks += [
        (
            field("version") != FORMAT_VERSION,
            F.format_string(
                f"SimpleBinlog version %d is not supported (this build reads {FORMAT_VERSION}).",
                field("version"),
            ),
        ),
        (
            field("binlogOffset") <= 0,
            F.format_string(
                "SimpleBinlog field 'binlogOffset' must be positive (%d).", field("binlogOffset")
            ),
        ),
        (
            ~field("eventType").isin([e.value for e in EventType]),
            F.format_string(
                "SimpleBinlog message has an unknown eventType '%s'.", field("eventType")
            ),
        ),
        (
            ~field("source").isin([s.value for s in Source]),
            F.format_string("SimpleBinlog message has an unknown source '%s'.", field("source")),
        ),
        (~_is_object(field("content")), F.lit("SimpleBinlog field 'content' must be an object.")),
        (
            field("beforeContent").isNotNull() & ~_is_object(field("beforeContent")),
            F.lit("SimpleBinlog field 'beforeContent' must be an object."),
        ),
        (
            field("columnTypes").isNotNull() & ~_is_object(field("columnTypes")),
            F.lit("SimpleBinlog field 'columnTypes' must be an object."),
        ),
    ]
    expression = F.when(checks[0][0], checks[0][1])
    for condition, message in checks[1:]:
        expression = expression.when(condition, message)
    return expression


def message_column(jvm_parse: bool) -> Column:
    """``MESSAGE_SCHEMA``'s struct of the Kafka ``value``: by the registered JVM function
    (``jvm_parse``) or by ``from_json``. Both set ``_corrupt_record`` for a value that is not
    a JSON object with fields of the contract's types, and give NULL for a NULL value."""
    if jvm_parse:
        return F.call_function(JVM_PARSE_FUNCTION, F.col("value"))
    return F.from_json(
        F.col("value").cast("string"),
        MESSAGE_SCHEMA,
        {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT},
    )


def parse(kafka_rows: DataFrame, zone: str, jvm_parse: bool = False) -> DataFrame:
    """Kafka source rows → one row per message with the SimpleBinlog fields, ``error``,
    ``payloadBytes``, ``dt`` (day of executeTime, for valid rows) and ``kafkaDt`` (day of the
    Kafka timestamp, the dead-letter table's partition). ``value`` and ``key`` stay as they
    came, for the dead-letter table. ``jvm_parse``: see ``message_column``."""
    parsed = kafka_rows.select(
        message_column(jvm_parse).alias("m"),
        F.col("value"),
        F.col("key"),
        F.col("topic").alias("kafkaTopic"),
        F.col("partition").alias("kafkaPartition"),
        F.col("offset").alias("kafkaOffset"),
        F.col("timestamp").alias("kafkaTimestamp"),
    )
    return parsed.select(
        *[F.col(f"m.{f.name}").alias(f.name) for f in MESSAGE_SCHEMA.fields if f.name != _CORRUPT],
        "value",
        "key",
        "kafkaTopic",
        "kafkaPartition",
        "kafkaOffset",
        "kafkaTimestamp",
        error_column().alias("error"),
        F.coalesce(F.length("value"), F.lit(0)).alias("payloadBytes"),
    ).select(
        "*",
        day_column(F.col("executeTime"), zone).alias("dt"),
        F.date_format(F.from_utc_timestamp(F.col("kafkaTimestamp"), zone), "yyyy-MM-dd").alias(
            "kafkaDt"
        ),
    )


def _java_pattern(pattern: str) -> str:
    """A ShardRule regex for Java (``rlike``/``regexp_extract``), anchored like fullmatch.

    The non-capturing wrapper keeps group numbers; ``(?P<name>`` is Python-only syntax.
    Whether Spark routes like the Python router is checked on every batch's files.
    """
    return "^(?:" + pattern.replace("(?P<", "(?<") + ")$"


def route_column(rules: Sequence[ShardRule]) -> Column:
    """The logical table of each row by the first matching rule, as
    ``simple_binlog.routing.ShardRouter`` does, or NULL when no rule matches."""
    schema, table = F.col("schemaName"), F.col("tableName")
    logical: Column | None = None
    for rule in rules:
        schema_re, table_re = _java_pattern(rule.schema_pattern), _java_pattern(rule.table_pattern)
        db_group = re.compile(rule.schema_pattern).groupindex["db"]
        table_group = re.compile(rule.table_pattern).groupindex["table"]
        matches = schema.rlike(schema_re) & table.rlike(table_re)
        name = F.lower(
            F.concat(
                F.regexp_extract(schema, schema_re, db_group),
                F.lit("_"),
                F.regexp_extract(table, table_re, table_group),
            )
        )
        logical = F.when(matches, name) if logical is None else logical.when(matches, name)
    assert logical is not None  # ShardRouter refuses an empty rule list at start
    return logical


def topic_route_column(
    default: Sequence[ShardRule], by_topic: Mapping[str, Sequence[ShardRule]] | None = None
) -> Column:
    """``route_column`` of each row's topic's rules (``by_topic``; ``default`` for a topic
    not in it). One rule set when every topic has the default's (no topic test a row)."""
    differing = {t: r for t, r in (by_topic or {}).items() if tuple(r) != tuple(default)}
    if not differing:
        return route_column(default)
    logical: Column | None = None
    for topic, rules in sorted(differing.items()):
        mine = F.col("kafkaTopic") == topic
        by_rules = route_column(rules)
        logical = F.when(mine, by_rules) if logical is None else logical.when(mine, by_rules)
    assert logical is not None
    return logical.otherwise(route_column(default))


# The table name of control messages' rows (simple_binlog.control): counted for the watermark
# (a heartbeat's executeTime), never written to the lake; no logical table can have this
# name (routes are [a-z0-9_]; a leading '_' is the writer's own, like _cdc_changes).
CONTROL_TABLE = "_control"


def is_control_column(key: Column) -> Column:
    """``simple_binlog.control.is_control`` of the Kafka key, as a Spark column."""
    return F.substring(key, 1, len(CONTROL_KEY_PREFIX)) == F.lit(bytearray(CONTROL_KEY_PREFIX))


def is_heartbeat_column(key: Column) -> Column:
    """``simple_binlog.control.is_heartbeat`` of the Kafka key, as a Spark column."""
    return key == F.lit(bytearray(HEARTBEAT_KEY))


KnownRoutes = Mapping[tuple[str, str, str], str]  # (topic, schema, table) → logical table


def with_known_routes(rows: DataFrame, known_routes: KnownRoutes) -> DataFrame:
    """``rows`` plus ``_known``: the logical table of each row's physical table (of its topic:
    each instance has its own shard rules) when it was routed in an earlier batch (the
    contract's Python router decided and checked it), else NULL. A broadcast hash join: one
    hash lookup a row however many physical tables a sharded source has (a map literal's
    lookup scans its keys), instead of four regexes a row. Each task keeps its rows (a
    broadcast join does not shuffle the Kafka rows), and a row meets at most one route: the
    routes are a dict, one per (topic, schema, table), so the join never repeats a row."""
    if not known_routes:
        return rows.withColumn("_known", F.lit(None).cast("string"))
    routes = rows.sparkSession.createDataFrame(
        [
            (topic, schema, table, logical)
            for (topic, schema, table), logical in known_routes.items()
        ],
        "_routeTopic STRING, _routeSchema STRING, _routeTable STRING, _known STRING",
    )
    matches = (
        (F.col("kafkaTopic") == F.col("_routeTopic"))
        & (F.col("schemaName") == F.col("_routeSchema"))
        & (F.col("tableName") == F.col("_routeTable"))
    )
    return rows.join(F.broadcast(routes), matches, "left").drop(
        "_routeTopic", "_routeSchema", "_routeTable"
    )


def route_checks(route: Column, known: Column | None = None) -> tuple[Column, Column]:
    """(logical table, routing error) from ``route_column``'s result; exactly one is NULL.
    ``known``: true where the route came from the known routes (checked when first seen)."""
    schema, table = F.col("schemaName"), F.col("tableName")
    usable = route.rlike("^[a-z0-9_]{1,128}$") & (route != DEAD_LETTER_TABLE)
    if known is not None:
        usable = known | usable  # Or stops at a known route: no regex for it
    error = (
        F.when(
            route.isNull(),
            F.format_string("no shard routing rule matches %s.%s.", schema, table),
        )
        .when(
            route == DEAD_LETTER_TABLE,
            F.format_string(
                "shard routing maps %s.%s to the dead-letter table's name; change the rules.",
                schema,
                table,
            ),
        )
        .when(
            ~usable,
            F.format_string(
                "shard routing maps %s.%s to '%s', which is not a usable table name "
                "(lowercase letters, digits and '_').",
                schema,
                table,
                route,
            ),
        )
    )
    return F.when(usable, route), error


def lake_rows(
    kafka_rows: DataFrame,
    zone: str,
    rules: Sequence[ShardRule],
    known_routes: KnownRoutes | None = None,
    jvm_parse: bool = False,
    topic_rules: Mapping[str, Sequence[ShardRule]] | None = None,
) -> DataFrame:
    """Every message of the batch as a row of the lake, in one pass.

    Valid, routable messages get ``_table`` = their logical table and ``_dt`` = the day of
    executeTime; control messages (``simple_binlog.control``) ``_table`` = ``_control`` with
    only a heartbeat's executeTime kept (the writer reads it as the partition's event time and
    writes none of them); all others ``_table`` = ``dead_letter``, ``_dt`` = the day of the Kafka
    timestamp, ``error`` = one sentence, and keep their ``raw`` bytes and ``kafkaKey``. Files
    hold the union of both column sets; each Hive table declares (and readers read) its own.
    ``topic_rules``: the shard rules of the rows of a topic (its instance's), ``rules`` for
    the others.
    """
    # Each step its own projection: the regexes of the routing and the checks of a message
    # run once per row. Spark does not share an expression used in several CASE branches,
    # and does not merge projections where that would repeat an expensive one.
    # A physical table routed in an earlier batch is looked up (``known_routes``); only new
    # ones run the rules' regexes (coalesce evaluates its second argument only when needed).
    routed = with_known_routes(parse(kafka_rows, zone, jvm_parse), known_routes or {}).withColumn(
        "_route", F.coalesce(F.col("_known"), topic_route_column(rules, topic_rules))
    )
    logical, route_error = route_checks(F.col("_route"), F.col("_known").isNotNull())
    control = is_control_column(F.col("key"))
    checked = (
        routed.withColumn("_control", control)
        .withColumn("error", F.when(~F.col("_control"), F.coalesce(F.col("error"), route_error)))
        .withColumn(
            "executeTime",
            F.when(~F.col("_control") | is_heartbeat_column(F.col("key")), F.col("executeTime")),
        )
        .withColumn("_logical", logical)
    )
    dead = F.col("error").isNotNull()
    return checked.select(
        *[name for name, _ in ROW_COLUMNS],
        "error",
        F.when(dead, F.col("key")).alias("kafkaKey"),
        F.when(dead, F.col("value")).alias("raw"),
        F.when(F.col("_control"), F.lit(CONTROL_TABLE))
        .when(dead, F.lit(DEAD_LETTER_TABLE))
        .otherwise(F.col("_logical"))
        .alias("_table"),
        F.when(dead | F.col("_control"), F.col("kafkaDt")).otherwise(F.col("dt")).alias("_dt"),
    )
