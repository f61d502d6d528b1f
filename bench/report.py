"""The benchmark report: every component benchmark in one run, one Markdown report with plots.

    .venv/bin/python -m bench.report [--quick] [--out DIR] [--only collector mirror …]
                                     [--note "machine shared with …"]
                                     [--args "validation=--rows 1000000" …]

Runs each component benchmark (collector, replay, stream_writer, merge, mirror, kudu, webui, and
governance when ``bench/governance_bench.py`` exists) one after the other, each in its own
process with ``--json`` so its figures come back as data, not printed text. Writes
``DIR/report.md`` (default ``bench/results/<UTC date>/``) with every figure, its ratio to the
baseline measured in the same run, the issue's target and whether it was met, the machine,
the date and the commit, plus ``throughput.png`` and ``latency.png``.

``--quick`` scales every benchmark down (about 15 minutes on 2 cores); without it each runs
at the issue's sizes, which wants a quiet machine and a few hours. A benchmark that fails or
times out is reported as failed with its one-line error, and the report is still written.
``--args NAME=ARGS`` runs one benchmark at sizes of one's own (the run counts as scaled down);
``--extra NAME=ARGS`` adds ARGS to its quick or full ones (e.g. leaving out a measurement), so a
run without ``--quick`` still counts as made at the issues' sizes.
Ratios are always "better than the baseline" when above 1 (for durations, baseline / ours).

Each run also stores its figures as data, ``DIR/figures.json`` (the run's date, commit,
machine, load and every benchmark's figures; format in ``bench/README.md``), and
``docs/performance.md`` is rendered from every ``bench/results/*/figures.json``: rewritten
after each run stored there, or alone by ``python -m bench.report --docs`` (after adding or
removing a results folder by hand). No figure is written by hand anywhere else.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.figures import Figure, figure_from_json, read_figures
from bench.machine import describe as describe_machine

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PERFORMANCE_PAGE = ROOT / "docs" / "performance.md"
RUN_FILE = "figures.json"  # a run's figures as data, beside its report.md
RUN_FORMAT = 1


@dataclass(frozen=True)
class Target:
    """A target from the component's issue: ``field`` (value, ratio or an extra) ``op`` bound."""

    field: str
    op: str  # ">=" or "<=" ("<" in the issue is checked as "<=": measurements are not exact)
    bound: float
    text: str

    def met(self, figure: Figure) -> bool | None:
        """True/False, or None when the figure lacks the field (e.g. no baseline measured)."""
        measured = figure.field(self.field)
        if measured is None:
            return None
        return measured >= self.bound if self.op == ">=" else measured <= self.bound


