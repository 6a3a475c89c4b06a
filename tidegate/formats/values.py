"""Scalar values read from text or from parsed JSON, and dates and times written as text: the
conversions JSON and CSV share.

Readers accept what Flink's JSON and CSV formats accept for a declared type: a number field may
hold a JSON number or a string of one (`"42"`), a DOUBLE also `"NaN"`, `"Infinity"`,
`"-Infinity"` (what Flink writes for them); an integer type rejects fractions and values out of
its range instead of truncating them.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import math
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

from tidegate.common.type_format import java_double, to_float32
from tidegate.common.typeinfo import BasicType, BasicTypeInfo
from tidegate.formats.base import FieldError

__all__ = [
    "basic_reader",
    "date_text",
    "parse_date",
    "parse_time",
    "parse_timestamp",
    "read_base64",
    "time_text",
    "timestamp_text",
]

Fn = Callable[[Any], Any]

_INT_BITS = {BasicType.BYTE: 8, BasicType.SHORT: 16, BasicType.INT: 32, BasicType.LONG: 64}
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _bad(value: Any, expected: str) -> FieldError:
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    return FieldError(f"expected {expected}, got {shown}")


def _integer(basic: BasicType) -> Fn:
    bits = _INT_BITS.get(basic)
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if bits else (None, None)
    name = basic.name

    def read(v: Any) -> int:
        if type(v) is int:
            n = v
        elif isinstance(v, str):
            try:
                n = int(v.strip())
            except ValueError:
                raise _bad(v, f"an integer ({name})") from None
        elif isinstance(v, float) and v.is_integer():
            n = int(v)
        else:
            raise _bad(v, f"an integer ({name})")
        if low is not None and not low <= n <= high:  # type: ignore[operator]
            raise FieldError(f"{n} is out of range for {name} [{low}, {high}]")
        return n

    return read


def _floating(single: bool) -> Fn:
    def read(v: Any) -> float:
        if type(v) is float or (type(v) is int):
            f = float(v)
        elif isinstance(v, str):
            text = v.strip()
            f = _NON_FINITE.get(text)  # type: ignore[assignment]
            if f is None:
                try:
                    f = float(text)
                except ValueError:
                    raise _bad(v, "a number") from None
        elif isinstance(v, Decimal):
            f = float(v)
        else:
            raise _bad(v, "a number")
        if single and math.isfinite(f):
            try:
                f = to_float32(f)
            except OverflowError:
                raise FieldError(f"{v!r} is too large for a FLOAT (use DOUBLE)") from None
        return f

    return read


def _boolean(v: Any) -> bool:
    if type(v) is bool:
        return v
    if isinstance(v, str):
        text = v.strip().lower()
        if text in ("true", "false"):
            return text == "true"
    raise _bad(v, "a boolean (true or false)")


def _decimal(v: Any) -> Decimal:
    if isinstance(v, Decimal):
        d = v
    elif type(v) is int:
        d = Decimal(v)
    elif isinstance(v, float):
        d = Decimal(repr(v))  # the shortest digits of the float, not its binary expansion
    elif isinstance(v, str):
        try:
            d = Decimal(v.strip())
        except InvalidOperation:
            raise _bad(v, "a decimal number") from None
    else:
        raise _bad(v, "a decimal number")
    if not d.is_finite():
        raise _bad(v, "a finite decimal number")
    return d


def _text(v: Any) -> str:
    if isinstance(v, str):
        return v
    raise _bad(v, "a string")


def _char(v: Any) -> str:
    if isinstance(v, str) and len(v) == 1:
        return v
    raise _bad(v, "a single character")


def basic_reader(t: BasicTypeInfo) -> Fn:
    """A reader of a non-null value of basic type `t` from text or a JSON scalar."""
    b = t.basic_type
    if b in _INT_BITS or b is BasicType.BIG_INT:
        return _integer(b)
    if b is BasicType.DOUBLE or b is BasicType.FLOAT:
        return _floating(b is BasicType.FLOAT)
    if b is BasicType.BOOLEAN:
        return _boolean
    if b is BasicType.BIG_DEC:
        return _decimal
    if b is BasicType.CHAR:
        return _char
    if b is BasicType.INSTANT:
        return parse_instant
    return _text


# dates and times ------------------------------------------------------------------------------
def parse_date(v: Any) -> dt.date:
    """`yyyy-MM-dd` (Flink's date format in JSON and CSV)."""
    try:
        return dt.date.fromisoformat(_text(v).strip())
    except ValueError:
        raise _bad(v, "a date yyyy-MM-dd") from None


def parse_time(v: Any) -> dt.time:
    """`HH:mm:ss[.fraction]`, optionally followed by `Z` (as Flink's JSON writes it)."""
    text = _text(v).strip()
    try:
        return dt.time.fromisoformat(text[:-1] if text.endswith("Z") else text)
    except ValueError:
        raise _bad(v, "a time HH:mm:ss[.fraction]") from None


def parse_timestamp(v: Any) -> dt.datetime:
    """`yyyy-MM-ddTHH:mm:ss[.fraction][Z]` (JSON) or with a space (CSV); a naive datetime.
    An explicit offset other than UTC is refused, as Flink's JSON format does."""
    try:
        value = dt.datetime.fromisoformat(_text(v).strip())
    except ValueError:
        raise _bad(v, "a timestamp yyyy-MM-ddTHH:mm:ss[.fraction][Z]") from None
    if value.tzinfo is not None:
        if value.utcoffset() != dt.timedelta(0):
            raise _bad(v, "a timestamp in UTC (ending in Z); other offsets are not supported")
        value = value.replace(tzinfo=None)
    return value


def parse_instant(v: Any) -> dt.datetime:
    """An ISO-8601 instant (`...Z`), as an aware datetime in UTC."""
    try:
        value = dt.datetime.fromisoformat(_text(v).strip())
    except ValueError:
        raise _bad(v, "an instant yyyy-MM-ddTHH:mm:ss[.fraction]Z") from None
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC)


