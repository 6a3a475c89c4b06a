"""Keyed state of a declared type in state files: the values of a state in one key group as
one batch of the type's codec (common/record_codec.py) instead of one pickle per value.

A value, reducing or aggregating state whose descriptor declares its type
(`ValueStateDescriptor("count", Types.LONG())`) is written by the heap backend as a
`TypedTable`: a dict whose pickled form is `(type, [keys], encoded values)`, so the key-group
payload of the state file stays one cloudpickle and every reader (restore, rescaling, the state
processor) gets a plain dict back. Values come back as the type's codec gives them (a float for
DOUBLE, a Row named by a ROW type ...), as PyFlink's state serializers do; a value that does
not fit the declared type fails the checkpoint naming the state, the key and the type.
"""

from __future__ import annotations

from typing import Any

from tidegate.common.record_codec import batch_codec
from tidegate.common.type_format import RecordTypeError, converter
from tidegate.common.typeinfo import TypeInformation

__all__ = ["TypedTable"]


class TypedTable(dict):
    """`{key: value}` of state `name`, whose values pickle as one column of `type_info`."""

    __slots__ = ("name", "type_info")

    def __init__(self, name: str, type_info: TypeInformation) -> None:
        super().__init__()
        self.name = name
        self.type_info = type_info

    def __reduce__(self) -> tuple[Any, ...]:
        codec = batch_codec(self.type_info)
        keys = list(self.keys())
        try:
            encoded = codec.encode(list(self.values()), checked=True)
        except RecordTypeError:
            self._raise_misfit()
            raise
        return _typed_table, (self.type_info, keys, encoded)

    def _raise_misfit(self) -> None:
        norm = converter(self.type_info)
        for key, value in self.items():
            try:
                norm(value)
            except RecordTypeError as misfit:
                raise RecordTypeError(
                    f"state {self.name!r} declares {self.type_info!r}, but the value of key "
                    f"{key!r} does not fit it: {misfit}; keep values of the declared type in "
                    "the state, or declare the type it holds"
                ) from None


def _typed_table(type_info: TypeInformation, keys: list[Any], encoded: bytes) -> dict[Any, Any]:
    """Unpickling: the plain dict of a TypedTable."""
    values = batch_codec(type_info).decode(encoded, len(keys))
    return dict(zip(keys, values, strict=True))
