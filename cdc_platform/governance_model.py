"""The governance models: detector rules, column policies, standardisation, detection records.

Shared by the collector and the replay (which apply them), the config file (``governance:``
section of ``cdc_platform.config.Settings``) and the web admin (which stores, validates and
serves them in ``CollectorConfig.governance``). Pure data and validation; nothing here reads
a file, imports a plug-in or talks to a service.

How the web admin serves a policy set: a ``GovernanceSettings`` whose ``detectors``,
``policies``, ``lookup_tables``, ``standardise``, ``default_action``, ``enabled`` and
``version`` are filled in. The fields that only make sense locally (``source``, ``webui``,
``hash_salt``, ``allowed_functions``) are ignored by the receiving collector: the salt never
leaves the config file of the process that hashes, so the admin database never holds it, and
which plug-in code may run is the receiving host's operator's decision alone.
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal, Self

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from simple_binlog.errors import ContractError
from simple_binlog.patterns import compile_pattern

# The built-in detectors, in priority order: when two match overlapping text, the first wins
# (an 18-digit PRC ID that happens to pass Luhn is an ID, not a bank card).
BUILTIN_DETECTORS: tuple[str, ...] = ("prc_id", "bank_card", "cn_mobile", "email", "ipv4", "ipv6")

# Validators a user rule may name without writing code; a dotted path 'pkg.module:function'
# (a ``Callable[[str], bool]``) names any other, which runs only where the config file of the
# process lists it in ``governance.allowed_functions`` (``governance.functions``).
BUILTIN_VALIDATORS: tuple[str, ...] = ("luhn", "prc_id", "ipv4", "ipv6", "ip", "email")

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_TABLE_NAME = re.compile(r"^[a-z0-9_]{1,128}$")
_COLUMN_NAME = re.compile(r"^[A-Za-z0-9_$]{1,64}$")
_DOTTED_PATH = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")


def _logical_table_name(value: str) -> str:
    if not _TABLE_NAME.match(value):
        raise ValueError(f"{value!r} is not a logical table name (lowercase, digits, '_')")
    return value


# The logical table (``TableMirror.name``, shard-merged) a column policy or rule is for.
LogicalTableName = Annotated[str, AfterValidator(_logical_table_name)]


class PolicyAction(StrEnum):
    """What happens to a column's value before the message leaves the collector or replay.

    ``pass``: published unchanged, detections recorded. ``mask``: the detected parts are
    replaced by ``*`` keeping format hints (last digits, the e-mail domain). ``hash``: the
    whole value becomes ``HMAC-SHA256(salt, value)`` in hex, so equal values still join.
    ``drop``: the column is removed from ``content``, ``beforeContent`` and ``columnTypes``.
    """

    PASS = "pass"  # noqa: S105 - an action name, not a password
    MASK = "mask"
    HASH = "hash"
    DROP = "drop"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_regex(value: str) -> str:
    compiled = compile_pattern(value)  # UnsafePatternError, a ValueError, when too costly
    if compiled.match(""):
        raise ValueError(f"{value!r} matches the empty string, so it would match everywhere")
    return value


class DetectorRule(_Model):
    """A user detector: a regex finds candidates, an optional validator confirms each one.

    ``validator`` is a built-in name (``BUILTIN_VALIDATORS``) or a dotted path
    ``pkg.module:function`` to a ``Callable[[str], bool]``, imported when the policy set is
    loaded if the loading process's ``governance.allowed_functions`` lists it. Rules are
    tried after the built-in detectors, in list order.
    """

    name: str
    pattern: str
    validator: str | None = None
    description: str = ""
    enabled: bool = True

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("must be lowercase letters, digits and '_', starting with a letter")
        if value in BUILTIN_DETECTORS:
            raise ValueError(f"{value!r} is a built-in detector's name; pick another")
        return value

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, value: str) -> str:
        return _check_regex(value)

    @field_validator("validator")
    @classmethod
    def _validator(cls, value: str | None) -> str | None:
        if value is None or value in BUILTIN_VALIDATORS or _DOTTED_PATH.match(value):
            return value
        raise ValueError(
            f"{value!r} is neither a built-in validator ({', '.join(BUILTIN_VALIDATORS)}) "
            "nor a dotted path like 'mypkg.checks:is_valid'"
        )


class ColumnPolicy(_Model):
    """The action for one column of one logical table (``TableMirror.name``, shard-merged).

    ``column: "*"`` sets the action for every column of the table without its own policy
    (a ``"*"`` mask leaves non-text columns as they are; a column's own ``mask`` on a number
    or date column publishes it as text, type ``varchar(80)``).
    ``keep_last`` (mask) keeps that many trailing characters of each detected part visible
    (e-mails keep their first character and the domain instead).
    """

    table: LogicalTableName
    column: str
    action: PolicyAction
    keep_last: int = Field(4, ge=0, le=8)

    @field_validator("column")
    @classmethod
    def _column(cls, value: str) -> str:
        if value != "*" and not _COLUMN_NAME.match(value):
            raise ValueError(f"{value!r} is not a column name (or '*' for every column)")
        return value


class LookupTable(_Model):
    """A named value mapping (old id → new id), kept in the admin database or the config."""

    name: str
    entries: dict[str, str] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("must be lowercase letters, digits and '_', starting with a letter")
        return value


class StandardiseRule(_Model):
    """A per-column transform of one logical table, applied before the column's policy.

    ``kind: lookup`` maps the value through the lookup table ``lookup``; a value not in the
    table is kept (``on_missing: keep``, counted) or becomes NULL (``null``).
    ``kind: recrypt`` passes the value to ``function`` (``pkg.module:function``, a
    ``Callable[[str], str]``, imported when the policy set is loaded if the loading process's
    ``governance.allowed_functions`` lists it), e.g. to
    turn ciphertext of an old scheme into the new one. NULL stays NULL in both.
    """

    table: LogicalTableName
    column: str
    kind: Literal["lookup", "recrypt"]
    lookup: str | None = None
    function: str | None = None
    on_missing: Literal["keep", "null"] = "keep"

    @field_validator("column")
    @classmethod
    def _column(cls, value: str) -> str:
        if not _COLUMN_NAME.match(value):
            raise ValueError(f"{value!r} is not a column name")
        return value

    @field_validator("function")
    @classmethod
    def _function(cls, value: str | None) -> str | None:
        if value is not None and not _DOTTED_PATH.match(value):
            raise ValueError(f"{value!r} is not a dotted path like 'mypkg.crypto:old_to_new'")
        return value

    @model_validator(mode="after")
    def _kind_fields(self) -> Self:
        if self.kind == "lookup" and (self.lookup is None or self.function is not None):
            raise ValueError(
                f"the lookup rule for {self.table}.{self.column} needs 'lookup' (a lookup "
                "table's name) and no 'function'"
            )
        if self.kind == "recrypt" and (self.function is None or self.lookup is not None):
            raise ValueError(
                f"the recrypt rule for {self.table}.{self.column} needs 'function' "
                "(pkg.module:function) and no 'lookup'"
            )
        return self


class GovernanceWebUISource(_Model):
    """Where ``source: webui`` polls the policy set (``GET /api/collector-config/{instance}``)."""

    url: str = "http://127.0.0.1:29200"
    # A token of role 'collector' (made in the web admin). A secret: never logged.
    token: SecretStr | None = None
    poll_interval_s: float = Field(5.0, gt=0)
    timeout_s: float = Field(5.0, gt=0)
    # The last policy set received is kept here (default: <stack.home>/governance-<instance>
    # .json) so a restart while the admin is down keeps enforcing it instead of failing.
    cache_dir: Path | None = None

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")


class GovernanceSettings(_Model):
    """Plaintext detection, column policies and standardisation (issue 10).

    ``enabled: false`` (the default) publishes rows unchanged and scans nothing. With
    ``enabled: true`` every string value of every collected table is scanned by the enabled
    detectors; a detection is recorded (never the value) and counted; then the column's
    policy applies. A column without a policy gets the table's ``"*"`` policy, else
    ``default_action`` (``pass``: recorded only).

    Key columns: ``drop`` on a column of a table's ``key`` is refused here, and on a MySQL
    primary-key column when a row shows it (the process stops with one sentence rather than
    publish rows without identity); ``hash`` is deterministic, so hashed keys stay unique.
    """

    enabled: bool = False
    # Where the collector/replay read the policy set: this section ('config'), or the web
    # admin ('webui', polled; ``webui`` says where).
    source: Literal["config", "webui"] = "config"
    webui: GovernanceWebUISource = GovernanceWebUISource()
    # Grows with every change in the web admin; logged when a new set is applied.
    version: int = Field(0, ge=0)
    builtin_detectors: list[str] = Field(default_factory=lambda: list(BUILTIN_DETECTORS))
    detectors: list[DetectorRule] = Field(default_factory=list)
    default_action: PolicyAction = PolicyAction.PASS
    policies: list[ColumnPolicy] = Field(default_factory=list)
    lookup_tables: list[LookupTable] = Field(default_factory=list)
    standardise: list[StandardiseRule] = Field(default_factory=list)
    # The detectors read at most this many characters of a value (governance.detectors'
    # DEFAULT_MAX_CHARS): a longer value is scanned in its first scan_max_chars only, and
    # counted (the collector's cdc_collector_scan_truncated). Served with the policy set.
    scan_max_chars: int = Field(65_536, ge=1_024, le=16_777_216)
    # HMAC key of 'hash'; required when any policy (or the default) hashes. Set the same salt
    # on every collector and replay so hashed values join across them.
    hash_salt: SecretStr | None = None
    # Plug-in functions ('pkg.module:function') validators and recrypt rules may name besides
    # the built-ins. Local like the salt: only this host's config file sets it, so the web
    # admin (whose policy sets are served to every collector) can never name code to run.
    allowed_functions: list[str] = Field(default_factory=list)

    @field_validator("allowed_functions")
    @classmethod
    def _function_paths(cls, value: list[str]) -> list[str]:
        for path in value:
            if not _DOTTED_PATH.match(path):
                raise ValueError(f"{path!r} is not a dotted path like 'mypkg.crypto:old_to_new'")
        return value

    @field_validator("builtin_detectors")
    @classmethod
    def _known_builtins(cls, value: list[str]) -> list[str]:
        unknown = [name for name in value if name not in BUILTIN_DETECTORS]
        if unknown:
            raise ValueError(
                f"{unknown[0]!r} is not a built-in detector (known: {', '.join(BUILTIN_DETECTORS)})"
            )
        return value

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> Self:
        names = [rule.name for rule in self.detectors]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"detector {repeated[0]!r} is defined twice")
        seen: set[tuple[str, str]] = set()
        for policy in self.policies:
            key = (policy.table, policy.column)
            if key in seen:
                raise ValueError(f"column {policy.table}.{policy.column} has two policies")
            seen.add(key)
        lookups = {table.name for table in self.lookup_tables}
        transformed: set[tuple[str, str]] = set()
        for rule in self.standardise:
            key = (rule.table, rule.column)
            if key in transformed:
                raise ValueError(f"column {rule.table}.{rule.column} has two standardise rules")
            transformed.add(key)
            if rule.lookup is not None and rule.lookup not in lookups:
                raise ValueError(
                    f"the standardise rule for {rule.table}.{rule.column} names the unknown "
                    f"lookup table {rule.lookup!r}"
                )
        hashes = self.default_action is PolicyAction.HASH or any(
            p.action is PolicyAction.HASH for p in self.policies
        )
        # A set received from the web admin has no salt: the receiver's own config holds it
        # (compile_governance refuses a hashing set when the receiver has none).
        received = bool(info.context and info.context.get("received"))
        if received and self.allowed_functions:
            raise ValueError("a served policy set cannot set 'allowed_functions'")
        if self.enabled and hashes and self.hash_salt is None and not received:
            raise ValueError("a policy hashes values but 'hash_salt' is not set")
        if self.hash_salt is not None and len(self.hash_salt.get_secret_value()) < 16:
            raise ValueError("'hash_salt' must be at least 16 characters")
        if self.enabled and self.source == "webui" and self.webui.token is None:
            raise ValueError("source 'webui' needs 'webui.token' (a collector token)")
        return self

    def check_keys(self, table_keys: dict[str, list[str]]) -> None:
        """Refuse ``drop`` on a key column; ``table_keys``: logical table → key columns.

        Raises ValueError with one sentence (``Settings`` calls it with its ``tables:``).
        """
        for policy in self.policies:
            keys = table_keys.get(policy.table)
            if policy.action is PolicyAction.DROP and keys and policy.column in keys:
                raise ValueError(
                    f"the policy drops {policy.table}.{policy.column}, a key column of the "
                    "table; a row without its key cannot be mirrored (use 'hash' instead)"
                )

    def policy_set(self, received: GovernanceSettings) -> GovernanceSettings:
        """This process's settings with the policy set ``received`` from the web admin.

        The local fields (source, webui, hash_salt, allowed_functions) stay as configured here.
        """
        return self.model_copy(
            update={
                "enabled": received.enabled,
                "version": received.version,
                "builtin_detectors": received.builtin_detectors,
                "detectors": received.detectors,
                "default_action": received.default_action,
                "policies": received.policies,
                "lookup_tables": received.lookup_tables,
                "standardise": received.standardise,
            }
        )

    @classmethod
    def from_published(cls, document: Any) -> GovernanceSettings:
        """Validate a policy set as ``published_policy_set`` gives it (no salt needed).

        Raises pydantic's ValidationError (``describe_governance_error`` for one sentence).
        """
        return cls.model_validate(document, context={"received": True})

    def published_policy_set(self) -> dict[str, Any]:
        """The JSON the web admin serves: the policy set without the local fields."""
        return self.model_dump(
            mode="json",
            exclude={"source", "webui", "hash_salt", "allowed_functions"},
            exclude_defaults=False,
        )


def describe_governance_error(error: ValidationError) -> str:
    """One sentence for a policy set that does not validate (web admin input, a poll reply)."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "governance"
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"governance field '{where}' is invalid: {message}."


