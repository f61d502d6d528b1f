"""``cdc-mirror validate`` tells how far each target's scan got while it runs
(``cdc_mirror.validate.ReportingProgress``): a line per target at most every few seconds, and
one when a scan ends; the progress is still stored for a resume."""

from __future__ import annotations

from cdc_mirror.validate import ReportingProgress
from validation.progress import MemoryProgress, ScanProgress


def test_a_line_per_target_now_and_then_and_when_its_scan_ends() -> None:
    now = [0.0]
    lines: list[str] = []
    inner = MemoryProgress()
    store = ReportingProgress(inner, lines.append, every_s=5.0, clock=lambda: now[0])
    for second, rows in ((0, 1000), (1, 2000), (2, 3000), (6, 4000)):
        now[0] = second
        store.save(ScanProgress("orders", "warehouse", rows=rows, chunks=rows // 1000))
    store.save(ScanProgress("orders", "redis", rows=10, chunks=1))  # another target: its own
    now[0] = 7
    store.save(ScanProgress("orders", "warehouse", rows=4500, chunks=5, done=True))

    assert lines == [
        "orders → warehouse: scanning, 1,000 rows in 1 chunk compared",
        "orders → warehouse: scanning, 4,000 rows in 4 chunks compared",
        "orders → redis: scanning, 10 rows in 1 chunk compared",
        "orders → warehouse: scan done, 4,500 rows in 5 chunks compared",
    ]
    assert inner.saves == 6  # every save is stored, reported or not
    assert store.load("orders", "warehouse") == inner.load("orders", "warehouse")
