"""Rows of a declared `Types.ROW_NAMED` type as Arrow record batches: the schema a table sink
writes (`arrow_schema`) and the conversion of a list of records (Rows, tuples, lists or dicts,
read by `row_values`) into one batch of it (`RowBatches`).

Types map as Flink's table types do to Parquet/Arrow: STRING and CHAR -> string, BYTE/SHORT/
INT/LONG -> int8/16/32/64, FLOAT/DOUBLE -> float32/64, BOOLEAN -> bool, BIG_DEC ->
decimal(38, 18), BIG_INT -> decimal(38, 0), INSTANT -> timestamp[us, UTC], SQL_DATE -> date32,
SQL_TIME -> time64[us], SQL_TIMESTAMP -> timestamp[us] (no time zone),
PRIMITIVE_ARRAY(BYTE) -> binary, other arrays and LIST -> list, MAP -> map, ROW / TUPLE ->
struct. Every field is nullable.
"""

from __future__ import annotations

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
from tidegate.formats.base import FieldError, row_type, row_values

__all__ = ["RowBatches", "arrow_schema", "arrow_type"]

Fn = Callable[[Any], Any]

_BASIC: dict[BasicType, pa.DataType] = {
    BasicType.STRING: pa.string(),
    BasicType.CHAR: pa.string(),
    BasicType.BYTE: pa.int8(),
    BasicType.SHORT: pa.int16(),
    BasicType.INT: pa.int32(),
    BasicType.LONG: pa.int64(),
    BasicType.FLOAT: pa.float32(),
    BasicType.DOUBLE: pa.float64(),
    BasicType.BOOLEAN: pa.bool_(),
    BasicType.BIG_DEC: pa.decimal128(38, 18),
    BasicType.BIG_INT: pa.decimal128(38, 0),
    BasicType.INSTANT: pa.timestamp("us", tz="UTC"),
}


def arrow_type(type_info: TypeInformation) -> pa.DataType:
    """The Arrow type of values of `type_info` (see the module); TypeError for a type that has
    no column type (PICKLED_BYTE_ARRAY, an undeclared type)."""
    match type_info:
        case BasicTypeInfo(basic_type=basic):
            return _BASIC[basic]
        case DateTypeInfo():
            return pa.date32()
        case TimeTypeInfo():
            return pa.time64("us")
        case TimestampTypeInfo():
            return pa.timestamp("us")
        case PrimitiveArrayTypeInfo(element_type=BasicTypeInfo(basic_type=BasicType.BYTE)):
            return pa.binary()
        case (
            PrimitiveArrayTypeInfo(element_type=element)
            | BasicArrayTypeInfo(element_type=element)
            | ObjectArrayTypeInfo(element_type=element)
            | ListTypeInfo(element_type=element)
        ):
            return pa.list_(arrow_type(element))
        case MapTypeInfo(key_type=key, value_type=value):
            return pa.map_(arrow_type(key), arrow_type(value))
        case RowTypeInfo():
            names = type_info.names
            return pa.struct(
                [
                    pa.field(n, arrow_type(t))
                    for n, t in zip(names, type_info.field_types, strict=True)
                ]
            )
        case TupleTypeInfo(field_types=types):
            return pa.struct([pa.field(f"f{i}", arrow_type(t)) for i, t in enumerate(types)])
    raise TypeError(
        f"{type_info!r} has no column type in a table: declare the stream's field types "
        "with Types.ROW_NAMED([names], [types]) of basic, date/time, array, list, map or row types"
    )


def arrow_schema(type_info: Any, what: str) -> pa.Schema:
    """The Arrow schema of a stream of rows of `type_info` (a ROW / ROW_NAMED type, else a
    TypeError saying what `what` needs)."""
    rows = row_type(type_info, what)
    return pa.schema(
        [pa.field(n, arrow_type(t)) for n, t in zip(rows.names, rows.field_types, strict=True)]
    )


def _converter(type_info: TypeInformation) -> Fn | None:
    """A function making a value of `type_info` acceptable to `pa.array`, None if it is as is."""
    match type_info:
        case BasicTypeInfo(basic_type=BasicType.BIG_INT):
            return lambda v: None if v is None else decimal.Decimal(v)
        case RowTypeInfo() | TupleTypeInfo():
            names = (
                list(type_info.names)
                if isinstance(type_info, RowTypeInfo)
                else [f"f{i}" for i in range(len(type_info.field_types))]
            )
            convs = [_converter(t) for t in type_info.field_types]

            def struct(v: Any) -> dict[str, Any] | None:
                if v is None:
                    return None
                values = row_values(v, names)
                return {
                    n: (c(x) if c is not None else x)
                    for n, c, x in zip(names, convs, values, strict=True)
                }

            return struct
        case (
            BasicArrayTypeInfo(element_type=element)
            | ObjectArrayTypeInfo(element_type=element)
            | ListTypeInfo(element_type=element)
        ):
            conv = _converter(element)
            if conv is None:
                return None
            return lambda v: None if v is None else [conv(x) for x in v]
        case MapTypeInfo(key_type=key, value_type=value):
            k, c = _converter(key), _converter(value)
            if k is None and c is None:
                return None
            k = k or (lambda x: x)
            c = c or (lambda x: x)
            return lambda v: None if v is None else [(k(a), c(b)) for a, b in v.items()]
    return None


class RowBatches:
    """Converts lists of records of one ROW / ROW_NAMED type into record batches of its
    `schema`; a record or value that does not fit raises FieldError naming the column."""

    def __init__(self, type_info: Any, what: str) -> None:
        rows = row_type(type_info, what)
        self.schema = arrow_schema(rows, what)
        self.names = list(rows.names)
        self._convs = [_converter(t) for t in rows.field_types]

    def batch(self, records: list[Any]) -> pa.RecordBatch:
        names = self.names
        try:
            values = [row_values(r, names) for r in records]
        except FieldError as e:
            raise FieldError(f"a record does not fit the table's row type: {e}") from None
        columns = list(zip(*values, strict=True)) if values else [() for _ in names]
        arrays = []
        for name, conv, field, column in zip(names, self._convs, self.schema, columns, strict=True):
            data = [conv(v) for v in column] if conv is not None else column
            try:
                arrays.append(pa.array(data, type=field.type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as e:
                raise FieldError(f"column {name!r} ({field.type}): {e}", [name]) from None
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)
