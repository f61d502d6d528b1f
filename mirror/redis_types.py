"""What each SimpleBinlog Kind is in the Redis mirror: the type table's Redis visitor.

The Redis applier stores a row as one JSON document whose ``row`` member holds the row's
SimpleBinlog wire values unchanged (``mirror.redis_applier``): no Kind is converted, so a
reader decodes them with ``simple_binlog.values.decode``, as from Kafka. This visitor says so
for every Kind, so that a new Kind has to be decided here too; the type table's test checks
that a stored document gives back every Kind's wire value, of the JSON type named here.
"""

from __future__ import annotations

from simple_binlog.type_table import KindVisitor
from simple_binlog.values import ColumnType

WIRE_NUMBER = "wire number"
WIRE_STRING = "wire string"


class RedisValueVisitor(KindVisitor[str]):
    """The value a row's column holds in the stored Redis document."""

    def visit_int(self, column: ColumnType) -> str:
        return WIRE_NUMBER

    def visit_uint64(self, column: ColumnType) -> str:
        return WIRE_STRING  # the digits as text: Lua and JSON readers hold 2^53 at most

    def visit_decimal(self, column: ColumnType) -> str:
        return WIRE_STRING

    def visit_float(self, column: ColumnType) -> str:
        return WIRE_NUMBER

    def visit_double(self, column: ColumnType) -> str:
        return WIRE_NUMBER

    def visit_date(self, column: ColumnType) -> str:
        return WIRE_STRING

    def visit_datetime(self, column: ColumnType) -> str:
        return WIRE_STRING

    def visit_timestamp(self, column: ColumnType) -> str:
        return WIRE_STRING

    def visit_time(self, column: ColumnType) -> str:
        return WIRE_STRING

    def visit_year(self, column: ColumnType) -> str:
        return WIRE_NUMBER

    def visit_bit(self, column: ColumnType) -> str:
        return WIRE_NUMBER

    def visit_enum(self, column: ColumnType) -> str:
        return WIRE_STRING

    def visit_set(self, column: ColumnType) -> str:
        return WIRE_STRING

    def visit_text(self, column: ColumnType) -> str:
        return WIRE_STRING

    def visit_binary(self, column: ColumnType) -> str:
        return WIRE_STRING  # base64, as on the wire

    def visit_geometry(self, column: ColumnType) -> str:
        return WIRE_STRING

    def visit_uuid(self, column: ColumnType) -> str:
        return WIRE_STRING

    def visit_inet4(self, column: ColumnType) -> str:
        return WIRE_STRING

    def visit_inet6(self, column: ColumnType) -> str:
        return WIRE_STRING
