"""``server_position`` is one consistent point of the binlog while the source writes: reading
up to its (file, position) and resuming after its GTID position loses no transaction.

Before the fix MariaDB's ``@@gtid_binlog_pos`` was read in a statement after ``SHOW MASTER
STATUS``: a transaction committed in between was in the GTID position but past the file and
position, so a bounded read stopped before it and the next one started after it (the
validation tests' pump lost a workload DELETE that way and the row stayed in the targets).
"""

from __future__ import annotations

import threading

from collector.reader import SchemaCache, read_range
from simple_binlog.offsets import OffsetGenerator
from tests.integration.collector.harness import CollectorScene, admin

READS = 20


def test_consecutive_bounded_reads_lose_no_transaction_under_writes(
    scene: CollectorScene,
) -> None:
    instance = scene.settings.instances[0]
    written: list[int] = []
    failure: list[BaseException] = []
    done = threading.Event()

    def write() -> None:
        try:
            with admin(scene.settings) as conn, conn.cursor() as cursor:
                while not done.is_set():  # one autocommitted transaction each, at full speed
                    cursor.execute(f"INSERT INTO {scene.db}.b (v) VALUES ('w')")
                    written.append(int(cursor.lastrowid))
        except BaseException as exc:  # noqa: BLE001 - handed to the test below
            failure.append(exc)

    offsets, schemas = OffsetGenerator(), SchemaCache(instance)
    position, read_ids = scene.start, list[int]()

    def read_on() -> None:
        """Up to where the server stands now, from the GTID position the last read ended at."""
        nonlocal position
        stop = scene.position_now()
        read_ids.extend(
            int(m.content["id"])  # type: ignore[arg-type]
            for m in read_range(instance, position.gtid, stop, offsets, [scene.db], schemas)
        )
        position = stop

    writer = threading.Thread(target=write, name="position-writer")
    writer.start()
    try:
        for _ in range(READS):  # each read ends while transactions are committing
            read_on()
    finally:
        done.set()
        writer.join(60)
    read_on()  # the rest, written before the writer stopped
    assert not failure, failure
    assert len(written) > READS, "the writer did not write while the reads ran"
    assert sorted(read_ids) == sorted(written), sorted(set(written) - set(read_ids))
