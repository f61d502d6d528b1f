"""``cdc-mirror``: one command, a subcommand per component.

Settings are loaded here (``--config`` or $CDC_MIRROR_CONFIG) and passed down. Errors that
cdc-mirror raises on purpose end the command with their one sentence and the exit code of
their kind (``simple_binlog.errors.EXIT_CODES``, listed in ``--help``). Text that comes from
users, configs or services is escaped before rich prints it, so ``[orders]`` stays as it is.
"""

from __future__ import annotations

import datetime as dt
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from cdc_platform.config import Settings, load_settings
from cdc_platform.spark import spark_missing_error
from simple_binlog.errors import EXIT_CODES, CdcMirrorError, ConfigError, ExitCode, exit_code_for

if TYPE_CHECKING:
    from cdc_platform.control import ComponentKind


def _exit_code_help() -> str:
    rows = "\n".join(f"  {int(code):>3}  {meaning}" for code, meaning in EXIT_CODES.items())
    return f"Exit codes:\n\n\b\n{rows}"


app = typer.Typer(
    help="Change-data-capture mirroring: MySQL binlog → Kafka → Hive, warehouse, Redis.",
    epilog=_exit_code_help(),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
stack_app = typer.Typer(
    help="The local stack: MariaDB, Kafka, ZooKeeper, Redis, PostgreSQL, Spark.",
    no_args_is_help=True,
)
app.add_typer(stack_app, name="stack")


def _console(stderr: bool = False) -> Console:
    """A console that wraps lines to the terminal's width on a terminal, and never wraps them
    when the output goes to a file or a pipe (rich's default there is 80 columns)."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, soft_wrap=stderr or not stream.isatty())


console = _console()
err_console = _console(stderr=True)  # one error, one line

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="YAML config file (default: $CDC_MIRROR_CONFIG, else built-in local defaults).",
    ),
]


class _State:
    config: Path | None = None


_state = _State()


def _package_version() -> str:
    try:
        return version("cdc-mirror")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _show_version(value: bool) -> None:
    if value:
        console.print(f"cdc-mirror {_package_version()}", markup=False, highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    config: ConfigOption = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at DEBUG level.")] = False,
    _version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_show_version, is_eager=True, help="Show the version and exit."
        ),
    ] = False,
) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    _state.config = config


def settings() -> Settings:
    return load_settings(_state.config)


@contextmanager
def registered(loaded: Settings, kind: ComponentKind, instance: str = "") -> Iterator[None]:
    """The command's process in the web admin's component registry while it runs
    (``cdc_platform.control``; nothing with config_store.source 'file')."""
    from cdc_platform.control import register  # noqa: PLC0415

    heartbeat = register(loaded, kind, instance)
    try:
        yield
    finally:
        heartbeat.close()


ServicesArg = Annotated[list[str] | None, typer.Argument(help="Services (default: all).")]


@stack_app.command("up")
def stack_up(services: ServicesArg = None) -> None:
    """Install what is missing and start the stack; waits until every service answers."""
    from stack.manager import LocalStack  # noqa: PLC0415

    local = LocalStack(settings())
    local.up(services, report=_report_service)
    _print_status(local)


@stack_app.command("down")
def stack_down(services: ServicesArg = None) -> None:
    """Stop the services the stack started (data is kept)."""
    from stack.manager import LocalStack  # noqa: PLC0415

    LocalStack(settings()).down(services, report=_report_service)


def _report_service(name: str, what: str) -> None:
    console.print(f"[bold]{escape(f'{name:<11}')}[/] {escape(what)}")


@stack_app.command("status")
def stack_status() -> None:
    """Each service with its port and health. Exit code 3 if any is unhealthy."""
    from stack.manager import LocalStack  # noqa: PLC0415

    if not _print_status(LocalStack(settings())):
        raise typer.Exit(ExitCode.UNAVAILABLE)


def _print_status(local: object) -> bool:
    from stack.manager import LocalStack  # noqa: PLC0415

    assert isinstance(local, LocalStack)
    table = Table(title=f"cdc-mirror local stack ({escape(str(local.paths.home))})")
    for column in ("service", "port", "health", "started by stack"):
        table.add_column(column)
    all_healthy = True
    for status in local.status():
        if not status.configured and not status.running:
            table.add_row(status.name, str(status.port or "-"), "[dim]not configured[/]", "no")
            continue
        all_healthy &= status.healthy
        table.add_row(
            status.name,
            str(status.port or "-"),
            "[green]healthy[/]" if status.healthy else "[red]down[/]",
            "yes" if status.started_by_stack else "no",
        )
    console.print(table)
    return all_healthy


@app.command()
def demo(
    rows: Annotated[int, typer.Option(help="History rows per shard table.")] = 200,
    seconds: Annotated[float, typer.Option(help="How long the live workload runs.")] = 60.0,
    rate: Annotated[
        float, typer.Option(help="Live MySQL transactions per second (1..20 rows each).")
    ] = 50.0,
    failover: Annotated[
        bool, typer.Option(help="kill -9 the active collector half-way through the workload.")
    ] = True,
    keep_running: Annotated[
        bool | None,
        typer.Option(
            help="Keep the pipeline and web admin running at the end until Ctrl-C "
            "(default: when run from a terminal)."
        ),
    ] = None,
) -> None:
    """Set up the local stack and run the whole pipeline on a sharded sample schema."""
    from cdc_mirror.demo import DemoOptions, run_demo  # noqa: PLC0415

    options = DemoOptions(
        history_rows=rows,
        live_seconds=seconds,
        live_rate=rate,
        failover=failover,
        keep_running=sys.stdin.isatty() if keep_running is None else keep_running,
    )
    run_demo(settings(), console, options, _state.config)


@app.command("sql-server")
def sql_server(
    host: Annotated[
        str,
        typer.Option(
            help="Address to listen on; any but loopback needs sql_server.user and "
            "sql_server.password (or sql_server.ldap_url) in the config."
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HiveServer2 (Thrift) port.")] = 10000,
) -> None:
    """Serve the Hive tables to HiveServer2 clients (beeline, PyHive, JDBC) until stopped.

    Its sessions are read-only and cannot reach the host: no reads by path, reflection, ADD
    JAR/FILE, LOAD DATA or TRANSFORM.
    """
    from cdc_mirror.sql_server import run_sql_server  # noqa: PLC0415

    run_sql_server(settings(), host, port)


@app.command("sql")
def sql(
    queries: Annotated[
        list[str], typer.Argument(help="Spark SQL / HiveQL statements, run in order.")
    ],
    limit: Annotated[int, typer.Option(help="Rows to show at most per statement.")] = 50,
) -> None:
    """Query the Hive tables (raw change layer, snapshots) through Spark SQL."""
    from pyspark.errors import PySparkException  # noqa: PLC0415

    from cdc_platform.iceberg import lake_session  # noqa: PLC0415

    spark = lake_session(settings(), "cdc-mirror-sql")
    try:
        for query in queries:
            try:
                frame = spark.sql(query)
                rows = frame.limit(limit).collect()
            except PySparkException as exc:
                text = str(exc).strip()
                first = text.splitlines()[0] if text else type(exc).__name__
                raise CdcMirrorError(f"the query failed: {first}") from None
            if not frame.columns:
                continue  # a statement (DROP, CREATE …) with no result
            table = Table(*(escape(column) for column in frame.columns))
            for row in rows:
                table.add_row(*(Text("NULL" if value is None else str(value)) for value in row))
            console.print(table)
    finally:
        spark.stop()


collector_app = typer.Typer(
    help="HA binlog collector: row binlog → SimpleBinlog → Kafka.", no_args_is_help=True
)
app.add_typer(collector_app, name="collector")


@collector_app.command("run")
def collector_run(
    instance: Annotated[str, typer.Option(help="MySQL instance name from the config.")] = "local",
    metrics_port: Annotated[
        int | None, typer.Option(help="Port of /metrics and /health (0: none).")
    ] = None,
    ha: Annotated[bool, typer.Option(help="Elect one active collector through ZooKeeper.")] = True,
) -> None:
    """Collect one instance's row binlog into its Kafka topic, exactly once."""
    from collector.app import run_collector  # noqa: PLC0415

    loaded = settings()
    port = loaded.collector.metrics_port if metrics_port is None else metrics_port
    run_collector(loaded, instance, port, ha, _state.config)


@app.command("collect")
def collect(
    from_files: Annotated[
        list[str],
        typer.Option(
            "--from-files",
            help="Binlog files as 'mysqlbinlog --raw' archives them (or directories of them), "
            "read in the order given. Local paths.",
        ),
    ],
    instance: Annotated[str, typer.Option(help="MySQL instance name from the config.")] = "local",
    offline: Annotated[
        bool,
        typer.Option(help="Ask no server for table schemas: names and types from the files."),
    ] = False,
) -> None:
    """Collect archived binlog files into the instance's Kafka topic, as the live collector
    would have (same messages, offsets and positions), after its stored position."""
    from collector.app import collect_files  # noqa: PLC0415

    position = collect_files(settings(), instance, from_files, offline, _state.config)
    if position is not None:
        typer.echo(f"committed up to {position.file}:{position.pos} (GTID {position.gtid or '-'})")


@app.command("replay")
def replay(
    instance: Annotated[str, typer.Option(help="MySQL instance name from the config.")] = "local",
    db_prefix: Annotated[
        str | None, typer.Option(help="Database name prefix (all shards), e.g. ordercenter.")
    ] = None,
    table_prefix: Annotated[
        str | None, typer.Option(help="Table name prefix (all shards), e.g. orderinfo.")
    ] = None,
    where: Annotated[
        str | None, typer.Option(help="Condition over the table's columns (validated, bound).")
    ] = None,
    execute_time: Annotated[
        str | None,
        typer.Option(help="Day of the rows' executeTime, YYYY-MM-DD (default: yesterday, UTC)."),
    ] = None,
    batch_size: Annotated[
        int | None, typer.Option(help="Rows per chunk (default: replay.batch_size).")
    ] = None,
    rate_limit: Annotated[
        float | None, typer.Option(help="Rows per second, 0 for none (default: replay.rate_limit).")
    ] = None,
    workers: Annotated[
        int | None, typer.Option(help="Reader processes (default: replay.workers).")
    ] = None,
    resume: Annotated[str | None, typer.Option(help="Continue the run with this id.")] = None,
    replica: Annotated[str | None, typer.Option(help="Read from this replica, HOST:PORT.")] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """History replay: existing rows of every shard → SimpleBinlog MOCK events, exactly once."""
    from mock_replay.app import run_replay_command  # noqa: PLC0415
    from mock_replay.runner import ReplayRequest  # noqa: PLC0415

    if resume is None and (db_prefix is None or table_prefix is None):
        raise CdcMirrorError(
            "a new replay needs --db-prefix and --table-prefix (or --resume RUN_ID)."
        )
    request = ReplayRequest(
        instance=instance,
        db_prefix=db_prefix or "",
        table_prefix=table_prefix or "",
        condition=where,
        execute_day=execute_time,
        batch_size=batch_size,
        rate_limit=rate_limit,
        replica=replica,
        workers=workers,
    )
    loaded = settings()
    with registered(loaded, "replay", instance):
        outcome = run_replay_command(loaded, request, resume, console, show_progress=progress)
    if outcome.state != "done":  # cancelled; resumable
        raise typer.Exit(ExitCode.INTERRUPTED)


stream_writer_app = typer.Typer(
    help="Kafka → raw change layer in the lake (PySpark Structured Streaming).",
    no_args_is_help=True,
)
app.add_typer(stream_writer_app, name="stream-writer")


@stream_writer_app.command("run")
def stream_writer_run(
    instance: Annotated[
        list[str] | None,
        typer.Option(help="MySQL instance whose topic is read (repeatable; default: all)."),
    ] = None,
    topic: Annotated[
        list[str] | None, typer.Option(help="Read these topics instead of the instances'.")
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="Writer name (checkpoint, readiness records).")
    ] = None,
    metrics_port: Annotated[int | None, typer.Option(help="Port of /metrics (0: none).")] = None,
    available_now: Annotated[
        bool, typer.Option(help="Write what Kafka holds now, then stop.")
    ] = False,
) -> None:
    """Write the instances' topics to the lake's raw table <database>._cdc_changes (a view per
    logical table), exactly once: one Iceberg commit a micro-batch."""
    from stream_writer.job import run_stream_writer  # noqa: PLC0415

    loaded = settings()
    with registered(loaded, "stream_writer", name or "+".join(sorted(instance or []))):
        run_stream_writer(loaded, instance or [], topic or [], name, metrics_port, available_now)


@app.command("merge")
def merge(
    dt: Annotated[str | None, typer.Option("--dt", help="The day to merge, YYYY-MM-DD.")] = None,
    hour: Annotated[
        str | None,
        typer.Option(
            "--hour",
            help="Instead of --dt: the hour to merge, YYYY-MM-DDTHH (tables with hourly "
            "snapshots; HH counts the hours since midnight in stream_writer.time_zone).",
        ),
    ] = None,
    ready_hours: Annotated[
        bool,
        typer.Option(
            "--ready-hours",
            help="Instead of --dt/--hour: every closed hour the stream writer has made ready "
            "since each table's newest merged one, in order (tables with hourly snapshots; "
            "run it from cron every few minutes).",
        ),
    ] = False,
    table: Annotated[
        list[str] | None, typer.Option(help="Logical table to merge (repeatable).")
    ] = None,
    all_tables: Annotated[
        bool, typer.Option("--all", help="Every configured table mirrored to Hive.")
    ] = False,
    ignore_archive_rule: Annotated[
        bool, typer.Option(help="Apply every DELETE this run (archive rule off).")
    ] = False,
    force_archive_rule: Annotated[
        bool, typer.Option(help="Ignore the DELETEs of old rows this run, whatever their count.")
    ] = False,
    wait_ready_s: Annotated[
        float | None,
        typer.Option(help="Wait this long for the day's readiness (default: merge.wait_ready_s)."),
    ] = None,
    skip_readiness: Annotated[
        bool,
        typer.Option(
            help="Merge even if the stream writer has not declared the day ready "
            "(recorded in the merge record; merge again once it is ready)."
        ),
    ] = False,
    remerge: Annotated[
        bool,
        typer.Option(
            "--remerge",
            help="With --hour: merge the hour again even if it was merged already (its tag "
            "exists); without it such an hour is reported as already merged and skipped.",
        ),
    ] = False,
    result_file: Annotated[
        Path | None,
        typer.Option(
            help="Also write every table's outcome to this file as JSON (a scheduler "
            "reads it: rows, files, check verdict, error)."
        ),
    ] = None,
) -> None:
    """Daily (or hourly) snapshot from the change layer, a line per table as each ends.

    Exit code 5 if any table failed, else 4 if a table's check against MySQL found a mismatch,
    else 6 if a table's day or hour is not ready yet (run again later).
    """
    from merge.app import run_merge_command, write_outcomes  # noqa: PLC0415

    loaded = settings()
    with registered(loaded, "merge", hour or dt or "ready hours"):
        outcomes = run_merge_command(
            loaded,
            dt,
            table or [],
            all_tables,
            ignore_archive_rule,
            force_archive_rule,
            wait_ready_s,
            console,
            err_console,
            skip_readiness,
            hour,
            ready_hours,
            remerge,
        )
    if result_file is not None:
        write_outcomes(result_file, outcomes)
    # The worst outcome decides: a failure, then a mismatch, then a table not ready yet.
    if any(outcome.error is not None and not outcome.not_ready for outcome in outcomes):
        raise typer.Exit(ExitCode.FAILED)
    if any(o.result and o.result.check and not o.result.check.ok for o in outcomes):
        raise typer.Exit(ExitCode.CHECK_FAILED)
    if any(outcome.not_ready for outcome in outcomes):
        raise typer.Exit(ExitCode.NOT_READY)


@app.command("scheduler")
def scheduler() -> None:
    """Merge each table's days as they become ready, catch up missed days in order, retry
    failures with back-off, validate and maintain; ZooKeeper elects one active scheduler."""
    from scheduler.app import run_scheduler  # noqa: PLC0415

    run_scheduler(settings(), _state.config)


@app.command("maintain")
def maintain(
    table: Annotated[
        list[str] | None,
        typer.Option(help="Logical table to maintain (repeatable; default: every one in Hive)."),
    ] = None,
) -> None:
    """Iceberg table maintenance of the lake: expire raw days and day tags past their
    retention, compact small files, expire snapshots, remove orphan files. A line per step.

    Safe while the stream writer and merge run. Exit code 5 if any step failed.
    """
    from merge.maintenance import Step, run_maintain_command  # noqa: PLC0415

    def progress(step: Step) -> None:
        if step.error is not None:
            err_console.print(
                f"error: {step.table}: {step.action} failed: {step.error}", markup=False
            )
        else:
            console.print(
                f"{step.table}: {step.action}: {step.detail} ({step.seconds:.1f} s)",
                markup=False,
                highlight=False,
            )

    report = run_maintain_command(settings(), table or [], progress)
    if report.failed:
        raise typer.Exit(ExitCode.FAILED)


mirror_app = typer.Typer(
    help="Apply the stream to Redis and the real-time warehouse.", no_args_is_help=True
)
app.add_typer(mirror_app, name="mirror")


@mirror_app.command("run")
def mirror_run(
    target: Annotated[
        str, typer.Option(help="Where to apply the stream: redis, warehouse or kudu.")
    ],
    instance: Annotated[
        str | None, typer.Option(help="Only this MySQL instance's topic (default: all).")
    ] = None,
    metrics_port: Annotated[
        int | None, typer.Option(help="Port of /metrics (0: none; default: mirror.metrics_port).")
    ] = None,
) -> None:
    """Consume the instance topics in a consumer group and apply the configured tables."""
    from mirror.app import run_mirror  # noqa: PLC0415

    loaded = settings()
    port = loaded.mirror.metrics_port if metrics_port is None else metrics_port
    with registered(loaded, "mirror", target):
        run_mirror(loaded, target, instance, port)  # type: ignore[arg-type]


@mirror_app.command("backend")
def mirror_backend(
    host: Annotated[str, typer.Option(help="Listen address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 29111,
) -> None:
    """Serve the mirror backend: live MySQL schemas, daily counts, lineage (HTTP)."""
    from mirror.app import serve_backend  # noqa: PLC0415

    serve_backend(settings(), host, port)


@mirror_app.command("refresh-counts")
def mirror_refresh_counts() -> None:
    """The nightly job: recompute and cache every table's daily counts (last 7 days)."""
    from mirror.app import refresh_all_counts  # noqa: PLC0415

    loaded = settings()
    counted = refresh_all_counts(loaded)
    for name, rows in counted.items():
        console.print(f"{escape(name)}: {rows} rows over the last 7 days")
    expected = [t.name for t in loaded.tables if t.check_column is not None]
    if len(counted) < len(expected):
        raise typer.Exit(ExitCode.FAILED)


webui_app = typer.Typer(
    help="The web admin (FastAPI): without a command it serves the admin; create-user adds a user."
)
app.add_typer(webui_app, name="webui")


@webui_app.callback(invoke_without_command=True)
def webui(
    ctx: typer.Context,
    host: Annotated[str | None, typer.Option(help="Listen address (default: webui.host).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: webui.port).")] = None,
) -> None:
    """Serve the web admin (migrates its database first)."""
    if ctx.invoked_subcommand is not None:
        return
    from webui.app import serve  # noqa: PLC0415

    serve(settings(), host, port)


@webui_app.command("create-user")
def webui_create_user(
    username: Annotated[str, typer.Argument(help="The new user's login name.")],
    role: Annotated[str, typer.Option(help="admin (edits) or viewer (reads).")] = "admin",
    password: Annotated[
        str,
        typer.Option(
            prompt=True,
            hide_input=True,
            confirmation_prompt=True,
            envvar="CDC_MIRROR_WEBUI_NEW_PASSWORD",
            help="Asked for when not given (or set $CDC_MIRROR_WEBUI_NEW_PASSWORD).",
        ),
    ] = "",
) -> None:
    """Create a web admin user, e.g. the first admin of a fresh install."""
    from webui.cli import create_user  # noqa: PLC0415

    create_user(settings(), username, role, password)
    console.print(f"user {username!r} ({role}) created", markup=False)


@app.command("replay-worker")
def replay_worker(
    max_runs: Annotated[int, typer.Option(min=1, help="Replays run at the same time.")] = 2,
    poll_s: Annotated[
        float, typer.Option(min=0.1, help="Seconds between polls of the admin database.")
    ] = 1.0,
) -> None:
    """Run the replays the web admin queues (its database's replay jobs), with progress."""
    from webui.cli import run_replay_worker  # noqa: PLC0415

    loaded = settings()
    with registered(loaded, "replay"):
        run_replay_worker(loaded, max_runs, poll_s)


@app.command("validate")
def validate_command(
    table: Annotated[str, typer.Argument(help="The table mirror (its logical table name).")],
    target: Annotated[
        list[str] | None,
        typer.Option(
            "--target",
            help="warehouse, redis, kudu, lake (its current state) or snapshot (of --day) "
            "(repeatable; default: the mirror's).",
        ),
    ] = None,
    day: Annotated[
        str | None,
        typer.Option(
            "--day",
            help="The merged day (YYYY-MM-DD) whose snapshot is compared with MySQL as of "
            "that day's cut (target snapshot).",
        ),
    ] = None,
    chunk_rows: Annotated[
        int, typer.Option(min=2, help="Source rows of the first chunk.")
    ] = 10_000,
    chunk_time: Annotated[
        float,
        typer.Option(
            min=0.0, help="Seconds MySQL may spend on a chunk; sizes the next (0: fixed)."
        ),
    ] = 0.5,
    repair: Annotated[
        bool,
        typer.Option(help="Re-publish the differing keys as MOCK events, then re-check them."),
    ] = False,
    repair_max_keys: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="With --repair: repair only when at most this many keys differ; above, "
            "report them and publish nothing (the scheduler's automatic repair).",
        ),
    ] = None,
    resume: Annotated[
        bool, typer.Option(help="Continue an unfinished scan from its stored progress.")
    ] = True,
    result_file: Annotated[
        Path | None, typer.Option(help="Also write the outcome as JSON here (for a scheduler).")
    ] = None,
    record: Annotated[
        bool,
        typer.Option(
            help="Record the run in the web admin's run history (config_store.source webui)."
        ),
    ] = True,
) -> None:
    """Compare TABLE in MySQL with each target chunk by chunk (hashes computed in each
    store), name the keys missing, extra or different, and show their rows side by side.
    A change in flight is re-checked once the mirror applied it, never reported. With
    --repair the differing keys go through the stream again (never written to a target
    directly) and are re-checked. While it scans, a line on stderr every few seconds says
    how far each target got. Exit code 4 when a target differs (after --repair: still
    differs), 3 when a store cannot be reached."""
    from cdc_mirror.validate import (  # noqa: PLC0415
        exit_code,
        outcome_lines,
        run_validation,
        write_result,
    )
    from validation.run import TARGETS, Options  # noqa: PLC0415

    if repair_max_keys is not None and not repair:
        raise ConfigError("--repair-max-keys limits a repair: give it with --repair.")
    unknown = [name for name in target or [] if name not in TARGETS]
    if unknown:
        raise ConfigError(f"--target {unknown[0]!r}: validation knows {', '.join(TARGETS)}.")
    try:
        snapshot_day = None if day is None else dt.date.fromisoformat(day)
    except ValueError:
        raise ConfigError(f"--day {day!r} is not a day (YYYY-MM-DD).") from None
    loaded = settings()
    options = Options.from_settings(
        loaded, chunk_rows=chunk_rows, chunk_time_s=chunk_time or None, snapshot_day=snapshot_day
    )
    started = time.time()
    result = run_validation(
        loaded,
        table,
        target or [],  # type: ignore[arg-type]
        options,
        repair,
        resume,
        on_progress=lambda line: err_console.print(line, markup=False, highlight=False),
        repair_max_keys=repair_max_keys,
    )
    for line in outcome_lines(result):
        console.print(escape(line), highlight=False)
    if result_file is not None:
        write_result(result, result_file)
    if record:
        from cdc_mirror.validation_runs import record_validation  # noqa: PLC0415

        record_validation(loaded, result, started, time.time())
    code = exit_code(result)
    if code != ExitCode.OK:
        raise typer.Exit(code)


config_app = typer.Typer(help="Check a configuration without running anything.")
app.add_typer(config_app, name="config")


@config_app.command("validate")
def config_validate(
    file: Annotated[Path, typer.Argument(help="The YAML config file to check.")],
) -> None:
    """Load FILE (with $CDC_MIRROR_* overrides) and report every problem, one sentence each
    naming the field; a secret's value is never shown. Exit code 0 when valid, 2 when not."""
    try:
        load_settings(file)
    except ConfigError as exc:
        for problem in exc.problems:
            err_console.print(f"[red]error:[/] {escape(problem)}")
        count = len(exc.problems)
        err_console.print(
            f"{escape(str(file))}: {count} problem{'s' if count > 1 else ''}", highlight=False
        )
        raise typer.Exit(ExitCode.USAGE) from None
    console.print(f"{escape(str(file))}: valid", highlight=False)


def _fail(exc: BaseException) -> int:
    err_console.print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
    return exit_code_for(exc)


def run(args: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (``EXIT_CODES``)."""
    try:
        code = app(args=args, standalone_mode=False)
    except CdcMirrorError as exc:
        return _fail(exc)
    except ImportError as exc:
        # The lake's commands import PySpark, an optional extra: say how to install it.
        missing = spark_missing_error(exc)
        if missing is None:
            raise
        return _fail(missing)
    except (typer.Abort, KeyboardInterrupt):  # Ctrl-C
        err_console.print("interrupted")
        return ExitCode.INTERRUPTED
    except typer.TyperException as exc:  # the command line is wrong (click's usage errors)
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        else:
            err_console.print(f"error: {escape(exc.format_message())}", highlight=False)
        return ExitCode.USAGE
    return code if isinstance(code, int) else ExitCode.OK


def main() -> None:
    sys.exit(run())
