"""A table mirror's live schema, daily counts and lineage, from the mirror backend
(``mirror.backend.MirrorBackend``) pointed at the admin's own instance and table mirror.

The backend takes its instances and table mirrors as a configuration snapshot: each call
hands it one holding just this mirror and its instance (password decrypted in memory only,
the instance's own shard rules and topic). Each part is asked separately:
MySQL being away still shows the lineage, a missing counts cache still shows the schema.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

from pydantic import BaseModel
from sqlalchemy.orm import Session

from cdc_platform.config import Settings
from cdc_platform.config_store import ConfigSnapshot
from mirror.backend import MirrorBackend
from simple_binlog.errors import CdcMirrorError
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
    snapshot = ConfigSnapshot(
        version=0,
        instances=(admin.instance_config(row.instance, keys),),
        tables=(admin.table_mirror(row),),
    )
    backend = MirrorBackend(settings, snapshot)
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
