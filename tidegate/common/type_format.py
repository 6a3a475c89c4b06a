"""How `DataStream.print()` writes a record of a declared type: what PyFlink prints for it.

PyFlink hands a typed stream's records to Java, whose print sink writes `record.toString()`:

* Tuple `(hi,0,5,4)`; List `[a, b]`; Map `{k=v, k2=v2}` in the order a Java HashMap of that size
  iterates; an array `[1, 2]` (Arrays.toString, as inside a Tuple; a top-level array would print
  Java's identity hash, which nothing can reproduce); a Row inside another type `+I[a, 1]`;
* basic types as Java prints them: `true`/`false`, Double and Float like Java's
  `Double.toString`/`Float.toString` (shortest digits that round-trip, as Java 19+: `1.0`,
  `1.0E-5`, `1.0E10`, `NaN`, `Infinity`), BigDecimal like `BigDecimal.toString`, dates and times
  like java.sql.Date/Time/Timestamp and Instant; None is `null`; a string inside a composite is
  written without quotes.

Two cases are formatted on the Python side by PyFlink itself (DataStream._align_output_type),
and so here too:

* a stream without a declared type (PICKLED_BYTE_ARRAY): `str(record)`;
* a stream of `Types.ROW`/`ROW_NAMED`: the row kind and the fields' Python `str()` joined by a
  comma without a space, `+I[hi,0,5,4]`, after the fields went through the declared field types
  (a DOUBLE field holding 1 prints `1.0`, a FLOAT field holds a 32-bit float).

A value that does not fit its type (a str where INT was declared, a tuple of the wrong arity, an
INT out of 32 bits, a Row missing a declared field name) raises `RecordTypeError` saying where
in the record and what the type expected, instead of printing a wrong line.

`printer(type_info)` compiles a type once into the function that formats its records;
`converter(type_info)` into the one that gives a value as PyFlink's coders give it back (used for
`from_collection(collection, type_info)`, whose elements PyFlink converts when the job is built).
"""

from __future__ import annotations

import datetime as _dt
import math
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

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
    TupleTypeInfo,
    TypeInformation,
)
from tidegate.common.types import Row, RowKind

__all__ = [
    "RecordTypeError",
    "converter",
    "java_double",
    "java_float",
    "java_string",
    "printer",
]

Fn = Callable[[Any], Any]


class RecordTypeError(TypeError):
    """A record (or a part of it) does not match its declared type."""


def _fail(value: Any, type_info: TypeInformation, expected: str) -> RecordTypeError:
    return RecordTypeError(
        f"{value!r} ({type(value).__name__}) does not match {type_info!r}: {expected}"
    )


def _within(where: str, fn: Fn) -> Fn:
    """`fn` whose errors say they are about `where` (a field, an element ...)."""

    def checked(value: Any) -> Any:
        try:
            return fn(value)
        except RecordTypeError as e:
            raise RecordTypeError(f"{where}: {e}") from None

    return checked


# Java's number formatting ---------------------------------------------------------------------
_F32 = struct.Struct(">f")


def to_float32(value: float) -> float:
    """`value` rounded to a 32-bit float (what a FLOAT holds); OverflowError if too large."""
    return _F32.unpack(_F32.pack(value))[0]


def _java_digits(negative: bool, digits: str, exponent: int, magnitude: float) -> str:
    """Java's Double/Float.toString of the number with significant `digits` whose first digit
    has the decimal `exponent`: plain between 10**-3 and 10**7, computerized scientific
    (`1.0E-5`) outside."""
    digits = digits.rstrip("0") or "0"
    sign = "-" if negative else ""
    if 1e-3 <= magnitude < 1e7:
        if exponent >= 0:
            whole = (digits[: exponent + 1]).ljust(exponent + 1, "0")
            frac = digits[exponent + 1 :] or "0"
        else:
            whole, frac = "0", "0" * (-exponent - 1) + digits
        return f"{sign}{whole}.{frac}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exponent}"


def _special(value: float) -> str | None:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    return None