# The targets of issues 3-8 and 10, by figure key. Figures without an entry have no target in
# their issue and are reported as measured.
TARGETS: dict[str, tuple[Target, ...]] = {
    "collector.single_rows": (Target("ratio", ">=", 10, "≥ 10× baseline"),),
    "collector.transactions": (Target("ratio", ">=", 5, "≥ 5× baseline"),),
    "collector.latency": (Target("p99", "<=", 250, "p99 < 250 ms"),),
    "replay.workers_1": (
        Target("value", ">=", 100_000, "≥ 100,000 rows/s"),
        Target("ratio", ">=", 0.5, "≥ 50 % of the read limit"),
    ),
    "replay.workers_2": (
        Target("value", ">=", 100_000, "≥ 100,000 rows/s"),
        Target("ratio", ">=", 0.5, "≥ 50 % of the read limit"),
    ),
    "stream_writer.throughput": (
        Target("value", ">=", 100_000, "≥ 100,000 rows/s"),
        Target("ratio", ">=", 0.8, "≥ 80 % of baseline"),
        Target("files above 2× target", "<=", 0, "no file > 2× target size"),
        # No bound on small files since the lake is Iceberg (issue 20): a batch is one commit,
        # its files as small as its rows per logical table and day, and `cdc-mirror maintain`
        # compacts them to the target size (item 5). The bench reports how many there are.
    ),
    # Issue 20, item 11: on each storage, against plain Spark Structured Streaming appending
    # the same topic to one Iceberg table there; the first run creates every table.
    "stream_writer.throughput_first_run": (Target("ratio", ">=", 0.7, "≥ 70 % of baseline"),),
    **{
        f"stream_writer.{name}_{storage}": (Target("ratio", ">=", bound, f"≥ {text} of baseline"),)
        for storage in ("s3", "hdfs")
        for name, bound, text in (
            ("throughput", 0.8, "80 %"),
            ("throughput_first_run", 0.7, "70 %"),
        )
    },
    # Issue 20, item 11: on each storage, against a naive rewrite on that storage.
    **{
        f"merge.small_changes{suffix}": (Target("ratio", ">=", 5, "≥ 5× faster than baseline"),)
        for suffix in ("", "_s3", "_hdfs")
    },
    # Issue 20, item 4: an hour's merge costs what that hour's change costs. The issue sets no
    # bound of its own: the day's (item 3, ≥ 5× a naive rewrite) is applied to one hour.
    **{
        f"merge.hourly_small_changes{suffix}": (
            Target("ratio", ">=", 5, "≥ 5× faster than baseline (the day's goal, for an hour)"),
        )
        for suffix in ("", "_s3", "_hdfs")
    },
    "mirror.redis": (
        Target("value", ">=", 100_000, "≥ 100,000 rows/s"),
        Target("ratio", ">=", 0.6, "≥ 60 % of baseline"),
    ),
    "mirror.warehouse": (Target("value", ">=", 50_000, "≥ 50,000 rows/s"),),
    # The target is MySQL commit → Redis with the collector in front; the bench
    # measures the mirror's share (Kafka → Redis), so this is a necessary, not sufficient, check.
    "mirror.freshness": (Target("p99", "<=", 500, "p99 < 500 ms (mirror's share)"),),
    # Issue 24, item 4 (issue 7 asked for a second): a MySQL commit visible in Redis within
    # 500 ms at the benchmark's load, the collector in front.
    "mirror.freshness_mysql": (Target("p99", "<=", 500, "p99 < 500 ms (MySQL commit → Redis)"),),
    # Issue 27: the Kudu target's guard costs at most 40 % against an unguarded batch upsert
    # through the same client, and a MySQL commit is visible in Kudu within a second.
    "kudu.apply": (Target("ratio", ">=", 0.6, "≥ 60 % of an unguarded upsert"),),
    "kudu.freshness_mysql": (Target("p99", "<=", 1000, "p99 < 1 s (MySQL commit → Kudu)"),),
    # Issue 21, item 7: ahead of Debezium's MariaDB connector on both, same server, same Kafka.
    "debezium.single_rows": (Target("ratio", ">=", 1, "ahead of Debezium (rows/s)"),),
    "debezium.latency": (Target("ratio", ">=", 1, "ahead of Debezium (p99)"),),
    # Issue 10: detection on every string column loses at most 15 % against governance off.
    "governance.detect": (Target("ratio", ">=", 0.85, "loss ≤ 15 % vs governance off"),),
    # Issue 25, item 7: a table validated against the warehouse and against Redis when nothing
    # differs, at least 5x a full-table SELECT compared in Python.
    "validation.warehouse": (Target("ratio", ">=", 5, "≥ 5× baseline"),),
    "validation.redis": (Target("ratio", ">=", 5, "≥ 5× baseline"),),
    # Issue 22, item 8: the web admin's pages answer in under 200 ms p95 with 500 table
    # mirrors and 20 components.
    **{
        f"webui.page_{page}": (Target("p95", "<=", 200, "p95 < 200 ms"),)
        for page in ("overview", "status", "tables", "replays", "api_status")
    },
}


@dataclass(frozen=True)
class Component:
    name: str
    module: str
    full_args: tuple[str, ...]
    quick_args: tuple[str, ...]
    optional: bool = False  # run only if its module exists (written by someone else)


_LATENCY_AB = (
    "--only",
    "latency",
    "--latency-rate",
    "3000",
    "--latency-configs",
    "before",
    "gather-unbounded",
    "current",
    "priority",
)

