"""A table written by an incompatible version stops a component before it reads anything.

Every table cdc-mirror creates carries its layout version (``cdc-mirror.layout-version``) and
is Iceberg format version 2; ``LakeCatalog.check_compatible`` refuses, in one sentence naming
the table's location and the cause, a table of another layout version, one cdc-mirror did not
create, and one of another format version. Here on each storage, and the stream writer's
process against a progress table of a newer layout: it exits with that sentence and its query
never started (no offset in Spark's checkpoint, nothing committed). Merge and maintenance do
the same check (``tests/integration/merge/test_merge.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_platform.config import Settings
from cdc_platform.iceberg import (
    LAYOUT_PROPERTY,
    LAYOUT_VERSION,
    OLDEST_LAYOUT_READ,
    IncompatibleTableError,
    LakeCatalog,
    storage_for,
)
from cdc_platform.lake import PROGRESS_COLUMNS, PROGRESS_TABLE
from tests.integration.lake.conftest import Lake, LakeSpark
from tests.integration.stream_writer.harness import (
    LakeRun,
    WriterEnv,
    create_topic,
    delete_topic,
    message,
    produce_messages,
)

COLUMNS = (("id", "BIGINT"), ("dt", "STRING"))
NEWER = str(LAYOUT_VERSION + 1)
WAIT_S = 300.0


def _refusal(lake: Lake, table: str) -> str:
    with pytest.raises(IncompatibleTableError) as raised:
        lake.catalog.check_compatible(lake.namespace, ["missing", table])
    return str(raised.value)


def test_tables_of_another_layout_or_format_are_refused(lake: Lake) -> None:
    catalog, ns = lake.catalog, lake.namespace
    catalog.create_table(ns, "ours", COLUMNS)
    catalog.check_compatible(ns, ["ours", "not_created_yet"])  # this version's: accepted
    folder = lake.settings.lake_location.child(f"{ns}.db")

    catalog.create_table(ns, "newer", COLUMNS, properties={LAYOUT_PROPERTY: NEWER})
    assert _refusal(lake, "newer") == (
        f"the lake table {ns}.newer at {folder}/newer cannot be used: it was written by a newer "
        f"version of cdc-mirror ({LAYOUT_PROPERTY} {NEWER}; this version reads {OLDEST_LAYOUT_READ} to {LAYOUT_VERSION})."
    )
    # Created by another tool: plain Spark SQL, no stamp.
    catalog.spark.sql(f"CREATE TABLE {catalog.name(ns, 'foreign')} (id BIGINT) USING iceberg")
    assert "it was not created by cdc-mirror" in _refusal(lake, "foreign")
    catalog.create_table(ns, "v1", COLUMNS, properties={"format-version": "1"})
    assert _refusal(lake, "v1").endswith(
        "cannot be used: it is an Iceberg format version 1 table; this version reads format "
        "version 2."
    )
    # The check refuses the first incompatible table of those asked about, and only those.
    catalog.check_compatible(ns, ["ours"])


def test_the_writer_stops_before_reading_when_its_progress_table_is_newer(
    lake_spark: LakeSpark, local_stack: Settings, tmp_path: Path
) -> None:
    topic = create_topic(local_stack, partitions=1)
    try:
        produce_messages(local_stack, topic, [message("shop", "orders", 1, 1_709_251_200_000, 1)])
        env = WriterEnv.create(tmp_path, topic, local_stack, "local")
        # The writer's database as a newer cdc-mirror left it, in the same metastore.
        catalog = LakeCatalog(
            lake_spark.spark, storage_for(env.settings), lake_spark.settings["local"].lake.catalog
        )
        catalog.create_namespace(env.database)
        catalog.create_table(
            env.database,
            PROGRESS_TABLE,
            PROGRESS_COLUMNS,
            partitioned_by=("writer",),
            properties={LAYOUT_PROPERTY: NEWER},
        )
        try:
            with LakeRun(env, tmp_path) as run:
                code = run.writer.wait_killed(WAIT_S)
                log = run.writer.log_file.read_text(errors="replace")
                run.skip_drop()
            assert code != 0, log[-3000:]
            where = env.settings.lake_location.child(f"{env.database}.db/{PROGRESS_TABLE}")
            assert (
                f"the lake table {env.database}.{PROGRESS_TABLE} at {where} cannot be used: it "
                f"was written by a newer version of cdc-mirror" in log
            ), log[-3000:]
            assert not (env.checkpoint / "offsets").exists()
            assert catalog.table_names(env.database) == {PROGRESS_TABLE}
            progress = catalog.spark.table(catalog.name(env.database, PROGRESS_TABLE))
            assert progress.count() == 0
        finally:
            catalog.drop_namespace(env.database)
    finally:
        delete_topic(local_stack, topic)
