"""PostgreSQL column values in their text form (what pgoutput sends, and what the snapshot
selects with `::text`) as Python values, and the Flink type of each column.

Both the snapshot and the change stream convert the same text with the same function, and
both sessions run with the same settings (`SESSION_OPTIONS`: UTC, ISO dates, shortest exact
floats), so a row reads the same whichever phase delivers it.

| PostgreSQL                                | Python               | Types              |
|-------------------------------------------|----------------------|--------------------|
| boolean                                   | bool                 | BOOLEAN            |
| smallint / integer / bigint, oid          | int                  | SHORT / INT / LONG |
| real / double precision                   | float                | FLOAT / DOUBLE     |
| numeric                                   | decimal.Decimal      | BIG_DEC            |
| date / time / timestamp                   | datetime.date/...    | SQL_DATE/TIME/TIMESTAMP |
| timestamptz                               | aware datetime (UTC) | INSTANT            |
| bytea                                     | bytes                | PICKLED_BYTE_ARRAY |
| text, varchar, char, uuid, json(b), other | str (the text form)  | STRING             |
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from tidegate.common.typeinfo import TypeInformation, Types

__all__ = ["SESSION_OPTIONS", "TEXT_ORDERED_KEY_TYPES", "parser", "type_info"]

#: libpq `options` of every connection the source opens: values print the same in both phases
SESSION_OPTIONS = (
    "-c TimeZone=UTC -c DateStyle=ISO -c IntervalStyle=postgres -c extra_float_digits=1"
)

BOOL, BYTEA, INT8, INT2, INT4, OID = 16, 17, 20, 21, 23, 26
FLOAT4, FLOAT8, NUMERIC = 700, 701, 1700
DATE, TIME, TIMESTAMP, TIMESTAMPTZ = 1082, 1083, 1114, 1184
TEXT, VARCHAR, UUID = 25, 1043, 2950

#: key column types whose Python values order as PostgreSQL orders them (text under the "C"
#: collation: by code point), so the snapshot can be read in key-range chunks
TEXT_ORDERED_KEY_TYPES = frozenset({TEXT, VARCHAR})
CHUNKABLE_KEY_TYPES = frozenset(
    {INT2, INT4, INT8, OID, NUMERIC, DATE, TIMESTAMP, TIMESTAMPTZ, UUID, BYTEA}
    | TEXT_ORDERED_KEY_TYPES
)


def _bool(text: str) -> bool:
    return text in ("t", "true")  # the output function's form, and boolean::text's


def _bytea(text: str) -> bytes:
    return bytes.fromhex(text[2:])  # bytea_output = hex (the default): \x0a0b...


_PARSERS: dict[int, Callable[[str], Any]] = {
    BOOL: _bool,
    INT2: int,
    INT4: int,
    INT8: int,
    OID: int,
    FLOAT4: float,
    FLOAT8: float,
    NUMERIC: Decimal,
    DATE: dt.date.fromisoformat,
    TIME: dt.time.fromisoformat,
    TIMESTAMP: dt.datetime.fromisoformat,
    TIMESTAMPTZ: dt.datetime.fromisoformat,
    BYTEA: _bytea,
}

_TYPES: dict[int, Callable[[], TypeInformation]] = {
    BOOL: Types.BOOLEAN,
    INT2: Types.SHORT,
    INT4: Types.INT,
    INT8: Types.LONG,
    OID: Types.LONG,
    FLOAT4: Types.FLOAT,
    FLOAT8: Types.DOUBLE,
    NUMERIC: Types.BIG_DEC,
    DATE: Types.SQL_DATE,
    TIME: Types.SQL_TIME,
    TIMESTAMP: Types.SQL_TIMESTAMP,
    TIMESTAMPTZ: Types.INSTANT,
    BYTEA: Types.PICKLED_BYTE_ARRAY,
}


def parser(type_oid: int) -> Callable[[str], Any]:
    """The function turning a non-NULL text value of type `type_oid` into Python."""
    return _PARSERS.get(type_oid, str)


def type_info(type_oid: int) -> TypeInformation:
    """The Flink type of a column of type `type_oid` (STRING for any type not listed)."""
    return _TYPES.get(type_oid, Types.STRING)()
