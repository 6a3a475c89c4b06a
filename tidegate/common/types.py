"""`Row` and `RowKind` at PyFlink's path (`pyflink.common.types`, re-exported by
`pyflink.common`), with PyFlink 2.x's semantics:

* `Row(1, "a")` is a positional row; `Row(name="a", age=1)` a row with field names, in the
  order given; `Row("name", "age")` a row "class" that is called with the values
  (`Person("a", 1)` is `Row(name='a', age=1)`).
* Fields are read by index (`row[0]`, `row[1:]`), by name (`row["name"]`) and as attributes
  (`row.name`); they are set by index or name (`row["age"] = 2`), not as attributes.
* A row carries a `RowKind` (insert by default), printed by Flink as `+I`, `-U`, `+U`, `-D`.
* Two rows are equal if they have the same kind and values (named rows: the same names with the
  same values, in any order); positional and named rows are never equal.

Rows pickle by value (records of undeclared streams cross processes with pickle); a stream
declared `Types.ROW`/`ROW_NAMED` carries them in typed frames (common/record_codec.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from enum import Enum
from typing import Any

__all__ = ["Row", "RowKind", "rows_of"]

_INTERNAL = frozenset(("_fields", "_values", "_row_kind", "_from_dict"))


class RowKind(Enum):
    """The kind of change a row is in a changelog; `str()` is Flink's short string."""

    INSERT = 0
    UPDATE_BEFORE = 1
    UPDATE_AFTER = 2
    DELETE = 3

    def __str__(self) -> str:
        return _SHORT_STRINGS[self.value]


_SHORT_STRINGS = ("+I", "-U", "+U", "-D")


def _create_row(fields: list[str] | None, values: Any, row_kind: RowKind | None = None) -> Row:
    """Unpickling (and `Row.__call__`): a row of `values` with field names `fields`."""
    row = Row(*values)
    if fields is not None:
        row._fields = list(fields)
    if row_kind is not None:
        row._row_kind = row_kind
    return row


