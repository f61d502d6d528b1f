"""docs/performance.md is what bench.report renders from the runs stored under bench/results/
(issue 24, item 7): a stored run round-trips through figures.json, the page shows each
benchmark's newest figure as a ratio to its same-run baseline, prefers full-size runs, names
each run's machine, and the committed page is exactly the rendering of the stored runs."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

from bench.figures import Figure
from bench.report import (
    PERFORMANCE_PAGE,
    RESULTS,
    RUN_FILE,
    ComponentResult,
    RunInfo,
    load_runs,
    render_performance_page,
    write_run,
)

REDIS = Figure("mirror.redis", "Redis: 1,000 changes", 120_000, "rows/s", 150_000, "plain HSET")
FRESH = Figure(
    "mirror.freshness_mysql", "MySQL commit → in Redis", 400.0, "ms", 800.0,
    "configuration 'before'", higher_is_better=False, extra={"p50": 90.0, "p99": 400.0},
)  # fmt: skip
LATENCY = Figure(
    "collector.latency", "commit → readable", 300.0, "ms", higher_is_better=False,
    extra={"p50": 40.0, "p99": 300.0},
)  # fmt: skip


def _info(day: int, quick: bool, machine: str = "2 cores (test CPU)") -> RunInfo:
    when = dt.datetime(2026, 11, day, 12, 0, tzinfo=dt.UTC)
    return RunInfo(when, when + dt.timedelta(minutes=9), f"commit{day}", machine, quick,
                   (1.5, 1.2, 1.0), (2.5, 2.0, 1.5), "shared machine")  # fmt: skip


def _store(root: Path, folder: str, info: RunInfo, *figures: Figure) -> None:
    (root / folder).mkdir(parents=True)
    result = ComponentResult("mirror", ".venv/bin/python -m bench.mirror_bench", "ok", 30.0,
                             list(figures))  # fmt: skip
    write_run(root / folder, info, [result])


def test_a_stored_run_round_trips_through_figures_json(tmp_path: Path) -> None:
    _store(tmp_path, "2026-11-20", _info(20, quick=False), REDIS, FRESH)
    (tmp_path / "2026-11-19-printed").mkdir()  # printed output only, no figures.json
    runs, without = load_runs(tmp_path)
    assert without == ["2026-11-19-printed"]
    [run] = runs
    assert run.folder == "2026-11-20"
    assert run.info == _info(20, quick=False)
    assert run.results[0].figures == [REDIS, FRESH]
    assert json.loads((tmp_path / "2026-11-20" / RUN_FILE).read_text())["format"] == 1


def test_the_page_gives_ratios_dates_and_machines_and_prefers_full_runs(tmp_path: Path) -> None:
    _store(tmp_path, "2026-11-20", _info(20, quick=False, machine="machine A"), REDIS, FRESH)
    slower = dataclasses.replace(REDIS, value=60_000.0)
    _store(tmp_path, "2026-11-21", _info(21, quick=True, machine="machine B"), slower, LATENCY)
    page = render_performance_page(*load_runs(tmp_path))

    assert "the newest of 2026-11-21" in page
    # The full run's Redis figure wins over the later quick run's, as a ratio first.
    assert "| mirror.redis | Redis: 1,000 changes | 0.80× | 120,000 rows/s vs 150,000" in page
    assert "0.40×" not in page
    # A latency compared with its named configuration from the same run: before / after.
    assert "| mirror.freshness_mysql | MySQL commit → in Redis | 2.00× |" in page
    # Without a baseline: its own section, absolute, from the quick run.
    assert page.index("## Measured without a baseline") < page.index("| collector.latency |")
    assert "p50 40.0 ms, p99 300 ms" in page
    # Each run dated with its machine named.
    assert "2026-11-21 12:00 | quick (scaled down) | `commit21` | machine B" in page
    assert "2026-11-20 12:00 | full (the issues' sizes) | `commit20` | machine A" in page


def test_the_committed_page_is_what_bench_report_renders_from_the_stored_results() -> None:
    expected = render_performance_page(*load_runs(RESULTS))
    assert PERFORMANCE_PAGE.read_text() == expected, (
        "docs/performance.md is out of date: run '.venv/bin/python -m bench.report --docs'"
    )


def test_the_page_states_the_peak_memory_a_benchmark_recorded(tmp_path: Path) -> None:
    writer = Figure(
        "stream_writer.steady", "writer steady", 150_000, "rows/s", 178_000, "plain Spark",
        extra={"files": 2036, "JVM peak RSS MB": 3324.4, "python peak RSS MB": 193.2},
    )  # fmt: skip
    _store(tmp_path, "2026-11-20", _info(20, quick=False), REDIS, writer)
    page = render_performance_page(*load_runs(tmp_path))
    memory = page[page.index("## Memory") : page.index("## Runs")]
    assert "| stream_writer.steady | JVM 3,324 MB, python 193 MB | [2026-11-20]" in memory
    assert "mirror.redis" not in memory  # recorded no memory
