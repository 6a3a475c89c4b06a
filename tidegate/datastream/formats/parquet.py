"""PyFlink's `pyflink.datastream.formats.parquet` (implemented with pyarrow in
tidegate/connectors/parquet_format.py and tidegate/formats/arrow_row.py)."""

from tidegate.connectors.parquet_format import ParquetBulkWriters, ParquetColumnarRowInputFormat

__all__ = ["ParquetBulkWriters", "ParquetColumnarRowInputFormat"]
