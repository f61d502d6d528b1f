"""Positions as MySQL and MariaDB print them (``cdc_platform.mysql_source``): the one reading
the collector's preflight and validation's watermark share."""

from __future__ import annotations

import pytest

from cdc_platform.mysql_source import covers, gtid_set, mariadb_domains, position_covers

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def test_gtid_sets() -> None:
    assert gtid_set(f"{UUID}:1-3:5,\n{UUID.upper()}:tag:7") == {
        UUID: [(1, 3), (5, 5)],
        f"{UUID}:tag": [(7, 7)],
    }
    assert covers(gtid_set(f"{UUID}:1-3:4-9"), gtid_set(f"{UUID}:2-8"))
    assert not covers(gtid_set(f"{UUID}:1-3:5-9"), gtid_set(f"{UUID}:2-8"))
    assert covers(gtid_set(""), gtid_set(""))


def test_mariadb_domains_keep_each_domains_highest_sequence() -> None:
    assert mariadb_domains("[0-1-5, 0-2-9,1-1-3]") == {0: ("0-2-9", 9), 1: ("1-1-3", 3)}
    assert mariadb_domains("") == {}
    with pytest.raises(ValueError, match="is not a MariaDB GTID"):
        mariadb_domains(f"{UUID}:1-5")


def test_position_covers_mariadb_and_mysql_positions() -> None:
    assert position_covers("0-1-100,1-2-7", "0-1-99")
    assert position_covers("0-1-100", "0-1-100")
    assert not position_covers("0-1-99", "0-1-100")
    assert not position_covers("0-1-100", "0-1-5,1-2-3")  # a domain not published yet
    assert not position_covers(f"{UUID}:1-100", "0-1-5")  # not the same kind of position
    assert position_covers("anything", "")
    assert position_covers(f"{UUID}:1-42", f"{UUID}:1-40")
    assert position_covers(f"{UUID}:1-10:11-42", f"{UUID}:5-42")
    assert not position_covers(f"{UUID}:1-40", f"{UUID}:1-42")
    assert not position_covers(f"{UUID}:1-42", f"{UUID}:1-42,{UUID}:tag:1")
