"""Record <-> bytes conversions with PyFlink's names (`pyflink.common.serialization`)."""

from __future__ import annotations

import codecs
import functools
from collections.abc import Callable
from typing import IO, Any

from tidegate.common.type_format import printer_java
from tidegate.common.typeinfo import PickledBytesTypeInfo, RowTypeInfo, TypeInformation

__all__ = [
    "BulkWriter",
    "BulkWriterFactory",
    "ByteArraySchema",
    "DeserializationSchema",
    "Encoder",
    "RowDataBulkWriterFactory",
    "SerializationSchema",
    "SimpleStringSchema",
]


def _check_charset(charset: str) -> str:
    try:
        return codecs.lookup(charset).name
    except LookupError:
        raise ValueError(f"unknown charset {charset!r}") from None


def _encode_line(element: Any, charset: str) -> bytes:
    return f"{element}\n".encode(charset)


class Encoder:
    """Turns one record into the bytes a row-format file sink appends to a part file.

    Subclass and override `encode`, or wrap a function: `Encoder(lambda r: ...)`.
    """

    def __init__(self, encode_fn: Callable[[Any], bytes] | None = None) -> None:
        self._encode_fn = encode_fn

    def encode(self, element: Any) -> bytes:
        if self._encode_fn is None:
            raise NotImplementedError("Encoder needs an encode function or an encode() override")
        return self._encode_fn(element)

    def encode_batch(self, elements: list[Any]) -> bytes:
        """The bytes of a whole batch (sinks write batches; override for speed)."""
        return b"".join(map(self.encode, elements))

    def for_type(self, type_info: TypeInformation | None) -> Encoder:
        """The encoder for records of the declared `type_info` (a FileSink asks when it is
        added to a stream); this one whatever the type unless a subclass knows better."""
        return self

    @staticmethod
    def simple_string_encoder(
        charset_name: str = "UTF-8", *, charset: str | None = None
    ) -> Encoder:
        """`str(element)` followed by a newline, in `charset_name` (`charset` is an alias)."""
        return _SimpleStringEncoder(_check_charset(charset or charset_name))


class _SimpleStringEncoder(Encoder):
    def __init__(self, charset: str) -> None:
        super().__init__(functools.partial(_encode_line, charset=charset))
        self.encode = self._encode_fn  # one call per record, not two
        self.charset = charset

    def encode_batch(self, elements: list[Any]) -> bytes:
        return "".join([f"{e}\n" for e in elements]).encode(self.charset)

    def for_type(self, type_info: TypeInformation | None) -> Encoder:
        """As Flink's SimpleStringEncoder writes a record of `type_info`: its Java `toString`
        (`(a,1)` for a Tuple, `+I[a, 1]` for a Row, `1.0E10` for a DOUBLE; common/type_format.py);
        `str(record)` for an undeclared stream."""
        if type_info is None or isinstance(type_info, PickledBytesTypeInfo):
            return self
        return _TypedStringEncoder(self.charset, printer_java(type_info))


class _TypedStringEncoder(Encoder):
    def __init__(self, charset: str, text: Callable[[Any], str]) -> None:
        super().__init__(lambda element: f"{text(element)}\n".encode(charset))
        self.charset = charset
        self.text = text

    def encode_batch(self, elements: list[Any]) -> bytes:
        text = self.text
        return "".join([f"{text(e)}\n" for e in elements]).encode(self.charset)


class BulkWriter:
    """Writes records into one part file of a bulk-format FileSink (Flink's BulkWriter): the
    sink creates it over the part file's stream, hands it every batch of records for that file
    (`add_elements`), and calls `finish` when it rolls the file (at each checkpoint); the sink
    then flushes, syncs and closes the stream itself. When the sink closes without rolling (a
    failure, a cancellation) it calls `abort` instead; recovery deletes that in-progress file."""

    def add_elements(self, elements: list[Any]) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement add_elements()")

    def finish(self) -> None:
        """Write everything buffered and the file's trailer (a Parquet footer) to the stream;
        no more elements follow. Must not close the stream."""
        raise NotImplementedError(f"{type(self).__name__} must implement finish()")

    def abort(self) -> None:
        """Drop what is buffered and write nothing more (the sink closes the stream next)."""


class BulkWriterFactory:
    """Creates the BulkWriter of each part file (PyFlink's `BulkWriterFactory`); travels to the
    workers pickled, so keep it a plain description."""

    def create(self, stream: IO[bytes]) -> BulkWriter:
        raise NotImplementedError(f"{type(self).__name__} must implement create()")


class RowDataBulkWriterFactory(BulkWriterFactory):
    """A BulkWriterFactory for Rows of one declared row type (PyFlink's, which converts the
    stream's records to that type before the sink; here the writer reads each record's fields
    by the type's names: a Row, tuple, list or dict)."""

    def __init__(self, row_type: RowTypeInfo) -> None:
        self.row_type = row_type

    def get_row_type(self) -> RowTypeInfo:
        return self.row_type


class SerializationSchema:
    """Turns a record into the bytes a connector writes (a message's value or key).

    Subclass and override `serialize`. Schemas travel to the workers pickled, so keep their
    state picklable (tidegate's own schemas pickle as their configuration)."""

    def serialize(self, element: Any) -> bytes:
        raise NotImplementedError(f"{type(self).__name__} must override serialize()")


class DeserializationSchema:
    """Turns the bytes a connector read into a record.

    Subclass and override `deserialize`; returning None skips the message (what Flink's formats
    do with `ignore_parse_errors`). Called by the source reader for every message, so a raised
    error fails the job (and restarts it from the last checkpoint)."""

    def deserialize(self, message: bytes) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must override deserialize()")


class SimpleStringSchema(SerializationSchema, DeserializationSchema):
    """Serialises `str` to bytes and back in one charset (UTF-8 by default)."""

    def __init__(self, charset: str = "UTF-8") -> None:
        self.charset = _check_charset(charset)

    def serialize(self, element: str) -> bytes:
        return element.encode(self.charset)

    def deserialize(self, message: bytes) -> str:
        return message.decode(self.charset)

    encode = serialize
    decode = deserialize

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SimpleStringSchema) and other.charset == self.charset

    def __hash__(self) -> int:
        return hash((SimpleStringSchema, self.charset))

    def __repr__(self) -> str:
        return f"SimpleStringSchema(charset={self.charset!r})"


class ByteArraySchema(SerializationSchema, DeserializationSchema):
    """Passes bytes through unchanged (PyFlink's ByteArraySchema): for raw messages, e.g. to
    parse them in a later operator that routes bad ones to a side output."""

    def serialize(self, element: bytes) -> bytes:
        if not isinstance(element, bytes | bytearray | memoryview):
            raise TypeError(f"ByteArraySchema writes bytes, got {type(element).__name__}")
        return bytes(element)

    def deserialize(self, message: bytes) -> bytes:
        return message

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ByteArraySchema)

    def __hash__(self) -> int:
        return hash(ByteArraySchema)

    def __repr__(self) -> str:
        return "ByteArraySchema()"
