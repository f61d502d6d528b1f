"""Startup checks: what the source server must offer before the collector reads its binlog.

Run at every connect, before the binlog dump is opened (``Collector._stream``). The rules
are pure (``findings`` over a ``ServerSnapshot``); ``read_snapshot`` is the only I/O: a
handful of queries any MySQL 5.7+/MariaDB 10.x server answers for the collector's user.
Each refusal is one sentence that says what to change:

- ``log_bin`` ON, ``binlog_format=ROW``;
- ``binlog_row_image=FULL`` (MINIMAL logs the key alone in before images and only changed
  columns in after images, NOBLOB leaves out unchanged BLOB/TEXT columns: the mirrors could
  not rebuild rows from them);
- GTIDs: MySQL ``gtid_mode=ON`` to resume by GTID (without GTIDs the collector reads by file
  and position: a warning, as a failover cannot carry that over); MariaDB always has GTIDs,
  and ``gtid_strict_mode=OFF`` is a warning (sequence numbers may then go out of order);
- the collector's ``replica_server_id`` differs from the server's and its other replicas';
- the user holds REPLICATION SLAVE, REPLICATION CLIENT (MariaDB: BINLOG MONITOR) and SELECT,
  directly, through ALL PRIVILEGES, or through its default roles;
- the resume position is still in the binlog (not purged), and not ahead of it (a replica
  promoted before it received what the collector published from the old primary).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pymysql

from cdc_platform.mysql_source import covers, gtid_set, mariadb_domains
from simple_binlog.errors import ConfigError, ServiceUnavailableError

log = logging.getLogger(__name__)

Flavour = Literal["mariadb", "mysql"]

VARIABLES = (
    "log_bin",
    "binlog_format",
    "binlog_row_image",
    "gtid_mode",
    "enforce_gtid_consistency",
    "gtid_strict_mode",
    "gtid_binlog_pos",
    "gtid_binlog_state",
    "gtid_executed",
    "gtid_purged",
)
REQUIRED_PRIVILEGES = ("REPLICATION SLAVE", "REPLICATION CLIENT", "SELECT")
# MariaDB 10.5+ shows REPLICATION CLIENT under its new name.
_ALIASES = {"BINLOG MONITOR": "REPLICATION CLIENT", "ALL": "ALL PRIVILEGES"}
_ROW_IMAGE_LOSS = {
    "MINIMAL": "logs only the primary key in before images and only the changed columns in "
    "after images",
    "NOBLOB": "leaves unchanged BLOB and TEXT columns out of the row images",
    "FULL_NODUP": "leaves unchanged columns out of after images",
}


@dataclass(frozen=True, slots=True)
class ServerSnapshot:
    """What the checks need to know of a server, read once per connect."""

    flavour: Flavour
    version: str
    server_id: int
    variables: Mapping[str, str]
    grants: tuple[str, ...]  # SHOW GRANTS lines: the user's and its default roles'
    user: str  # CURRENT_USER(), as 'user'@'host'
    replica_ids: tuple[int, ...] | None  # SHOW SLAVE HOSTS / SHOW REPLICAS; None: not readable
    binlogs: tuple[str, ...] = ()  # SHOW BINARY LOGS, oldest first
    oldest_gtid_list: str | None = None  # MariaDB: the GTID list the oldest binlog starts at

    def variable(self, name: str) -> str:
        return self.variables.get(name, "")


@dataclass(frozen=True, slots=True)
class Finding:
    check: str
    sentence: str
    fatal: bool = True


@dataclass(frozen=True, slots=True)
class Subject:
    """What the collector brings: the instance's name, its replica server id, the position it
    resumes after, and the tables it collects (for the replay command)."""

    instance: str
    replica_server_id: int
    resume_gtid: str
    include: tuple[str, ...] = field(default=())


def findings(snapshot: ServerSnapshot, subject: Subject) -> list[Finding]:
    """Every rule's finding, in a fixed order (empty: the server is fit)."""
    found: list[Finding] = []
    for rule in (_binlog, _row_image, _gtids, _server_id, _privileges, _position):
        found += rule(snapshot, subject)
    return found


def _where(subject: Subject) -> str:
    return f"MySQL instance {subject.instance!r}"


