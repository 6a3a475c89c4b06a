"""Record <-> bytes conversions with PyFlink's names (`pyflink.common.serialization`)."""

from __future__ import annotations

import codecs
import functools
from collections.abc import Callable
from typing import Any

__all__ = ["Encoder", "SimpleStringSchema"]


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


class SimpleStringSchema:
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
