"""Typed batch codecs: how a batch of records of a declared type crosses from one task to the
next, checked against the type and converted to it.

A stream whose type is declared (`map(f, output_type=Types.TUPLE([Types.STRING(),
Types.LONG()]))`, `from_collection(c, type_info=...)`, ...) crosses processes with the codec of
that type instead of pickle (runtime/frames.py), and a channel inside a slot converts its
batches through the same codec, so a job sees the same records wherever its subtasks run.

What comes out is exactly what `type_format.converter(type_info)` makes of each record (a tuple
for a TUPLE, a Row with the type's field names and the record's RowKind for a ROW, a float for a
DOUBLE, ...), and a record that does not fit is the converter's `RecordTypeError`, naming the
record, the field and the declared type. Two ways get there:

* **fast**: types msgspec carries exactly — STRING, BOOLEAN, BYTE/SHORT/INT/LONG (range
  checked), DOUBLE, and TUPLE, ROW (at the top level), LIST and MAP of those, every field
  nullable — travel as MessagePack, encoded by msgspec in C and checked against the type while
  decoding (a frame is about 30% cheaper than pickle and smaller); inside a slot,
  `msgspec.convert` checks and converts without bytes;
* **exact**: anything else (FLOAT's 32-bit rounding, CHAR, decimals, dates, arrays, nested
  Rows, a bool where an INT was declared, a batch the fast way refuses) goes through the
  converter record by record and travels as a pickle of the converted records.

A batch the fast way refuses is retried the exact way before anything fails, so the two agree
on every input.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Sequence
from operator import attrgetter
from typing import Annotated, Any, Optional

import msgspec

from tidegate.common import pickling
from tidegate.common.type_format import RecordTypeError, converter
from tidegate.common.typeinfo import (
    BasicType,
    BasicTypeInfo,
    ListTypeInfo,
    MapTypeInfo,
    PickledBytesTypeInfo,
    RowTypeInfo,
    TupleTypeInfo,
    TypeInformation,
)
from tidegate.common.types import Row, RowKind, rows_of

__all__ = ["BatchCodec", "batch_codec"]

_FAST, _EXACT = 0, 1
_KINDS = tuple(RowKind)
_values_of = attrgetter("_values")
_fields_of = attrgetter("_fields")
_kind_of = attrgetter("_row_kind")
_INT_BITS = {BasicType.BYTE: 8, BasicType.SHORT: 16, BasicType.INT: 32, BasicType.LONG: 64}
#: what the fast way raises for a batch it cannot carry (the exact way then decides)
_REFUSED = (msgspec.ValidationError, msgspec.EncodeError, TypeError, ValueError, OverflowError)
_encoder = msgspec.msgpack.Encoder()


def _fast_type(t: TypeInformation, top: bool = False) -> Any:
    """The msgspec type carrying values of `t` exactly (nullable), or None if there is none."""
    if isinstance(t, BasicTypeInfo):
        b = t.basic_type
        if b in _INT_BITS:
            bits = _INT_BITS[b]
            inner: Any = Annotated[
                int, msgspec.Meta(ge=-(1 << (bits - 1)), le=(1 << (bits - 1)) - 1)
            ]
        else:
            inner = {BasicType.STRING: str, BasicType.BOOLEAN: bool, BasicType.DOUBLE: float}.get(b)
            if inner is None:
                return None
    elif isinstance(t, TupleTypeInfo) or (isinstance(t, RowTypeInfo) and top):
        fields = [_fast_type(f) for f in t.field_types]
        if any(f is None for f in fields):
            return None
        inner = tuple[tuple(fields)]  # type: ignore[misc]
    elif isinstance(t, ListTypeInfo):
        element = _fast_type(t.element_type)
        if element is None:
            return None
        inner = list[element]  # type: ignore[valid-type]
    elif isinstance(t, MapTypeInfo):
        key, value = _fast_type(t.key_type), _fast_type(t.value_type)
        if key is None or value is None:
            return None
        inner = dict[key, value]  # type: ignore[valid-type]
    else:
        return None
    return inner if top else Optional[inner]  # noqa: UP045 (a runtime type, not an annotation)


class BatchCodec:
    """Checks, converts, encodes and decodes batches of one declared type (module docstring)."""

    def __init__(self, type_info: TypeInformation) -> None:
        self.type_info = type_info
        self._norm = converter(type_info)
        self._rows = isinstance(type_info, RowTypeInfo)
        self._names = list(type_info.names) if isinstance(type_info, RowTypeInfo) else None
        fast = _fast_type(type_info, top=True)
        self._fast: Any = None if fast is None else list[fast]  # type: ignore[valid-type]
        self._decoder = None
        if fast is not None:  # a frame's body: (row kinds or None, the records)
            self._decoder = msgspec.msgpack.Decoder(tuple[Optional[bytes], self._fast])  # noqa: UP045

    # inside a slot -------------------------------------------------------------------------
    def convert(self, batch: Sequence[Any]) -> list[Any]:
        """`batch` as a receiver in another process gets it (RecordTypeError on a misfit)."""
        if self._fast is not None:
            try:
                kinds, values = self._fast_values(batch)
                return self._finish(msgspec.convert(values, self._fast), kinds)
            except _REFUSED:
                pass
        return self._exact(batch)

    # between processes -----------------------------------------------------------------------
    def encode(self, batch: Sequence[Any], checked: bool = False) -> bytes:
        """The bytes of `batch`: MessagePack when the fast way can carry it (checked by the
        receiver's decode; with `checked`, here, for state snapshots that must fail when they
        are taken), else a pickle of the converted records (checked here)."""
        if self._fast is not None:
            try:
                kinds, values = self._fast_values(batch)
                if checked:
                    values = msgspec.convert(values, self._fast)
                return bytes([_FAST]) + _encoder.encode((kinds, values))
            except _REFUSED:
                pass
        return bytes([_EXACT]) + _pickle(self._exact(batch))

    def decode(self, data: bytes | memoryview, n: int) -> list[Any]:
        """The `n` records encoded in `data` (RecordTypeError on a misfit)."""
        view = memoryview(data)
        if view[0] == _EXACT:
            return pickle.loads(view[1:])
        body = view[1:]
        try:
            kinds, values = self._decoder.decode(body)  # type: ignore[union-attr]
        except msgspec.ValidationError:  # e.g. a bool for an INT: the converter decides
            kinds, plain = msgspec.msgpack.decode(body)
            values = self._exact(plain)
            return self._with_kinds(values, kinds) if self._rows else values
        return self._finish(values, kinds)

    # the two ways ----------------------------------------------------------------------------
    def _fast_values(self, batch: Sequence[Any]) -> tuple[bytes | None, Sequence[Any]]:
        """The row kinds (None: all inserts) and the field values msgspec carries."""
        if not self._rows:
            return None, batch
        types = set(map(type, batch))
        if types <= {tuple, list}:
            return None, batch
        if types != {Row}:
            raise TypeError("a batch of Rows mixed with other records: the exact way")
        kinds = list(map(_kind_of, batch))
        kind_bytes = None
        if kinds.count(RowKind.INSERT) != len(kinds):
            kind_bytes = bytes([k.value for k in kinds])
        fields = list(map(_fields_of, batch))
        if fields.count(None) + fields.count(self._names) != len(fields):
            raise TypeError("named Rows with other names: read by name the exact way")
        return kind_bytes, list(map(_values_of, batch))

    def _finish(self, values: list[Any], kinds: bytes | None) -> list[Any]:
        if not self._rows:
            return values
        row_kinds = None if kinds is None else [_KINDS[k] for k in kinds]
        return rows_of(values, self._names, row_kinds)

    def _with_kinds(self, rows: list[Any], kinds: bytes | None) -> list[Any]:
        if kinds is not None:
            for row, kind in zip(rows, kinds, strict=True):
                if row is not None:
                    row.set_row_kind(_KINDS[kind])
        return rows

    def _exact(self, batch: Sequence[Any]) -> list[Any]:
        """The converter on every record; its RecordTypeError names the record."""
        norm, out = self._norm, []
        for record in batch:
            try:
                out.append(norm(record))
            except RecordTypeError as misfit:
                raise RecordTypeError(f"record {record!r}: {misfit}") from None
        return out


def _pickle(records: list[Any]) -> bytes:
    return pickling.dumps(records, protocol=5)


@functools.lru_cache(maxsize=256)
def batch_codec(type_info: TypeInformation | None) -> BatchCodec | None:
    """The codec of a stream declared `type_info`; None where pickle carries the records as
    they are (no declared type, `PICKLED_BYTE_ARRAY`)."""
    if type_info is None or isinstance(type_info, PickledBytesTypeInfo):
        return None
    return BatchCodec(type_info)
