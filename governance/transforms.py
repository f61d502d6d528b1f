"""Standardisation transforms (lookup tables, recrypt plug-ins) and the value actions (mask,
hash). Pure logic; a recrypt plug-in is imported once, when the policy set is compiled.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Sequence

from cdc_platform.governance_model import LookupTable, StandardiseRule
from governance.detectors import Detection
from simple_binlog.errors import ConfigError
from simple_binlog.values import JsonScalar

Transform = Callable[[JsonScalar], JsonScalar]

# The type a hashed column is published with: 64 hex characters of HMAC-SHA256.
HASHED_COLUMN_TYPE = "char(64)"
# The type of a non-text column (numbers, dates) published masked: its values become text.
MASKED_NON_TEXT_COLUMN_TYPE = "varchar(80)"


class TransformFailedError(ConfigError):
    """A standardise rule could not transform a value (a lookup or plug-in problem)."""


def lookup_transform(rule: StandardiseRule, table: LookupTable) -> Transform:
    """Map values through ``table``; a miss keeps the value or gives NULL (``on_missing``).

    Integer values are looked up by their decimal text and stay integers, so a lookup table
    on an INT column must map to integers.
    """
    entries = table.entries
    to_null = rule.on_missing == "null"
    where = f"{rule.table}.{rule.column}"

    def transform(value: JsonScalar) -> JsonScalar:
        if value is None:
            return None
        if isinstance(value, str):
            mapped = entries.get(value)
            if mapped is None:
                return None if to_null else value
            return mapped
        mapped = entries.get(str(value))
        if mapped is None:
            return None if to_null else value
        if isinstance(value, int):
            try:
                return int(mapped)
            except ValueError:
                raise TransformFailedError(
                    f"lookup table {table.name!r} maps a value of the integer column {where} "
                    "to text that is not an integer; fix the lookup table."
                ) from None
        return mapped

    return transform


def recrypt_transform(rule: StandardiseRule, function: Callable[..., object]) -> Transform:
    """Pass each non-NULL value to the plug-in; its result must be a JSON scalar."""
    where = f"{rule.table}.{rule.column}"

    def transform(value: JsonScalar) -> JsonScalar:
        if value is None:
            return None
        try:
            result = function(value)
        except Exception as exc:  # noqa: BLE001 - any plug-in failure stops publishing
            raise TransformFailedError(
                f"the recrypt function {rule.function} failed on a value of {where} "
                f"({type(exc).__name__}); nothing of that row was published."
            ) from None
        if result is not None and not isinstance(result, str | int | float):
            raise TransformFailedError(
                f"the recrypt function {rule.function} returned a {type(result).__name__} for "
                f"{where}; it must return text, a number or None."
            )
        return result

    return transform


class Hasher:
    """HMAC-SHA256 under the salt, hex: deterministic, so equal values still join."""

    def __init__(self, salt: bytes) -> None:
        self._keyed = hmac.new(salt, digestmod=hashlib.sha256)

    def __call__(self, value: JsonScalar) -> JsonScalar:
        if value is None:
            return None
        mac = self._keyed.copy()
        mac.update(value.encode() if isinstance(value, str) else str(value).encode())
        return mac.hexdigest()


def mask_text(text: str, detections: Sequence[Detection], keep_last: int) -> str:
    """``text`` with each detected span masked: '*' for letters and digits, separators kept.

    Format hints stay: the last ``keep_last`` letters/digits of a number, the first character
    of an e-mail's local part and its domain.
    """
    pieces: list[str] = []
    cursor = 0
    for detection in detections:
        pieces.append(text[cursor : detection.start])
        pieces.append(_mask_span(text[detection.start : detection.end], detection, keep_last))
        cursor = detection.end
    pieces.append(text[cursor:])
    return "".join(pieces)


def _mask_span(span: str, detection: Detection, keep_last: int) -> str:
    if detection.detector == "email" and "@" in span:
        local, _, domain = span.rpartition("@")
        return local[:1] + "*" * (len(local) - 1) + "@" + domain
    visible = sum(1 for char in span if char.isalnum())
    # Never show most of a short match: at most half of its letters and digits stay.
    keep = min(keep_last, visible // 2)
    masked: list[str] = []
    remaining = visible
    for char in span:
        if char.isalnum():
            masked.append(char if remaining <= keep else "*")
            remaining -= 1
        else:
            masked.append(char)
    return "".join(masked)
