"""One CSV line <-> a Row of a declared row type (Flink's CsvRow(De)SerializationSchema).

Columns are the row's fields in order. A LIST, array or nested ROW of basic types is one column
whose elements are joined by the array element delimiter (`;` by default), as Flink writes them.
Values are written as Flink (Java) writes them: `true`, `1.0E10`, DATE `2024-05-01`, TIME
`12:30:00`, TIMESTAMP `2024-05-01 12:30:00.0`, a BYTE array as base64; a field that needs it is
quoted, a quote inside doubled (or escaped with the escape character, when one is set).

Reading: the null literal (if set) is None; an empty column is None for every type but STRING
(for STRING it is the empty string). With `ignore_parse_errors`, as in Flink, a column that
cannot be converted is None and a line with too few or too many columns is padded with None or
cut, instead of failing; a line that cannot be split at all (an unclosed quote) is skipped.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidegate.common.type_format import java_float, to_float32
from tidegate.common.typeinfo import (
    BasicArrayTypeInfo,
    BasicType,
    BasicTypeInfo,
    DateTypeInfo,
    ListTypeInfo,
    ObjectArrayTypeInfo,
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
    double_text,
    parse_date,
    parse_time,
    parse_timestamp,
    read_base64,
    time_text,
    timestamp_text,
    write_base64,
)

__all__ = ["CsvOptions", "csv_reader", "csv_writer"]

Fn = Callable[[Any], Any]
_SEQUENCES = (ListTypeInfo, BasicArrayTypeInfo, ObjectArrayTypeInfo, PrimitiveArrayTypeInfo)
_BYTES = PrimitiveArrayTypeInfo(BasicTypeInfo(BasicType.BYTE))
_STRING = BasicTypeInfo(BasicType.STRING)


def _one_char(value: str | None, what: str) -> None:
    if value is not None and (not isinstance(value, str) or len(value) != 1):
        raise ValueError(f"the {what} must be a single character, got {value!r}")


@dataclass(frozen=True)
class CsvOptions:
    """The dialect: Flink's defaults (`,` between fields, `;` between array elements, `"` to
    quote, no escape character, comments not allowed)."""

    field_delimiter: str = ","
    array_element_delimiter: str = ";"
    quote_character: str | None = '"'
    escape_character: str | None = None
    null_literal: str | None = None
    allow_comments: bool = False
    line_delimiter: str = "\n"

    def __post_init__(self) -> None:
        _one_char(self.field_delimiter, "field delimiter")
        _one_char(self.quote_character, "quote character")
        _one_char(self.escape_character, "escape character")
        if not self.array_element_delimiter:
            raise ValueError("the array element delimiter must not be empty")
        if self.line_delimiter not in ("\n", "\r", "\r\n", ""):
            raise ValueError(
                f"the line delimiter must be \\n, \\r, \\r\\n or empty: {self.line_delimiter!r}"
            )
        chars = [self.field_delimiter, self.quote_character, self.escape_character]
        chars = [c for c in chars if c is not None]
        if len(set(chars)) != len(chars):
            raise ValueError(f"delimiter, quote and escape characters must differ: {self}")

    def dialect(self) -> dict[str, Any]:
        """The csv module's reader settings for this dialect."""
        common = {"delimiter": self.field_delimiter, "escapechar": self.escape_character}
        if self.quote_character is None:
            return {**common, "quoting": csv.QUOTE_NONE, "strict": True}
        return {**common, "quotechar": self.quote_character, "doublequote": True, "strict": True}


def _special_chars(options: CsvOptions, *extra: str | None) -> Callable[[str], Any]:
    chars = {c for c in (options.quote_character, options.escape_character, *extra) if c}
    if not chars:
        return lambda _text: None
    return re.compile("[" + re.escape("".join(sorted(chars))) + "]").search


# reading ---------------------------------------------------------------------------------------
def _scalar_reader(t: TypeInformation) -> Fn:
    if isinstance(t, BasicTypeInfo):
        return (lambda s: s) if t.basic_type is BasicType.STRING else basic_reader(t)
    if isinstance(t, DateTypeInfo):
        return parse_date
    if isinstance(t, TimeTypeInfo):
        return parse_time
    if isinstance(t, TimestampTypeInfo):
        return parse_timestamp
    if t == _BYTES:
        return read_base64
    raise TypeError(
        f"the CSV format does not support {t!r} here (a column is a basic type, date/time, "
        "or a LIST, array or ROW of those)"
    )


