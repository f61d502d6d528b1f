"""Validation of the Kudu mirror against MySQL on the stack's real Kudu cluster: the table
sharded over 2 MariaDB databases × 2 tables, read from the binlog, published to Kafka and
applied by the mirror's Kudu consumer. Kudu is found equal; a value changed in Kudu is named
with its key and both rows; ``--repair`` re-publishes it through the stream and the Kudu
mirror converges."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from cdc_mirror.validate import replay_repairer
from cdc_platform.config import Settings
from mirror.app import build_applier
from mirror.consumer import MirrorConsumer
from mirror.metrics import MirrorMetrics
from mirror.plan import ChangeRouter
from simple_binlog.routing import ShardRouter
from tests.integration.mirror.conftest import kudu_cluster
from tests.integration.mirror.kudu_store import drop_tables, kudu_applier
from tests.integration.validation.harness import (
    BASE,
    ROWS_PER_SHARD,
    Pipeline,
    PumpedWatermark,
    make_pipeline,
)
from validation.plan import Difference
from validation.run import Options, describe, validate, validate_table

__all__ = ["kudu_cluster"]


@pytest.fixture()
def kudu_pipeline(mirror_settings: Settings, kudu_cluster: Settings) -> Iterator[Pipeline]:
    scoped = mirror_settings.model_copy(
        update={
            "kudu": mirror_settings.kudu.model_copy(
                update={"table_prefix": f"{mirror_settings.mirror.warehouse_schema}."}
            )
        }
    )
    # Rows written 10 minutes ago as the binlog says: a repair's MOCK offset (read start − 5
    # minutes) is newer than theirs.
    flows = make_pipeline(scoped, history_age_s=600)
    flow = next(flows)
    mirror = flow.settings.tables[0]
    flow.settings = flow.settings.model_copy(
        update={"tables": [mirror.model_copy(update={"targets": [*mirror.targets, "kudu"]})]}
    )
    stop_event = threading.Event()
    router = ChangeRouter(
        flow.settings.tables, ShardRouter(list(flow.settings.shard_rules)), "kudu"
    )
    applier = build_applier(flow.settings, "kudu")
    consumer = MirrorConsumer(
        flow.settings.kafka,
        flow.settings.mirror,
        "kudu",
        ["local"],
        router,
        applier,
        MirrorMetrics("kudu"),
        stop_event,
    )
    thread = threading.Thread(target=consumer.run, name="vq-kudu")
    thread.start()
    flow.threads.append((thread, stop_event, applier))
    try:
        yield flow
    finally:
        next(flows, None)
        drop_tables(flow.settings)


def _change_in_kudu(settings: Settings, table: str, key: int, note: str) -> None:
    from java.math import BigDecimal

    applier = kudu_applier(settings)
    try:
        client = applier._client
        handle = client.openTable(settings.kudu.table_prefix + table)
        session = client.newSession()
        update = handle.newUpdate()
        row = update.getRow()
        row.addDecimal("id", BigDecimal(str(key)))
        row.addString("note", note)
        session.apply(update)
        session.flush()
        session.close()
    finally:
        applier.close()


@pytest.mark.timeout(300)
def test_kudu_is_validated_a_changed_value_is_found_and_repaired(kudu_pipeline: Pipeline) -> None:
    settings = kudu_pipeline.settings
    table = settings.tables[0].name
    options = Options(chunk_rows=25, leaf_rows=8, chunk_time_s=None)
    watermark = PumpedWatermark(kudu_pipeline, "kudu")
    report = validate(settings, table, "kudu", options, watermark)
    assert report.equal, "\n".join(describe(report))
    assert report.rows == 4 * ROWS_PER_SHARD

    changed = BASE + 3
    _change_in_kudu(settings, table, changed, "drift")
    result = validate_table(
        settings,
        table,
        ["kudu"],
        options,
        repair=replay_repairer(settings),
        watermarks={"kudu": watermark},
    )
    assert not result.unreachable, result.unreachable
    [found] = result.reports
    assert [(r.key, r.difference) for r in found.differences] == [
        ((changed,), Difference.DIFFERENT)
    ], "\n".join(describe(found))
    [row] = found.differences
    assert row.differing_columns() == ["note"]
    assert row.target is not None and row.target["note"] == "drift"
    # The repair went through the stream and the Kudu mirror applied it.
    [after] = result.after_repair
    assert after.equal, "\n".join(describe(after))
    assert result.converged
