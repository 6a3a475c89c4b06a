"""The Apache Iceberg sink at the path PyFlink would give it (PyFlink has no Iceberg
DataStream connector: tidegate's own, on pyiceberg)."""

from tidegate.connectors.iceberg import IcebergSink, IcebergTableError

__all__ = ["IcebergSink", "IcebergTableError"]