def _fraction(microsecond: int) -> str:
    """Java's fraction of a second: no digits for zero, else without trailing zeros."""
    return "." + f"{microsecond:06d}".rstrip("0") if microsecond else ""


def date_text(v: dt.date) -> str:
    return f"{v.year:04d}-{v.month:02d}-{v.day:02d}"


def time_text(v: dt.time, suffix: str = "") -> str:
    return f"{v.hour:02d}:{v.minute:02d}:{v.second:02d}{_fraction(v.microsecond)}{suffix}"


def timestamp_text(v: dt.datetime, separator: str = "T", suffix: str = "") -> str:
    """A timestamp as text; an aware datetime is given in UTC."""
    if v.tzinfo is not None:
        v = v.astimezone(dt.UTC)
    return f"{date_text(v)}{separator}{time_text(v.time(), suffix)}"


def double_text(v: float) -> str:
    """Java's `Double.toString` (`1.5`, `1.0E10`, `NaN`); the fast path where Python's repr
    writes the same digits."""
    if 1e-3 <= abs(v) < 1e7:
        return repr(v)
    return java_double(v)


def read_base64(v: Any) -> list[int]:
    """A BYTE array written as base64 text (as Flink's JSON and CSV write it), as the list of
    signed bytes a `PRIMITIVE_ARRAY(BYTE())` value is in tidegate (common/type_format.py)."""
    try:
        raw = base64.b64decode(_text(v), validate=True)
    except (binascii.Error, ValueError):
        raise _bad(v, "base64 bytes") from None
    return [b - 256 if b > 127 else b for b in raw]


def write_base64(v: Any) -> str:
    if isinstance(v, list | tuple):
        v = bytes(b & 0xFF for b in v)  # a list of (signed) Java bytes
    if not isinstance(v, bytes | bytearray | memoryview):
        raise _bad(v, "bytes")
    return base64.b64encode(v).decode("ascii")