def _decimal_digits(text: str) -> tuple[str, int]:
    """(significant digits, exponent of the first one) of the number `text`."""
    _sign, digit_tuple, exp = Decimal(text).as_tuple()
    assert isinstance(exp, int)
    return "".join(map(str, digit_tuple)), len(digit_tuple) - 1 + exp


def java_double(value: float) -> str:
    """Java's `Double.toString(value)`: 1.0, 0.001, 1.0E-5, 1.0E10, NaN, -Infinity."""
    special = _special(value)
    if special is not None:
        return special
    digits, exponent = _decimal_digits(repr(value))  # repr: the shortest round-trip digits
    if len(digits) == 1:  # Java shows two digits (d.d): the two closest to the exact value
        digits, exponent = _decimal_digits(f"{value:.1e}")
    return _java_digits(value < 0, digits, exponent, abs(value))


def java_float(value: float) -> str:
    """Java's `Float.toString` of the 32-bit float `value`: the fewest digits that read back
    as that float."""
    special = _special(value)
    if special is not None:
        return special
    text = repr(value)
    for precision in range(2, 10):  # at least two digits (d.d), as Java shows
        text = f"{value:.{precision - 1}e}"
        if to_float32(float(text)) == value:
            break
    digits, exponent = _decimal_digits(text)
    return _java_digits(value < 0, digits, exponent, abs(value))


def java_big_decimal(value: Decimal) -> str:
    """Java's `BigDecimal.toString` (the same scientific-notation rule as Python's; Java has
    no negative zero)."""
    if value.is_zero():
        value = abs(value)
    return str(value)


# Java's hashCode, for the iteration order of a HashMap -----------------------------------------
_MASK32 = 0xFFFFFFFF
_D64 = struct.Struct(">d")
_Q64 = struct.Struct(">Q")


def _int32(v: int) -> int:
    return v & _MASK32


def _string_hash(s: str) -> int:
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & _MASK32
    return h


def _long_hash(v: int) -> int:
    u = v & 0xFFFFFFFFFFFFFFFF
    return _int32(u ^ (u >> 32))


def _double_hash(v: float) -> int:
    bits = 0x7FF8000000000000 if math.isnan(v) else _Q64.unpack(_D64.pack(v))[0]
    return _int32(bits ^ (bits >> 32))


def _float_hash(v: float) -> int:
    if math.isnan(v):
        return 0x7FC00000
    return struct.unpack(">I", _F32.pack(v))[0]


_HASHES: dict[BasicType, Callable[[Any], int]] = {
    BasicType.STRING: _string_hash,
    BasicType.CHAR: _string_hash,
    BasicType.INT: _int32,
    BasicType.SHORT: _int32,
    BasicType.BYTE: _int32,
    BasicType.LONG: _long_hash,
    BasicType.BOOLEAN: lambda v: 1231 if v else 1237,
    BasicType.DOUBLE: _double_hash,
    BasicType.FLOAT: _float_hash,
}


def _hash_map_capacity(size: int) -> int:
    """The table size of Flink's `new HashMap<>(size)` after `size` puts."""
    capacity = 1 if size <= 1 else 1 << (size - 1).bit_length()
    threshold = int(capacity * 0.75)
    for n in range(1, size + 1):
        if n > threshold:
            old, capacity = capacity, capacity * 2
            threshold = threshold * 2 if old >= 16 else int(capacity * 0.75)
    return capacity


def java_hash_map_order(keys: list[Any], key_type: TypeInformation) -> list[int]:
    """The positions of `keys` in the order a Java HashMap built by Flink's MapSerializer
    iterates them (by bucket, then insertion); insertion order for key types whose Java
    hashCode is not reproduced here."""
    hash_of = _HASHES.get(getattr(key_type, "basic_type", None))  # type: ignore[arg-type]
    if hash_of is None:
        return list(range(len(keys)))
    mask = _hash_map_capacity(len(keys)) - 1

    def bucket(i: int) -> int:
        key = keys[i]
        h = 0 if key is None else hash_of(key)
        return (h ^ (h >> 16)) & mask

    return sorted(range(len(keys)), key=bucket)


# checking and normalising values: what PyFlink's coders make of them ---------------------------
_INT_BITS = {BasicType.BYTE: 8, BasicType.SHORT: 16, BasicType.INT: 32, BasicType.LONG: 64}