class Row:
    """A row of values, positional or with field names, with a RowKind (see the module)."""

    _fields: list[str] | None
    _values: list[Any]
    _row_kind: RowKind
    _from_dict: bool

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args and kwargs:
            raise ValueError("a Row takes positional values or named values, not both")
        if kwargs:
            self._fields = list(kwargs)
            self._values = list(kwargs.values())
            self._from_dict = True
        else:
            self._fields = None
            self._values = list(args)
            self._from_dict = False
        self._row_kind = RowKind.INSERT

    @staticmethod
    def of_kind(row_kind: RowKind, *args: Any, **kwargs: Any) -> Row:
        row = Row(*args, **kwargs)
        row._row_kind = row_kind
        return row

    # kind and names ----------------------------------------------------------------------------
    def get_row_kind(self) -> RowKind:
        return self._row_kind

    def set_row_kind(self, row_kind: RowKind) -> None:
        if not isinstance(row_kind, RowKind):
            raise TypeError(f"set_row_kind expects a RowKind, got {row_kind!r}")
        self._row_kind = row_kind

    def set_field_names(self, field_names: list[str]) -> None:
        self._fields = list(field_names)

    def get_fields_by_names(self, names: list[str]) -> list[Any]:
        """The values of the fields `names`, in that order (a positional row: all values)."""
        if self._fields is None or list(names) == self._fields:
            return list(self._values)
        missing = [n for n in names if n not in self._fields]
        if missing:
            raise ValueError(f"fields {missing} are not in this row's fields {self._fields}")
        return [self._values[self._fields.index(n)] for n in names]

    def as_dict(self, recursive: bool = False) -> dict[str, Any]:
        """The fields as a dict; with `recursive`, nested rows (also in lists and dicts) too."""
        if self._fields is None:
            raise TypeError("as_dict needs a Row with field names; this row is positional")
        if not recursive:
            return dict(zip(self._fields, self._values, strict=False))
        return {k: _as_plain(v) for k, v in zip(self._fields, self._values, strict=False)}

    # access ------------------------------------------------------------------------------------
    def _index(self, name: str) -> int:
        if self._fields is None:
            raise KeyError(f"{name!r}: this row is positional (it has no field names)")
        try:
            return self._fields.index(name)
        except ValueError:
            raise ValueError(f"{name!r} is not a field of this row {self._fields}") from None

    def __getitem__(self, item: Any) -> Any:
        if isinstance(item, int | slice):
            return self._values[item]
        return self._values[self._index(item)]

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(key, int | slice):
            self._values[key] = value
        else:
            self._values[self._index(key)] = value

    def __getattr__(self, name: str) -> Any:
        # only called when normal lookup fails: a field name (never an internal attribute)
        if name.startswith("_"):
            raise AttributeError(name)
        fields = self.__dict__.get("_fields")
        if fields is None or name not in fields:
            raise AttributeError(f"this Row has no field {name!r}")
        return self._values[fields.index(name)]

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in _INTERNAL:
            raise AttributeError(
                f"a Row's fields are not set as attributes: use row[{name!r}] = value"
            )
        self.__dict__[name] = value

    def __contains__(self, item: Any) -> bool:
        """A field name of a named row; a value of a positional one."""
        if self._fields is not None:
            return item in self._fields
        return item in self._values

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    # a row "class": Row("name", "age")("a", 1) ------------------------------------------------
    def __call__(self, *args: Any) -> Row:
        if len(args) > len(self._values):
            raise ValueError(
                f"cannot create a Row with fields {self!r}: expected at most "
                f"{len(self._values)} values, got {args!r}"
            )
        return _create_row(list(self._values), args, self._row_kind)

    # value semantics ---------------------------------------------------------------------------
    def __reduce__(self) -> tuple[Any, ...]:
        return _create_row, (self._fields, tuple(self._values), self._row_kind)

    def __repr__(self) -> str:
        if self._fields is not None:
            pairs = zip(self._fields, self._values, strict=False)
            return "Row({})".format(", ".join(f"{k}={v!r}" for k, v in pairs))
        return "<Row({})>".format(", ".join(repr(v) for v in self._values))

    def _by_sorted_names(self) -> list[Any]:
        fields = self._fields or []
        return [self._values[fields.index(n)] for n in sorted(fields)]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Row) or self.__class__ is not other.__class__:
            return False
        if self._row_kind != other._row_kind:
            return False
        if (self._fields is None) != (other._fields is None):
            return False
        if self._fields is None:
            return self._values == other._values
        if sorted(self._fields) != sorted(other._fields or []):
            return False
        return self._by_sorted_names() == other._by_sorted_names()

    def __hash__(self) -> int:
        # consistent with __eq__: named rows equal in any field order hash alike
        if self._fields is None:
            return hash(tuple(self._values))
        return hash(tuple(self._by_sorted_names()))


def rows_of(
    values: Iterable[Sequence[Any]], fields: list[str] | None, kinds: list[RowKind] | None
) -> list[Row]:
    """Rows of `values` (one sequence per row) named `fields` (shared: rows never change a
    field-name list in place), with `kinds` (None: all inserts). For decoders: ~2x faster than
    calling Row(...) per row."""
    new = object.__new__
    out = []
    append = out.append
    kind_of = iter(kinds) if kinds is not None else None
    for row_values in values:
        row = new(Row)
        state = row.__dict__
        state["_fields"] = fields
        state["_values"] = list(row_values)
        state["_row_kind"] = RowKind.INSERT if kind_of is None else next(kind_of)
        state["_from_dict"] = False
        append(row)
    return out


def _as_plain(value: Any) -> Any:
    if isinstance(value, Row):
        return value.as_dict(True)
    if isinstance(value, list):
        return [_as_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_plain(v) for k, v in value.items()}
    return value
