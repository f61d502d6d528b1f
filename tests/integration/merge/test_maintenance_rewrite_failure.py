"""The position-delete rewrite of ``cdc-mirror maintain`` whose commit fails for real, on local
disk: another maintenance (Iceberg's own ``rewrite_position_delete_files``) rewrites the same
delete files between the rewrite's write and its commit, so Iceberg refuses the commit
(``ValidationException``: the files it replaces are gone, a ``CleanableFailure``). The
rewrite's new delete files are then deleted (as Iceberg's RewritePositionDeletesCommitManager
does), the step is reported failed, and the table is the concurrent commit's, equal to MySQL.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from merge.job import MergeRequest
from merge.maintenance import Maintainer
from tests.integration.merge.harness import Shop
from tests.integration.merge.test_maintenance import LakeFiles
from tests.integration.merge.test_merge import DAY1, assert_snapshot_equals_mysql
from tests.integration.merge.test_snapshot_storage import (
    ROWS_PER_SHARD,
    live_delete_files,
    maintenance_keeping_every_day,
    merged_history,
)


def test_a_rewrite_commit_that_lost_to_another_rewrite_deletes_its_new_delete_files(
    spark: Any, shop: Shop
) -> None:
    settings = maintenance_keeping_every_day(shop.merge_settings(check=True, buckets=2))
    merger, placed = merged_history(spark, shop, settings, ROWS_PER_SHARD // 4)
    name = merger.store.name(shop.table)
    maintainer = Maintainer(settings, spark, merger.config)
    files = LakeFiles(spark)
    last_day = DAY1 + timedelta(days=2)
    try:
        # Delete files naming several data files (partition granularity): maintain rewrites
        # them into one per data file.
        # A tenth of the rows changed on each of two days: the second day's deletes name the
        # first day's new data files too, and no data file has half its rows deleted (none is
        # folded: every rewritten position names a live row).
        spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('write.delete.granularity'='partition')")
        for day in (DAY1 + timedelta(days=1), last_day):
            shop.start_day(day)
            for order_no in shop.rng.sample(sorted(placed), len(placed) // 10):
                shop.update(placed[order_no], order_no)
            shop.write_raw(spark, day)
            merger.merge(MergeRequest(shop.table, day))
        assert None in live_delete_files(spark, name).values()

        written: list[str] = []
        concurrent: list[int] = []
        rewrite_group = maintainer._rewrite_delete_group

        def another_rewrite_first(positions: Any, group: list[Any], data_files: Any) -> list[Any]:
            new_files = rewrite_group(positions, group, data_files)
            paths = [str(f.location()) for f in new_files]
            # Written: the check after the run can tell them deleted. (A group whose deletes
            # all name folded data files writes none.)
            assert all(files.exists(path) for path in paths), paths
            written.extend(paths)
            if written and not concurrent:
                spark.sql(
                    f"CALL {settings.lake.catalog}.system.rewrite_position_delete_files("
                    f"table => '{settings.merge.database}.{shop.table}', "
                    "options => map('rewrite-all', 'true'))"
                )
                concurrent.append(merger.store.state(shop.table).current)
            return new_files

        maintainer._rewrite_delete_group = another_rewrite_first  # type: ignore[method-assign]
        report = maintainer.run([shop.table])
        assert written and concurrent, report.steps
        [failed] = report.failed
        assert failed.action == "compact" and failed.table.endswith(f"_snap.{shop.table}"), failed
        assert failed.error is not None and "ValidationException" in failed.error, failed.error
        assert [path for path in written if files.exists(path)] == [], written
        # Nothing of the failed rewrite committed: the table is the concurrent commit's.
        assert merger.store.state(shop.table).current == concurrent[0]
        assert not set(written) & set(live_delete_files(spark, name)), written
        assert_snapshot_equals_mysql(spark, shop, merger, last_day)
    finally:
        maintainer.close()
        merger.close()
