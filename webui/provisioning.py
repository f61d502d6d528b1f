"""One action to mirror a table (issue 22, item 2): creating a table mirror in the web admin
sets up what it needs and starts its initial load; removing it says what it leaves behind.

On creation, inside the request's one database transaction:

1. the mirror is validated against the live MySQL schema and saved (``admin``);
2. its initial load, a replay of the existing rows through the stream (mock_replay, source
   MOCK), is queued for a replay worker in the same transaction (``replay_jobs``): its
   condition is checked by mock_replay's parser first (columns checked, literals bound,
   never concatenated), so a refused condition refuses the whole form;
3. its resources are set up (``Provisioner``): the instance's Kafka topic, and the
   warehouse table created now from the live MySQL schema as the warehouse mirror would
   create it on its first change. The lake's raw view (of the table's rows in the one raw
   table ``_cdc_changes``) and snapshot table are created by the stream writer and merge
   with their first data, the Kudu table by the Kudu mirror with its
   first change, and Redis needs nothing before its first key: the result says so.

A step that fails raises ``admin.Problems`` with one sentence, the transaction is rolled
back and nothing of the mirror is saved (a topic or warehouse table already made stays: both
are made the same way by the components, so a second attempt finds them and goes on). The
components learn of the mirror from the configuration store and start on it between batches.

``StackProvisioner`` talks to Kafka and PostgreSQL; ``RecordingProvisioner`` is the fake
(real code, for the unit tests).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import date
from typing import Protocol

from sqlalchemy.orm import Session

from cdc_platform.config import Settings, TableMirror
from cdc_platform.lake import RAW_TABLE
from simple_binlog.errors import CdcMirrorError
from simple_binlog.naming import topic_name
from webui import admin
from webui.replay import ReplayRequest, ReplayService, ReplayStatus
from webui.replay_jobs import JobReplayService
from webui.schema_source import LiveTableSchema, SchemaSource
from webui.security import Keys

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resource:
    """One thing a table mirror writes to: what it is, its name, and its state as a sentence
    (created now, exists, created later by a component, or what stays after removal)."""

    kind: str
    name: str
    state: str


@dataclass(frozen=True)
class InitialLoad:
    """The operator's choice for the initial load: on or off, the condition (mock_replay's
    grammar; None: every row) and the day the rows belong to (None: yesterday, UTC)."""

    enabled: bool = True
    condition: str | None = None
    execute_time: date | None = None


@dataclass(frozen=True)
class MirrorSetup:
    """What the provisioner needs: the mirror, its instance's topic, the live schema, and why
    the warehouse table waits for the first change (None: it is created now)."""

    mirror: TableMirror
    topic: str
    live: LiveTableSchema
    warehouse_later: str | None = None


@dataclass(frozen=True)
class Created:
    row_name: str
    resources: list[Resource]
    initial_load: str | None  # the replay run id


class Provisioner(Protocol):
    def provision(self, setup: MirrorSetup) -> list[Resource]:
        """Set up what the mirror needs now; raises CdcMirrorError with one sentence."""
        ...


# --- names (pure) ---------------------------------------------------------------------------


def instance_topic(settings: Settings, configured_topic: str | None, instance: str) -> str:
    return configured_topic or topic_name(settings.kafka, instance)


def lazy_resources(settings: Settings, mirror: TableMirror) -> list[Resource]:
    """The resources made by the components with the first data, not at creation."""
    name = mirror.name
    found: list[Resource] = []
    if "hive" in mirror.targets:
        found.append(
            Resource(
                "lake raw table",
                f"{settings.stream_writer.database}.{name}",
                "a view of the table's rows in the lake's one raw table "
                f"{settings.stream_writer.database}.{RAW_TABLE}, created by the stream writer "
                "with the table's first rows",
            )
        )
        found.append(
            Resource(
                "lake snapshot table",
                f"{settings.merge.database}.{name}",
                "created by merge with the table's first merged day",
            )
        )
    if "redis" in mirror.targets:
        found.append(
            Resource(
                "Redis key space",
                f"{settings.redis.key_prefix}:{name}:*",
                "nothing to create: the Redis mirror writes each key with its row",
            )
        )
    if "kudu" in mirror.targets:
        found.append(
            Resource(
                "Kudu table",
                f"{settings.kudu.table_prefix}{name}",
                "created by the Kudu mirror with the table's first change",
            )
        )
    return found


def warehouse_table(settings: Settings, mirror: TableMirror) -> str:
    return f"{settings.postgres.warehouse_db}.{settings.mirror.warehouse_schema}.{mirror.name}"


def leftovers(settings: Settings, mirror: TableMirror, topic: str) -> list[Resource]:
    """What stays behind when ``mirror`` is removed: nothing is deleted by removing it. The
    instance's collector stops publishing the table's changes at a transaction boundary
    (``admin.stopped_table_mirrors``), so every store keeps what was published before it."""
    name = mirror.name
    found = [
        Resource(
            "Kafka topic",
            topic,
            "kept: the table's messages published before the removal stay until Kafka's "
            "retention removes them (the topic is the instance's, shared with its other "
            "tables); the collector publishes none of the table's changes after it",
        )
    ]
    if "hive" in mirror.targets:
        found.append(
            Resource(
                "lake raw table",
                f"{settings.stream_writer.database}.{name}",
                f"kept: the table's rows stay in {settings.stream_writer.database}."
                f"{RAW_TABLE} with every day written, no longer expired by maintenance; they "
                "receive the changes published before the removal (the stream writer catches "
                "up to that point) and none after",
            )
        )
        found.append(
            Resource(
                "lake snapshot table",
                f"{settings.merge.database}.{name}",
                "kept with every merged day and its tag (dt-YYYY-MM-DD) and the days view "
                f"{settings.merge.database}_dt.{name}; no longer merged or maintained, so "
                "its tags are not expired either",
            )
        )
    if "warehouse" in mirror.targets:
        tombstones = "" if mirror.warehouse_delete == "soft" else " and its __tombstone table"
        found.append(
            Resource(
                "warehouse table",
                warehouse_table(settings, mirror),
                f"kept{tombstones}, as last applied; drop it in PostgreSQL if no longer wanted",
            )
        )
    if "kudu" in mirror.targets:
        found.append(
            Resource(
                "Kudu table",
                f"{settings.kudu.table_prefix}{name}",
                "kept, as last applied; drop it in Kudu if no longer wanted",
            )
        )
    if "redis" in mirror.targets:
        ttl = (
            f"they expire within {mirror.redis_ttl_s} s of their last change"
            if mirror.redis_ttl_s
            else "they never expire; delete them with SCAN and UNLINK if no longer wanted"
        )
        found.append(
            Resource("Redis keys", f"{settings.redis.key_prefix}:{name}:*", f"kept: {ttl}")
        )
    return found


def warehouse_waits_for(treatments: dict[str, str], governance_on: bool) -> str | None:
    """Why the warehouse table cannot be made now from the live MySQL schema, or None.

    ``treatments``: each column's governance policy (pass, mask, hash, drop), or
    ``"standardised"`` for a column rewritten through a lookup or recrypt. A hashed, masked,
    standardised or dropped column may reach the warehouse with another type than MySQL's
    (or not at all); only the collector knows it, so the warehouse mirror creates the table
    from the first governed change."""
    if not governance_on:
        return None
    governed = sorted(c for c, policy in treatments.items() if policy != "pass")
    if not governed:
        return None
    return (
        "created by the warehouse mirror with the table's first change: governance rewrites "
        f"column{'s' if len(governed) > 1 else ''} {', '.join(governed)}, whose warehouse "
        "type only the governed change tells"
    )


# --- the real provisioner -------------------------------------------------------------------


class StackProvisioner:
    """Kafka (the instance's topic, made as the collector makes it) and the warehouse table
    (made as the warehouse mirror makes it, ``mirror.warehouse.prepare_warehouse_table``)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    def provision(self, setup: MirrorSetup) -> list[Resource]:
        from cdc_platform.kafka import ensure_topic  # noqa: PLC0415 - librdkafka on demand

        made: list[Resource] = []
        try:
            created = ensure_topic(self._settings.kafka, setup.topic)
        except CdcMirrorError as exc:
            raise CdcMirrorError(
                f"the Kafka topic {setup.topic} could not be set up: {exc}"
            ) from exc
        made.append(
            Resource(
                "Kafka topic",
                setup.topic,
                "created now" if created else "exists (the instance's topic, shared by its tables)",
            )
        )
        mirror = setup.mirror
        if "warehouse" in mirror.targets:
            made.append(self._warehouse(setup))
        return made + lazy_resources(self._settings, mirror)

    def _warehouse(self, setup: MirrorSetup) -> Resource:
        name = warehouse_table(self._settings, setup.mirror)
        if setup.warehouse_later is not None:
            return Resource("warehouse table", name, setup.warehouse_later)
        from mirror.warehouse import prepare_warehouse_table  # noqa: PLC0415 - psycopg

        try:
            created = prepare_warehouse_table(
                self._settings.postgres,
                self._settings.mirror,
                setup.mirror,
                setup.live.columns,
                setup.live.primary_key,
            )
        except CdcMirrorError as exc:
            raise CdcMirrorError(f"the warehouse table {name} could not be created: {exc}") from exc
        return Resource(
            "warehouse table",
            name,
            "created now from the live MySQL schema"
            if created
            else "exists already (left by an earlier mirror of this name?); kept as it is, "
            "rows deleted in MySQL since then are not removed from it",
        )


@dataclass
class RecordingProvisioner:
    """The fake: records each setup and answers what the real one would, without Kafka or
    PostgreSQL; ``fail`` makes the next call raise that sentence."""

    settings: Settings
    setups: list[MirrorSetup] = field(default_factory=list)
    fail: str | None = None

    def provision(self, setup: MirrorSetup) -> list[Resource]:
        if self.fail is not None:
            raise CdcMirrorError(self.fail)
        self.setups.append(setup)
        made = [Resource("Kafka topic", setup.topic, "exists")]
        if "warehouse" in setup.mirror.targets:
            made.append(
                Resource(
                    "warehouse table",
                    warehouse_table(self.settings, setup.mirror),
                    setup.warehouse_later or "created now from the live MySQL schema",
                )
            )
        return made + lazy_resources(self.settings, setup.mirror)


# --- the one action -------------------------------------------------------------------------


def submit_initial_load(
    db: Session,
    replays: ReplayService,
    actor: str,
    mirror: TableMirror,
    load: InitialLoad,
) -> str:
    """Queue (or start) the replay of ``mirror``'s existing rows; its run id. The replay
    worker's job is written in ``db``'s transaction, so it exists only if the mirror does.
    Raises admin.Problems with mock_replay's sentence when the request is refused."""
    if not mirror.enabled:
        raise admin.Problems(
            [
                f"table mirror {mirror.name!r} is disabled: its components skip its rows, "
                "so enable it before starting its initial load."
            ]
        )
    try:
        request = ReplayRequest(
            instance=mirror.instance,
            db_prefix=mirror.db_prefix,
            table_prefix=mirror.table_prefix,
            condition=load.condition,
            execute_time=load.execute_time,
        )
    except ValueError as exc:
        raise admin.Problems([f"initial load: {exc}"]) from None
    try:
        if isinstance(replays, JobReplayService):
            run_id = replays.submit(db, request, table_mirror=mirror.name)
        else:
            run_id = replays.start(request)
    except CdcMirrorError as exc:
        raise admin.Problems([f"initial load: {exc}"]) from exc
    admin.audit(
        db,
        actor,
        "start",
        "replay",
        run_id,
        None,
        {**request.model_dump(mode="json"), "table_mirror": mirror.name},
    )
    return run_id


def initial_loads(replays: ReplayService, name: str) -> list[ReplayStatus]:
    """The replays that loaded (or load) the mirror's existing rows, newest first."""
    if isinstance(replays, JobReplayService):
        return replays.for_table_mirror(name)
    return []


def create_mirror(
    db: Session,
    settings: Settings,
    keys: Keys,
    schemas: SchemaSource,
    replays: ReplayService,
    provisioner: Provisioner,
    actor: str,
    mirror: TableMirror,
    load: InitialLoad,
) -> Created:
    """Save, queue the initial load, set up; any step failing raises admin.Problems and the
    caller rolls the transaction back (see the module docstring)."""
    from webui import governance  # noqa: PLC0415 - governance builds on admin

    row = admin.save_table_mirror(db, keys, schemas, actor, mirror)
    instance = admin.get_instance(db, mirror.instance)
    live = schemas.live_schema(
        admin.instance_access(instance, keys), mirror.db_prefix, mirror.table_prefix
    )
    assert live is not None  # save_table_mirror refused the mirror otherwise
    run_id = submit_initial_load(db, replays, actor, mirror, load) if load.enabled else None
    state = governance.state(db)
    treatments = governance.treatments_for(db, mirror.name, list(live.columns))
    later = warehouse_waits_for(
        {column: "standardised" if t.standardise else t.policy for column, t in treatments.items()},
        state.enabled,
    )
    setup = MirrorSetup(
        mirror, instance_topic(settings, instance.topic, instance.name), live, later
    )
    try:
        resources = provisioner.provision(setup)
    except CdcMirrorError as exc:
        raise admin.Problems([f"{exc} Nothing was saved; try again once it is reachable."]) from exc
    admin.audit(
        db,
        actor,
        "provision",
        "table_mirror_resources",
        mirror.name,
        None,
        {"resources": [r.__dict__ for r in resources], "initial_load": run_id},
    )
    log.info("table mirror %s set up: %s", mirror.name, ", ".join(r.name for r in resources))
    return Created(row.name, resources, run_id)