class DetectionRecord(_Model):
    """Detections of one detector in one column, aggregated over one Kafka transaction.

    Published to ``cdc.binlog.<instance>.detections`` in the same transaction as the rows
    (exactly once), key ``<schema>.<table>``. Never carries the detected value.
    ``first_offset``/``last_offset``: binlogOffsets of the first and last row with a
    detection; ``position``: ``file:pos`` of the first such row's event (None for replayed
    rows); ``detected_at_ms``: executeTime of the first such row; ``action``: the policy
    applied to the column.
    """

    instance: str
    logical_table: str
    schema_name: str
    table_name: str
    column: str
    detector: str
    count: int = Field(ge=1)
    first_offset: int
    last_offset: int
    detected_at_ms: int
    action: PolicyAction
    source: Literal["BINLOG", "MOCK"] = "BINLOG"
    position: str | None = None
    gtid: str | None = None
    version: int = 1

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "instance": self.instance,
            "logicalTable": self.logical_table,
            "schemaName": self.schema_name,
            "tableName": self.table_name,
            "column": self.column,
            "detector": self.detector,
            "count": self.count,
            "firstOffset": self.first_offset,
            "lastOffset": self.last_offset,
            "detectedAtMs": self.detected_at_ms,
            "action": self.action.value,
            "source": self.source,
            "position": self.position,
            "gtid": self.gtid,
        }

    def encode(self) -> bytes:
        return orjson.dumps(self.to_json())

    @classmethod
    def from_json(cls, document: Any) -> DetectionRecord:
        """Parse one record; raises ContractError with one sentence when it is malformed."""
        if not isinstance(document, dict):
            raise ContractError("a detection record must be a JSON object.")
        try:
            return cls(
                version=document.get("version", 1),
                instance=document["instance"],
                logical_table=document["logicalTable"],
                schema_name=document["schemaName"],
                table_name=document["tableName"],
                column=document["column"],
                detector=document["detector"],
                count=document["count"],
                first_offset=document["firstOffset"],
                last_offset=document["lastOffset"],
                detected_at_ms=document["detectedAtMs"],
                action=document["action"],
                source=document.get("source", "BINLOG"),
                position=document.get("position"),
                gtid=document.get("gtid"),
            )
        except KeyError as exc:
            raise ContractError(f"a detection record lacks the field {exc.args[0]!r}.") from None
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ContractError(
                f"detection record field '{where}' is invalid: {first['msg']}."
            ) from None

    @classmethod
    def decode(cls, payload: bytes) -> DetectionRecord:
        try:
            document = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise ContractError(f"a detection record is not valid JSON ({exc}).") from None
        return cls.from_json(document)


def detections_topic(instance_topic: str) -> str:
    """``cdc.binlog.<instance>.detections`` from the instance's row topic."""
    return f"{instance_topic}.detections"