COMPONENTS: tuple[Component, ...] = (
    Component(
        "collector",
        "bench.collector_bench",
        ("--single-rows", "200000", "--transactions", "1000", "--latency-seconds", "10"),
        ("--single-rows", "5000", "--transactions", "20", "--latency-seconds", "5"),
    ),
    # The collector's commit → readable in named configurations, alternated in one run
    # (bench.collector_bench LATENCY_CONFIGS): 'before' the collector as it was,
    # 'gather-unbounded' all but one change, 'priority' how much is its process waiting for a CPU.
    Component(
        "collector_latency",
        "bench.collector_bench",
        (*_LATENCY_AB, "--latency-rounds", "4", "--latency-seconds", "6"),
        (*_LATENCY_AB, "--latency-rounds", "1", "--latency-seconds", "3"),
    ),
    Component("replay", "bench.replay_bench", (), ("--rows", "200000", "--workers", "1")),
    Component(
        "stream_writer",
        "bench.stream_writer_bench",
        ("--latency-seconds", "120"),
        ("--messages", "200000", "--tables", "200", "--target-file-mb", "4"),
    ),
    *(
        Component(
            f"stream_writer_{storage}",
            "bench.stream_writer_bench",
            ("--storage", storage),
            (
                "--storage",
                storage,
                "--messages",
                "200000",
                "--tables",
                "200",
                "--target-file-mb",
                "4",
            ),
        )
        for storage in ("s3", "hdfs")
    ),
    *(
        Component(
            "merge" if storage == "local" else f"merge_{storage}",
            "bench.merge_bench",
            ("--storage", storage),
            (
                "--storage",
                storage,
                "--rows",
                "1000000",
                "--changes",
                "100000",
                "--small-changes",
                "10000",
            ),
        )
        for storage in ("local", "s3", "hdfs")
    ),
    Component(
        "mirror",
        "bench.mirror_bench",
        ("--freshness-configs", "collector-before", "current"),
        (
            "--changes",
            "100000",
            "--keys",
            "20000",
            "--freshness-seconds",
            "10",
            "--freshness-configs",
            "collector-before",
            "current",
        ),
    ),
    Component(
        "kudu",
        "bench.kudu_bench",
        (),
        ("--changes", "50000", "--keys", "20000", "--freshness-seconds", "10"),
    ),
    Component(
        "debezium",
        "bench.debezium_bench",
        ("--single-rows", "200000", "--latency-seconds", "10"),
        ("--single-rows", "20000", "--latency-seconds", "5"),
    ),
    Component("webui", "bench.webui_bench", ("--requests", "10000"), ("--requests", "1000")),
    Component("validation", "bench.validation_bench", (), ("--rows", "200000")),
    # Kudu and the lake's current state (Kudu's services and a Spark session: smaller sizes).
    Component(
        "validation-stores",
        "bench.validation_bench",
        ("--rows", "1000000", "--only", "kudu", "--only", "lake"),
        ("--rows", "50000", "--only", "kudu", "--only", "lake"),
    ),
    Component(
        "governance",
        "bench.governance_bench",
        ("--single-rows", "200000"),
        ("--single-rows", "10000"),
        optional=True,
    ),
)


@dataclass
class ComponentResult:
    component: str
    command: str
    status: str  # "ok", "failed"
    seconds: float
    figures: list[Figure] = field(default_factory=list)
    error: str | None = None
    output_tail: str = ""


@dataclass(frozen=True)
class RunInfo:
    started: dt.datetime
    finished: dt.datetime
    commit: str
    machine: str
    quick: bool
    load_start: tuple[float, float, float]
    load_end: tuple[float, float, float]
    note: str | None = None


# ---------------------------------------------------------------------------------------------
# Pure part: error lines, formatting, target checks, Markdown.


def error_line(stderr: str, returncode: int | None) -> str:
    """The one line that says why a benchmark failed: the exception line of a traceback, a
    ``SystemExit`` message, or the exit status when it printed nothing useful."""
    if returncode is None:
        return "timed out"
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        # A traceback ends with "SomeError: message"; Spark and Kafka log lines before it
        # start with a date or a level, which the exception line never does.
        head = line.split(":", 1)[0]
        if head.replace(".", "").replace("_", "").isalnum() and (
            head.endswith(("Error", "Exception", "Exit", "Interrupt")) or head == "error"
        ):
            return line[:300]
    if lines:
        return f"exit status {returncode}: {lines[-1][:300]}"
    return f"exit status {returncode}"


def tail(text: str, lines: int = 40) -> str:
    kept = text.rstrip().splitlines()[-lines:]
    return "\n".join(kept)


def format_number(value: float, unit: str) -> str:
    """Whole numbers from 100 up; one decimal below, where it still says something."""
    return f"{value:,.1f} {unit}" if abs(value) < 100 else f"{value:,.0f} {unit}"


def format_ratio(ratio: float | None) -> str:
    if ratio is None:
        return "–"
    return f"{ratio:.2f}×"


