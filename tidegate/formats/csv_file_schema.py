"""PyFlink's `CsvSchema` and `CsvSchemaBuilder`: the columns and dialect of CSV files read with
`CsvReaderFormat` (tidegate/connectors/csv_reader_format.py).

PyFlink types the columns with the Table API's `DataTypes`, which tidegate does not have: here
`number_type` and `element_type` take `Types` (`Types.INT()`, `Types.DOUBLE()`, ...).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tidegate.common.typeinfo import RowTypeInfo, TypeInformation, Types
from tidegate.formats.csv_row import CsvOptions

__all__ = ["CsvSchema", "CsvSchemaBuilder"]


@dataclass(frozen=True)
class CsvSchema:
    """Named, typed columns, the dialect, and how the first line of each file is treated:
    `use_header` (it is a header, skipped; with `strict_headers` it must name the columns in
    order) or `skip_first_data_row` (skipped)."""

    columns: tuple[tuple[str, TypeInformation], ...]
    options: CsvOptions = CsvOptions()
    use_header: bool = False
    strict_headers: bool = False
    skip_first_data_row: bool = False

    @staticmethod
    def builder() -> CsvSchemaBuilder:
        return CsvSchemaBuilder()

    def row_type(self) -> RowTypeInfo:
        """The records' type: `Types.ROW_NAMED` of the columns."""
        return Types.ROW_NAMED([n for n, _ in self.columns], [t for _, t in self.columns])

    def size(self) -> int:
        return len(self.columns)

    def __len__(self) -> int:
        return self.size()

    def __str__(self) -> str:
        cols = ", ".join(f"{n}: {t!r}" for n, t in self.columns)
        return f"CsvSchema([{cols}], {self.options})"


def _type(value: Any, default: TypeInformation, what: str) -> TypeInformation:
    if value is None:
        return default
    if not isinstance(value, TypeInformation):
        raise TypeError(
            f"{what} takes a tidegate Types type (e.g. Types.INT()); tidegate has no Table API "
            f"DataTypes, got {value!r}"
        )
    return value


class CsvSchemaBuilder:
    """PyFlink's CsvSchemaBuilder. All array columns share one element separator (tidegate's
    CSV reader splits every array column alike)."""

    def __init__(self) -> None:
        self._columns: list[tuple[str, TypeInformation]] = []
        self._array_separators: list[str] = []
        self._options = CsvOptions()
        self._flags = {"use_header": False, "strict_headers": False, "skip_first_data_row": False}

    def _set(self, **changes: Any) -> CsvSchemaBuilder:
        self._options = dataclasses.replace(self._options, **changes)
        return self

    def build(self) -> CsvSchema:
        options = self._options
        separators = set(self._array_separators)
        if len(separators) > 1:
            raise ValueError(
                f"array columns with different element separators {sorted(separators)} are not "
                "supported: give them one separator"
            )
        if separators:
            options = dataclasses.replace(options, array_element_delimiter=separators.pop())
        return CsvSchema(tuple(self._columns), options, **self._flags)

    # columns ------------------------------------------------------------------------------------
    def _add(self, name: str, type_info: TypeInformation) -> CsvSchemaBuilder:
        if not isinstance(name, str) or not name:
            raise TypeError(f"a column needs a non-empty name, got {name!r}")
        self._columns.append((name, type_info))
        return self

    def add_array_column(
        self, name: str, separator: str = ";", element_type: Any = None
    ) -> CsvSchemaBuilder:
        """A column of elements joined by `separator`, of `element_type` (STRING by default)."""
        self._array_separators.append(separator)
        element = _type(element_type, Types.STRING(), "add_array_column(element_type=...)")
        return self._add(name, Types.LIST(element))

    def add_boolean_column(self, name: str) -> CsvSchemaBuilder:
        return self._add(name, Types.BOOLEAN())

    def add_number_column(self, name: str, number_type: Any = None) -> CsvSchemaBuilder:
        """A number column of `number_type` (LONG, PyFlink's BIGINT, by default)."""
        return self._add(name, _type(number_type, Types.LONG(), "add_number_column"))

    def add_string_column(self, name: str) -> CsvSchemaBuilder:
        return self._add(name, Types.STRING())

    def add_columns_from(self, schema: CsvSchema) -> CsvSchemaBuilder:
        for name, type_info in schema.columns:
            self._add(name, type_info)
        return self

    def clear_columns(self) -> CsvSchemaBuilder:
        self._columns.clear()
        self._array_separators.clear()
        return self

    def size(self) -> int:
        return len(self._columns)

    def __len__(self) -> int:
        return self.size()

    # dialect ------------------------------------------------------------------------------------
    def set_allow_comments(self, allow: bool = True) -> CsvSchemaBuilder:
        return self._set(allow_comments=bool(allow))

    def set_array_element_separator(self, separator: str) -> CsvSchemaBuilder:
        return self._set(array_element_delimiter=separator)

    def set_column_separator(self, char: str) -> CsvSchemaBuilder:
        return self._set(field_delimiter=char)

    def disable_escape_char(self) -> CsvSchemaBuilder:
        return self._set(escape_character=None)

    def set_escape_char(self, char: str) -> CsvSchemaBuilder:
        return self._set(escape_character=char)

    def set_line_separator(self, separator: str) -> CsvSchemaBuilder:
        """`\\n` or `\\r\\n` (files are read line by line; both endings are understood)."""
        if separator not in ("\n", "\r\n"):
            raise ValueError(f"CSV files are read by lines: \\n or \\r\\n, got {separator!r}")
        return self._set(line_delimiter=separator)

    def set_null_value(self, null_value: str) -> CsvSchemaBuilder:
        return self._set(null_literal=null_value)

    def disable_quote_char(self) -> CsvSchemaBuilder:
        return self._set(quote_character=None)

    def set_quote_char(self, char: str) -> CsvSchemaBuilder:
        return self._set(quote_character=char)

    # the first line ---------------------------------------------------------------------------
    def set_skip_first_data_row(self, skip: bool = True) -> CsvSchemaBuilder:
        self._flags["skip_first_data_row"] = bool(skip)
        return self

    def set_strict_headers(self, strict: bool = True) -> CsvSchemaBuilder:
        self._flags["strict_headers"] = bool(strict)
        return self

    def set_use_header(self, use: bool = True) -> CsvSchemaBuilder:
        self._flags["use_header"] = bool(use)
        return self
