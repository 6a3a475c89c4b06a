"""PyFlink's `pyflink.datastream.formats.json` (implemented in tidegate/formats/json_row.py),
and tidegate's `JsonLinesFormat` for FileSource (tidegate/connectors/json_lines_format.py)."""

from tidegate.connectors.json_lines_format import JsonLinesFormat
from tidegate.formats.json_schemas import JsonRowDeserializationSchema, JsonRowSerializationSchema

__all__ = ["JsonLinesFormat", "JsonRowDeserializationSchema", "JsonRowSerializationSchema"]
