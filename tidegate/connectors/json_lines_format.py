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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidegate.common.typeinfo import TypeInformation
from tidegate.connectors.file_source import LineRecordFormat
from tidegate.formats.json_schemas import JsonRowDeserializationSchema

__all__ = ["JsonLinesFormat"]


@dataclass(frozen=True)
class JsonLinesFormat(LineRecordFormat):
    """Reads UTF-8 JSON lines into Rows with `schema`; see the module."""

    schema: JsonRowDeserializationSchema

    @staticmethod
    def for_schema(schema: JsonRowDeserializationSchema) -> JsonLinesFormat:
        if not isinstance(schema, JsonRowDeserializationSchema):
            raise TypeError(
                f"JsonLinesFormat.for_schema takes a JsonRowDeserializationSchema, got {schema!r}"
            )
        return JsonLinesFormat(schema)

    def get_produced_type(self) -> TypeInformation:
        return self.schema.get_produced_type()

    def line_parser(self) -> Callable[[str, int], Any]:
        deserialize = self.schema.deserialize

        def parse(line: str, number: int) -> Any:
            return None if not line or line.isspace() else deserialize(line)

        return parse
