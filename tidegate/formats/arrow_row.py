"""Rows of a declared `Types.ROW_NAMED` type <-> Apache Arrow record batches, the columns the
Parquet format writes and reads (tidegate/connectors/parquet_format.py).

The type mapping (`arrow_schema`), as Flink's Parquet format maps its logical types:

| tidegate type | Arrow / Parquet type |
| --- | --- |
| STRING, CHAR | string (UTF8) |
| BOOLEAN, BYTE, SHORT, INT, LONG | bool, int8, int16, int32, int64 |
| FLOAT, DOUBLE | float32, float64 |
| BIG_DEC | decimal128(38, 18) (Flink's DECIMAL for BigDecimal) |
| SQL_DATE, SQL_TIME | date32, time64[us] |
| SQL_TIMESTAMP | timestamp[us] (a local date-time); with `utc_timestamp`: timestamp[us, UTC] |
| INSTANT | timestamp[us, UTC] |
| PRIMITIVE_ARRAY(BYTE) | binary |
| LIST, BASIC_ARRAY, PRIMITIVE_ARRAY, OBJECT_ARRAY | list of the element type |
| MAP | map |
| ROW, ROW_NAMED | struct |

BIG_INT, TUPLE and PICKLED_BYTE_ARRAY have no Parquet type: `arrow_schema` raises TypeError
naming the field. A record that does not fit raises FormatError naming the field.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from tidegate.common.typeinfo import (
    BasicArrayTypeInfo,
    BasicType,
    BasicTypeInfo,
    DateTypeInfo,
    ListTypeInfo,
    MapTypeInfo,
    ObjectArrayTypeInfo,
    PrimitiveArrayTypeInfo,
    RowTypeInfo,
    TimestampTypeInfo,
    TimeTypeInfo,
    TypeInformation,
)
from tidegate.formats.base import FieldError, FormatError, new_row, row_values

__all__ = ["arrow_schema", "arrow_type", "batch_reader", "batch_writer"]

Fn = Callable[[Any], Any]

_BASIC = {
    BasicType.STRING: pa.string(),
    BasicType.CHAR: pa.string(),
    BasicType.BOOLEAN: pa.bool_(),
    BasicType.BYTE: pa.int8(),
    BasicType.SHORT: pa.int16(),
    BasicType.INT: pa.int32(),
    BasicType.LONG: pa.int64(),
    BasicType.FLOAT: pa.float32(),
    BasicType.DOUBLE: pa.float64(),
    BasicType.BIG_DEC: pa.decimal128(38, 18),
    BasicType.INSTANT: pa.timestamp("us", tz="UTC"),
}
_SEQUENCES = (ListTypeInfo, BasicArrayTypeInfo, ObjectArrayTypeInfo, PrimitiveArrayTypeInfo)
_BYTES = PrimitiveArrayTypeInfo(BasicTypeInfo(BasicType.BYTE))
_SUPPORTED = (
    "STRING, CHAR, BOOLEAN, BYTE, SHORT, INT, LONG, FLOAT, DOUBLE, BIG_DEC, INSTANT, SQL_DATE, "
    "SQL_TIME, SQL_TIMESTAMP, and LIST / arrays / MAP / ROW of these"
)


def arrow_type(t: TypeInformation, utc_timestamp: bool = False, where: str = "") -> pa.DataType:
    """The Arrow type of values of `t` (see the module); TypeError naming `where` (the field)
    for a type Parquet cannot hold."""
    if isinstance(t, BasicTypeInfo) and t.basic_type in _BASIC:
        return _BASIC[t.basic_type]
    if isinstance(t, DateTypeInfo):
        return pa.date32()
    if isinstance(t, TimeTypeInfo):
        return pa.time64("us")
    if isinstance(t, TimestampTypeInfo):
        return pa.timestamp("us", tz="UTC" if utc_timestamp else None)
    if t == _BYTES:
        return pa.binary()
    if isinstance(t, _SEQUENCES):
        return pa.list_(arrow_type(t.element_type, utc_timestamp, f"{where}[]"))
    if isinstance(t, MapTypeInfo):
        key = arrow_type(t.key_type, utc_timestamp, f"{where}<key>")
        return pa.map_(key, arrow_type(t.value_type, utc_timestamp, f"{where}<value>"))
    if isinstance(t, RowTypeInfo):
        return pa.struct(_fields(t, utc_timestamp, f"{where}."))
    raise TypeError(
        f"field {where or '?'!r} of type {t!r} has no Parquet type; supported: {_SUPPORTED}"
    )


def _fields(t: RowTypeInfo, utc_timestamp: bool, prefix: str = "") -> list[pa.Field]:
    return [
        pa.field(name, arrow_type(ft, utc_timestamp, f"{prefix}{name}"))
        for name, ft in zip(t.names, t.field_types, strict=True)
    ]


def arrow_schema(t: RowTypeInfo, utc_timestamp: bool = False) -> pa.Schema:
    """The Arrow schema of a file of Rows of `t` (one column per field, all nullable)."""
    if not isinstance(t, RowTypeInfo):
        raise TypeError(
            f"Parquet needs the row type of its records, Types.ROW_NAMED([names], [types]), "
            f"got {t!r}"
        )
    return pa.schema(_fields(t, utc_timestamp))


# writing ---------------------------------------------------------------------------------------
#: what pyarrow (or a value conversion) raises for a value that does not fit its column
_REFUSALS = (pa.ArrowException, AttributeError, TypeError, ValueError, OverflowError)


def _signed_to_bytes(v: Any) -> bytes:
    """A BYTE array value (bytes, or a list of signed bytes as tidegate holds it) as bytes."""
    if isinstance(v, bytes | bytearray):
        return bytes(v)
    if not all(-128 <= b <= 127 for b in v):
        raise ValueError(f"a BYTE array holds values in -128..127, got {v!r:.60}")
    return bytes(b & 0xFF for b in v)


def _to_arrow(t: TypeInformation) -> Fn | None:
    """The conversion of a non-None value of `t` into what pyarrow takes (None: as it is)."""
    if t == _BYTES:
        return _signed_to_bytes
    if isinstance(t, _SEQUENCES):
        element = _to_arrow(t.element_type)
        if element is None:
            return None
        return lambda v: [None if e is None else element(e) for e in v]
    if isinstance(t, MapTypeInfo):
        key, value = _to_arrow(t.key_type), _to_arrow(t.value_type)
        if key is None and value is None:
            return None
        k, w = key or (lambda x: x), value or (lambda x: x)
        return lambda v: [(k(a), None if b is None else w(b)) for a, b in v.items()]
    if isinstance(t, RowTypeInfo):
        names = list(t.names)
        fields = [_to_arrow(ft) for ft in t.field_types]

        def to_tuple(v: Any) -> tuple[Any, ...]:
            values = row_values(v, names)
            return tuple(
                x if f is None or x is None else f(x) for f, x in zip(fields, values, strict=True)
            )

        return to_tuple
    return None


def batch_writer(t: RowTypeInfo, utc_timestamp: bool = False) -> Callable[[list[Any]], Any]:
    """records (Rows, tuples, lists or dicts of `t`) -> a pyarrow RecordBatch of
    `arrow_schema(t)`; FormatError naming the field when a record does not fit."""
    schema = arrow_schema(t, utc_timestamp)
    names = list(t.names)
    converters = [_to_arrow(ft) for ft in t.field_types]

    def write(records: list[Any]) -> pa.RecordBatch:
        rows = []
        for record in records:
            try:
                rows.append(row_values(record, names))
            except FieldError as e:
                raise FormatError("Parquet", e.reason, record, field=e.dotted()) from None
        columns = list(zip(*rows, strict=True)) if rows else [() for _ in names]
        arrays = []
        for name, field, convert, column in zip(names, schema, converters, columns, strict=True):
            try:
                if convert is not None:
                    column = [None if v is None else convert(v) for v in column]
                arrays.append(pa.array(column, type=field.type))
            except _REFUSALS as e:
                raise _column_error(name, field.type, column, records, e) from None
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    return write


def _column_error(
    name: str, arrow: pa.DataType, column: Any, records: list[Any], error: Exception
) -> FormatError:
    """The error of a column pyarrow refused, naming the field and the first record at fault."""
    reason = str(error)
    for record, value in zip(records, column, strict=True):
        try:
            pa.array([value], type=arrow)
        except _REFUSALS:
            return FormatError("Parquet", f"cannot write as {arrow}: {reason}", record, name)
    return FormatError("Parquet", f"cannot write as {arrow}: {reason}", records[:1], name)


# reading ---------------------------------------------------------------------------------------
def _bytes_to_signed(v: bytes) -> list[int]:
    return [b - 256 if b > 127 else b for b in v]


def _naive_utc(v: dt.datetime) -> dt.datetime:
    return v.astimezone(dt.UTC).replace(tzinfo=None)


def _from_arrow(t: TypeInformation, utc_timestamp: bool) -> Fn | None:
    """The conversion of a non-None value pyarrow gives (`to_pylist`) into tidegate's value
    of `t` (None: as it is)."""
    if t == _BYTES:
        return _bytes_to_signed
    if isinstance(t, TimestampTypeInfo) and utc_timestamp:
        return _naive_utc
    if isinstance(t, _SEQUENCES):
        element = _from_arrow(t.element_type, utc_timestamp)
        if element is None:
            return None
        return lambda v: [None if e is None else element(e) for e in v]
    if isinstance(t, MapTypeInfo):
        k = _from_arrow(t.key_type, utc_timestamp) or (lambda x: x)
        w = _from_arrow(t.value_type, utc_timestamp) or (lambda x: x)
        return lambda v: {k(a): None if b is None else w(b) for a, b in v}
    if isinstance(t, RowTypeInfo):
        names = list(t.names)
        fields = [_from_arrow(ft, utc_timestamp) for ft in t.field_types]

        def to_row(v: dict[str, Any]) -> Any:
            values = [v[n] for n in names]
            return new_row(
                names,
                [
                    x if f is None or x is None else f(x)
                    for f, x in zip(fields, values, strict=True)
                ],
            )

        return to_row
    return None


def batch_reader(t: RowTypeInfo, utc_timestamp: bool = False) -> Callable[[Any], list[Any]]:
    """A pyarrow Table (or RecordBatch) whose columns are `t`'s fields in order, cast to
    `arrow_schema(t)` -> named Rows of `t`."""
    names = list(t.names)
    converters = [_from_arrow(ft, utc_timestamp) for ft in t.field_types]

    def read(table: Any) -> list[Any]:
        columns = []
        for convert, column in zip(converters, table.columns, strict=True):
            values = column.to_pylist()
            if convert is not None:
                values = [None if v is None else convert(v) for v in values]
            columns.append(values)
        return [new_row(names, list(values)) for values in zip(*columns, strict=True)]

    return read