def _binlog(snapshot: ServerSnapshot, subject: Subject) -> list[Finding]:
    if snapshot.variable("log_bin").upper() not in ("ON", "1"):
        return [
            Finding(
                "log_bin",
                f"{_where(subject)} writes no binary log: start it with log_bin (and "
                "binlog_format=ROW, binlog_row_image=FULL) in its config file.",
            )
        ]
    binlog_format = snapshot.variable("binlog_format").upper()
    if binlog_format != "ROW":
        return [
            Finding(
                "binlog_format",
                f"{_where(subject)} has binlog_format={binlog_format or '?'}, so row changes "
                "are not in its binlog: set binlog_format=ROW (SET GLOBAL and in the config "
                "file) and restart the collector.",
            )
        ]
    return []


def _row_image(snapshot: ServerSnapshot, subject: Subject) -> list[Finding]:
    image = snapshot.variable("binlog_row_image").upper()
    if image in ("", "FULL"):
        return []
    loss = _ROW_IMAGE_LOSS.get(image, "does not log every column of each row")
    return [
        Finding(
            "binlog_row_image",
            f"{_where(subject)} has binlog_row_image={image}, which {loss}, so the mirrors "
            "could not rebuild rows: set binlog_row_image=FULL (SET GLOBAL and in the config "
            "file) and restart the collector.",
        )
    ]


def _gtids(snapshot: ServerSnapshot, subject: Subject) -> list[Finding]:
    if snapshot.flavour == "mysql":
        mode = snapshot.variable("gtid_mode").upper() or "OFF"
        if mode == "ON":
            return []
        if subject.resume_gtid:  # a GTID set to resume from, on a server without GTIDs
            return [
                Finding(
                    "gtid_mode",
                    f"{_where(subject)} has gtid_mode={mode}, and the collector resumes by "
                    "GTID: set enforce_gtid_consistency=ON and gtid_mode=ON (stepwise: "
                    "OFF_PERMISSIVE, ON_PERMISSIVE, ON) and restart the collector.",
                )
            ]
        return [
            Finding(
                "gtid_mode",
                f"{_where(subject)} has gtid_mode={mode}: the collector reads it by binlog "
                "file and position, which a failover to a replica does not carry over; set "
                "gtid_mode=ON to resume by GTID.",
                fatal=False,
            )
        ]
    if snapshot.variable("gtid_strict_mode").upper() not in ("ON", "1"):
        return [
            Finding(
                "gtid_strict_mode",
                f"{_where(subject)} has gtid_strict_mode=OFF: after a failover a GTID domain's "
                "sequence numbers can go out of order and resuming by GTID can then skip or "
                "repeat transactions; set gtid_strict_mode=ON.",
                fatal=False,
            )
        ]
    return []


def _server_id(snapshot: ServerSnapshot, subject: Subject) -> list[Finding]:
    ours = subject.replica_server_id
    if ours == snapshot.server_id:
        clash = "the server's own @@server_id"
    elif snapshot.replica_ids is not None and ours in snapshot.replica_ids:
        clash = "the server id of a replica connected to it (SHOW SLAVE HOSTS)"
    else:
        return []
    return [
        Finding(
            "server_id",
            f"the collector's replica_server_id {ours} is {clash} on {_where(subject)}, and the "
            "server drops one of two connections with the same id: give the instance a "
            "replica_server_id no server or replica of it uses.",
        )
    ]


_GRANT = re.compile(r"^GRANT (?P<what>.+?) ON (?P<on>\S+) TO ", re.IGNORECASE)


def granted(lines: Iterable[str]) -> tuple[set[str], set[str]]:
    """(global privileges, privileges on some database or table), names normalised."""
    everywhere: set[str] = set()
    somewhere: set[str] = set()
    for line in lines:
        match = _GRANT.match(line.strip())
        if match is None:
            continue
        # Column lists (``SELECT (a, b)``) are dropped before splitting at commas.
        text = re.sub(r"\([^)]*\)", "", match.group("what"))
        names = {_ALIASES.get(p, p) for p in (" ".join(p.split()).upper() for p in text.split(","))}
        if "PROXY" in names:
            continue
        target = match.group("on").replace("`", "")
        (everywhere if target == "*.*" else somewhere).update(names)
    return everywhere, somewhere


