"""Typed batch codecs: how a batch of records of a declared type becomes bytes and back.

A stream whose type is declared (`map(f, output_type=Types.TUPLE([Types.STRING(),
Types.LONG()]))`, `from_collection(c, type_info=...)`, ...) crosses processes with the codec of
that type instead of pickle (runtime/frames.py), and its records are checked against the type
on the way, as PyFlink's coders check them at a task boundary.

What comes out is exactly what `type_format.converter(type_info)` makes of each record (a tuple
for a TUPLE, a Row with the type's field names and the record's RowKind for a ROW, a float for a
DOUBLE, a 32-bit float for a FLOAT, ...), and a record that does not fit is the same
`RecordTypeError`, naming the record, the field and the declared type.

Batches are encoded column by column, so the per-record work stays in C: a tuple or row batch
is transposed with `zip`, a numeric column is one `struct` call, a string column one `join`
(a NUL separator; strings containing NUL fall back to length-prefixed), a boolean column one
`struct` call after a type check. Fields of other types (chars, dates, decimals, lists, maps,
arrays, big integers) are normalised by the converter and travel as one pickle per column.
Every column may hold None (a null mask follows, as PyFlink's coders write a null flag).
"""

from __future__ import annotations

import functools
import pickle
import struct
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import cloudpickle

from tidegate.common.type_format import RecordTypeError, converter
from tidegate.common.typeinfo import (
    BasicType,
    BasicTypeInfo,
    PickledBytesTypeInfo,
    RowTypeInfo,
    TupleTypeInfo,
    TypeInformation,
)
from tidegate.common.types import Row, RowKind, rows_of

__all__ = ["BatchCodec", "batch_codec"]

_U32 = struct.Struct("<I")
_INSERT = RowKind.INSERT
_KINDS = tuple(RowKind)
_values_of = attrgetter("_values")
_fields_of = attrgetter("_fields")
_kind_of = attrgetter("_row_kind")
#: what a fast path raises on a value that does not fit; the converter then says which and why
_MISMATCH = (TypeError, ValueError, struct.error, OverflowError, AttributeError, IndexError)


@functools.lru_cache(maxsize=4096)
def _packer(fmt: str, n: int) -> struct.Struct:
    return struct.Struct(f"<{n}{fmt}")


def _with_length(body: bytes) -> tuple[bytes, bytes]:
    return _U32.pack(len(body)), body


def _only(values: Sequence[Any], types: tuple[type, ...], numbers: bool = False) -> None:
    """TypeError unless every value is an instance of `types` (one C pass over the types);
    with `numbers`, a bool is refused too (it is an int to Python, not a number to Flink)."""
    for t in set(map(type, values)):
        if not issubclass(t, types) or (numbers and issubclass(t, bool)):
            raise TypeError(f"a {t.__name__}")


class _Column:
    """One column of a batch: values of one declared type, None allowed."""

    def encode(self, values: Sequence[Any], out: list[bytes]) -> None:
        """Append the column's bytes to `out`: a null flag (and mask), then the body."""
        try:
            body = self.pack(values)
        except _MISMATCH:
            if None not in values:
                raise
            mask = bytes([v is None for v in values])
            present = [v for v in values if v is not None]
            out += (b"\x01", mask, *_with_length(self.pack(present)))
            return
        out += (b"\x00", *_with_length(body))

    def decode(self, view: memoryview, pos: int, n: int) -> tuple[list[Any], int]:
        """The column of `n` values at `pos` of `view`, and the position after it."""
        mask = None
        if view[pos]:
            mask = view[pos + 1 : pos + 1 + n]
            pos += n
        (length,) = _U32.unpack_from(view, pos + 1)
        start = pos + 5
        body = view[start : start + length]
        if mask is None:
            return self.unpack(body, n), start + length
        present = iter(self.unpack(body, n - sum(mask)))
        return [None if null else next(present) for null in mask], start + length

    def pack(self, values: Sequence[Any]) -> bytes:
        raise NotImplementedError

    def unpack(self, body: memoryview, n: int) -> list[Any]:
        raise NotImplementedError


class _Fixed(_Column):
    """Numbers and booleans of a fixed width: one `struct` call per column (struct checks the
    integer ranges and rounds a FLOAT to 32 bits)."""

    _ACCEPTS = {"?": (bool,), "f": (int, float), "d": (int, float)}

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self.accepts = self._ACCEPTS.get(fmt)

    def pack(self, values: Sequence[Any]) -> bytes:
        if self.accepts is not None:
            _only(values, self.accepts, numbers=self.fmt != "?")
        return _packer(self.fmt, len(values)).pack(*values)

    def unpack(self, body: memoryview, n: int) -> list[Any]:
        return list(_packer(self.fmt, n).unpack(body))


class _String(_Column):
    """Strings joined by NUL, or length-prefixed when a string holds a NUL."""

    def pack(self, values: Sequence[Any]) -> bytes:
        joined = "\0".join(values)
        if joined.count("\0") == max(len(values) - 1, 0):
            return b"\x00" + joined.encode("utf-8", "surrogatepass")
        blobs = [v.encode("utf-8", "surrogatepass") for v in values]
        return b"\x01" + _packer("I", len(blobs)).pack(*map(len, blobs)) + b"".join(blobs)

    def unpack(self, body: memoryview, n: int) -> list[Any]:
        if n == 0:
            return []
        if body[0] == 0:
            return str(body[1:], "utf-8", "surrogatepass").split("\0")
        lengths = _packer("I", n).unpack_from(body, 1)
        out, pos = [], 1 + 4 * n
        for length in lengths:
            out.append(str(body[pos : pos + length], "utf-8", "surrogatepass"))
            pos += length
        return out


