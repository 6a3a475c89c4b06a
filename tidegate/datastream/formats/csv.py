"""PyFlink's `pyflink.datastream.formats.csv` (implemented in tidegate/formats/csv_row.py,
csv_file_schema.py and tidegate/connectors/csv_reader_format.py)."""

from tidegate.connectors.csv_reader_format import CsvReaderFormat
from tidegate.formats.csv_file_schema import CsvSchema, CsvSchemaBuilder
from tidegate.formats.csv_schemas import CsvRowDeserializationSchema, CsvRowSerializationSchema

__all__ = [
    "CsvReaderFormat",
    "CsvRowDeserializationSchema",
    "CsvRowSerializationSchema",
    "CsvSchema",
    "CsvSchemaBuilder",
]