def _privileges(snapshot: ServerSnapshot, subject: Subject) -> list[Finding]:
    everywhere, somewhere = granted(snapshot.grants)
    if "ALL PRIVILEGES" in everywhere:
        return []
    missing = [
        p
        for p in REQUIRED_PRIVILEGES
        if p not in everywhere and not (p == "SELECT" and "SELECT" in somewhere)
    ]
    if not missing:
        return []
    listed = ", ".join(missing)
    return [
        Finding(
            "privileges",
            f"the collector's user {snapshot.user} on {_where(subject)} lacks {listed}: run "
            f"GRANT {listed} ON *.* TO {snapshot.user} (or grant them to its default role).",
        )
    ]


def _position(snapshot: ServerSnapshot, subject: Subject) -> list[Finding]:
    resume = subject.resume_gtid
    mysql_position = ":" in resume
    if resume and mysql_position != (snapshot.flavour == "mysql"):
        kind = "a MySQL GTID set" if mysql_position else "a MariaDB GTID position"
        return [
            Finding(
                "position",
                f"the collector resumes after {kind} ({resume}) but {_where(subject)} is "
                f"{snapshot.flavour}: point the instance at the server it was collected from.",
            )
        ]
    if snapshot.flavour == "mysql":
        return _mysql_position(snapshot, subject)
    return _mariadb_position(snapshot, subject)


def _replay(subject: Subject, oldest: str, resume: str) -> str:
    tables = ", ".join(subject.include) or ".*"
    return (
        f"the changes after {resume or 'the start'} up to {oldest} are lost to the binlog: "
        f"start the collector afresh from {oldest} (collector.start) and re-seed the tables "
        f"it collects ({tables}) with 'cdc-mirror replay --instance {subject.instance} "
        "--db-prefix DB --table-prefix TABLE' for each of them."
    )


def _mariadb_position(snapshot: ServerSnapshot, subject: Subject) -> list[Finding]:
    resume = mariadb_domains(subject.resume_gtid)
    have = mariadb_domains(snapshot.variable("gtid_binlog_pos"))
    for domain, (text, seq) in sorted(resume.items()):
        if domain not in have or have[domain][1] < seq:
            latest = have[domain][0] if domain in have else "nothing"
            return [_ahead(subject, text, f"{latest} in GTID domain {domain}")]
    if snapshot.oldest_gtid_list is None:
        return []
    oldest = mariadb_domains(snapshot.oldest_gtid_list)
    for domain, (_text, seq) in sorted(oldest.items()):
        if domain not in resume or resume[domain][1] < seq:
            oldest_text = snapshot.oldest_gtid_list.strip("[] ") or "-"
            where = snapshot.binlogs[0] if snapshot.binlogs else "the oldest binlog"
            return [
                Finding(
                    "position",
                    f"{_where(subject)} purged the binlog after GTID {subject.resume_gtid or '-'}"
                    f" (its oldest binlog, {where}, starts after GTID {oldest_text}); "
                    + _replay(subject, oldest_text, subject.resume_gtid),
                )
            ]
    return []


def _ahead(subject: Subject, resume: str, latest: str) -> Finding:
    return Finding(
        "position",
        f"the collector has published up to GTID {resume} but {_where(subject)} has only "
        f"{latest} (a replica promoted before it received them?): point the instance at a "
        "server that has them, or wait until this one has applied them; otherwise the mirrors "
        "hold changes this server never made.",
    )


def _mysql_position(snapshot: ServerSnapshot, subject: Subject) -> list[Finding]:
    if not subject.resume_gtid:
        return []  # read by file and position (no GTIDs): a purged file is the server's error
    resume = gtid_set(subject.resume_gtid)
    executed = gtid_set(snapshot.variable("gtid_executed"))
    purged_text = snapshot.variable("gtid_purged")
    if not covers(executed, resume):
        return [_ahead(subject, subject.resume_gtid, f"{snapshot.variable('gtid_executed')}")]
    if not covers(resume, gtid_set(purged_text)):
        return [
            Finding(
                "position",
                f"{_where(subject)} purged transactions the collector has not read yet "
                f"(gtid_purged {purged_text}, the collector is after "
                f"{subject.resume_gtid or '-'}); "
                + _replay(subject, purged_text, subject.resume_gtid),
            )
        ]
    return []