class _Converted(_Column):
    """Any other type: each value normalised by the converter, the column one pickle."""

    def __init__(self, type_info: TypeInformation) -> None:
        self.norm = converter(type_info)

    def encode(self, values: Sequence[Any], out: list[bytes]) -> None:
        out += (b"\x00", *_with_length(self.pack(values)))  # pickle carries None itself

    def pack(self, values: Sequence[Any]) -> bytes:
        column = list(map(self.norm, values))
        try:
            return pickle.dumps(column, protocol=5)
        except (pickle.PicklingError, AttributeError, TypeError):
            return cloudpickle.dumps(column, protocol=5)

    def unpack(self, body: memoryview, n: int) -> list[Any]:
        return pickle.loads(body)


class _Composite(_Column):
    """TUPLE and ROW: the records transposed into one column per field."""

    def __init__(self, type_info: TupleTypeInfo | RowTypeInfo) -> None:
        self.fields = [_column(t) for t in type_info.field_types]

    def pack_fields(self, records: Sequence[Sequence[Any]], out: list[bytes]) -> None:
        """Append the field columns of `records` (each a sequence of the field values)."""
        if not records:
            columns: list[Sequence[Any]] = [()] * len(self.fields)
        else:
            columns = list(zip(*records, strict=True))
            if len(columns) != len(self.fields):
                raise ValueError("wrong number of fields")
        for column, values in zip(self.fields, columns, strict=True):
            column.encode(values, out)

    def unpack_fields(self, body: memoryview, n: int) -> list[list[Any]]:
        pos, columns = 0, []
        for column in self.fields:
            values, pos = column.decode(body, pos, n)
            columns.append(values)
        return columns


class _Tuple(_Composite):
    def pack(self, values: Sequence[Any]) -> bytes:
        _only(values, (tuple, list, Row))  # (zip would also read a str, dict or set)
        out: list[bytes] = []
        self.pack_fields(values, out)
        return b"".join(out)

    def unpack(self, body: memoryview, n: int) -> list[Any]:
        return list(zip(*self.unpack_fields(body, n), strict=True)) if n else []


class _Row(_Composite):
    def __init__(self, type_info: RowTypeInfo) -> None:
        super().__init__(type_info)
        self.names = list(type_info.names)
        self.norm = converter(type_info)

    def pack(self, values: Sequence[Any]) -> bytes:
        _only(values, (Row, tuple, list, dict))
        if set(map(type, values)) - {Row}:  # tuples, lists, dicts: as the converter reads them
            values = list(map(self.norm, values))
        kinds = list(map(_kind_of, values))
        out: list[bytes] = [b"\x00"]
        if kinds.count(_INSERT) != len(kinds):
            out = [b"\x01", bytes([k.value for k in kinds])]
        fields = list(map(_fields_of, values))
        if fields.count(None) + fields.count(self.names) == len(fields):
            records = list(map(_values_of, values))
        else:  # named rows with other names or another order: read by name
            records = [
                r._values if r._fields is None else [r[n] for n in self.names] for r in values
            ]
        self.pack_fields(records, out)
        return b"".join(out)

    def unpack(self, body: memoryview, n: int) -> list[Any]:
        kinds, pos = None, 1
        if body[0]:
            kinds = [_KINDS[k] for k in body[1 : 1 + n]]
            pos += n
        if not n:
            return []
        return rows_of(zip(*self.unpack_fields(body[pos:], n), strict=True), self.names, kinds)


_FIXED = {
    BasicType.BYTE: "b",
    BasicType.SHORT: "h",
    BasicType.INT: "i",
    BasicType.LONG: "q",
    BasicType.FLOAT: "f",
    BasicType.DOUBLE: "d",
    BasicType.BOOLEAN: "?",
}


def _column(type_info: TypeInformation) -> _Column:
    if isinstance(type_info, BasicTypeInfo):
        if type_info.basic_type in _FIXED:
            return _Fixed(_FIXED[type_info.basic_type])
        if type_info.basic_type is BasicType.STRING:
            return _String()
    if isinstance(type_info, TupleTypeInfo):
        return _Tuple(type_info)
    if isinstance(type_info, RowTypeInfo):
        return _Row(type_info)
    return _Converted(type_info)


class BatchCodec:
    """Encodes and decodes whole batches of one declared type (see the module docstring)."""

    def __init__(self, type_info: TypeInformation) -> None:
        self.type_info = type_info
        self._column = _column(type_info)
        self._norm = converter(type_info)

    def encode(self, batch: Sequence[Any]) -> bytes:
        """The bytes of `batch`; a RecordTypeError names the first record that does not fit."""
        out: list[bytes] = []
        try:
            self._column.encode(batch, out)
        except _MISMATCH as e:  # (a RecordTypeError of the converter is a TypeError)
            for record in batch:
                try:
                    self._norm(record)
                except RecordTypeError as mismatch:
                    raise RecordTypeError(f"record {record!r}: {mismatch}") from None
            raise RecordTypeError(f"cannot encode a batch as {self.type_info!r}: {e}") from e
        return b"".join(out)

    def decode(self, data: bytes | memoryview, n: int) -> list[Any]:
        """The `n` records encoded in `data`."""
        values, _ = self._column.decode(memoryview(data), 0, n)
        return values

    def convert(self, batch: Sequence[Any]) -> list[Any]:
        """`batch` as a receiver in another process gets it."""
        return self.decode(self.encode(batch), len(batch))


@functools.lru_cache(maxsize=256)
def batch_codec(type_info: TypeInformation | None) -> BatchCodec | None:
    """The codec of a stream declared `type_info`; None where pickle carries the records as
    they are (no declared type, `PICKLED_BYTE_ARRAY`)."""
    if type_info is None or isinstance(type_info, PickledBytesTypeInfo):
        return None
    return BatchCodec(type_info)
