"""One scheduler process for the failover test: the real Scheduler under the real ZooKeeper
election, its run history and registration in the real web admin (AdminControl), and file-backed
fakes for the lake and the jobs so that two processes share them.

    python scheduler_process.py '<json options>'

options: zookeeper, root, session_timeout_s, webui_url, token, ready_file (a JSON list of
days), merged_file (lines "table day", appended by each merge of a day), started_file (lines
"identifier kind table day attempt", the day as ``2026-11-25T05`` for an hour), tables,
tick_s, job_s, name; optional: hourly_tables (of tables, with hourly snapshots; their hours
close at their end, in UTC), mismatch_hours (hours like ``2026-11-25T05`` whose first
attempt's check finds a mismatch).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from datetime import date
from pathlib import Path
from zoneinfo import ZoneInfo

from pydantic import SecretStr

from cdc_platform.config import SchedulerSettings, TableMirror, ZooKeeperSettings
from cdc_platform.control import AdminControl, Heartbeat
from cdc_platform.election import LeaderElection
from cdc_platform.snapshot_tags import SnapshotTags
from scheduler.app import run_elected
from scheduler.jobs import JobResult
from scheduler.plan import Due, HourClosing
from scheduler.service import Scheduler


class FileLake:
    def __init__(self, ready: Path, merged: Path) -> None:
        self._ready, self._merged = ready, merged

    def ready_days(self) -> set[date]:
        return {date.fromisoformat(d) for d in json.loads(self._ready.read_text())}

    def snapshot_tags(self, tables: list[str]) -> dict[str, SnapshotTags]:
        lines = self._merged.read_text().splitlines() if self._merged.exists() else []
        pairs = [line.split() for line in lines if line]
        return {
            table: SnapshotTags(
                {date.fromisoformat(day): 0 for name, day in pairs if name == table}
            )
            for table in tables
        }


class FileJobs:
    def __init__(
        self,
        identifier: str,
        merged: Path,
        started: Path,
        job_s: float,
        mismatch_hours: frozenset[str] = frozenset(),
    ) -> None:
        self._identifier, self._merged, self._started, self._job_s = (
            identifier,
            merged,
            started,
            job_s,
        )
        self._mismatch_hours = mismatch_hours

    def run(self, due: Due, stop: threading.Event) -> JobResult:
        with self._started.open("a") as out:
            out.write(f"{self._identifier} {due.kind} {due.table} {due.when} {due.attempt}\n")
        if stop.wait(self._job_s):
            return JobResult("failed", error="stopped before it ended (the scheduler stopped).")
        if due.hour is not None:  # an hour: the lake's merged days are days only
            if due.when in self._mismatch_hours and due.attempt == 1:
                return JobResult(
                    "mismatch", rows=3, files=1, check_ok=False, error="the check differs."
                )
            return JobResult("succeeded", rows=3, files=1, check_ok=True)
        if due.kind == "merge":
            with self._merged.open("a") as out:
                out.write(f"{due.table} {due.dt}\n")
        return JobResult("succeeded", rows=3, files=1, check_ok=True)


def main() -> None:
    options = json.loads(sys.argv[1])
    identifier = f"{options['name']}:{os.getpid()}"
    control = AdminControl(options["webui_url"], SecretStr(options["token"]))
    hourly = set(options.get("hourly_tables", []))
    tables = [
        TableMirror.model_validate(
            {
                "instance": "local",
                "db_prefix": "db",
                "table_prefix": t,
                "targets": ["hive"],
                "snapshots": "hourly" if t in hourly else "daily",
            }
        )
        for t in options["tables"]
    ]
    scheduler = Scheduler(
        SchedulerSettings(
            tick_s=options["tick_s"],
            catch_up_days=5,
            validation=False,
            first_retry_s=1,
            max_retry_s=2,
        ),
        lambda: tables,
        FileLake(Path(options["ready_file"]), Path(options["merged_file"])),
        FileJobs(
            identifier,
            Path(options["merged_file"]),
            Path(options["started_file"]),
            options["job_s"],
            frozenset(options.get("mismatch_hours", [])),
        ),
        control,
        identifier,
        closing=HourClosing(ZoneInfo("UTC"), 0),
    )
    zookeeper = ZooKeeperSettings(
        hosts=options["zookeeper"],
        root=options["root"],
        session_timeout_s=options["session_timeout_s"],
    )
    election = LeaderElection(
        zookeeper, f"{options['root']}/scheduler", "the active scheduler", identifier
    )
    heartbeat = Heartbeat(
        AdminControl(options["webui_url"], SecretStr(options["token"])),
        "scheduler",
        interval_s=0.5,
        role=lambda: "active" if election.leading else "standby",
        detail=lambda: identifier,
    ).start()
    shutdown = threading.Event()
    try:
        run_elected(scheduler, election, shutdown)
    finally:
        heartbeat.close()
        time.sleep(0)


if __name__ == "__main__":
    main()