# -- I/O: the snapshot --------------------------------------------------------------------------
def read_snapshot(cursor: Any) -> ServerSnapshot:
    """The server as the collector's user sees it. Statements a server or user may refuse
    (SHOW SLAVE HOSTS wants REPLICATION MASTER ADMIN on MariaDB 10.5+) leave their part
    unknown; a lost connection is ServiceUnavailableError."""
    try:
        cursor.execute("SELECT @@version, @@server_id, CURRENT_USER()")
        version, server_id, user = cursor.fetchone()
        flavour: Flavour = "mariadb" if "mariadb" in str(version).lower() else "mysql"
        names = ", ".join(f"'{name}'" for name in VARIABLES)
        cursor.execute(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})")
        variables = {str(name): str(value) for name, value in cursor.fetchall()}
        grants = _grants(cursor, flavour)
        binlogs = _optional(cursor, "SHOW BINARY LOGS")
        files = tuple(str(row[0]) for row in binlogs or ())
        oldest = _oldest_gtid_list(cursor, files[0]) if flavour == "mariadb" and files else None
        return ServerSnapshot(
            flavour=flavour,
            version=str(version),
            server_id=int(server_id),
            variables=variables,
            grants=grants,
            user=_quoted_user(str(user)),
            replica_ids=_replica_ids(cursor),
            binlogs=files,
            oldest_gtid_list=oldest,
        )
    except pymysql.OperationalError as exc:
        raise ServiceUnavailableError(
            f"the MySQL server went away during the startup checks ({exc.args[-1]})."
        ) from None


def _optional(cursor: Any, statement: str) -> list[tuple[Any, ...]] | None:
    try:
        cursor.execute(statement)
    except (pymysql.ProgrammingError, pymysql.InternalError) as exc:
        log.debug("startup checks: %s refused (%s)", statement, exc.args[-1])
        return None
    except pymysql.OperationalError as exc:
        if exc.args and exc.args[0] in (1227, 1142, 1381):  # no privilege; binlog not enabled
            log.debug("startup checks: %s refused (%s)", statement, exc.args[-1])
            return None
        raise
    return list(cursor.fetchall())


_DEFAULT_ROLE = re.compile(r"^SET DEFAULT ROLE (`[^`]+`) FOR ", re.IGNORECASE)


def _grants(cursor: Any, flavour: Flavour) -> tuple[str, ...]:
    """The user's grant lines and those of the roles a replication connection has: MySQL's
    active (default) roles, MariaDB's default role."""
    own = [str(row[0]) for row in _optional(cursor, "SHOW GRANTS") or ()]
    lines = list(own)
    if flavour == "mysql":
        active = _optional(cursor, "SELECT CURRENT_ROLE()")
        text = str(active[0][0]) if active and active[0][0] is not None else "NONE"
        roles = [] if text.upper() == "NONE" else [r.strip() for r in text.split(",")]
    else:
        roles = [m.group(1) for m in map(_DEFAULT_ROLE.match, own) if m is not None]
    if roles and flavour == "mysql":
        rows = _optional(cursor, f"SHOW GRANTS FOR CURRENT_USER() USING {', '.join(roles)}")
        lines += [str(row[0]) for row in rows or ()]
    elif roles:
        for role in roles:
            lines += [str(row[0]) for row in _optional(cursor, f"SHOW GRANTS FOR {role}") or ()]
    return tuple(lines)


def _replica_ids(cursor: Any) -> tuple[int, ...] | None:
    for statement in ("SHOW REPLICAS", "SHOW SLAVE HOSTS"):
        rows = _optional(cursor, statement)
        if rows is not None:
            return tuple(int(row[0]) for row in rows)
    return None


def _oldest_gtid_list(cursor: Any, oldest_file: str) -> str | None:
    rows = _optional(cursor, f"SHOW BINLOG EVENTS IN '{oldest_file}' LIMIT 4")
    for row in rows or ():
        if str(row[2]) == "Gtid_list":
            return str(row[5]).strip()
    return None


def _quoted_user(user: str) -> str:
    name, _, host = user.rpartition("@")
    return f"'{name}'@'{host}'" if name else f"'{user}'"


# -- at connect --------------------------------------------------------------------------------
class Preflight:
    """Runs the checks at each connect: refuses with the first fatal finding's sentence, and
    logs each warning once per process."""

    def __init__(self) -> None:
        self._warned: set[str] = set()

    def check(self, snapshot: ServerSnapshot, subject: Subject) -> None:
        found = findings(snapshot, subject)
        for finding in found:
            if not finding.fatal and finding.sentence not in self._warned:
                self._warned.add(finding.sentence)
                log.warning("%s", finding.sentence)
        fatal = [finding.sentence for finding in found if finding.fatal]
        if fatal:
            raise ConfigError(" ".join(fatal) if len(fatal) > 1 else fatal[0])
