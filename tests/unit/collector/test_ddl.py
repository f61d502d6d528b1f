from __future__ import annotations

import pytest

from collector.ddl import parse_table_ddl, redact


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("ALTER TABLE t ADD COLUMN x INT", ("ALTER", "TABLE", "shop", "t")),
        ("alter online ignore table `db2`.`t` drop x", ("ALTER", "TABLE", "db2", "t")),
        ("/* comment */ CREATE TABLE IF NOT EXISTS a.b (id int)", ("CREATE", "TABLE", "a", "b")),
        ("CREATE OR REPLACE TABLE t (id int)", ("CREATE", "TABLE", "shop", "t")),
        ("DROP TABLE IF EXISTS `t`", ("DROP", "TABLE", "shop", "t")),
        ("RENAME TABLE a TO b", ("RENAME", "TABLE", "shop", "a")),
        ("TRUNCATE TABLE x.y", ("TRUNCATE", "TABLE", "x", "y")),
        ("CREATE DATABASE ordercenter_07", ("CREATE", "DATABASE", "ordercenter_07", None)),
        ("DROP SCHEMA IF EXISTS s", ("DROP", "DATABASE", "s", None)),
    ],
)
def test_table_and_database_ddl_are_recognised(query, expected) -> None:
    ddl = parse_table_ddl(query, "shop")
    assert ddl is not None
    assert (ddl.verb, ddl.object, ddl.schema, ddl.table) == expected
    assert ddl.statement == query.strip()


@pytest.mark.parametrize(
    "query",
    [
        "CREATE USER 'u'@'%' IDENTIFIED BY 'pw'",
        "GRANT ALL ON *.* TO 'u'@'%'",
        "COMMIT",
        "CREATE INDEX i ON t (x)",
        "CREATE VIEW v AS SELECT 1",
        "SET PASSWORD FOR 'u' = PASSWORD('x')",
    ],
)
def test_other_statements_are_not_table_ddl(query) -> None:
    assert parse_table_ddl(query, "shop") is None


def test_secret_options_are_redacted() -> None:
    statement = (
        "CREATE TABLE f (id INT) ENGINE=FEDERATED "
        "CONNECTION='mysql://app:s3cr3t@db:3306/shop/t' PASSWORD = \"hunter2\""
    )
    redacted = redact(statement)
    assert "s3cr3t" not in redacted and "hunter2" not in redacted
    assert "CONNECTION='***'" in redacted and "ENGINE=FEDERATED" in redacted
    assert parse_table_ddl(statement, "shop").statement == redacted


def test_statements_without_secrets_are_unchanged() -> None:
    statement = "ALTER TABLE t ADD COLUMN note VARCHAR(10) DEFAULT 'PASSWORD' COMMENT 'x'"
    assert redact(statement) == statement