def verdict(figure: Figure) -> tuple[str, str]:
    """(target text, status) of a figure: status is met, not met, not measured or no target."""
    targets = TARGETS.get(figure.key, ())
    if not targets:
        return "–", "no target"
    outcomes = [target.met(figure) for target in targets]
    text = "; ".join(target.text for target in targets)
    if any(outcome is False for outcome in outcomes):
        missed = [t.text for t, o in zip(targets, outcomes, strict=True) if o is False]
        return text, "**not met** (" + "; ".join(missed) + ")"
    if any(outcome is None for outcome in outcomes):
        return text, "not measured"
    return text, "met"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def figure_rows(results: Sequence[ComponentResult]) -> list[str]:
    """The summary table's rows: one per figure, one per failed benchmark."""
    lines: list[str] = []
    for result in results:
        if result.status != "ok":
            lines.append(
                f"| {result.component} | – | – | – | – | – | **failed**: {_cell(result.error or '')} |"
            )
            continue
        if not result.figures:
            lines.append(f"| {result.component} | – | – | – | – | – | no figures written |")
        for figure in result.figures:
            target, status = verdict(figure)
            measured = format_number(figure.value, figure.unit)
            if "p50" in figure.extra and "p99" in figure.extra:
                measured = (
                    f"p50 {format_number(figure.extra['p50'], figure.unit)}, "
                    f"p99 {format_number(figure.extra['p99'], figure.unit)}"
                )
            baseline = "–"
            if figure.baseline is not None:
                baseline = (
                    f"{format_number(figure.baseline, figure.unit)} ({figure.baseline_label})"
                )
            lines.append(
                "| "
                + " | ".join(
                    _cell(cell)
                    for cell in (
                        result.component,
                        figure.label,
                        measured,
                        baseline,
                        format_ratio(figure.ratio),
                        target,
                        status,
                    )
                )
                + " |"
            )
    return lines


def run_section(result: ComponentResult) -> list[str]:
    """A benchmark's command, error, extra numbers and the last lines of its output."""
    lines: list[str] = []
    lines += [f"### {result.component}: {result.status} in {result.seconds:,.0f} s", ""]
    lines += [f"`{result.command}`", ""]
    if result.error:
        lines += [f"Error: {result.error}", ""]
    for figure in result.figures:
        if figure.extra:
            extras = ", ".join(f"{k} {v:,.4g}" for k, v in figure.extra.items())
            lines += [f"- {figure.label}: {extras}"]
    if result.figures and any(f.extra for f in result.figures):
        lines.append("")
    if result.output_tail:
        lines += [
            "<details><summary>output (last lines)</summary>",
            "",
            "```text",
            result.output_tail,
            "```",
            "",
            "</details>",
            "",
        ]
    return lines


