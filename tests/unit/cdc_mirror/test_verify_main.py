"""``python -m cdc_mirror.verify`` ends with the command line's exit codes
(``simple_binlog.errors.EXIT_CODES``): 2 for a configuration error, 3 when MySQL cannot be
read, 4 when a compared snapshot differs from MySQL, 0 when it agrees."""

from __future__ import annotations

import socket
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cdc_mirror import verify
from cdc_mirror.verify import MemoryStore, SparkChecks, TableDigest, TableSchema, digest_rows
from simple_binlog.errors import ExitCode

SCHEMA = TableSchema("shop_orders", (("shop_00", "orders_00"),),
                     {"id": "int", "amount": "decimal(12,2)"}, ("id",))  # fmt: skip
ROWS = [("shop_00.orders_00", {"id": n, "amount": Decimal("1.50")}) for n in (1, 2, 3)]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    file = tmp_path / "config.yaml"
    file.write_text(
        "instances:\n"
        f"  - {{name: gone, host: 127.0.0.1, port: {_closed_port()}}}\n"
        "tables:\n"
        "  - {instance: gone, db_prefix: shop, table_prefix: orders}\n"
    )
    monkeypatch.setenv("CDC_MIRROR_CONFIG", str(file))
    return file


def _main(tmp_path: Path, *extra: str) -> int:
    return verify.main(["--output", str(tmp_path / "out.json"), "--dt", "2026-03-02", *extra])


def test_a_table_the_config_does_not_have_exits_2(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _main(tmp_path, "--table", "nope") == ExitCode.USAGE == 2
    assert "no table mirror named 'nope'" in capsys.readouterr().err


def test_mysql_out_of_reach_exits_3_before_spark_starts(
    config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[str] = []
    monkeypatch.setattr(verify, "_spark_checks", lambda *args: started.append("spark"))
    assert _main(tmp_path, "--table", "shop_orders") == ExitCode.UNAVAILABLE == 3
    assert started == []


def _snapshot(rows: list[Any]) -> SparkChecks:
    return SparkChecks({"2026-03-02": digest_rows("hive", SCHEMA, rows)}, [], [])


@pytest.mark.parametrize(
    ("snapshot_rows", "code"), [(ROWS, ExitCode.OK), (ROWS[:2], ExitCode.CHECK_FAILED)]
)
def test_compare_exits_4_when_the_snapshot_differs_from_mysql(
    config: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    snapshot_rows: list[Any],
    code: ExitCode,
) -> None:
    monkeypatch.setattr(verify, "mysql_schema", lambda settings, mirror: SCHEMA)
    monkeypatch.setattr(verify, "MySQLStore", lambda settings, mirror: MemoryStore("mysql", ROWS))
    monkeypatch.setattr(verify, "_spark_checks", lambda *args: _snapshot(snapshot_rows))
    assert _main(tmp_path, "--table", "shop_orders", "--compare") == code
    written = SparkChecks.from_json(verify.orjson.loads((tmp_path / "out.json").read_bytes()))
    assert isinstance(written.snapshots["2026-03-02"], TableDigest)
    err = capsys.readouterr().err
    if code == ExitCode.CHECK_FAILED:
        assert "hive's copy of shop_orders differs from mysql: 1 missing; e.g. keys 3." in err
    else:
        assert err == ""
