"""PyFlink's `CsvRowSerializationSchema` and `CsvRowDeserializationSchema` with their builders
(`pyflink.datastream.formats.csv`); the conversions are in csv_row.py."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from tidegate.common.serialization import DeserializationSchema, SerializationSchema
from tidegate.common.typeinfo import RowTypeInfo, TypeInformation
from tidegate.formats.base import RowSchema, row_type
from tidegate.formats.csv_row import CsvOptions, csv_reader, csv_writer

__all__ = ["CsvOptions", "CsvRowDeserializationSchema", "CsvRowSerializationSchema"]


class CsvRowDeserializationSchema(RowSchema, DeserializationSchema):
    """Reads one CSV line (bytes or str, its line ending optional) into a Row of `type_info`.

    A line that does not fit raises FormatError naming the column and field, with an excerpt;
    `ignore_parse_errors` gives Flink's leniency instead (bad columns None, short lines padded,
    unsplittable lines skipped: csv_row.py). Comment lines (with `allow_comments`) and empty
    lines give None, which sources skip. Build it like PyFlink:
    `CsvRowDeserializationSchema.Builder(type_info).set_field_delimiter("|").build()`.
    """

    _PARAMS: ClassVar[tuple[str, ...]] = ("type_info", "options", "ignore_parse_errors")

    def __init__(
        self,
        type_info: RowTypeInfo,
        options: CsvOptions = CsvOptions(),
        ignore_parse_errors: bool = False,
    ) -> None:
        self.type_info = row_type(type_info, "CsvRowDeserializationSchema")
        self.options = options
        self.ignore_parse_errors = ignore_parse_errors
        self._read = csv_reader(self.type_info, options, ignore_parse_errors)

    def deserialize(self, message: bytes | str | None) -> Any:
        return None if message is None else self._read(message)

    def get_produced_type(self) -> TypeInformation:
        """The type of the records it produces (Flink's `getProducedType`)."""
        return self.type_info

    class Builder:
        """PyFlink's builder, created with the row type."""

        def __init__(self, type_info: TypeInformation) -> None:
            if type_info is None:
                raise TypeError("Type information must not be None")
            self._type_info = type_info
            self._options = CsvOptions()
            self._ignore_parse_errors = False

        def _set(self, **changes: Any) -> CsvRowDeserializationSchema.Builder:
            self._options = dataclasses.replace(self._options, **changes)
            return self

        def set_field_delimiter(self, delimiter: str) -> CsvRowDeserializationSchema.Builder:
            return self._set(field_delimiter=delimiter)

        def set_allow_comments(self, allow_comments: bool) -> CsvRowDeserializationSchema.Builder:
            """Lines starting with `#` are skipped."""
            return self._set(allow_comments=bool(allow_comments))

        def set_array_element_delimiter(
            self, delimiter: str
        ) -> CsvRowDeserializationSchema.Builder:
            return self._set(array_element_delimiter=delimiter)

        def set_quote_character(self, c: str) -> CsvRowDeserializationSchema.Builder:
            return self._set(quote_character=c)

        def set_escape_character(self, c: str) -> CsvRowDeserializationSchema.Builder:
            return self._set(escape_character=c)

        def set_null_literal(self, null_literal: str) -> CsvRowDeserializationSchema.Builder:
            """The text that reads as None (e.g. `null`, or `""` for empty STRING columns)."""
            return self._set(null_literal=null_literal)

        def set_ignore_parse_errors(
            self, ignore_parse_errors: bool
        ) -> CsvRowDeserializationSchema.Builder:
            self._ignore_parse_errors = bool(ignore_parse_errors)
            return self

        def build(self) -> CsvRowDeserializationSchema:
            return CsvRowDeserializationSchema(
                self._type_info,  # type: ignore[arg-type]
                self._options,
                self._ignore_parse_errors,
            )


class CsvRowSerializationSchema(RowSchema, SerializationSchema):
    """Writes a Row (or tuple, list, dict) of `type_info` as one CSV line ending in the line
    delimiter (`\\n` by default), UTF-8; None as the null literal (empty by default). Build it
    like PyFlink: `CsvRowSerializationSchema.Builder(type_info).build()`."""

    _PARAMS: ClassVar[tuple[str, ...]] = ("type_info", "options")

    def __init__(self, type_info: RowTypeInfo, options: CsvOptions = CsvOptions()) -> None:
        self.type_info = row_type(type_info, "CsvRowSerializationSchema")
        self.options = options
        self._write = csv_writer(self.type_info, options)

    def serialize(self, element: Any) -> bytes:
        return self._write(element)

    class Builder:
        """PyFlink's builder, created with the row type."""

        def __init__(self, type_info: TypeInformation) -> None:
            if type_info is None:
                raise TypeError("Type information must not be None")
            self._type_info = type_info
            self._options = CsvOptions()

        def _set(self, **changes: Any) -> CsvRowSerializationSchema.Builder:
            self._options = dataclasses.replace(self._options, **changes)
            return self

        def set_field_delimiter(self, c: str) -> CsvRowSerializationSchema.Builder:
            return self._set(field_delimiter=c)

        def set_line_delimiter(self, delimiter: str) -> CsvRowSerializationSchema.Builder:
            """`\\n` (the default), `\\r`, `\\r\\n` or empty."""
            return self._set(line_delimiter=delimiter)

        def set_array_element_delimiter(self, delimiter: str) -> CsvRowSerializationSchema.Builder:
            return self._set(array_element_delimiter=delimiter)

        def disable_quote_character(self) -> CsvRowSerializationSchema.Builder:
            """Never quote (a value holding the delimiter then needs an escape character)."""
            return self._set(quote_character=None)

        def set_quote_character(self, c: str) -> CsvRowSerializationSchema.Builder:
            return self._set(quote_character=c)

        def set_escape_character(self, c: str) -> CsvRowSerializationSchema.Builder:
            return self._set(escape_character=c)

        def set_null_literal(self, s: str) -> CsvRowSerializationSchema.Builder:
            return self._set(null_literal=s)

        def build(self) -> CsvRowSerializationSchema:
            return CsvRowSerializationSchema(self._type_info, self._options)  # type: ignore[arg-type]
