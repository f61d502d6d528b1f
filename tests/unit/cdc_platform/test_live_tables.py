"""``cdc_platform.live_tables``: which source a component reads live table shapes from
(``config_store.source``), the wire form both ways, and ``AdminLiveTables``' one-sentence
errors for every way the web admin can fail to answer (httpx's mock transport in place of
the admin; the admin's own side is tested in tests/unit/webui/test_live_tables_api.py)."""

from __future__ import annotations

import datetime as dt

import httpx
import pytest
from pydantic import SecretStr

from cdc_platform.config import ConfigStoreSettings, Settings
from cdc_platform.config_store import ConfigSnapshot
from cdc_platform.live_tables import (
    AdminLiveTables,
    FakeLiveTables,
    live_counts_body,
    live_schema_body,
    open_live_tables,
    parse_live_counts,
    parse_live_schema,
)
from cdc_platform.mysql_schema import LiveSchema, LiveTables
from simple_binlog.errors import ConfigError, ServiceUnavailableError

SCHEMA = LiveSchema(
    table="shop_orders",
    shards=["shop_00.orders", "shop_01.orders"],
    columns={"z_last": "int(11)", "a_first": "varchar(20)", "m": "datetime(6)"},
    key=["z_last"],
    shards_agree=True,
)
TOKEN = SecretStr("cdcm_component_secret")


def _answering(status: int, body: object = None, content: bytes | None = None) -> AdminLiveTables:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["Authorization"] == f"Bearer {TOKEN.get_secret_value()}"
        if content is not None:
            return httpx.Response(status, content=content)
        return httpx.Response(status, json=body)

    return AdminLiveTables("http://admin:1/", TOKEN, transport=httpx.MockTransport(handler))


def test_the_wire_form_keeps_the_column_order_and_the_counts() -> None:
    assert parse_live_schema(live_schema_body(SCHEMA)) == SCHEMA
    assert list(parse_live_schema(live_schema_body(SCHEMA)).columns) == ["z_last", "a_first", "m"]
    counts = {dt.date(2026, 11, 21): 4, dt.date(2026, 11, 20): 0}
    body = live_counts_body("shop_orders", "m", counts)
    assert [c["day"] for c in body["counts"]] == ["2026-11-20", "2026-11-21"]
    assert parse_live_counts(body) == counts
    with pytest.raises(ValueError, match="not a live schema"):
        parse_live_schema({"table": "t"})


def test_the_source_follows_the_configuration_store() -> None:
    config = ConfigSnapshot(version=1)
    assert isinstance(open_live_tables(Settings(), config), LiveTables)
    admin = Settings(config_store=ConfigStoreSettings(source="webui", token=TOKEN))
    assert isinstance(open_live_tables(admin, config), AdminLiveTables)
    no_token = Settings(config_store=ConfigStoreSettings(source="webui"))
    with pytest.raises(ConfigError, match=r"needs config_store\.token"):
        open_live_tables(no_token, config)


def test_the_admin_source_asks_by_mirror_name_and_reads_the_answer() -> None:
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url))
        if request.url.path.endswith("/live-schema"):
            return httpx.Response(200, json=live_schema_body(SCHEMA))
        return httpx.Response(
            200, json=live_counts_body("shop_orders", "m", {dt.date(2026, 11, 20): 7})
        )

    source = AdminLiveTables("http://admin:1/", TOKEN, transport=httpx.MockTransport(handler))
    assert source.live_schema("shop_orders") == SCHEMA
    assert source.count_per_day("shop_orders", "m", dt.date(2026, 11, 26)) == {
        dt.date(2026, 11, 20): 7
    }
    assert asked == [
        "http://admin:1/api/table-mirrors/shop_orders/live-schema",
        "http://admin:1/api/table-mirrors/shop_orders/live-counts?column=m&today=2026-11-26",
    ]


@pytest.mark.parametrize(
    ("status", "body", "error", "sentence"),
    [
        (401, {"detail": ["log in."]}, ConfigError, r"refused config_store.token \(401: log in.\)"),
        (404, {"detail": ["no table mirror named 't'."]}, ConfigError, r"'t': no table mirror"),
        (400, {"detail": ["no MySQL table routes to 't'."]}, ConfigError, r"'t': no MySQL table"),
        (503, {"detail": ["MySQL instance 'i' is away."]}, ServiceUnavailableError, r"'i' is away"),
        (500, None, ServiceUnavailableError, r"answered 500 when asked for the live schema"),
        (200, {"table": "t"}, ServiceUnavailableError, r"with something else \(not a live"),
    ],
)
def test_every_failed_answer_is_one_sentence(
    status: int, body: object, error: type[Exception], sentence: str
) -> None:
    with pytest.raises(error, match=sentence) as raised:
        _answering(status, body).live_schema("t")
    assert TOKEN.get_secret_value() not in str(raised.value)
    assert "\n" not in str(raised.value)


def test_an_answer_that_is_not_json_and_an_unreachable_admin() -> None:
    with pytest.raises(ServiceUnavailableError, match="something that is not JSON"):
        _answering(200, content=b"<html>").live_schema("t")

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    away = AdminLiveTables("http://admin:1", TOKEN, transport=httpx.MockTransport(refuse))
    with pytest.raises(
        ServiceUnavailableError,
        match=r"the web admin at http://admin:1 cannot be reached to read the live schema of "
        r"table mirror 't' \(ConnectError\); the MySQL passwords stay in the web admin",
    ):
        away.live_schema("t")


def test_the_fake_answers_what_it_holds_and_fails_when_told() -> None:
    fake = FakeLiveTables({"shop_orders": SCHEMA})
    assert fake.live_schema("shop_orders") == SCHEMA
    with pytest.raises(ConfigError, match="no MySQL table routes"):
        fake.live_schema("other")
    fake.failure = ServiceUnavailableError("MySQL is away.")
    with pytest.raises(ServiceUnavailableError):
        fake.count_per_day("shop_orders", "m", dt.date(2026, 11, 26))
    assert fake.asked[0] == ("live_schema", "shop_orders")
