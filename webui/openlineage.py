"""The lineage as OpenLineage events, for data catalogs (Marquez, DataHub, OpenMetadata, …). Pure.

One ``RunEvent`` (``eventType: COMPLETE``) per table mirror: the job
``cdc-mirror/<instance>.<logical table>`` reads every MySQL shard table of the logical table
and writes the instance's Kafka topic, the raw Hive table, the Hive snapshot, the warehouse
table and the Redis keys, whichever are the mirror's targets. Every dataset carries the
``schema`` facet; every output with columns carries ``columnLineage``, mapping each output
column to the same column of every shard, with the transformation (``DIRECT``/``IDENTITY`` for
a copy, ``DIRECT``/``TRANSFORMATION`` with ``masking: true`` for a masked or hashed column).
A column dropped by policy is in no output.

Spec facts used (OpenLineage 2-0-2 RunEvent; facets SchemaDatasetFacet 1-1-1 and
ColumnLineageDatasetFacet 1-2-0; the naming conventions of ``spec/Naming.md``): datasets are
``(namespace, name)`` with ``mysql://host:port`` + ``database.table``,
``postgres://host:port`` + ``database.schema.table``, ``kafka://bootstrap`` + ``topic``,
``hive://host:port`` + ``database.table``. There is no convention for Redis; the export uses
``redis://host:port`` + the key prefix. The Hive namespace is the metastore's database
server (this deployment has no Thrift metastore service). The ``runId`` is a UUID derived
from the job and the content, so exporting an unchanged configuration twice gives the same
ids (catalogs then see one run, not a new one per download).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from cdc_platform.config import Settings
from merge.types import hive_type
from mirror.pgtypes import pg_type
from simple_binlog.errors import CdcMirrorError
from webui.lineage_map import ColumnLineage, TableLineage

RUN_EVENT_SCHEMA_URL = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"
SCHEMA_FACET_URL = (
    "https://openlineage.io/spec/facets/1-1-1/SchemaDatasetFacet.json#/$defs/SchemaDatasetFacet"
)
COLUMN_LINEAGE_FACET_URL = (
    "https://openlineage.io/spec/facets/1-2-0/ColumnLineageDatasetFacet.json"
    "#/$defs/ColumnLineageDatasetFacet"
)
PRODUCER = "https://github.com/cdc-mirror/cdc-mirror/tree/main/webui"
JOB_NAMESPACE = "cdc-mirror"
_RUN_ID_NAMESPACE = uuid.UUID("6f1d6c1e-3f57-4c1b-9a53-0c9d1b0e4a21")

# The raw table holds each change as the SimpleBinlog message; the row is JSON in ``content``
# (``beforeContent`` for the row before an UPDATE).
RAW_FIELDS: tuple[tuple[str, str], ...] = (
    ("version", "bigint"),
    ("binlogOffset", "bigint"),
    ("executeTime", "bigint"),
    ("eventType", "string"),
    ("schemaName", "string"),
    ("tableName", "string"),
    ("source", "string"),
    ("primaryKeys", "array<string>"),
    ("columnTypes", "string"),
    ("content", "string"),
    ("beforeContent", "string"),
    ("position", "string"),
    ("dt", "string"),
)


@dataclass(frozen=True)
class Namespaces:
    """The OpenLineage dataset namespace of each system (``scheme://host:port``)."""

    mysql: Mapping[str, str]  # instance name → mysql://host:port
    kafka: str
    hive: str
    postgres: str
    redis: str

    @classmethod
    def from_settings(
        cls, settings: Settings, instances: Mapping[str, tuple[str, int]]
    ) -> Namespaces:
        """``instances``: name → (host, port). Nothing secret is read (no passwords, no
        Redis URL user info)."""
        redis = urlsplit(settings.redis.url.get_secret_value())
        postgres = f"{settings.postgres.host}:{settings.postgres.port}"
        bootstrap = settings.kafka.bootstrap_servers.split(",")[0].strip()
        return cls(
            mysql={name: f"mysql://{host}:{port}" for name, (host, port) in instances.items()},
            kafka=f"kafka://{bootstrap}",
            hive=f"hive://{postgres}",
            postgres=f"postgres://{postgres}",
            redis=f"redis://{redis.hostname or 'localhost'}:{redis.port or 6379}",
        )


def _facet(url: str, **body: Any) -> dict[str, Any]:
    return {"_producer": PRODUCER, "_schemaURL": url, **body}


def _schema(fields: Iterable[tuple[str, str]]) -> dict[str, Any]:
    return _facet(SCHEMA_FACET_URL, fields=[{"name": n, "type": t} for n, t in fields])


def _transformation(column: ColumnLineage) -> dict[str, Any]:
    if column.policy in ("mask", "hash"):
        description = "masked" if column.policy == "mask" else "salted deterministic hash"
        if column.standardise:
            description += f"; standardised: {column.standardise}"
        return {
            "type": "DIRECT",
            "subtype": "TRANSFORMATION",
            "description": description,
            "masking": True,
        }
    if column.standardise:
        return {
            "type": "DIRECT",
            "subtype": "TRANSFORMATION",
            "description": f"standardised: {column.standardise}",
            "masking": False,
        }
    return {"type": "DIRECT", "subtype": "IDENTITY", "description": "copied", "masking": False}


def _column_lineage(
    table: TableLineage,
    mysql_namespace: str,
    outputs: Iterable[tuple[str, ColumnLineage]],
) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for output_field, column in outputs:
        transformation = _transformation(column)
        fields[output_field] = {
            "inputFields": [
                {
                    "namespace": mysql_namespace,
                    "name": physical,
                    "field": column.name,
                    "transformations": [transformation],
                }
                for physical in table.mysql_tables
            ],
            # The 1-0 form of the same, for catalogs that read only these two.
            "transformationDescription": transformation["description"],
            "transformationType": "MASKED" if transformation["masking"] else "IDENTITY",
        }
    return _facet(COLUMN_LINEAGE_FACET_URL, fields=fields)


def _dataset(namespace: str, name: str, facets: dict[str, Any]) -> dict[str, Any]:
    return {"namespace": namespace, "name": name, "facets": facets}


def _target(
    namespace: str,
    name: str,
    table: TableLineage,
    mysql_namespace: str,
    fields: list[tuple[str, str, ColumnLineage]],
) -> dict[str, Any]:
    """A mirror target's dataset: its fields (name, type, the column it holds) and where in
    MySQL each comes from."""
    return _dataset(
        namespace,
        name,
        {
            "schema": _schema((field, kind) for field, kind, _ in fields),
            "columnLineage": _column_lineage(
                table, mysql_namespace, [(field, column) for field, _, column in fields]
            ),
        },
    )


def run_event(table: TableLineage, namespaces: Namespaces, event_time: datetime) -> dict[str, Any]:
    """The RunEvent of one table mirror."""
    mysql = namespaces.mysql.get(table.instance, f"mysql://{table.instance}")
    kept = [c for c in table.columns if c.policy != "drop"]
    source_schema = _schema((c.name, c.mysql_type) for c in table.columns)
    inputs = [
        _dataset(mysql, physical, {"schema": source_schema}) for physical in table.mysql_tables
    ]
    outputs = [_dataset(namespaces.kafka, table.kafka_topic, {})]
    if table.hive_raw:
        raw_inputs = [(c.raw_field, c) for c in kept if c.raw_field]
        lineage = _column_lineage(table, mysql, raw_inputs)
        # Each JSON member feeds the raw ``content`` column; list them under it.
        members: list[dict[str, Any]] = []
        for field_lineage in lineage["fields"].values():
            members.extend(field_lineage["inputFields"])
        content = {"inputFields": members, "transformationDescription": "the row as JSON"}
        lineage["fields"] = {"content": content, "beforeContent": content} if members else {}
        outputs.append(
            _dataset(
                namespaces.hive,
                table.hive_raw,
                {"schema": _schema(RAW_FIELDS), "columnLineage": lineage},
            )
        )
    if table.hive_snapshot:
        snapshot = [(c.snapshot_column, _hive_type(c), c) for c in kept if c.snapshot_column]
        outputs.append(_target(namespaces.hive, table.hive_snapshot, table, mysql, snapshot))
    if table.warehouse_table:
        warehouse = [(c.warehouse_column, _pg_type(c), c) for c in kept if c.warehouse_column]
        outputs.append(_target(namespaces.postgres, table.warehouse_table, table, mysql, warehouse))
    if table.redis_prefix:
        redis = [(c.redis_field, "json", c) for c in kept if c.redis_field]
        outputs.append(_target(namespaces.redis, table.redis_prefix, table, mysql, redis))
    job = f"{table.instance}.{table.logical_table}"
    body = {"job": job, "inputs": inputs, "outputs": outputs}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    return {
        "eventType": "COMPLETE",
        "eventTime": event_time.isoformat().replace("+00:00", "Z"),
        "run": {"runId": str(uuid.uuid5(_RUN_ID_NAMESPACE, f"{job}/{digest}"))},
        "job": {"namespace": JOB_NAMESPACE, "name": job},
        "inputs": inputs,
        "outputs": outputs,
        "producer": PRODUCER,
        "schemaURL": RUN_EVENT_SCHEMA_URL,
    }


def openlineage_events(
    tables: Iterable[TableLineage], namespaces: Namespaces, event_time: datetime
) -> list[dict[str, Any]]:
    """One RunEvent per table mirror, by logical table name."""
    return [
        run_event(t, namespaces, event_time) for t in sorted(tables, key=lambda t: t.logical_table)
    ]


def _hive_type(column: ColumnLineage) -> str:
    # A masked or hashed value is text whatever the MySQL type was.
    if column.policy in ("mask", "hash"):
        return "string"
    try:
        return hive_type(column.mysql_type)
    except CdcMirrorError:  # a type the merge cannot map stops that merge, not the export
        return column.mysql_type


def _pg_type(column: ColumnLineage) -> str:
    if column.policy in ("mask", "hash"):
        return "text"
    try:
        return pg_type(column.mysql_type)
    except CdcMirrorError:
        return column.mysql_type
