"""Rows of a declared `Types.ROW_NAMED` type <-> Apache Arrow record batches: the columns the
Parquet format writes and reads (tidegate/connectors/parquet_format.py) and the table sinks
write (Delta Lake, Iceberg: tidegate/connectors/table_files.py).

The type mapping (`arrow_schema`), as Flink's Parquet format and table types map theirs:

| tidegate type | Arrow / Parquet type |
| --- | --- |
| STRING, CHAR | string (UTF8) |
| BOOLEAN, BYTE, SHORT, INT, LONG | bool, int8, int16, int32, int64 |
| FLOAT, DOUBLE | float32, float64 |
| BIG_DEC | decimal128(38, 18) (Flink's DECIMAL for BigDecimal) |
| BIG_INT | decimal128(38, 0) (an int of at most 38 digits; read back as an int) |
| SQL_DATE, SQL_TIME | date32, time64[us] |
| SQL_TIMESTAMP | timestamp[us] (a local date-time); with `utc_timestamp`: timestamp[us, UTC] |
| INSTANT | timestamp[us, UTC] |
| PRIMITIVE_ARRAY(BYTE) | binary (bytes, or a list of signed bytes; read back as the list) |
| LIST, BASIC_ARRAY, PRIMITIVE_ARRAY, OBJECT_ARRAY | list of the element type |
| MAP | map |
| ROW, ROW_NAMED | struct |
| TUPLE | struct of fields f0, f1, ... (read back as a tuple) |

Every column is nullable. PICKLED_BYTE_ARRAY (and any type not above) has no column type:
`arrow_schema` raises TypeError naming the field. A record that does not fit raises
FormatError naming the format or sink (`what`), the field and the record.
"""

from __future__ import annotations

import datetime as dt
import decimal
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
    TupleTypeInfo,
    TypeInformation,
)
from tidegate.formats.base import FieldError, FormatError, new_row, row_type, row_values

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
    BasicType.BIG_INT: pa.decimal128(38, 0),
    BasicType.INSTANT: pa.timestamp("us", tz="UTC"),
}
_SEQUENCES = (ListTypeInfo, BasicArrayTypeInfo, ObjectArrayTypeInfo, PrimitiveArrayTypeInfo)
_BYTES = PrimitiveArrayTypeInfo(BasicTypeInfo(BasicType.BYTE))
_BIG_INT = BasicTypeInfo(BasicType.BIG_INT)
_SUPPORTED = (
    "STRING, CHAR, BOOLEAN, BYTE, SHORT, INT, LONG, FLOAT, DOUBLE, BIG_DEC, BIG_INT, INSTANT, "
    "SQL_DATE, SQL_TIME, SQL_TIMESTAMP, and LIST / arrays / MAP / ROW / TUPLE of these"
)


def _struct_names(t: RowTypeInfo | TupleTypeInfo) -> list[str]:
    """The struct field names of a ROW (its names) or a TUPLE (f0, f1, ...)."""
    if isinstance(t, RowTypeInfo):
        return list(t.names)
    return [f"f{i}" for i in range(len(t.field_types))]


def arrow_type(
    t: TypeInformation, what: str, utc_timestamp: bool = False, where: str = ""
) -> pa.DataType:
    """The Arrow type of values of `t` (see the module); TypeError naming `what` (the format
    or sink) and `where` (the field) for a type that has no column type."""
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
        return pa.list_(arrow_type(t.element_type, what, utc_timestamp, f"{where}[]"))
    if isinstance(t, MapTypeInfo):
        key = arrow_type(t.key_type, what, utc_timestamp, f"{where}<key>")
        return pa.map_(key, arrow_type(t.value_type, what, utc_timestamp, f"{where}<value>"))
    if isinstance(t, RowTypeInfo | TupleTypeInfo):
        return pa.struct(_fields(t, what, utc_timestamp, f"{where}."))
    raise TypeError(
        f"{what}: field {where or '?'!r} of type {t!r} has no column type; supported: {_SUPPORTED}"
    )


def _fields(
    t: RowTypeInfo | TupleTypeInfo, what: str, utc_timestamp: bool, prefix: str = ""
) -> list[pa.Field]:
    return [
        pa.field(name, arrow_type(ft, what, utc_timestamp, f"{prefix}{name}"))
        for name, ft in zip(_struct_names(t), t.field_types, strict=True)
    ]


