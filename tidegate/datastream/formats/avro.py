"""PyFlink's `pyflink.datastream.formats.avro` (implemented in tidegate/formats/avro_row.py;
needs the `avro` extra: `pip install 'tidegate[avro]'`)."""

from tidegate.formats.avro_schemas import AvroRowDeserializationSchema, AvroRowSerializationSchema

__all__ = ["AvroRowDeserializationSchema", "AvroRowSerializationSchema"]