def _column_reader(t: TypeInformation, options: CsvOptions) -> Fn | None:
    """text of one column (not the null literal) -> value; None for a STRING (the text)."""
    if isinstance(t, (RowTypeInfo, *_SEQUENCES)) and t != _BYTES:
        types = list(t.field_types) if isinstance(t, RowTypeInfo) else None
        element = None if types else _scalar_reader(t.element_type)  # type: ignore[union-attr]
        readers = [_scalar_reader(ft) for ft in types] if types else None
        fields = list(t.names) if isinstance(t, RowTypeInfo) else None
        sep, null = options.array_element_delimiter, options.null_literal

        def read_nested(text: str) -> Any:
            if text == "":
                return None
            parts = text.split(sep)
            if readers is None:
                return [None if p == null else element(p) for p in parts]  # type: ignore[misc]
            if len(parts) != len(readers):
                raise FieldError(f"expected {len(readers)} nested fields, got {len(parts)}")
            values = [None if p == null else r(p) for r, p in zip(readers, parts, strict=True)]
            return new_row(fields, values)  # type: ignore[arg-type]

        return read_nested
    if t == _STRING:
        return None
    read = _scalar_reader(t)
    return lambda text: None if text == "" else read(text)


def csv_reader(
    t: RowTypeInfo, options: CsvOptions, ignore_parse_errors: bool
) -> Callable[[Any], Any]:
    """message (one line, bytes or str) -> Row, or None for a comment or an empty line."""
    fields = list(t.names)
    readers = [_column_reader(ft, options) for ft in t.field_types]
    arity = len(readers)
    delimiter, null = options.field_delimiter, options.null_literal
    needs_csv = _special_chars(options)
    dialect = options.dialect()

    def split(text: str) -> list[str]:
        if needs_csv(text) is None:
            return text.split(delimiter)
        rows = list(csv.reader([text], **dialect))
        if len(rows) != 1:
            raise csv.Error("a quoted field is not closed")
        return rows[0]

    def lenient(columns: list[str | None]) -> list[Any]:
        """The values of `columns`, None for each that cannot be converted (Flink's
        ignore_parse_errors)."""
        values = []
        for reader, column in zip(readers, columns, strict=True):
            if column is None or column == null or reader is None:
                values.append(None if column == null else column)
                continue
            try:
                values.append(reader(column))
            except (ValueError, TypeError, ArithmeticError):
                values.append(None)  # this column is unreadable: None, the rest are kept
        return values

    def read(message: Any) -> Any:
        if isinstance(message, str):
            text = message
        else:
            try:
                text = bytes(message).decode("utf-8")
            except UnicodeDecodeError as e:
                position = f"byte {e.start}"
                raise FormatError("CSV", "not valid UTF-8", message, position=position) from None
        if text.endswith("\n"):
            text = text[:-2] if text.endswith("\r\n") else text[:-1]
        if not text or (options.allow_comments and text.startswith("#")):
            return None
        try:
            columns = split(text)
        except csv.Error as e:
            if ignore_parse_errors:
                return None
            raise FormatError("CSV", f"cannot split the line: {e}", message) from None
        if len(columns) != arity:
            if not ignore_parse_errors:
                raise FormatError(
                    "CSV", f"expected {arity} columns {fields}, got {len(columns)}", message
                )
            columns = (columns + [null] * arity)[:arity]  # type: ignore[list-item]
        values = []
        append = values.append
        i = 0
        try:
            for i in range(arity):
                column = columns[i]
                if column is None or column == null:
                    append(None)
                else:
                    reader = readers[i]
                    append(column if reader is None else reader(column))
        except (ValueError, TypeError, ArithmeticError) as e:
            if not ignore_parse_errors:
                reason = e.reason if isinstance(e, FieldError) else str(e)
                position = f"column {i + 1}"
                raise FormatError(
                    "CSV", reason, message, field=fields[i], position=position
                ) from None
            return new_row(fields, lenient(columns))
        return new_row(fields, values)

    return read


# writing ---------------------------------------------------------------------------------------
def _bool_text(v: Any) -> str:
    if type(v) is not bool:
        raise FieldError(f"expected a bool, got {v!r:.60}")
    return "true" if v else "false"


def _int_text(v: Any) -> str:
    if type(v) is not int:
        raise FieldError(f"expected an int, got {v!r:.60}")
    return str(v)


def _str_text(v: Any) -> str:
    if type(v) is not str:
        raise FieldError(f"expected a str, got {type(v).__name__} {v!r:.60}")
    return v


def _java_timestamp(v: Any) -> str:
    """java.sql.Timestamp's toString: `2024-05-01 12:30:00.0` (at least one fraction digit)."""
    text = timestamp_text(v, " ")
    return text if v.microsecond else text + ".0"


_TEXT: dict[BasicType, Fn] = {
    BasicType.STRING: _str_text,
    BasicType.CHAR: _str_text,
    BasicType.BOOLEAN: _bool_text,
    BasicType.BYTE: _int_text,
    BasicType.SHORT: _int_text,
    BasicType.INT: _int_text,
    BasicType.LONG: _int_text,
    BasicType.BIG_INT: _int_text,
    BasicType.DOUBLE: lambda v: double_text(float(v)),
    BasicType.FLOAT: lambda v: java_float(to_float32(float(v))),
    BasicType.BIG_DEC: str,
    BasicType.INSTANT: lambda v: timestamp_text(v, "T", "Z"),
}


