"""PyFlink's `pyflink.datastream.formats.json` (implemented in tidegate/formats/json_row.py)."""

from tidegate.formats.json_schemas import JsonRowDeserializationSchema, JsonRowSerializationSchema

__all__ = ["JsonRowDeserializationSchema", "JsonRowSerializationSchema"]
