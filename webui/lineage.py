"""A table mirror's live schema, daily counts and lineage, from the mirror backend
(``mirror.backend.MirrorBackend``) pointed at the admin's own instance and table mirror.

The backend reads its instances and tables from ``Settings``; the admin keeps them in its
database, so each call builds settings holding just this mirror, its instance (password
decrypted in memory only) and that instance's shard rules. Each part is asked separately:
MySQL being away still shows the lineage, a missing counts cache still shows the schema.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

from pydantic import BaseModel, SecretStr
from sqlalchemy.orm import Session

from mirror.backend import MirrorBackend
from simple_binlog.config import MySQLInstance, Settings
from simple_binlog.errors import CdcMirrorError
from simple_binlog.routing import ShardRule
from webui import admin
from webui.lineage_map import MirrorSource, Naming, TableLineage, table_lineage
from webui.openlineage import Namespaces
from webui.schema_source import SchemaSource
from webui.security import Keys

log = logging.getLogger(__name__)


class MirrorDetails(BaseModel):
    name: str
    live_schema: dict[str, Any] | None
    daily_counts: list[dict[str, Any]] | None
    lineage: dict[str, Any]
    problems: list[str]


def mirror_details(db: Session, settings: Settings, keys: Keys, name: str) -> MirrorDetails:
    row = admin.get_table_mirror(db, name)
    instance = row.instance
    derived = settings.model_copy(
        update={
            "instances": [
                MySQLInstance(
                    name=instance.name,
                    host=instance.host,
                    port=instance.port,
                    user=instance.user,
                    password=SecretStr(keys.decrypt(instance.password_encrypted)),
                    allow_cleartext_password=instance.allow_cleartext_password,
                )
            ],
            "tables": [admin.table_mirror(row)],
            "shard_rules": [ShardRule.model_validate(rule) for rule in instance.shard_rules],
        }
    )
    backend = MirrorBackend(derived)
    problems: list[str] = []
    live: dict[str, Any] | None = None
    counts: list[dict[str, Any]] | None = None
    try:
        live = asdict(backend.live_schema(name))
    except CdcMirrorError as exc:
        problems.append(f"live schema: {exc}")
    try:
        counts = backend.daily_counts(name)
    except CdcMirrorError as exc:
        problems.append(f"daily counts: {exc}")
    lineage = backend.lineage(name, live["shards"] if live else None)
    # The admin may give an instance a topic of its own; the backend only knows the default.
    lineage["kafka_topic"] = instance.topic
    return MirrorDetails(
        name=name, live_schema=live, daily_counts=counts, lineage=lineage, problems=problems
    )


# --- lineage of every table mirror, column by column (issue 10) ---------------------------


def all_lineage(
    db: Session, settings: Settings, keys: Keys, schemas: SchemaSource
) -> list[TableLineage]:
    """Every table mirror's lineage from the admin's configuration, the live MySQL schema
    (physical shard tables and columns, by the instance's shard rules) and the governance
    policies. A mirror whose MySQL side cannot be read still shows its tables, with the
    reason in ``problem``."""
    from webui import governance  # noqa: PLC0415 - governance imports this package's admin

    naming = Naming.from_settings(settings)
    found: list[TableLineage] = []
    for row in admin.list_table_mirrors(db):
        mirror = admin.table_mirror(row)
        problem = None
        physical: tuple[str, ...] | None = None
        columns: dict[str, str] | None = None
        try:
            live = schemas.live_schema(
                admin.instance_access(row.instance, keys), mirror.db_prefix, mirror.table_prefix
            )
        except CdcMirrorError as exc:
            problem = str(exc)
        else:
            if live is None:
                problem = (
                    f"no table of instance {mirror.instance!r} matches {mirror.db_prefix!r}/"
                    f"{mirror.table_prefix!r} now."
                )
            else:
                physical, columns = live.physical_tables, dict(live.columns)
        source = MirrorSource(mirror, row.instance.topic, physical, columns, problem)
        found.append(
            table_lineage(
                source,
                naming,
                governance.treatments_for(db, mirror.name, list(columns or {})),
            )
        )
    return found


def dataset_namespaces(db: Session, settings: Settings) -> Namespaces:
    return Namespaces.from_settings(
        settings, {row.name: (row.host, row.port) for row in admin.list_instances(db)}
    )
