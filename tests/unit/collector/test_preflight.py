"""The startup checks' rules (``collector.preflight``) over fake server snapshots, MariaDB and
MySQL flavours: each rule refuses with one sentence that says what to change."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from collector.preflight import (
    Finding,
    Preflight,
    ServerSnapshot,
    Subject,
    findings,
    granted,
)
from simple_binlog.errors import ConfigError

MARIADB_GRANT = "GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `cdc`@`%`"
MYSQL_GRANT = "GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `cdc`@`%`"
UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def mariadb(**changes: Any) -> ServerSnapshot:
    variables = {
        "log_bin": "ON",
        "binlog_format": "ROW",
        "binlog_row_image": "FULL",
        "gtid_strict_mode": "ON",
        "gtid_binlog_pos": "0-1-100",
        "gtid_binlog_state": "0-1-100",
        **changes.pop("variables", {}),
    }
    snapshot = ServerSnapshot(
        flavour="mariadb",
        version="10.11.19-MariaDB-log",
        server_id=1,
        variables=variables,
        grants=(MARIADB_GRANT,),
        user="'cdc'@'%'",
        replica_ids=(2,),
        binlogs=("mariadb-bin.000003",),
        oldest_gtid_list="[0-1-40]",
    )
    return dataclasses.replace(snapshot, **changes)


def mysql(**changes: Any) -> ServerSnapshot:
    variables = {
        "log_bin": "ON",
        "binlog_format": "ROW",
        "binlog_row_image": "FULL",
        "gtid_mode": "ON",
        "enforce_gtid_consistency": "ON",
        "gtid_executed": f"{UUID}:1-100",
        "gtid_purged": f"{UUID}:1-40",
        **changes.pop("variables", {}),
    }
    snapshot = ServerSnapshot(
        flavour="mysql",
        version="8.4.3",
        server_id=1,
        variables=variables,
        grants=(MYSQL_GRANT,),
        user="'cdc'@'%'",
        replica_ids=(2,),
        binlogs=("binlog.000003",),
    )
    return dataclasses.replace(snapshot, **changes)


MARIADB_AT = Subject("orders", 4101, "0-1-60", (r"shop\..*",))
MYSQL_AT = Subject("orders", 4101, f"{UUID}:1-60", (r"shop\..*",))


def only(found: list[Finding]) -> Finding:
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize(("snapshot", "subject"), [(mariadb(), MARIADB_AT), (mysql(), MYSQL_AT)])
def test_a_fit_server_passes(snapshot: ServerSnapshot, subject: Subject) -> None:
    assert findings(snapshot, subject) == []
    Preflight().check(snapshot, subject)


@pytest.mark.parametrize("make", [mariadb, mysql])
def test_binlog_off_and_statement_format_are_refused(make: Any) -> None:
    subject = MARIADB_AT if make is mariadb else MYSQL_AT
    off = only(findings(make(variables={"log_bin": "OFF"}), subject))
    assert off.check == "log_bin" and "start it with log_bin" in off.sentence
    mixed = only(findings(make(variables={"binlog_format": "MIXED"}), subject))
    assert mixed.sentence == (
        "MySQL instance 'orders' has binlog_format=MIXED, so row changes are not in its binlog: "
        "set binlog_format=ROW (SET GLOBAL and in the config file) and restart the collector."
    )


@pytest.mark.parametrize("make", [mariadb, mysql])
@pytest.mark.parametrize(
    ("image", "loss"),
    [
        ("MINIMAL", "logs only the primary key in before images and only the changed columns"),
        ("NOBLOB", "leaves unchanged BLOB and TEXT columns out of the row images"),
    ],
)
def test_a_row_image_other_than_full_is_refused(make: Any, image: str, loss: str) -> None:
    subject = MARIADB_AT if make is mariadb else MYSQL_AT
    found = only(findings(make(variables={"binlog_row_image": image}), subject))
    assert found.check == "binlog_row_image" and found.fatal
    assert loss in found.sentence
    assert "the mirrors could not rebuild rows: set binlog_row_image=FULL" in found.sentence


@pytest.mark.parametrize("mode", ["OFF", "OFF_PERMISSIVE", "ON_PERMISSIVE"])
def test_mysql_needs_gtid_mode_on_to_resume_by_gtid(mode: str) -> None:
    found = only(findings(mysql(variables={"gtid_mode": mode}), MYSQL_AT))
    assert found.check == "gtid_mode" and found.fatal
    assert f"has gtid_mode={mode}, and the collector resumes by GTID" in found.sentence
    # Without GTIDs the collector reads by file and position: a warning only.
    by_file = dataclasses.replace(MYSQL_AT, resume_gtid="")
    snapshot = mysql(variables={"gtid_mode": mode, "gtid_executed": "", "gtid_purged": ""})
    warning = only(findings(snapshot, by_file))
    assert not warning.fatal and "a failover to a replica does not carry over" in warning.sentence


def test_mariadb_without_gtid_strict_mode_is_a_warning_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    snapshot = mariadb(variables={"gtid_strict_mode": "OFF"})
    found = only(findings(snapshot, MARIADB_AT))
    assert found.check == "gtid_strict_mode" and not found.fatal
    preflight = Preflight()
    preflight.check(snapshot, MARIADB_AT)  # not refused
    preflight.check(snapshot, MARIADB_AT)
    assert [r.message for r in caplog.records].count(found.sentence) == 1


@pytest.mark.parametrize("make", [mariadb, mysql])
def test_a_server_id_clash_is_refused(make: Any) -> None:
    subject = MARIADB_AT if make is mariadb else MYSQL_AT
    own = only(findings(make(), dataclasses.replace(subject, replica_server_id=1)))
    assert own.check == "server_id" and "is the server's own @@server_id" in own.sentence
    other = only(findings(make(), dataclasses.replace(subject, replica_server_id=2)))
    assert "the server id of a replica connected to it" in other.sentence
    assert "give the instance a replica_server_id no server or replica of it uses" in other.sentence
    # Replicas unknown (SHOW SLAVE HOSTS refused): only the server's own id is checked.
    unknown = make(replica_ids=None)
    assert findings(unknown, dataclasses.replace(subject, replica_server_id=2)) == []


@pytest.mark.parametrize(
    ("grants", "missing"),
    [
        (("GRANT USAGE ON *.* TO `cdc`@`%`",), "REPLICATION SLAVE, REPLICATION CLIENT, SELECT"),
        (("GRANT SELECT, BINLOG MONITOR ON *.* TO `cdc`@`%`",), "REPLICATION SLAVE"),
        (("GRANT REPLICATION SLAVE, SELECT ON *.* TO `cdc`@`%`",), "REPLICATION CLIENT"),
        (("GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `cdc`@`%`",), "SELECT"),
        # SELECT on a database is enough; replication privileges only count globally.
        (
            (
                "GRANT REPLICATION CLIENT ON *.* TO `cdc`@`%`",
                "GRANT SELECT, REPLICATION SLAVE ON `shop`.* TO `cdc`@`%`",
            ),
            "REPLICATION SLAVE",
        ),
    ],
)
def test_missing_privileges_are_named(grants: tuple[str, ...], missing: str) -> None:
    for make, subject in ((mariadb, MARIADB_AT), (mysql, MYSQL_AT)):
        found = only(findings(make(grants=grants), subject))
        assert found.sentence == (
            f"the collector's user 'cdc'@'%' on MySQL instance 'orders' lacks {missing}: run "
            f"GRANT {missing} ON *.* TO 'cdc'@'%' (or grant them to its default role)."
        )


@pytest.mark.parametrize(
    "grants",
    [
        ("GRANT ALL PRIVILEGES ON *.* TO `admin`@`%` WITH GRANT OPTION",),
        ("GRANT ALL ON *.* TO `admin`@`%`",),
        # The default role's grants, as read after the user's (MariaDB and MySQL syntax).
        (
            "GRANT USAGE ON *.* TO `cdc`@`%`",
            "GRANT `replicator` TO `cdc`@`%`",
            "SET DEFAULT ROLE `replicator` FOR `cdc`@`%`",
            "GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO `replicator`",
        ),
        (
            "GRANT USAGE ON *.* TO `cdc`@`%`",
            "GRANT `replicator`@`%` TO `cdc`@`%`",
            "GRANT SELECT (id, name), REPLICATION SLAVE ON *.* TO `cdc`@`%`",
            "GRANT REPLICATION CLIENT ON *.* TO `cdc`@`%`",
        ),
        ("GRANT PROCESS, SELECT, REPLICATION CLIENT, REPLICATION SLAVE ON *.* TO 'cdc'@'%'",),
    ],
)
def test_privileges_through_all_roles_and_old_syntax_count(grants: tuple[str, ...]) -> None:
    assert findings(mariadb(grants=grants), MARIADB_AT) == []


def test_grant_lines_are_parsed_by_scope() -> None:
    everywhere, somewhere = granted(
        [
            "GRANT BINLOG MONITOR ON *.* TO `cdc`@`%`",
            "GRANT SELECT (a, b), INSERT ON `shop`.`orders` TO `cdc`@`%`",
            "GRANT PROXY ON ''@'' TO 'root'@'localhost' WITH GRANT OPTION",
        ]
    )
    assert everywhere == {"REPLICATION CLIENT"}
    assert somewhere == {"SELECT", "INSERT"}


def test_mariadb_a_purged_position_names_the_oldest_and_the_replay() -> None:
    subject = dataclasses.replace(MARIADB_AT, resume_gtid="0-1-30")
    found = only(findings(mariadb(), subject))
    assert found.sentence == (
        "MySQL instance 'orders' purged the binlog after GTID 0-1-30 (its oldest binlog, "
        "mariadb-bin.000003, starts after GTID 0-1-40); the changes after 0-1-30 up to 0-1-40 "
        "are lost to the binlog: start the collector afresh from 0-1-40 (collector.start) and "
        r"re-seed the tables it collects (shop\..*) with 'cdc-mirror replay --instance orders "
        "--db-prefix DB --table-prefix TABLE' for each of them."
    )
    # At the oldest binlog's start exactly: nothing is missing.
    assert findings(mariadb(), dataclasses.replace(subject, resume_gtid="0-1-40")) == []
    # A domain the position does not know is read from its beginning: purged too.
    two_domains = mariadb(
        oldest_gtid_list="[0-1-40,1-1-7]", variables={"gtid_binlog_pos": "0-1-100,1-1-9"}
    )
    assert only(findings(two_domains, subject=MARIADB_AT)).check == "position"


def test_mariadb_a_position_ahead_of_the_server_is_refused() -> None:
    # A replica promoted before it received what the collector published from the primary.
    subject = dataclasses.replace(MARIADB_AT, resume_gtid="0-1-105")
    found = only(findings(mariadb(), subject))
    assert found.sentence == (
        "the collector has published up to GTID 0-1-105 but MySQL instance 'orders' has only "
        "0-1-100 in GTID domain 0 (a replica promoted before it received them?): point the "
        "instance at a server that has them, or wait until this one has applied them; "
        "otherwise the mirrors hold changes this server never made."
    )
    # The promoted replica's own later transactions (another server id) count.
    promoted = mariadb(variables={"gtid_binlog_pos": "0-2-110"})
    assert findings(promoted, subject) == []
    unknown_domain = dataclasses.replace(MARIADB_AT, resume_gtid="0-1-60,5-1-3")
    assert "has only nothing in GTID domain 5" in only(findings(mariadb(), unknown_domain)).sentence


def test_mysql_positions_purged_and_ahead() -> None:
    purged = dataclasses.replace(MYSQL_AT, resume_gtid=f"{UUID}:1-30")
    found = only(findings(mysql(), purged))
    assert f"purged transactions the collector has not read yet (gtid_purged {UUID}:1-40" in (
        found.sentence
    )
    assert "'cdc-mirror replay --instance orders" in found.sentence
    ahead = dataclasses.replace(MYSQL_AT, resume_gtid=f"{UUID}:1-120")
    assert "has published up to GTID" in only(findings(mysql(), ahead)).sentence
    # Gaps and tagged GTIDs (8.4+) are sets, not high-water marks.
    tagged = mysql(
        variables={
            "gtid_executed": f"{UUID}:1-100,{UUID}:etl:1-5",
            "gtid_purged": f"{UUID}:1-40:42",
        }
    )
    gap = dataclasses.replace(MYSQL_AT, resume_gtid=f"{UUID}:1-40,{UUID}:etl:1-2")
    assert only(findings(tagged, gap)).check == "position"  # 42 purged, not read
    fine = dataclasses.replace(MYSQL_AT, resume_gtid=f"{UUID}:1-42,{UUID}:etl:1-5")
    assert findings(tagged, fine) == []


def test_a_position_of_the_other_flavour_is_refused() -> None:
    found = only(findings(mysql(), MARIADB_AT))
    assert "resumes after a MariaDB GTID position (0-1-60) but" in found.sentence
    assert only(findings(mariadb(), MYSQL_AT)).check == "position"


def test_fatal_findings_refuse_with_their_sentences() -> None:
    snapshot = mariadb(variables={"binlog_row_image": "MINIMAL", "binlog_format": "STATEMENT"})
    with pytest.raises(ConfigError) as refused:
        Preflight().check(snapshot, MARIADB_AT)
    text = str(refused.value)
    assert text.startswith("MySQL instance 'orders' has binlog_format=STATEMENT")
    assert "binlog_row_image=MINIMAL" in text
