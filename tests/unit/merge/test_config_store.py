"""Merge reads its table mirrors through the configuration store, once, at start."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from cdc_platform.config import CONFIG_ENV_VAR, Settings, TableMirror
from cdc_platform.config_store import ConfigSnapshot
from merge import app as merge_app
from merge.app import plan_requests

SETTINGS = Settings(tables=[TableMirror(db_prefix="shop", table_prefix="orders")])
STORE_FILE = """
instances:
  - {name: local, host: 127.0.0.1, port: 3306, user: cdc}
tables:
  - {db_prefix: ordercenter, table_prefix: orderinfo, targets: [hive]}
  - {db_prefix: shop, table_prefix: cart, targets: [redis]}
"""


class _Planned(Exception):
    pass


def test_the_plan_names_the_snapshots_tables() -> None:
    snapshot = ConfigSnapshot(
        version=3,
        tables=(TableMirror(db_prefix="crm", table_prefix="users", targets=["hive"]),),
    )
    requests = plan_requests(SETTINGS, "2026-11-21", [], True, False, False, None, config=snapshot)
    assert [r.table for r in requests] == ["crm_users"]
    assert [
        r.table
        for r in plan_requests(
            SETTINGS, "2026-11-21", ["crm_users"], False, False, False, None, config=snapshot
        )
    ] == ["crm_users"]


def test_the_command_reads_the_store_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "cdc-mirror.yaml"
    config.write_text(STORE_FILE)
    monkeypatch.setenv(CONFIG_ENV_VAR, str(config))  # config_store.source 'file', this file
    seen: dict[str, Any] = {}

    def build_merger(settings: Settings, snapshot: ConfigSnapshot | None = None) -> Any:
        assert snapshot is not None
        seen["tables"] = [t.name for t in snapshot.tables]
        raise _Planned

    monkeypatch.setattr(merge_app, "build_merger", build_merger)
    console = Console(file=io.StringIO())
    settings = SETTINGS.model_copy(
        update={"spark": SETTINGS.spark.model_copy(update={"lake_dir": tmp_path / "lake"})}
    )
    with pytest.raises(_Planned):
        merge_app.run_merge_command(
            settings,
            "2026-11-21",
            ["ordercenter_orderinfo"],
            False,
            False,
            False,
            None,
            console,
            console,
        )
    assert seen == {"tables": ["ordercenter_orderinfo", "shop_cart"]}
