"""JSON objects <-> Rows of a declared `Types.ROW_NAMED` type (Flink's JsonRow(De)Serialization
Schema).

Reading: a message is one JSON object; each declared field is read by name and converted to its
type (a number field also takes a string of one, as Flink's format does); undeclared keys are
ignored; a missing key is None unless `fail_on_missing_field`; JSON null is None. Writing: a Row
(or tuple, list, dict) becomes one compact JSON object with the declared field names, in their
order. Dates and times are written as Flink writes them: DATE `2024-05-01`, TIME `12:30:00Z`,
TIMESTAMP `2024-05-01T12:30:00.25Z` (the fraction only as long as needed), NaN and infinities
as the strings `"NaN"`, `"Infinity"`, `"-Infinity"`, BIG_DEC and BIG_INT as exact JSON numbers,
a BYTE array as base64.

Parsing uses orjson; a type holding BIG_INT or BIG_DEC is parsed by the standard library
instead, because orjson reads integers beyond 64 bits and decimals as floats (losing digits).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import orjson

from tidegate.common.type_format import java_float, to_float32
from tidegate.common.typeinfo import (
    BasicArrayTypeInfo,
    BasicType,
    BasicTypeInfo,
    DateTypeInfo,
    ListTypeInfo,
    MapTypeInfo,
    ObjectArrayTypeInfo,
    PickledBytesTypeInfo,
    PrimitiveArrayTypeInfo,
    RowTypeInfo,
    TimestampTypeInfo,
    TimeTypeInfo,
    TypeInformation,
)
from tidegate.formats.base import FieldError, FormatError, new_row, row_values
from tidegate.formats.values import (
    basic_reader,
    date_text,
    parse_date,
    parse_time,
    parse_timestamp,
    read_base64,
    time_text,
    timestamp_text,
    write_base64,
)

__all__ = ["json_reader", "json_writer", "needs_exact_numbers"]

Fn = Callable[[Any], Any]
_MISSING = object()
_SEQUENCES = (ListTypeInfo, BasicArrayTypeInfo, ObjectArrayTypeInfo, PrimitiveArrayTypeInfo)
_BYTES = PrimitiveArrayTypeInfo(BasicTypeInfo(BasicType.BYTE))
_LONG_RANGE = range(-(1 << 63), 1 << 63)


def _unsupported(t: TypeInformation) -> TypeError:
    return TypeError(
        f"the JSON format does not support {t!r} (use ROW, LIST, MAP, arrays and basic types)"
    )


def _children(t: TypeInformation) -> list[TypeInformation]:
    if isinstance(t, RowTypeInfo):
        return list(t.field_types)
    if isinstance(t, _SEQUENCES):
        return [t.element_type]
    if isinstance(t, MapTypeInfo):
        return [t.key_type, t.value_type]
    return []


def needs_exact_numbers(t: TypeInformation) -> bool:
    """Whether `t` holds BIG_INT or BIG_DEC anywhere (they need the exact parser)."""
    if isinstance(t, BasicTypeInfo):
        return t.basic_type in (BasicType.BIG_INT, BasicType.BIG_DEC)
    return any(needs_exact_numbers(c) for c in _children(t))


# reading ---------------------------------------------------------------------------------------
def _exact_number(v: Any) -> Any:
    """orjson's `default` for the Decimals the exact parser gives: the number's own digits."""
    if isinstance(v, Decimal):
        return orjson.Fragment(str(v).encode())
    raise TypeError(f"{type(v).__name__} is not JSON")


def _json_text(v: Any) -> str:
    """A STRING field holding another JSON value: its JSON text (`42`, `true`, `{"a":1}`)."""
    return orjson.dumps(v, default=_exact_number).decode()


def _string(v: Any) -> str:
    return v if type(v) is str else _json_text(v)


def _reader(t: TypeInformation, fail_on_missing: bool, wide_ints: bool) -> Fn:
    """A reader of a non-null parsed JSON value of type `t` (`wide_ints`: the parser gives
    integers beyond 64 bits)."""
    if isinstance(t, BasicTypeInfo):
        return _string if t.basic_type is BasicType.STRING else basic_reader(t)
    if isinstance(t, DateTypeInfo):
        return parse_date
    if isinstance(t, TimeTypeInfo):
        return parse_time
    if isinstance(t, TimestampTypeInfo):
        return parse_timestamp
    if isinstance(t, PickledBytesTypeInfo):
        return lambda v: v
    if isinstance(t, RowTypeInfo):
        return _row_reader(t, fail_on_missing, wide_ints)
    if t == _BYTES:
        return read_base64
    if isinstance(t, _SEQUENCES):
        element = _reader(t.element_type, fail_on_missing, wide_ints)
        return _list_reader(t, element, _exact_read(t.element_type, wide_ints))
    if isinstance(t, MapTypeInfo):
        return _map_reader(t, fail_on_missing, wide_ints)
    raise _unsupported(t)


def _exact_read(t: TypeInformation, wide_ints: bool) -> type | None:
    """The Python type a parsed JSON value of `t` already has when it needs no conversion
    (orjson's ints are within 64 bits, its floats finite: NaN arrives as a string)."""
    if not isinstance(t, BasicTypeInfo):
        return None
    return {
        BasicType.STRING: str,
        BasicType.LONG: None if wide_ints else int,
        BasicType.BIG_INT: int,
        BasicType.BOOLEAN: bool,
        BasicType.DOUBLE: float,
    }.get(t.basic_type)


def _row_reader(t: RowTypeInfo, fail_on_missing: bool, wide_ints: bool) -> Fn:
    fields = list(t.names)
    triples = [
        (n, _exact_read(ft, wide_ints), _reader(ft, fail_on_missing, wide_ints))
        for n, ft in zip(fields, t.field_types, strict=True)
    ]

    def read_row(v: Any) -> Any:
        if type(v) is not dict:
            raise FieldError(f"expected a JSON object, got {_json_text(v)[:60]}")
        get = v.get
        values = []
        append = values.append
        name = ""
        try:
            for name, exact, read in triples:
                x = get(name, _MISSING)
                if type(x) is exact or x is None:
                    append(x)
                elif x is _MISSING:
                    if fail_on_missing:
                        raise FieldError("the field is missing")
                    append(None)
                else:
                    append(read(x))
        except FieldError as e:
            e.path.append(name)
            raise
        except (ValueError, TypeError, ArithmeticError) as e:
            raise FieldError(str(e), [name]) from None
        return new_row(fields, values)

    return read_row


def _list_reader(t: TypeInformation, element: Fn, exact: type | None) -> Fn:
    nullable = not isinstance(t, PrimitiveArrayTypeInfo)

    def read_list(v: Any) -> list[Any]:
        if type(v) is not list:
            raise FieldError(f"expected a JSON array, got {_json_text(v)[:60]}")
        if exact is not None and all(type(x) is exact for x in v):
            return v  # a fresh list of the parser's: nothing to convert
        out = []
        i = 0
        try:
            for i in range(len(v)):
                x = v[i]
                if x is None:
                    if not nullable:
                        raise FieldError(f"null in {t!r} (primitives cannot be null)")
                    out.append(None)
                else:
                    out.append(element(x))
        except FieldError as e:
            e.path.append(f"[{i}]")
            raise
        return out

    return read_list


def _map_reader(t: MapTypeInfo, fail_on_missing: bool, wide_ints: bool) -> Fn:
    if not isinstance(t.key_type, BasicTypeInfo):
        raise TypeError(f"JSON object keys are text: a MAP key must be a basic type, got {t!r}")
    key = _reader(t.key_type, fail_on_missing, wide_ints)
    value = _reader(t.value_type, fail_on_missing, wide_ints)

    def read_map(v: Any) -> dict[Any, Any]:
        if type(v) is not dict:
            raise FieldError(f"expected a JSON object, got {_json_text(v)[:60]}")
        out = {}
        for k, x in v.items():
            try:
                out[key(k)] = None if x is None else value(x)
            except FieldError as e:
                e.path.append(f"[{k!r}]")
                raise
        return out

    return read_map


def json_reader(t: RowTypeInfo, fail_on_missing_field: bool) -> Callable[[Any], Any]:
    """message (bytes or str) -> Row; FormatError when it is not JSON or does not fit `t`."""
    exact = needs_exact_numbers(t)
    read_row = _row_reader(t, fail_on_missing_field, wide_ints=exact)
    loads: Fn = (lambda m: json.loads(m, parse_float=Decimal)) if exact else orjson.loads

    def read(message: Any) -> Any:
        try:
            node = loads(message)
        except ValueError as e:  # orjson's and json's JSONDecodeError
            msg, pos = getattr(e, "msg", str(e)), getattr(e, "pos", None)
            position = None if pos is None else f"char {pos}"
            raise FormatError("JSON", f"not valid JSON: {msg}", message, position=position) from e
        try:
            return read_row(node)
        except FieldError as e:
            raise FormatError("JSON", e.reason, message, field=e.dotted()) from None

    return read


# writing ---------------------------------------------------------------------------------------
def _bad(v: Any, expected: str) -> FieldError:
    return FieldError(f"expected {expected}, got {type(v).__name__} {v!r:.60}")


def _checked(cls: type, expected: str) -> Fn:
    def write(v: Any) -> Any:
        if type(v) is cls:
            return v
        raise _bad(v, expected)

    return write


def _write_int(v: Any) -> Any:
    if type(v) is int:
        return v
    raise _bad(v, "an int")


def _write_big_int(v: Any) -> Any:
    if type(v) is not int:
        raise _bad(v, "an int")
    return v if v in _LONG_RANGE else orjson.Fragment(str(v).encode())


def _write_double(v: Any) -> Any:
    if type(v) is not float:
        if type(v) is not int:
            raise _bad(v, "a float")
        return float(v)
    if v - v == 0.0:  # finite
        return v
    return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")


def _write_float(v: Any) -> Any:
    f = _write_double(v)
    if isinstance(f, str):
        return f
    return float(java_float(to_float32(f)))  # the float32's shortest digits: 0.1, not 0.10000000149


def _write_decimal(v: Any) -> Any:
    if type(v) is int:
        return v
    if not isinstance(v, Decimal) or not v.is_finite():
        raise _bad(v, "a finite decimal.Decimal")
    return orjson.Fragment(str(v).encode())


def _write_char(v: Any) -> Any:
    if isinstance(v, str) and len(v) == 1:
        return v
    raise _bad(v, "a str of one character")


_BASIC_WRITERS: dict[BasicType, Fn] = {
    BasicType.STRING: _checked(str, "a str"),
    BasicType.BOOLEAN: _checked(bool, "a bool"),
    BasicType.BYTE: _write_int,
    BasicType.SHORT: _write_int,
    BasicType.INT: _write_int,
    BasicType.LONG: _write_int,
    BasicType.BIG_INT: _write_big_int,
    BasicType.DOUBLE: _write_double,
    BasicType.FLOAT: _write_float,
    BasicType.BIG_DEC: _write_decimal,
    BasicType.CHAR: _write_char,
    BasicType.INSTANT: lambda v: timestamp_text(v, "T", "Z"),
}


def _writer(t: TypeInformation) -> Fn:
    """A writer of a non-null value of type `t` into what orjson serialises."""
    if isinstance(t, BasicTypeInfo):
        return _BASIC_WRITERS[t.basic_type]
    if isinstance(t, DateTypeInfo):
        return date_text
    if isinstance(t, TimeTypeInfo):
        return lambda v: time_text(v, "Z")
    if isinstance(t, TimestampTypeInfo):
        return lambda v: timestamp_text(v, "T", "Z")
    if isinstance(t, PickledBytesTypeInfo):
        return lambda v: v
    if isinstance(t, RowTypeInfo):
        return _row_writer(t)
    if t == _BYTES:
        return write_base64
    if isinstance(t, _SEQUENCES):
        return _list_writer(_writer(t.element_type))
    if isinstance(t, MapTypeInfo):
        return _map_writer(t)
    raise _unsupported(t)


def _exact_write(t: TypeInformation) -> type | None:
    """The Python type a value of `t` is written as it is when it has it."""
    if not isinstance(t, BasicTypeInfo):
        return None
    return {
        BasicType.STRING: str,
        BasicType.BYTE: int,
        BasicType.SHORT: int,
        BasicType.INT: int,
        BasicType.LONG: int,
        BasicType.BOOLEAN: bool,
    }.get(t.basic_type)


def _row_writer(t: RowTypeInfo) -> Fn:
    names = list(t.names)
    triples = [
        (n, _exact_write(ft), _writer(ft)) for n, ft in zip(names, t.field_types, strict=True)
    ]

    def write_row(v: Any) -> dict[str, Any]:
        values = row_values(v, names)
        out = {}
        name = ""
        try:
            for (name, exact, write), x in zip(triples, values, strict=True):
                out[name] = x if type(x) is exact or x is None else write(x)
        except FieldError as e:
            e.path.append(name)
            raise
        except (ValueError, TypeError, AttributeError, ArithmeticError) as e:
            raise FieldError(str(e), [name]) from None
        return out

    return write_row


def _list_writer(element: Fn) -> Fn:
    def write_list(v: Any) -> list[Any]:
        if not isinstance(v, list | tuple):
            raise _bad(v, "a list")
        out = []
        i = 0
        try:
            for i in range(len(v)):
                x = v[i]
                out.append(None if x is None else element(x))
        except FieldError as e:
            e.path.append(f"[{i}]")
            raise
        return out

    return write_list


def _key_text(k: Any) -> str:
    if type(k) is str:
        return k
    if type(k) is bool:
        return "true" if k else "false"
    return str(k)


def _map_writer(t: MapTypeInfo) -> Fn:
    if not isinstance(t.key_type, BasicTypeInfo):
        raise TypeError(f"JSON object keys are text: a MAP key must be a basic type, got {t!r}")
    value = _writer(t.value_type)

    def write_map(v: Any) -> dict[str, Any]:
        if not isinstance(v, dict):
            raise _bad(v, "a dict")
        return {_key_text(k): None if x is None else value(x) for k, x in v.items()}

    return write_map


def json_writer(t: RowTypeInfo) -> Callable[[Any], bytes]:
    """record -> the bytes of one compact JSON object; FormatError if it does not fit `t`."""
    write_row = _row_writer(t)
    dumps = orjson.dumps

    def write(record: Any) -> bytes:
        try:
            return dumps(write_row(record))
        except FieldError as e:
            raise FormatError("JSON", e.reason, record, field=e.dotted()) from None
        except TypeError as e:  # a PICKLED_BYTE_ARRAY field holding what JSON cannot hold
            raise FormatError("JSON", str(e), record) from None

    return write