def _integer(t: BasicTypeInfo) -> Fn:
    bits = _INT_BITS[t.basic_type]
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def check(v: Any) -> int:
        if not isinstance(v, int):
            raise _fail(v, t, "expected an int")
        if not low <= v <= high:
            raise _fail(v, t, f"out of range [{low}, {high}] (use a wider type)")
        return int(v)

    return check


def _number(t: BasicTypeInfo, single: bool) -> Fn:
    def check(v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise _fail(v, t, "expected a float or an int")
        if not single:
            return float(v)
        try:
            return to_float32(float(v))
        except OverflowError:
            raise _fail(v, t, "too large for a 32-bit float (use Types.DOUBLE())") from None

    return check


def _instance(t: TypeInformation, cls: type | tuple[type, ...], what: str) -> Fn:
    def check(v: Any) -> Any:
        if not isinstance(v, cls):
            raise _fail(v, t, f"expected {what}")
        return v

    return check


def _basic_norm(t: BasicTypeInfo) -> Fn:
    b = t.basic_type
    if b in _INT_BITS:
        return _integer(t)
    if b is BasicType.FLOAT or b is BasicType.DOUBLE:
        return _number(t, single=b is BasicType.FLOAT)
    if b is BasicType.STRING:
        return _instance(t, str, "a str")
    if b is BasicType.BOOLEAN:
        return _instance(t, bool, "a bool")
    if b is BasicType.BIG_INT:
        return _instance(t, int, "an int")
    if b is BasicType.INSTANT:
        return _instance(t, _dt.datetime, "a datetime.datetime")
    if b is BasicType.CHAR:

        def char(v: Any) -> str:
            if not isinstance(v, str) or len(v) != 1:
                raise _fail(v, t, "expected a str of one character")
            return v

        return char

    def big_dec(v: Any) -> Decimal:
        if isinstance(v, int) and not isinstance(v, bool):
            return Decimal(v)
        if not isinstance(v, Decimal) or not v.is_finite():
            raise _fail(v, t, "expected a finite decimal.Decimal")
        return v

    return big_dec


def _date_norm(t: TypeInformation) -> Fn:
    def check(v: Any) -> _dt.date:
        if not isinstance(v, _dt.date):
            raise _fail(v, t, "expected a datetime.date")
        return v.date() if isinstance(v, _dt.datetime) else v

    return check


def _timestamp_norm(t: TypeInformation) -> Fn:
    def check(v: Any) -> _dt.datetime:
        if not isinstance(v, _dt.datetime):
            raise _fail(v, t, "expected a datetime.datetime")
        # an aware datetime is an instant, shown (as Java does) in the local time zone
        return v.astimezone().replace(tzinfo=None) if v.tzinfo is not None else v

    return check


def _fields_of(value: Any, t: TupleTypeInfo | RowTypeInfo) -> tuple[list[Any], RowKind]:
    """The field values of `value` for a tuple or row type, and its row kind."""
    arity = len(t.field_types)
    if isinstance(t, RowTypeInfo):
        if isinstance(value, Row) and value._fields is not None:
            missing = [n for n in t.names if n not in value._fields]
            if missing:
                raise _fail(
                    value,
                    t,
                    f"the row has no field {missing[0]!r} (its fields are {value._fields}; a Row "
                    "with field names is read by name: declare Types.ROW_NAMED with its names, "
                    "or build the Row positionally)",
                )
            return [value[n] for n in t.names], value.get_row_kind()
        if isinstance(value, dict):
            return [value.get(n) for n in t.names], RowKind.INSERT
        accepted = "a Row, tuple, list or dict"
    else:
        accepted = "a tuple, list or Row"
    if not isinstance(value, tuple | list | Row):
        raise _fail(value, t, f"expected {accepted} of {arity} fields")
    if len(value) != arity:
        raise _fail(value, t, f"expected {arity} fields, got {len(value)}")
    kind = value.get_row_kind() if isinstance(value, Row) else RowKind.INSERT
    return list(value), kind


_SEQUENCES = (ListTypeInfo, PrimitiveArrayTypeInfo, BasicArrayTypeInfo, ObjectArrayTypeInfo)


def _norm(t: TypeInformation) -> Fn:
    """value -> the value as PyFlink's coder for `t` gives it back (tuple for a TUPLE, a named
    Row for a ROW, list for LIST and arrays, dict for MAP); RecordTypeError if it does not fit.
    None stays None."""
    inner = _norm_not_none(t)

    def norm(v: Any) -> Any:
        return None if v is None else inner(v)

    return norm


def _norm_not_none(t: TypeInformation) -> Fn:
    if isinstance(t, BasicTypeInfo):
        return _basic_norm(t)
    if isinstance(t, PickledBytesTypeInfo):
        return lambda v: v
    if isinstance(t, DateTypeInfo):
        return _date_norm(t)
    if isinstance(t, TimeTypeInfo):
        return _instance(t, _dt.time, "a datetime.time")
    if isinstance(t, TimestampTypeInfo):
        return _timestamp_norm(t)
    if isinstance(t, TupleTypeInfo | RowTypeInfo):
        return _composite_norm(t)
    if isinstance(t, _SEQUENCES):
        return _sequence_norm(t, t.element_type)
    if isinstance(t, MapTypeInfo):
        return _map_norm(t)
    raise TypeError(f"no format is known for {t!r}")


def _composite_norm(t: TupleTypeInfo | RowTypeInfo) -> Fn:
    names = t.names if isinstance(t, RowTypeInfo) else None
    fields = [
        _within(f"field {names[i]!r}" if names else f"field {i}", _norm(ft))
        for i, ft in enumerate(t.field_types)
    ]

    def norm(v: Any) -> Any:
        values, kind = _fields_of(v, t)
        out = [f(x) for f, x in zip(fields, values, strict=True)]
        if names is None:
            return tuple(out)
        row = Row(*out)
        row._fields = list(names)
        row._row_kind = kind
        return row

    return norm


def _sequence_norm(t: TypeInformation, element_type: TypeInformation) -> Fn:
    element = _norm(element_type)
    primitive = isinstance(t, PrimitiveArrayTypeInfo)
    byte_array = primitive and element_type == BasicTypeInfo(BasicType.BYTE)

    def norm(v: Any) -> list[Any]:
        if byte_array and isinstance(v, bytes | bytearray):
            return [b - 256 if b > 127 else b for b in v]  # Java bytes are signed
        if not isinstance(v, list | tuple):
            raise _fail(v, t, "expected a list")
        out = []
        for i, x in enumerate(v):
            if x is None and primitive:
                raise RecordTypeError(f"element {i}: None in {t!r} (primitives cannot be null)")
            try:
                out.append(element(x))
            except RecordTypeError as e:
                raise RecordTypeError(f"element {i}: {e}") from None
        return out

    return norm


def _map_norm(t: MapTypeInfo) -> Fn:
    key, value = _within("a key", _norm(t.key_type)), _norm(t.value_type)

    def norm(v: Any) -> dict[Any, Any]:
        if not isinstance(v, dict):
            raise _fail(v, t, "expected a dict")
        out = {}
        for k, x in v.items():
            try:
                out[key(k)] = value(x)
            except RecordTypeError as e:
                raise RecordTypeError(f"the value of {k!r}: {e}") from None
        return out

    return norm


# Java's toString of normalised values ----------------------------------------------------------
def _java(t: TypeInformation) -> Fn:
    """normalised value -> Java's toString of it as type `t` (None: null)."""
    inner = _java_not_none(t)

    def java(v: Any) -> str:
        return "null" if v is None else inner(v)

    return java


def _java_basic(t: BasicTypeInfo) -> Fn:
    b = t.basic_type
    if b is BasicType.BOOLEAN:
        return lambda v: "true" if v else "false"
    if b is BasicType.DOUBLE:
        return java_double
    if b is BasicType.FLOAT:
        return java_float
    if b is BasicType.BIG_DEC:
        return java_big_decimal
    if b is BasicType.INSTANT:
        return _java_instant
    return str


def _java_instant(v: _dt.datetime) -> str:
    utc = v.astimezone(_dt.UTC) if v.tzinfo is not None else v
    text = utc.strftime("%Y-%m-%dT%H:%M:%S")
    if utc.microsecond:
        micros = f"{utc.microsecond:06d}"
        text += "." + (micros[:3] if micros.endswith("000") else micros)
    return text + "Z"


def _java_timestamp(v: _dt.datetime) -> str:
    nanos = f"{v.microsecond * 1000:09d}".rstrip("0") or "0"
    return f"{_java_date(v)} {v.hour:02d}:{v.minute:02d}:{v.second:02d}.{nanos}"


def _java_date(v: _dt.date) -> str:
    return f"{v.year:04d}-{v.month:02d}-{v.day:02d}"


def _java_not_none(t: TypeInformation) -> Fn:
    if isinstance(t, BasicTypeInfo):
        return _java_basic(t)
    if isinstance(t, PickledBytesTypeInfo):
        return str  # Java would print the pickle's bytes; the object's str is what is meant
    if isinstance(t, DateTypeInfo):
        return _java_date
    if isinstance(t, TimeTypeInfo):
        return lambda v: f"{v.hour:02d}:{v.minute:02d}:{v.second:02d}"
    if isinstance(t, TimestampTypeInfo):
        return _java_timestamp
    if isinstance(t, TupleTypeInfo):
        fields = [_java(ft) for ft in t.field_types]
        return lambda v: "(" + ",".join(f(x) for f, x in zip(fields, v, strict=True)) + ")"
    if isinstance(t, RowTypeInfo):
        row_fields = [_java(ft) for ft in t.field_types]

        def java_row(v: Row) -> str:
            values = ", ".join(f(x) for f, x in zip(row_fields, v, strict=True))
            return f"{v.get_row_kind()}[{values}]"

        return java_row
    if isinstance(t, _SEQUENCES):
        element = _java(t.element_type)
        return lambda v: "[" + ", ".join(element(x) for x in v) + "]"
    if isinstance(t, MapTypeInfo):
        return _java_map(t)
    raise TypeError(f"no format is known for {t!r}")


def _java_map(t: MapTypeInfo) -> Fn:
    key, value = _java(t.key_type), _java(t.value_type)

    def java_map(v: dict[Any, Any]) -> str:
        items = list(v.items())
        order = java_hash_map_order([k for k, _ in items], t.key_type)
        return "{" + ", ".join(f"{key(items[i][0])}={value(items[i][1])}" for i in order) + "}"

    return java_map


# the entry points ------------------------------------------------------------------------------
def java_string(value: Any, type_info: TypeInformation) -> str:
    """Java's toString of `value` as a `type_info` (what Flink's print writes for it)."""
    return printer_java(type_info)(value)


def printer_java(type_info: TypeInformation) -> Fn:
    norm, java = _norm(type_info), _java(type_info)
    return lambda v: java(norm(v))


def _python_row_printer(t: RowTypeInfo) -> Fn:
    """PyFlink's own formatting of a Row-typed stream: kind[str(f0),str(f1),...]."""
    norm = _norm(t)

    def print_row(v: Any) -> str:
        if v is None:
            raise _fail(v, t, "a Row-typed stream cannot hold None")
        row = norm(v)
        return "{}[{}]".format(row.get_row_kind(), ",".join(str(x) for x in row))

    return print_row


def converter(type_info: TypeInformation | None) -> Fn:
    """value -> the value as a record of `type_info` reaches the next function in PyFlink (a
    tuple for a TUPLE, a Row with the declared field names for a ROW, a float for a DOUBLE,
    ...); RecordTypeError if it does not fit. Undeclared (None, PICKLED_BYTE_ARRAY): as is."""
    if type_info is None or isinstance(type_info, PickledBytesTypeInfo):
        return lambda v: v
    return _norm(type_info)


def printer(type_info: TypeInformation | None) -> Callable[[Any], str]:
    """The function writing a record of a stream of `type_info` as PyFlink's print() does."""
    if type_info is None or isinstance(type_info, PickledBytesTypeInfo):
        return str
    if isinstance(type_info, RowTypeInfo):
        return _python_row_printer(type_info)
    return printer_java(type_info)
