"""What every row format shares: the error a bad record raises, value semantics of schemas
(equal by configuration, picklable by configuration), and reading the fields of a row.

A schema compiles its type into per-field converter closures once; closures do not pickle, so
a schema pickles as its class and configuration and compiles again where it is unpickled (the
workers a connector ships it to).
"""

from __future__ import annotations

from typing import Any, ClassVar

from tidegate.common.typeinfo import RowTypeInfo, TypeInformation
from tidegate.common.types import Row, RowKind

__all__ = ["FieldError", "FormatError", "RowSchema", "excerpt", "new_row", "row_values"]

_EXCERPT = 120


class FormatError(ValueError):
    """A record that a format cannot read or write.

    `field`: the dotted path of the field at fault (`address.zip`, `tags[2]`), None when the
    record as a whole is bad; `position`: where in the record (a character or byte offset, or a
    column), None if unknown; `record`: an excerpt of the record. Sources add where the record
    was in their stream (a file and line, a partition and offset)."""

    def __init__(
        self,
        format_name: str,
        reason: str,
        record: Any,
        field: str | None = None,
        position: str | None = None,
    ) -> None:
        self._fill(format_name, reason, excerpt(record), field, position)

    def _fill(
        self, format_name: str, reason: str, record: str, field: str | None, position: str | None
    ) -> None:
        self.format_name = format_name
        self.reason = reason
        self.field = field
        self.position = position
        self.record = record
        where = " ".join(
            part for part in (f"field {field!r}" if field else "", position or "") if part
        )
        head = f"{format_name} ({where})" if where else format_name
        super().__init__(f"{head}: {reason} (record: {record})")

    def __reduce__(self) -> tuple[Any, ...]:
        fields = (self.format_name, self.reason, self.record, self.field, self.position)
        return _restore_format_error, fields


def _restore_format_error(
    format_name: str, reason: str, record: str, field: str | None, position: str | None
) -> FormatError:
    """A FormatError from its pickled fields (its record is already an excerpt)."""
    error = FormatError.__new__(FormatError)
    error._fill(format_name, reason, record, field, position)
    return error


class FieldError(ValueError):
    """Raised inside converters: `reason` about the value at `path` (innermost part first while
    it travels outwards; the schema turns it into a FormatError)."""

    def __init__(self, reason: str, path: list[str] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path = path if path is not None else []

    def dotted(self) -> str | None:
        text = ""
        for part in reversed(self.path):
            text += part if part.startswith("[") or not text else f".{part}"
        return text or None


def excerpt(record: Any) -> str:
    """A short, printable view of a record (its first bytes or characters)."""
    if isinstance(record, memoryview | bytearray):
        record = bytes(record)
    if isinstance(record, bytes | str):
        cut = record[:_EXCERPT]
        suffix = f"... ({len(record)} {'bytes' if isinstance(record, bytes) else 'chars'})"
        return repr(cut) + (suffix if len(record) > _EXCERPT else "")
    text = repr(record)
    return text if len(text) <= _EXCERPT else f"<{text[:_EXCERPT]}...>"


def new_row(fields: list[str], values: list[Any]) -> Row:
    """A named Row without Row.__init__'s checks (decoders make one per record; `fields` is
    shared between rows and never changed in place)."""
    row = object.__new__(Row)
    state = row.__dict__
    state["_fields"] = fields
    state["_values"] = values
    state["_row_kind"] = RowKind.INSERT
    state["_from_dict"] = False
    return row


def row_values(value: Any, names: list[str]) -> list[Any] | tuple[Any, ...]:
    """The values of the fields `names` of a record to write: a Row with field names (read by
    name), a positional Row, tuple or list (by position), or a dict (by name; absent: None).
    Not a copy: callers only read it."""
    if isinstance(value, Row):
        fields = value._fields
        if fields is None or fields is names or fields == names:
            values = value._values
        else:
            missing = [n for n in names if n not in fields]
            if missing:
                raise FieldError(f"the row has no field {missing[0]!r} (its fields: {fields})")
            return [value[n] for n in names]
    elif isinstance(value, tuple | list):
        values = value
    elif isinstance(value, dict):
        return [value.get(n) for n in names]
    else:
        raise FieldError(f"expected a Row, tuple, list or dict, got {type(value).__name__}")
    if len(values) != len(names):
        raise FieldError(f"expected {len(names)} fields {names}, got {len(values)}")
    return values


def row_type(type_info: Any, what: str) -> RowTypeInfo:
    """`type_info` if it is a ROW / ROW_NAMED type, else a clear TypeError (Flink's row formats
    read and write rows only)."""
    if not isinstance(type_info, RowTypeInfo):
        shown = type_info if isinstance(type_info, TypeInformation | None) else repr(type_info)
        raise TypeError(
            f"{what} needs the row type of its records, Types.ROW_NAMED([names], [types]) "
            f"(or Types.ROW([...])), got {shown}"
        )
    return type_info


class RowSchema:
    """Equality, hashing, repr and pickling of a schema by its configuration: subclasses set
    `_PARAMS` (the constructor's keyword arguments, stored as attributes of the same name)."""

    _PARAMS: ClassVar[tuple[str, ...]] = ()

    def _config(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._PARAMS}

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._config() == self._config()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), tuple(map(repr, self._config().values()))))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._config().items())
        return f"{type(self).__name__}({args})"

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), self._config())


def _rebuild(cls: type[RowSchema], config: dict[str, Any]) -> RowSchema:
    return cls(**config)
