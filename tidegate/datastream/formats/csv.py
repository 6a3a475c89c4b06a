"""PyFlink's `pyflink.datastream.formats.csv` (implemented in tidegate/formats/csv_row.py)."""

from tidegate.formats.csv_schemas import CsvRowDeserializationSchema, CsvRowSerializationSchema

__all__ = ["CsvRowDeserializationSchema", "CsvRowSerializationSchema"]