def render_markdown(info: RunInfo, results: Sequence[ComponentResult], plots: Sequence[str]) -> str:
    mode = (
        "quick (every benchmark scaled down; figures are not comparable with the issue's sizes)"
        if info.quick
        else "full (the issues' sizes)"
    )
    lines = [
        f"# cdc-mirror benchmark report, {info.started:%Y-%m-%d}",
        "",
        f"- **Run**: {mode}",
        f"- **When**: {info.started:%Y-%m-%d %H:%M} – {info.finished:%H:%M} UTC",
        f"- **Commit**: `{info.commit}`",
        f"- **Machine**: {info.machine}",
        "- **Load average** (1/5/15 min) at start: "
        + " / ".join(f"{x:.2f}" for x in info.load_start)
        + ", at end: "
        + " / ".join(f"{x:.2f}" for x in info.load_end),
    ]
    if info.note:
        lines.append(f"- **Note**: {info.note}")
    lines += [
        "",
        "Ratios compare with the baseline measured in the same run on the same machine; above "
        "1× is better than the baseline (for durations: baseline time / our time). Targets are "
        "the component issues'.",
        "",
        "## Figures",
        "",
        "| component | figure | measured | baseline | ratio | target | status |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += figure_rows(results)
    if plots:
        lines += ["", "## Plots", ""]
        lines += [f"![{Path(plot).stem}]({plot})" for plot in plots]
    lines += ["", "## Runs", ""]
    for result in results:
        lines += run_section(result)
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------------------------------------
# A run stored as data (DIR/figures.json), and docs/performance.md rendered from every stored run.


@dataclass(frozen=True)
class StoredRun:
    folder: str  # its folder under bench/results/
    info: RunInfo
    results: tuple[ComponentResult, ...]


def run_document(info: RunInfo, results: Sequence[ComponentResult]) -> dict[str, Any]:
    """The JSON of a run (``bench/README.md`` documents it): what ``docs/performance.md`` is
    rendered from."""
    return {
        "format": RUN_FORMAT,
        "started": info.started.isoformat(),
        "finished": info.finished.isoformat(),
        "commit": info.commit,
        "machine": info.machine,
        "quick": info.quick,
        "load_start": list(info.load_start),
        "load_end": list(info.load_end),
        "note": info.note,
        "results": [
            {
                "component": r.component,
                "command": r.command,
                "status": r.status,
                "seconds": r.seconds,
                "error": r.error,
                "figures": [asdict(f) for f in r.figures],
            }
            for r in results
        ],
    }


def _load_triple(values: Sequence[float]) -> tuple[float, float, float]:
    first, second, third = (float(v) for v in values)
    return first, second, third


def run_from_document(folder: str, document: dict[str, Any]) -> StoredRun:
    if document.get("format") != RUN_FORMAT:
        raise ValueError(
            f"{folder}/{RUN_FILE}: format {document.get('format')!r}, not {RUN_FORMAT}"
        )
    info = RunInfo(
        started=dt.datetime.fromisoformat(document["started"]),
        finished=dt.datetime.fromisoformat(document["finished"]),
        commit=str(document["commit"]),
        machine=str(document["machine"]),
        quick=bool(document["quick"]),
        load_start=_load_triple(document["load_start"]),
        load_end=_load_triple(document["load_end"]),
        note=document.get("note"),
    )
    results = tuple(
        ComponentResult(
            component=str(item["component"]),
            command=str(item["command"]),
            status=str(item["status"]),
            seconds=float(item["seconds"]),
            figures=[figure_from_json(f) for f in item.get("figures", [])],
            error=item.get("error"),
        )
        for item in document["results"]
    )
    return StoredRun(folder, info, results)


def write_run(out: Path, info: RunInfo, results: Sequence[ComponentResult]) -> Path:
    path = out / RUN_FILE
    path.write_text(json.dumps(run_document(info, results), indent=2, ensure_ascii=False) + "\n")
    return path


def load_runs(results_dir: Path = RESULTS) -> tuple[list[StoredRun], list[str]]:
    """Every stored run, oldest first, and the folders that hold no figures.json (runs
    recorded as printed output before runs were stored as data)."""
    runs: list[StoredRun] = []
    without: list[str] = []
    for folder in sorted(p for p in results_dir.iterdir() if p.is_dir()):
        path = folder / RUN_FILE
        if not path.exists():
            without.append(folder.name)
            continue
        runs.append(run_from_document(folder.name, json.loads(path.read_text())))
    runs.sort(key=lambda run: (run.info.started, run.folder))
    return runs, without


def _component_order(name: str) -> int:
    names = [c.name for c in COMPONENTS]
    return names.index(name) if name in names else len(names)


def latest_figures(runs: Sequence[StoredRun]) -> list[tuple[StoredRun, Figure]]:
    """The newest figure of each key over all runs, in the components' order: a run at the
    issues' sizes is preferred to any quick (scaled-down) one, whose figures do not compare
    with the targets, then a later run replaces an earlier one."""
    latest: dict[str, tuple[StoredRun, Figure]] = {}
    for run in sorted(runs, key=lambda r: (not r.info.quick, r.info.started, r.folder)):
        for result in run.results:
            for figure in result.figures:
                latest[figure.key] = (run, figure)
    return sorted(
        latest.values(), key=lambda item: (_component_order(item[1].key.split(".")[0]), item[1].key)
    )


def _run_link(run: StoredRun, page_dir: str, sizes: bool = True) -> str:
    link = f"[{run.folder}]({page_dir}/{run.folder}/report.md)"
    return f"{link} ({'quick' if run.info.quick else 'full'})" if sizes else link


def render_performance_page(
    runs: Sequence[StoredRun], without: Sequence[str], results_link: str = "../bench/results"
) -> str:
    """docs/performance.md: the newest figure of each benchmark as a ratio to its baseline
    from the same run, the figures no baseline was measured for, and the runs (date, machine,
    load). Pure: the same stored runs give the same page."""
    lines = [
        "# Performance",
        "",
        "<!-- Generated by `.venv/bin/python -m bench.report --docs` from "
        "bench/results/*/figures.json: do not edit by hand (tests/unit/bench checks it). -->",
        "",
    ]
    if not runs:
        lines += ["No benchmark run is stored yet: `.venv/bin/python -m bench.report` writes one."]
        return "\n".join(lines) + "\n"
    newest = runs[-1].info.started
    lines += [
        f"Generated from the {len(runs)} benchmark runs stored under `bench/results/` "
        f"(`bench/README.md`), the newest of {newest:%Y-%m-%d}. Each figure is the newest "
        "measured of its benchmark, given as a **ratio to its baseline measured in the same "
        "run on the same machine**: above 1× is better than the baseline (for durations and "
        "latencies, baseline / ours). Measured and baseline values are shown beside the ratio "
        "only to read it: they depend on the machine and its load, which *Runs* names for "
        "each run. A figure measured at the issues' sizes (full) is preferred to a quick run's "
        "(every benchmark scaled down, not comparable with the targets). Targets are the "
        "component issues'.",
        "",
        "## Ratios to the same run's baseline",
        "",
        "| benchmark | figure | ratio | measured vs baseline | target | status | run |",
        "|---|---|---|---|---|---|---|",
    ]
    latest = latest_figures(runs)
    for run, figure in latest:
        if figure.baseline is None:
            continue
        target, status = verdict(figure)
        compared = (
            f"{_measured(figure)} vs {format_number(figure.baseline, figure.unit)} "
            f"({figure.baseline_label})"
        )
        lines.append(
            "| "
            + " | ".join(
                _cell(c)
                for c in (
                    figure.key,
                    figure.label,
                    format_ratio(figure.ratio),
                    compared,
                    target,
                    status,
                    _run_link(run, results_link),
                )
            )
            + " |"
        )
    unpaired = [(run, figure) for run, figure in latest if figure.baseline is None]
    if unpaired:
        lines += [
            "",
            "## Measured without a baseline",
            "",
            "No baseline was measured for these in their run, so they are only absolute values "
            "of that machine under that load (see *Runs*), compared with their target.",
            "",
            "| benchmark | figure | measured | target | status | run |",
            "|---|---|---|---|---|---|",
        ]
        for run, figure in unpaired:
            target, status = verdict(figure)
            lines.append(
                "| "
                + " | ".join(
                    _cell(c)
                    for c in (
                        figure.key,
                        figure.label,
                        _measured(figure),
                        target,
                        status,
                        _run_link(run, results_link),
                    )
                )
                + " |"
            )
    lines += _memory_section(latest, results_link)
    failed = [
        (run, result)
        for run in runs
        for result in run.results
        if result.status != "ok" and run is runs[-1]
    ]
    if failed:
        lines += ["", "Failed in the newest run:", ""]
        lines += [f"- {result.component}: {_cell(result.error or '')}" for _, result in failed]
    lines += [
        "",
        "## Runs",
        "",
        "| run | when (UTC) | sizes | commit | machine | load (1/5/15 min) at start → end | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in reversed(runs):
        info = run.info
        load = (
            " / ".join(f"{x:.2f}" for x in info.load_start)
            + " → "
            + " / ".join(f"{x:.2f}" for x in info.load_end)
        )
        lines.append(
            "| "
            + " | ".join(
                _cell(c)
                for c in (
                    _run_link(run, results_link, sizes=False),
                    f"{info.started:%Y-%m-%d %H:%M}",
                    "quick (scaled down)" if info.quick else "full (the issues' sizes)",
                    f"`{info.commit}`",
                    info.machine,
                    load,
                    info.note or "",
                )
            )
            + " |"
        )
    if without:
        lines += [
            "",
            "Folders under `bench/results/` that hold a benchmark's printed output but no "
            "`figures.json` (recorded before runs were stored as data) are not summarised "
            "here: " + ", ".join(f"`{name}`" for name in without) + ".",
        ]
    return "\n".join(lines).rstrip() + "\n"


MEMORY_SUFFIX = "peak RSS MB"  # a benchmark's memory figures: extras named "<process> peak RSS MB"


def _memory_section(latest: Sequence[tuple[StoredRun, Figure]], results_link: str) -> list[str]:
    """The peak memory each benchmark recorded with its newest figure (extras ending in
    ``MEMORY_SUFFIX``, e.g. the stream writer's JVM and Python processes); none: nothing."""
    rows = []
    for run, figure in latest:
        memory = {k: v for k, v in figure.extra.items() if k.endswith(MEMORY_SUFFIX)}
        if memory:
            measured = ", ".join(
                f"{name.removesuffix(MEMORY_SUFFIX).strip()} {value:,.0f} MB"
                for name, value in memory.items()
            )
            rows.append(
                "| "
                + " | ".join(_cell(c) for c in (figure.key, measured, _run_link(run, results_link)))
                + " |"
            )
    if not rows:
        return []
    return [
        "",
        "## Memory",
        "",
        "Peak resident set of each process over the benchmark's whole run (every measured "
        "run of it, the baseline's too when it shares the process), recorded with the figure "
        "named.",
        "",
        "| benchmark | peak resident set | run |",
        "|---|---|---|",
        *rows,
    ]


def _measured(figure: Figure) -> str:
    if "p50" in figure.extra and "p99" in figure.extra:
        return (
            f"p50 {format_number(figure.extra['p50'], figure.unit)}, "
            f"p99 {format_number(figure.extra['p99'], figure.unit)}"
        )
    return format_number(figure.value, figure.unit)


def write_performance_page(results_dir: Path = RESULTS, page: Path = PERFORMANCE_PAGE) -> Path:
    runs, without = load_runs(results_dir)
    page.write_text(render_performance_page(runs, without))
    return page


# ---------------------------------------------------------------------------------------------
# Plots (matplotlib, Agg: no display here).


def plot_throughput(results: Sequence[ComponentResult], path: Path) -> bool:
    figures = [
        f
        for r in results
        for f in r.figures
        if f.unit.endswith("/s") and f.baseline is not None and f.higher_is_better
    ]
    if not figures:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{f.key}\n({f.unit})" for f in figures]
    positions = list(range(len(figures)))
    height = 0.38
    fig, ax = plt.subplots(figsize=(10, 0.8 * len(figures) + 1.5))
    ax.barh([p + height / 2 for p in positions], [f.baseline or 0 for f in figures], height,
            label="baseline (same run)", color="#b0b0b0")  # fmt: skip
    bars = ax.barh([p - height / 2 for p in positions], [f.value for f in figures], height,
                   label="cdc-mirror", color="#2f6db5")  # fmt: skip
    for bar, figure in zip(bars, figures, strict=True):
        ax.annotate(f" {format_ratio(figure.ratio)}", (bar.get_width(), bar.get_y() + height / 2),
                    va="center", fontsize=8)  # fmt: skip
    ax.set_yticks(positions, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("throughput (log scale; ratio to baseline at the bar's end)")
    ax.set_title("Throughput per component vs its baseline")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_latency(results: Sequence[ComponentResult], path: Path) -> bool:
    figures = [
        f
        for r in results
        for f in r.figures
        if f.unit == "ms" and "p50" in f.extra and "p99" in f.extra
    ]
    if not figures:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    positions = list(range(len(figures)))
    width = 0.38
    fig, ax = plt.subplots(figsize=(8, 4.5))
    p50 = ax.bar([p - width / 2 for p in positions], [f.extra["p50"] for f in figures], width,
                 label="p50", color="#7fa7d6")  # fmt: skip
    p99 = ax.bar([p + width / 2 for p in positions], [f.extra["p99"] for f in figures], width,
                 label="p99", color="#2f6db5")  # fmt: skip
    for position, figure in zip(positions, figures, strict=True):
        for target in TARGETS.get(figure.key, ()):
            if target.field == "p99":
                ax.hlines(target.bound, position - 0.45, position + 0.45, colors="#c0392b",
                          linestyles="dashed", label="p99 target")  # fmt: skip
    # Bars are labelled with their value, and the axis reaches down past the lowest target.
    for bars in (p50, p99):
        ax.bar_label(bars, fmt="%.0f", fontsize=8)
    lowest = min(
        [f.extra["p50"] for f in figures]
        + [t.bound for f in figures for t in TARGETS.get(f.key, ()) if t.field == "p99"]
    )
    ax.set_ylim(bottom=max(lowest / 2, 0.1))
    handles, names = ax.get_legend_handles_labels()
    unique = dict(zip(names, handles, strict=True))
    ax.legend(unique.values(), unique.keys(), fontsize=8)
    ax.set_xticks(positions, [f.key for f in figures], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("ms (log scale)")
    ax.set_title("Latency percentiles")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# ---------------------------------------------------------------------------------------------
# Running the benchmarks.


def module_path(module: str) -> Path:
    return ROOT / (module.replace(".", "/") + ".py")


def run_component(
    component: Component,
    quick: bool,
    timeout_s: float,
    work: Path,
    sizes: Sequence[str] | None = None,
    extra: Sequence[str] = (),
) -> ComponentResult:
    """``sizes``: the benchmark's arguments instead of its quick or full ones (``--args``);
    ``extra``: arguments added to them (``--extra``)."""
    json_path = work / f"{component.name}.json"
    args = list(
        sizes if sizes is not None else component.quick_args if quick else component.full_args
    )
    args += extra
    # Someone else's benchmark may not take --json (yet): then it runs, and its output is kept.
    takes_json = "--json" in module_path(component.module).read_text()
    command = [sys.executable, "-m", component.module, *args]
    if takes_json:
        command += ["--json", str(json_path)]
    shown = " ".join([".venv/bin/python", "-m", component.module, *args])
    logger.info("running %s", shown)
    started = time.monotonic()
    # Its own session, so a timeout takes the Spark JVMs and writer processes down with it.
    with (
        (work / f"{component.name}.out").open("w+") as out,
        (work / f"{component.name}.err").open("w+") as err,
    ):
        process = subprocess.Popen(
            command, cwd=ROOT, stdout=out, stderr=err, start_new_session=True
        )
        returncode: int | None
        try:
            returncode = process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            returncode = None
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    seconds = time.monotonic() - started
    result = ComponentResult(component.name, shown, "ok", seconds, output_tail=tail(stdout))
    if returncode != 0:
        result.status = "failed"
        result.error = (
            f"timed out after {timeout_s:,.0f} s"
            if returncode is None
            else error_line(stderr, returncode)
        )
        return result
    if not takes_json:
        result.error = "this benchmark does not write --json figures yet; its output is below"
        return result
    try:
        result.figures = read_figures(json_path)
    except (OSError, ValueError, KeyError) as exc:
        result.status = "failed"
        result.error = f"its figures could not be read: {exc}"
    return result


def git_commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return f"{head} (plus uncommitted changes in the working tree)" if dirty else head


def component_sizes(given: Sequence[str], parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """``--args``/``--extra NAME=ARGS`` as each benchmark's arguments (shlex: quoting as in a
    shell)."""
    names = {c.name for c in COMPONENTS}
    sizes: dict[str, list[str]] = {}
    for item in given:
        name, _, text = item.partition("=")
        if name not in names:
            parser.error(
                f"--args {item!r}: no benchmark {name!r} (one of {', '.join(sorted(names))})."
            )
        sizes[name] = shlex.split(text)
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="every benchmark scaled down (~15 min)"
    )
    parser.add_argument(
        "--out", type=Path, help="report directory (default bench/results/<UTC date>)"
    )
    parser.add_argument(
        "--only", nargs="+", choices=[c.name for c in COMPONENTS], help="run only these"
    )
    parser.add_argument(
        "--timeout", type=float, help="seconds per benchmark (default 1200 quick, 14400 full)"
    )
    parser.add_argument(
        "--note", help="a line for the report's header, e.g. what else loaded the machine"
    )
    parser.add_argument(
        "--args",
        action="append",
        default=[],
        metavar="NAME=ARGS",
        help="run benchmark NAME with ARGS (split as a shell does) instead of its quick or full "
        "sizes, e.g. validation='--rows 1000000'; the run is then recorded as scaled down",
    )
    parser.add_argument(
        "--extra",
        action="append",
        default=[],
        metavar="NAME=ARGS",
        help="add ARGS to benchmark NAME's quick or full sizes, e.g. stream_writer="
        "'--latency-seconds 0'; the run keeps the label of those sizes",
    )
    parser.add_argument(
        "--docs",
        action="store_true",
        help="only render docs/performance.md from bench/results/*/figures.json (runs nothing)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.docs:
        logger.info("written %s", write_performance_page())
        return 0

    sizes = component_sizes(args.args, parser)
    extras = component_sizes(args.extra, parser)
    started = dt.datetime.now(dt.UTC)
    out: Path = args.out or ROOT / "bench" / "results" / f"{started:%Y-%m-%d}"
    out.mkdir(parents=True, exist_ok=True)
    timeout = args.timeout or (1200.0 if args.quick else 14400.0)
    load_start = os.getloadavg()
    results: list[ComponentResult] = []
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        for component in COMPONENTS:
            if args.only and component.name not in args.only:
                continue
            if component.optional and not module_path(component.module).exists():
                logger.info("%s: %s does not exist, left out", component.name, component.module)
                continue
            result = run_component(
                component,
                args.quick,
                timeout,
                Path(tmp),
                sizes.get(component.name),
                extras.get(component.name, ()),
            )
            logger.info("%s: %s in %.0f s%s", component.name, result.status, result.seconds,
                        f" ({result.error})" if result.error else "")  # fmt: skip
            results.append(result)
    plots = []
    if plot_throughput(results, out / "throughput.png"):
        plots.append("throughput.png")
    if plot_latency(results, out / "latency.png"):
        plots.append("latency.png")
    info = RunInfo(
        started=started,
        finished=dt.datetime.now(dt.UTC),
        commit=git_commit(),
        machine=describe_machine(),
        # Sizes of one's own are neither the issues' nor comparable with them.
        quick=args.quick or bool(sizes),
        load_start=load_start,
        load_end=os.getloadavg(),
        note=args.note,
    )
    (out / "report.md").write_text(render_markdown(info, results, plots))
    write_run(out, info, results)
    logger.info("report written to %s", out / "report.md")
    if out.resolve().parent == RESULTS.resolve():
        logger.info("%s rendered from the stored runs", write_performance_page())
    return 0 if all(r.status == "ok" for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
