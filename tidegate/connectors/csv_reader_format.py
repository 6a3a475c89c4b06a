"""PyFlink's `CsvReaderFormat`: CSV files read by a FileSource as Rows of a `CsvSchema`.

    schema = (CsvSchema.builder().add_number_column("id", number_type=Types.INT())
              .add_string_column("name").set_use_header().build())
    source = FileSource.for_record_stream_format(CsvReaderFormat.for_schema(schema), path).build()

Each line is one record (a quoted field cannot span lines); its records are Rows of
`schema.row_type()`, the type `from_source` gives the stream (`get_produced_type`).
The byte offset of the next line is the checkpointed position, as for text lines. A line that
does not fit the schema fails the job naming the file and line; to route such lines to a side
output instead, read text lines and parse them with `DeserializeOrDeadLetter`
(docs/formats.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidegate.common.typeinfo import RowTypeInfo
from tidegate.connectors.file_source import LineRecordFormat
from tidegate.formats.base import FormatError
from tidegate.formats.csv_file_schema import CsvSchema
from tidegate.formats.csv_row import csv_reader

__all__ = ["CsvReaderFormat"]


@dataclass(frozen=True)
class CsvReaderFormat(LineRecordFormat):
    """Reads UTF-8 CSV lines into Rows of `schema`; see the module."""

    schema: CsvSchema

    @staticmethod
    def for_schema(schema: CsvSchema) -> CsvReaderFormat:
        if not isinstance(schema, CsvSchema):
            raise TypeError(f"CsvReaderFormat.for_schema takes a CsvSchema, got {schema!r}")
        if not schema.columns:
            raise ValueError("the CsvSchema has no columns")
        return CsvReaderFormat(schema)

    def get_produced_type(self) -> RowTypeInfo:
        return self.schema.row_type()

    def line_parser(self) -> Callable[[str, int], Any]:
        schema = self.schema
        read = _reader(schema)
        first_is_header = schema.use_header or schema.skip_first_data_row

        def parse(line: str, number: int) -> Any:
            if number == 1 and first_is_header:
                _check_header(schema, line)
                return None
            return read(line)

        return parse


@functools.lru_cache(maxsize=64)
def _reader(schema: CsvSchema) -> Any:
    """The compiled line reader of `schema` (compiled once per schema and process, not per
    batch; the format itself stays a plain, picklable description)."""
    return csv_reader(schema.row_type(), schema.options, False)


def _check_header(schema: CsvSchema, line: str) -> None:
    if not (schema.use_header and schema.strict_headers):
        return
    names = [n for n, _ in schema.columns]
    header = line.split(schema.options.field_delimiter)
    quote = schema.options.quote_character
    if quote:
        header = [h.strip(quote) for h in header]
    if header != names:
        raise FormatError("CSV", f"the header {header} is not the schema's {names}", line)
