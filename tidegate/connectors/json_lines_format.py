"""JSON lines files (one JSON object per line) read by a FileSource as Rows, a tidegate
addition in PyFlink's style (PyFlink has no JSON file format):

    schema = JsonRowDeserializationSchema.builder().type_info(row_type).build()
    source = FileSource.for_record_stream_format(JsonLinesFormat.for_schema(schema), path).build()

Each line is read by the schema (tidegate/formats/json_row.py), so the stream is typed with its
row type; blank lines are skipped. The byte offset of the next line is the checkpointed
position, as for text lines. A line the schema cannot read fails the job naming the file and
line (with `ignore_parse_errors` it is skipped); to route such lines to a side output instead,
read text lines and parse them with `DeserializeOrDeadLetter` (docs/formats.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import IO, Any

from tidegate.common.typeinfo import TypeInformation
from tidegate.connectors.file_source import StreamFormat, TextLineFormat
from tidegate.formats.base import FormatError
from tidegate.formats.json_schemas import JsonRowDeserializationSchema

__all__ = ["JsonLinesFormat"]


@dataclass(frozen=True)
class JsonLinesFormat(StreamFormat):
    """Reads UTF-8 JSON lines into Rows with `schema`; see the module."""

    schema: JsonRowDeserializationSchema
    _lines: TextLineFormat = field(default=TextLineFormat("UTF-8"), repr=False, compare=False)

    @staticmethod
    def for_schema(schema: JsonRowDeserializationSchema) -> JsonLinesFormat:
        if not isinstance(schema, JsonRowDeserializationSchema):
            raise TypeError(
                f"JsonLinesFormat.for_schema takes a JsonRowDeserializationSchema, got {schema!r}"
            )
        return JsonLinesFormat(schema)

    def get_produced_type(self) -> TypeInformation:
        return self.schema.get_produced_type()

    def __reduce__(self) -> tuple[Any, ...]:
        return JsonLinesFormat, (self.schema,)

    def read_batch(
        self, stream: IO[bytes], max_records: int, where: str = "?", first_line: int = 0
    ) -> tuple[list[Any], int, int, bool]:
        lines, consumed, eof = self._lines.read_lines(stream, max_records, where, first_line)
        deserialize = self.schema.deserialize
        rows = []
        for number, line in enumerate(lines, start=first_line + 1):
            if not line or line.isspace():
                continue
            try:
                row = deserialize(line)
            except FormatError as e:
                raise ValueError(f"{where}: line {number}: {e}") from None
            if row is not None:
                rows.append(row)
        return rows, consumed, len(lines), eof