def _scalar_writer(t: TypeInformation) -> Fn:
    if isinstance(t, BasicTypeInfo):
        return _TEXT[t.basic_type]
    if isinstance(t, DateTypeInfo):
        return date_text
    if isinstance(t, TimeTypeInfo):
        return time_text
    if isinstance(t, TimestampTypeInfo):
        return _java_timestamp
    if t == _BYTES:
        return write_base64
    _scalar_reader(t)  # raises the error naming what a column may be
    raise AssertionError(t)


def _column_writer(t: TypeInformation, options: CsvOptions) -> Fn:
    """non-null value -> the text of its column (before quoting)."""
    if not isinstance(t, (RowTypeInfo, *_SEQUENCES)) or t == _BYTES:
        return _scalar_writer(t)
    sep = options.array_element_delimiter
    null = options.null_literal or ""
    if isinstance(t, RowTypeInfo):
        names, writers = list(t.names), [_scalar_writer(ft) for ft in t.field_types]

        def write_row(v: Any) -> str:
            values = row_values(v, names)
            return sep.join(
                null if x is None else w(x) for w, x in zip(writers, values, strict=True)
            )

        return write_row
    element = _scalar_writer(t.element_type)

    def write_list(v: Any) -> str:
        if not isinstance(v, list | tuple):
            raise FieldError(f"expected a list, got {type(v).__name__}")
        return sep.join(null if x is None else element(x) for x in v)

    return write_list


#: types whose text is made of these characters only (numbers as Java writes them, booleans,
#: dates and times), so a column of them needs no quoting unless the delimiter is one of them
_PLAIN_TEXT_TYPES = frozenset(
    [BasicTypeInfo(b) for b in (BasicType.BYTE, BasicType.SHORT, BasicType.INT, BasicType.LONG,
     BasicType.BIG_INT, BasicType.FLOAT, BasicType.DOUBLE, BasicType.BIG_DEC, BasicType.BOOLEAN)]
    + [DateTypeInfo(), TimeTypeInfo(), TimestampTypeInfo()]
)  # fmt: skip
_PLAIN_TEXT_CHARS = frozenset("0123456789+-.: ENaInfinitytruefals")


def csv_writer(t: RowTypeInfo, options: CsvOptions) -> Callable[[Any], bytes]:
    """record -> one CSV line (with the line delimiter), UTF-8."""
    names = list(t.names)
    writers = [_column_writer(ft, options) for ft in t.field_types]
    delimiter, end = options.field_delimiter, options.line_delimiter
    null = options.null_literal or ""
    quote, escape = options.quote_character, options.escape_character
    needs_quoting = _special_chars(options, delimiter, "\n", "\r")

    def quoted(text: str) -> str:
        if needs_quoting(text) is None:
            return text
        if quote is not None:
            if escape is not None:
                text = text.replace(escape, escape + escape)
            return quote + text.replace(quote, (escape or quote) + quote) + quote
        if escape is None:
            raise FieldError(
                f"{text!r:.60} holds the delimiter or a line break and quoting is disabled "
                "(set an escape character)"
            )
        return re.sub(f"([{re.escape(delimiter + escape)}\r\n])", lambda m: escape + m[1], text)

    def write_string(v: Any) -> str:
        if type(v) is not str:
            raise FieldError(f"expected a str, got {type(v).__name__} {v!r:.60}")
        return v if needs_quoting(v) is None else quoted(v)

    specials = (quote or "") + (escape or "")

    def final(t: TypeInformation, writer: Fn) -> Fn:
        """The writer of a column's final text: quoted only where the text may need it."""
        if t == _STRING:
            return write_string
        if t in _PLAIN_TEXT_TYPES and not _PLAIN_TEXT_CHARS & set(delimiter + specials):
            return writer  # numbers, booleans, dates: no character that needs quoting
        return lambda v: quoted(writer(v))

    finals = [final(ft, w) for ft, w in zip(t.field_types, writers, strict=True)]
    arity = len(finals)

    def write(record: Any) -> bytes:
        try:
            values = row_values(record, names)
        except FieldError as e:
            raise FormatError("CSV", e.reason, record) from None
        columns = []
        append = columns.append
        i = 0
        try:
            for i in range(arity):
                x = values[i]
                append(null if x is None else finals[i](x))
        except (ValueError, TypeError, AttributeError, ArithmeticError) as e:
            reason = e.reason if isinstance(e, FieldError) else str(e)
            raise FormatError("CSV", reason, record, field=names[i]) from None
        return (delimiter.join(columns) + end).encode("utf-8")

    return write