def arrow_schema(t: Any, what: str, utc_timestamp: bool = False) -> pa.Schema:
    """The Arrow schema of rows of `t` (one nullable column per field) as `what` (the format
    or sink, named in errors) writes them; TypeError if `t` is not a ROW / ROW_NAMED type or
    a field has no column type."""
    return pa.schema(_fields(row_type(t, what), what, utc_timestamp))


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


def _int_to_decimal(v: Any) -> decimal.Decimal:
    """A BIG_INT value (an int) as the Decimal pyarrow writes into decimal128(38, 0)."""
    if not isinstance(v, int) or isinstance(v, bool):
        raise ValueError(f"a BIG_INT value is an int, got {type(v).__name__} {v!r:.60}")
    return decimal.Decimal(v)


def _to_arrow(t: TypeInformation) -> Fn | None:
    """The conversion of a non-None value of `t` into what pyarrow takes (None: as it is)."""
    if t == _BYTES:
        return _signed_to_bytes
    if t == _BIG_INT:
        return _int_to_decimal
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
    if isinstance(t, RowTypeInfo | TupleTypeInfo):
        names = _struct_names(t)
        fields = [_to_arrow(ft) for ft in t.field_types]

        def to_tuple(v: Any) -> tuple[Any, ...]:
            values = row_values(v, names)
            return tuple(
                x if f is None or x is None else f(x) for f, x in zip(fields, values, strict=True)
            )

        return to_tuple
    return None


def batch_writer(
    t: Any, what: str, utc_timestamp: bool = False
) -> Callable[[list[Any]], pa.RecordBatch]:
    """records (Rows, tuples, lists or dicts of `t`) -> a pyarrow RecordBatch of
    `arrow_schema(t, what, utc_timestamp)`; FormatError naming `what`, the field and the
    record when a record does not fit."""
    schema = arrow_schema(t, what, utc_timestamp)
    names = list(t.names)
    converters = [_to_arrow(ft) for ft in t.field_types]

    def write(records: list[Any]) -> pa.RecordBatch:
        try:
            rows = [row_values(record, names) for record in records]
        except FieldError as e:
            raise _record_error(what, names, records, e) from None
        columns = list(zip(*rows, strict=True)) if rows else [() for _ in names]
        arrays = []
        for name, field, convert, column in zip(names, schema, converters, columns, strict=True):
            try:
                values = (
                    column
                    if convert is None
                    else [None if v is None else convert(v) for v in column]
                )
                arrays.append(pa.array(values, type=field.type))
            except _REFUSALS as e:
                raise _column_error(what, name, field.type, convert, column, records, e) from None
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    return write


def _record_error(
    what: str, names: list[str], records: list[Any], error: FieldError
) -> FormatError:
    """The error of the first record whose fields cannot be read (`error`: what was raised)."""
    for record in records:
        try:
            row_values(record, names)
        except FieldError as e:
            error = e
            break
    else:
        record = records[:1]
    return FormatError(what, error.reason, record, field=error.dotted())


def _column_error(
    what: str,
    name: str,
    arrow: pa.DataType,
    convert: Fn | None,
    column: Any,
    records: list[Any],
    error: Exception,
) -> FormatError:
    """The error of a column that did not convert, naming the field and the first record at
    fault."""
    reason = f"cannot write as {arrow}: {error}"
    for record, value in zip(records, column, strict=True):
        try:
            pa.array([value if convert is None or value is None else convert(value)], type=arrow)
        except _REFUSALS:
            return FormatError(what, reason, record, name)
    return FormatError(what, reason, records[:1], name)


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
    if t == _BIG_INT:
        return int
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
    if isinstance(t, RowTypeInfo | TupleTypeInfo):
        names = _struct_names(t)
        fields = [_from_arrow(ft, utc_timestamp) for ft in t.field_types]

        def values(v: dict[str, Any]) -> list[Any]:
            return [
                x if f is None or x is None else f(x)
                for f, x in zip(fields, (v[n] for n in names), strict=True)
            ]

        if isinstance(t, TupleTypeInfo):
            return lambda v: tuple(values(v))
        return lambda v: new_row(names, values(v))
    return None


def batch_reader(t: RowTypeInfo, utc_timestamp: bool = False) -> Callable[[Any], list[Any]]:
    """A pyarrow Table (or RecordBatch) whose columns are `t`'s fields in order, cast to
    `arrow_schema(t, ..., utc_timestamp)` -> named Rows of `t`."""
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
