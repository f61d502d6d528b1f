"""Types of the C extension built from collector/_native.c (see there)."""

from collections.abc import Callable
from typing import Any

API_VERSION: int
FALLBACK: int
INT: int
UINT: int
UINT64_TEXT: int
FLOAT: int
DOUBLE: int
DECIMAL: int
DATETIME2: int
TIMESTAMP2: int
TIME2: int
DATE: int
YEAR: int
BIT: int
ENUM: int
SET: int
TEXT_UTF8: int
BASE64: int
CONVERT: int

SCAN_MORE: int
SCAN_LARGE: int
SCAN_ERROR: int
SCAN_EOF: int

def scan_packets(
    buffer: bytes, offset: int, trailer: int, header_class: type[tuple[int, ...]]
) -> tuple[list[tuple[tuple[int, ...], bytes]], int, int]: ...

MESSAGE_FIELDS: tuple[str, ...]
POSITION_FIELDS: tuple[str, ...]

def build_messages(
    images: list[tuple[dict[str, Any] | None, dict[str, Any]]],
    first_row: int,
    next_offset: Callable[[int], int],
    template: tuple[Any, ...],
) -> list[Any]: ...

class RowPlan:
    def __init__(
        self,
        schema: str,
        table: str,
        columns: tuple[
            tuple[str, int, int, int, int, tuple[str, ...] | None, Callable[..., Any] | None],
            ...,
        ],
    ) -> None: ...
    def rows(
        self, body: bytes, event_type: int
    ) -> list[tuple[dict[str, Any] | None, dict[str, Any]]]: ...
